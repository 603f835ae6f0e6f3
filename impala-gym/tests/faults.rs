//! Faults: Python exceptions, hangs, dead workers and start-up errors are clear errors, never
//! hangs; workers never outlive their parent.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use impala_core::Env;
use impala_gym::{GymEnvPool, GymError};

use crate::{config, settings, TestResult};

fn faulty(mode: &str) -> impala_gym::GymSettings {
    let mut s = settings("impala_test_envs:Faulty");
    s.env_config = config(&[("mode", mode.into()), ("after", 2.into())]);
    s
}

/// Steps `env` with action 0 until it errors; returns the error's message.
fn step_until_error(env: &mut impl Env) -> String {
    let mut obs = [0.0f32];
    if let Err(e) = env.reset(Some(0), &mut obs) {
        return e.to_string();
    }
    for _ in 0..10 {
        match env.step(&[0.0], &mut obs) {
            Ok(out) if out.done() => {
                if let Err(e) = env.reset(None, &mut obs) {
                    return e.to_string();
                }
            }
            Ok(_) => {}
            Err(e) => return e.to_string(),
        }
    }
    String::from("no error")
}

#[test]
fn an_exception_in_step_names_the_python_frame() -> TestResult {
    let mut env = GymEnvPool::new(faulty("raise")).make(0, 0, 0)?;
    let message = step_until_error(&mut env);
    assert!(message.contains("ValueError: step 3 failed on purpose"), "{message}");
    assert!(message.contains("impala_test_envs.py"), "last frame missing: {message}");
    Ok(())
}

/// An env whose every reset after its first raises, reset once.
fn raising_on_reset(obs: &mut [f32]) -> Result<impala_gym::GymEnv, Box<dyn std::error::Error>> {
    let mut s = faulty("raise_on_reset");
    s.env_config.insert("after".into(), 100.into());
    let mut env = GymEnvPool::new(s).make(0, 0, 0)?;
    env.reset(Some(0), obs)?;
    Ok(env)
}

#[test]
fn an_exception_in_reset_is_an_error() -> TestResult {
    let mut obs = [0.0f32];
    let mut env = raising_on_reset(&mut obs)?;
    let message = env.reset(None, &mut obs).map_err(|e| e.to_string()).err().unwrap_or_default();
    assert!(message.contains("RuntimeError: reset failed on purpose"), "{message}");
    Ok(())
}

#[test]
fn an_episode_end_gives_the_final_observation_then_the_reset_one() -> TestResult {
    // The worker resets an env in the step that ends its episode: the step still returns the
    // final observation (20 steps counted) and the reset after it the new episode's first (0).
    let mut env = GymEnvPool::new(faulty("none")).make(0, 0, 0)?;
    let mut obs = [0.0f32];
    env.reset(Some(0), &mut obs)?;
    for episode in 0..3 {
        for t in 1..=20 {
            let out = env.step(&[1.0], &mut obs)?;
            assert_eq!((obs[0], out.truncated), (t as f32, t == 20), "episode {episode}");
        }
        env.reset(None, &mut obs)?;
        assert_eq!(obs[0], 0.0, "first observation of episode {}", episode + 1);
    }
    Ok(())
}

#[test]
fn an_exception_in_the_reset_after_an_episode_is_an_error() -> TestResult {
    // The worker's own reset at the episode's end fails; the runner's reset then reports it.
    let mut obs = [0.0f32];
    let mut env = raising_on_reset(&mut obs)?;
    for _ in 0..19 {
        env.step(&[0.0], &mut obs)?;
    }
    let last = env.step(&[0.0], &mut obs)?;
    assert_eq!((obs[0], last.truncated), (20.0, true), "the final observation");
    let message = env.reset(None, &mut obs).map_err(|e| e.to_string()).err().unwrap_or_default();
    assert!(message.contains("RuntimeError: reset failed on purpose"), "{message}");
    Ok(())
}

#[test]
fn restart_failed_sub_environments_recreates_only_that_env() -> TestResult {
    let mut s = faulty("raise");
    s.restart_failed_sub_environments = true;
    let mut env = GymEnvPool::new(s).make(0, 0, 0)?;
    let mut obs = [0.0f32];
    env.reset(Some(0), &mut obs)?;
    let mut truncations = 0;
    for _ in 0..12 {
        let out = env.step(&[1.0], &mut obs)?;
        if out.done() {
            assert!(out.truncated && !out.terminated);
            assert_eq!(obs, [2.0], "the episode ends at its last good observation");
            truncations += 1;
            env.reset(None, &mut obs)?;
            assert_eq!(obs, [0.0], "a new env, reset");
        }
    }
    assert_eq!(truncations, 4, "every third step fails and is recovered");
    Ok(())
}

#[test]
fn a_hanging_worker_is_killed_after_the_timeout() -> TestResult {
    let mut s = faulty("hang");
    s.timeout = Duration::from_millis(1500);
    let mut env = GymEnvPool::new(s).make(0, 0, 0)?;
    let pid = env.worker_pid();
    let start = Instant::now();
    let message = step_until_error(&mut env);
    assert!(message.contains("did not answer within 1.5 s"), "{message}");
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(!alive(pid), "the hung worker was killed");
    Ok(())
}

