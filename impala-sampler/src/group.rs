//! RLlib's `EnvRunnerGroup` with its `FaultTolerantActorManager`: env runners of either kind
//! (single- or multi-agent) behind the one runner seam ([`EnvRunnerLauncher`]), in-flight caps,
//! collection with a timeout, health, restarts and weight sync per policy. One group for both
//! kinds, generic over the fragment it delivers ([`RunnerFragment`]), so fault tolerance and
//! counting are written once.

use impala_profile::{span, Activity};
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use impala_core::Weights;

use crate::context::{by_runner_id, ContextPolicyFactory};
use crate::error::panic_message;
use crate::seam::{EnvRunnerHandle, RunnerMessage, RunnerReply, RunnerRequest};
use crate::streak::FailureStreak;
use crate::threads::{deadline_after, receive_until};
use crate::{
    EnvFactory, EnvRunnerGroupSettings, EnvRunnerLauncher, Fragment, MultiAgentEnvFactory,
    MultiAgentFragment, MultiAgentPolicyFactory, MultiAgentSettings, MultiAgentThreadLauncher,
    PolicyFactory, ReplySender, Result, RunnerFragment, SamplerError, ServedRunner, ThreadLauncher,
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
    /// Version of the newest weights of policy 0 the group holds (the only policy of a
    /// single-agent run).
    pub latest_weights_version: Option<u64>,
    /// Mean policy lag (its policy's newest weights version minus the behaviour version, per
    /// row) of the fragments the last `sample` call delivered; 0 when it delivered none.
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

/// Per policy, the weights version last sent (to one runner incarnation, or by the group's
/// broadcast), so each runner is sent each version of each policy once.
#[derive(Debug, Clone, Default)]
struct SentVersions(Vec<Option<u64>>);

/// The version of each policy's newest weights, if any.
fn versions(latest: &[Option<Arc<Weights>>]) -> Vec<Option<u64>> {
    latest.iter().map(|w| w.as_ref().map(|w| w.version)).collect()
}

impl SentVersions {
    /// Every policy's newest weights, as sent.
    fn of(latest: &[Option<Arc<Weights>>]) -> Self {
        SentVersions(versions(latest))
    }

    fn get(&self, policy: usize) -> Option<u64> {
        self.0.get(policy).copied().flatten()
    }

    /// Whether some policy's newest weights are not the version sent.
    fn lacks(&self, latest: &[Option<Arc<Weights>>]) -> bool {
        latest
            .iter()
            .enumerate()
            .any(|(p, w)| w.as_ref().is_some_and(|w| self.get(p) != Some(w.version)))
    }

    /// Offers `send` the newest weights of each policy whose version was not sent; those it
    /// sends (`true`) are recorded. The newest wins whatever its version, so restoring an older
    /// checkpoint reaches the runners.
    fn send_unsent(
        &mut self,
        latest: &[Option<Arc<Weights>>],
        mut send: impl FnMut(usize, &Arc<Weights>) -> bool,
    ) {
        for (policy, weights) in latest.iter().enumerate() {
            let Some(weights) = weights else { continue };
            if self.get(policy) != Some(weights.version) && send(policy, weights) {
                if self.0.len() <= policy {
                    self.0.resize(policy + 1, None);
                }
                self.0[policy] = Some(weights.version);
            }
        }
    }
}

/// A request to act with `weights` for `policy`, stamped now for the weight-sync latency.
fn set_weights(policy: usize, weights: &Arc<Weights>) -> RunnerRequest {
    RunnerRequest::SetWeights { policy, weights: Arc::clone(weights), sent: Instant::now() }
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
    /// What its running incarnation was sent.
    sent: SentVersions,
}

impl Member {
    fn new(id: usize) -> Self {
        Member {
            id,
            incarnation: 0,
            healthy: true,
            handle: None,
            in_flight: 0,
            last_error: None,
            policy_lag: 0.0,
            streak: FailureStreak::default(),
            sent: SentVersions::default(),
        }
    }

    /// Makes `handle` its running incarnation: every policy's newest weights first, then a full
    /// allowance of `cap` sample requests.
    fn start(
        &mut self,
        mut handle: Box<dyn EnvRunnerHandle>,
        latest: &[Option<Arc<Weights>>],
        cap: usize,
    ) {
        self.sent = SentVersions::default();
        self.sent.send_unsent(latest, |policy, weights| handle.send(set_weights(policy, weights)));
        // A runner that is already gone reports itself on the replies channel.
        self.in_flight = (0..cap).filter(|_| handle.send(RunnerRequest::Sample)).count();
        self.handle = Some(handle);
        self.healthy = true;
    }
}

/// The runner sampling on the calling thread when `num_env_runners == 0` (RLlib's local
/// worker), of either kind.
struct Local {
    runner: Box<dyn ServedRunner>,
    sent: SentVersions,
}

/// RLlib's `EnvRunnerGroup` + `FaultTolerantActorManager` for sampling: `num_env_runners`
/// env runners (ids 1..; 0 is the local runner used when `num_env_runners == 0`), started by an
/// [`EnvRunnerLauncher`] (threads by default) and driven through [`RunnerRequest`]s. `F` is
/// the fragment it delivers: [`Fragment`] for single-agent runs, [`MultiAgentFragment`] (a batch
/// per policy) for multi-agent ones, whose runners may also be single-agent ones.
///
/// Each runner holds at most `max_requests_in_flight` sample requests; it waits once that many
/// of its fragments are uncollected, and gets a new request for each fragment
/// [`sample`](Self::sample) delivers. A runner whose env or policy errors or panics, or that is
/// lost, is marked unhealthy, its uncollected fragments are dropped, and it is relaunched (up to
/// `max_num_env_runner_restarts` restarts over the group) with every policy's newest weights as
/// its next incarnation, whose envs (and, with [`EnvRunnerGroup::with_context_policies`] or a
/// [`MultiAgentPolicyFactory`], policies) draw new random streams; the others go on sampling.
/// Dropping the group (or [`shutdown`](Self::shutdown)) stops every runner.
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
/// group.sync_weights(0, Arc::new(Weights::new(1, vec![])), &ids);
/// assert_eq!(group.metrics().num_healthy_env_runners, 2);
/// group.shutdown()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[doc(alias = "FaultTolerantActorManager")]
#[doc(alias = "AsyncRequestsManager")]
pub struct EnvRunnerGroup<F: RunnerFragment = Fragment> {
    settings: EnvRunnerGroupSettings,
    /// Starts (and restarts) the runners; when sampling locally, the one that built the local
    /// runner, then unused.
    launcher: Box<dyn EnvRunnerLauncher>,
    local: Option<Local>,
    members: Vec<Member>,
    replies_tx: Sender<RunnerMessage>,
    replies_rx: Receiver<RunnerMessage>,
    /// Per policy, the newest weights: given to restarted runners and sent on request. The
    /// group's copy is the only one; the algorithm hands the learner's snapshots straight here.
    latest: Vec<Option<Arc<Weights>>>,
    /// What [`send_latest_weights`](Self::send_latest_weights) sent last (the weights given at
    /// construction count: every runner starts with them).
    broadcast: SentVersions,
    metrics: SamplerMetrics,
    /// Sum of weight-sync latencies, in seconds.
    weight_sync_seconds: f64,
    shut_down: bool,
    fragments: PhantomData<fn() -> F>,
}

impl<F: RunnerFragment> std::fmt::Debug for EnvRunnerGroup<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvRunnerGroup")
            .field("local", &self.local.is_some())
            .field("metrics", &self.metrics())
            .finish_non_exhaustive()
    }
}

