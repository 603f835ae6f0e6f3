//! [`Impala`]: RLlib's `Impala` algorithm object (old API stack) on threads, for any number of
//! policies: env runners (impala-sampler) delivering a batch per policy, one learner thread
//! training every policy to train (impala-learner), and the driver's `training_step` loop that
//! connects them, compiles iteration results and saves/restores checkpoints. A single-agent run
//! is a run with one policy, `default_policy`, as in RLlib.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use impala_config::{CountStepsBy, PolicyMap, ValidatedConfig};
use impala_core::{
    CustomModel, EnvSpec, EpisodeRecord, EpisodeStats, MultiAgentSpec, NamedTensor, Weights,
};
use impala_envs::MeanStdFilter;
use impala_learner::LearnerError;
use impala_profile::{span, Activity};
use impala_runner_pool::{RunEnv, RunnerTransport};
use impala_sampler::{EnvRunnerState, SamplerError, SamplerMetrics, WeightBroadcaster};
use tch::Device;

use crate::checkpoint::{
    checkpoint_name, find_checkpoint, put_saved_filter, read_checkpoint, save_checkpoint,
    sha256_hex, AlgorithmState, Counters, LEARNER_DIR,
};
use crate::evaluation::Evaluator;
use crate::module_owner::{module_owner, ModuleOwner};
use crate::policies::{
    batching_stage, start_learners, PolicyLearner, PolicySlot, StatsMean, Streams,
};
use crate::policy::TrainedPolicy;
use crate::result::{LearnerQueueInfo, DEFAULT_POLICY_ID};
use crate::run_envs::RunEnvs;
use crate::runners::{local_runners, EnvRunnerGroup, PolicyFragment};
use crate::settings;
use crate::torchscript::SharedModule;
use crate::{
    EpisodeWindow, EvaluationResult, ImpalaError, IterationResult, PolicyLearnerInfo, Result,
    ResultInfo,
};

/// Mean policy lag of trained batches (updates) above which a run is told its batches are stale.
const STALE_POLICY_LAG: f64 = 8.0;

/// How long the driver sleeps when a training step found nothing to do, instead of spinning a
/// core that the runners and the learner need (RLlib's `timeout_s_sampler_manager = 0` polls).
const IDLE_SLEEP: Duration = Duration::from_micros(500);

/// The IMPALA algorithm: build it from a validated config with [`Impala::builder`] (or
/// [`Impala::new`] for a registered env), call [`Impala::train`] once per iteration,
/// [`Impala::save`] / [`Impala::restore`] checkpoints, [`Impala::evaluate`] the policy.
///
/// ```no_run
/// use impala::Impala;
/// let mut config = impala::config::ImpalaConfig::default();
/// config.min_time_s_per_iteration = 1.0;
/// let mut algo = Impala::new(config.validate()?)?;
/// let result = algo.train()?;
/// println!("{}", result.progress_line());
/// let checkpoint = algo.save(std::path::Path::new("impala_results/example"))?;
/// algo.stop()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// A multi-agent env (native, or Python's PettingZoo / RLlib `MultiAgentEnv`) trains its
/// config's `policies`, each agent acting with the policy `policy_mapping` names, each policy
/// with its own learner (model, optimizer, schedules, V-trace) and batching:
///
/// ```
/// use impala::config::ImpalaConfig;
/// use impala::Impala;
///
/// let mut config = ImpalaConfig::default();
/// config.env = "HalfObserved".into(); // two agents, each seeing one bit of the state
/// config.policies = vec!["left".into(), "right".into()];
/// config.num_env_runners = 1;
/// config.min_time_s_per_iteration = 0.2;
/// let mut algo = Impala::new(config.validate()?)?;
/// let result = algo.train()?;
/// assert!(result.num_agent_steps_sampled == 2 * result.num_env_steps_sampled);
/// assert!(result.info.learner.contains_key("left"));
/// let right = algo.get_policy_by_id("right")?;
/// algo.stop()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[doc(alias = "IMPALA")]
pub struct Impala {
    pub(crate) config: ValidatedConfig,
    /// The envs, and how their agents map to the policies.
    pub(crate) envs: RunEnvs,
    /// The policies, in the mapping's order (one, `default_policy`, for a single-agent env).
    pub(crate) policies: Vec<PolicySlot>,
    /// The sampling runners, acting with the learners' weights from their start: started by
    /// the builder, replaced by `restore()` (so none samples with pre-restore weights), and
    /// started again on demand if starting them failed.
    pub(crate) runners: Option<EnvRunnerGroup>,
    /// Why the learner thread died (reported once by `train()`, then on every use); the
    /// policies then hold their learners' last good state for `save()`, `evaluate()` and
    /// `restore()`.
    pub(crate) learner_death: Option<String>,
    /// `stop()` was called.
    pub(crate) stopped: bool,
    pub(crate) broadcaster: WeightBroadcaster,
    pub(crate) counters: Counters,
    pub(crate) episodes: EpisodeWindow,
    pub(crate) iteration: u64,
    pub(crate) time_total_s: f64,
    pub(crate) base_seed: u64,
    /// Restores so far over the run's life (checkpointed): picks the run's random streams.
    pub(crate) num_restores: u64,
    pub(crate) interrupt: Option<Arc<AtomicBool>>,
    pub(crate) evaluator: Evaluator,
    pub(crate) last_evaluation: Option<EvaluationResult>,
    /// Learner stalls already reported (to log only new ones).
    pub(crate) stalls_reported: u64,
    /// Whether stale train batches were reported (once a run).
    pub(crate) staleness_reported: bool,
    /// The transport of remote env runners, when they sample instead of runner threads.
    pub(crate) remote: Option<Arc<dyn RunnerTransport>>,
    /// Whether the sampling runners record episodes ([`crate::ImpalaBuilder::record_episodes`]).
    pub(crate) record_episodes: bool,
    /// The episodes recorded since the last [`Impala::take_episode_records`].
    pub(crate) episode_records: Vec<EpisodeRecord>,
}

impl std::fmt::Debug for Impala {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Impala")
            .field("env", &self.config.config().env)
            .field("policies", &self.policy_ids())
            .field("iteration", &self.iteration)
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

/// What one `training_step` did, to tell an idle driver from a busy one.
#[derive(Default)]
struct StepActivity {
    fragments: usize,
    placed: usize,
    trained: usize,
    episodes: u64,
}

impl Impala {
    /// Builds the algorithm for `config`'s registered env (see [`Impala::builder`] to train an
    /// env of your own).
    pub fn new(config: ValidatedConfig) -> Result<Self> {
        Self::builder(config).build()
    }

