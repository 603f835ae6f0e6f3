//! RLlib's `EnvRunnerGroup` with its `FaultTolerantActorManager`: env runners behind the one
//! runner seam ([`EnvRunnerLauncher`]), in-flight caps, collection with a timeout, health,
//! restarts and weight sync.

use impala_profile::{span, Activity};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use impala_core::{EnvSpec, Weights};

use crate::context::{by_runner_id, ContextPolicyFactory};
use crate::error::panic_message;
use crate::seam::{EnvRunnerHandle, RunnerMessage, RunnerReply, RunnerRequest};
use crate::streak::FailureStreak;
use crate::threads::{deadline_after, receive_until};
use crate::{
    policy_lag, EnvFactory, EnvRunner, EnvRunnerGroupSettings, EnvRunnerLauncher, Fragment,
    PolicyFactory, ReplySender, Result, SamplerError, ThreadLauncher,
};

/// The group's health and weight-sync counters, named as RLlib reports them where RLlib has
/// the counter. What was sampled (steps, episodes) is counted by the caller, from the
/// fragments [`EnvRunnerGroup::sample`] returns, once.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SamplerMetrics {
    /// Env runners configured (`num_env_runners`; 0 = sampling on the calling thread).
    pub num_env_runners: usize,
    /// Env runners currently healthy.
    pub num_healthy_env_runners: usize,
    /// Runner failures seen (errors, panics, lost runners).
    pub num_env_runner_failures: u64,
    /// Runner restarts done (RLlib's `num_remote_worker_restarts`).
    pub num_env_runner_restarts: u64,
    /// Sample requests issued and not yet collected, over all runners.
    pub num_in_flight_requests: usize,
    /// Fragments of failed runners that were dropped instead of delivered.
    pub num_fragments_dropped: u64,
    /// Env steps in those dropped fragments.
    pub num_env_steps_dropped: u64,
    /// Version of the newest weights the group holds.
    pub latest_weights_version: Option<u64>,
    /// Mean policy lag (newest weights version minus behaviour version) of the fragments the
    /// last `sample` call delivered; 0 when it delivered none.
    pub policy_lag_mean: f64,
    /// Weight snapshots loaded by runners' policies.
    pub num_weight_syncs_applied: u64,
    /// Mean seconds from sending weights to a runner loading them.
    pub weight_sync_latency_mean_s: f64,
}

/// One runner as the group tracks it (RLlib's `FaultTolerantActorManager` actor state).
#[derive(Debug, Clone, PartialEq)]
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
    /// Policy lag of its latest collected fragment: how many weights versions behind the
    /// newest its rows acted (mean over the rows).
    pub policy_lag: f64,
}

/// One runner's slot in the group.
struct Member {
    id: usize,
    /// Bumped on every restart, so replies from a dead incarnation are recognised.
    incarnation: u64,
    healthy: bool,
    handle: Option<Box<dyn EnvRunnerHandle>>,
    in_flight: usize,
    last_error: Option<String>,
    /// See [`EnvRunnerState::policy_lag`].
    policy_lag: f64,
    streak: FailureStreak,
}

