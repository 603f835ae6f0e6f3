//! [`Impala`]: RLlib's `Impala` algorithm object (old API stack) on threads: env runners
//! (impala-sampler), a learner thread (impala-learner), and the driver's `training_step` loop
//! that connects them, compiles iteration results and saves/restores checkpoints.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use impala_config::ValidatedConfig;
use impala_core::{CustomModel, EnvSpec, NamedTensor, SampleBatch, Weights};
use impala_envs::{MeanStdFilter, SharedMeanStdFilter};
use impala_learner::{Learner, LearnerError, LearnerHandle, LearnerStats};
use impala_profile::{span, Activity};
use impala_runner_pool::RunnerTransport;
use impala_sampler::{
    EnvFactory, EnvRunnerGroup, EnvRunnerState, Fragment, SamplerError, SamplerMetrics,
    TrainBatchBuilder, WeightBroadcaster,
};
use tch::Device;

use crate::builder::{batching_stage, new_learner, PolicySource, Streams};
use crate::checkpoint::{
    checkpoint_name, find_checkpoint, put_saved_filter, read_checkpoint, save_checkpoint,
    sha256_hex, AlgorithmState, Counters, LEARNER_DIR,
};
use crate::evaluation::Evaluator;
use crate::policy::TrainedPolicy;
use crate::result::{LearnerQueueInfo, DEFAULT_POLICY_ID};
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

/// Running sums of the learner stats of one iteration (RLlib's `LearnerInfoBuilder` mean).
#[derive(Default)]
pub(crate) struct StatsMean {
    sums: BTreeMap<&'static str, f64>,
    pub(crate) count: usize,
}

impl StatsMean {
    pub(crate) fn add(&mut self, s: &LearnerStats) {
        for (k, v) in stats_fields(s) {
            *self.sums.entry(k).or_insert(0.0) += v;
        }
        self.count += 1;
    }

    pub(crate) fn mean(&self) -> BTreeMap<String, f64> {
        self.sums.iter().map(|(k, v)| ((*k).to_string(), v / self.count as f64)).collect()
    }
}

