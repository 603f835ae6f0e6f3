//! Python Gymnasium envs end to end through `impala train`: a user's env from the working
//! directory trains to its optimum, images train with the default CNN, Atari runs, faults
//! restart runners, start-up errors are one line, and no env worker outlives the trainer.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use impala::{read_result_lines, RESULT_FILE};

use crate::common::{impala, return_mean, runner_count, scripted_module, Run, TestResult};

/// A temp folder holding the test envs' module, as a user's working directory would.
fn workdir() -> Result<tempfile::TempDir, std::io::Error> {
    let dir = tempfile::tempdir()?;
    let envs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../impala-gym/tests/envs");
    for name in ["impala_test_envs.py", "impala_broken_env.py"] {
        std::fs::copy(envs.join(name), dir.path().join(name))?;
    }
    Ok(dir)
}

/// The last result line of the run in `dir/run`.
fn last_result(dir: &Path) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let results = read_result_lines(&dir.join("run").join(RESULT_FILE))?;
    Ok(results.last().ok_or("no result lines")?.1.clone())
}

fn assert_success(run: &Run) {
    assert!(run.success, "stdout: {}\nstderr: {}", run.stdout, run.stderr);
}

#[test]
fn a_users_python_env_trains_to_its_optimum() -> TestResult {
    let dir = workdir()?;
    // Optimum 10 per episode, random play 5.
    let args = [
        "train",
        "--env",
        "impala_test_envs:MatchBit",
        "--set",
        "env_config.length=10",
        "--set",
        "num_envs_per_env_runner=4",
        "--set",
        "num_envs_per_env_worker=2",
        "--stop-reward",
        "9.5",
        "--stop-time",
        "120",
        "--seed",
        "1",
        "--run-dir",
        "run",
    ];
    let run = impala(dir.path(), &args)?;
    assert_success(&run);
    let last = last_result(dir.path())?;
    assert!(return_mean(&last).is_some_and(|r| r >= 9.5), "{}", run.stdout);
    Ok(())
}

/// With nothing to learn (a coin-flip reward, `CoinBit`), an entropy bonus keeps the policy near
/// uniform, with the built-in model and with a TorchScript module: at least 0.9 ln 2 after 1,000
/// updates (the bare-PyTorch reference, `scripts/bare_impala.py`, ends them at 0.665-0.676 with
/// the built-in model; docs/LEARNING.md).
#[test]
fn with_nothing_to_learn_the_policy_keeps_its_entropy() -> TestResult {
    let dir = workdir()?;
    let module = scripted_module(dir.path(), "residual_mlp")?;
    let scripted = format!("model.custom_model={}", module.display());
    for model in ["model.fcnet_hiddens=[256,256]", scripted.as_str()] {
        let mut args = vec!["train", "--env", "impala_test_envs:CoinBit"];
        for set in [
            model,
            "num_envs_per_env_runner=16",
            "rollout_fragment_length=20",
            "train_batch_size=640",
            // Without a config file the run starts from CartPole's tuned example; these two
            // replace its schedules, which would otherwise take the entropy bonus to 0.
            "lr=0.0001",
            "entropy_coeff=0.01",
            "min_time_s_per_iteration=1",
        ] {
            args.extend(["--set", set]);
        }
        // 1,000 train batches of 640 env steps.
        args.extend(["--stop-timesteps", "640000", "--seed", "1", "--run-dir", "run", "--quiet"]);
        let run = impala(dir.path(), &args)?;
        assert_success(&run);
        let last = last_result(dir.path())?;
        let stats = &last["info"]["learner"]["default_policy"]["learner_stats"];
        let (entropy, floor) = (stats["entropy"].as_f64().unwrap_or(0.0), 0.9 * 2f64.ln());
        assert!(entropy >= floor, "{model}: entropy {entropy} < {floor}\n{}", run.stdout);
        std::fs::remove_dir_all(dir.path().join("run"))?;
    }
    Ok(())
}

