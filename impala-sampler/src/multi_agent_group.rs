//! [`MultiAgentRunnerGroup`]: `num_env_runners` multi-agent env runners sending their fragments
//! to the driver, with per-policy weight updates and restarts of failed runners (RLlib's
//! `EnvRunnerGroup` for multi-agent envs). The runners are threads of this process
//! ([`MultiAgentRunnerGroup::new`]) or come through any transport's launcher
//! ([`MultiAgentRunnerGroup::with_launcher`]: runners in other processes or on other hosts),
//! over the same seam as single-agent runners ([`RunnerRequest`], [`RunnerReply`]).
//!
//! Each runner samples ahead of the driver up to its in-flight cap (the sample requests it
//! holds), takes the newest weights of each policy before every fragment, and ends on its
//! first error, which the driver sees as that runner's failure: the group relaunches it (a
//! fresh incarnation with the newest weights of every policy) while
//! `max_num_env_runner_restarts` allows.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use impala_core::{CoreError, Policy, Weights};

use crate::seam::{build_and_serve_on_thread, stop_and_join};
use crate::streak::FailureStreak;
use crate::threads::deadline_after;
use crate::{
    EnvRunnerHandle, EnvRunnerLauncher, MultiAgentEnvFactory, MultiAgentEnvRunner,
    MultiAgentFragment, MultiAgentSettings, ReplySender, Result, RunnerMessage, RunnerReply,
    RunnerRequest, SamplerError,
};

/// Builds the policies of runner `runner_id`'s incarnation `incarnation` (one per policy
/// index, acting with the given weights).
pub type MultiAgentPolicyFactory = Arc<
    dyn Fn(usize, u64, &[Arc<Weights>]) -> std::result::Result<Vec<Box<dyn Policy>>, CoreError>
        + Send
        + Sync,
>;

/// How long a stopping runner may take to finish its fragment before the group stops waiting.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// How a [`MultiAgentRunnerGroup`] runs its runners.
#[derive(Debug, Clone, PartialEq)]
pub struct MultiAgentGroupSettings {
    /// Runners (ids 1..=n).
    pub num_env_runners: usize,
    /// Envs per runner.
    pub num_envs_per_env_runner: usize,
    /// Fragments a runner may be asked for that the driver has not received yet.
    pub max_requests_in_flight: usize,
    /// Each runner's sampling; `seed` is the group's base: runner `r` seeds its envs from
    /// `seed + 1000 * r` (RLlib's per-worker env seeds), a new stream per incarnation.
    pub runner: MultiAgentSettings,
    /// Restart failed runners (`restart_failed_env_runners`), at most this many times in all.
    pub restart_failed_env_runners: bool,
    /// `max_num_env_runner_restarts`.
    pub max_num_env_runner_restarts: usize,
}

/// Runs each multi-agent env runner on a thread of this process, building it there (its envs'
/// worker processes are then that thread's own).
pub struct MultiAgentThreadLauncher {
    settings: MultiAgentGroupSettings,
    envs: MultiAgentEnvFactory,
    policies: MultiAgentPolicyFactory,
    weights: Vec<Arc<Weights>>,
}

impl std::fmt::Debug for MultiAgentThreadLauncher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiAgentThreadLauncher")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl MultiAgentThreadLauncher {
    /// A launcher building each runner's envs from `envs` and its policies from `policies`,
    /// first acting with `weights` (the group sends the newest right after each launch).
    pub fn new(
        settings: MultiAgentGroupSettings,
        envs: MultiAgentEnvFactory,
        policies: MultiAgentPolicyFactory,
        weights: Vec<Arc<Weights>>,
    ) -> Self {
        MultiAgentThreadLauncher { settings, envs, policies, weights }
    }
}

impl EnvRunnerLauncher for MultiAgentThreadLauncher {
    fn launch(&mut self, replies: ReplySender) -> Result<Box<dyn EnvRunnerHandle>> {
        let (runner_id, incarnation) = (replies.runner_id(), replies.incarnation());
        let runner_settings = self.settings.runner.for_runner(runner_id, incarnation);
        let (envs, policies, weights) =
            (Arc::clone(&self.envs), Arc::clone(&self.policies), self.weights.clone());
        let num_envs = self.settings.num_envs_per_env_runner;
        let build = move || {
            let policies = policies(runner_id, incarnation, &weights)?;
            MultiAgentEnvRunner::new(runner_id, num_envs, &envs, policies, &runner_settings)
        };
        build_and_serve_on_thread(build, replies)
    }
}

/// One runner: its running incarnation's handle.
struct Member {
    handle: Option<Box<dyn EnvRunnerHandle>>,
    incarnation: u64,
    healthy: bool,
    streak: FailureStreak,
}

