//! Test environments and policies with observable internals.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use impala_config::ImpalaConfig;
use impala_core::{
    CoreError, Env, EnvSpec, Policy, PolicyInput, PolicyOutput, Space, StepOutcome, Weights,
};
use impala_envs::TimeLimit;
use impala_sampler::{EnvFactory, PolicyFactory};

/// Every `TestEnv` gets a distinct instance id, so tests can tell envs apart across restarts.
static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

/// How a `TestEnv` misbehaves at a given step of its lifetime.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    Panic,
    Error,
}

/// Observation: `[instance id, step in episode, steps over the env's lifetime]`.
/// Terminates after `terminate_after` steps (if set); reward `reward` per step.
pub struct TestEnv {
    spec: EnvSpec,
    instance: u64,
    terminate_after: Option<u64>,
    reward: f64,
    step_in_episode: u64,
    lifetime_steps: u64,
    fault: Option<(u64, Fault)>,
    /// Seeds passed to `reset`, shared with the test.
    seeds: Arc<Mutex<Vec<Option<u64>>>>,
    /// Steps over all envs built by one factory, shared with the test.
    steps: Arc<AtomicU64>,
    /// Faults injected so far, shared with the test.
    faults_hit: Arc<AtomicUsize>,
}

fn spec(max_episode_steps: Option<usize>) -> EnvSpec {
    EnvSpec {
        id: "TestEnv".into(),
        observation_space: Space::Box {
            low: vec![0.0; 3],
            high: vec![f32::MAX; 3],
            shape: vec![3],
        },
        action_space: Space::Discrete(2),
        max_episode_steps,
    }
}

impl TestEnv {
    fn write_obs(&self, obs: &mut [f32]) {
        obs[0] = self.instance as f32;
        obs[1] = self.step_in_episode as f32;
        obs[2] = self.lifetime_steps as f32;
    }
}

impl Env for TestEnv {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }
    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> Result<(), CoreError> {
        self.seeds
            .lock()
            .map_err(|_| CoreError::Env { env: "TestEnv".into(), reason: "poisoned".into() })?
            .push(seed);
        self.step_in_episode = 0;
        self.write_obs(obs);
        Ok(())
    }
    fn step(&mut self, _action: &[f32], obs: &mut [f32]) -> Result<StepOutcome, CoreError> {
        self.lifetime_steps += 1;
        if self.fault.is_some_and(|(k, _)| k == self.lifetime_steps) {
            self.faults_hit.fetch_add(1, Ordering::SeqCst);
        }
        match self.fault {
            Some((k, Fault::Panic)) if self.lifetime_steps == k => {
                panic!("injected panic at step {k}")
            }
            Some((k, Fault::Error)) if self.lifetime_steps == k => {
                return Err(CoreError::Env {
                    env: "TestEnv".into(),
                    reason: format!("injected error at step {k}"),
                })
            }
            _ => {}
        }
        self.steps.fetch_add(1, Ordering::Relaxed);
        self.step_in_episode += 1;
        self.write_obs(obs);
        let terminated = self.terminate_after.is_some_and(|n| self.step_in_episode >= n);
        Ok(StepOutcome { reward: self.reward, terminated, truncated: false })
    }
}

/// Builds `TestEnv`s and counts what they do.
#[derive(Clone)]
pub struct EnvSetup {
    pub max_episode_steps: Option<usize>,
    pub terminate_after: Option<u64>,
    pub reward: f64,
    /// `(runner id, how many of that runner's envs to break (counted over restarts), step, fault)`.
    pub fault: Option<(usize, usize, u64, Fault)>,
    pub seeds: Arc<Mutex<Vec<Option<u64>>>>,
    pub steps: Arc<AtomicU64>,
    pub built: Arc<AtomicUsize>,
    pub faulty_built: Arc<AtomicUsize>,
    pub faults_hit: Arc<AtomicUsize>,
}

impl Default for EnvSetup {
    fn default() -> Self {
        EnvSetup {
            max_episode_steps: None,
            terminate_after: Some(4),
            reward: 1.0,
            fault: None,
            seeds: Arc::default(),
            steps: Arc::default(),
            built: Arc::default(),
            faulty_built: Arc::default(),
            faults_hit: Arc::default(),
        }
    }
}

impl EnvSetup {
    pub fn factory(&self) -> EnvFactory {
        let setup = self.clone();
        Arc::new(move |ctx| {
            setup.built.fetch_add(1, Ordering::Relaxed);
            let fault = match setup.fault {
                Some((runner, n, step, kind))
                    if runner == ctx.runner_index
                        && ctx.env_index == 0
                        && setup.faulty_built.fetch_add(1, Ordering::Relaxed) < n =>
                {
                    Some((step, kind))
                }
                _ => None,
            };
            let env = TestEnv {
                spec: spec(None),
                instance: NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed),
                terminate_after: setup.terminate_after,
                reward: setup.reward,
                step_in_episode: 0,
                lifetime_steps: 0,
                fault,
                seeds: Arc::clone(&setup.seeds),
                steps: Arc::clone(&setup.steps),
                faults_hit: Arc::clone(&setup.faults_hit),
            };
            Ok(match setup.max_episode_steps {
                Some(limit) => {
                    Box::new(TimeLimit::new(env, limit).map_err(|e| CoreError::Env {
                        env: "TestEnv".into(),
                        reason: e.to_string(),
                    })?) as Box<dyn Env>
                }
                None => Box::new(env) as Box<dyn Env>,
            })
        })
    }
}

/// A recurrent test policy with a 1-value state that counts steps since the episode started.
/// Action 0; `vf_preds` = the state it was given; `compute_values` = 100 + obs[1] + 1000 * state.
#[derive(Debug, Default)]
pub struct CountingPolicy {
    version: u64,
}

impl Policy for CountingPolicy {
    fn compute_actions(
        &mut self,
        input: &PolicyInput<'_>,
        out: &mut PolicyOutput,
    ) -> Result<(), CoreError> {
        let n = input.num_envs;
        out.actions.clear();
        out.actions.resize(n, 0.0);
        out.action_logp.clear();
        out.action_logp.resize(n, -std::f32::consts::LN_2);
        out.action_dist_inputs.clear();
        out.action_dist_inputs.resize(2 * n, 0.0);
        out.vf_preds.clear();
        out.vf_preds.extend_from_slice(input.state);
        out.state_out.clear();
        out.state_out.extend(input.state.iter().map(|s| s + 1.0));
        Ok(())
    }
    fn compute_values(
        &mut self,
        obs: &[f32],
        num_envs: usize,
        state: &[f32],
    ) -> Result<Vec<f32>, CoreError> {
        Ok((0..num_envs).map(|i| 100.0 + obs[i * 3 + 1] + 1000.0 * state[i]).collect())
    }
    fn state_dim(&self) -> usize {
        1
    }
    fn set_weights(&mut self, weights: &Arc<Weights>) -> Result<(), CoreError> {
        self.version = weights.version;
        Ok(())
    }
    fn weights_version(&self) -> u64 {
        self.version
    }
}

pub fn counting_policies() -> PolicyFactory {
    Arc::new(|_| Ok(Box::new(CountingPolicy::default()) as Box<dyn Policy>))
}

pub fn config(num_env_runners: usize, num_envs: usize, fragment: usize) -> ImpalaConfig {
    ImpalaConfig {
        num_env_runners,
        num_envs_per_env_runner: num_envs,
        rollout_fragment_length: fragment,
        seed: Some(0),
        ..ImpalaConfig::default()
    }
}
