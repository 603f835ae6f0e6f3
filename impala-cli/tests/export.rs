//! `impala export`: a checkpoint's policy as a TorchScript module plain PyTorch runs, for the
//! catalog's models and a TorchScript custom model; bad input as one-line errors.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{impala, scripted_module, TestResult};

const FAST: [&str; 6] =
    ["--set", "min_time_s_per_iteration=0.2", "--set", "num_envs_per_env_runner=4", "--seed", "3"];

/// Trains `run` for one iteration in `dir` with `extra` options and exports it to `out`;
/// returns what export printed.
fn train_and_export(
    dir: &Path,
    extra: &[&str],
    out: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    let mut args = vec!["train", "--run-dir", "run", "--stop-iters", "1"];
    args.extend(extra);
    args.extend(FAST);
    let run = impala(dir, &args)?;
    assert!(run.success, "{}\n{}", run.stdout, run.stderr);
    let export = impala(dir, &["export", "run", out, "--format", "torchscript"])?;
    assert!(export.success, "{}\n{}", export.stdout, export.stderr);
    Ok(export.stdout)
}

/// The shapes of what `module`'s forward returns in plain PyTorch for a batch of 3 zero
/// observations of `obs_shape` (and a zero state of `state_dim` when given).
fn torch_output_shapes(
    module: &Path,
    obs_shape: &str,
    state_dim: Option<usize>,
) -> Result<String, Box<dyn std::error::Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = std::env::var_os("IMPALA_PYTHON")
        .map_or_else(|| root.join(".venv/bin/python"), PathBuf::from);
    let state = state_dim.map_or(String::new(), |s| format!(", torch.zeros(3, {s})"));
    let script = format!(
        "import torch\nm = torch.jit.load({:?})\nout = m(torch.zeros(3, {obs_shape}){state})\n\
         print([list(o.shape) for o in out])",
        module.display().to_string()
    );
    let out = Command::new(&python).args(["-c", &script]).output()?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned().into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

#[test]
fn a_checkpoint_exports_a_module_plain_pytorch_runs() -> TestResult {
    let dir = tempfile::tempdir()?;
    let printed =
        train_and_export(dir.path(), &["--set", "normalize_observations=true"], "policy.pt")?;
    assert!(
        printed.contains("policy.pt: forward(obs [B, 4] float32) -> (logits [B, 2], value [B])"),
        "{printed}"
    );
    assert_eq!(torch_output_shapes(&dir.path().join("policy.pt"), "4", None)?, "[[3, 2], [3]]");
    Ok(())
}

#[test]
fn recurrent_and_torchscript_policies_export_with_their_state() -> TestResult {
    let dir = tempfile::tempdir()?;
    let lstm = ["--set", "model.use_lstm=true", "--set", "model.lstm_cell_size=8"];
    let printed = train_and_export(dir.path(), &lstm, "lstm.pt")?;
    assert!(
        printed.contains("state [B, 16]) -> (logits [B, 2], value [B], state [B, 16])"),
        "{printed}"
    );
    let shapes = torch_output_shapes(&dir.path().join("lstm.pt"), "4", Some(16))?;
    assert_eq!(shapes, "[[3, 2], [3], [3, 16]]");

    let scripted = tempfile::tempdir()?;
    let module = scripted_module(scripted.path(), "residual_mlp")?;
    let model = format!("model.custom_model={}", module.display());
    train_and_export(scripted.path(), &["--set", &model], "exported.pt")?;
    let shapes = torch_output_shapes(&scripted.path().join("exported.pt"), "4", None)?;
    assert_eq!(shapes, "[[3, 2], [3]]");
    Ok(())
}

#[test]
fn export_errors_are_one_line_and_name_the_fix() -> TestResult {
    let dir = tempfile::tempdir()?;
    let run = impala(dir.path(), &["export", "nowhere", "policy.pt"])?;
    run.assert_one_line_error(&["no checkpoint found at `nowhere`"]);
    train_and_export(dir.path(), &[], "policy.pt")?;
    let run = impala(dir.path(), &["export", "run", "no/such/dir/policy.pt"])?;
    run.assert_one_line_error(&["no/such/dir/policy.pt"]);
    let run = impala(dir.path(), &["export", "run", "policy.onnx", "--format", "onnx"])?;
    assert!(!run.success && run.stderr.contains("possible values: torchscript"), "{}", run.stderr);
    Ok(())
}
