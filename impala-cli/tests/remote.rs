//! Remote env runners as separate processes over loopback: `impala train --listen` and
//! `impala env-runner --connect`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{impala, TestResult};
use crate::runs::signal;

pub(crate) const TOKEN: &str = "5f0c1e7a-test-token";

/// A free port (bound and released; the driver takes it a moment later).
pub(crate) fn free_port() -> Result<u16, std::io::Error> {
    Ok(std::net::TcpListener::bind("0.0.0.0:0")?.local_addr()?.port())
}

pub(crate) fn token_file(dir: &Path, token: &str) -> Result<PathBuf, std::io::Error> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(format!("token-{}", token.len()));
    std::fs::write(&path, format!("{token}\n"))?;
    // As the README says to keep it: readable by its owner only (else a warning is printed).
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    Ok(path)
}

/// Starts `impala args...` in `dir`, stdout and stderr into `dir/NAME.out` / `NAME.err`.
fn start(dir: &Path, name: &str, args: &[&str]) -> Result<Child, std::io::Error> {
    start_in(dir, dir, name, args)
}

/// Starts `impala args...` in `cwd`, stdout and stderr into `logs/NAME.out` / `NAME.err`.
fn start_in(cwd: &Path, logs: &Path, name: &str, args: &[&str]) -> Result<Child, std::io::Error> {
    spawn(Command::new(env!("CARGO_BIN_EXE_impala")).current_dir(cwd).args(args), logs, name)
}

/// Spawns `command` with stdout and stderr into `logs/NAME.out` / `NAME.err`.
fn spawn(command: &mut Command, logs: &Path, name: &str) -> Result<Child, std::io::Error> {
    command
        .stdout(Stdio::from(File::create(logs.join(format!("{name}.out")))?))
        .stderr(Stdio::from(File::create(logs.join(format!("{name}.err")))?))
        .spawn()
}

pub(crate) fn output(dir: &Path, name: &str) -> String {
    let read = |ext| std::fs::read_to_string(dir.join(format!("{name}.{ext}"))).unwrap_or_default();
    format!("{}{}", read("out"), read("err"))
}

fn runner(dir: &Path, name: &str, port: u16, extra: &[&str]) -> Result<Child, std::io::Error> {
    runner_at(dir, name, &format!("127.0.0.1:{port}"), None, extra)
}

/// An `impala env-runner` connecting to `connect`, in network namespace `netns` when given.
pub(crate) fn runner_at(
    dir: &Path,
    name: &str,
    connect: &str,
    netns: Option<&str>,
    extra: &[&str],
) -> Result<Child, std::io::Error> {
    let token = token_file(dir, TOKEN)?;
    let token = token.to_string_lossy().into_owned();
    let mut args = vec!["env-runner", "--connect", connect, "--token-file", &token];
    args.extend_from_slice(extra);
    match netns {
        None => start(dir, name, &args),
        Some(netns) => spawn(
            Command::new("ip")
                .current_dir(dir)
                .args(["netns", "exec", netns, env!("CARGO_BIN_EXE_impala")])
                .args(&args),
            dir,
            name,
        ),
    }
}

fn driver(dir: &Path, port: u16, extra: &[&str]) -> Result<Child, std::io::Error> {
    driver_on(dir, &format!("127.0.0.1:{port}"), extra)
}

/// `impala train --listen LISTEN --run-dir run` with the test token.
pub(crate) fn driver_on(dir: &Path, listen: &str, extra: &[&str]) -> Result<Child, std::io::Error> {
    let token = token_file(dir, TOKEN)?.to_string_lossy().into_owned();
    let mut args = vec!["train", "--listen", listen, "--token-file", &token, "--run-dir", "run"];
    args.extend_from_slice(extra);
    start(dir, "driver", &args)
}