/// RLlib's `EnvRunnerGroup` + `FaultTolerantActorManager` for sampling: `num_env_runners`
/// env runners (ids 1..; 0 is the local runner used when `num_env_runners == 0`), started by an
/// [`EnvRunnerLauncher`] (threads by default) and driven through [`RunnerRequest`]s.
///
/// Each runner holds at most `max_requests_in_flight` sample requests; it waits once that many
/// of its fragments are uncollected, and gets a new request for each fragment
/// [`sample`](Self::sample) delivers. A runner whose env or policy errors or panics, or that is
/// lost, is marked unhealthy, its uncollected fragments are dropped, and it is relaunched (up to
/// `max_num_env_runner_restarts` restarts over the group) with the newest weights as its next
/// incarnation, whose envs (and, with [`EnvRunnerGroup::with_context_policies`], policy) draw
/// new random streams; the others go on sampling. Dropping the group (or [`shutdown`](Self::shutdown)) stops every runner.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use impala_core::{CoreError, Env, EnvSpec, Space, StepOutcome, Weights};
/// use impala_sampler::{EnvFactory, EnvRunnerGroup, EnvRunnerGroupSettings, PolicyFactory, RandomPolicy};
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
/// let settings = EnvRunnerGroupSettings {
///     num_env_runners: 2,
///     sample_timeout: Some(Duration::from_secs(1)), // wait for the first fragments
///     ..EnvRunnerGroupSettings::default()
/// };
/// let mut group = EnvRunnerGroup::new(&settings, envs, policies)?;
/// let fragments = group.sample()?;
/// assert!(!fragments.is_empty());
/// let ids: Vec<usize> = fragments.iter().map(|f| f.runner_id).collect();
/// group.sync_weights(Arc::new(Weights::new(1, vec![])), &ids);
/// assert_eq!(group.metrics().num_healthy_env_runners, 2);
/// group.shutdown()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[doc(alias = "FaultTolerantActorManager")]
#[doc(alias = "AsyncRequestsManager")]
pub struct EnvRunnerGroup {
    settings: EnvRunnerGroupSettings,
    spec: EnvSpec,
    /// Starts (and restarts) the runners; `None` when sampling locally.
    launcher: Option<Box<dyn EnvRunnerLauncher>>,
    local: Option<EnvRunner>,
    members: Vec<Member>,
    replies_tx: Sender<RunnerMessage>,
    replies_rx: Receiver<RunnerMessage>,
    /// The newest weights: given to restarted runners and broadcast on request. The group's
    /// copy is the only one; the algorithm hands the learner's snapshots straight here.
    latest_weights: Option<Arc<Weights>>,
    /// The version of the weights last sent by [`sync_weights`](Self::sync_weights).
    broadcast_version: Option<u64>,
    metrics: SamplerMetrics,
    /// Sum of weight-sync latencies, in seconds.
    weight_sync_seconds: f64,
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
    /// Runner threads built from the factories ([`ThreadLauncher`]), or the local runner when
    /// `num_env_runners == 0`. Runners are built on the calling thread, so env and config
    /// errors surface here; each then starts with its full allowance of sample requests.
    /// Restarted runners get new env seeds
    /// ([`EnvContext::for_incarnation`](crate::EnvContext::for_incarnation)); `policy_factory`
    /// sees only the runner's id (see [`EnvRunnerGroup::with_context_policies`]).
    pub fn new(
        settings: &EnvRunnerGroupSettings,
        env_factory: EnvFactory,
        policy_factory: PolicyFactory,
    ) -> Result<Self> {
        Self::with_context_policies(settings, env_factory, by_runner_id(policy_factory))
    }

    /// As [`EnvRunnerGroup::new`], with each runner's policy built from the runner's
    /// [`EnvContext`](crate::EnvContext) (that of its env 0: runner index, incarnation, seed),
    /// so a restarted runner samples actions from a new stream as well as stepping new env
    /// streams. `policies` is an
    /// `Arc<dyn Fn(&EnvContext) -> Result<Box<dyn Policy>, CoreError> + Send + Sync>`.
    pub fn with_context_policies(
        settings: &EnvRunnerGroupSettings,
        env_factory: EnvFactory,
        policies: ContextPolicyFactory,
    ) -> Result<Self> {
        let launcher =
            ThreadLauncher::with_context_policies(settings.runner.clone(), env_factory, policies);
        if settings.num_env_runners == 0 {
            let local = launcher.build(0, 0)?;
            let spec = local.spec().clone();
            let mut group = Self::empty(settings, spec, None);
            group.local = Some(local);
            return Ok(group);
        }
        // Build runner 1 here for the spec; the launcher builds the others the same way.
        let first = launcher.build(1, 0)?;
        let spec = first.spec().clone();
        let mut group = Self::empty(settings, spec, None);
        let replies = ReplySender::new(1, 0, group.replies_tx.clone());
        let handle = crate::seam::serve_on_thread(first, replies)?;
        group.add_member(1, handle);
        group.launcher = Some(Box::new(launcher));
        for id in 2..=settings.num_env_runners {
            group.launch_member(id)?;
        }
        Ok(group)
    }

    /// `num_env_runners` (at least 1) runners started by `launcher`, e.g. runners in other
    /// processes or on other hosts, whose envs have `spec`.
    pub fn with_launcher(
        settings: &EnvRunnerGroupSettings,
        launcher: Box<dyn EnvRunnerLauncher>,
        spec: EnvSpec,
    ) -> Result<Self> {
        if settings.num_env_runners == 0 {
            return Err(SamplerError::InvalidConfig {
                field: "num_env_runners",
                reason: "must be at least 1 for runners started by a launcher".into(),
            });
        }
        let mut group = Self::empty(settings, spec, Some(launcher));
        for id in 1..=settings.num_env_runners {
            group.launch_member(id)?;
        }
        Ok(group)
    }