impl EnvRunnerGroup<Fragment> {
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
}

impl EnvRunnerGroup<MultiAgentFragment> {
    /// Multi-agent runner threads ([`MultiAgentThreadLauncher`], each runner built on its own
    /// thread), or a local [`MultiAgentEnvRunner`](crate::MultiAgentEnvRunner) on the calling
    /// thread when `settings.num_env_runners == 0`. `settings.runner.num_envs` is the envs per
    /// runner (its other fields are single-agent ones: `runner` says how multi-agent runners
    /// sample); `runner` is the group's base, each runner's own coming from
    /// [`MultiAgentSettings::for_runner`]. `policies` builds each runner's policies acting with
    /// `weights` (one per policy; empty for policies that need none, as random ones), which are
    /// also every policy's newest weights.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use impala_core::{EnvSpec, MultiAgentEnv, Policy, Space};
    /// use impala_envs::HalfObserved;
    /// use impala_sampler::{
    ///     EnvRunnerGroup, EnvRunnerGroupSettings, MultiAgentEnvFactory, MultiAgentPolicyFactory,
    ///     MultiAgentSettings, RandomPolicy,
    /// };
    ///
    /// let envs: MultiAgentEnvFactory =
    ///     Arc::new(|_| Ok(Box::new(HalfObserved::new()) as Box<dyn MultiAgentEnv>));
    /// let spec = EnvSpec {
    ///     id: "bit".into(),
    ///     observation_space: Space::Discrete(2),
    ///     action_space: Space::Discrete(2),
    ///     max_episode_steps: None,
    /// };
    /// let policies: MultiAgentPolicyFactory = Arc::new(move |runner, _, _| {
    ///     Ok(vec![Box::new(RandomPolicy::new(&spec, runner as u64)) as Box<dyn Policy>])
    /// });
    /// let settings = EnvRunnerGroupSettings {
    ///     num_env_runners: 2,
    ///     sample_timeout: Some(Duration::from_secs(10)), // wait for the first fragments
    ///     ..EnvRunnerGroupSettings::default()
    /// };
    /// let runner = MultiAgentSettings {
    ///     policy_of_agent: vec![0, 0],
    ///     rollout_fragment_length: 10,
    ///     seed: Some(0),
    ///     explore: true,
    ///     normalize_actions: true,
    ///     record_episodes: false,
    /// };
    /// let mut group = EnvRunnerGroup::multi_agent(&settings, envs, runner, policies, vec![])?;
    /// let fragments = group.sample()?;
    /// assert!(!fragments.is_empty() && fragments[0].env_steps == 10);
    /// group.shutdown()?;
    /// # Ok::<(), impala_sampler::SamplerError>(())
    /// ```
    pub fn multi_agent(
        settings: &EnvRunnerGroupSettings,
        envs: MultiAgentEnvFactory,
        runner: MultiAgentSettings,
        policies: MultiAgentPolicyFactory,
        weights: Vec<Arc<Weights>>,
    ) -> Result<Self> {
        let num_envs = settings.runner.num_envs;
        let launcher =
            MultiAgentThreadLauncher::new(num_envs, runner, envs, policies, weights.clone());
        if settings.num_env_runners == 0 {
            let local = launcher.builder(0, 0)()?;
            return Ok(Self::local(settings, Box::new(launcher), Box::new(local), weights));
        }
        Self::with_launcher(settings, Box::new(launcher), weights)
    }
}