/// Waits for `child` to exit within `within`, killing it otherwise.
pub(crate) fn wait(
    child: &mut Child,
    within: Duration,
) -> Result<std::process::ExitStatus, String> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Ok(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err(format!("still running after {within:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The complete lines of `run/result.json` so far (none before it exists).
pub(crate) fn result_lines(run: &Path) -> Result<Vec<serde_json::Value>, std::io::Error> {
    let text = std::fs::read_to_string(run.join("result.json")).unwrap_or_default();
    Ok(text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect())
}

/// Waits until result.json of `run` holds at least `n` lines.
pub(crate) fn wait_for_iterations(dir: &Path, n: usize, within: Duration) -> TestResult {
    let deadline = Instant::now() + within;
    while result_lines(&dir.join("run"))?.len() < n {
        if Instant::now() > deadline {
            return Err(format!(
                "fewer than {n} iterations after {within:?}: {}",
                output(dir, "driver")
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Trains for two iterations (seed 0) in `dir` with `args` and one runner process started in
/// another folder (so it has none of `dir`'s files); both must exit cleanly. The last result.
fn with_a_runner_elsewhere(
    dir: &Path,
    args: &[&str],
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let port = free_port()?;
    let args = [args, &["--stop-iters", "2", "--seed", "0"]].concat();
    let mut d = driver(dir, port, &args)?;
    let elsewhere = tempfile::tempdir()?;
    let token = token_file(dir, TOKEN)?.to_string_lossy().into_owned();
    let connect = format!("127.0.0.1:{port}");
    let runner = ["env-runner", "--connect", &connect, "--token-file", &token];
    let mut r = start_in(elsewhere.path(), dir, "r1", &runner)?;
    let status = wait(&mut d, Duration::from_secs(60))?;
    assert!(status.success(), "{}\n{}", output(dir, "driver"), output(dir, "r1"));
    assert!(wait(&mut r, Duration::from_secs(10))?.success(), "{}", output(dir, "r1"));
    last_result(dir)
}

pub(crate) fn last_result(dir: &Path) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let lines = result_lines(&dir.join("run"))?;
    Ok(lines.last().cloned().ok_or("no results")?)
}

/// Kills the driver, resumes its run on `listen` for two more iterations and checks that the
/// runner `r1` (process `r`) served the resumed run too, then exited with it.
pub(crate) fn kill_and_resume(
    dir: &Path,
    d: &mut Child,
    r: &mut Child,
    listen: &str,
) -> TestResult {
    signal(d, "KILL")?;
    wait(d, Duration::from_secs(5))?;
    let done = result_lines(&dir.join("run"))?.len();
    let token = token_file(dir, TOKEN)?.to_string_lossy().into_owned();
    let stop = format!("{}", done + 2);
    let resumed = impala(
        dir,
        &[
            "train",
            "--listen",
            listen,
            "--token-file",
            &token,
            "--resume",
            "run",
            "--stop-iters",
            &stop,
        ],
    )?;
    assert!(resumed.success, "{}{}", resumed.stdout, resumed.stderr);
    assert!(wait(r, Duration::from_secs(10))?.success(), "{}", output(dir, "r1"));
    let log = output(dir, "r1");
    // Before the kill, and for the resumed run (the restore starts a new runner group).
    assert!(log.matches("serving as env runner").count() >= 2, "{log}");
    assert!(log.contains("lost the driver; reconnecting"), "{log}");
    Ok(())
}

#[test]
fn two_runner_processes_train_cartpole_to_450_and_exit_when_the_run_is_over() -> TestResult {
    let dir = tempfile::tempdir()?;
    let port = free_port()?;
    let mut d = driver(
        dir.path(),
        port,
        &[
            "--set",
            "num_env_runners=2",
            "--stop-reward",
            "450",
            "--stop-time",
            "120",
            "--seed",
            "0",
        ],
    )?;
    let mut runners = [runner(dir.path(), "r1", port, &[])?, runner(dir.path(), "r2", port, &[])?];
    let status = wait(&mut d, Duration::from_secs(180))?;
    let out = output(dir.path(), "driver");
    assert!(status.success(), "{out}");
    assert!(out.contains("episode_return_mean") && out.contains(">= 450"), "{out}");
    let last = last_result(dir.path())?;
    assert_eq!(last["env_runners"]["num_healthy_env_runners"].as_f64(), Some(2.0), "{last}");
    for id in [1, 2] {
        let lag = last["env_runners"][format!("policy_lag_runner_{id}")].as_f64();
        assert!(lag.is_some_and(|l| l >= 0.0), "policy lag per runner: {last}");
    }
    for (i, r) in runners.iter_mut().enumerate() {
        let status = wait(r, Duration::from_secs(10))?;
        let log = output(dir.path(), &format!("r{}", i + 1));
        assert!(status.success() && log.contains("run is over"), "{log}");
        assert!(!log.contains(TOKEN), "the token leaked: {log}");
    }
    assert!(!out.contains(TOKEN), "the token leaked: {out}");
    Ok(())
}

#[test]
fn runner_processes_sample_a_multi_agent_env_with_a_policy_per_agent_to_its_optimum() -> TestResult
{
    let dir = tempfile::tempdir()?;
    let port = free_port()?;
    let example =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/half-observed-impala.toml");
    let example = example.to_string_lossy();
    let mut d = driver(
        dir.path(),
        port,
        &[&example, "--set", "num_env_runners=2", "--stop-reward", "19", "--stop-time", "120"],
    )?;
    let mut runners = [runner(dir.path(), "r1", port, &[])?, runner(dir.path(), "r2", port, &[])?];
    let status = wait(&mut d, Duration::from_secs(180))?;
    let out = output(dir.path(), "driver");
    assert!(status.success() && out.contains(">= 19"), "{out}");
    let last = last_result(dir.path())?;
    assert_eq!(last["env_runners"]["num_healthy_env_runners"].as_f64(), Some(2.0), "{last}");
    for policy in ["left", "right"] {
        let mean = last["policy_reward_mean"][policy].as_f64();
        assert!(mean.is_some_and(|m| m >= 9.0), "{policy} did not learn: {last}");
    }
    for (i, r) in runners.iter_mut().enumerate() {
        let status = wait(r, Duration::from_secs(10))?;
        let log = output(dir.path(), &format!("r{}", i + 1));
        assert!(status.success() && log.contains("run is over"), "{log}");
    }
    Ok(())
}

#[test]
fn a_runner_killed_mid_run_is_replaced_by_a_new_process_and_training_goes_on() -> TestResult {
    let dir = tempfile::tempdir()?;
    let port = free_port()?;
    let mut d = driver(
        dir.path(),
        port,
        &[
            "--set",
            "num_env_runners=2",
            "--stop-reward",
            "450",
            "--stop-time",
            "120",
            "--seed",
            "1",
        ],
    )?;
    let mut first = runner(dir.path(), "r1", port, &[])?;
    let mut second = runner(dir.path(), "r2", port, &[])?;
    wait_for_iterations(dir.path(), 2, Duration::from_secs(60))?;
    signal(&first, "KILL")?;
    wait(&mut first, Duration::from_secs(5))?;
    let mut third = runner(dir.path(), "r3", port, &[])?;
    let status = wait(&mut d, Duration::from_secs(180))?;
    let out = output(dir.path(), "driver");
    assert!(status.success() && out.contains(">= 450"), "{out}");
    let last = last_result(dir.path())?;
    assert!(crate::common::runner_count(&last, "num_env_runner_restarts")? >= 1.0, "{last}");
    assert_eq!(last["env_runners"]["num_healthy_env_runners"].as_f64(), Some(2.0), "{last}");
    let new = output(dir.path(), "r3");
    assert!(new.contains("incarnation=1"), "the new process never took the slot: {new}");
    for r in [&mut second, &mut third] {
        assert!(wait(r, Duration::from_secs(10))?.success());
    }
    Ok(())
}

#[test]
fn a_wrong_token_and_a_mismatched_env_are_refused_with_a_message_on_both_sides() -> TestResult {
    let dir = tempfile::tempdir()?;
    let port = free_port()?;
    let mut d = driver(dir.path(), port, &["--stop-iters", "2"])?;
    let connect = format!("127.0.0.1:{port}");
    let wrong = token_file(dir.path(), "a-guess-of-the-secret")?;
    let wrong = wrong.to_string_lossy();
    let run = impala(dir.path(), &["env-runner", "--connect", &connect, "--token-file", &wrong])?;
    run.assert_one_line_error(&["refused this env runner", "wrong token"]);
    let mut other = runner(dir.path(), "other", port, &["--expect-env", "Pendulum-v1"])?;
    assert!(!wait(&mut other, Duration::from_secs(20))?.success());
    let log = output(dir.path(), "other");
    assert!(log.contains("expects env `Pendulum-v1`") && log.contains("CartPole-v1"), "{log}");
    let mut good = runner(dir.path(), "good", port, &[])?;
    assert!(wait(&mut d, Duration::from_secs(60))?.success());
    assert!(wait(&mut good, Duration::from_secs(10))?.success());
    let out = output(dir.path(), "driver");
    assert!(
        out.contains("wrong token") && out.contains("expects env"),
        "the driver says why: {out}"
    );
    assert!(
        !out.contains("a-guess-of-the-secret") && !out.contains(TOKEN),
        "a token leaked: {out}"
    );
    Ok(())
}

#[test]
fn runners_outlive_a_killed_driver_and_serve_it_again_when_it_resumes() -> TestResult {
    let dir = tempfile::tempdir()?;
    let port = free_port()?;
    let mut d = driver(dir.path(), port, &["--stop-iters", "1000", "--checkpoint-every", "1"])?;
    let mut r = runner(dir.path(), "r1", port, &["--reconnect-timeout-s", "30"])?;
    wait_for_iterations(dir.path(), 3, Duration::from_secs(60))?;
    let listen = format!("127.0.0.1:{port}");
    kill_and_resume(dir.path(), &mut d, &mut r, &listen)?;
    let token = token_file(dir.path(), TOKEN)?.to_string_lossy().into_owned();
    // And with no driver at all, a runner gives up after its reconnect timeout.
    let started = Instant::now();
    let run = impala(
        dir.path(),
        &["env-runner", "--connect", &listen, "--token-file", &token, "--reconnect-timeout-s", "1"],
    )?;
    run.assert_one_line_error(&["could not reconnect within 1 s"]);
    assert!(started.elapsed() < Duration::from_secs(10));
    Ok(())
}

#[test]
fn a_driver_that_no_runner_reaches_says_how_to_start_them() -> TestResult {
    let dir = tempfile::tempdir()?;
    let port = free_port()?;
    let listen = format!("127.0.0.1:{port}");
    let token = token_file(dir.path(), TOKEN)?.to_string_lossy().into_owned();
    // A single- and a multi-agent run wait for their remote runners alike.
    for env in ["CartPole-v1", "HalfObserved"] {
        let timeout = "env_runner_connect_timeout_s=0.5";
        let args =
            ["train", "--env", env, "--listen", &listen, "--token-file", &token, "--set", timeout];
        let run = impala(dir.path(), &args)?;
        run.assert_one_line_error(&["0 of 1 env runners connected", "impala env-runner --connect"]);
    }
    let args = ["train", "--listen", &listen, "--token-file", &token];
    let run = impala(dir.path(), &[&args[..], &["--set", "normalize_observations=true"]].concat())?;
    run.assert_one_line_error(&["normalize_observations", "remote env runners"]);
    let run = impala(dir.path(), &["train", "--set", "compress_observations=true"])?;
    run.assert_one_line_error(&["compress_observations", "--listen"]);
    Ok(())
}

#[test]
fn a_runner_process_acts_with_the_drivers_torchscript_module_it_has_no_file_of() -> TestResult {
    let dir = tempfile::tempdir()?;
    crate::common::scripted_module(dir.path(), "residual_mlp")?;
    // A path relative to the driver's folder: the runner, started elsewhere, cannot open it.
    let last =
        with_a_runner_elsewhere(dir.path(), &["--set", "model.custom_model=residual_mlp.pt"])?;
    assert!(last["num_env_steps_trained"].as_f64().is_some_and(|n| n > 0.0), "{last}");
    let checkpoint = dir.path().join("run/checkpoint_000002/learner/custom_model.pt");
    assert_eq!(std::fs::read(checkpoint)?, std::fs::read(dir.path().join("residual_mlp.pt"))?);
    Ok(())
}

#[test]
fn runner_processes_act_with_each_policys_own_torchscript_module() -> TestResult {
    let dir = tempfile::tempdir()?;
    crate::common::scripted_module(dir.path(), "residual_mlp")?;
    crate::common::scripted_module(dir.path(), "catalog_mlp")?;
    // Two policies, each with a module of its own, on two CartPole games.
    let config = dir.path().join("two.toml");
    std::fs::write(
        &config,
        "env = \"MultiAgentCartPole\"\npolicies = [\"p0\", \"p1\"]\n\
         num_env_runners = 1\ntrain_batch_size = 200\nmin_time_s_per_iteration = 0.3\n\
         [env_config]\nnum_agents = 2\n\
         [policy_mapping]\nagent_0 = \"p0\"\nagent_1 = \"p1\"\n\
         [policy_config.p0.model]\ncustom_model = \"residual_mlp.pt\"\n\
         [policy_config.p1.model]\ncustom_model = \"catalog_mlp.pt\"\n",
    )?;
    let last = with_a_runner_elsewhere(dir.path(), &[&config.to_string_lossy()])?;
    for policy in ["p0", "p1"] {
        let trained = last["info"]["learner"][policy]["num_agent_steps_trained"].as_f64();
        assert!(trained.is_some_and(|n| n > 0.0), "{policy}: {last}");
    }
    // The checkpoint keeps each policy's module in its learner's folder.
    let learner = dir.path().join("run/checkpoint_000002/learner");
    for (policy, module) in [("p0", "residual_mlp.pt"), ("p1", "catalog_mlp.pt")] {
        let copy = std::fs::read(learner.join(policy).join("custom_model.pt"))?;
        assert_eq!(copy, std::fs::read(dir.path().join(module))?, "{policy}");
    }
    Ok(())
}
