//! Test environments and policies with observable internals, settings, and helpers that count
//! what was sampled (the group does not: the caller counts the fragments it gets, once).

use std::collections::BTreeSet;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use impala_core::{
    CoreError, Env, EnvSpec, Policy, PolicyInput, PolicyOutput, SampleBatch, Space, StepOutcome,
    Weights,
};
use impala_envs::TimeLimit;
use impala_sampler::{
    BatchingSettings, EnvFactory, EnvRunnerGroupSettings, EnvRunnerSettings, Fragment,
    PolicyFactory,
};

/// What tests return: sampler errors, and the timeouts of [`Deadline`].
pub type TestResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// How long a test waits for something that should happen in milliseconds.
pub const WAIT: Duration = Duration::from_secs(60);

/// A bound on a test's wait loop, so a broken sampler fails the test instead of hanging it.
#[derive(Debug, Clone, Copy)]
pub struct Deadline(Instant);

impl Deadline {
    /// [`WAIT`] from now.
    pub fn start() -> Self {
        Deadline(Instant::now() + WAIT)
    }

    /// An error naming `what` once the deadline has passed.
    pub fn check(&self, what: &str) -> TestResult {
        if Instant::now() > self.0 {
            return Err(format!("timed out after {WAIT:?} waiting for {what}").into());
        }
        Ok(())
    }
}

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
    /// Told of every fault injected, before it strikes.
    fault_events: Sender<()>,
}

/// The spec of every `TestEnv` (wrapped in a `TimeLimit` or not, the spaces are these).
pub fn spec(max_episode_steps: Option<usize>) -> EnvSpec {
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
            // The test may have stopped listening; the fault strikes anyway.
            let _ = self.fault_events.send(());
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
    /// One message per fault injected, sent just before it strikes.
    pub fault_events: Receiver<()>,
    /// The envs' end of `fault_events`.
    pub fault_events_tx: Sender<()>,
}

