//! The one seam between the [`EnvRunnerGroup`](crate::EnvRunnerGroup) and its env runners, of
//! either kind: the group sends [`RunnerRequest`]s through an [`EnvRunnerHandle`] and receives
//! [`RunnerReply`]s on one shared channel. Runner threads in this process ([`ThreadLauncher`],
//! [`MultiAgentThreadLauncher`]) use it; a transport for runners in other processes or hosts
//! implements [`EnvRunnerLauncher`] and plugs in with
//! [`EnvRunnerGroup::with_launcher`](crate::EnvRunnerGroup::with_launcher), leaving in-flight
//! caps, weight broadcast, fault tolerance and counting to the group.

use impala_profile::{span, Activity};
use std::num::NonZeroUsize;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use impala_core::Weights;

use crate::context::{by_runner_id, ContextPolicyFactory};
use crate::error::panic_message;
use crate::{
    EnvFactory, EnvRunner, EnvRunnerSettings, Fragment, MultiAgentEnvFactory, MultiAgentEnvRunner,
    MultiAgentFragment, MultiAgentPolicyFactory, MultiAgentSettings, PolicyFactory, Result,
    SamplerError,
};

/// What the group asks of an env runner (RLlib's remote calls on an `EnvRunner` actor).
#[derive(Debug, Clone)]
pub enum RunnerRequest {
    /// Sample one more fragment. The group sends at most `max_requests_in_flight` more of
    /// these than it got fragments back, which is how the in-flight cap works.
    Sample,
    /// Act with these weights for policy `policy` from the next fragment on (the newest
    /// request per policy wins).
    SetWeights {
        /// The policy's index: 0 for a single-agent runner, the index of the policy in the
        /// run's policy order for a multi-agent one.
        policy: usize,
        /// The weights.
        weights: Arc<Weights>,
        /// When the group sent them, for the weight-sync latency metric.
        sent: Instant,
    },
    /// Finish the fragment being sampled, if any, and end.
    Stop,
}

/// What an env runner answers.
#[derive(Debug)]
pub enum RunnerReply {
    /// A finished fragment.
    Fragment(Box<Fragment>),
    /// A finished fragment of a multi-agent runner: a batch per policy.
    MultiAgentFragment(Box<MultiAgentFragment>),
    /// Weights from a [`RunnerRequest::SetWeights`] were loaded, `latency` after it was sent.
    WeightsApplied {
        /// The policy they are for.
        policy: usize,
        /// From the request's `sent` to loading.
        latency: Duration,
    },
    /// The runner failed (env or policy error, panic, lost connection) and has ended.
    Failed(String),
}

/// A reply and who sent it: the runner's id and incarnation (bumped on every restart, so the
/// group can drop what a dead incarnation still sends).
#[derive(Debug)]
pub struct RunnerMessage {
    /// The runner's id (1-based).
    pub runner_id: usize,
    /// Which incarnation of it.
    pub incarnation: u64,
    /// The reply.
    pub reply: RunnerReply,
}

/// Where one runner incarnation sends its replies.
#[derive(Clone)]
pub struct ReplySender {
    runner_id: usize,
    incarnation: u64,
    sink: Sink,
}

/// The group's reply channel, or a transport's function that sends replies on.
#[derive(Clone)]
enum Sink {
    Channel(Sender<RunnerMessage>),
    Forward(Arc<dyn Fn(RunnerMessage) -> bool + Send + Sync>),
}

impl std::fmt::Debug for ReplySender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplySender")
            .field("runner_id", &self.runner_id)
            .field("incarnation", &self.incarnation)
            .finish_non_exhaustive()
    }
}

impl ReplySender {
    /// A sender for incarnation `incarnation` of runner `runner_id` into `tx`. Groups make
    /// their own; a transport can make one on the far side to run [`serve`] there.
    pub fn new(runner_id: usize, incarnation: u64, tx: Sender<RunnerMessage>) -> Self {
        ReplySender { runner_id, incarnation, sink: Sink::Channel(tx) }
    }

