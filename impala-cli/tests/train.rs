//! A short CartPole run end to end: result files, checkpoints, resume, evaluate, config, envs.

use std::fs;

use impala::tensorboard::read_scalars;
use impala::{read_result_lines, PROGRESS_FILE, RESULT_FILE};

use crate::common::{entries, impala, TestResult};

const FAST: [&str; 6] =
    ["--set", "min_time_s_per_iteration=0.3", "--set", "num_envs_per_env_runner=4", "--seed", "3"];

#[test]
fn train_writes_results_and_checkpoints_then_resumes() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut args =
        vec!["train", "--stop-iters", "2", "--checkpoint-every", "1", "--run-dir", "run"];
    args.extend(FAST);
    let run = impala(dir.path(), &args)?;
    assert!(run.success, "{}", run.stderr);
    let progress_lines: Vec<&str> = run.stdout.lines().filter(|l| l.starts_with("iter ")).collect();
    assert_eq!(progress_lines.len(), 2, "{}", run.stdout);

    let run_dir = dir.path().join("run");
    let names = entries(&run_dir);
    for expected in
        ["checkpoint_000001", "checkpoint_000002", "params.json", "progress.csv", "result.json"]
    {
        assert!(names.contains(&expected.to_string()), "{expected} missing from {names:?}");
    }
    assert!(names.iter().all(|n| !n.starts_with('.')), "temporary files left: {names:?}");
    let events: Vec<&String> =
        names.iter().filter(|n| n.starts_with("events.out.tfevents.")).collect();
    assert_eq!(events.len(), 1);
    let scalars = read_scalars(&run_dir.join(events[0]))?;
    assert!(scalars.iter().any(|(_, tag, _)| tag == "ray/tune/num_env_steps_sampled"));

    let results = read_result_lines(&run_dir.join(RESULT_FILE))?;
    assert_eq!(results.len(), 2);
    let sampled_2 =
        results[1].1["num_env_steps_sampled"].as_u64().ok_or("no num_env_steps_sampled")?;
    assert!(sampled_2 > 0);
    assert!(results[1].1["info"]["learner"]["default_policy"]["learner_stats"]["total_loss"]
        .is_number());
    let csv = fs::read_to_string(run_dir.join(PROGRESS_FILE))?;
    assert_eq!(csv.lines().count(), 3);
    let header = csv.lines().next().ok_or("empty progress.csv")?;
    assert!(header.starts_with("training_iteration,"), "{header}");
    assert!(header.contains("info/learner/default_policy/learner_stats/total_loss"));
    let params: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(run_dir.join("params.json"))?)?;
    assert_eq!(params["env"], "CartPole-v1");

    // Resume from the run folder (its newest checkpoint) and train one more iteration.
    let mut args = vec!["train", "--resume", "run", "--stop-iters", "3"];
    args.extend(&FAST[..4]);
    let run = impala(dir.path(), &args)?;
    assert!(run.success, "{}", run.stderr);
    let results = read_result_lines(&run_dir.join(RESULT_FILE))?;
    let iters: Vec<u64> =
        results.iter().filter_map(|(_, r)| r["training_iteration"].as_u64()).collect();
    assert_eq!(iters, vec![1, 2, 3]);
    let sampled_3 =
        results[2].1["num_env_steps_sampled"].as_u64().ok_or("no num_env_steps_sampled")?;
    assert!(sampled_3 > sampled_2, "counters restarted: {sampled_3} <= {sampled_2}");
    let updates = |r: &serde_json::Value| {
        r["info"]["learner"]["default_policy"]["num_grad_updates_lifetime"].as_u64()
    };
    assert!(updates(&results[2].1) > updates(&results[1].1));
    assert!(run_dir.join("checkpoint_000003").is_dir());

    // Evaluate the newest checkpoint.
    let run = impala(dir.path(), &["evaluate", "--checkpoint", "run", "--episodes", "2"])?;
    assert!(run.success, "{}", run.stderr);
    let eval: serde_json::Value = serde_json::from_str(run.stdout.trim())?;
    assert_eq!(eval["num_episodes"], 2);
    assert!(eval["episode_return_mean"].as_f64().is_some_and(|r| r >= 1.0));

    // A new run may not reuse a folder that holds results.
    let mut args = vec!["train", "--stop-iters", "1", "--run-dir", "run"];
    args.extend(FAST);
    let run = impala(dir.path(), &args)?;
    run.assert_one_line_error(&["already holds a run", "--resume"]);
    Ok(())
}