impl Default for EnvSetup {
    fn default() -> Self {
        let (fault_events_tx, fault_events) = crossbeam_channel::unbounded();
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
            fault_events,
            fault_events_tx,
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
                fault_events: setup.fault_events_tx.clone(),
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

/// A policy that runs a test's probe before each of `inner`'s actions (note the runner or the
/// thread, fail on demand) and is `inner` otherwise.
pub struct Probed {
    inner: Box<dyn Policy>,
    probe: Box<dyn FnMut() -> Result<(), CoreError> + Send>,
}

impl Probed {
    /// `inner`, with `probe` run before each `compute_actions` (its error is the call's).
    pub fn new(
        inner: Box<dyn Policy>,
        probe: impl FnMut() -> Result<(), CoreError> + Send + 'static,
    ) -> Self {
        Probed { inner, probe: Box::new(probe) }
    }
}

impl Policy for Probed {
    fn compute_actions(
        &mut self,
        input: &PolicyInput<'_>,
        out: &mut PolicyOutput,
    ) -> Result<(), CoreError> {
        (self.probe)()?;
        self.inner.compute_actions(input, out)
    }
    fn compute_values(
        &mut self,
        obs: &[f32],
        num_envs: usize,
        state: &[f32],
    ) -> Result<Vec<f32>, CoreError> {
        self.inner.compute_values(obs, num_envs, state)
    }
    fn state_dim(&self) -> usize {
        self.inner.state_dim()
    }
    fn set_weights(&mut self, weights: &Arc<Weights>) -> Result<(), CoreError> {
        self.inner.set_weights(weights)
    }
    fn weights_version(&self) -> u64 {
        self.inner.weights_version()
    }
}

/// `CountingPolicy`s that send their runner's id on `events` before each action.
pub fn reporting_policies(events: Sender<usize>) -> PolicyFactory {
    Arc::new(move |runner_id| {
        let events = events.clone();
        // The test may have stopped listening; the runner goes on.
        let report = move || {
            let _ = events.send(runner_id);
            Ok(())
        };
        Ok(Box::new(Probed::new(Box::new(CountingPolicy::default()), report)) as Box<dyn Policy>)
    })
}

/// Waits (at most [`WAIT`]) until runner `runner_id` made its `n`-th `compute_actions` call
/// since `events` was created; other runners' calls are skipped.
pub fn wait_for_calls(events: &Receiver<usize>, runner_id: usize, n: usize) -> TestResult {
    let deadline = Instant::now() + WAIT;
    let mut seen = 0;
    while seen < n {
        let id = events.recv_deadline(deadline).map_err(|e| {
            format!("runner {runner_id} made {seen} of {n} compute_actions calls: {e}")
        })?;
        seen += usize::from(id == runner_id);
    }
    Ok(())
}

/// A positive count; a zero is a mistake in the test.
pub const fn nz(n: usize) -> NonZeroUsize {
    match NonZeroUsize::new(n) {
        Some(n) => n,
        None => panic!("a count in a test's settings is 0"),
    }
}

/// One runner's settings: `num_envs` envs, fragments of `fragment` steps, seed 0.
pub fn runner_settings(num_envs: usize, fragment: usize) -> EnvRunnerSettings {
    EnvRunnerSettings {
        num_envs: nz(num_envs),
        rollout_fragment_length: nz(fragment),
        seed: Some(0),
        ..EnvRunnerSettings::default()
    }
}

/// A group of `num_env_runners` runners of [`runner_settings`]; RLlib's defaults otherwise
/// (2 requests in flight per runner, a zero collection timeout, restarts on).
pub fn settings(
    num_env_runners: usize,
    num_envs: usize,
    fragment: usize,
) -> EnvRunnerGroupSettings {
    EnvRunnerGroupSettings {
        num_env_runners,
        runner: runner_settings(num_envs, fragment),
        ..EnvRunnerGroupSettings::default()
    }
}

/// Train batches of `train_batch_size` env steps, replay seed 0, no replay, no workers.
pub fn batching(train_batch_size: usize) -> BatchingSettings {
    BatchingSettings {
        train_batch_size: nz(train_batch_size),
        seed: Some(0),
        ..BatchingSettings::default()
    }
}

/// Whether `batch` was sampled in envs of `spec`: its observations and actions have the shapes of
/// the spec's spaces.
pub fn sampled_in(batch: &SampleBatch, spec: &EnvSpec) -> bool {
    batch.obs_shape == SampleBatch::obs_shape_of(&spec.observation_space)
        && batch.action_dim == spec.action_space.flat_dim()
        && batch.dist_inputs_dim == spec.action_space.dist_inputs_dim()
}

/// What a caller counts from the fragments `sample()` returned (what the group's
/// `num_fragments_sampled`, `num_env_steps_sampled` and `num_episodes` used to count).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sampled {
    pub fragments: u64,
    pub env_steps: u64,
    pub episodes: u64,
}

impl Sampled {
    /// The counts of `fragments`.
    pub fn of(fragments: &[Fragment]) -> Self {
        Sampled {
            fragments: fragments.len() as u64,
            env_steps: fragments.iter().map(|f| f.batch.env_steps() as u64).sum(),
            episodes: fragments.iter().map(|f| f.episodes.len() as u64).sum(),
        }
    }
}

/// Every (env instance, lifetime step) pair in the delivered `TestEnv` fragments, checked
/// unique: no step is delivered twice.
pub fn unique_steps(fragments: &[Fragment]) -> BTreeSet<(u32, u32)> {
    let mut seen = BTreeSet::new();
    for f in fragments {
        let (b, obs) = (&f.batch, f.batch.obs.to_f32());
        for t in 0..b.fragment_len {
            for row in 0..b.num_rows {
                let i = b.index(t, row) * 3;
                let key = (obs[i] as u32, obs[i + 2] as u32);
                assert!(seen.insert(key), "step {key:?} delivered twice");
            }
        }
    }
    seen
}
