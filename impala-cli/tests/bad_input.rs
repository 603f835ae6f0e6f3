//! Bad input: each is one error line naming the problem and the fix, a non-zero exit, and
//! nothing half-written.

use std::fs;

use crate::common::{entries, impala, TestResult};

#[test]
fn missing_config_file() -> TestResult {
    let dir = tempfile::tempdir()?;
    let run = impala(dir.path(), &["train", "nope.toml", "--run-dir", "run"])?;
    run.assert_one_line_error(&["nope.toml", "no such file", "check the path"]);
    assert!(entries(dir.path()).is_empty(), "left behind: {:?}", entries(dir.path()));
    Ok(())
}

#[test]
fn malformed_config_file_names_line_and_key() -> TestResult {
    let dir = tempfile::tempdir()?;
    fs::write(dir.path().join("bad.toml"), "lr = 0.001\nlearner_queue_size = \"big\"\n")?;
    let run = impala(dir.path(), &["train", "bad.toml", "--run-dir", "run"])?;
    run.assert_one_line_error(&["bad.toml:2", "learner_queue_size"]);
    fs::write(dir.path().join("typo.toml"), "lrr = 0.001\n")?;
    let run = impala(dir.path(), &["config", "typo.toml"])?;
    run.assert_one_line_error(&["unknown key `lrr`", "`lr`"]);
    fs::write(dir.path().join("syntax.yaml"), "lr: [0.1\n")?;
    let run = impala(dir.path(), &["train", "syntax.yaml", "--run-dir", "run"])?;
    run.assert_one_line_error(&["syntax.yaml", "yaml"]);
    assert!(!dir.path().join("run").exists());
    Ok(())
}

#[test]
fn invalid_values_are_all_listed_on_one_line() -> TestResult {
    let dir = tempfile::tempdir()?;
    let run = impala(dir.path(), &["config", "--set", "gamma=1.5", "--set", "entropy_coeff=-1"])?;
    run.assert_one_line_error(&["gamma", "entropy_coeff", "fix"]);
    Ok(())
}

#[test]
fn unknown_env_id_suggests_the_nearest() -> TestResult {
    let dir = tempfile::tempdir()?;
    let native = ["train", "--env", "CartPole-v0", "--set", "env_backend=\"native\""];
    let run = impala(dir.path(), &[&native[..], &["--run-dir", "run"]].concat())?;
    run.assert_one_line_error(&["unknown environment `CartPole-v0`", "did you mean `CartPole-v1`"]);
    // Not native: Gymnasium's registry answers, with its own suggestion.
    let run = impala(dir.path(), &["train", "--env", "Cartpole-v1", "--run-dir", "run"])?;
    run.assert_one_line_error(&["Cartpole", "Did you mean: `CartPole`"]);
    assert!(!dir.path().join("run").exists());
    Ok(())
}

#[test]
fn a_model_too_large_for_the_machine_is_an_error_not_an_abort() -> TestResult {
    let dir = tempfile::tempdir()?;
    let huge = "model.fcnet_hiddens=[100000000,100000000]";
    let run = impala(dir.path(), &["train", "--set", huge, "--run-dir", "run"])?;
    run.assert_one_line_error(&["model is too large", "[100000000, 100000000]", "fcnet_hiddens"]);
    Ok(())
}

#[test]
fn batches_too_large_for_the_machine_are_refused_with_the_arithmetic() -> TestResult {
    for (set, key) in [
        ("train_batch_size=1000000000000", "train_batch_size"),
        ("rollout_fragment_length=100000000", "rollout_fragment_length"),
    ] {
        let dir = tempfile::tempdir()?;
        let run = impala(dir.path(), &["train", "--set", set, "--run-dir", "run"])?;
        run.assert_one_line_error(&[
            "the run would hold about",
            "GiB, more than this machine",
            key,
        ]);
    }
    Ok(())
}

