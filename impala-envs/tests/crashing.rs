//! `CartPoleCrashing-v1`: crashes and stalls as configured, CartPole-v1 otherwise, and
//! `env_config` errors that name the key.

use crate::TestResult;
use impala_core::{CoreError, Env};
use impala_envs::{
    list, make, make_for_worker, make_stateful, CartPoleCrashingConfig, EnvConfig, EnvError,
};
use serde_json::json;
use std::time::{Duration, Instant};

const ID: &str = "CartPoleCrashing-v1";

fn config(value: serde_json::Value) -> Result<EnvConfig, serde_json::Error> {
    serde_json::from_value(value)
}

fn crash_error(e: &CoreError) -> bool {
    matches!(e, CoreError::Env { env, reason } if env == ID && reason.contains("simulated crash"))
}

fn is_crash<T>(result: &Result<T, CoreError>) -> bool {
    result.as_ref().err().is_some_and(crash_error)
}

/// A deterministic action sequence that mixes both actions.
fn action(t: usize) -> [f32; 1] {
    [((t * 7 + t / 3) % 2) as f32]
}

#[test]
fn without_crashes_it_is_cartpole_v1() -> TestResult {
    let mut crashing = make(ID, &config(json!({"p_crash": 0.0}))?)?;
    let mut cartpole = make("CartPole-v1", &EnvConfig::new())?;
    assert_eq!(crashing.spec().id, ID);
    assert_eq!(
        (&crashing.spec().observation_space, &crashing.spec().action_space),
        (&cartpole.spec().observation_space, &cartpole.spec().action_space)
    );
    assert_eq!(crashing.spec().max_episode_steps, Some(500));
    let (mut a, mut b) = ([0.0f32; 4], [0.0f32; 4]);
    let mut episodes = 0;
    let mut seed = Some(7);
    crashing.reset(seed, &mut a)?;
    cartpole.reset(seed, &mut b)?;
    for t in 0..5000 {
        assert_eq!(a.map(f32::to_bits), b.map(f32::to_bits), "step {t}");
        let (x, y) = (crashing.step(&action(t), &mut a)?, cartpole.step(&action(t), &mut b)?);
        assert_eq!(x, y, "step {t}");
        if x.done() {
            episodes += 1;
            seed = None;
            crashing.reset(seed, &mut a)?;
            cartpole.reset(seed, &mut b)?;
        }
    }
    assert!(episodes > 50, "{episodes}");
    Ok(())
}

#[test]
fn p_crash_one_fails_the_first_step_until_reset() -> TestResult {
    let mut env = make(ID, &config(json!({"p_crash": 1.0}))?)?;
    let mut obs = [0.0f32; 4];
    env.reset(Some(0), &mut obs)?;
    let crash = env.step(&[0.0], &mut obs);
    assert!(is_crash(&crash), "{crash:?}");
    let message = crash.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("CartPoleCrashing-v1") && message.contains("p_crash"), "{message}");
    // After a crash the env must be reset; it then crashes again on its next step.
    assert!(matches!(env.step(&[0.0], &mut obs), Err(CoreError::NeedsReset { .. })));
    env.reset(None, &mut obs)?;
    assert!(is_crash(&env.step(&[1.0], &mut obs)));
    Ok(())
}

#[test]
fn p_crash_reset_one_fails_every_reset() -> TestResult {
    let mut env = make(ID, &config(json!({"p_crash": 0.0, "p_crash_reset": 1.0}))?)?;
    let mut obs = [0.0f32; 4];
    for seed in [Some(1), None] {
        let crash = env.reset(seed, &mut obs);
        assert!(is_crash(&crash), "{crash:?}");
        assert!(crash.err().is_some_and(|e| e.to_string().contains("reset")));
        assert!(matches!(env.step(&[0.0], &mut obs), Err(CoreError::NeedsReset { .. })));
    }
    Ok(())
}

#[test]
fn crash_after_n_steps_fires_once_at_that_step_of_the_envs_life() -> TestResult {
    for (value, window) in [(json!(37), 37..38), (json!([20, 60]), 20..60)] {
        let mut env = make(ID, &config(json!({"p_crash": 0.0, "crash_after_n_steps": value}))?)?;
        let mut obs = [0.0f32; 4];
        env.reset(Some(3), &mut obs)?;
        let (mut crashes, mut episodes) = (Vec::new(), 0);
        // Life steps 1..=2000: many episodes, one crash.
        for n in 1..=2000 {
            match env.step(&action(n), &mut obs) {
                Ok(outcome) if outcome.done() => {
                    episodes += 1;
                    env.reset(None, &mut obs)?;
                }
                Ok(_) => {}
                Err(e) => {
                    assert!(crash_error(&e), "{e}");
                    crashes.push(n);
                    env.reset(None, &mut obs)?;
                }
            }
        }
        assert_eq!(crashes.len(), 1, "{crashes:?}");
        assert!(window.contains(&crashes[0]), "{crashes:?} not in {window:?}");
        assert!(episodes > 20, "{episodes}");
    }
    Ok(())
}