#[test]
fn config_prints_every_default_and_envs_lists_the_registry() -> TestResult {
    let dir = tempfile::tempdir()?;
    let run = impala(dir.path(), &["config", "--set", "lr=0.01", "--format", "json"])?;
    assert!(run.success, "{}", run.stderr);
    let config: serde_json::Value = serde_json::from_str(&run.stdout)?;
    assert_eq!(config["lr"], 0.01);
    // The embedded example's lr_schedule would set the rate; the command line's lr replaces it.
    assert!(config["lr_schedule"].is_null(), "{}", run.stdout);
    assert!(run.stderr.contains("`lr_schedule`: dropped because `lr`"), "{}", run.stderr);
    assert_eq!(config["env"], "CartPole-v1");
    assert!(config["learner_queue_size"].is_number(), "defaults are filled in");
    // Without a file, --env picks that env's tuned example.
    let run = impala(dir.path(), &["config", "--env", "Acrobot-v1", "--format", "json"])?;
    assert!(run.success, "{}", run.stderr);
    let config: serde_json::Value = serde_json::from_str(&run.stdout)?;
    assert_eq!(config["env"], "Acrobot-v1");
    assert_eq!(config["model"]["vf_share_layers"], false);
    let run = impala(dir.path(), &["envs"])?;
    assert!(run.success, "{}", run.stderr);
    for id in ["CartPole-v1", "Acrobot-v1", "Pendulum-v1"] {
        assert!(run.stdout.contains(id), "{}", run.stdout);
    }
    Ok(())
}

#[test]
fn ctrl_c_finishes_the_iteration_saves_and_exits_130() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut args = vec!["train", "--run-dir", "run"];
    args.extend(FAST);
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_impala"))
        .current_dir(dir.path())
        .args(&args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    // Wait for the first iteration's result, then press Ctrl-C.
    let result_file = dir.path().join("run").join(RESULT_FILE);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while fs::read_to_string(&result_file).map_or(true, |s| s.lines().count() == 0) {
        assert!(std::time::Instant::now() < deadline, "no iteration finished");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let kill =
        std::process::Command::new("kill").args(["-INT", &child.id().to_string()]).status()?;
    assert!(kill.success());
    let out = child.wait_with_output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    // 130 = 128 + SIGINT, as shells report it (before: 0, like a finished run).
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted (SIGINT)"), "{stderr}");
    let names = entries(&dir.path().join("run"));
    assert!(names.iter().any(|n| n.starts_with("checkpoint_")), "{names:?}");
    assert!(names.iter().all(|n| !n.starts_with('.')), "temporary files left: {names:?}");
    Ok(())
}

#[test]
fn a_dying_learner_reports_its_cause() -> TestResult {
    let dir = tempfile::tempdir()?;
    // A learning rate this large blows the weights up within a few SGD steps.
    let mut args = vec![
        "train",
        "--stop-iters",
        "20",
        "--run-dir",
        "run",
        "--set",
        "lr=1e30",
        "--set",
        "_lr_vf=1e30", // and trains its value network with an optimizer of its own
        "--set",
        "grad_clip=none",
    ];
    args.extend(FAST);
    let run = impala(dir.path(), &args)?;
    run.assert_one_line_error(&["the learner thread died while training!", "non-finite"]);
    // The last good weights are saved and named (once the algorithm can save after its learner
    // died; until then the learner's error alone).
    let line = run.error_lines()[0];
    if let Some((_, path)) = line.split_once("the last good checkpoint is `") {
        let path = path.trim_end_matches('`');
        assert!(path.starts_with("run/checkpoint_"), "{line}");
        let (state, _) = impala::checkpoint::read_checkpoint(&dir.path().join(path))?;
        let results = impala::read_result_lines(&dir.path().join("run").join(RESULT_FILE))?;
        assert_eq!(state.training_iteration, results.len() as u64);
        let names = entries(&dir.path().join("run"));
        assert!(names.iter().all(|n| !n.starts_with('.')), "temporary files left: {names:?}");
    }
    Ok(())
}

#[test]
fn every_example_config_loads_and_validates() -> TestResult {
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut seen = Vec::new();
    let mut sweeps = 0;
    for entry in fs::read_dir(&examples)? {
        let path = entry?.path();
        if path.file_name().is_some_and(|n| n.to_string_lossy().ends_with("-tune.toml")) {
            // A sweep holds search spaces, so it is a config only per trial: `impala tune`
            // validates every trial of it (and runs nothing with --dry-run).
            let dir = tempfile::tempdir()?;
            let file = path.to_string_lossy();
            let run = impala(dir.path(), &["tune", &file, "--dry-run"])?;
            assert!(run.success, "{}: {}", path.display(), run.stderr);
            assert!(run.stderr.trim().is_empty(), "{}: {}", path.display(), run.stderr);
            assert!(run.stdout.lines().any(|l| l.starts_with("trial_")), "{}", run.stdout);
            sweeps += 1;
        } else if path.extension().is_some_and(|e| e == "toml") {
            let loaded = impala::config::ImpalaConfig::load(&path)?;
            assert!(loaded.warnings.is_empty(), "{}: {:?}", path.display(), loaded.warnings);
            let config = loaded.config.validate()?;
            assert!(config.warnings().is_empty(), "{}: {:?}", path.display(), config.warnings());
            impala::check_environment(&config)?;
            seen.push(config.config().env.clone());
        }
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            "ALE/Breakout-v5",
            "ALE/Pong-v5",
            "ALE/Pong-v5",
            "Acrobot-v1",
            "CartPole-v1",
            "CartPole-v1",
            "HalfObserved",
            "LunarLander-v3",
            "Pendulum-v1"
        ]
    );
    assert_eq!(sweeps, 1);
    Ok(())
}

