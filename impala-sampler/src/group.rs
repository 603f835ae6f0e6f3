//! RLlib's `EnvRunnerGroup` with its `FaultTolerantActorManager`: runner threads, in-flight caps,
//! collection with a timeout, health, restarts and weight sync.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use impala_config::ImpalaConfig;
use impala_core::{EnvSpec, Weights};

use crate::error::panic_message;
use crate::runner::RunnerStats;
use crate::weights::WeightSlot;
use crate::{policy_lag, EnvFactory, EnvRunner, Fragment, PolicyFactory, Result, SamplerError};

/// What runner threads send to the driver.
enum RunnerMsg {
    /// A finished fragment from runner generation `generation`.
    Fragment { generation: u64, fragment: Box<Fragment> },
    /// The runner failed; its thread has ended.
    Failed { runner_id: usize, generation: u64, reason: String },
}

/// Sampler counters, named as RLlib reports them where RLlib has the counter.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SamplerMetrics {
    /// Runner threads configured (`num_env_runners`; 0 = sampling on the driver thread).
    pub num_env_runners: usize,
    /// Runner threads currently healthy.
    pub num_healthy_env_runners: usize,
    /// Runner failures seen (errors and panics).
    pub num_env_runner_failures: u64,
    /// Runner restarts done (RLlib's `num_remote_worker_restarts`).
    pub num_env_runner_restarts: u64,
    /// Sample requests issued and not yet collected, over all runners.
    pub num_in_flight_requests: usize,
    /// Fragments delivered by [`EnvRunnerGroup::sample`].
    pub num_fragments_sampled: u64,
    /// Env steps delivered (RLlib's `num_env_steps_sampled`).
    pub num_env_steps_sampled: u64,
    /// Agent steps delivered (RLlib's `num_agent_steps_sampled`).
    pub num_agent_steps_sampled: u64,
    /// Episodes that ended in delivered fragments.
    pub num_episodes: u64,
    /// Fragments of failed runners that were dropped instead of delivered.
    pub num_fragments_dropped: u64,
    /// Env steps in those dropped fragments.
    pub num_env_steps_dropped: u64,
    /// Version of the newest weights given to [`EnvRunnerGroup::sync_weights`].
    pub latest_weights_version: Option<u64>,
    /// Mean policy lag (newest synced version minus behaviour version) of the fragments the
    /// last `sample` call delivered; 0 when it delivered none.
    pub policy_lag_mean: f64,
    /// Weight snapshots loaded by runners' policies.
    pub num_weight_syncs_applied: u64,
    /// Mean seconds from `sync_weights` to a runner loading the weights.
    pub weight_sync_latency_mean_s: f64,
}

/// One runner as the driver tracks it (RLlib's `FaultTolerantActorManager` actor state).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvRunnerState {
    /// The runner's id (1-based).
    pub runner_id: usize,
    /// Whether it is sampling (false between a failure and its restart).
    pub is_healthy: bool,
    /// How many times it was rebuilt.
    pub num_restarts: u64,
    /// Sample requests issued and not yet collected.
    pub num_in_flight_requests: usize,
    /// The last error or panic message, if it ever failed.
    pub last_error: Option<String>,
}

/// One runner thread as the driver tracks it (RLlib's actor state: id, health, in-flight).
struct RemoteRunner {
    id: usize,
    /// Bumped on every restart, so messages from a dead incarnation are recognised.
    generation: u64,
    healthy: bool,
    /// Sample requests: one token per fragment the runner may produce. Dropping it stops the
    /// runner.
    tokens: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
    slot: Arc<WeightSlot>,
    stats: Arc<RunnerStats>,
    in_flight: usize,
    last_error: Option<String>,
}