#[test]
fn impossible_resource_request() -> TestResult {
    let dir = tempfile::tempdir()?;
    let run = impala(dir.path(), &["train", "--set", "num_gpus=4", "--run-dir", "run"])?;
    run.assert_one_line_error(&["4 gpu", "num_gpus = 0"]);
    assert!(!dir.path().join("run").exists());
    Ok(())
}

#[test]
fn unwritable_run_folder() -> TestResult {
    let dir = tempfile::tempdir()?;
    // A folder below a regular file cannot be created, even by root.
    fs::write(dir.path().join("file"), "")?;
    let run = impala(dir.path(), &["train", "--stop-iters", "1", "--run-dir", "file/run"])?;
    run.assert_one_line_error(&["run folder `file/run` is not writable", "--run-dir"]);
    assert_eq!(entries(dir.path()), vec!["file".to_string()]);
    Ok(())
}

#[test]
fn missing_corrupt_and_incompatible_checkpoints() -> TestResult {
    let dir = tempfile::tempdir()?;
    let run = impala(dir.path(), &["train", "--resume", "nowhere"])?;
    run.assert_one_line_error(&["no checkpoint found at `nowhere`", "checkpoint_nnnnnn"]);
    let run = impala(dir.path(), &["evaluate", "--checkpoint", "nowhere"])?;
    run.assert_one_line_error(&["no checkpoint found"]);

    let ckpt = dir.path().join("run/checkpoint_000003");
    fs::create_dir_all(ckpt.join("learner"))?;
    fs::write(ckpt.join("algorithm_state.json"), "{truncated")?;
    let run = impala(dir.path(), &["train", "--resume", "run"])?;
    run.assert_one_line_error(&[
        "checkpoint_000003",
        "unreadable",
        "not valid json",
        "start a new run",
    ]);

    fs::write(
        ckpt.join("algorithm_state.json"),
        r#"{"format_version": 99, "impala_rs_version": "9.0.0"}"#,
    )?;
    let run = impala(dir.path(), &["evaluate", "--checkpoint", "run/checkpoint_000003"])?;
    run.assert_one_line_error(&["cannot be used here", "format 99", "impala-rs 9.0.0"]);
    // Evaluating is not resuming: the fix must not say --resume (it did).
    assert!(!run.stderr.contains("resume"), "{}", run.stderr);
    fs::write(ckpt.join("algorithm_state.json"), "{truncated")?;
    let run = impala(dir.path(), &["evaluate", "--checkpoint", "run"])?;
    run.assert_one_line_error(&["checkpoint_000003", "unreadable", "evaluate another"]);
    assert!(!run.stderr.contains("resume"), "{}", run.stderr);
    // Nothing was written next to the bad checkpoint.
    assert_eq!(entries(&dir.path().join("run")), vec!["checkpoint_000003".to_string()]);
    Ok(())
}

#[test]
fn seconds_no_duration_holds_are_one_line_errors_not_panics() -> TestResult {
    let dir = tempfile::tempdir()?;
    // Before: rc 101 and a backtrace ("cannot convert float seconds to Duration").
    for key in ["sample_timeout_s", "min_time_s_per_iteration"] {
        let set = format!("{key}=1e30");
        let run = impala(dir.path(), &["train", "--set", &set, "--run-dir", "run"])?;
        run.assert_one_line_error(&[key, "at most 1e9"]);
    }
    let runner = ["env-runner", "--connect", "127.0.0.1:1", "--token-file", "none"];
    let run = impala(dir.path(), &[&runner[..], &["--reconnect-timeout-s", "1e30"]].concat())?;
    assert!(!run.success && !run.stderr.contains("panicked"), "{}", run.stderr);
    assert!(run.stderr.contains("--reconnect-timeout-s"), "{}", run.stderr);
    assert!(!dir.path().join("run").exists());
    // `impala config` shows the waits validation made.
    let run = impala(dir.path(), &["config", "--set", "sample_timeout_s=2.5"])?;
    assert!(run.stdout.contains("# waits: sample_timeout_s 2.5s"), "{}", run.stdout);
    Ok(())
}