#[test]
fn a_multi_agent_env_trains_with_a_policy_per_agent_then_evaluates_and_resumes() -> TestResult {
    let dir = tempfile::tempdir()?;
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/half-observed-impala.toml");
    let file = example.to_string_lossy();
    let args = [
        "train",
        &file,
        "--stop-reward",
        "19",
        "--stop-time",
        "120",
        "--run-dir",
        "run",
        "--quiet",
    ];
    let run = impala(dir.path(), &args)?;
    assert!(run.success, "{}", run.stderr);
    let results = impala::read_results(&dir.path().join("run").join(RESULT_FILE))?;
    let last = results.last().ok_or("no result")?;
    assert!(last.policy_reward_mean["left"] >= 9.0, "{:?}", last.policy_reward_mean);
    assert!(last.info.learner.contains_key("right"));
    let progress = fs::read_to_string(dir.path().join("run").join(PROGRESS_FILE))?;
    let header = progress.lines().next().unwrap_or_default();
    for key in [
        "policy_reward_mean/left",
        "env_runners/module_episode_returns_mean/right",
        "info/learner/left/learner_stats/total_loss",
    ] {
        assert!(header.split(',').any(|k| k == key), "{key} not in {header}");
    }
    let events: Vec<String> = entries(&dir.path().join("run"))
        .into_iter()
        .filter(|n| n.starts_with("events.out"))
        .collect();
    let scalars = read_scalars(&dir.path().join("run").join(&events[0]))?;
    for tag in
        ["ray/tune/policy_reward_mean/left", "ray/tune/info/learner/right/learner_stats/total_loss"]
    {
        assert!(scalars.iter().any(|(_, t, _)| t == tag), "{tag} not in TensorBoard");
    }
    // Every policy plays its saved weights: greedy, both agents at their best.
    let eval = impala(dir.path(), &["evaluate", "--checkpoint", "run", "--episodes", "10"])?;
    assert!(eval.success, "{}", eval.stderr);
    let eval: serde_json::Value = serde_json::from_str(eval.stdout.trim())?;
    assert!(eval["policy_reward_mean"]["right"].as_f64().is_some_and(|r| r >= 9.0), "{eval}");
    // The run resumes with every policy.
    let resumed =
        impala(dir.path(), &["train", "--resume", "run", "--stop-iters", "1", "--quiet"])?;
    assert!(resumed.success, "{}", resumed.stderr);
    let resumed = impala::read_results(&dir.path().join("run").join(RESULT_FILE))?;
    assert_eq!(resumed.len(), last.training_iteration as usize + 1);
    Ok(())
}

