//! What the transport's test binaries share: the token, and runners of `Walk` built from an
//! assignment with random policies.

use std::num::NonZeroUsize;
use std::sync::Arc;

use impala_core::{CoreError, Env, EnvSpec, Policy, Space, StepOutcome, Weights};
use impala_remote::{Assignment, BuildRunner, BuiltRunner};
use impala_sampler::{EnvFactory, EnvRunner, EnvRunnerSettings, RandomPolicy};

pub const TOKEN: &str = "not-the-real-secret";

/// Ten steps of reward 1 in a corridor of width `width`, then a time-limit truncation.
struct Walk {
    spec: EnvSpec,
    t: usize,
}

pub fn walk_spec(width: usize) -> EnvSpec {
    EnvSpec {
        id: "Walk-v0".into(),
        observation_space: Space::continuous(vec![0.0; width], vec![10.0; width])
            .expect("a valid space"),
        action_space: Space::Discrete(2),
        max_episode_steps: Some(10),
    }
}

impl Env for Walk {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }
    fn reset(&mut self, _: Option<u64>, obs: &mut [f32]) -> Result<(), CoreError> {
        self.t = 0;
        obs.fill(0.0);
        Ok(())
    }
    fn step(&mut self, _: &[f32], obs: &mut [f32]) -> Result<StepOutcome, CoreError> {
        self.t += 1;
        obs.fill(self.t as f32);
        Ok(StepOutcome { reward: 1.0, terminated: false, truncated: self.t == 10 })
    }
}

/// Builds runners of `Walk` with `width` observations and random policies.
pub fn builder(width: usize) -> BuildRunner {
    Arc::new(move |a: &Assignment, weights: Vec<Arc<Weights>>| {
        let spec = walk_spec(width);
        let envs: EnvFactory = {
            let spec = spec.clone();
            Arc::new(move |_| Ok(Box::new(Walk { spec: spec.clone(), t: 0 }) as Box<dyn Env>))
        };
        let settings = EnvRunnerSettings {
            num_envs: NonZeroUsize::new(2).ok_or("zero")?,
            rollout_fragment_length: NonZeroUsize::new(5).ok_or("zero")?,
            ..EnvRunnerSettings::default()
        };
        EnvRunner::build(&settings, a.runner_id, a.incarnation, &envs, |_| {
            let mut policy = RandomPolicy::new(&spec, a.runner_id as u64);
            for w in &weights {
                policy.set_weights(w)?;
            }
            Ok(Box::new(policy) as Box<dyn Policy>)
        })
        .map(|runner| BuiltRunner::Single(Box::new(runner)))
        .map_err(|e| e.to_string())
    })
}
