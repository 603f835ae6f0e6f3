//! `make`, `make_stateful`, `list` and `register`: ids, time limits and `env_config` checking.
//!
//! The registry is process-wide and the tests run in parallel threads: each test registers its
//! own ids, and tests that list envs only look at the ones they know.

use crate::TestResult;
use impala_core::{CoreError, Env, EnvSpec, Space, StepOutcome};
use impala_envs::{list, make, make_stateful, register, EnvConfig, EnvError, Registration};
use serde_json::json;

const NATIVES: [&str; 4] = ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1"];

fn config(value: serde_json::Value) -> Result<EnvConfig, serde_json::Error> {
    serde_json::from_value(value)
}

#[test]
fn lists_the_gymnasium_time_limits() -> TestResult {
    let infos = list()?;
    // The natives come first; other tests may have registered more envs after them.
    let limits: Vec<(String, Option<usize>)> =
        infos.iter().take(4).map(|i| (i.spec.id.clone(), i.spec.max_episode_steps)).collect();
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
    assert_eq!(known[..4], NATIVES); // then any registered ids
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

/// A 1-D corridor of `length` cells: action 1 steps right, 0 steps left (not past cell 0);
/// reward -1 per step, terminated at the last cell. Observation: the position.
struct Corridor {
    spec: EnvSpec,
    length: u64,
    position: u64,
}

impl Env for Corridor {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    fn reset(&mut self, _seed: Option<u64>, obs: &mut [f32]) -> Result<(), CoreError> {
        self.position = 0;
        obs.fill(0.0);
        Ok(())
    }

    fn step(&mut self, action: &[f32], obs: &mut [f32]) -> Result<StepOutcome, CoreError> {
        match action {
            [a] if *a == 1.0 => self.position += 1,
            [a] if *a == 0.0 => self.position = self.position.saturating_sub(1),
            _ => {
                return Err(CoreError::InvalidAction {
                    action: action.to_vec(),
                    space: self.spec.action_space.to_string(),
                    reason: "expected 0 or 1".into(),
                })
            }
        }
        obs.fill(self.position as f32);
        let terminated = self.position == self.length;
        Ok(StepOutcome { reward: -1.0, terminated, truncated: false })
    }
}

/// The corridor's creator: takes `length` (default 5) and refuses any other key, as a creator
/// should. Its spec's id is always `Corridor`, whatever id it is registered under.
fn corridor(config: &EnvConfig) -> impala_envs::Result<Box<dyn Env>> {
    if let Some(key) = config.keys().find(|k| k.as_str() != "length") {
        return Err(EnvError::UnknownConfigKey {
            env: "Corridor".into(),
            key: key.clone(),
            suggestion: None,
            accepted: vec!["length".into()],
        });
    }
    let length = match config.get("length") {
        None => 5,
        Some(v) => v.as_u64().filter(|&n| n > 0).ok_or_else(|| EnvError::InvalidConfigValue {
            env: "Corridor".into(),
            key: "length".into(),
            expected: "a positive integer".into(),
            got: v.to_string(),
        })?,
    };
    let spec = EnvSpec {
        id: "Corridor".into(),
        observation_space: Space::continuous(vec![0.0], vec![length as f32])?,
        action_space: Space::Discrete(2),
        max_episode_steps: None,
    };
    Ok(Box::new(Corridor { spec, length, position: 0 }))
}

/// Steps `env` with `action` until the episode ends (at most `limit` steps); returns the step
/// count and whether it ended truncated rather than terminated.
fn run_episode(env: &mut dyn Env, action: f32, limit: usize) -> Result<(usize, bool), CoreError> {
    let mut obs = [0.0f32];
    env.reset(Some(0), &mut obs)?;
    for step in 1..=limit {
        let outcome = env.step(&[action], &mut obs)?;
        if outcome.done() {
            return Ok((step, outcome.truncated && !outcome.terminated));
        }
    }
    Ok((limit, false))
}

#[test]
fn registered_env_gets_its_time_limit_and_env_config_overrides_it() -> TestResult {
    register(Registration::new("test/Corridor-limit-v0", corridor).max_episode_steps(4))?;

    // Stepping left never reaches the end: only the time limit ends the episode.
    let mut env = make("test/Corridor-limit-v0", &EnvConfig::new())?;
    assert_eq!(env.spec().max_episode_steps, Some(4));
    assert_eq!(run_episode(env.as_mut(), 0.0, 100)?, (4, true));

    // max_episode_steps overrides the registered 4 and is not passed on (the creator refuses
    // unknown keys); the other keys are.
    let short = config(json!({"max_episode_steps": 2, "length": 9}))?;
    let mut env = make("test/Corridor-limit-v0", &short)?;
    assert_eq!(env.spec().max_episode_steps, Some(2));
    assert_eq!(run_episode(env.as_mut(), 0.0, 100)?, (2, true));
    let long = config(json!({"max_episode_steps": 20, "length": 3}))?;
    let mut env = make("test/Corridor-limit-v0", &long)?;
    assert_eq!(run_episode(env.as_mut(), 1.0, 100)?, (3, false));

    for bad in [json!(0), json!(-1), json!("2"), json!(1.5)] {
        let err = make("test/Corridor-limit-v0", &config(json!({"max_episode_steps": bad}))?).err();
        let Some(EnvError::InvalidConfigValue { env, key, .. }) = &err else {
            panic!("expected InvalidConfigValue for {bad}, got {err:?}");
        };
        assert_eq!((env.as_str(), key.as_str()), ("test/Corridor-limit-v0", "max_episode_steps"));
    }
    Ok(())
}

#[test]
fn registered_env_without_a_limit_gets_one_only_from_env_config() -> TestResult {
    register(Registration::new("test/Corridor-nolimit-v0", corridor))?;
    let mut env = make("test/Corridor-nolimit-v0", &EnvConfig::new())?;
    assert_eq!(env.spec().max_episode_steps, None);
    assert_eq!(run_episode(env.as_mut(), 0.0, 50)?, (50, false)); // never ends

    let env = make("test/Corridor-nolimit-v0", &config(json!({"max_episode_steps": 7}))?)?;
    assert_eq!(env.spec().max_episode_steps, Some(7));
    Ok(())
}

#[test]
fn creator_checks_its_own_env_config() -> TestResult {
    register(Registration::new("test/Corridor-kwargs-v0", corridor).config_keys(["length"]))?;
    let err = make("test/Corridor-kwargs-v0", &config(json!({"lenght": 3}))?).err();
    assert!(
        matches!(&err, Some(EnvError::UnknownConfigKey { key, .. }) if key == "lenght"),
        "{err:?}"
    );
    let err = make("test/Corridor-kwargs-v0", &config(json!({"length": 0}))?).err();
    assert!(matches!(err, Some(EnvError::InvalidConfigValue { .. })), "{err:?}");
    Ok(())
}

#[test]
fn registered_env_reports_the_id_it_was_made_with() -> TestResult {
    // One creator under two ids, as Gymnasium's make sets env.spec from the registration.
    let short = |config: &EnvConfig| {
        let mut config = config.clone();
        config.insert("length".into(), json!(2));
        corridor(&config)
    };
    register(Registration::new("test/Corridor-short-v0", short))?;
    register(Registration::new("test/Corridor-long-v0", corridor))?;
    let mut env = make("test/Corridor-short-v0", &EnvConfig::new())?;
    assert_eq!(env.spec().id, "test/Corridor-short-v0");
    assert_eq!(run_episode(env.as_mut(), 1.0, 100)?, (2, false));
    let mut env = make("test/Corridor-long-v0", &EnvConfig::new())?;
    assert_eq!(env.spec().id, "test/Corridor-long-v0");
    assert_eq!(run_episode(env.as_mut(), 1.0, 100)?, (5, false));
    Ok(())
}

#[test]
fn list_shows_registered_envs_after_the_natives_sorted_by_id() -> TestResult {
    register(
        Registration::new("test/List-b-v0", corridor)
            .max_episode_steps(30)
            .reward_threshold(-6.0)
            .config_keys(["length"]),
    )?;
    // A creator may call make itself (it runs outside the registry's lock).
    register(Registration::new("test/List-a-v0", |config: &EnvConfig| {
        make("CartPole-v1", config)
    }))?;

    let infos = list()?;
    let ids: Vec<&str> = infos.iter().map(|i| i.spec.id.as_str()).collect();
    assert_eq!(ids[..4], NATIVES);
    let position = |id: &str| ids.iter().position(|i| *i == id);
    let (Some(a), Some(b)) = (position("test/List-a-v0"), position("test/List-b-v0")) else {
        panic!("registered envs missing from {ids:?}");
    };
    assert!(4 <= a && a < b, "{ids:?}");
    let mut registered = ids[4..].to_vec();
    registered.sort_unstable();
    assert_eq!(registered, ids[4..]);

    let info = &infos[b];
    assert_eq!(info.spec.max_episode_steps, Some(30));
    assert_eq!(info.spec.observation_space, Space::continuous(vec![0.0], vec![5.0])?);
    assert_eq!(info.reward_threshold, Some(-6.0));
    assert_eq!(info.config_keys, ["max_episode_steps", "length"]);
    // The wrapped CartPole keeps CartPole-v1's own time limit.
    assert_eq!(infos[a].spec.max_episode_steps, Some(500));
    assert_eq!(infos[a].config_keys, ["max_episode_steps"]);
    Ok(())
}

#[test]
fn taken_ids_are_refused() -> TestResult {
    register(Registration::new("test/Corridor-dup-v0", corridor).max_episode_steps(3))?;
    let err = register(Registration::new("test/Corridor-dup-v0", corridor)).err();
    assert_eq!(err, Some(EnvError::AlreadyRegistered { id: "test/Corridor-dup-v0".into() }));
    let msg = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("another id"), "{msg}");
    // The first registration stands.
    assert_eq!(make("test/Corridor-dup-v0", &EnvConfig::new())?.spec().max_episode_steps, Some(3));

    for native in NATIVES {
        let err = register(Registration::new(native, corridor)).err();
        assert!(matches!(err, Some(EnvError::AlreadyRegistered { .. })), "{native}: {err:?}");
    }
    assert_eq!(make("CartPole-v1", &EnvConfig::new())?.spec().observation_space.flat_dim(), 4);
    Ok(())
}