    /// The config the algorithm was built from.
    pub fn config(&self) -> &ValidatedConfig {
        &self.config
    }

    /// The spaces the first policy acts in: a single-agent env's spec (after the run's
    /// wrappers); for a multi-agent env, its first policy's agents' (see
    /// [`Impala::multi_agent_spec`]).
    pub fn env_spec(&self) -> &EnvSpec {
        &self.policies[0].source.spec
    }

    /// A multi-agent env's agents and spaces; `None` for a single-agent env.
    pub fn multi_agent_spec(&self) -> Option<&MultiAgentSpec> {
        match &self.envs {
            RunEnvs::Multi(multi) => Some(&multi.spec),
            RunEnvs::Single(_) => None,
        }
    }

    /// A multi-agent env's policy mapping (the policy ids, which agent maps to which, which
    /// policies train); `None` for a single-agent env.
    pub fn policy_map(&self) -> Option<&PolicyMap> {
        match &self.envs {
            RunEnvs::Multi(multi) => Some(&multi.map),
            RunEnvs::Single(_) => None,
        }
    }

    /// The policy ids, in order: `default_policy` for a single-agent env.
    pub fn policy_ids(&self) -> Vec<String> {
        self.policies.iter().map(|p| p.id.clone()).collect()
    }

    /// Iterations completed (the `training_iteration` of the last result).
    pub fn iteration(&self) -> u64 {
        self.iteration
    }

    /// The lifetime counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// A copy of the run's observation filter (RLlib's `MeanStdFilter`, what the env runners'
    /// envs merge their observations into and normalise with; checkpoints keep it). `None`
    /// without `normalize_observations`, or before any env synced with it.
    pub fn observation_filter(&self) -> Result<Option<MeanStdFilter>> {
        match &self.envs {
            RunEnvs::Single(envs) => match &envs.filter {
                Some(filter) => Ok(filter.snapshot()?),
                None => Ok(None),
            },
            RunEnvs::Multi(_) => Ok(None),
        }
    }

    /// The default policy as the learner has it now (RLlib's `algo.get_policy()`): see
    /// [`Impala::get_policy_by_id`]. A multi-agent run without a `default_policy` names one.
    pub fn get_policy(&self) -> Result<TrainedPolicy> {
        self.get_policy_by_id(DEFAULT_POLICY_ID)
    }

    /// Policy `policy_id` as its learner has it now (RLlib's `algo.get_policy(policy_id)`):
    /// the model with a snapshot of the learner's current weights (the broadcast's) and the
    /// run's observation filter, acting on the CPU. It is a copy: later training does not
    /// change it ([`Impala::update_policy`] brings it up to date).
    pub fn get_policy_by_id(&self, policy_id: &str) -> Result<TrainedPolicy> {
        let policy = self.policy(policy_id)?;
        TrainedPolicy::new(
            &policy.source,
            self.observation_filter()?,
            (self.config.config().normalize_actions, self.config.config().clip_actions),
            self.live_weights(policy)?,
            Device::Cpu,
        )
    }

    /// The current weights of policy `policy_id` (RLlib's `algo.get_weights([policy_id])`).
    pub fn get_weights(&self, policy_id: &str) -> Result<Arc<Weights>> {
        self.live_weights(self.policy(policy_id)?)
    }

    /// Gives `policy` (one of [`Impala::get_policy`]) the default policy's current weights and
    /// the run's current observation filter.
    pub fn update_policy(&self, policy: &mut TrainedPolicy) -> Result<()> {
        self.update_policy_of(DEFAULT_POLICY_ID, policy)
    }

    /// Gives `policy` (one of [`Impala::get_policy_by_id`]) policy `policy_id`'s current
    /// weights and the run's current observation filter.
    pub fn update_policy_of(&self, policy_id: &str, policy: &mut TrainedPolicy) -> Result<()> {
        policy.update(self.get_weights(policy_id)?, self.observation_filter()?)
    }

    /// Replaces the default policy's learner weights (RLlib's `algo.set_weights()`): see
    /// [`Impala::set_weights_of`].
    pub fn set_weights(&mut self, weights: Vec<NamedTensor>) -> Result<()> {
        self.set_weights_of(DEFAULT_POLICY_ID, weights)
    }

    /// Replaces policy `policy_id`'s learner weights: one tensor per model parameter, by name,
    /// in any order, as [`TrainedPolicy::get_weights`] gives them. A missing, unknown or
    /// misshapen parameter is an [`ImpalaError::PolicyInput`] naming it, and nothing changes.
    /// The env runners act with the new weights from their next fragment; the optimizer state
    /// and the learner's version stay as they were.
    pub fn set_weights_of(&mut self, policy_id: &str, weights: Vec<NamedTensor>) -> Result<()> {
        // A policy of the run's model checks the weights by name, as a loaded policy does.
        let mut policy = self.get_policy_by_id(policy_id)?;
        policy.set_weights(weights)?;
        let weights = Arc::clone(policy.snapshot());
        let p = self.policy_index(policy_id)?;
        self.alive()?;
        match &mut self.policies[p].learner {
            PolicyLearner::Training(handle) => handle.set_weights(Arc::clone(&weights))?,
            PolicyLearner::Held(learner) => learner.set_weights(&weights)?,
            PolicyLearner::Gone => return Err(ImpalaError::Stopped),
        }
        if let Some(group) = self.runners.as_mut() {
            let ids = group.healthy_runner_ids();
            group.sync_weights(p, weights, &ids);
        }
        Ok(())
    }

    /// The episodes the sampling runners recorded since the last call, in the order they were
    /// counted (see [`crate::ImpalaBuilder::record_episodes`]; always empty without it). They
    /// pile up until taken.
    pub fn take_episode_records(&mut self) -> Vec<EpisodeRecord> {
        std::mem::take(&mut self.episode_records)
    }

    /// A flag that, once set (by a Ctrl-C handler), ends the current iteration early so the
    /// caller can save and exit.
    pub fn set_interrupt_flag(&mut self, flag: Arc<AtomicBool>) {
        self.interrupt = Some(flag);
    }

    fn interrupted(&self) -> bool {
        self.interrupt.as_ref().is_some_and(|f| f.load(Ordering::SeqCst))
    }

