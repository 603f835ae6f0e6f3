//! `make`, `make_stateful` and `list`: ids, time limits and `env_config` checking.

use crate::TestResult;
use impala_envs::{list, make, EnvConfig, EnvError};
use serde_json::json;

fn config(value: serde_json::Value) -> Result<EnvConfig, serde_json::Error> {
    serde_json::from_value(value)
}

#[test]
fn lists_the_gymnasium_time_limits() -> TestResult {
    let infos = list()?;
    let limits: Vec<(String, Option<usize>)> =
        infos.iter().map(|i| (i.spec.id.clone(), i.spec.max_episode_steps)).collect();
    let expected =
        [("CartPole-v1", 500), ("Acrobot-v1", 500), ("MountainCar-v0", 200), ("Pendulum-v1", 200)];
    assert_eq!(limits, expected.map(|(id, n)| (id.to_string(), Some(n))));
    assert_eq!(infos[3].config_keys, ["max_episode_steps", "g"]);
    assert_eq!(infos[0].reward_threshold, Some(475.0));
    Ok(())
}

#[test]
fn unknown_id_lists_known_ids_and_the_nearest() {
    let err = make("cartpole-v0", &EnvConfig::new()).err();
    let Some(EnvError::UnknownEnv { suggestion, known, .. }) = &err else {
        panic!("expected UnknownEnv, got {err:?}");
    };
    assert_eq!(suggestion.as_deref(), Some("CartPole-v1"));
    assert_eq!(known.len(), 4);
    let msg = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("Acrobot-v1, MountainCar-v0, Pendulum-v1"), "{msg}");

    let far = make("Breakout", &EnvConfig::new()).err();
    assert!(matches!(far, Some(EnvError::UnknownEnv { suggestion: None, .. })), "{far:?}");
}

#[test]
fn unknown_config_keys_are_errors() -> TestResult {
    let err = make("Pendulum-v1", &config(json!({"max_episode_step": 10}))?).err();
    let Some(EnvError::UnknownConfigKey { key, suggestion, accepted, .. }) = &err else {
        panic!("expected UnknownConfigKey, got {err:?}");
    };
    assert_eq!(
        (key.as_str(), suggestion.as_deref()),
        ("max_episode_step", Some("max_episode_steps"))
    );
    assert_eq!(accepted, &["max_episode_steps", "g"]);
    // Another env's keyword is unknown here.
    assert!(make("CartPole-v1", &config(json!({"g": 9.81}))?).is_err());
    Ok(())
}

#[test]
fn invalid_config_values_are_errors() -> TestResult {
    for (id, bad) in [
        ("CartPole-v1", json!({"max_episode_steps": 0})),
        ("CartPole-v1", json!({"max_episode_steps": -5})),
        ("CartPole-v1", json!({"max_episode_steps": "10"})),
        ("CartPole-v1", json!({"max_episode_steps": 1.5})),
        ("CartPole-v1", json!({"sutton_barto_reward": 1})),
        ("Pendulum-v1", json!({"g": "ten"})),
        ("MountainCar-v0", json!({"goal_velocity": null})),
    ] {
        let err = make(id, &config(bad.clone())?).err();
        assert!(matches!(err, Some(EnvError::InvalidConfigValue { .. })), "{id} {bad}: {err:?}");
    }
    Ok(())
}

#[test]
fn env_config_sets_time_limit_and_kwargs() -> TestResult {
    let mut env = make("Pendulum-v1", &config(json!({"max_episode_steps": 7, "g": 0.0}))?)?;
    assert_eq!(env.spec().max_episode_steps, Some(7));
    let mut obs = [0.0f32; 3];
    env.reset(Some(0), &mut obs)?;
    let start = obs;
    let mut truncated = Vec::new();
    for _ in 0..7 {
        truncated.push(env.step(&[0.0], &mut obs)?.truncated);
    }
    assert_eq!(truncated, [false, false, false, false, false, false, true]);
    // Without gravity or torque the angular velocity stays constant.
    assert!((obs[2] - start[2]).abs() < 1e-6);

    let mut env = make("CartPole-v1", &config(json!({"sutton_barto_reward": true}))?)?;
    let mut obs = [0.0f32; 4];
    env.reset(Some(0), &mut obs)?;
    assert_eq!(env.step(&[0.0], &mut obs)?.reward, 0.0);
    Ok(())
}