#[test]
fn crashes_are_reproducible_from_the_seed() -> TestResult {
    let crash_steps = |seed: u64| -> Result<Vec<usize>, Box<dyn std::error::Error>> {
        let mut env = make(ID, &config(json!({"p_crash": 0.02}))?)?;
        let mut obs = [0.0f32; 4];
        env.reset(Some(seed), &mut obs)?;
        let mut crashes = Vec::new();
        for n in 1..=3000 {
            match env.step(&action(n), &mut obs) {
                Ok(outcome) if !outcome.done() => {}
                Ok(_) => env.reset(None, &mut obs)?,
                Err(_) => {
                    crashes.push(n);
                    env.reset(None, &mut obs)?;
                }
            }
        }
        Ok(crashes)
    };
    let first = crash_steps(11)?;
    assert_eq!(first, crash_steps(11)?);
    assert_ne!(first, crash_steps(12)?);
    // About 2% of 3000 steps.
    assert!((30..=90).contains(&first.len()), "{}", first.len());
    Ok(())
}

#[test]
fn stalls_sleep_for_stall_time_sec() -> TestResult {
    let stall = Duration::from_millis(60);
    let timed = |env: &mut Box<dyn Env>, obs: &mut [f32; 4], t: usize| {
        let start = Instant::now();
        env.step(&action(t), obs).map(|_| start.elapsed())
    };
    // Every step stalls.
    let mut env =
        make(ID, &config(json!({"p_crash": 0, "p_stall": 1.0, "stall_time_sec": 0.06}))?)?;
    let mut obs = [0.0f32; 4];
    env.reset(Some(0), &mut obs)?;
    assert!(timed(&mut env, &mut obs, 0)? >= stall);
    // Only life step 2 stalls.
    let mut env = make(
        ID,
        &config(json!({"p_crash": 0, "stall_after_n_steps": 2, "stall_time_sec": [0.06, 0.07]}))?,
    )?;
    env.reset(Some(0), &mut obs)?;
    let times = [timed(&mut env, &mut obs, 0)?, timed(&mut env, &mut obs, 1)?];
    assert!(times[0] < stall && times[1] >= stall, "{times:?}");
    // Resets stall.
    let mut env =
        make(ID, &config(json!({"p_crash": 0, "p_stall_reset": 1.0, "stall_time_sec": 0.06}))?)?;
    let start = Instant::now();
    env.reset(Some(0), &mut obs)?;
    assert!(start.elapsed() >= stall);
    Ok(())
}

#[test]
fn bad_values_are_errors_that_name_the_key() -> TestResult {
    for (bad, key) in [
        (json!({"p_crash": -0.1}), "p_crash"),
        (json!({"p_crash": 1.5}), "p_crash"),
        (json!({"p_crash": "0.1"}), "p_crash"),
        (json!({"p_crash": true}), "p_crash"),
        (json!({"p_crash": null}), "p_crash"),
        (json!({"p_crash_reset": 2}), "p_crash_reset"),
        (json!({"p_stall": -1, "stall_time_sec": 1}), "p_stall"),
        (json!({"p_stall_reset": "often", "stall_time_sec": 1}), "p_stall_reset"),
        (json!({"crash_after_n_steps": 0}), "crash_after_n_steps"),
        (json!({"crash_after_n_steps": -3}), "crash_after_n_steps"),
        (json!({"crash_after_n_steps": 2.5}), "crash_after_n_steps"),
        (json!({"crash_after_n_steps": [50, 10]}), "crash_after_n_steps"),
        (json!({"crash_after_n_steps": [1, 2, 3]}), "crash_after_n_steps"),
        (json!({"stall_after_n_steps": "10", "stall_time_sec": 1}), "stall_after_n_steps"),
        (json!({"stall_time_sec": -1}), "stall_time_sec"),
        (json!({"stall_time_sec": [2, 1]}), "stall_time_sec"),
        (json!({"init_time_s": "slow"}), "init_time_s"),
        // A stall needs its duration.
        (json!({"p_stall": 0.1}), "stall_time_sec"),
    ] {
        let err = make(ID, &config(bad.clone())?).err();
        let Some(EnvError::InvalidConfigValue { env, key: got, .. }) = &err else {
            panic!("{bad}: expected InvalidConfigValue, got {err:?}");
        };
        assert_eq!((env.as_str(), got.as_str()), (ID, key), "{bad}");
        let message = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains(&format!("`{key}`")), "{message}");
    }
    // RLlib's per-worker keys cannot work here: refused, with the reason.
    let err = make(ID, &config(json!({"crash_on_worker_indices": [1]}))?).err();
    assert!(
        matches!(&err, Some(EnvError::UnsupportedConfigKey { key, .. }) if key == "crash_on_worker_indices"),
        "{err:?}"
    );
    let unknown = make(ID, &config(json!({"p_crashh": 0.1}))?).err();
    assert!(
        matches!(&unknown, Some(EnvError::UnknownConfigKey { suggestion: Some(s), .. }) if s == "p_crash"),
        "{unknown:?}"
    );
    Ok(())
}

