//! [`MultiAgentRunnerGroup`]: `num_env_runners` threads, each stepping a
//! [`MultiAgentEnvRunner`] and sending its fragments to the driver, with per-policy weight
//! updates and restarts of failed runners (RLlib's `EnvRunnerGroup` for multi-agent envs).
//!
//! Each thread samples ahead of the driver up to its in-flight cap (the channel's room), takes
//! the newest weights of each policy before every fragment, and ends on its first error, which
//! the driver sees as that runner's failure: the group restarts it (a fresh runner with the
//! newest weights of every policy) while `max_num_env_runner_restarts` allows.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use impala_core::{CoreError, Policy, Weights};

use crate::{
    panic_message, MultiAgentEnvFactory, MultiAgentEnvRunner, MultiAgentFragment,
    MultiAgentSettings, Result, SamplerError,
};

/// Builds the policies of runner `runner_id`'s incarnation `incarnation` (one per policy
/// index, acting with the given weights).
pub type MultiAgentPolicyFactory = Arc<
    dyn Fn(usize, u64, &[Arc<Weights>]) -> std::result::Result<Vec<Box<dyn Policy>>, CoreError>
        + Send
        + Sync,
>;

/// How a [`MultiAgentRunnerGroup`] runs its threads.
#[derive(Debug, Clone, PartialEq)]
pub struct MultiAgentGroupSettings {
    /// Runner threads (ids 1..=n).
    pub num_env_runners: usize,
    /// Envs per runner.
    pub num_envs_per_env_runner: usize,
    /// Fragments a runner may have sampled that the driver has not taken yet.
    pub max_requests_in_flight: usize,
    /// Each runner's sampling; `seed` is the group's base: runner `r` seeds its envs from
    /// `seed + 1000 * r` (RLlib's per-worker env seeds).
    pub runner: MultiAgentSettings,
    /// Restart failed runners (`restart_failed_env_runners`), at most this many times in all.
    pub restart_failed_env_runners: bool,
    /// `max_num_env_runner_restarts`.
    pub max_num_env_runner_restarts: usize,
}

/// What a runner thread sends: its fragment, or why it stopped.
type Delivery = (usize, Result<MultiAgentFragment>);

/// One runner slot: its thread, its weights inbox, its incarnation.
struct Slot {
    thread: Option<JoinHandle<()>>,
    inbox: Arc<Mutex<Vec<Option<Arc<Weights>>>>>,
    incarnation: u64,
    healthy: bool,
}

