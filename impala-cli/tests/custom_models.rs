//! `model.custom_model` through the `impala` command: a TorchScript module defined in the
//! tests trains CartPole-v1, models that cannot be built are one-line errors at start-up, and
//! checkpoints carry the module, so they evaluate and resume without the original file.

use std::fs;
use std::path::Path;

use crate::common::{impala, scripted_module, Run, TestResult};

const FAST: [&str; 7] = [
    "--set",
    "min_time_s_per_iteration=0.2",
    "--set",
    "num_envs_per_env_runner=4",
    "--seed",
    "3",
    "--quiet",
];

/// `impala train --resume RUN --stop-iters ITERS` in `cwd`, with `extra` arguments.
fn resume(cwd: &Path, run: &str, iters: &str, extra: &[&str]) -> std::io::Result<Run> {
    let mut args = vec!["train", "--resume", run, "--stop-iters", iters];
    args.extend(extra);
    args.extend(FAST);
    impala(cwd, &args)
}

#[test]
fn checkpoints_carry_the_torchscript_module_to_evaluate_and_resume_without_the_file() -> TestResult
{
    let dir = tempfile::tempdir()?;
    let models = dir.path().join("models");
    fs::create_dir(&models)?;
    let module = scripted_module(&models, "residual_mlp")?;
    let model = format!("model.custom_model={}", module.display());
    let mut args = vec!["train", "--run-dir", "run", "--set", &model, "--stop-iters", "2"];
    args.extend(["--checkpoint-every", "1"]);
    args.extend(FAST);
    let run = impala(dir.path(), &args)?;
    assert!(run.success, "{}\n{}", run.stdout, run.stderr);
    let copy = |iteration: u64| {
        dir.path().join(format!("run/checkpoint_{iteration:06}/learner/custom_model.pt"))
    };
    let config = fs::read_to_string(dir.path().join("run/checkpoint_000002/config.json"))?;
    assert!(config.contains("\"custom_model\": \"learner/custom_model.pt\""), "{config}");
    assert_eq!(fs::read(copy(2))?, fs::read(&module)?);
    let run_dir = dir.path().join("run").to_string_lossy().into_owned();

    // Resumed with another module, the checkpoint is refused; with the same module from
    // another file, it resumes.
    let other = scripted_module(&models, "memory_gru")?;
    let other = format!("model.custom_model={}", other.display());
    let run = resume(dir.path(), &run_dir, "3", &["--set", &other])?;
    run.assert_one_line_error(&["cannot be used here", "TorchScript module", "SHA-256"]);
    let run = resume(dir.path(), &run_dir, "3", &["--set", &model])?;
    assert!(run.success, "{}\n{}", run.stdout, run.stderr);

    // Without the original, from another folder, in fresh processes.
    fs::remove_dir_all(&models)?;
    let elsewhere = tempfile::tempdir()?;
    let evaluate = ["evaluate", "--checkpoint", &run_dir, "--episodes", "1"];
    let run = impala(elsewhere.path(), &evaluate)?;
    assert!(run.success && run.stdout.contains("episode_return_mean"), "{}", run.stderr);
    let run = resume(elsewhere.path(), &run_dir, "4", &[])?;
    assert!(run.success, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(fs::read(copy(4))?, fs::read(copy(2))?);

    // A module copy that is not the one the checkpoint was saved with is refused.
    let mut bytes = fs::read(copy(4))?;
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    fs::write(copy(4), &bytes)?;
    let damaged = ["corrupt checkpoint", "`learner/custom_model.pt`", "SHA-256"];
    impala(elsewhere.path(), &evaluate)?.assert_one_line_error(&damaged);
    resume(elsewhere.path(), &run_dir, "5", &[])?.assert_one_line_error(&damaged);
    fs::remove_file(copy(4))?;
    let run = impala(elsewhere.path(), &evaluate)?;
    run.assert_one_line_error(&["corrupt checkpoint", "`learner/custom_model.pt` is missing"]);
    Ok(())
}

/// The residual MLP with the tuned CartPole example (RMSProp, decaying lr and entropy bonus) at
/// a sixth of its peak lr reaches 450 and stays solved, also when another process takes one of
/// the two cores; with RLlib's tuned settings (Adam, no entropy bonus) it, and the built-in MLP
/// too, fall back to about 9. At the example's peak lr of 3e-4 its LayerNorm torso can fall
/// when 450 comes before lr decays, as it does under load (docs/LEARNING.md).
#[test]
fn a_scripted_residual_mlp_trains_cartpole_to_450_and_stays_there() -> TestResult {
    let dir = tempfile::tempdir()?;
    let model =
        format!("model.custom_model={}", scripted_module(dir.path(), "residual_mlp")?.display());
    let args = [
        "bench-cartpole",
        "--set",
        &model,
        "--set",
        "lr=0.00005",
        "--set",
        "lr_schedule=[[0, 0.00005], [300000, 0.00005], [1000000, 0.00001]]",
        "--seeds",
        "1",
        "--stop-reward",
        "450",
        "--stop-time",
        "150",
        "--stay-s",
        "30",
        "--stay-min",
        "400",
        "--eval-episodes",
        "0",
    ];
    let run = impala(dir.path(), &args)?;
    assert!(run.success, "{}\n{}", run.stdout, run.stderr);
    let summary: serde_json::Value =
        serde_json::from_str(run.stdout.lines().last().ok_or("no summary")?)?;
    assert_eq!(summary["seeds_stayed"], 1, "{}", run.stdout);
    Ok(())
}

#[test]
fn models_that_cannot_be_built_are_one_line_errors() -> TestResult {
    let dir = tempfile::tempdir()?;
    let broken =
        format!("model.custom_model={}", scripted_module(dir.path(), "broken_width")?.display());
    let not_script = format!(
        "model.custom_model={}",
        scripted_module(dir.path(), "broken_not_torchscript")?.display()
    );
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