    /// A sender that hands each reply to `forward` on the runner's own thread (`false` from it:
    /// the far end is gone). A transport uses it to put replies on the wire without a thread
    /// of its own in between.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use impala_sampler::{ReplySender, RunnerReply};
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let log = Arc::clone(&seen);
    /// let replies = ReplySender::forwarding(3, 1, move |msg| {
    ///     log.lock().map(|mut l| l.push((msg.runner_id, msg.incarnation))).is_ok()
    /// });
    /// assert!(replies.send(RunnerReply::Failed("env crashed".into())));
    /// assert_eq!(*seen.lock().map_err(|_| "poisoned")?, vec![(3, 1)]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn forwarding(
        runner_id: usize,
        incarnation: u64,
        forward: impl Fn(RunnerMessage) -> bool + Send + Sync + 'static,
    ) -> Self {
        ReplySender { runner_id, incarnation, sink: Sink::Forward(Arc::new(forward)) }
    }

    /// The runner this sender belongs to.
    pub fn runner_id(&self) -> usize {
        self.runner_id
    }

    /// Which incarnation of the runner this sender belongs to: 0 at its first launch, bumped
    /// on every restart. A launcher builds that incarnation (see [`EnvRunner::build`]), so a
    /// restarted runner draws new env and action streams.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// Sends a reply; `false` when the group is gone (the runner should end).
    pub fn send(&self, reply: RunnerReply) -> bool {
        let msg = RunnerMessage { runner_id: self.runner_id, incarnation: self.incarnation, reply };
        match &self.sink {
            Sink::Channel(tx) => tx.send(msg).is_ok(),
            Sink::Forward(forward) => forward(msg),
        }
    }
}

/// The driver's end of one running env runner.
pub trait EnvRunnerHandle: Send {
    /// Queues a request without blocking. `false` when the runner is gone; its failure
    /// reaches the group as a [`RunnerReply::Failed`] (or the group marks it failed).
    fn send(&mut self, request: RunnerRequest) -> bool;

    /// Waits until `deadline` (`None`: as long as it takes) for the runner to end after
    /// [`RunnerRequest::Stop`] (a thread is joined, a process reaped); a runner still busy
    /// then (an env hung in a step) is left to end on its own, so stopping takes a bounded
    /// time whatever the envs do. An error is a failure that escaped the runner.
    fn join(self: Box<Self>, deadline: Option<Instant>) -> Result<()>;
}

/// Starts env runners: threads here, worker processes, or runners on other hosts.
pub trait EnvRunnerLauncher: Send {
    /// Starts runner `replies.runner_id()` (its incarnation `replies.incarnation()`); it serves requests and answers on `replies` until
    /// it is stopped or fails. An error here leaves the runner down; the group retries while
    /// restarts remain.
    fn launch(&mut self, replies: ReplySender) -> Result<Box<dyn EnvRunnerHandle>>;
}

/// Runs each env runner on a thread of this process: RLlib's remote env runners, as threads.
pub struct ThreadLauncher {
    settings: EnvRunnerSettings,
    env_factory: EnvFactory,
    policies: ContextPolicyFactory,
}