impl<F: RunnerFragment> EnvRunnerGroup<F> {
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
            return Ok(Self::local(settings, Box::new(launcher), Box::new(local), Vec::new()));
        }
        Self::with_launcher(settings, Box::new(launcher), Vec::new())
    }

    /// `num_env_runners` (at least 1) runners started by `launcher`, e.g. runners in other
    /// processes or on other hosts. `weights` are the newest weights per policy index (may be
    /// empty), sent to each runner before its first sample request.
    pub fn with_launcher(
        settings: &EnvRunnerGroupSettings,
        launcher: Box<dyn EnvRunnerLauncher>,
        weights: Vec<Arc<Weights>>,
    ) -> Result<Self> {
        if settings.num_env_runners == 0 {
            return Err(SamplerError::InvalidConfig {
                field: "num_env_runners",
                reason: "must be at least 1 for runners started by a launcher".into(),
            });
        }
        let mut group = Self::empty(settings, launcher, weights);
        let cap = settings.max_requests_in_flight.get();
        for id in 1..=settings.num_env_runners {
            let handle =
                group.launcher.launch(ReplySender::new(id, 0, group.replies_tx.clone()))?;
            let mut member = Member::new(id);
            member.start(handle, &group.latest, cap);
            group.members.push(member);
        }
        Ok(group)
    }

    /// A group sampling with `runner` on the calling thread, which acts with `weights` already.
    fn local(
        settings: &EnvRunnerGroupSettings,
        launcher: Box<dyn EnvRunnerLauncher>,
        runner: Box<dyn ServedRunner>,
        weights: Vec<Arc<Weights>>,
    ) -> Self {
        let mut group = Self::empty(settings, launcher, weights);
        group.local = Some(Local { runner, sent: SentVersions::of(&group.latest) });
        group
    }

    fn empty(
        settings: &EnvRunnerGroupSettings,
        launcher: Box<dyn EnvRunnerLauncher>,
        weights: Vec<Arc<Weights>>,
    ) -> Self {
        let (replies_tx, replies_rx) = crossbeam_channel::unbounded();
        let latest: Vec<_> = weights.into_iter().map(Some).collect();
        EnvRunnerGroup {
            settings: settings.clone(),
            launcher,
            local: None,
            members: Vec::with_capacity(settings.num_env_runners),
            replies_tx,
            replies_rx,
            broadcast: SentVersions::of(&latest),
            latest,
            metrics: SamplerMetrics {
                num_env_runners: settings.num_env_runners,
                ..Default::default()
            },
            weight_sync_seconds: 0.0,
            shut_down: false,
            fragments: PhantomData,
        }
    }

    /// RLlib's `get_samples_from_workers`: the fragments ready now, waiting at most
    /// `sample_timeout` for the requests in flight; with `num_env_runners == 0`, one fragment
    /// sampled on the calling thread. Each delivered fragment gives its runner a new request.
    /// Failed runners are restarted before returning.
    ///
    /// Errors when a runner failed and `restart_failed_env_runners` is off or the restarts are
    /// used up, or when the local runner fails.
    pub fn sample(&mut self) -> Result<Vec<F>> {
        if let Some(local) = self.local.as_mut() {
            let fragments = vec![sample_locally(local.runner.as_mut())?];
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
            let member = &mut self.members[fragment.runner_id() - 1];
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
    fn handle(&mut self, msg: RunnerMessage, ready: &mut Vec<F>) {
        let Some(member) = self.members.get_mut(msg.runner_id.wrapping_sub(1)) else {
            return;
        };
        let current = member.incarnation == msg.incarnation && member.healthy;
        let reason = match msg.reply {
            RunnerReply::WeightsApplied { latency, .. } => {
                self.metrics.num_weight_syncs_applied += 1;
                self.weight_sync_seconds += latency.as_secs_f64();
                return;
            }
            RunnerReply::Failed(reason) => reason,
            reply => match F::from_reply(reply) {
                Ok(fragment) if current && fragment.runner_id() == member.id => {
                    member.in_flight = member.in_flight.saturating_sub(1);
                    member.streak.delivered();
                    ready.push(fragment);
                    return;
                }
                Ok(fragment) => {
                    self.metrics.num_fragments_dropped += 1;
                    self.metrics.num_env_steps_dropped += fragment.env_steps() as u64;
                    return;
                }
                Err(reply) => unexpected::<F>(&reply),
            },
        };
        if current {
            let runner_id = member.id;
            self.mark_failed(runner_id, reason, ready);
        }
    }

    /// Marks a runner failed and drops its uncollected fragments.
    fn mark_failed(&mut self, runner_id: usize, reason: String, ready: &mut Vec<F>) {
        tracing::warn!(runner_id, %reason, "env runner failed");
        let member = &mut self.members[runner_id - 1];
        member.healthy = false;
        member.in_flight = 0;
        member.last_error = Some(reason);
        self.metrics.num_env_runner_failures += 1;
        let mut dropped_steps = 0;
        let before = ready.len();
        ready.retain(|f| {
            let keep = f.runner_id() != runner_id;
            if !keep {
                dropped_steps += f.env_steps() as u64;
            }
            keep
        });
        self.metrics.num_fragments_dropped += (before - ready.len()) as u64;
        self.metrics.num_env_steps_dropped += dropped_steps;
    }

    /// Mean policy lag of delivered fragments against each policy's newest weights.
    fn measure_lag(&mut self, fragments: &[F]) {
        let latest = versions(&self.latest);
        let mut lag = 0.0;
        for f in fragments {
            let fragment_lag = f.policy_lag(&latest);
            if let Some(member) = self.members.get_mut(f.runner_id().wrapping_sub(1)) {
                member.policy_lag = fragment_lag;
            }
            lag += fragment_lag;
        }
        self.metrics.policy_lag_mean =
            if fragments.is_empty() { 0.0 } else { lag / fragments.len() as f64 };
    }

    /// Relaunches unhealthy runners (RLlib's `restore_workers`), or says why it may not.
    fn restore_failed(&mut self) -> Result<()> {
        let cap = self.settings.max_requests_in_flight.get();
        for member in self.members.iter_mut().filter(|m| !m.healthy) {
            let runner_id = member.id;
            let reason = member.last_error.clone().unwrap_or_else(|| "unknown".into());
            if !self.settings.restart_failed_env_runners {
                return Err(SamplerError::EnvRunnerFailed { runner_id, reason });
            }
            let max_restarts = self.settings.max_num_env_runner_restarts;
            if self.metrics.num_env_runner_restarts >= max_restarts as u64 {
                return Err(SamplerError::TooManyRestarts { runner_id, max_restarts, reason });
            }
            member.streak.failed(runner_id, &reason)?;
            self.metrics.num_env_runner_restarts += 1;
            // The failure is recorded already; a panic that escaped the runner is a bug in the
            // runner's transport, logged and not fatal.
            let deadline = deadline_after(self.settings.stop_grace);
            if let Err(e) = stop_and_join(member.handle.take(), deadline) {
                tracing::error!(runner_id, error = %e, "env runner did not end cleanly");
            }
            member.incarnation += 1;
            let replies = ReplySender::new(runner_id, member.incarnation, self.replies_tx.clone());
            match self.launcher.launch(replies) {
                Ok(handle) => {
                    member.start(handle, &self.latest, cap);
                    tracing::info!(
                        runner_id,
                        incarnation = member.incarnation,
                        "env runner restarted"
                    );
                }
                // Stays unhealthy; the next `sample` call tries again while restarts remain.
                Err(e) => member.last_error = Some(e.to_string()),
            }
        }
        Ok(())
    }

    /// Makes `weights` the newest of policy `policy` without sending them: restarted runners
    /// start with them, and the next [`send_latest_weights`](Self::send_latest_weights) sends
    /// them.
    pub fn set_latest_weights(&mut self, policy: usize, weights: Arc<Weights>) {
        if self.latest.len() <= policy {
            self.latest.resize(policy + 1, None);
        }
        self.latest[policy] = Some(weights);
    }

    /// The newest weights of policy `policy`, if any were given.
    pub fn latest_weights(&self, policy: usize) -> Option<&Arc<Weights>> {
        self.latest.get(policy)?.as_ref()
    }

    /// Whether some policy's newest weights were not sent yet by
    /// [`send_latest_weights`](Self::send_latest_weights) (or given at construction).
    pub fn has_unsent_weights(&self) -> bool {
        self.broadcast.lacks(&self.latest)
    }

    /// Fire-and-forget weight sync: makes `weights` the newest of policy `policy` and sends the
    /// newest weights to each listed runner (see
    /// [`send_latest_weights`](Self::send_latest_weights)).
    pub fn sync_weights(&mut self, policy: usize, weights: Arc<Weights>, runner_ids: &[usize]) {
        self.set_latest_weights(policy, weights);
        self.send_latest_weights(runner_ids);
    }

    /// Sends each listed runner (0 = local) every policy's newest weights that it was not sent
    /// yet, a `SetWeights` message each (the local runner loads them at once), so a broadcast
    /// costs only what changed. Unknown ids are ignored.
    pub fn send_latest_weights(&mut self, runner_ids: &[usize]) {
        let _sending = span(Activity::WeightBroadcast);
        self.broadcast = SentVersions::of(&self.latest);
        for &id in runner_ids {
            if id == 0 {
                let Some(local) = self.local.as_mut() else { continue };
                let applied = &mut self.metrics.num_weight_syncs_applied;
                local.sent.send_unsent(&self.latest, |policy, weights| {
                    match local.runner.set_weights(policy, weights) {
                        Ok(()) => *applied += 1,
                        // It goes on with the weights it has; the next send tries again.
                        Err(e) => {
                            tracing::warn!(policy, error = %e, "local env runner rejected weights");
                            return false;
                        }
                    }
                    true
                });
            } else if let Some(member) = self.members.get_mut(id - 1) {
                let Some(handle) = member.handle.as_mut() else { continue };
                member.sent.send_unsent(&self.latest, |policy, weights| {
                    handle.send(set_weights(policy, weights))
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
        m.latest_weights_version = self.latest_weights(0).map(|w| w.version);
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
        self.stop()
    }

    fn stop(&mut self) -> Result<()> {
        if self.shut_down {
            return Ok(());
        }
        self.shut_down = true;
        let handles = self.members.iter_mut().filter_map(|m| m.handle.take());
        let mut first_error =
            stop_and_join(handles, deadline_after(self.settings.stop_grace)).err();
        while let Ok(msg) = self.replies_rx.try_recv() {
            if let RunnerReply::Failed(reason) = msg.reply {
                let member = self.members.get(msg.runner_id.wrapping_sub(1));
                if member.is_some_and(|m| m.incarnation == msg.incarnation && m.healthy) {
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

impl<F: RunnerFragment> Drop for EnvRunnerGroup<F> {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            tracing::error!(error = %e, "env runner group shut down with an error");
        }
    }
}

/// One fragment from the local runner; its error or panic fails the run (it cannot be
/// restarted).
fn sample_locally<F: RunnerFragment>(runner: &mut dyn ServedRunner) -> Result<F> {
    let failed = |reason| SamplerError::EnvRunnerFailed { runner_id: 0, reason };
    let reply = match catch_unwind(AssertUnwindSafe(|| runner.sample_reply())) {
        Ok(Ok(reply)) => reply,
        Ok(Err(e)) => return Err(failed(e.to_string())),
        Err(payload) => return Err(failed(panic_message(payload.as_ref()))),
    };
    F::from_reply(reply).map_err(|reply| failed(unexpected::<F>(&reply)))
}

/// Why a reply that carries no fragment of the group's kind fails its runner.
fn unexpected<F>(reply: &RunnerReply) -> String {
    let what = match reply {
        RunnerReply::Fragment(_) => "a single-agent fragment",
        RunnerReply::MultiAgentFragment(_) => "a multi-agent fragment",
        RunnerReply::WeightsApplied { .. } => "a weights report",
        RunnerReply::Failed(_) => "a failure",
    };
    let kind = std::any::type_name::<F>().rsplit("::").next().unwrap_or("fragment");
    format!("sent {what} to a group of `{kind}`s")
}

/// Stops every runner of `handles` (all asked first, so they finish their fragments together)
/// and waits for each until `deadline`; a runner stuck in a hung env step is not awaited past
/// it, so a run ends well within the 30 s Kubernetes and Slurm give before SIGKILL. Returns the
/// first failure that escaped a runner.
fn stop_and_join(
    handles: impl IntoIterator<Item = Box<dyn EnvRunnerHandle>>,
    deadline: Option<Instant>,
) -> Result<()> {
    let mut handles: Vec<Box<dyn EnvRunnerHandle>> = handles.into_iter().collect();
    for handle in &mut handles {
        handle.send(RunnerRequest::Stop);
    }
    let mut first_error = Ok(());
    for handle in handles {
        if let Err(e) = handle.join(deadline) {
            if first_error.is_ok() {
                first_error = Err(e);
            }
        }
    }
    first_error
}