#[test]
fn one_of_many_threads_registering_an_id_wins() {
    let results: Vec<Result<(), EnvError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|_| scope.spawn(|| register(Registration::new("test/Corridor-race-v0", corridor))))
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    assert_eq!(results.len(), 8);
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1, "{results:?}");
}

#[test]
fn unusable_registrations_are_refused() {
    for (registration, why) in [
        (Registration::new("", corridor), "empty"),
        (Registration::new("my corridor", corridor), "whitespace"),
        (Registration::new("test/Corridor-zero-v0", corridor).max_episode_steps(0), "at least 1"),
        (Registration::new("test/Corridor-nan-v0", corridor).reward_threshold(f64::NAN), "finite"),
    ] {
        let id = registration.id.clone();
        let err = register(registration).err();
        assert!(matches!(err, Some(EnvError::InvalidRegistration { .. })), "{id:?}: {err:?}");
        let msg = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains(why), "{msg}");
    }
    // Refused ids stay free.
    assert!(make("test/Corridor-zero-v0", &EnvConfig::new()).is_err());
}

#[test]
fn unknown_id_suggests_a_registered_one() -> TestResult {
    register(Registration::new("test/Corridor-suggest-v0", corridor))?;
    let err = make("test/corridor-suggest-v1", &EnvConfig::new()).err();
    let Some(EnvError::UnknownEnv { suggestion, known, .. }) = &err else {
        panic!("expected UnknownEnv, got {err:?}");
    };
    assert_eq!(suggestion.as_deref(), Some("test/Corridor-suggest-v0"));
    assert_eq!(known[..4], NATIVES);
    assert!(known.iter().any(|id| id == "test/Corridor-suggest-v0"), "{known:?}");
    Ok(())
}

#[test]
fn make_stateful_builds_natives_only() -> TestResult {
    register(Registration::new("test/Corridor-stateful-v0", corridor))?;
    let err = make_stateful("test/Corridor-stateful-v0", &EnvConfig::new()).err();
    assert_eq!(err, Some(EnvError::NotStateful { id: "test/Corridor-stateful-v0".into() }));
    let err = make_stateful("test/Nowhere-v0", &EnvConfig::new()).err();
    assert!(matches!(err, Some(EnvError::UnknownEnv { .. })), "{err:?}");
    assert_eq!(make_stateful("Acrobot-v1", &EnvConfig::new())?.state().len(), 4);
    Ok(())
}