#[test]
fn a_pettingzoo_env_trains_a_policy_per_agent() -> TestResult {
    let dir = workdir()?;
    // HalfObserved written to PettingZoo's ParallelEnv API: 10 per agent at best, 5 at random.
    let mut args = vec!["train", "--env", "impala_test_envs:HalfObservedParallel"];
    for set in [
        "policies=[\"left\",\"right\"]",
        "num_envs_per_env_runner=8",
        "num_envs_per_env_worker=8",
        "rollout_fragment_length=10",
        "train_batch_size=80",
        "lr=0.003",
        "entropy_coeff=0.003",
        "model.fcnet_hiddens=[16]",
        "metrics_num_episodes_for_smoothing=50",
        "min_time_s_per_iteration=0.5",
    ] {
        args.extend(["--set", set]);
    }
    args.extend(["--stop-reward", "19", "--stop-time", "120", "--seed", "3", "--run-dir", "run"]);
    let run = impala(dir.path(), &args)?;
    assert_success(&run);
    let last = last_result(dir.path())?;
    for policy in ["left", "right"] {
        let reward = last["policy_reward_mean"][policy].as_f64();
        assert!(reward.is_some_and(|r| r >= 9.0), "{policy}: {}", run.stdout);
    }
    // A PettingZoo AEC env (rock-paper-scissors, through `aec_to_parallel`) with one shared
    // policy: a few iterations, per-policy results.
    let args = [
        "train",
        "--env",
        "pettingzoo.classic.rps_v2:env",
        "--stop-iters",
        "2",
        "--set",
        "min_time_s_per_iteration=0.5",
        "--set",
        "num_envs_per_env_runner=4",
        // Every env ends an episode (150 steps) in the first iteration, however slowly the env
        // worker starts on a busy machine.
        "--set",
        "min_sample_timesteps_per_iteration=1000",
        "--run-dir",
        "rps",
        "--quiet",
    ];
    let run = impala(dir.path(), &args)?;
    assert_success(&run);
    let results = read_result_lines(&dir.path().join("rps").join(RESULT_FILE))?;
    let (_, last) = results.last().ok_or("no result lines")?;
    assert!(last["policy_reward_mean"]["default_policy"].is_number(), "{last}");
    assert!(last["num_agent_steps_sampled"].as_u64() > last["num_env_steps_sampled"].as_u64());
    Ok(())
}

#[test]
fn a_python_envs_kind_and_agents_are_checked_at_start_up() -> TestResult {
    let dir = workdir()?;
    // A mapping to a policy that does not exist names the agent (one entry set with `--set`).
    let args = [
        "train",
        "--env",
        "impala_test_envs:HalfObservedParallel",
        "--set",
        "policies=[\"left\",\"right\"]",
        "--set",
        "policy_mapping.right=nobody",
    ];
    let run = impala(dir.path(), &args)?;
    assert!(
        !run.success && run.stderr.contains("maps `right` to policy `nobody`"),
        "{}",
        run.stderr
    );
    // Multi-agent options on a single-agent Python env.
    let args = ["train", "--env", "impala_test_envs:MatchBit", "--set", "policies=[\"a\"]"];
    let run = impala(dir.path(), &args)?;
    assert!(!run.success && run.stderr.contains("is a single-agent env"), "{}", run.stderr);
    Ok(())
}

#[test]
fn a_uint8_image_env_trains_with_the_default_cnn() -> TestResult {
    let dir = workdir()?;
    // 42x42x1 uint8 frames in Gymnasium's HWC layout, no wrappers (RLlib 2.60's default CNN
    // fails on these with a dtype error). Optimum 8.
    let args = [
        "train",
        "--env",
        "impala_test_envs:Image",
        "--set",
        "num_envs_per_env_runner=4",
        "--set",
        "model.fcnet_hiddens=[64]",
        "--set",
        "lr=0.001",
        "--stop-reward",
        "7.5",
        "--stop-time",
        "240",
        "--seed",
        "0",
        "--run-dir",
        "run",
    ];
    let run = impala(dir.path(), &args)?;
    assert_success(&run);
    assert!(return_mean(&last_result(dir.path())?).is_some_and(|r| r >= 7.5), "{}", run.stdout);
    Ok(())
}

#[test]
fn atari_pong_trains_two_iterations_and_its_checkpoint_evaluates() -> TestResult {
    let dir = workdir()?;
    let args = [
        "train",
        "--env",
        "ALE/Pong-v5",
        "--set",
        "num_envs_per_env_runner=2",
        // Both games in one worker's vector env, which steps them together: the evaluation
        // runner, with one env, must get a worker of its own size.
        "--set",
        "num_envs_per_env_worker=2",
        "--set",
        "rollout_fragment_length=20",
        "--set",
        "train_batch_size=40",
        "--set",
        "min_time_s_per_iteration=1",
        "--stop-iters",
        "2",
        "--run-dir",
        "run",
    ];
    let run = impala(dir.path(), &args)?;
    assert_success(&run);
    let last = last_result(dir.path())?;
    assert_eq!(last["training_iteration"], 2);
    assert!(last["num_env_steps_trained"].as_u64().unwrap_or(0) > 0, "{last}");
    let eval = impala(dir.path(), &["evaluate", "--checkpoint", "run", "--episodes", "1"])?;
    assert_success(&eval);
    // A game of Pong lasts until one side has 21 points.
    let summary: serde_json::Value = serde_json::from_str(eval.stdout.trim())?;
    assert_eq!(summary["num_episodes"], 1, "{}", eval.stdout);
    assert!(summary["episode_return_mean"].as_f64().is_some_and(|r| r.abs() <= 21.0));
    Ok(())
}

