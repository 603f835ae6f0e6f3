//! A run whose model is a TorchScript module (`model.custom_model = "file.pt"`): its checkpoints
//! carry the module, so they evaluate and resume without the original file.

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