#[test]
fn log_level_prints_library_warnings_on_stderr() -> TestResult {
    let dir = tempfile::tempdir()?;
    // The learner gets no data (`_skip_learners`) and waits 1 ms for it: a stall warning.
    let mut args = vec!["train", "--stop-iters", "1", "--quiet"];
    args.extend(["--set", "_skip_learners=true", "--set", "learner_queue_timeout=0.001"]);
    args.extend(FAST);
    let mut loud = args.clone();
    loud.extend(["--run-dir", "run"]);
    let run = impala(dir.path(), &loud)?;
    assert!(run.success, "{}", run.stderr);
    let warning = run.stderr.lines().find(|l| l.contains("learner_queue_timeout"));
    assert!(warning.is_some_and(|l| l.starts_with("warning: ")), "{}", run.stderr);
    // At ERROR the same run prints no warning.
    let mut quiet = args.clone();
    quiet.extend(["--set", "log_level=ERROR", "--run-dir", "run2"]);
    let run = impala(dir.path(), &quiet)?;
    assert!(run.success, "{}", run.stderr);
    assert!(!run.stderr.contains("learner_queue_timeout"), "{}", run.stderr);
    Ok(())
}

#[test]
fn config_prints_the_learner_device_plan() -> TestResult {
    let dir = tempfile::tempdir()?;
    let run = impala(dir.path(), &["config", "--set", "num_learners=2"])?;
    assert!(run.success, "{}", run.stderr);
    assert!(
        run.stdout.contains("# learner: 2 CPU tower(s) in one MultiGPULearnerThread"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("# api_stack: both of RLlib's API stacks drive the one engine"),
        "{}",
        run.stdout
    );
    let run = impala(
        dir.path(),
        &["config", "--set", "simple_optimizer=true", "--set", "num_learners=2"],
    )?;
    run.assert_one_line_error(&["simple_optimizer", "LearnerThread"]);
    Ok(())
}

#[test]
fn train_draws_the_learning_curve_and_plot_redraws_it() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut args = vec!["train", "--stop-iters", "2", "--run-dir", "run"];
    args.extend(FAST);
    let run = impala(dir.path(), &args)?;
    assert!(run.success, "{}", run.stderr);
    let png = dir.path().join("run").join("episode_return_mean.png");
    assert!(run.stdout.contains("plot: "), "{}", run.stdout);
    let bytes = fs::read(&png)?;
    assert!(bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000, "{} bytes", bytes.len());
    fs::remove_file(&png)?;
    let run = impala(dir.path(), &["plot", "run"])?;
    assert!(run.success, "{}", run.stderr);
    assert!(png.exists());
    let run = impala(dir.path(), &["plot", "nowhere"])?;
    run.assert_one_line_error(&["nowhere", "result.json"]);
    Ok(())
}

#[test]
fn profile_breaks_each_threads_time_down_by_activity() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut args = vec!["train", "--stop-iters", "2", "--run-dir", "run", "--profile"];
    args.extend(FAST);
    let run = impala(dir.path(), &args)?;
    assert!(run.success, "{}", run.stderr);
    assert!(run.stdout.contains("profile over"), "{}", run.stdout);
    let profile: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(dir.path().join("run/profile.json"))?)?;
    let threads = profile["threads"].as_array().ok_or("no threads")?;
    let thread = |name: &str| {
        threads.iter().find(|t| t["name"] == name).ok_or(format!("no {name} in {threads:?}"))
    };
    let runner = thread("env-runner-1")?;
    for activity in ["inference", "env_step", "fragment_build"] {
        assert!(runner["activities"][activity].as_f64().is_some_and(|s| s > 0.0), "{runner}");
    }
    let learner = thread("impala-learner")?;
    for activity in ["learner_grad", "learner_optimizer", "learner_load"] {
        assert!(learner["activities"][activity].as_f64().is_some_and(|s| s > 0.0), "{learner}");
    }
    assert!(thread("main")?["activities"]["driver_loop"].as_f64().is_some_and(|s| s > 0.0));
    // Shares of a thread's wall time add up to one (`other` is what no activity took).
    for t in threads {
        let total: f64 =
            t["shares"].as_object().ok_or("no shares")?.values().filter_map(|v| v.as_f64()).sum();
        assert!((total - 1.0).abs() < 0.02, "{t}");
    }
    assert!(!profile["core_utilisation"].as_array().ok_or("no cores")?.is_empty());
    Ok(())
}