    fn policy_index(&self, policy_id: &str) -> Result<usize> {
        self.policies.iter().position(|p| p.id == policy_id).ok_or_else(|| {
            ImpalaError::MultiAgentOption {
                key: "policies",
                reason: format!(
                    "there is no policy `{policy_id}`; the policies are {}",
                    self.policy_ids().join(", ")
                ),
            }
        })
    }

    fn policy(&self, policy_id: &str) -> Result<&PolicySlot> {
        Ok(&self.policies[self.policy_index(policy_id)?])
    }

    /// Fails once `stop()` was called, or with the cause once the learner thread died.
    fn alive(&self) -> Result<()> {
        match (&self.learner_death, self.stopped) {
            (_, true) => Err(ImpalaError::Stopped),
            (Some(cause), false) => Err(ImpalaError::LearnerDiedEarlier { cause: cause.clone() }),
            (None, false) => Ok(()),
        }
    }

    /// `policy`'s learner's current weights: from its thread, or the last good ones of a
    /// learner whose thread died.
    fn live_weights(&self, policy: &PolicySlot) -> Result<Arc<Weights>> {
        if self.stopped {
            return Err(ImpalaError::Stopped);
        }
        match (&policy.learner, &self.learner_death) {
            (PolicyLearner::Gone, Some(cause)) => {
                Err(ImpalaError::LearnerDiedEarlier { cause: cause.clone() })
            }
            _ => policy.weights(),
        }
    }

    fn all_weights(&self) -> Result<Vec<Arc<Weights>>> {
        self.policies.iter().map(|p| self.live_weights(p)).collect()
    }

    /// The sampling env runners (RLlib's `algo.env_runner_group`), started now (with the
    /// learners' current weights) if they are not running. Every fragment they deliver was
    /// sampled with the weights they started with or newer ones. Fragments taken from the
    /// group directly are neither counted nor trained on.
    pub fn env_runner_group(&mut self) -> Result<&mut EnvRunnerGroup> {
        self.runners()
    }

    fn runners(&mut self) -> Result<&mut EnvRunnerGroup> {
        if self.stopped {
            return Err(ImpalaError::Stopped);
        }
        if self.runners.is_none() {
            let weights = self.all_weights()?;
            let streams = self.streams();
            let mut settings = settings::env_runner_group(&self.config);
            settings.runner.seed = streams.env_seed;
            settings.runner.record_episodes = self.record_episodes;
            self.runners = Some(match &self.remote {
                Some(transport) => {
                    let env = match &self.envs {
                        RunEnvs::Single(_) => RunEnv::Single(self.env_spec().clone()),
                        RunEnvs::Multi(multi) => RunEnv::Multi {
                            spec: multi.spec.clone(),
                            policies: multi.policy_specs.clone(),
                        },
                    };
                    let session = crate::remote::run_session(
                        transport.as_ref(),
                        &self.config,
                        env,
                        streams,
                        self.base_seed,
                        &self.modules(),
                    )?;
                    let launcher = Box::new(transport.pool().launcher(session));
                    EnvRunnerGroup::with_launcher(&settings, launcher, weights)?
                }
                None => {
                    let sources: Vec<_> = self.policies.iter().map(|p| p.source.clone()).collect();
                    let seed = streams.sample_seed;
                    local_runners(&self.envs, false, &settings, &sources, weights, seed)?
                }
            });
        }
        self.runners.as_mut().ok_or(ImpalaError::Stopped)
    }

    /// The run's random streams now (they move on with every restore).
    fn streams(&self) -> Streams {
        Streams::new(&self.config, self.base_seed, self.num_restores)
    }

    /// The learner thread died with `cause`: every policy holds its learner's last good state.
    fn keep_dead_learners(&mut self, cause: &LearnerError) {
        for policy in &mut self.policies {
            policy.take_off_thread();
        }
        self.learner_death = Some(cause.to_string());
    }

    /// Steps sampled so far, as `count_steps_by` counts them.
    fn sampled(&self) -> u64 {
        match self.config.config().count_steps_by {
            CountStepsBy::EnvSteps => self.counters.num_env_steps_sampled,
            CountStepsBy::AgentSteps => self.counters.num_agent_steps_sampled,
        }
    }

    /// Steps trained so far, as `count_steps_by` counts them.
    fn trained(&self) -> u64 {
        match self.config.config().count_steps_by {
            CountStepsBy::EnvSteps => self.counters.num_env_steps_trained,
            CountStepsBy::AgentSteps => self.counters.num_agent_steps_trained,
        }
    }

    /// Runs `training_step` until `min_time_s_per_iteration` has passed and at least
    /// `min_sample_timesteps_per_iteration` / `min_train_timesteps_per_iteration` steps (as
    /// `count_steps_by` counts) were sampled / trained (RLlib's `Algorithm.train`), then
    /// returns the iteration's result. With `evaluation_parallel_to_training`, an evaluation
    /// due this iteration runs on the evaluation env runners meanwhile, and the iteration also
    /// waits for it.
    #[doc(alias = "training_step")]
    pub fn train(&mut self) -> Result<IterationResult> {
        self.alive()?;
        let started = Instant::now();
        let before = self.counters;
        let (sampled_before, trained_before) = (self.sampled(), self.trained());
        let min_time = self.config.durations().min_time_per_iteration;
        let c = self.config.config();
        let (min_sampled, min_trained) = (
            c.min_sample_timesteps_per_iteration as u64,
            c.min_train_timesteps_per_iteration as u64,
        );
        let evaluation_due =
            c.evaluation_interval.is_some_and(|n| n > 0 && (self.iteration + 1) % n as u64 == 0);
        let parallel = evaluation_due && c.evaluation_parallel_to_training;
        if parallel {
            let weights = self.all_weights()?;
            self.evaluator.start(&self.envs, weights)?;
        }
        let mut evaluation = None;
        let mut num_episodes = 0u64;
        let _driving = span(Activity::DriverLoop);
        loop {
            let activity = self.training_step()?;
            num_episodes += activity.episodes;
            if parallel && evaluation.is_none() {
                evaluation = self.evaluator.poll()?;
            }
            let done = started.elapsed() >= min_time
                && self.sampled() - sampled_before >= min_sampled
                && self.trained() - trained_before >= min_trained
                && (!parallel || evaluation.is_some());
            if done || self.interrupted() {
                break;
            }
            if activity.fragments == 0 && activity.placed == 0 && activity.trained == 0 {
                let _waiting = span(Activity::DriverWait);
                std::thread::sleep(IDLE_SLEEP);
            }
        }
        if parallel && evaluation.is_none() {
            // Interrupted: finish the evaluation that is under way, so no episode is lost.
            evaluation = Some(self.evaluator.finish()?);
        }
        for policy in &mut self.policies {
            if policy.stats.count > 0 {
                policy.last_stats = policy.stats.mean();
            }
            policy.stats = StatsMean::default();
        }
        self.iteration += 1;
        let time_this_iter_s = started.elapsed().as_secs_f64();
        self.time_total_s += time_this_iter_s;
        if evaluation_due && !parallel {
            evaluation = Some(self.evaluate()?);
        }
        if evaluation.is_some() {
            self.last_evaluation = evaluation;
        }
        self.report_stalls();
        self.report_staleness();
        Ok(self.compile_result(&before, time_this_iter_s, num_episodes))
    }