impl std::fmt::Debug for ThreadLauncher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadLauncher").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl ThreadLauncher {
    /// A launcher building each runner from `settings` and the factories. Restarted runners
    /// get new env seeds ([`EnvContext::for_incarnation`](crate::EnvContext::for_incarnation));
    /// `policy_factory` sees only the runner's id (see
    /// [`ThreadLauncher::with_context_policies`]).
    pub fn new(
        settings: EnvRunnerSettings,
        env_factory: EnvFactory,
        policy_factory: PolicyFactory,
    ) -> Self {
        Self::with_context_policies(settings, env_factory, by_runner_id(policy_factory))
    }

    /// As [`ThreadLauncher::new`], with policies built from the runner's
    /// [`EnvContext`](crate::EnvContext) (that of its env 0: runner index, incarnation, seed),
    /// so a restarted runner's policy can sample actions from a new stream too. `policies` is
    /// an `Arc<dyn Fn(&EnvContext) -> Result<Box<dyn Policy>, CoreError> + Send + Sync>`.
    pub fn with_context_policies(
        settings: EnvRunnerSettings,
        env_factory: EnvFactory,
        policies: ContextPolicyFactory,
    ) -> Self {
        ThreadLauncher { settings, env_factory, policies }
    }

    /// Builds incarnation `incarnation` of runner `runner_id` on the calling thread.
    pub(crate) fn build(&self, runner_id: usize, incarnation: u64) -> Result<EnvRunner> {
        EnvRunner::build(&self.settings, runner_id, incarnation, &self.env_factory, |ctx| {
            (self.policies)(ctx)
        })
    }
}

impl EnvRunnerLauncher for ThreadLauncher {
    fn launch(&mut self, replies: ReplySender) -> Result<Box<dyn EnvRunnerHandle>> {
        let runner = self.build(replies.runner_id(), replies.incarnation())?;
        serve_on_thread(runner, replies)
    }
}

/// Runs each multi-agent env runner on a thread of this process, building it there (its envs'
/// worker processes are then that thread's own).
pub struct MultiAgentThreadLauncher {
    num_envs: NonZeroUsize,
    runner: MultiAgentSettings,
    envs: MultiAgentEnvFactory,
    policies: MultiAgentPolicyFactory,
    weights: Vec<Arc<Weights>>,
}

impl std::fmt::Debug for MultiAgentThreadLauncher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiAgentThreadLauncher")
            .field("num_envs", &self.num_envs)
            .field("runner", &self.runner)
            .finish_non_exhaustive()
    }
}

impl MultiAgentThreadLauncher {
    /// A launcher building each runner's `num_envs` envs from `envs` and its policies from
    /// `policies`, first acting with `weights` (the group sends the newest right after each
    /// launch). `runner` is the group's base: each runner samples with
    /// [`MultiAgentSettings::for_runner`], so every runner and incarnation seeds its own envs.
    pub fn new(
        num_envs: NonZeroUsize,
        runner: MultiAgentSettings,
        envs: MultiAgentEnvFactory,
        policies: MultiAgentPolicyFactory,
        weights: Vec<Arc<Weights>>,
    ) -> Self {
        MultiAgentThreadLauncher { num_envs, runner, envs, policies, weights }
    }

    /// What builds incarnation `incarnation` of runner `runner_id`, to call on the thread that
    /// will step its envs.
    pub(crate) fn builder(
        &self,
        runner_id: usize,
        incarnation: u64,
    ) -> impl FnOnce() -> Result<MultiAgentEnvRunner> + Send + 'static {
        let settings = self.runner.for_runner(runner_id, incarnation);
        let (envs, policies, weights) =
            (Arc::clone(&self.envs), Arc::clone(&self.policies), self.weights.clone());
        let num_envs = self.num_envs.get();
        move || {
            let policies = policies(runner_id, incarnation, &weights)?;
            MultiAgentEnvRunner::new(runner_id, num_envs, &envs, policies, &settings)
        }
    }
}

impl EnvRunnerLauncher for MultiAgentThreadLauncher {
    fn launch(&mut self, replies: ReplySender) -> Result<Box<dyn EnvRunnerHandle>> {
        build_and_serve_on_thread(self.builder(replies.runner_id(), replies.incarnation()), replies)
    }
}