/// RLlib's `EnvRunnerGroup` + `FaultTolerantActorManager` for sampling: `num_env_runners` runner
/// threads (ids 1..; 0 is the local runner used when `num_env_runners == 0`).
///
/// Each runner holds at most `max_requests_in_flight_per_sampler_worker` sample requests; it
/// blocks once that many of its fragments are uncollected, and gets a new request for each
/// fragment [`sample`](Self::sample) delivers. A runner whose env or policy errors or panics is
/// marked unhealthy, its uncollected fragments are dropped, and it is rebuilt (up to
/// `max_num_env_runner_restarts` restarts over the group) with the newest weights; the others go
/// on sampling. Dropping the group (or [`shutdown`](Self::shutdown)) stops and joins every thread.
///
/// ```
/// use std::sync::Arc;
/// use impala_config::ImpalaConfig;
/// use impala_core::{CoreError, Env, EnvSpec, Space, StepOutcome, Weights};
/// use impala_sampler::{EnvFactory, EnvRunnerGroup, PolicyFactory, RandomPolicy};
///
/// struct Coin { spec: EnvSpec }
/// impl Env for Coin {
///     fn spec(&self) -> &EnvSpec { &self.spec }
///     fn reset(&mut self, _: Option<u64>, obs: &mut [f32]) -> Result<(), CoreError> {
///         obs[0] = 0.0;
///         Ok(())
///     }
///     fn step(&mut self, action: &[f32], obs: &mut [f32]) -> Result<StepOutcome, CoreError> {
///         obs[0] = action[0];
///         Ok(StepOutcome { reward: f64::from(action[0]), terminated: true, truncated: false })
///     }
/// }
///
/// let spec = EnvSpec {
///     id: "Coin".into(),
///     observation_space: Space::continuous(vec![0.0], vec![1.0])?,
///     action_space: Space::Discrete(2),
///     max_episode_steps: None,
/// };
/// let (s1, s2) = (spec.clone(), spec.clone());
/// let envs: EnvFactory = Arc::new(move |_| Ok(Box::new(Coin { spec: s1.clone() }) as Box<dyn Env>));
/// let policies: PolicyFactory = Arc::new(move |id| {
///     Ok(Box::new(RandomPolicy::new(&s2, id as u64)) as Box<dyn impala_core::Policy>)
/// });
/// let mut config = ImpalaConfig::default();
/// config.num_env_runners = 2;
/// config.rollout_fragment_length = 10;
/// config.timeout_s_sampler_manager = 1.0; // wait for the first fragments
/// let mut group = EnvRunnerGroup::new(&config, envs, policies)?;
/// let fragments = group.sample()?;
/// assert!(!fragments.is_empty());
/// let ids: Vec<usize> = fragments.iter().map(|f| f.runner_id).collect();
/// group.sync_weights(Arc::new(Weights::new(1, vec![])), &ids);
/// assert_eq!(group.metrics().num_healthy_env_runners, 2);
/// group.shutdown()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct EnvRunnerGroup {
    config: ImpalaConfig,
    env_factory: EnvFactory,
    policy_factory: PolicyFactory,
    spec: EnvSpec,
    local: Option<EnvRunner>,
    runners: Vec<RemoteRunner>,
    results_tx: Sender<RunnerMsg>,
    results_rx: Receiver<RunnerMsg>,
    stop: Arc<AtomicBool>,
    latest_weights: Option<Arc<Weights>>,
    metrics: SamplerMetrics,
    /// Weight-sync counters of runner incarnations that are gone.
    retired_weight_syncs: (u64, u64),
    shut_down: bool,
}

impl std::fmt::Debug for EnvRunnerGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvRunnerGroup")
            .field("env", &self.spec.id)
            .field("metrics", &self.metrics())
            .finish_non_exhaustive()
    }
}

