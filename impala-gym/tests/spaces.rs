//! Spaces come from the env: Dict observations flattened, image observations scaled, every
//! action space, Box actions clipped, observations outside their bounds warned of once.

use std::sync::{Arc, Mutex, PoisonError};

use impala_core::{Env, Space};
use impala_gym::GymEnvPool;

use crate::{config, settings, settings_n, TestResult};

fn spaces_env(action: &str) -> Result<impala_gym::GymEnv, impala_gym::GymError> {
    let mut s = settings("impala_test_envs:Spaces");
    s.env_config = config(&[("action", action.into())]);
    GymEnvPool::new(s).make(0, 0, 0)
}

#[test]
fn dict_observations_are_flattened_in_gymnasium_order() -> TestResult {
    let mut env = spaces_env("box")?;
    // gymnasium sorts Dict keys: bits (MultiBinary 2), mode (Discrete 3, one-hot), pos (Box 2).
    let Space::Box { shape, .. } = &env.spec().observation_space else {
        return Err("not a Box".into());
    };
    assert_eq!(shape, &[7]);
    let mut obs = [0.0f32; 7];
    env.reset(Some(0), &mut obs)?;
    assert_eq!(obs, [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]);
    // Box actions are clipped to [-1, 1] before the env sees them.
    env.step(&[0.5, 7.0], &mut obs)?;
    assert_eq!(&obs[5..], &[0.5, 1.0]);
    Ok(())
}

#[test]
fn discrete_action_spaces() -> TestResult {
    let mut env = spaces_env("multi_discrete")?;
    assert_eq!(env.spec().action_space, Space::MultiDiscrete(vec![3, 4]));
    let mut obs = [0.0f32; 7];
    env.reset(Some(0), &mut obs)?;
    env.step(&[2.0, 3.0], &mut obs)?;
    assert_eq!(&obs[5..], &[2.0, 3.0]);
    assert!(env.step(&[3.0, 0.0], &mut obs).is_err(), "index out of range is refused");
    let env = spaces_env("multi_binary")?;
    assert_eq!(env.spec().action_space, Space::MultiDiscrete(vec![2, 2]));
    Ok(())
}

#[test]
fn uint8_images_arrive_as_bytes_in_hwc_order() -> TestResult {
    let mut s = settings("impala_test_envs:Image");
    s.env_config = config(&[("height", 6.into()), ("width", 4.into()), ("channels", 3.into())]);
    let mut env = GymEnvPool::new(s).make(0, 0, 0)?;
    assert_eq!(env.spec().observation_space, Space::Bytes { shape: vec![6, 4, 3] });
    let mut obs = vec![0.0f32; 72];
    env.reset(Some(0), &mut obs)?;
    // One half of the columns is 255, the other 20, in every row and channel (HWC).
    let column = |i: usize| (i / 3) % 4;
    let bright: Vec<usize> = (0..4).filter(|&w| obs[w * 3] == 255.0).collect();
    assert!(bright == [0, 1] || bright == [2, 3], "{obs:?}");
    for (i, &v) in obs.iter().enumerate() {
        assert_eq!(v, if bright.contains(&column(i)) { 255.0 } else { 20.0 }, "value {i}");
    }
    Ok(())
}

#[test]
fn discrete_observations_are_indices() -> TestResult {
    let mut env = GymEnvPool::new(settings("FrozenLake-v1")).make(0, 0, 0)?;
    assert_eq!(env.spec().observation_space, Space::Discrete(16));
    assert_eq!(env.spec().max_episode_steps, Some(100));
    let mut obs = [9.0f32];
    env.reset(Some(0), &mut obs)?;
    assert_eq!(obs, [0.0]);
    Ok(())
}

/// The warnings (`tracing::warn!`) of the test's thread while `f` runs.
fn warnings_of(f: impl FnOnce() -> TestResult) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let warnings = Arc::new(Mutex::new(Vec::new()));
    tracing::subscriber::with_default(Warnings(Arc::clone(&warnings)), f)?;
    let warnings = warnings.lock().unwrap_or_else(PoisonError::into_inner);
    Ok(warnings.clone())
}

/// A subscriber that keeps the messages of warnings.
struct Warnings(Arc<Mutex<Vec<String>>>);

impl tracing::Subscriber for Warnings {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() == tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{v:?}");
                }
            }
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        self.0.lock().unwrap_or_else(PoisonError::into_inner).push(message.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Four `OutOfBounds` envs (element 1 is `value` from step 3 of each episode) in one worker,
/// each reset and stepped for 50 steps (5 episodes).
fn step_out_of_bounds(value: f64) -> TestResult {
    let mut s = settings_n("impala_test_envs:OutOfBounds", 4, 4);
    s.env_config = config(&[("value", value.into())]);
    let pool = GymEnvPool::new(s);
    let mut envs = (0..4).map(|i| pool.make(0, 0, i)).collect::<Result<Vec<_>, _>>()?;
    assert_eq!(envs[0].worker_pid(), envs[3].worker_pid(), "one worker");
    let mut obs = [0.0f32; 3];
    for (i, env) in envs.iter_mut().enumerate() {
        env.reset(Some(i as u64), &mut obs)?;
    }
    for _ in 0..50 {
        for env in &mut envs {
            env.begin_step(&[0.0])?;
        }
        for env in &mut envs {
            if env.finish_step(&mut obs)?.done() {
                env.reset(None, &mut obs)?;
            }
            // Observations are passed on as they are.
            assert!(obs[1] == 0.0 || f64::from(obs[1]) == value, "{obs:?}");
        }
    }
    Ok(())
}

#[test]
fn an_observation_outside_its_bounds_is_warned_of_once() -> TestResult {
    let warnings = warnings_of(|| step_out_of_bounds(5.0))?;
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    let warning = &warnings[0];
    for needle in ["`impala_test_envs:OutOfBounds`", "element 1 is 5,", "outside [-1, 1]"] {
        assert!(warning.contains(needle), "{needle:?} missing from {warning}");
    }
    // Inside the bounds: no warning.
    let warnings = warnings_of(|| step_out_of_bounds(0.5))?;
    assert!(warnings.is_empty(), "{warnings:#?}");
    Ok(())
}