    /// The learner queues' stats, over the policies that train.
    fn queue_stats(&self) -> Vec<impala_learner::LearnerQueueStats> {
        self.policies
            .iter()
            .filter_map(|p| match &p.learner {
                PolicyLearner::Training(handle) => Some(handle.queue_stats()),
                _ => None,
            })
            .collect()
    }

    /// Logs learner stalls (waits of `learner_queue_timeout` without data) seen since the last
    /// iteration: not fatal, but a sign that sampling cannot keep up or is blocked.
    fn report_stalls(&mut self) {
        let stalls: u64 = self.queue_stats().iter().map(|q| q.num_learner_queue_timeouts).sum();
        if stalls > self.stalls_reported {
            tracing::warn!(
                new_stalls = stalls - self.stalls_reported,
                learner_queue_timeout_s = self.config.config().learner_queue_timeout,
                "the learner waited a whole learner_queue_timeout for a train batch; sampling is slower than training or blocked"
            );
            self.stalls_reported = stalls;
        }
    }

    /// Says once a run when train batches were, on average over the iteration, more than
    /// [`STALE_POLICY_LAG`] updates old at their SGD step: the learner is the bottleneck and
    /// its queue holds batches from old weights. (Measured on pixel Catch: a full queue of
    /// 16 made batches about 21 updates stale and the policy never learned in 206k env steps;
    /// `learner_queue_size = 2` kept them 3-7 updates old and solved it in 109k. Not every task
    /// suffers: the embedded CartPole config trains on batches 17-19 updates old and stayed
    /// solved on 30 of 30 seeds, against 29 of 30 with a queue of 2.)
    fn report_staleness(&mut self) {
        let lag = self
            .policies
            .iter()
            .filter_map(|p| p.last_stats.get("policy_lag").copied())
            .fold(0.0, f64::max);
        if lag > STALE_POLICY_LAG && !self.staleness_reported {
            tracing::warn!(
                policy_lag = lag,
                learner_queue_size = self.config.config().learner_queue_size,
                "train batches are {lag:.0} updates old when trained (learner_stats/policy_lag): \
                 the learner is slower than sampling and its queue holds old batches, which \
                 V-trace corrects only partly; if learning stalls, lower learner_queue_size (2 \
                 keeps batches a few updates old) or give the learner more threads"
            );
            self.staleness_reported = true;
        }
    }

    /// RLlib's `Impala.training_step`: collect ready fragments (counted here, once), batch
    /// each policy's rows, place train batches on the learner queues, drain the learners'
    /// results and broadcast weights when due. `_env_runners_only` discards the fragments;
    /// `_skip_learners` builds train batches and discards them instead of training.
    fn training_step(&mut self) -> Result<StepActivity> {
        self.counters.num_training_step_calls += 1;
        let mut activity = StepActivity::default();
        // RLlib checks that the learner thread is alive first; a dead learner reports its cause.
        activity.trained += self.process_trained_results()?;

        // Backpressure: while train batches wait for room on a learner queue (or fragments
        // for a free aggregation worker), leave the runners' fragments uncollected (they stop
        // at their in-flight cap), so the driver never piles up batches.
        let backlog = self.policies.iter().any(|p| {
            !p.to_place.is_empty() || p.batching.as_ref().is_some_and(|b| b.num_waiting() > 0)
        });
        let mut runners_that_returned = BTreeSet::new();
        if !backlog {
            let fragments = self.runners()?.sample()?;
            activity.fragments = fragments.len();
            for fragment in fragments {
                runners_that_returned.insert(fragment.runner_id);
                activity.episodes += fragment.episodes.len() as u64;
                self.add_fragment(fragment)?;
            }
        }
        let skip_learners = self.config.config().skip_learners;
        for policy in &mut self.policies {
            if let Some(batching) = policy.batching.as_mut() {
                policy.to_place.extend(batching.ready()?);
            }
            if skip_learners {
                policy.to_place.clear();
            }
        }
        activity.placed = self.place_on_learner_queues();
        activity.trained += self.process_trained_results()?;
        let returned: Vec<usize> = runners_that_returned.into_iter().collect();
        self.update_workers_if_necessary(&returned)?;
        Ok(activity)
    }

    /// Counts a delivered fragment (the one place sampled steps and episodes are counted) and
    /// hands each trained policy's rows to its batching.
    fn add_fragment(&mut self, fragment: PolicyFragment) -> Result<()> {
        let c = &mut self.counters;
        c.num_env_steps_sampled += fragment.env_steps as u64;
        c.num_agent_steps_sampled += fragment.agent_steps as u64;
        c.episodes_total += fragment.episodes.len() as u64;
        self.episodes.extend(&fragment.episodes);
        self.episode_records.extend(fragment.episode_records);
        if self.envs.is_multi_agent() {
            for (episode, returns) in fragment.episodes.iter().zip(&fragment.policy_returns) {
                for (policy, &episode_return) in self.policies.iter_mut().zip(returns) {
                    policy.episodes.extend(&[EpisodeStats { episode_return, ..*episode }]);
                }
            }
        }
        for (policy, batch) in self.policies.iter_mut().zip(fragment.batches) {
            if let (Some(batching), true) = (policy.batching.as_mut(), batch.num_rows > 0) {
                policy.to_place.extend(batching.add(batch)?);
            }
        }
        Ok(())
    }