#[test]
fn stop_criteria_that_never_stop_and_zero_counts_are_refused() -> TestResult {
    let dir = tempfile::tempdir()?;
    // Before: accepted, and `nan`/`inf` never stopped the run, `0` ran one iteration anyway.
    for (flag, value) in [
        ("--stop-time", "nan"),
        ("--stop-time", "inf"),
        ("--stop-time", "0"),
        ("--stop-time", "-5"),
        ("--stop-reward", "nan"),
        ("--stop-reward", "inf"),
        ("--stop-iters", "0"),
        ("--stop-timesteps", "0"),
    ] {
        let arg = format!("{flag}={value}");
        let run = impala(dir.path(), &["train", &arg, "--run-dir", "run"])?;
        assert!(!run.success, "{flag} {value} was accepted");
        assert!(run.stderr.contains(flag) && run.stderr.contains(value), "{}", run.stderr);
    }
    let run = impala(dir.path(), &["evaluate", "--checkpoint", "run", "--episodes", "0"])?;
    assert!(!run.success);
    assert!(run.stderr.contains("--episodes"), "{}", run.stderr);
    let run = impala(dir.path(), &["train", "--truncate", "--run-dir", "run"])?;
    assert!(!run.success);
    assert!(run.stderr.contains("--resume"), "{}", run.stderr);
    for value in ["0", "x"] {
        let run = impala(dir.path(), &["train", "--num-to-keep", value, "--run-dir", "run"])?;
        assert!(!run.success);
        assert!(run.stderr.contains("--num-to-keep"), "{}", run.stderr);
    }
    assert!(!dir.path().join("run").exists());
    Ok(())
}

#[test]
fn bad_override_and_bad_flag() -> TestResult {
    let dir = tempfile::tempdir()?;
    let run = impala(dir.path(), &["config", "--set", "lr"])?;
    run.assert_one_line_error(&["bad override `lr`", "key=value"]);
    // clap's own usage errors exit with 2 and name the flag.
    let run = impala(dir.path(), &["train", "--stop-iterz", "3"])?;
    assert!(!run.success);
    assert!(run.stderr.contains("--stop-iterz"), "{}", run.stderr);
    Ok(())
}

#[test]
fn evaluation_episodes_are_bounded() -> TestResult {
    let dir = tempfile::tempdir()?;
    let args = ["evaluate", "--checkpoint", "nowhere", "--episodes", "18446744073709551615"];
    let run = impala(dir.path(), &args)?;
    assert!(!run.success);
    assert!(run.stderr.contains("1..=1000000"), "{}", run.stderr);
    Ok(())
}

#[test]
fn a_run_dir_holding_other_files_is_refused_and_left_alone() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mine = dir.path().join("documents");
    fs::create_dir(&mine)?;
    fs::write(mine.join("notes.txt"), "mine")?;
    fs::write(mine.join("thesis.tex"), "mine too")?;
    let run = impala(dir.path(), &["train", "--stop-iters", "1", "--run-dir", "documents"])?;
    run.assert_one_line_error(&[
        "documents",
        "not a run's",
        "`notes.txt` and 1 more",
        "new or empty",
    ]);
    assert_eq!(entries(&mine), ["notes.txt", "thesis.tex"]);
    Ok(())
}

#[test]
fn many_envs_for_the_cores_are_warned_about() -> TestResult {
    let dir = tempfile::tempdir()?;
    let envs = format!("num_envs_per_env_runner={}", 1024 * 64 + 1);
    let args = ["train", "--set", &envs, "--stop-time", "1", "--run-dir", "run"];
    let run = impala(dir.path(), &args)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores <= 64 {
        assert!(run.stderr.contains("65537 envs (1 env runners"), "{}", run.stderr);
    }
    Ok(())
}