impl EnvRunnerGroup {
    /// Builds every runner on the calling thread (so config and env errors surface here), then
    /// starts the runner threads, each with its full allowance of sample requests.
    pub fn new(
        config: &ImpalaConfig,
        env_factory: EnvFactory,
        policy_factory: PolicyFactory,
    ) -> Result<Self> {
        if config.num_env_runners > 0 && config.max_requests_in_flight_per_sampler_worker == 0 {
            return Err(SamplerError::InvalidConfig {
                field: "max_requests_in_flight_per_sampler_worker",
                reason: "must be at least 1 when num_env_runners > 0".into(),
            });
        }
        if !config.timeout_s_sampler_manager.is_finite() || config.timeout_s_sampler_manager < 0.0 {
            return Err(SamplerError::InvalidConfig {
                field: "timeout_s_sampler_manager",
                reason: format!(
                    "must be finite and >= 0, got {}",
                    config.timeout_s_sampler_manager
                ),
            });
        }
        let (results_tx, results_rx) = crossbeam_channel::unbounded();
        let mut built = Vec::with_capacity(config.num_env_runners);
        for id in 1..=config.num_env_runners {
            built.push(EnvRunner::new(config, id, &env_factory, &policy_factory)?);
        }
        let local = if config.num_env_runners == 0 {
            Some(EnvRunner::new(config, 0, &env_factory, &policy_factory)?)
        } else {
            None
        };
        let spec = match (&local, built.first()) {
            (Some(r), _) | (None, Some(r)) => r.spec().clone(),
            (None, None) => unreachable!("either the local runner or runner 1 exists"),
        };
        let mut group = EnvRunnerGroup {
            config: config.clone(),
            env_factory,
            policy_factory,
            spec,
            local,
            runners: Vec::with_capacity(built.len()),
            results_tx,
            results_rx,
            stop: Arc::new(AtomicBool::new(false)),
            latest_weights: None,
            metrics: SamplerMetrics {
                num_env_runners: config.num_env_runners,
                ..Default::default()
            },
            retired_weight_syncs: (0, 0),
            shut_down: false,
        };
        for runner in built {
            let remote = group.start(runner, 0)?;
            group.runners.push(remote);
        }
        Ok(group)
    }

    /// The environments' spec (observation and action spaces for building the learner).
    pub fn env_spec(&self) -> &EnvSpec {
        &self.spec
    }

    /// Starts a thread for `runner` with a full allowance of sample requests.
    fn start(&self, runner: EnvRunner, generation: u64) -> Result<RemoteRunner> {
        let id = runner.runner_id();
        let max_in_flight = self.config.max_requests_in_flight_per_sampler_worker;
        let (tokens, requests) = crossbeam_channel::bounded(max_in_flight);
        for _ in 0..max_in_flight {
            // Cannot fail: the channel has room for exactly these tokens and `requests` is alive.
            let _ = tokens.send(());
        }
        let (slot, stats) = (runner.weight_slot(), runner.stats());
        let results = self.results_tx.clone();
        let stop = Arc::clone(&self.stop);
        let thread = std::thread::Builder::new()
            .name(format!("env-runner-{id}"))
            .spawn(move || run_env_runner(runner, generation, &requests, &results, &stop))
            .map_err(|e| SamplerError::Spawn {
                thread: format!("env-runner-{id}"),
                reason: e.to_string(),
            })?;
        Ok(RemoteRunner {
            id,
            generation,
            healthy: true,
            tokens: Some(tokens),
            thread: Some(thread),
            slot,
            stats,
            in_flight: max_in_flight,
            last_error: None,
        })
    }