    /// RLlib's `place_processed_samples_on_learner_thread_queue` with a non-blocking put: a
    /// batch that does not fit is kept (and counted in `num_times_learner_queue_full`).
    fn place_on_learner_queues(&mut self) -> usize {
        let mut placed = 0;
        for policy in &mut self.policies {
            let PolicyLearner::Training(handle) = &policy.learner else { continue };
            while let Some(batch) = policy.to_place.pop_front() {
                match handle.try_enqueue(batch) {
                    Ok(()) => placed += 1,
                    Err(batch) => {
                        policy.to_place.push_front(batch);
                        self.counters.num_times_learner_queue_full += 1;
                        break;
                    }
                }
            }
        }
        placed
    }

    /// RLlib's `process_trained_results`: drain every learner's outqueue into the counters
    /// and its policy's stats. Env steps trained count the env steps the trained agent steps
    /// stand for (agent steps over the agents acting per env step so far; one for a single
    /// agent). A learner that died surfaces here with its cause.
    fn process_trained_results(&mut self) -> Result<usize> {
        self.alive()?;
        let agents_per_env_step = if self.counters.num_env_steps_sampled > 0 {
            self.counters.num_agent_steps_sampled as f64
                / self.counters.num_env_steps_sampled as f64
        } else {
            1.0
        };
        let mut trained = 0;
        let mut death = None;
        for policy in &mut self.policies {
            let PolicyLearner::Training(handle) = &policy.learner else { continue };
            let outputs = match handle.drain() {
                Ok(outputs) => outputs,
                Err(cause) => {
                    death = Some(cause);
                    break;
                }
            };
            for out in &outputs {
                policy.agent_steps_trained += out.agent_steps as u64;
                policy.num_grad_updates = out.stats.num_grad_updates;
                policy.stats.add(&out.stats);
                self.counters.num_agent_steps_trained += out.agent_steps as u64;
                self.counters.num_env_steps_trained +=
                    (out.agent_steps as f64 / agents_per_env_step).round() as u64;
            }
            trained += outputs.len();
        }
        if let Some(cause) = death {
            // The last good weights stay savable (RLlib's last good checkpoint).
            self.keep_dead_learners(&cause);
            return Err(ImpalaError::LearnerDied { cause });
        }
        self.counters.num_grad_updates = self.policies.iter().map(|p| p.num_grad_updates).sum();
        Ok(trained)
    }

    /// RLlib's `update_workers_if_necessary`: every `broadcast_interval` steps, send the newest
    /// weights of every policy that changed to the runners that returned samples since the
    /// last broadcast. A learner copies its weights to the CPU only when a broadcast is due and
    /// it has moved on.
    fn update_workers_if_necessary(&mut self, runners_that_returned: &[usize]) -> Result<()> {
        let runners = self.runners.as_mut().ok_or(ImpalaError::Stopped)?;
        for (p, policy) in self.policies.iter().enumerate() {
            if let PolicyLearner::Training(handle) = &policy.learner {
                if let Some(weights) = handle.take_new_weights() {
                    runners.set_latest_weights(p, weights);
                }
            }
        }
        if let Some(ids) =
            self.broadcaster.step(runners_that_returned, runners.has_unsent_weights())
        {
            runners.send_latest_weights(&ids);
            self.counters.num_weight_broadcasts += 1;
        }
        if self.broadcaster.due_at_next_step() {
            for (p, policy) in self.policies.iter().enumerate() {
                let PolicyLearner::Training(handle) = &policy.learner else { continue };
                let sent = runners.latest_weights(p).map_or(0, |w| w.version);
                if policy.num_grad_updates > sent {
                    handle.request_weights();
                }
            }
        }
        Ok(())
    }

    fn compile_result(
        &self,
        before: &Counters,
        time_this_iter_s: f64,
        num_episodes: u64,
    ) -> IterationResult {
        let c = &self.counters;
        let mut learner = BTreeMap::new();
        let mut policy_reward_mean = BTreeMap::new();
        let mut env_runners = match &self.runners {
            Some(group) => env_runner_health(&group.metrics(), &group.runner_states()),
            None => env_runner_health(&SamplerMetrics::default(), &[]),
        };
        for policy in &self.policies {
            if self.envs.is_multi_agent() {
                let mean = policy.episodes.summary().episode_return_mean;
                policy_reward_mean.insert(policy.id.clone(), mean);
                env_runners.insert(format!("module_episode_returns_mean/{}", policy.id), mean);
            }
            if policy.trains {
                learner.insert(
                    policy.id.clone(),
                    PolicyLearnerInfo {
                        learner_stats: policy.last_stats.clone(),
                        num_agent_steps_trained: policy.agent_steps_trained,
                        num_grad_updates_lifetime: policy.num_grad_updates,
                    },
                );
            }
        }
        let queues = self.queue_stats();
        let waiting: usize = self.policies.iter().map(|p| p.to_place.len()).sum();
        let mut result = IterationResult {
            policy_reward_mean,
            info: ResultInfo {
                learner,
                num_weight_broadcasts: c.num_weight_broadcasts,
                num_times_learner_queue_full: c.num_times_learner_queue_full,
                num_training_step_calls: c.num_training_step_calls,
                num_weight_snapshots: queues.iter().map(|q| q.num_weight_snapshots).sum(),
                learner_queue: learner_queue_info(&queues, waiting as u64),
                timing_breakdown: timing_breakdown(&queues),
            },
            env_runners,
            evaluation: self.last_evaluation.clone(),
            ..IterationResult::counted(
                self.iteration,
                (time_this_iter_s, self.time_total_s),
                (c, before),
                &self.episodes.summary(),
                num_episodes,
            )
        };
        if self.config.config().count_steps_by == CountStepsBy::AgentSteps {
            result.timesteps_total = c.num_agent_steps_sampled;
        }
        result.with_new_stack_names()
    }

    /// Runs `evaluation_duration` episodes (or env steps) with the learners' current weights
    /// on fresh evaluation envs (`evaluation_num_env_runners` runners, or the calling thread
    /// when 0), greedy unless `evaluation_explore` (RLlib's `evaluate()`). Each call starts new
    /// episodes, so none spans two calls. After the learner thread died, this evaluates its
    /// last good weights.
    pub fn evaluate(&mut self) -> Result<EvaluationResult> {
        let weights = self.all_weights()?;
        self.evaluator.start(&self.envs, weights)?;
        self.evaluator.finish()
    }