    fn empty(
        settings: &EnvRunnerGroupSettings,
        spec: EnvSpec,
        launcher: Option<Box<dyn EnvRunnerLauncher>>,
    ) -> Self {
        let (replies_tx, replies_rx) = crossbeam_channel::unbounded();
        EnvRunnerGroup {
            settings: settings.clone(),
            spec,
            launcher,
            local: None,
            members: Vec::with_capacity(settings.num_env_runners),
            replies_tx,
            replies_rx,
            latest_weights: None,
            broadcast_version: None,
            metrics: SamplerMetrics {
                num_env_runners: settings.num_env_runners,
                ..Default::default()
            },
            weight_sync_seconds: 0.0,
            shut_down: false,
        }
    }

    /// Launches member `id` (incarnation 0) and records it.
    fn launch_member(&mut self, id: usize) -> Result<()> {
        let replies = ReplySender::new(id, 0, self.replies_tx.clone());
        let launcher = self.launcher.as_mut().ok_or(SamplerError::InvalidConfig {
            field: "num_env_runners",
            reason: "runners cannot be launched when sampling locally".into(),
        })?;
        let handle = launcher.launch(replies)?;
        self.add_member(id, handle);
        Ok(())
    }

    fn add_member(&mut self, id: usize, handle: Box<dyn EnvRunnerHandle>) {
        let mut member = Member {
            id,
            incarnation: 0,
            healthy: true,
            handle: None,
            in_flight: 0,
            last_error: None,
            policy_lag: 0.0,
            streak: FailureStreak::default(),
        };
        self.start(&mut member, handle);
        self.members.push(member);
    }

    /// Makes `handle` the member's running incarnation (see [`start_member`]).
    fn start(&self, member: &mut Member, handle: Box<dyn EnvRunnerHandle>) {
        let cap = self.settings.max_requests_in_flight.get();
        start_member(member, handle, self.latest_weights.as_ref(), cap);
    }

    /// The environments' spec (observation and action spaces for building the learner).
    pub fn env_spec(&self) -> &EnvSpec {
        &self.spec
    }