    /// RLlib's `get_samples_from_workers`: the fragments ready now, waiting at most
    /// `timeout_s_sampler_manager` for all requests in flight; with `num_env_runners == 0`, one
    /// fragment sampled on the calling thread. Each delivered fragment gives its runner a new
    /// request. Failed runners are restarted before returning.
    ///
    /// Errors when a runner failed and `restart_failed_env_runners` is off or the restarts are
    /// used up, or when the local runner fails.
    pub fn sample(&mut self) -> Result<Vec<Fragment>> {
        if let Some(local) = self.local.as_mut() {
            let fragment = match catch_unwind(AssertUnwindSafe(|| local.sample())) {
                Ok(Ok(fragment)) => fragment,
                Ok(Err(e)) => {
                    return Err(SamplerError::EnvRunnerFailed {
                        runner_id: 0,
                        reason: e.to_string(),
                    })
                }
                Err(payload) => {
                    return Err(SamplerError::EnvRunnerFailed {
                        runner_id: 0,
                        reason: panic_message(payload.as_ref()),
                    })
                }
            };
            let fragments = vec![fragment];
            self.account(&fragments);
            return Ok(fragments);
        }
        let deadline = deadline_after(self.config.timeout_s_sampler_manager);
        let mut ready = Vec::new();
        loop {
            let msg = match self.results_rx.try_recv() {
                Ok(msg) => msg,
                Err(TryRecvError::Empty) => {
                    let waiting = self.runners.iter().any(|r| r.healthy && r.in_flight > 0);
                    if !waiting {
                        break;
                    }
                    match receive_until(&self.results_rx, deadline) {
                        Some(msg) => msg,
                        None => break,
                    }
                }
                // The group holds a sender, so the channel cannot disconnect.
                Err(TryRecvError::Disconnected) => break,
            };
            self.handle(msg, &mut ready);
        }
        // Restart first: when that fails, training ends and nothing here counts as sampled.
        self.restore_failed()?;
        for fragment in &ready {
            let runner = &mut self.runners[fragment.runner_id - 1];
            if let Some(tokens) = &runner.tokens {
                // The runner holds fewer than the cap of requests, so this never blocks; a
                // runner that died meanwhile reports itself on the results channel.
                if tokens.send(()).is_ok() {
                    runner.in_flight += 1;
                }
            }
        }
        self.account(&ready);
        Ok(ready)
    }

    /// Processes one runner message: keeps current fragments, drops stale ones, marks failures.
    fn handle(&mut self, msg: RunnerMsg, ready: &mut Vec<Fragment>) {
        match msg {
            RunnerMsg::Fragment { generation, fragment } => {
                let runner = &mut self.runners[fragment.runner_id - 1];
                if runner.generation == generation && runner.healthy {
                    runner.in_flight = runner.in_flight.saturating_sub(1);
                    ready.push(*fragment);
                } else {
                    self.metrics.num_fragments_dropped += 1;
                    self.metrics.num_env_steps_dropped += fragment.batch.env_steps() as u64;
                }
            }
            RunnerMsg::Failed { runner_id, generation, reason } => {
                let runner = &mut self.runners[runner_id - 1];
                if runner.generation != generation {
                    return;
                }
                tracing::warn!(runner_id, %reason, "env runner failed");
                runner.healthy = false;
                runner.in_flight = 0;
                runner.last_error = Some(reason);
                self.metrics.num_env_runner_failures += 1;
                let before = ready.len();
                let mut dropped_steps = 0;
                ready.retain(|f| {
                    let keep = f.runner_id != runner_id;
                    if !keep {
                        dropped_steps += f.batch.env_steps() as u64;
                    }
                    keep
                });
                self.metrics.num_fragments_dropped += (before - ready.len()) as u64;
                self.metrics.num_env_steps_dropped += dropped_steps;
            }
        }
    }

    /// Counts delivered fragments and their policy lag.
    fn account(&mut self, fragments: &[Fragment]) {
        let m = &mut self.metrics;
        let mut lag = 0.0;
        for f in fragments {
            let steps = f.batch.env_steps() as u64;
            m.num_fragments_sampled += 1;
            m.num_env_steps_sampled += steps;
            m.num_agent_steps_sampled += f.batch.agent_steps() as u64;
            m.num_episodes += f.episodes.len() as u64;
            if let Some(v) = m.latest_weights_version {
                lag += policy_lag(&f.batch, v);
            }
        }
        m.policy_lag_mean = if fragments.is_empty() { 0.0 } else { lag / fragments.len() as f64 };
    }