/// Runs an already built runner on a thread of its own, [`serve`]-ing the requests sent through
/// the returned handle and answering on `replies`: what [`ThreadLauncher`] does with each runner
/// it builds, and what a transport's runner side does with the runner it built for its slot
/// (its replies going to the wire through a [`ReplySender::forwarding`]).
///
/// ```
/// use std::sync::Arc;
/// use impala_core::{CoreError, Env, EnvSpec, Policy, Space, StepOutcome};
/// use impala_sampler::{
///     serve_on_thread, EnvFactory, EnvRunner, EnvRunnerSettings, RandomPolicy, ReplySender,
///     RunnerReply, RunnerRequest,
/// };
///
/// struct Still(EnvSpec);
/// impl Env for Still {
///     fn spec(&self) -> &EnvSpec { &self.0 }
///     fn reset(&mut self, _: Option<u64>, _: &mut [f32]) -> Result<(), CoreError> { Ok(()) }
///     fn step(&mut self, _: &[f32], _: &mut [f32]) -> Result<StepOutcome, CoreError> {
///         Ok(StepOutcome::default())
///     }
/// }
/// let spec = EnvSpec {
///     id: "Still".into(),
///     observation_space: Space::continuous(vec![0.0], vec![1.0])?,
///     action_space: Space::Discrete(2),
///     max_episode_steps: None,
/// };
/// let still = spec.clone();
/// let envs: EnvFactory = Arc::new(move |_| Ok(Box::new(Still(still.clone())) as Box<dyn Env>));
/// let runner = EnvRunner::build(&EnvRunnerSettings::default(), 1, 0, &envs, |_| {
///     Ok(Box::new(RandomPolicy::new(&spec, 0)) as Box<dyn Policy>)
/// })?;
/// let (tx, rx) = crossbeam_channel::unbounded();
/// let mut handle = serve_on_thread(runner, ReplySender::new(1, 0, tx))?;
/// assert!(handle.send(RunnerRequest::Sample));
/// let reply = rx.recv_timeout(std::time::Duration::from_secs(10))?;
/// assert!(matches!(reply.reply, RunnerReply::Fragment(_)));
/// handle.send(RunnerRequest::Stop);
/// handle.join(None)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn serve_on_thread(
    runner: impl ServedRunner,
    replies: ReplySender,
) -> Result<Box<dyn EnvRunnerHandle>> {
    build_and_serve_on_thread(move || Ok(runner), replies)
}

/// As [`serve_on_thread`], building the runner on its thread first (a runner whose envs must be
/// made on the thread that steps them); a failed build is replied as [`RunnerReply::Failed`].
fn build_and_serve_on_thread<R: ServedRunner>(
    build: impl FnOnce() -> Result<R> + Send + 'static,
    replies: ReplySender,
) -> Result<Box<dyn EnvRunnerHandle>> {
    let name = format!("env-runner-{}", replies.runner_id());
    let (requests, inbox) = crossbeam_channel::unbounded();
    let thread =
        crate::threads::spawn(name, move || match catch_unwind(AssertUnwindSafe(build)) {
            Ok(Ok(runner)) => serve(runner, &inbox, &replies),
            Ok(Err(e)) => {
                replies.send(RunnerReply::Failed(e.to_string()));
            }
            Err(payload) => {
                replies.send(RunnerReply::Failed(panic_message(payload.as_ref())));
            }
        })?;
    Ok(Box::new(ThreadHandle { requests, thread }))
}

/// An env runner [`serve`] can serve: a single-agent [`EnvRunner`] or a
/// [`MultiAgentEnvRunner`]. One serving loop, whatever the fragment.
pub trait ServedRunner: Send + 'static {
    /// Acts with `weights` for policy `policy` from the next fragment on.
    fn set_weights(&mut self, policy: usize, weights: &Arc<Weights>) -> Result<()>;

    /// Samples one fragment, as the reply that carries it.
    fn sample_reply(&mut self) -> Result<RunnerReply>;
}

impl ServedRunner for EnvRunner {
    fn set_weights(&mut self, policy: usize, weights: &Arc<Weights>) -> Result<()> {
        if policy != 0 {
            return Err(SamplerError::PolicyMapping {
                reason: format!("a single-agent runner has policy 0 only, not policy {policy}"),
            });
        }
        EnvRunner::set_weights(self, weights)
    }

    fn sample_reply(&mut self) -> Result<RunnerReply> {
        Ok(RunnerReply::Fragment(Box::new(self.sample()?)))
    }
}