/// The multi-agent env runner threads (see the module docs).
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
    envs: MultiAgentEnvFactory,
    policies: MultiAgentPolicyFactory,
    /// The newest weights of each policy, for runners that (re)start.
    latest: Vec<Arc<Weights>>,
    slots: Vec<Slot>,
    sender: Sender<Delivery>,
    receiver: Receiver<Delivery>,
    stop: Arc<AtomicBool>,
    num_failures: usize,
    num_restarts: usize,
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
        if settings.num_env_runners == 0 {
            return Err(SamplerError::InvalidConfig {
                field: "num_env_runners",
                reason: "is 0, but a multi-agent run samples on runner threads; set it to 1 or \
                         more"
                    .into(),
            });
        }
        let (sender, receiver) =
            bounded(settings.max_requests_in_flight.max(1) * settings.num_env_runners);
        let mut group = MultiAgentRunnerGroup {
            slots: Vec::new(),
            latest: weights,
            settings,
            envs,
            policies,
            sender,
            receiver,
            stop: Arc::new(AtomicBool::new(false)),
            num_failures: 0,
            num_restarts: 0,
        };
        for runner in 1..=group.settings.num_env_runners {
            let slot = group.spawn(runner, 0)?;
            group.slots.push(slot);
        }
        Ok(group)
    }

    fn spawn(&self, runner_id: usize, incarnation: u64) -> Result<Slot> {
        let inbox = Arc::new(Mutex::new(Vec::new()));
        let mut runner_settings = self.settings.runner.clone();
        runner_settings.seed = runner_settings
            .seed
            .map(|s| crate::stream_seed(s.wrapping_add(1000 * runner_id as u64), incarnation));
        let (envs, policies, weights) =
            (Arc::clone(&self.envs), Arc::clone(&self.policies), self.latest.clone());
        let (sender, stop, thread_inbox) =
            (self.sender.clone(), Arc::clone(&self.stop), Arc::clone(&inbox));
        let num_envs = self.settings.num_envs_per_env_runner;
        let name = format!("ma-env-runner-{runner_id}");
        let thread = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                let run = || -> Result<()> {
                    let policies = policies(runner_id, incarnation, &weights)?;
                    let mut runner = MultiAgentEnvRunner::new(
                        runner_id,
                        num_envs,
                        &envs,
                        policies,
                        &runner_settings,
                    )?;
                    while !stop.load(Ordering::Acquire) {
                        let updates = std::mem::take(
                            &mut *thread_inbox.lock().unwrap_or_else(|e| e.into_inner()),
                        );
                        for (policy, w) in updates.into_iter().enumerate() {
                            if let Some(w) = w {
                                runner.set_weights(policy, &w)?;
                            }
                        }
                        let fragment = runner.sample()?;
                        if sender.send((runner_id, Ok(fragment))).is_err() {
                            break;
                        }
                    }
                    Ok(())
                };
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run))
                    .unwrap_or_else(|payload| {
                        Err(SamplerError::EnvRunnerFailed {
                            runner_id,
                            reason: panic_message(payload.as_ref()),
                        })
                    });
                if let Err(e) = outcome {
                    let _ = sender.send((runner_id, Err(e)));
                }
            })
            .map_err(|e| SamplerError::Spawn { thread: name, reason: e.to_string() })?;
        Ok(Slot { thread: Some(thread), inbox, incarnation, healthy: true })
    }

    /// The fragments ready now, waiting up to `timeout` for the first one. A failed runner is
    /// restarted (or its failure returned, see [`MultiAgentGroupSettings`]).
    pub fn wait(&mut self, timeout: Duration) -> Result<Vec<MultiAgentFragment>> {
        let mut fragments = Vec::new();
        match self.receiver.recv_timeout(timeout) {
            Ok(delivery) => self.take(delivery, &mut fragments)?,
            // The group holds a sender: the channel never disconnects.
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                return Ok(fragments)
            }
        }
        while let Ok(delivery) = self.receiver.try_recv() {
            self.take(delivery, &mut fragments)?;
        }
        Ok(fragments)
    }

    fn take(
        &mut self,
        (runner_id, outcome): Delivery,
        out: &mut Vec<MultiAgentFragment>,
    ) -> Result<()> {
        let error = match outcome {
            Ok(fragment) => {
                out.push(fragment);
                return Ok(());
            }
            Err(e) => e,
        };
        self.num_failures += 1;
        let index = runner_id - 1;
        if let Some(thread) = self.slots[index].thread.take() {
            let _ = thread.join();
        }
        self.slots[index].healthy = false;
        let reason = error.to_string();
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
        tracing::warn!(runner_id, %reason, "multi-agent env runner failed; restarting it");
        let incarnation = self.slots[index].incarnation + 1;
        self.slots[index] = self.spawn(runner_id, incarnation)?;
        self.num_restarts += 1;
        Ok(())
    }

    /// Sends `weights` of policy `policy` to every runner (taken before its next fragment) and
    /// keeps them for runners that restart.
    pub fn set_weights(&mut self, policy: usize, weights: Arc<Weights>) {
        if let Some(latest) = self.latest.get_mut(policy) {
            *latest = Arc::clone(&weights);
        }
        for slot in &self.slots {
            let mut inbox = slot.inbox.lock().unwrap_or_else(|e| e.into_inner());
            if inbox.len() <= policy {
                inbox.resize(policy + 1, None);
            }
            inbox[policy] = Some(Arc::clone(&weights));
        }
    }

    /// Runners sampling now.
    pub fn num_healthy(&self) -> usize {
        self.slots.iter().filter(|s| s.healthy).count()
    }

    /// Runner failures so far.
    pub fn num_failures(&self) -> usize {
        self.num_failures
    }

    /// Runner restarts so far.
    pub fn num_restarts(&self) -> usize {
        self.num_restarts
    }

    /// Stops the threads (what they sampled and the driver did not take is dropped) and joins
    /// them.
    pub fn shutdown(mut self) -> Result<()> {
        self.stop.store(true, Ordering::Release);
        let threads: Vec<JoinHandle<()>> =
            self.slots.iter_mut().filter_map(|s| s.thread.take()).collect();
        // Runners blocked on a full channel go on once it is drained.
        while threads.iter().any(|t| !t.is_finished()) {
            while self.receiver.try_recv().is_ok() {}
            std::thread::sleep(Duration::from_millis(1));
        }
        for thread in threads {
            let name = thread.thread().name().unwrap_or("ma-env-runner").to_string();
            thread.join().map_err(|payload| SamplerError::ThreadPanicked {
                thread: name,
                reason: panic_message(payload.as_ref()),
            })?;
        }
        Ok(())
    }
}

impl Drop for MultiAgentRunnerGroup {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}