/// The multi-agent env runners (see the module docs).
///
/// ```
/// use std::sync::Arc;
/// use impala_core::{EnvSpec, MultiAgentEnv, Policy, Space};
/// use impala_envs::HalfObserved;
/// use impala_sampler::{
///     MultiAgentEnvFactory, MultiAgentGroupSettings, MultiAgentPolicyFactory,
///     MultiAgentRunnerGroup, MultiAgentSettings, RandomPolicy,
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
/// let settings = MultiAgentGroupSettings {
///     num_env_runners: 2,
///     num_envs_per_env_runner: 1,
///     max_requests_in_flight: 2,
///     runner: MultiAgentSettings {
///         policy_of_agent: vec![0, 0],
///         rollout_fragment_length: 10,
///         seed: Some(0),
///         explore: true,
///     },
///     restart_failed_env_runners: false,
///     max_num_env_runner_restarts: 0,
/// };
/// let mut group = MultiAgentRunnerGroup::new(settings, envs, policies, vec![])?;
/// let fragments = group.wait(std::time::Duration::from_secs(10))?;
/// assert!(!fragments.is_empty() && fragments[0].env_steps == 10);
/// group.shutdown()?;
/// # Ok::<(), impala_sampler::SamplerError>(())
/// ```
pub struct MultiAgentRunnerGroup {
    settings: MultiAgentGroupSettings,
    launcher: Box<dyn EnvRunnerLauncher>,
    /// The newest weights of each policy, for runners that (re)start.
    latest: Vec<Arc<Weights>>,
    members: Vec<Member>,
    replies_tx: Sender<RunnerMessage>,
    replies_rx: Receiver<RunnerMessage>,
    num_failures: usize,
    num_restarts: usize,
    shut_down: bool,
}

impl std::fmt::Debug for MultiAgentRunnerGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiAgentRunnerGroup")
            .field("settings", &self.settings)
            .field("num_failures", &self.num_failures)
            .field("num_restarts", &self.num_restarts)
            .finish_non_exhaustive()
    }
}

impl MultiAgentRunnerGroup {
    /// Starts `settings.num_env_runners` runner threads, their policies acting with `weights`
    /// (one per policy; empty for policies that need none, as random ones).
    pub fn new(
        settings: MultiAgentGroupSettings,
        envs: MultiAgentEnvFactory,
        policies: MultiAgentPolicyFactory,
        weights: Vec<Arc<Weights>>,
    ) -> Result<Self> {
        let launcher =
            MultiAgentThreadLauncher::new(settings.clone(), envs, policies, weights.clone());
        Self::with_launcher(settings, Box::new(launcher), weights)
    }

    /// Starts `settings.num_env_runners` runners with `launcher` (runners in other processes
    /// or on other hosts), sending each the newest `weights` of every policy before it samples.
    pub fn with_launcher(
        settings: MultiAgentGroupSettings,
        launcher: Box<dyn EnvRunnerLauncher>,
        weights: Vec<Arc<Weights>>,
    ) -> Result<Self> {
        if settings.num_env_runners == 0 {
            return Err(SamplerError::InvalidConfig {
                field: "num_env_runners",
                reason: "is 0, but a multi-agent run samples on env runners; set it to 1 or more"
                    .into(),
            });
        }
        let (replies_tx, replies_rx) = crossbeam_channel::unbounded();
        let mut group = MultiAgentRunnerGroup {
            members: Vec::with_capacity(settings.num_env_runners),
            latest: weights,
            settings,
            launcher,
            replies_tx,
            replies_rx,
            num_failures: 0,
            num_restarts: 0,
            shut_down: false,
        };
        for runner_id in 1..=group.settings.num_env_runners {
            let member = group.launch(runner_id, 0)?;
            group.members.push(member);
        }
        Ok(group)
    }

    /// Launches incarnation `incarnation` of runner `runner_id` and sends it the newest weights
    /// of every policy, then a full allowance of sample requests.
    fn launch(&mut self, runner_id: usize, incarnation: u64) -> Result<Member> {
        let replies = ReplySender::new(runner_id, incarnation, self.replies_tx.clone());
        let mut handle = self.launcher.launch(replies)?;
        for (policy, weights) in self.latest.iter().enumerate() {
            let weights = Arc::clone(weights);
            handle.send(RunnerRequest::SetWeights { policy, weights, sent: Instant::now() });
        }
        let cap = self.settings.max_requests_in_flight.max(1);
        // A runner that is already gone reports itself on the replies channel.
        for _ in 0..cap {
            handle.send(RunnerRequest::Sample);
        }
        Ok(Member {
            handle: Some(handle),
            incarnation,
            healthy: true,
            streak: FailureStreak::default(),
        })
    }