    /// RLlib's `get_samples_from_workers`: the fragments ready now, waiting at most
    /// `sample_timeout` for the requests in flight; with `num_env_runners == 0`, one fragment
    /// sampled on the calling thread. Each delivered fragment gives its runner a new request.
    /// Failed runners are restarted before returning.
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
            self.measure_lag(&fragments);
            return Ok(fragments);
        }
        let deadline = deadline_after(self.settings.sample_timeout);
        let mut ready = Vec::new();
        loop {
            let msg = match self.replies_rx.try_recv() {
                Ok(msg) => msg,
                Err(TryRecvError::Empty) => {
                    if !self.members.iter().any(|m| m.healthy && m.in_flight > 0) {
                        break;
                    }
                    let _waiting = span(Activity::DriverWait);
                    match receive_until(&self.replies_rx, deadline) {
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
            let member = &mut self.members[fragment.runner_id - 1];
            if let Some(handle) = member.handle.as_mut() {
                // A runner that died meanwhile reports itself on the replies channel.
                if handle.send(RunnerRequest::Sample) {
                    member.in_flight += 1;
                }
            }
        }
        self.measure_lag(&ready);
        Ok(ready)
    }

    /// Processes one reply: keeps current fragments, drops stale ones, marks failures.
    fn handle(&mut self, msg: RunnerMessage, ready: &mut Vec<Fragment>) {
        let Some(member) = self.members.get_mut(msg.runner_id.wrapping_sub(1)) else {
            return;
        };
        let current = member.incarnation == msg.incarnation && member.healthy;
        match msg.reply {
            RunnerReply::Fragment(fragment) => {
                if current && fragment.runner_id == member.id {
                    member.in_flight = member.in_flight.saturating_sub(1);
                    member.streak.delivered();
                    ready.push(*fragment);
                } else {
                    self.metrics.num_fragments_dropped += 1;
                    self.metrics.num_env_steps_dropped += fragment.batch.env_steps() as u64;
                }
            }
            RunnerReply::WeightsApplied { latency, .. } => {
                self.metrics.num_weight_syncs_applied += 1;
                self.weight_sync_seconds += latency.as_secs_f64();
            }
            RunnerReply::Failed(reason) => {
                if current {
                    let runner_id = member.id;
                    self.mark_failed(runner_id, reason, ready);
                }
            }
            RunnerReply::MultiAgentFragment(_) => {
                if current {
                    let runner_id = member.id;
                    let reason = "sent a multi-agent fragment to a single-agent run".to_string();
                    self.mark_failed(runner_id, reason, ready);
                }
            }
        }
    }

    /// Marks a runner failed and drops its uncollected fragments.
    fn mark_failed(&mut self, runner_id: usize, reason: String, ready: &mut Vec<Fragment>) {
        tracing::warn!(runner_id, %reason, "env runner failed");
        let member = &mut self.members[runner_id - 1];
        member.healthy = false;
        member.in_flight = 0;
        member.last_error = Some(reason);
        self.metrics.num_env_runner_failures += 1;
        let mut dropped_steps = 0;
        let before = ready.len();
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

    /// Mean policy lag of delivered fragments against the newest weights.
    fn measure_lag(&mut self, fragments: &[Fragment]) {
        let latest = self.metrics.latest_weights_version;
        let mut lag = 0.0;
        if let Some(v) = latest {
            for f in fragments {
                let fragment_lag = policy_lag(&f.batch, v);
                if let Some(member) = self.members.get_mut(f.runner_id.wrapping_sub(1)) {
                    member.policy_lag = fragment_lag;
                }
                lag += fragment_lag;
            }
        }
        self.metrics.policy_lag_mean =
            if fragments.is_empty() { 0.0 } else { lag / fragments.len() as f64 };
    }

    /// Relaunches unhealthy runners (RLlib's `restore_workers`), or says why it may not.
    fn restore_failed(&mut self) -> Result<()> {
        let grace = self.settings.stop_grace;
        for idx in 0..self.members.len() {
            if self.members[idx].healthy {
                continue;
            }
            let member = &mut self.members[idx];
            let (runner_id, reason) =
                (member.id, member.last_error.clone().unwrap_or_else(|| "unknown".into()));
            if !self.settings.restart_failed_env_runners {
                return Err(SamplerError::EnvRunnerFailed { runner_id, reason });
            }
            let max_restarts = self.settings.max_num_env_runner_restarts;
            if self.metrics.num_env_runner_restarts >= max_restarts as u64 {
                return Err(SamplerError::TooManyRestarts { runner_id, max_restarts, reason });
            }
            member.streak.failed(runner_id, &reason)?;
            self.metrics.num_env_runner_restarts += 1;
            if let Some(mut handle) = member.handle.take() {
                handle.send(RunnerRequest::Stop);
                // The failure is recorded already; a panic that escaped the runner is a bug
                // in the runner's transport, logged and not fatal.
                if let Err(e) = handle.join(deadline_after(grace)) {
                    tracing::error!(runner_id, error = %e, "env runner did not end cleanly");
                }
            }
            member.incarnation += 1;
            let replies = ReplySender::new(runner_id, member.incarnation, self.replies_tx.clone());
            let launched = match self.launcher.as_mut() {
                Some(launcher) => launcher.launch(replies),
                None => Err(SamplerError::InvalidConfig {
                    field: "num_env_runners",
                    reason: "the local runner cannot be restarted".into(),
                }),
            };
            match launched {
                Ok(handle) => {
                    let cap = self.settings.max_requests_in_flight.get();
                    let member = &mut self.members[idx];
                    start_member(member, handle, self.latest_weights.as_ref(), cap);
                    tracing::info!(
                        runner_id,
                        incarnation = member.incarnation,
                        "env runner restarted"
                    );
                }
                // Stays unhealthy; the next `sample` call tries again while restarts remain.
                Err(e) => self.members[idx].last_error = Some(e.to_string()),
            }
        }
        Ok(())
    }

    /// Makes `weights` the newest weights without sending them: restarted runners start with
    /// them, and the next [`sync_weights`](Self::sync_weights) sends them.
    pub fn set_latest_weights(&mut self, weights: Arc<Weights>) {
        self.metrics.latest_weights_version = Some(weights.version);
        self.latest_weights = Some(weights);
    }

    /// The newest weights, if any were given.
    pub fn latest_weights(&self) -> Option<&Arc<Weights>> {
        self.latest_weights.as_ref()
    }

    /// Whether the newest weights differ from the last ones sent.
    pub fn has_unsent_weights(&self) -> bool {
        self.latest_weights.as_ref().is_some_and(|w| Some(w.version) != self.broadcast_version)
    }

    /// Fire-and-forget weight sync: makes `weights` the newest and sends them to each listed
    /// runner (0 = local), which loads them before its next fragment. Unknown ids are ignored.
    pub fn sync_weights(&mut self, weights: Arc<Weights>, runner_ids: &[usize]) {
        self.set_latest_weights(weights);
        self.send_latest_weights(runner_ids);
    }

    /// Sends the newest weights (if any) to each listed runner (0 = local).
    pub fn send_latest_weights(&mut self, runner_ids: &[usize]) {
        let Some(weights) = self.latest_weights.clone() else { return };
        let _sending = span(Activity::WeightBroadcast);
        self.broadcast_version = Some(weights.version);
        for &id in runner_ids {
            if id == 0 {
                if let Some(local) = self.local.as_mut() {
                    match local.set_weights(&weights) {
                        Ok(()) => self.metrics.num_weight_syncs_applied += 1,
                        // The local runner fails its next fragment the same way, which ends
                        // training with the cause.
                        Err(e) => tracing::warn!(error = %e, "local env runner rejected weights"),
                    }
                }
            } else if let Some(handle) =
                self.members.get_mut(id - 1).and_then(|m| m.handle.as_mut())
            {
                handle.send(RunnerRequest::SetWeights {
                    policy: 0,
                    weights: Arc::clone(&weights),
                    sent: Instant::now(),
                });
            }
        }
    }

    /// Ids of the healthy runners (`[0]` when sampling on the calling thread).
    pub fn healthy_runner_ids(&self) -> Vec<usize> {
        if self.local.is_some() {
            return vec![0];
        }
        self.members.iter().filter(|m| m.healthy).map(|m| m.id).collect()
    }

    /// Health, restarts and in-flight requests of every runner, by id.
    pub fn runner_states(&self) -> Vec<EnvRunnerState> {
        self.members
            .iter()
            .map(|m| EnvRunnerState {
                runner_id: m.id,
                is_healthy: m.healthy,
                num_restarts: m.incarnation,
                num_in_flight_requests: m.in_flight,
                last_error: m.last_error.clone(),
                policy_lag: m.policy_lag,
            })
            .collect()
    }

    /// A snapshot of the group's counters.
    pub fn metrics(&self) -> SamplerMetrics {
        let mut m = self.metrics.clone();
        m.num_healthy_env_runners = self.members.iter().filter(|r| r.healthy).count();
        m.num_in_flight_requests = self.members.iter().map(|r| r.in_flight).sum();
        m.weight_sync_latency_mean_s = if m.num_weight_syncs_applied == 0 {
            0.0
        } else {
            self.weight_sync_seconds / m.num_weight_syncs_applied as f64
        };
        m
    }

    /// Stops every runner and waits for it; returns the first failure a runner reported that
    /// `sample` had not collected yet, or one that escaped a runner.
    pub fn shutdown(mut self) -> Result<()> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Result<()> {
        if self.shut_down {
            return Ok(());
        }
        self.shut_down = true;
        let handles = self.members.iter_mut().filter_map(|m| m.handle.take());
        let mut first_error =
            crate::seam::stop_and_join(handles, deadline_after(self.settings.stop_grace)).err();
        while let Ok(msg) = self.replies_rx.try_recv() {
            if let RunnerReply::Failed(reason) = msg.reply {
                let member = &self.members[msg.runner_id - 1];
                if member.incarnation == msg.incarnation && member.healthy {
                    first_error.get_or_insert(SamplerError::EnvRunnerFailed {
                        runner_id: msg.runner_id,
                        reason,
                    });
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Makes `handle` the member's running incarnation: the newest weights first, then a full
/// allowance of `cap` sample requests.
fn start_member(
    member: &mut Member,
    mut handle: Box<dyn EnvRunnerHandle>,
    latest_weights: Option<&Arc<Weights>>,
    cap: usize,
) {
    if let Some(weights) = latest_weights {
        handle.send(RunnerRequest::SetWeights {
            policy: 0,
            weights: Arc::clone(weights),
            sent: Instant::now(),
        });
    }
    // A runner that is already gone reports itself on the replies channel.
    member.in_flight = (0..cap).filter(|_| handle.send(RunnerRequest::Sample)).count();
    member.handle = Some(handle);
    member.healthy = true;
}

impl Drop for EnvRunnerGroup {
    fn drop(&mut self) {
        if let Err(e) = self.stop_and_join() {
            tracing::error!(error = %e, "env runner group shut down with an error");
        }
    }
}