fn stats_fields(s: &LearnerStats) -> [(&'static str, f64); 10] {
    [
        ("total_loss", s.total_loss),
        ("policy_loss", s.policy_loss),
        ("vf_loss", s.vf_loss),
        ("entropy", s.entropy),
        ("vf_explained_var", s.vf_explained_var),
        ("grad_gnorm", s.grad_gnorm),
        ("var_gnorm", s.var_gnorm),
        ("cur_lr", s.cur_lr),
        ("entropy_coeff", s.entropy_coeff),
        ("policy_lag", s.policy_lag),
    ]
}

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
#[doc(alias = "IMPALA")]
pub struct Impala {
    pub(crate) config: ValidatedConfig,
    pub(crate) spec: EnvSpec,
    /// Builds the runners' envs (the caller's or the registry's, wrapped).
    pub(crate) env_factory: EnvFactory,
    /// The run's observation filter (with `normalize_observations`), kept in checkpoints.
    pub(crate) observation_filter: Option<SharedMeanStdFilter>,
    /// Builds the runners' policies.
    pub(crate) policies: PolicySource,
    /// The sampling runners, acting with the learner's weights from their start: started by
    /// the builder, replaced by `restore()` (so none samples with pre-restore weights), and
    /// started again on demand if starting them failed.
    pub(crate) runners: Option<EnvRunnerGroup>,
    pub(crate) learner: Option<LearnerHandle>,
    /// A learner no thread runs: one whose thread died, with its last good weights and
    /// optimizer state for `save()`, `evaluate()` and `restore()`; or, while the builder
    /// restores a checkpoint, the new learner before it loads and its thread starts.
    pub(crate) idle_learner: Option<Learner>,
    /// Why the learner thread died (reported once by `train()`, then on every use).
    pub(crate) learner_death: Option<String>,
    /// `stop()` was called.
    pub(crate) stopped: bool,
    pub(crate) broadcaster: WeightBroadcaster,
    /// The one batching stage; `None` with `_env_runners_only` (samples are discarded).
    pub(crate) batching: Option<TrainBatchBuilder>,
    /// RLlib's `batches_to_place_on_learner`: train batches the learner queue had no room for,
    /// oldest first; retried every step, never dropped.
    pub(crate) to_place: VecDeque<SampleBatch>,
    pub(crate) counters: Counters,
    pub(crate) episodes: EpisodeWindow,
    pub(crate) iteration: u64,
    pub(crate) time_total_s: f64,
    pub(crate) base_seed: u64,
    /// Restores so far over the run's life (checkpointed): picks the run's random streams.
    pub(crate) num_restores: u64,
    pub(crate) last_learner_stats: BTreeMap<String, f64>,
    pub(crate) interrupt: Option<Arc<AtomicBool>>,
    pub(crate) evaluator: Evaluator,
    pub(crate) last_evaluation: Option<EvaluationResult>,
    /// Learner stalls already reported (to log only new ones).
    pub(crate) stalls_reported: u64,
    /// Whether stale train batches were reported (once a run).
    pub(crate) staleness_reported: bool,
    /// The transport of remote env runners, when they sample instead of runner threads.
    pub(crate) remote: Option<Arc<dyn RunnerTransport>>,
    /// The TorchScript module `model.custom_model` names, as read when the run started:
    /// checkpoints keep a copy, remote env runners get it in their session.
    pub(crate) script: Option<SharedModule>,
    /// The Python env workers' pool, when the envs are Python's: `stop()` kills the workers
    /// that runners stuck in an env step still hold.
    pub(crate) python_pool: Option<Arc<impala_gym::GymEnvPool>>,
}

impl std::fmt::Debug for Impala {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Impala")
            .field("env", &self.spec.id)
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

    /// The environment's spec.
    pub fn env_spec(&self) -> &EnvSpec {
        &self.spec
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
        match &self.observation_filter {
            Some(filter) => Ok(filter.snapshot()?),
            None => Ok(None),
        }
    }

    /// The policy as the learner has it now (RLlib's `algo.get_policy()`): the model with a
    /// snapshot of the learner's current weights (the broadcast's) and the run's observation
    /// filter, acting on the CPU. It is a copy: later training does not change it
    /// ([`Impala::update_policy`] brings it up to date).
    pub fn get_policy(&self) -> Result<TrainedPolicy> {
        let clip_actions = self.config.config().clip_actions;
        let filter = self.observation_filter()?;
        TrainedPolicy::new(
            &self.policies,
            filter,
            clip_actions,
            self.current_weights()?,
            Device::Cpu,
        )
    }

    /// Gives `policy` (one of [`Impala::get_policy`]) the learner's current weights and the
    /// run's current observation filter.
    pub fn update_policy(&self, policy: &mut TrainedPolicy) -> Result<()> {
        policy.update(self.current_weights()?, self.observation_filter()?)
    }

    /// Replaces the learner's weights (RLlib's `algo.set_weights()`): one tensor per model
    /// parameter, by name, in any order, as [`TrainedPolicy::get_weights`] gives them. A
    /// missing, unknown or misshapen parameter is an [`ImpalaError::PolicyInput`] naming it,
    /// and nothing changes. The env runners act with the new weights from their next
    /// fragment; the optimizer state and the learner's version stay as they were.
    pub fn set_weights(&mut self, weights: Vec<NamedTensor>) -> Result<()> {
        // A policy of the run's model checks the weights by name, as a loaded policy does.
        let mut policy = self.get_policy()?;
        policy.set_weights(weights)?;
        let weights = Arc::clone(policy.snapshot());
        self.learner()?.set_weights(Arc::clone(&weights))?;
        if let Some(group) = self.runners.as_mut() {
            let ids = group.healthy_runner_ids();
            group.sync_weights(weights, &ids);
        }
        Ok(())
    }

    /// A flag that, once set (by a Ctrl-C handler), ends the current iteration early so the
    /// caller can save and exit.
    pub fn set_interrupt_flag(&mut self, flag: Arc<AtomicBool>) {
        self.interrupt = Some(flag);
    }

    fn interrupted(&self) -> bool {
        self.interrupt.as_ref().is_some_and(|f| f.load(Ordering::SeqCst))
    }

    fn learner(&self) -> Result<&LearnerHandle> {
        match (&self.learner, &self.learner_death) {
            (Some(handle), _) if !self.stopped => Ok(handle),
            (None, Some(cause)) if !self.stopped => {
                Err(ImpalaError::LearnerDiedEarlier { cause: cause.clone() })
            }
            _ => Err(ImpalaError::Stopped),
        }
    }

    /// The sampling env runners (RLlib's `algo.env_runner_group`), started now (with the
    /// learner's current weights) if they are not running. Every fragment they deliver was
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
            let weights = self.current_weights()?;
            let streams = self.streams();
            let mut settings = settings::env_runner_group(&self.config);
            settings.runner.seed = streams.env_seed;
            self.runners = Some(match &self.remote {
                Some(transport) => {
                    let session = crate::remote::run_session(
                        transport.as_ref(),
                        &self.config,
                        impala_runner_pool::RunEnv::Single(self.spec.clone()),
                        streams,
                        self.base_seed,
                        self.script.as_deref(),
                    )?;
                    let launcher = Box::new(transport.pool().launcher(session));
                    let mut group =
                        EnvRunnerGroup::with_launcher(&settings, launcher, self.spec.clone())?;
                    let ids: Vec<usize> = (1..=settings.num_env_runners).collect();
                    group.sync_weights(weights, &ids);
                    group
                }
                None => self.policies.start_runners(
                    &settings,
                    &self.env_factory,
                    weights,
                    streams.sample_seed,
                )?,
            });
        }
        self.runners.as_mut().ok_or(ImpalaError::Stopped)
    }

    /// The run's random streams now (they move on with every restore).
    fn streams(&self) -> Streams {
        Streams::new(&self.config, self.base_seed, self.num_restores)
    }

    /// The learner's current weights: from its thread, or the last good ones of a learner
    /// that died.
    fn current_weights(&self) -> Result<Arc<Weights>> {
        if let (None, Some(learner), false) = (&self.learner, &self.idle_learner, self.stopped) {
            return Ok(learner.weights()?);
        }
        Ok(self.learner()?.current_weights()?)
    }

    /// Takes the learner off a thread that died with `cause`, keeping its last good state.
    fn keep_dead_learner(&mut self, cause: &LearnerError) {
        if let Some(handle) = self.learner.take() {
            let (learner, _) = handle.finish();
            self.idle_learner = learner;
        }
        self.learner_death = Some(cause.to_string());
    }

    /// Runs `training_step` until `min_time_s_per_iteration` has passed and at least
    /// `min_sample_timesteps_per_iteration` / `min_train_timesteps_per_iteration` steps were
    /// sampled / trained (RLlib's `Algorithm.train`), then returns the iteration's result.
    /// With `evaluation_parallel_to_training`, an evaluation due this iteration runs on the
    /// evaluation env runners meanwhile, and the iteration also waits for it.
    #[doc(alias = "training_step")]
    pub fn train(&mut self) -> Result<IterationResult> {
        let started = Instant::now();
        let before = self.counters;
        let min_time = self.config.durations().min_time_per_iteration;
        let evaluation_due = self
            .config
            .config()
            .evaluation_interval
            .is_some_and(|n| n > 0 && (self.iteration + 1) % n as u64 == 0);
        let parallel = evaluation_due && self.config.config().evaluation_parallel_to_training;
        if parallel {
            let weights = self.current_weights()?;
            self.evaluator.start(weights)?;
        }
        let mut evaluation = None;
        let mut stats = StatsMean::default();
        let mut num_episodes = 0u64;
        let _driving = span(Activity::DriverLoop);
        loop {
            let activity = self.training_step(&mut stats)?;
            num_episodes += activity.episodes;
            if parallel && evaluation.is_none() {
                evaluation = self.evaluator.poll()?;
            }
            let sampled = self.counters.num_env_steps_sampled - before.num_env_steps_sampled;
            let trained = self.counters.num_env_steps_trained - before.num_env_steps_trained;
            let done = started.elapsed() >= min_time
                && sampled >= self.config.config().min_sample_timesteps_per_iteration as u64
                && trained >= self.config.config().min_train_timesteps_per_iteration as u64
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
        if stats.count > 0 {
            self.last_learner_stats = stats.mean();
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

    /// Logs learner stalls (waits of `learner_queue_timeout` without data) seen since the last
    /// iteration: not fatal, but a sign that sampling cannot keep up or is blocked.
    fn report_stalls(&mut self) {
        let stalls =
            self.learner.as_ref().map_or(0, |l| l.queue_stats().num_learner_queue_timeouts);
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
        let lag = self.last_learner_stats.get("policy_lag").copied().unwrap_or(0.0);
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
    /// them, place train batches on the learner queue, drain the learner's results and
    /// broadcast weights when due. `_env_runners_only` discards the fragments;
    /// `_skip_learners` builds train batches and discards them instead of training.
    fn training_step(&mut self, stats: &mut StatsMean) -> Result<StepActivity> {
        self.counters.num_training_step_calls += 1;
        let mut activity = StepActivity::default();
        // RLlib checks that the learner thread is alive first; a dead learner reports its cause.
        activity.trained += self.process_trained_results(stats)?;

        // Backpressure: while train batches wait for room on the learner queue (or fragments
        // for a free aggregation worker), leave the runners' fragments uncollected (they stop
        // at their in-flight cap), so the driver never piles up batches.
        let backlog = !self.to_place.is_empty()
            || self.batching.as_ref().is_some_and(|b| b.num_waiting() > 0);
        let mut runners_that_returned = BTreeSet::new();
        if !backlog {
            let fragments = self.runners()?.sample()?;
            activity.fragments = fragments.len();
            for fragment in fragments {
                runners_that_returned.insert(fragment.runner_id);
                activity.episodes += fragment.episodes.len() as u64;
                let batch = self.count_sampled(fragment);
                if let Some(batching) = self.batching.as_mut() {
                    self.to_place.extend(batching.add(batch)?);
                }
            }
        }
        if let Some(batching) = self.batching.as_mut() {
            self.to_place.extend(batching.ready()?);
        }
        if self.config.config().skip_learners {
            self.to_place.clear();
        }
        activity.placed = self.place_on_learner_queue()?;
        activity.trained += self.process_trained_results(stats)?;
        let returned: Vec<usize> = runners_that_returned.into_iter().collect();
        self.update_workers_if_necessary(&returned)?;
        Ok(activity)
    }

    /// Counts a delivered fragment: the one place sampled steps and episodes are counted.
    fn count_sampled(&mut self, fragment: Fragment) -> SampleBatch {
        let c = &mut self.counters;
        c.num_env_steps_sampled += fragment.batch.env_steps() as u64;
        c.num_agent_steps_sampled += fragment.batch.agent_steps() as u64;
        c.episodes_total += fragment.episodes.len() as u64;
        self.episodes.extend(&fragment.episodes);
        fragment.batch
    }

    /// RLlib's `place_processed_samples_on_learner_thread_queue` with a non-blocking put: a
    /// batch that does not fit is kept (and counted in `num_times_learner_queue_full`).
    fn place_on_learner_queue(&mut self) -> Result<usize> {
        let mut placed = 0;
        while let Some(batch) = self.to_place.pop_front() {
            match self.learner()?.try_enqueue(batch) {
                Ok(()) => placed += 1,
                Err(batch) => {
                    self.to_place.push_front(batch);
                    self.counters.num_times_learner_queue_full += 1;
                    break;
                }
            }
        }
        Ok(placed)
    }

    /// RLlib's `process_trained_results`: drain the learner's outqueue into the counters and
    /// the iteration's stats. A learner that died surfaces here with its cause.
    fn process_trained_results(&mut self, stats: &mut StatsMean) -> Result<usize> {
        let outputs = match self.learner()?.drain() {
            Ok(outputs) => outputs,
            Err(cause) => {
                // Its last good weights stay savable (RLlib's last good checkpoint).
                self.keep_dead_learner(&cause);
                return Err(ImpalaError::LearnerDied { cause });
            }
        };
        for out in &outputs {
            self.counters.num_env_steps_trained += out.env_steps as u64;
            self.counters.num_agent_steps_trained += out.agent_steps as u64;
            self.counters.num_grad_updates = out.stats.num_grad_updates;
            stats.add(&out.stats);
        }
        Ok(outputs.len())
    }

    /// RLlib's `update_workers_if_necessary`: every `broadcast_interval` steps, send the newest
    /// weights to the runners that returned samples since the last broadcast. The learner
    /// copies its weights to the CPU only when a broadcast is due and it has moved on.
    fn update_workers_if_necessary(&mut self, runners_that_returned: &[usize]) -> Result<()> {
        if let Some(weights) = self.learner()?.take_new_weights() {
            self.runners()?.set_latest_weights(weights);
        }
        let runners = self.runners.as_mut().ok_or(ImpalaError::Stopped)?;
        if let Some(ids) =
            self.broadcaster.step(runners_that_returned, runners.has_unsent_weights())
        {
            runners.send_latest_weights(&ids);
            self.counters.num_weight_broadcasts += 1;
        }
        let snapshot_version = runners.latest_weights().map_or(0, |w| w.version);
        if self.broadcaster.due_at_next_step() && self.counters.num_grad_updates > snapshot_version
        {
            self.learner()?.request_weights();
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
        let summary = self.episodes.summary();
        let mut learner = BTreeMap::new();
        learner.insert(
            DEFAULT_POLICY_ID.to_string(),
            PolicyLearnerInfo {
                learner_stats: self.last_learner_stats.clone(),
                num_agent_steps_trained: c.num_agent_steps_trained,
                num_grad_updates_lifetime: c.num_grad_updates,
            },
        );
        let q = self.learner.as_ref().map(LearnerHandle::queue_stats).unwrap_or_default();
        let sampler = self.runners.as_ref().map(EnvRunnerGroup::metrics).unwrap_or_default();
        let runner_states =
            self.runners.as_ref().map(EnvRunnerGroup::runner_states).unwrap_or_default();
        IterationResult {
            info: ResultInfo {
                learner,
                num_weight_broadcasts: c.num_weight_broadcasts,
                num_times_learner_queue_full: c.num_times_learner_queue_full,
                num_training_step_calls: c.num_training_step_calls,
                num_weight_snapshots: q.num_weight_snapshots,
                learner_queue: LearnerQueueInfo {
                    size_count: q.size_count as u64,
                    size_mean: q.size_mean,
                    size_std: q.size_std,
                    size_quantiles: q.size_quantiles.to_vec(),
                    num_learner_queue_timeouts: q.num_learner_queue_timeouts,
                    num_train_batches_waiting_on_driver: self.to_place.len() as u64,
                },
                timing_breakdown: q.timing_breakdown(),
            },
            env_runners: env_runner_health(&sampler, &runner_states),
            evaluation: self.last_evaluation.clone(),
            ..IterationResult::counted(
                self.iteration,
                (time_this_iter_s, self.time_total_s),
                (c, before),
                &summary,
                num_episodes,
            )
        }
    }

    /// Runs `evaluation_duration` episodes (or env steps) with the learner's current weights on
    /// fresh evaluation envs (`evaluation_num_env_runners` runners, or the calling thread when
    /// 0), greedy unless `evaluation_explore` (RLlib's `evaluate()`). Each call starts new
    /// episodes, so none spans two calls. After the learner thread died, this evaluates its
    /// last good weights.
    pub fn evaluate(&mut self) -> Result<EvaluationResult> {
        let weights = self.current_weights()?;
        self.evaluator.start(weights)?;
        self.evaluator.finish()
    }

    /// Saves a checkpoint `dir/checkpoint_<iteration>` atomically: config, counters, episode
    /// window, seeds, the learner's weights and optimizer state, a copy of the TorchScript
    /// module `model.custom_model` names (as read when the run started), and a manifest of
    /// their checksums.
    ///
    /// After [`Impala::train`] reported that the learner thread died (a non-finite loss or
    /// weights), this still saves: the learner's last good weights and optimizer state (the
    /// failing step was not applied), under the last completed iteration's number. A valid
    /// checkpoint of that iteration already in `dir` (saved while the learner was healthy) is
    /// kept, not replaced, and its path returned.
    pub fn save(&mut self, dir: &Path) -> Result<PathBuf> {
        if self.stopped {
            return Err(ImpalaError::Stopped);
        }
        if self.learner.as_ref().is_some_and(|l| !l.is_running()) {
            // The thread died since the last drain: report it and save what it left.
            if let Err(e) = self.process_trained_results(&mut StatsMean::default()) {
                tracing::warn!(error = %e, "saving the last good weights of a learner that died");
            }
        }
        if self.learner.is_none() {
            let existing = dir.join(checkpoint_name(self.iteration));
            if existing.is_dir() && read_checkpoint(&existing).is_ok() {
                return Ok(existing);
            }
        }
        std::fs::create_dir_all(dir)
            .map_err(|source| ImpalaError::RunDirNotWritable { path: dir.to_path_buf(), source })?;
        let state = AlgorithmState {
            observation_filter: self.observation_filter()?,
            ..AlgorithmState::new(
                self.iteration,
                self.time_total_s,
                self.counters,
                self.episodes.clone(),
                self.base_seed,
                self.num_restores,
            )
        };
        let learner_error =
            |path: &Path, cause| ImpalaError::LearnerCheckpoint { path: path.to_path_buf(), cause };
        let config = self.config.config();
        let module = self.script.as_ref().map(|s| s.bytes());
        match (&self.learner, &self.idle_learner) {
            (Some(handle), _) => save_checkpoint(dir, &state, config, module, |learner_dir| {
                handle.save(learner_dir).map_err(|e| learner_error(learner_dir, e))
            }),
            (None, Some(learner)) => save_checkpoint(dir, &state, config, module, |learner_dir| {
                learner.save(learner_dir).map_err(|e| learner_error(learner_dir, e))
            }),
            (None, None) => Err(self.learner().err().unwrap_or(ImpalaError::Stopped)),
        }
    }

    /// Restores a checkpoint written by [`Impala::save`] (a checkpoint folder or a run folder):
    /// weights, optimizer state, counters, episode window and iteration, so training continues
    /// where it stopped. The checkpoint must be for the same environment and model (for a
    /// TorchScript model, the same module's bytes, from whichever file); its files
    /// are verified first (see [`crate::checkpoint`]). Also after the learner thread died.
    ///
    /// The env runners are replaced: the old ones are stopped, what they had in flight is
    /// dropped with everything built from their fragments (batches waiting for the learner,
    /// partial train batches), and fresh runners start new episodes acting with the restored
    /// weights from their first step, so no episode of the next iteration comes from
    /// pre-restore weights. Each restore moves the run to new random streams (env seeds, action sampling,
    /// replay), so a resumed run does not replay the episodes the original run saw.
    pub fn restore(&mut self, path: &Path) -> Result<()> {
        if self.stopped {
            return Err(ImpalaError::Stopped);
        }
        let dir = find_checkpoint(path)?;
        let (state, saved) = read_checkpoint(&dir)?;
        let incompatible =
            |what: &str, saved: String, now: String| ImpalaError::IncompatibleCheckpoint {
                path: dir.clone(),
                reason: format!("it was trained with {what} {saved}, this run uses {now}"),
                fix: format!("use the checkpoint's {what} as it is, or start a new run"),
            };
        if saved.env != self.config.config().env {
            return Err(incompatible("env", saved.env, self.config.config().env.clone()));
        }
        let (mut saved_model, mut model) =
            (saved.model.clone(), self.config.config().model.clone());
        let saved_file =
            saved_model.custom_model.as_deref().filter(|name| !CustomModel::NAMES.contains(name));
        if let (Some(script), Some(copy)) = (&self.script, saved_file) {
            // The same TorchScript model is the same module's bytes: the checkpoint's copy is
            // another file than the one this run read.
            let copy = Path::new(copy);
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
            return Err(incompatible("model", was, is));
        }
        // The run's observation filter goes back with the weights that learned on it.
        let filter_before = put_saved_filter(
            self.observation_filter.as_ref(),
            state.observation_filter.clone(),
            &dir,
        )?;
        // The learner loads between SGD steps: take it off its thread (or take the one a
        // failure left behind), load, and start its thread again.
        let was_running = self.learner.is_some();
        let learner = match (self.learner.take(), self.idle_learner.take()) {
            (Some(handle), _) => {
                let (learner, failure) = handle.finish();
                if let Err(e) = failure {
                    tracing::warn!(error = %e, "the learner had failed; restoring replaces its state");
                }
                learner
            }
            (None, learner) => learner,
        };
        // A learner lost to a panic is rebuilt: the checkpoint replaces its state anyway.
        let mut learner = match learner {
            Some(learner) => learner,
            None => {
                new_learner(&self.config, self.policies.model.as_ref(), &self.spec, self.base_seed)?
            }
        };
        if let Err(e) = learner.load(&dir.join(LEARNER_DIR)) {
            // Nothing was loaded: the learner and the filter go back as they were.
            if let (Some(run), Some(before)) = (&self.observation_filter, filter_before) {
                run.replace(before)?;
            }
            if was_running {
                self.learner = Some(self.spawn_learner(learner)?);
            } else {
                self.idle_learner = Some(learner);
            }
            let reason = format!("the learner state does not load ({e})");
            return Err(ImpalaError::corrupt_checkpoint(&dir, reason));
        }
        self.learner = Some(self.spawn_learner(learner)?);
        self.learner_death = None;
        self.stalls_reported = 0;
        // Runners sampled with the weights before: end them (what they have in flight is
        // dropped) and drop what their fragments became; fresh runners start below.
        if let Some(group) = self.runners.take() {
            if let Err(e) = group.shutdown() {
                tracing::warn!(error = %e, "an env runner failed before the restore");
            }
        }
        self.to_place.clear();
        if let Some(batching) = self.batching.take() {
            if let Err(e) = batching.shutdown() {
                tracing::warn!(error = %e, "an aggregation worker failed before the restore");
            }
        }
        self.counters = state.counters;
        self.episodes = state.episodes;
        self.iteration = state.training_iteration;
        self.time_total_s = state.time_total_s;
        self.base_seed = state.base_seed;
        self.num_restores = state.num_restores + 1;
        let streams = self.streams();
        self.batching = batching_stage(&self.config, &streams)?;
        self.evaluator.set_streams(&streams);
        self.broadcaster = WeightBroadcaster::new(self.config.config().broadcast_interval);
        self.last_evaluation = None;
        // New runners, new episodes, the restored weights from their first step.
        self.runners()?;
        Ok(())
    }

    fn spawn_learner(&self, learner: Learner) -> Result<LearnerHandle> {
        Ok(LearnerHandle::spawn(&settings::learner_thread(&self.config), learner)?)
    }

    /// Stops the runner, aggregation and learner threads and joins them, reporting the first
    /// failure (a learner failure that [`Impala::train`] already reported is not reported
    /// again). Dropping an `Impala` stops them too, without reporting.
    pub fn stop(&mut self) -> Result<()> {
        self.stopped = true;
        self.idle_learner = None;
        let runners = self.runners.take().map(EnvRunnerGroup::shutdown);
        if let Some(pool) = &self.python_pool {
            // Runners that did not stop within the grace are stuck in an env step: their
            // workers are killed, not awaited, and the runners end on the closed pipes.
            pool.kill_workers_in_use();
        }
        let batching = self.batching.take().map(TrainBatchBuilder::shutdown);
        let learner = self.learner.take().map(LearnerHandle::stop);
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
        batching.transpose()?;
        if let Some(l) = learner {
            l.map_err(|cause| ImpalaError::LearnerDied { cause })?;
        }
        Ok(())
    }
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