    /// The fragments ready now, waiting up to `timeout` for the first one. A failed runner is
    /// relaunched (or its failure returned, see [`MultiAgentGroupSettings`]).
    pub fn wait(&mut self, timeout: Duration) -> Result<Vec<MultiAgentFragment>> {
        let mut fragments = Vec::new();
        // The group holds a sender: the channel never disconnects.
        let Ok(first) = self.replies_rx.recv_timeout(timeout) else {
            return Ok(fragments);
        };
        self.take(first, &mut fragments)?;
        while let Ok(msg) = self.replies_rx.try_recv() {
            self.take(msg, &mut fragments)?;
        }
        Ok(fragments)
    }

    fn take(&mut self, msg: RunnerMessage, out: &mut Vec<MultiAgentFragment>) -> Result<()> {
        let runner_id = msg.runner_id;
        let Some(member) = self.members.get_mut(runner_id.wrapping_sub(1)) else {
            return Ok(());
        };
        if member.incarnation != msg.incarnation || !member.healthy {
            return Ok(()); // from an incarnation that was replaced
        }
        let reason = match msg.reply {
            RunnerReply::MultiAgentFragment(fragment) => {
                member.streak.delivered();
                out.push(*fragment);
                // One more request for the one answered: the runner keeps sampling ahead.
                if let Some(handle) = member.handle.as_mut() {
                    handle.send(RunnerRequest::Sample);
                }
                return Ok(());
            }
            RunnerReply::WeightsApplied { .. } => return Ok(()),
            RunnerReply::Fragment(_) => "sent a single-agent fragment to a multi-agent run".into(),
            RunnerReply::Failed(reason) => reason,
        };
        self.fail(runner_id, reason)
    }

    /// Runner `runner_id` failed: relaunches it, or says why it may not.
    fn fail(&mut self, runner_id: usize, reason: String) -> Result<()> {
        self.num_failures += 1;
        let index = runner_id - 1;
        let member = &mut self.members[index];
        member.healthy = false;
        if let Some(mut handle) = member.handle.take() {
            handle.send(RunnerRequest::Stop);
            if let Err(e) = handle.join(deadline_after(Some(STOP_GRACE))) {
                tracing::error!(runner_id, error = %e, "multi-agent env runner did not end cleanly");
            }
        }
        if !self.settings.restart_failed_env_runners {
            return Err(SamplerError::EnvRunnerFailed { runner_id, reason });
        }
        if self.num_restarts >= self.settings.max_num_env_runner_restarts {
            return Err(SamplerError::TooManyRestarts {
                runner_id,
                max_restarts: self.settings.max_num_env_runner_restarts,
                reason,
            });
        }
        let mut streak = std::mem::take(&mut self.members[index].streak);
        streak.failed(runner_id, &reason)?;
        tracing::warn!(runner_id, %reason, "multi-agent env runner failed; restarting it");
        self.num_restarts += 1;
        let incarnation = self.members[index].incarnation + 1;
        self.members[index] = Member { streak, ..self.launch(runner_id, incarnation)? };
        Ok(())
    }

    /// Sends `weights` of policy `policy` to every runner (taken before its next fragment) and
    /// keeps them for runners that restart.
    pub fn set_weights(&mut self, policy: usize, weights: Arc<Weights>) {
        if let Some(latest) = self.latest.get_mut(policy) {
            *latest = Arc::clone(&weights);
        }
        for handle in self.members.iter_mut().filter_map(|m| m.handle.as_mut()) {
            let weights = Arc::clone(&weights);
            handle.send(RunnerRequest::SetWeights { policy, weights, sent: Instant::now() });
        }
    }

    /// Runners sampling now.
    pub fn num_healthy(&self) -> usize {
        self.members.iter().filter(|m| m.healthy).count()
    }

    /// Runner failures so far.
    pub fn num_failures(&self) -> usize {
        self.num_failures
    }

    /// Runner restarts so far.
    pub fn num_restarts(&self) -> usize {
        self.num_restarts
    }

    /// Stops the runners (what they sampled and the driver did not take is dropped) and waits
    /// for them, each at most a few seconds (a runner stuck in an env step is left to end on
    /// its own). An error is a failure that escaped a runner.
    pub fn shutdown(mut self) -> Result<()> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Result<()> {
        if self.shut_down {
            return Ok(());
        }
        self.shut_down = true;
        let handles = self.members.iter_mut().filter_map(|m| m.handle.take());
        stop_and_join(handles, deadline_after(Some(STOP_GRACE)))
    }
}

impl Drop for MultiAgentRunnerGroup {
    fn drop(&mut self) {
        if let Err(e) = self.stop_and_join() {
            tracing::error!(error = %e, "multi-agent env runner group shut down with an error");
        }
    }
}