/// Trains the faulty env with `sets` until 3 iterations; returns the run and its last result.
fn faulty_run(sets: &[&str]) -> Result<(Run, serde_json::Value), Box<dyn std::error::Error>> {
    let dir = workdir()?;
    let mut args = vec![
        "train",
        "--env",
        "impala_test_envs:Faulty",
        "--set",
        "num_envs_per_env_runner=2",
        "--set",
        "min_time_s_per_iteration=1",
        "--stop-iters",
        "3",
        "--run-dir",
        "run",
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    let run = impala(dir.path(), &args)?;
    assert_success(&run);
    let last = last_result(dir.path())?;
    Ok((run, last))
}

#[test]
fn python_exceptions_hangs_and_deaths_restart_the_runner() -> TestResult {
    for (mode, message) in
        [("raise", "ValueError: step"), ("die", "died"), ("hang", "did not answer within 1 s")]
    {
        let (run, last) = faulty_run(&[
            &format!("env_config.mode=\"{mode}\""),
            "env_config.after=300",
            // One fault in the run, so that the restarted runner trains the last iteration.
            "env_config.once=\"fault-once\"",
            "sample_timeout_s=1",
        ])?;
        let (failures, restarts) = (
            runner_count(&last, "num_env_runner_failures")?,
            runner_count(&last, "num_env_runner_restarts")?,
        );
        assert_eq!((failures, restarts), (1.0, 1.0), "{mode}: failures, restarts");
        assert!(run.stderr.contains(message), "{mode}: {}", run.stderr);
        // Training went on: samples were trained in the last iteration.
        assert!(
            last["num_env_steps_trained_this_iter"].as_u64().unwrap_or(0) > 0,
            "{mode}: {last}"
        );
    }
    Ok(())
}

/// An env that fails on every step trains nothing: the run ends within seconds, non-zero, with
/// the env's own first error, instead of restarting its runner up to
/// `max_num_env_runner_restarts` times and ending "successfully" with nothing trained.
#[test]
fn a_broken_env_fails_the_run_with_its_own_error() -> TestResult {
    for (mode, message) in
        [("raise", "ValueError: step 1 failed"), ("die", "died"), ("hang", "did not answer")]
    {
        let dir = workdir()?;
        let started = std::time::Instant::now();
        let args = [
            "train",
            "--env",
            "impala_test_envs:Faulty",
            "--set",
            &format!("env_config.mode=\"{mode}\""),
            "--set",
            "env_config.after=0",
            "--set",
            "sample_timeout_s=1",
            "--stop-time",
            "120",
            "--run-dir",
            "run",
        ];
        let run = impala(dir.path(), &args)?;
        run.assert_one_line_error(&["failed 3 times in a row", "the env is broken", message]);
        assert!(started.elapsed().as_secs() < 60, "{mode}: took {:?}", started.elapsed());
        // Nothing was trained: in the state the run saved when it failed, and in the last
        // result line when an iteration ended before the third failure (whether one did
        // depends on how fast the env's workers die and restart).
        let state = saved_state(dir.path(), &run)?;
        assert_eq!(state["counters"]["num_env_steps_trained"], 0, "{mode}: {state}");
        let results = read_result_lines(&dir.path().join("run").join(RESULT_FILE))?;
        if let Some((_, last)) = results.last() {
            assert_eq!(last["num_env_steps_trained"], 0, "{mode}: {last}");
        }
    }
    Ok(())
}

/// The algorithm state of the checkpoint a failed run's error names ("the run was saved to
/// `PATH`"), relative to `dir`.
fn saved_state(dir: &Path, run: &Run) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let (_, rest) =
        run.stderr.split_once("the run was saved to `").ok_or("the error names no checkpoint")?;
    let checkpoint = rest.split('`').next().ok_or("an unterminated checkpoint path")?;
    let text = std::fs::read_to_string(dir.join(checkpoint).join("algorithm_state.json"))?;
    Ok(serde_json::from_str(&text)?)
}

#[test]
fn restart_failed_sub_environments_keeps_the_runner() -> TestResult {
    let (run, last) = faulty_run(&[
        "env_config.mode=\"raise\"",
        "env_config.after=300",
        "restart_failed_sub_environments=true",
    ])?;
    assert_eq!(runner_count(&last, "num_env_runner_failures")?, 0.0, "{last}");
    assert!(run.stderr.contains("recreated it"), "{}", run.stderr);
    Ok(())
}