#[test]
fn a_worker_that_dies_is_an_error() -> TestResult {
    let mut env = GymEnvPool::new(faulty("die")).make(0, 0, 0)?;
    let message = step_until_error(&mut env);
    assert!(message.contains("died: exited with status 3"), "{message}");
    // Later calls fail at once with the same cause.
    let mut obs = [0.0f32];
    assert!(env.reset(None, &mut obs).is_err());
    Ok(())
}

/// `ForkThenExit` (its step 3 forks a sleeping child, then the worker exits unless `exit` is
/// false), writing the child's pid to a fresh file named `name` in the temp folder.
fn forking(name: &str, exit: bool) -> (impala_gym::GymSettings, PathBuf) {
    let pid_file = tempfile_dir().join(format!("{name}.pid"));
    let _ = std::fs::remove_file(&pid_file);
    let mut s = settings("impala_test_envs:ForkThenExit");
    let path = pid_file.display().to_string();
    s.env_config = config(&[("pid_file", path.into()), ("exit", exit.into())]);
    (s, pid_file)
}

/// The pid a `ForkThenExit` env wrote (and the file removed).
fn forked_pid(pid_file: &std::path::Path) -> Result<u32, Box<dyn std::error::Error>> {
    let pid = std::fs::read_to_string(pid_file)?.trim().parse()?;
    let _ = std::fs::remove_file(pid_file);
    Ok(pid)
}

/// Whether process `pid` is gone (or a zombie) within `limit`.
fn gone_within(pid: u32, limit: Duration) -> bool {
    let start = Instant::now();
    while alive(pid) && start.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(20));
    }
    !alive(pid)
}

#[test]
fn a_worker_that_dies_leaving_a_forked_child_is_reported_at_once() -> TestResult {
    // The env forks a child that sleeps holding the worker's pipes, then the worker exits: no
    // EOF on the pipe, yet its death is reported at once (not as a hang at the 30 s timeout),
    // and the child goes with it (it is in the worker's process group).
    let (s, pid_file) = forking("forked-child-of-a-dead-worker", true);
    let pool = GymEnvPool::new(s);
    let mut env = pool.make(0, 0, 0)?;
    let start = Instant::now();
    let message = step_until_error(&mut env);
    let took = start.elapsed();
    let child = forked_pid(&pid_file)?;
    drop(env);
    drop(pool);
    let child_gone = gone_within(child, Duration::from_secs(2));
    assert!(message.contains("died: exited with status 0"), "{message}");
    assert!(took < Duration::from_secs(5), "the death was reported after {took:?}");
    assert!(child_gone, "the worker's forked child {child} outlived it");
    Ok(())
}

#[test]
fn what_a_worker_forked_goes_when_the_worker_is_stopped() -> TestResult {
    let (s, pid_file) = forking("forked-child-of-a-stopped-worker", false);
    let pool = GymEnvPool::new(s);
    let mut env = pool.make(0, 0, 0)?;
    let mut obs = [0.0f32];
    env.reset(Some(0), &mut obs)?;
    for _ in 0..5 {
        env.step(&[0.0], &mut obs)?;
    }
    let child = forked_pid(&pid_file)?;
    assert!(alive(child), "the env's child {child} runs beside its worker");
    drop(env);
    drop(pool);
    assert!(gone_within(child, Duration::from_secs(2)), "child {child} outlived its worker");
    Ok(())
}

#[test]
fn prints_on_stdout_do_not_break_the_protocol() -> TestResult {
    let mut env = GymEnvPool::new(faulty("print")).make(0, 0, 0)?;
    assert_eq!(step_until_error(&mut env), "no error");
    Ok(())
}

#[test]
fn start_up_errors_are_one_clear_line() {
    let cases: &[(&str, &[&str])] = &[
        (
            "impala_broken_env:Env",
            &["ModuleNotFoundError", "not_a_real_module_for_impala_tests", "impala_broken_env.py"],
        ),
        ("NoSuchEnv-v9", &["NoSuchEnv", "neither a native env"]),
        ("impala_test_envs:NotThere", &["AttributeError", "NotThere"]),
    ];
    for (env, needles) in cases {
        let error =
            GymEnvPool::new(settings(env)).probe().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(!error.contains('\n'), "{error}");
        for needle in *needles {
            assert!(error.contains(needle), "{env}: {needle:?} missing from {error:?}");
        }
    }
    let mut s = settings("impala_test_envs:MatchBit");
    s.env_config = config(&[("no_such_kwarg", 1.into())]);
    let error = GymEnvPool::new(s).probe().err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        error.contains("unexpected keyword argument") && error.contains("env_config"),
        "{error}"
    );
}

#[test]
fn a_missing_interpreter_says_how_to_fix_it() {
    let mut s = settings("CartPole-v1");
    s.python = PathBuf::from("/no/such/python3");
    let error = GymEnvPool::new(s).probe().err();
    assert!(matches!(error, Some(GymError::PythonNotFound { .. })), "{error:?}");
    let message = error.map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("IMPALA_PYTHON") && message.contains("/no/such/python3"), "{message}");
}