    /// The folder of policy `policy`'s learner under a checkpoint's `learner/` folder `root`:
    /// `root` itself for a single-agent run, `root/<policy id>/` for a multi-agent one.
    /// The TorchScript modules the policies' models are, as read when the run started, by
    /// owner (the run's model, or a policy's own; each once): checkpoints keep a copy of each,
    /// remote env runners get them in their session.
    fn modules(&self) -> Vec<(ModuleOwner, SharedModule)> {
        let mut modules: Vec<(ModuleOwner, SharedModule)> = Vec::new();
        for policy in &self.policies {
            let Some(script) = &policy.script else { continue };
            let owner = match &self.envs {
                RunEnvs::Single(_) => None,
                RunEnvs::Multi(_) => module_owner(self.config.config(), &policy.id),
            };
            if !modules.iter().any(|(o, _)| *o == owner) {
                modules.push((owner, Arc::clone(script)));
            }
        }
        modules
    }

    fn learner_dir(&self, root: &Path, policy: &PolicySlot) -> PathBuf {
        match &self.envs {
            RunEnvs::Single(_) => root.to_path_buf(),
            RunEnvs::Multi(_) => root.join(&policy.id),
        }
    }

    /// Saves a checkpoint `dir/checkpoint_<iteration>` atomically: config, counters, episode
    /// windows (the run's, and each policy's for a multi-agent env), seeds, every policy's
    /// learner weights and optimizer state, a copy of the TorchScript module
    /// `model.custom_model` names (as read when the run started), and a manifest of their
    /// checksums.
    ///
    /// After [`Impala::train`] reported that the learner thread died (a non-finite loss or
    /// weights), this still saves: the learners' last good weights and optimizer state (the
    /// failing step was not applied), under the last completed iteration's number. A valid
    /// checkpoint of that iteration already in `dir` (saved while the learner was healthy) is
    /// kept, not replaced, and its path returned.
    pub fn save(&mut self, dir: &Path) -> Result<PathBuf> {
        if self.stopped {
            return Err(ImpalaError::Stopped);
        }
        let died_since_drain = self.policies.iter().any(|p| match &p.learner {
            PolicyLearner::Training(handle) => !handle.is_running(),
            _ => false,
        });
        if died_since_drain && self.learner_death.is_none() {
            // Report the death and save what the learners left.
            if let Err(e) = self.process_trained_results() {
                tracing::warn!(error = %e, "saving the last good weights of a learner that died");
            }
        }
        if self.learner_death.is_some() {
            let existing = dir.join(checkpoint_name(self.iteration));
            if existing.is_dir() && read_checkpoint(&existing).is_ok() {
                return Ok(existing);
            }
        }
        std::fs::create_dir_all(dir)
            .map_err(|source| ImpalaError::RunDirNotWritable { path: dir.to_path_buf(), source })?;
        let policy_episodes = match &self.envs {
            RunEnvs::Multi(_) => {
                self.policies.iter().map(|p| (p.id.clone(), p.episodes.clone())).collect()
            }
            RunEnvs::Single(_) => BTreeMap::new(),
        };
        let state = AlgorithmState {
            observation_filter: self.observation_filter()?,
            policy_episodes,
            ..AlgorithmState::new(
                self.iteration,
                self.time_total_s,
                self.counters,
                self.episodes.clone(),
                self.base_seed,
                self.num_restores,
            )
        };
        let config = self.config.config();
        let modules = self.modules();
        let copies: Vec<_> =
            modules.iter().map(|(owner, m)| (owner.as_deref(), m.bytes())).collect();
        save_checkpoint(dir, &state, config, &copies, |root| {
            for policy in &self.policies {
                let learner_dir = self.learner_dir(root, policy);
                policy.save(&learner_dir).map_err(|e| match (e, &self.learner_death) {
                    (ImpalaError::Stopped, Some(cause)) => {
                        ImpalaError::LearnerDiedEarlier { cause: cause.clone() }
                    }
                    (e, _) => e,
                })?;
            }
            Ok(())
        })
    }

    /// Restores a checkpoint written by [`Impala::save`] (a checkpoint folder or a run folder):
    /// every policy's weights and optimizer state, counters, episode windows and iteration, so
    /// training continues where it stopped. The checkpoint must be for the same environment,
    /// policies and models (for a TorchScript model, the same module's bytes, from whichever
    /// file); its files are verified first (see [`crate::checkpoint`]). Also after the learner
    /// thread died.
    ///
    /// The env runners are replaced: the old ones are stopped, what they had in flight is
    /// dropped with everything built from their fragments (batches waiting for the learner,
    /// partial train batches), and fresh runners start new episodes acting with the restored
    /// weights from their first step, so no episode of the next iteration comes from
    /// pre-restore weights. Each restore moves the run to new random streams (env seeds,
    /// action sampling, replay), so a resumed run does not replay the episodes the original
    /// run saw.
    pub fn restore(&mut self, path: &Path) -> Result<()> {
        let (dir, state, saved) = self.checked_checkpoint(path)?;
        let ids = self.policy_ids();
        if saved.policy_ids() != ids {
            return Err(ImpalaError::IncompatibleCheckpoint {
                path: dir,
                reason: format!(
                    "it was trained with the policies {}, this run has {}",
                    saved.policy_ids().join(", "),
                    ids.join(", ")
                ),
                fix: "use the checkpoint's policies as they are, restore one policy of it \
                      (`restore_policy`), or start a new run"
                    .into(),
            });
        }
        // The run's observation filter goes back with the weights that learned on it.
        let run_filter = match &self.envs {
            RunEnvs::Single(envs) => envs.filter.clone(),
            RunEnvs::Multi(_) => None,
        };
        let saved_filter = state.observation_filter.clone();
        let filter_before = put_saved_filter(run_filter.as_ref(), saved_filter, &dir)?;
        if let Err(e) = self.load_policies(&dir, &ids) {
            // Nothing was loaded: the filter goes back as it was.
            if let (Some(run), Some(before)) = (run_filter, filter_before) {
                run.replace(before)?;
            }
            return Err(e);
        }
        self.counters = state.counters;
        self.episodes = state.episodes;
        for policy in &mut self.policies {
            if let Some(window) = state.policy_episodes.get(&policy.id) {
                policy.episodes = window.clone();
            }
        }
        self.iteration = state.training_iteration;
        self.time_total_s = state.time_total_s;
        self.base_seed = state.base_seed;
        self.num_restores = state.num_restores + 1;
        self.last_evaluation = None;
        self.restart_runners()
    }