#[test]
fn is_listed_with_its_keys_and_rllibs_defaults() -> TestResult {
    let infos = list()?;
    let info = infos.iter().find(|i| i.spec.id == ID).ok_or("CartPoleCrashing-v1 not listed")?;
    assert_eq!(
        info.config_keys,
        [
            "max_episode_steps",
            "p_crash",
            "p_crash_reset",
            "crash_after_n_steps",
            "p_stall",
            "p_stall_reset",
            "stall_after_n_steps",
            "stall_time_sec",
            "init_time_s"
        ]
    );
    assert_eq!(info.reward_threshold, Some(475.0));
    assert_eq!(info.spec.max_episode_steps, Some(500));
    let defaults = CartPoleCrashingConfig::default();
    assert_eq!((defaults.p_crash, defaults.p_crash_reset), (0.005, 0.0));
    // make_stateful builds it too, and reset_to_state draws the reset's crash.
    let mut env = make_stateful(ID, &config(json!({"p_crash_reset": 1.0}))?)?;
    let mut obs = [0.0f32; 4];
    assert!(is_crash(&env.reset_to_state(&[0.0; 4], &mut obs)));
    Ok(())
}

#[test]
fn crashes_and_stalls_stay_on_the_listed_env_runners() -> TestResult {
    let mut obs = [0.0f32; 4];
    // Worker 0 is the local runner, 1.. the others (RLlib's `worker_index`).
    let crashes = config(json!({"crash_after_n_steps": 1, "crash_on_worker_indices": [1, 2]}))?;
    for (worker, crashing) in [(0, false), (1, true), (2, true), (3, false)] {
        let mut env = make_for_worker(ID, &crashes, worker)?;
        env.reset(Some(0), &mut obs)?;
        assert_eq!(is_crash(&env.step(&[0.0], &mut obs)), crashing, "worker {worker}");
    }
    // p_crash_reset too, and an empty list spares nobody (RLlib: only a non-empty list filters).
    let resets = config(json!({"p_crash_reset": 1.0, "crash_on_worker_indices": [2]}))?;
    assert!(make_for_worker(ID, &resets, 1)?.reset(Some(0), &mut obs).is_ok());
    assert!(is_crash(&make_for_worker(ID, &resets, 2)?.reset(Some(0), &mut obs)));
    let everyone = config(json!({"p_crash_reset": 1.0, "crash_on_worker_indices": []}))?;
    assert!(is_crash(&make_for_worker(ID, &everyone, 5)?.reset(Some(0), &mut obs)));

    // Stalls: a 0.3 s stall at the first step, only on worker 1.
    let stalls = config(json!({
        "p_crash": 0.0, "stall_after_n_steps": 1, "stall_time_sec": 0.3, "stall_on_worker_indices": [1]
    }))?;
    for (worker, stalls_here) in [(1, true), (2, false)] {
        let mut env = make_for_worker(ID, &stalls, worker)?;
        env.reset(Some(0), &mut obs)?;
        let start = Instant::now();
        env.step(&[0.0], &mut obs)?;
        assert_eq!(start.elapsed() >= Duration::from_millis(300), stalls_here, "worker {worker}");
    }

    // A list that is not of indices names the key.
    let bad = config(json!({"crash_on_worker_indices": [1, -2]}))?;
    let err = make_for_worker(ID, &bad, 1).err();
    assert!(
        matches!(&err, Some(EnvError::InvalidConfigValue { key, .. }) if key == "crash_on_worker_indices"),
        "{err:?}"
    );
    Ok(())
}