#[test]
fn an_interpreter_without_gymnasium_is_named() {
    // An interpreter that cannot import gymnasium: the default one behind a wrapper that
    // blocks the import.
    let dir = tempfile_dir();
    let wrapper = dir.join("python-without-gymnasium");
    let real = impala_gym::default_python();
    let script = format!(
        "#!/bin/sh\nexec {} -c 'import sys; sys.modules[\"gymnasium\"] = None; exec(sys.argv.pop(1))' \"$2\" \"$3\"\n",
        real.display()
    );
    std::fs::write(&wrapper, script).ok();
    set_executable(&wrapper);
    let mut s = settings("CartPole-v1");
    s.python = wrapper;
    let message = GymEnvPool::new(s).probe().err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        message.contains("gymnasium") && message.contains("pip install gymnasium"),
        "{message}"
    );
}

/// Run as a child of this test binary (see `workers_die_with_their_parent`): starts a worker
/// (with `IMPALA_GYM_ORPHAN_PARENT=fork:<file>`, one whose env forked a child and wrote its pid
/// to the file), prints its pid and waits to be killed.
#[test]
fn orphan_parent() -> TestResult {
    let Some(mode) = std::env::var_os("IMPALA_GYM_ORPHAN_PARENT") else {
        return Ok(());
    };
    let env = match mode.to_str().and_then(|m| m.strip_prefix("fork:")) {
        Some(pid_file) => {
            let mut s = settings("impala_test_envs:ForkThenExit");
            s.env_config = config(&[("pid_file", pid_file.into()), ("exit", false.into())]);
            let mut env = GymEnvPool::new(s).make(0, 0, 0)?;
            let mut obs = [0.0f32];
            env.reset(Some(0), &mut obs)?;
            for _ in 0..3 {
                env.step(&[0.0], &mut obs)?;
            }
            env
        }
        None => GymEnvPool::new(crate::settings("CartPole-v1")).make(0, 0, 0)?,
    };
    println!("worker-pid={}", env.worker_pid());
    std::thread::sleep(Duration::from_secs(600));
    Ok(())
}

#[test]
fn workers_die_with_their_parent() -> TestResult {
    let (mut parent, pid) = orphan_parent_process("1")?;
    assert!(alive(pid));
    parent.kill()?; // SIGKILL: the parent cannot clean up
    parent.wait()?;
    assert!(gone_within(pid, Duration::from_secs(5)), "worker {pid} outlived its SIGKILLed parent");
    Ok(())
}

#[test]
fn what_a_worker_forked_dies_with_the_workers_parent() -> TestResult {
    let pid_file = tempfile_dir().join("forked-child-of-an-orphan.pid");
    let _ = std::fs::remove_file(&pid_file);
    let (mut parent, worker) = orphan_parent_process(&format!("fork:{}", pid_file.display()))?;
    let child = forked_pid(&pid_file)?;
    assert!(alive(worker) && alive(child));
    parent.kill()?; // SIGKILL: only the worker's watchdog is left to clean up
    parent.wait()?;
    assert!(gone_within(worker, Duration::from_secs(5)), "worker {worker} outlived its parent");
    assert!(gone_within(child, Duration::from_secs(2)), "the env's child {child} outlived them");
    Ok(())
}

/// Runs `orphan_parent` in a child of this test binary; returns the child and its worker's pid.
fn orphan_parent_process(
    mode: &str,
) -> Result<(std::process::Child, u32), Box<dyn std::error::Error>> {
    use std::io::BufRead;
    let mut parent = std::process::Command::new(std::env::current_exe()?)
        .args(["--exact", "faults::orphan_parent", "--nocapture", "--test-threads=1"])
        .env("IMPALA_GYM_ORPHAN_PARENT", mode)
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let stdout = parent.stdout.take().ok_or("no stdout")?;
    let mut pid = None;
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line?;
        // libtest prints the test's name on the same line.
        if let Some((_, p)) = line.split_once("worker-pid=") {
            pid = Some(p.trim().parse::<u32>()?);
            break;
        }
    }
    let pid = pid.ok_or("the parent printed no worker pid")?;
    Ok((parent, pid))
}

#[test]
fn a_ctrl_c_for_the_process_group_leaves_workers_stepping() -> TestResult {
    let mut env = GymEnvPool::new(settings("CartPole-v1")).make(0, 0, 0)?;
    let mut obs = vec![0.0; 4];
    env.reset(Some(0), &mut obs)?;
    let pid = env.worker_pid();
    let sent = std::process::Command::new("kill").args(["-INT", &pid.to_string()]).status()?;
    assert!(sent.success());
    std::thread::sleep(Duration::from_millis(300));
    assert!(alive(pid), "SIGINT killed worker {pid}");
    env.step(&[1.0], &mut obs)?;
    Ok(())
}

/// Whether process `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
        .unwrap_or(false)
}

fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("impala-gym-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok();
    dir
}

fn set_executable(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).ok();
}