    /// Restarts unhealthy runners (RLlib's `restore_workers`), or says why it may not.
    fn restore_failed(&mut self) -> Result<()> {
        for idx in 0..self.runners.len() {
            if self.runners[idx].healthy {
                continue;
            }
            let runner = &mut self.runners[idx];
            let (runner_id, reason) =
                (runner.id, runner.last_error.clone().unwrap_or_else(|| "unknown".into()));
            if !self.config.restart_failed_env_runners {
                return Err(SamplerError::EnvRunnerFailed { runner_id, reason });
            }
            let max_restarts = self.config.max_num_env_runner_restarts;
            if self.metrics.num_env_runner_restarts >= max_restarts as u64 {
                return Err(SamplerError::TooManyRestarts { runner_id, max_restarts, reason });
            }
            self.metrics.num_env_runner_restarts += 1;
            runner.tokens = None;
            if let Some(thread) = runner.thread.take() {
                // The thread reported its failure and is ending; a panic outside the caught
                // region would be a bug in this crate, and the failure is already recorded.
                if let Err(payload) = thread.join() {
                    tracing::error!(runner_id, reason = %panic_message(payload.as_ref()), "env runner thread panicked");
                }
            }
            self.retired_weight_syncs.0 += runner.stats.weight_syncs.load(Ordering::Relaxed);
            self.retired_weight_syncs.1 += runner.stats.weight_sync_nanos.load(Ordering::Relaxed);
            let generation = runner.generation + 1;
            match EnvRunner::new(&self.config, runner_id, &self.env_factory, &self.policy_factory) {
                Ok(rebuilt) => {
                    if let Some(w) = &self.latest_weights {
                        rebuilt.publish_weights(Arc::clone(w));
                    }
                    let mut started = self.start(rebuilt, generation)?;
                    started.last_error = Some(reason);
                    tracing::info!(runner_id, generation, "env runner restarted");
                    self.runners[idx] = started;
                }
                Err(e) => {
                    // Stays unhealthy; the next `sample` call tries again while restarts remain.
                    let runner = &mut self.runners[idx];
                    runner.generation = generation;
                    runner.last_error = Some(e.to_string());
                    runner.stats = Arc::default();
                }
            }
        }
        Ok(())
    }

    /// Fire-and-forget weight sync: each listed runner (0 = local) loads `weights` before its
    /// next fragment, unless it already holds a newer version. Unknown ids are ignored; runners
    /// restarted later start from the newest weights given here.
    pub fn sync_weights(&mut self, weights: Arc<Weights>, runner_ids: &[usize]) {
        if self.latest_weights.as_ref().is_none_or(|w| w.version <= weights.version) {
            self.metrics.latest_weights_version = Some(weights.version);
            self.latest_weights = Some(Arc::clone(&weights));
        }
        for &id in runner_ids {
            if id == 0 {
                if let Some(local) = &self.local {
                    local.publish_weights(Arc::clone(&weights));
                }
            } else if let Some(runner) = self.runners.get(id - 1) {
                runner.slot.publish(Arc::clone(&weights));
            }
        }
    }

    /// Ids of the healthy runners (`[0]` when sampling on the driver thread).
    pub fn healthy_runner_ids(&self) -> Vec<usize> {
        if self.local.is_some() {
            return vec![0];
        }
        self.runners.iter().filter(|r| r.healthy).map(|r| r.id).collect()
    }

    /// Health, restarts and in-flight requests of every runner thread, by id.
    pub fn runner_states(&self) -> Vec<EnvRunnerState> {
        self.runners
            .iter()
            .map(|r| EnvRunnerState {
                runner_id: r.id,
                is_healthy: r.healthy,
                num_restarts: r.generation,
                num_in_flight_requests: r.in_flight,
                last_error: r.last_error.clone(),
            })
            .collect()
    }

