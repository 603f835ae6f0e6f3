//! `model.custom_model` through the `impala` command: a TorchScript module defined in the
//! tests trains CartPole-v1, and models that cannot be built are one-line errors at start-up.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use impala::{read_result_lines, RESULT_FILE};

use crate::common::{impala, return_mean, TestResult};

/// The modules `impala-learner/tests/fixtures/scripted_models.py` writes (once per run).
fn module(name: &str) -> Result<String, String> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let dir = std::env::temp_dir().join(format!("impala-cli-models-{}", std::process::id()));
        // The interpreter `./dev setup` made (it has torch), unless IMPALA_PYTHON names one.
        let python = std::env::var_os("IMPALA_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join(".venv/bin/python"));
        let out = Command::new(&python)
            .arg(root.join("impala-learner/tests/fixtures/scripted_models.py"))
            .arg(&dir)
            .output()
            .map_err(|e| format!("{}: {e}", python.display()))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(dir)
    });
    let dir = dir.as_ref().map_err(Clone::clone)?;
    Ok(dir.join(format!("{name}.pt")).display().to_string())
}

#[test]
fn a_scripted_residual_mlp_trains_cartpole_to_450() -> TestResult {
    let dir = tempfile::tempdir()?;
    let model = format!("model.custom_model={}", module("residual_mlp")?);
    let args = [
        "train",
        "--set",
        &model,
        "--seed",
        "1",
        "--stop-reward",
        "450",
        "--stop-time",
        "150",
        "--run-dir",
        "run",
        "--quiet",
    ];
    let run = impala(dir.path(), &args)?;
    assert!(run.success, "{}", run.stderr);
    let results = read_result_lines(&dir.path().join("run").join(RESULT_FILE))?;
    let (_, last) = results.last().ok_or("no results")?;
    assert!(return_mean(last).is_some_and(|r| r >= 450.0), "{last}");
    Ok(())
}

#[test]
fn models_that_cannot_be_built_are_one_line_errors() -> TestResult {
    let dir = tempfile::tempdir()?;
    let broken = format!("model.custom_model={}", module("broken_width")?);
    let not_script = format!("model.custom_model={}", module("broken_not_torchscript")?);
    for (set, needles) in [
        (broken.as_str(), &["model", "logits", "2 logits"][..]),
        (not_script.as_str(), &["cannot be loaded as TorchScript"][..]),
        (
            "model.custom_model=impala_resnett",
            &["model.custom_model", "did you mean \"impala_resnet\""][..],
        ),
        (
            "model.custom_model=no/such/model.pt",
            &["model.custom_model", "no file at that path"][..],
        ),
        // The ResNet needs image observations; CartPole has 4 numbers.
        ("model.custom_model=impala_resnet", &["impala_resnet", "image observations"][..]),
        (
            "model.custom_model_config={channels=[8]}",
            &["model.custom_model_config.channels", "model.custom_model"][..],
        ),
    ] {
        let run = impala(dir.path(), &["train", "--set", set, "--stop-iters", "1"])?;
        run.assert_one_line_error(needles);
    }
    let run = impala(
        dir.path(),
        &[
            "train",
            "--set",
            "model.custom_model=impala_resnet",
            "--set",
            "model.custom_model_config={chanels=[8]}",
            "--stop-iters",
            "1",
        ],
    )?;
    run.assert_one_line_error(&["model.custom_model_config.chanels", "did you mean `channels`"]);
    Ok(())
}
