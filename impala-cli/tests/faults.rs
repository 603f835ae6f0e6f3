//! Fault tolerance end to end: env runners whose envs crash (`CartPoleCrashing-v1`) are
//! restarted, counted and logged, and training still reaches its goal.

use impala::{read_result_lines, RESULT_FILE};

use crate::common::{impala, return_mean, runner_count, Run, TestResult};

#[test]
fn training_reaches_450_while_env_runners_crash_and_restart() -> TestResult {
    let dir = tempfile::tempdir()?;
    // CartPole-v1's tuned example config (`--env` picks it for envs without their own): one
    // runner with 8 envs, so a crash every 1 / (8 * 0.0005) = 250 runner steps on average.
    let args = [
        "train",
        "--env",
        "CartPoleCrashing-v1",
        "--set",
        "env_config.p_crash=0.0005",
        "--stop-reward",
        "450",
        "--stop-time",
        "120",
        "--seed",
        "0",
        "--run-dir",
        "run",
    ];
    let run = impala(dir.path(), &args)?;
    assert!(run.success, "stdout: {}\nstderr: {}", run.stdout, run.stderr);
    let stopped = run.stdout.lines().find(|l| l.starts_with("stopped: ")).unwrap_or_default();
    assert!(stopped.contains("episode_return_mean"), "{}", run.stdout);

    let results = read_result_lines(&dir.path().join("run").join(RESULT_FILE))?;
    let (_, last) = results.last().ok_or("no result lines")?;
    let failures = runner_count(last, "num_env_runner_failures")?;
    let restarts = runner_count(last, "num_env_runner_restarts")?;
    assert!(failures > 0.0 && restarts > 0.0, "{failures} failures, {restarts} restarts");
    // Every failure but possibly the newest one is restarted by the time of a result.
    assert!(restarts <= failures && failures <= restarts + 1.0, "{failures} vs {restarts}");
    let dropped = runner_count(last, "num_env_steps_dropped")?;
    assert!(dropped >= 0.0);
    let mean = return_mean(last).ok_or("no episode_return_mean")?;
    assert!(mean >= 450.0, "episode_return_mean {mean}");

    // Nothing counted twice: the lifetime count is the sum of the per-iteration counts.
    let per_iteration: u64 = results
        .iter()
        .map(|(_, r)| r["num_env_steps_sampled_this_iter"].as_u64().ok_or("no this_iter count"))
        .sum::<Result<u64, _>>()?;
    let lifetime = last["num_env_steps_sampled"].as_u64().ok_or("no num_env_steps_sampled")?;
    assert_eq!(per_iteration, lifetime);

    // Each failure is a warning on stderr (restarts are logged at INFO), and nothing else is.
    let failure_lines: Vec<&str> =
        run.stderr.lines().filter(|l| l.contains("env runner failed")).collect();
    assert!(failure_lines.len() as f64 >= failures, "{failures} failures: {}", run.stderr);
    for line in &failure_lines {
        assert!(line.starts_with("warning: ") && line.contains("simulated crash"), "{line}");
    }
    for line in run.stderr.lines() {
        assert!(line.starts_with("warning: "), "unexpected stderr line `{line}`");
    }
    Ok(())
}

/// `impala train` in `dir/run` (seed 1) on CartPoleCrashing-v1 whose every env runner
/// incarnation fails at step `crash_after` of its envs' lives, with `more` arguments.
fn crashing_run(
    dir: &std::path::Path,
    crash_after: u64,
    more: &[&str],
) -> Result<Run, std::io::Error> {
    let crash = format!("env_config.crash_after_n_steps={crash_after}");
    let mut args = vec!["train", "--env", "CartPoleCrashing-v1", "--set", "env_config.p_crash=0"];
    args.extend(["--set", &crash, "--seed", "1", "--run-dir", "run"]);
    args.extend(more);
    impala(dir, &args)
}

#[test]
fn log_level_info_shows_the_restarts() -> TestResult {
    let dir = tempfile::tempdir()?;
    let more = ["--set", "log_level=INFO", "--set", "min_time_s_per_iteration=0.2"];
    let run = crashing_run(dir.path(), 40, &[&more[..], &["--stop-iters", "2"]].concat())?;
    assert!(run.success, "stdout: {}\nstderr: {}", run.stdout, run.stderr);
    let count = |needle: &str, level: &str| {
        run.stderr.lines().filter(|l| l.starts_with(level) && l.contains(needle)).count()
    };
    let (failed, restarted) =
        (count("env runner failed", "warning: "), count("env runner restarted", "info: "));
    assert!(failed >= 1 && restarted >= 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("crash_after_n_steps") && run.stderr.contains("step 40 "),
        "{}",
        run.stderr
    );
    let results = read_result_lines(&dir.path().join("run").join(RESULT_FILE))?;
    let (_, last) = results.last().ok_or("no result lines")?;
    assert!(runner_count(last, "num_env_runner_restarts")? >= 1.0);
    Ok(())
}

#[test]
fn a_run_that_ends_on_a_failed_runner_is_saved_and_resumes() -> TestResult {
    let dir = tempfile::tempdir()?;
    // The runner fails at the 5000th step of its envs' lives (a few iterations in), restarts off.
    let more =
        ["--set", "restart_failed_env_runners=false", "--set", "min_time_s_per_iteration=0.05"];
    let run = crashing_run(dir.path(), 5000, &[&more[..], &["--stop-iters", "1000"]].concat())?;
    run.assert_one_line_error(&["env runner", "crash_after_n_steps", "can be resumed from it"]);
    let line = run.error_lines()[0];
    let (_, path) = line.split_once("the run was saved to `").ok_or("no checkpoint named")?;
    let path = path.split('`').next().ok_or("no path")?;
    assert!(path.starts_with("run/checkpoint_"), "{line}");
    let (state, _) = impala::checkpoint::read_checkpoint(&dir.path().join(path))?;
    assert!(state.training_iteration >= 1, "{line}");
    // --resume continues from it, one more iteration (with envs that no longer crash).
    let next = (state.training_iteration + 1).to_string();
    let resumed = impala(
        dir.path(),
        &[
            "train",
            "--resume",
            "run",
            "--stop-iters",
            &next,
            "--set",
            "env_config.crash_after_n_steps=100000000",
        ],
    )?;
    assert!(resumed.success, "{}", resumed.stderr);
    let results = read_result_lines(&dir.path().join("run").join(RESULT_FILE))?;
    let (_, last) = results.last().ok_or("no result lines")?;
    assert_eq!(last["training_iteration"], serde_json::json!(state.training_iteration + 1));
    Ok(())
}