    /// A snapshot of the sampler's counters.
    pub fn metrics(&self) -> SamplerMetrics {
        let mut m = self.metrics.clone();
        m.num_healthy_env_runners = self.runners.iter().filter(|r| r.healthy).count();
        m.num_in_flight_requests = self.runners.iter().map(|r| r.in_flight).sum();
        let local_stats = self.local.as_ref().map(EnvRunner::stats);
        let (mut syncs, mut nanos) = self.retired_weight_syncs;
        for stats in self.runners.iter().map(|r| &r.stats).chain(local_stats.as_ref()) {
            syncs += stats.weight_syncs.load(Ordering::Relaxed);
            nanos += stats.weight_sync_nanos.load(Ordering::Relaxed);
        }
        m.num_weight_syncs_applied = syncs;
        m.weight_sync_latency_mean_s =
            if syncs == 0 { 0.0 } else { nanos as f64 / syncs as f64 * 1e-9 };
        m
    }

    /// Stops and joins every runner thread; returns the first error a runner reported that
    /// `sample` had not collected yet, or a thread's panic.
    pub fn shutdown(mut self) -> Result<()> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Result<()> {
        if self.shut_down {
            return Ok(());
        }
        self.shut_down = true;
        self.stop.store(true, Ordering::Relaxed);
        for runner in &mut self.runners {
            runner.tokens = None;
        }
        let mut first_error = None;
        for runner in &mut self.runners {
            if let Some(thread) = runner.thread.take() {
                if let Err(payload) = thread.join() {
                    first_error.get_or_insert(SamplerError::ThreadPanicked {
                        thread: format!("env-runner-{}", runner.id),
                        reason: panic_message(payload.as_ref()),
                    });
                }
            }
        }
        while let Ok(msg) = self.results_rx.try_recv() {
            if let RunnerMsg::Failed { runner_id, generation, reason } = msg {
                let runner = &self.runners[runner_id - 1];
                if runner.generation == generation && runner.healthy {
                    first_error.get_or_insert(SamplerError::EnvRunnerFailed { runner_id, reason });
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl Drop for EnvRunnerGroup {
    fn drop(&mut self) {
        if let Err(e) = self.stop_and_join() {
            tracing::error!(error = %e, "env runner group shut down with an error");
        }
    }
}

/// `now + seconds`, or `None` when that is too far away to represent (wait without a deadline).
pub(crate) fn deadline_after(seconds: f64) -> Option<Instant> {
    Duration::try_from_secs_f64(seconds).ok().and_then(|d| Instant::now().checked_add(d))
}

/// The next message, waiting until `deadline` (forever when `None`); `None` on timeout or when
/// every sender is gone.
pub(crate) fn receive_until<T>(rx: &Receiver<T>, deadline: Option<Instant>) -> Option<T> {
    match deadline {
        Some(deadline) => rx.recv_deadline(deadline).ok(),
        None => rx.recv().ok(),
    }
}

/// A runner thread: one fragment per request token until the tokens run out (the group dropped
/// its sender) or the stop flag is set. Errors and panics are reported, then the thread ends.
fn run_env_runner(
    mut runner: EnvRunner,
    generation: u64,
    requests: &Receiver<()>,
    results: &Sender<RunnerMsg>,
    stop: &AtomicBool,
) {
    let runner_id = runner.runner_id();
    while requests.recv().is_ok() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let msg = match catch_unwind(AssertUnwindSafe(|| runner.sample())) {
            Ok(Ok(fragment)) => RunnerMsg::Fragment { generation, fragment: Box::new(fragment) },
            Ok(Err(e)) => RunnerMsg::Failed { runner_id, generation, reason: e.to_string() },
            Err(payload) => {
                RunnerMsg::Failed { runner_id, generation, reason: panic_message(payload.as_ref()) }
            }
        };
        let failed = matches!(msg, RunnerMsg::Failed { .. });
        if results.send(msg).is_err() || failed {
            return;
        }
    }
}