    /// Restores only policy `policy_id`'s weights and optimizer state from a checkpoint of a
    /// run with the same env and model (its other policies, the counters and the run's state
    /// stay as they are): a policy trained in one run, brought into another.
    pub fn restore_policy(&mut self, path: &Path, policy_id: &str) -> Result<()> {
        self.policy(policy_id)?;
        let (dir, _, saved) = self.checked_checkpoint(path)?;
        if !saved.policy_ids().iter().any(|id| id == policy_id) {
            return Err(ImpalaError::IncompatibleCheckpoint {
                path: dir,
                reason: format!(
                    "it has no policy `{policy_id}` (its policies: {})",
                    saved.policy_ids().join(", ")
                ),
                fix: "name one of its policies".into(),
            });
        }
        self.load_policies(&dir, &[policy_id.to_string()])?;
        self.restart_runners()
    }

    /// The checkpoint folder of `path` with its state and config (read and verified once),
    /// refused unless it is of this env, kind of env and models.
    fn checked_checkpoint(
        &self,
        path: &Path,
    ) -> Result<(PathBuf, AlgorithmState, impala_config::ImpalaConfig)> {
        if self.stopped {
            return Err(ImpalaError::Stopped);
        }
        let dir = find_checkpoint(path)?;
        let (state, saved) = read_checkpoint(&dir)?;
        let now = self.config.config();
        let incompatible =
            |what: &str, saved: String, now: String| ImpalaError::IncompatibleCheckpoint {
                path: dir.clone(),
                reason: format!("it was trained with {what} {saved}, this run uses {now}"),
                fix: format!("use the checkpoint's {what} as it is, or start a new run"),
            };
        let multi_agent = self.envs.is_multi_agent();
        if saved.env != now.env || (multi_agent && saved.env_config != now.env_config) {
            return Err(incompatible(
                "env",
                format!("{} {:?}", saved.env, saved.env_config),
                format!("{} {:?}", now.env, now.env_config),
            ));
        }
        if state.is_multi_agent() != multi_agent {
            let kind = |multi: bool| if multi { "multi-agent" } else { "single-agent" };
            return Err(ImpalaError::IncompatibleCheckpoint {
                path: dir.clone(),
                reason: format!(
                    "it was trained on a {} env, this run's env is {}",
                    kind(state.is_multi_agent()),
                    kind(multi_agent)
                ),
                fix: "use a checkpoint of this env, or start a new run".into(),
            });
        }
        for policy in &self.policies {
            let Ok(saved_config) = saved.for_policy(&policy.id) else { continue };
            // The model the checkpoint's config names, parsed as this run's was.
            let saved_custom = saved_config.clone().validate().ok();
            let saved_custom = saved_custom.as_ref().and_then(ValidatedConfig::custom_model);
            let (mut saved_model, mut model) =
                (saved_config.model, policy.config.config().model.clone());
            if let (Some(script), Some(CustomModel::TorchScript(copy))) =
                (&policy.script, saved_custom)
            {
                // The same TorchScript model is the same module's bytes: the checkpoint's copy
                // is another file than the one this run read.
                let copy = copy.as_path();
                let bytes = std::fs::read(copy).map_err(|e| ImpalaError::io("read", copy, e))?;
                let sha256 = sha256_hex(&bytes);
                if sha256 != script.sha256() {
                    return Err(incompatible(
                        "TorchScript module",
                        format!("`{}` (SHA-256 {sha256})", copy.display()),
                        format!("`{}` (SHA-256 {})", script.source().display(), script.sha256()),
                    ));
                }
                (saved_model.custom_model, model.custom_model) = (None, None);
            }
            if saved_model != model {
                let (was, is) = saved_model.differences(&model);
                let what = if multi_agent {
                    format!("policy `{}`'s model", policy.id)
                } else {
                    "model".to_string()
                };
                return Err(incompatible(&what, was, is));
            }
        }
        Ok((dir, state, saved))
    }

    /// Loads the learners of `ids` from checkpoint `dir`: the trained ones come off the
    /// learner thread (between SGD steps) and go back on a new one with the others. A learner
    /// state that does not load leaves every learner as it was.
    fn load_policies(&mut self, dir: &Path, ids: &[String]) -> Result<()> {
        let was_dead = self.learner_death.take();
        for policy in &mut self.policies {
            policy.hold(self.base_seed)?;
        }
        let mut loaded = Ok(());
        for p in 0..self.policies.len() {
            if !ids.contains(&self.policies[p].id) {
                continue;
            }
            let from = self.learner_dir(&dir.join(LEARNER_DIR), &self.policies[p]);
            let policy = &mut self.policies[p];
            policy.to_place.clear();
            let PolicyLearner::Held(learner) = &mut policy.learner else { continue };
            if let Err(e) = learner.load(&from) {
                let reason = if self.envs.is_multi_agent() {
                    format!("policy `{}`'s learner state does not load ({e})", policy.id)
                } else {
                    format!("the learner state does not load ({e})")
                };
                loaded = Err(ImpalaError::corrupt_checkpoint(dir, reason));
                break;
            }
        }
        if loaded.is_err() && was_dead.is_some() {
            // A learner that had died stays held, as it was.
            self.learner_death = was_dead;
            return loaded;
        }
        start_learners(&mut self.policies)?;
        self.stalls_reported = 0;
        loaded
    }

    /// Starts the batching stages and the env runners on the run's current streams, replacing
    /// any there are (what they had in flight is dropped), so nothing sampled with the weights
    /// before a restore is trained on; new runners start new episodes acting with the learners'
    /// current weights from their first step. The builder starts a fresh run with it too.
    pub(crate) fn restart_runners(&mut self) -> Result<()> {
        if let Some(group) = self.runners.take() {
            if let Err(e) = group.shutdown() {
                tracing::warn!(error = %e, "an env runner failed before the restore");
            }
        }
        let streams = self.streams();
        for policy in &mut self.policies {
            policy.to_place.clear();
            if let Some(batching) = policy.batching.take() {
                if let Err(e) = batching.shutdown() {
                    tracing::warn!(error = %e, "an aggregation worker failed before the restore");
                }
            }
            if policy.trains {
                policy.batching = batching_stage(&policy.config, &streams)?;
            }
        }
        self.evaluator.set_streams(&streams);
        self.broadcaster = WeightBroadcaster::new(self.config.config().broadcast_interval);
        self.runners()?;
        Ok(())
    }