impl ServedRunner for MultiAgentEnvRunner {
    fn set_weights(&mut self, policy: usize, weights: &Arc<Weights>) -> Result<()> {
        MultiAgentEnvRunner::set_weights(self, policy, weights)
    }

    fn sample_reply(&mut self) -> Result<RunnerReply> {
        Ok(RunnerReply::MultiAgentFragment(Box::new(self.sample()?)))
    }
}

struct ThreadHandle {
    requests: Sender<RunnerRequest>,
    thread: JoinHandle<()>,
}

/// How often a join looks whether the runner thread ended.
const JOIN_POLL: Duration = Duration::from_millis(5);

impl EnvRunnerHandle for ThreadHandle {
    fn send(&mut self, request: RunnerRequest) -> bool {
        self.requests.send(request).is_ok()
    }

    fn join(self: Box<Self>, deadline: Option<Instant>) -> Result<()> {
        let ThreadHandle { requests, thread } = *self;
        // Closing the inbox ends a runner that is waiting for requests.
        drop(requests);
        while !thread.is_finished() {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                // Stuck in an env step: its envs' own timeout (`sample_timeout_s`) ends it, and
                // env worker processes also exit with this process.
                tracing::warn!(
                    thread = thread.thread().name().unwrap_or("env runner"),
                    "an env runner did not stop in time (an env is busy in a step); not \
                     waiting for it"
                );
                return Ok(());
            }
            std::thread::sleep(JOIN_POLL);
        }
        crate::threads::join(thread)
    }
}

/// What a runner has been asked to do and has not done yet.
#[derive(Default)]
struct Pending {
    samples: usize,
    /// Per policy, the newest weights and when they were sent.
    weights: Vec<Option<(Arc<Weights>, Instant)>>,
    stop: bool,
}

impl Pending {
    fn take(&mut self, request: RunnerRequest) {
        match request {
            RunnerRequest::Sample => self.samples += 1,
            RunnerRequest::SetWeights { policy, weights, sent } => {
                if self.weights.len() <= policy {
                    self.weights.resize(policy + 1, None);
                }
                self.weights[policy] = Some((weights, sent));
            }
            RunnerRequest::Stop => self.stop = true,
        }
    }
}

/// Serves one runner's requests: waits when there is nothing to do, reads every queued request
/// before each fragment (so the newest weights of each policy act), and replies with each
/// fragment. An error or panic is replied as [`RunnerReply::Failed`] and ends the runner. Any
/// transport's runner side can run this loop over its own channel.
pub fn serve(
    mut runner: impl ServedRunner,
    inbox: &Receiver<RunnerRequest>,
    replies: &ReplySender,
) {
    let mut pending = Pending::default();
    loop {
        if pending.samples == 0 {
            let _idle = span(Activity::RunnerIdle);
            match inbox.recv() {
                Ok(request) => pending.take(request),
                Err(_) => return,
            }
        }
        for request in inbox.try_iter() {
            pending.take(request);
        }
        if pending.stop {
            return;
        }
        if pending.samples == 0 {
            continue;
        }
        let step = catch_unwind(AssertUnwindSafe(|| -> Result<RunnerReply> {
            for (policy, update) in pending.weights.iter_mut().enumerate() {
                if let Some((weights, sent)) = update.take() {
                    let _applying = span(Activity::WeightApply);
                    runner.set_weights(policy, &weights)?;
                    replies.send(RunnerReply::WeightsApplied { policy, latency: sent.elapsed() });
                }
            }
            runner.sample_reply()
        }));
        let reply = match step {
            Ok(Ok(reply)) => reply,
            Ok(Err(e)) => RunnerReply::Failed(e.to_string()),
            Err(payload) => RunnerReply::Failed(panic_message(payload.as_ref())),
        };
        let failed = matches!(reply, RunnerReply::Failed(_));
        if !replies.send(reply) || failed {
            return;
        }
        pending.samples -= 1;
    }
}