#[test]
fn python_start_up_errors_are_one_line() -> TestResult {
    let dir = workdir()?;
    let cases: &[(&str, &[&str])] = &[
        ("impala_broken_env:Env", &["ModuleNotFoundError", "not_a_real_module_for_impala_tests"]),
        ("NoSuchEnv-v0", &["NoSuchEnv-v0", "native env"]),
        (
            "impala_test_envs:MatchBit --set env_config.nope=1",
            &["unexpected keyword argument", "env_config"],
        ),
    ];
    for (env, needles) in cases {
        let mut args = vec!["train", "--stop-iters", "1", "--run-dir", "run", "--env"];
        args.extend(env.split(' '));
        let start = Instant::now();
        let run = impala(dir.path(), &args)?;
        run.assert_one_line_error(needles);
        assert!(start.elapsed() < Duration::from_secs(60), "{env}: took {:?}", start.elapsed());
    }
    let run = impala(
        dir.path(),
        &[
            "train",
            "--env",
            "LunarLander-v3",
            "--set",
            "python_executable=\"/no/python3\"",
            "--stop-iters",
            "1",
        ],
    )?;
    run.assert_one_line_error(&["/no/python3", "IMPALA_PYTHON"]);
    let run = impala(
        dir.path(),
        &["train", "--env", "LunarLander-v3", "--set", "env_backend=\"native\""],
    )?;
    run.assert_one_line_error(&["LunarLander-v3"]);
    Ok(())
}

/// Processes whose command line holds `needle`.
fn processes_with(needle: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        })
        .filter(|pid| {
            // Zombies are gone but for their parent's wait.
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
        })
        .collect()
}

/// Starts a training run of LunarLander-v3 (Python workers), waits for its first iteration,
/// sends `signal`, and returns the trainer's exit code and its workers' marker.
fn signalled_run(signal: &str) -> Result<(Option<i32>, String), Box<dyn std::error::Error>> {
    let dir = workdir()?;
    let mut child = Command::new(env!("CARGO_BIN_EXE_impala"))
        .current_dir(dir.path())
        .args(["train", "--env", "LunarLander-v3", "--set", "num_envs_per_env_runner=2"])
        .args(["--set", "remote_worker_envs=true", "--set", "num_envs_per_env_worker=1"])
        .args(["--set", "min_time_s_per_iteration=0.2"])
        .args(["--stop-time", "120", "--run-dir", "run"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let marker = format!("\"parent_pid\":{}", child.id());
    let stdout = child.stdout.take().ok_or("no stdout")?;
    use std::io::BufRead;
    let mut lines = std::io::BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        if line?.starts_with("iter ") {
            break;
        }
    }
    // Keep reading, so the trainer's prints never meet a closed pipe.
    std::thread::spawn(move || lines.for_each(drop));
    let workers = processes_with(&marker);
    assert!(workers.len() >= 2, "expected env workers, found {workers:?}");
    Command::new("kill").args([signal, &child.id().to_string()]).status()?;
    let status = child.wait()?;
    Ok((status.code(), marker))
}

#[test]
fn no_env_worker_outlives_the_trainer() -> TestResult {
    for (signal, code) in [("-INT", Some(130)), ("-TERM", Some(143)), ("-KILL", None)] {
        let (exit, marker) = signalled_run(signal)?;
        assert_eq!(exit, code, "{signal}");
        let start = Instant::now();
        while !processes_with(&marker).is_empty() && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(processes_with(&marker), Vec::<u32>::new(), "{signal}: workers left behind");
    }
    Ok(())
}

#[test]
fn a_hung_env_does_not_hold_up_the_end_of_a_run() -> TestResult {
    let dir = workdir()?;
    // The env hangs in its 5th step; sample_timeout_s stays at its 60 s.
    let args = [
        "train",
        "--env",
        "impala_test_envs:Faulty",
        "--set",
        "env_config.mode=\"hang\"",
        "--set",
        "env_config.after=5",
        "--stop-time",
        "2",
        "--run-dir",
        "run",
    ];
    let started = Instant::now();
    let run = impala(dir.path(), &args)?;
    assert_success(&run);
    // Stopping waits a few seconds for the runner, not the env's 60 s timeout.
    assert!(started.elapsed() < Duration::from_secs(40), "took {:?}", started.elapsed());
    assert!(run.stderr.contains("did not stop in time"), "{}", run.stderr);
    Ok(())
}
