//! `VectorEnv`: auto-reset, final observations, episode statistics, seeding.

use crate::TestResult;
use impala_core::{Env, EpisodeStats};
use impala_envs::{make, EnvConfig, EnvError, VectorEnv};
use serde_json::json;

fn envs(id: &str, n: usize, config: &EnvConfig) -> Result<Vec<Box<dyn Env>>, EnvError> {
    (0..n).map(|_| make(id, config)).collect()
}

/// Env 1 of a `VectorEnv` seeded with 10 behaves as a single env reset with seed 11: its final
/// observation is the single env's last one, and the observation after the auto-reset is the
/// single env's next (unseeded) reset.
#[test]
fn auto_reset_keeps_the_final_observation() -> TestResult {
    let config = EnvConfig::new();
    let mut vec_env = VectorEnv::new(envs("CartPole-v1", 3, &config)?, Some(10))?;
    let mut single = make("CartPole-v1", &config)?;
    let mut obs = [0.0f32; 4];
    single.reset(Some(11), &mut obs)?;
    assert_eq!(&vec_env.reset()?[4..8], obs);

    let mut episode_return = 0.0;
    for t in 0.. {
        let outcome = single.step(&[1.0], &mut obs)?;
        episode_return += outcome.reward;
        let step = vec_env.step(&[1.0; 3])?;
        assert_eq!(step.rewards[1], outcome.reward);
        if !outcome.done() {
            assert_eq!(&step.obs[4..8], obs);
            assert_eq!(step.final_obs(1), None);
            continue;
        }
        assert!(step.terminateds[1] && !step.truncateds[1]);
        assert_eq!(step.final_obs(1), Some(&obs[..]));
        let stats = EpisodeStats { episode_return, episode_len: t + 1, truncated: false };
        assert!(step.episodes.contains(&(1, stats)), "{:?}", step.episodes);
        single.reset(None, &mut obs)?;
        assert_eq!(&step.obs[4..8], obs, "next obs is the reset obs");
        break;
    }
    Ok(())
}

#[test]
fn truncated_episodes_are_reported() -> TestResult {
    let config = serde_json::from_value(json!({"max_episode_steps": 5}))?;
    let mut vec_env = VectorEnv::new(envs("Pendulum-v1", 2, &config)?, Some(0))?;
    vec_env.reset()?;
    let mut finished = Vec::new();
    let mut returns = [0.0; 2];
    for t in 0..10 {
        let step = vec_env.step(&[0.5, -0.5])?;
        for (i, total) in returns.iter_mut().enumerate() {
            *total += step.rewards[i];
            assert_eq!(step.truncateds[i], t % 5 == 4);
            assert!(!step.terminateds[i]);
        }
        finished.extend(step.episodes.iter().copied());
    }
    assert_eq!(finished.len(), 4);
    assert!(finished.iter().all(|(_, s)| s.truncated && s.episode_len == 5));
    let total: f64 = finished.iter().map(|(_, s)| s.episode_return).sum();
    assert!((total - returns.iter().sum::<f64>()).abs() < 1e-9);
    Ok(())
}

#[test]
fn same_seed_same_trajectories() -> TestResult {
    let run = |seed| -> Result<Vec<f32>, EnvError> {
        let mut vec_env = VectorEnv::new(envs("Acrobot-v1", 2, &EnvConfig::new())?, Some(seed))?;
        vec_env.reset()?;
        for _ in 0..5 {
            vec_env.step(&[0.0, 2.0])?;
        }
        Ok(vec_env.obs().to_vec())
    };
    assert_eq!(run(1)?, run(1)?);
    assert_ne!(run(1)?, run(2)?);
    Ok(())
}

#[test]
fn step_without_reset_resets_first() -> TestResult {
    let mut vec_env = VectorEnv::new(envs("MountainCar-v0", 2, &EnvConfig::new())?, Some(0))?;
    let step = vec_env.step(&[1.0, 1.0])?;
    assert_eq!(step.rewards, [-1.0, -1.0]);
    Ok(())
}

#[test]
fn setup_errors() -> TestResult {
    assert!(matches!(VectorEnv::new(Vec::new(), None), Err(EnvError::InvalidSetup { .. })));
    let mixed =
        vec![make("CartPole-v1", &EnvConfig::new())?, make("Acrobot-v1", &EnvConfig::new())?];
    let err = VectorEnv::new(mixed, None).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("env 1 (Acrobot-v1)"), "{err}");
    let mut vec_env = VectorEnv::new(envs("CartPole-v1", 2, &EnvConfig::new())?, None)?;
    assert!(vec_env.step(&[1.0]).is_err());
    assert!(matches!(vec_env.step(&[1.0, 3.0]), Err(EnvError::Core(_))));
    Ok(())
}

/// Returns `bad` as observation value 1 (or as the reward) from step `at` of each episode.
struct Poisoned {
    spec: impala_core::EnvSpec,
    at: u64,
    t: u64,
    bad: f32,
    in_reward: bool,
}

impl Env for Poisoned {
    fn spec(&self) -> &impala_core::EnvSpec {
        &self.spec
    }
    fn reset(&mut self, _seed: Option<u64>, obs: &mut [f32]) -> impala_core::Result<()> {
        self.t = 0;
        obs.fill(0.0);
        Ok(())
    }
    fn step(
        &mut self,
        _a: &[f32],
        obs: &mut [f32],
    ) -> impala_core::Result<impala_core::StepOutcome> {
        self.t += 1;
        obs.fill(0.0);
        let poisoned = self.t >= self.at;
        if poisoned && !self.in_reward {
            obs[1] = self.bad;
        }
        let reward = if poisoned && self.in_reward { f64::from(self.bad) } else { 1.0 };
        Ok(impala_core::StepOutcome { reward, terminated: false, truncated: false })
    }
}

#[test]
fn non_finite_observations_and_rewards_are_env_failures_naming_the_field() -> TestResult {
    let spec = impala_core::EnvSpec {
        id: "Poisoned-v0".into(),
        observation_space: impala_core::Space::continuous(vec![-1.0; 3], vec![1.0; 3])?,
        action_space: impala_core::Space::Discrete(2),
        max_episode_steps: None,
    };
    for (bad, in_reward, field, position) in [
        (f32::NAN, false, "observation", 1),
        (f32::INFINITY, false, "observation", 1),
        (f32::NAN, true, "reward", 0),
        (f32::NEG_INFINITY, true, "reward", 0),
    ] {
        let env = |at| Poisoned { spec: spec.clone(), at, t: 0, bad, in_reward };
        let mut vec_env =
            VectorEnv::new(vec![Box::new(env(1000)) as Box<dyn Env>, Box::new(env(3))], None)?;
        vec_env.step(&[0.0; 2])?;
        vec_env.step(&[0.0; 2])?;
        match vec_env.step(&[0.0; 2]) {
            Err(EnvError::NonFinite {
                env, index, field: f, position: p, episode_step, ..
            }) => {
                assert_eq!(
                    (env.as_str(), index, f, p, episode_step),
                    ("Poisoned-v0", 1, field, position, 3)
                );
            }
            other => return Err(format!("{bad} in the {field}: {other:?}").into()),
        }
    }
    Ok(())
}