    /// Stops the runner, aggregation and learner threads and joins them, reporting the first
    /// failure (a learner failure that [`Impala::train`] already reported is not reported
    /// again). Dropping an `Impala` stops them too, without reporting.
    pub fn stop(&mut self) -> Result<()> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        let runners = self.runners.take().map(EnvRunnerGroup::shutdown);
        if let Some(pool) = self.envs.python_pool() {
            // Runners that did not stop within the grace are stuck in an env step: their
            // workers are killed, not awaited, and the runners end on the closed pipes.
            pool.kill_workers_in_use();
        }
        let mut first_error = None;
        for policy in &mut self.policies {
            if let Some(batching) = policy.batching.take() {
                if let Err(e) = batching.shutdown() {
                    first_error.get_or_insert(ImpalaError::from(e));
                }
            }
            if let PolicyLearner::Training(handle) =
                std::mem::replace(&mut policy.learner, PolicyLearner::Gone)
            {
                if let Err(cause) = handle.stop() {
                    first_error.get_or_insert(ImpalaError::LearnerDied { cause });
                }
            }
        }
        match runners {
            // A runner that failed while stopping would have been restarted: training did not
            // lose anything, so the run still ends as it would have.
            Some(Err(SamplerError::EnvRunnerFailed { runner_id, reason }))
                if self.config.config().restart_failed_env_runners =>
            {
                tracing::warn!(runner_id, %reason, "env runner failed while stopping");
            }
            other => {
                other.transpose()?;
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// The learner queues of the policies that train: one's as it is; several's summed (sizes,
/// stalls).
fn learner_queue_info(
    queues: &[impala_learner::LearnerQueueStats],
    waiting: u64,
) -> LearnerQueueInfo {
    if let [q] = queues {
        return LearnerQueueInfo {
            size_count: q.size_count as u64,
            size_mean: q.size_mean,
            size_std: q.size_std,
            size_quantiles: q.size_quantiles.to_vec(),
            num_learner_queue_timeouts: q.num_learner_queue_timeouts,
            num_train_batches_waiting_on_driver: waiting,
        };
    }
    let mut info =
        LearnerQueueInfo { num_train_batches_waiting_on_driver: waiting, ..Default::default() };
    for q in queues {
        info.size_count += q.size_count as u64;
        info.size_mean += q.size_mean;
        info.num_learner_queue_timeouts += q.num_learner_queue_timeouts;
    }
    info
}

/// The learners' time per activity, averaged over the policies that train.
fn timing_breakdown(queues: &[impala_learner::LearnerQueueStats]) -> BTreeMap<String, f64> {
    let mut timing = BTreeMap::new();
    let trained = queues.len().max(1) as f64;
    for q in queues {
        for (name, ms) in q.timing_breakdown() {
            *timing.entry(name).or_insert(0.0) += ms / trained;
        }
    }
    timing
}

/// Runners whose policy lag gets a result column of its own; with more, only the most lagging
/// runner is named, so a result line stays a bounded size whatever `num_env_runners`.
const PER_RUNNER_COLUMNS: usize = 16;

/// The sampler's health counters under RLlib's names (`num_healthy_workers` became
/// `num_healthy_env_runners` on the new stack), and the runners' policy lag: each runner's
/// (`policy_lag_runner_N`: remote runners far from the learner show up here) for up to
/// [`PER_RUNNER_COLUMNS`] runners, and the largest with its runner's id for any number.
fn env_runner_health(m: &SamplerMetrics, runners: &[EnvRunnerState]) -> BTreeMap<String, f64> {
    let per_runner = runners
        .iter()
        .filter(|_| runners.len() <= PER_RUNNER_COLUMNS)
        .map(|r| (format!("policy_lag_runner_{}", r.runner_id), r.policy_lag));
    // `max_by` keeps the last of equals: reversed, the lowest runner id among them.
    let most_lagging = runners.iter().rev().max_by(|a, b| a.policy_lag.total_cmp(&b.policy_lag));
    let most_lagging = most_lagging.into_iter().flat_map(|r| {
        [
            ("policy_lag_max".to_string(), r.policy_lag),
            ("policy_lag_max_runner".to_string(), r.runner_id as f64),
        ]
    });
    let mut health = BTreeMap::from([
        ("num_env_runners".to_string(), m.num_env_runners as f64),
        ("num_healthy_env_runners".to_string(), m.num_healthy_env_runners as f64),
        ("num_env_runner_failures".to_string(), m.num_env_runner_failures as f64),
        ("num_env_runner_restarts".to_string(), m.num_env_runner_restarts as f64),
        ("num_in_flight_async_sample_reqs".to_string(), m.num_in_flight_requests as f64),
        ("num_fragments_dropped".to_string(), m.num_fragments_dropped as f64),
        ("num_env_steps_dropped".to_string(), m.num_env_steps_dropped as f64),
        ("policy_lag_mean".to_string(), m.policy_lag_mean),
        ("num_weight_syncs_applied".to_string(), m.num_weight_syncs_applied as f64),
        ("weight_sync_latency_mean_s".to_string(), m.weight_sync_latency_mean_s),
    ]);
    health.extend(per_runner.chain(most_lagging));
    health
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runner(runner_id: usize, policy_lag: f64) -> EnvRunnerState {
        EnvRunnerState {
            runner_id,
            is_healthy: true,
            num_restarts: 0,
            num_in_flight_requests: 0,
            last_error: None,
            policy_lag,
        }
    }

    #[test]
    fn results_name_each_runners_lag_up_to_a_bound_then_the_most_lagging_one() {
        let few: Vec<_> = (1..=3).map(|id| runner(id, id as f64)).collect();
        let health = env_runner_health(&SamplerMetrics::default(), &few);
        assert_eq!(health.get("policy_lag_runner_2"), Some(&2.0));
        assert_eq!((health["policy_lag_max"], health["policy_lag_max_runner"]), (3.0, 3.0));
        let many: Vec<_> = (1..=10_000).map(|id| runner(id, (id % 977) as f64)).collect();
        let health = env_runner_health(&SamplerMetrics::default(), &many);
        assert!(health.len() < 20, "{} columns", health.len());
        assert_eq!((health["policy_lag_max"], health["policy_lag_max_runner"]), (976.0, 976.0));
    }
}
