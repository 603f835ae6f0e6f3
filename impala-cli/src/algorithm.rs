//! [`Impala`]: RLlib's `Impala` algorithm object (old API stack) on threads: env runners
//! (impala-sampler), a learner thread (impala-learner), and the driver's `training_step` loop
//! that connects them, compiles iteration results and saves/restores checkpoints.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use impala_config::{DurationUnit, ImpalaConfig};
use impala_core::{CoreError, Env, EnvSpec, Policy, SampleBatch, Weights};
use impala_learner::{learner_devices, Learner, LearnerHandle, LearnerStats, TorchPolicy};
use impala_sampler::{
    AggregationWorkers, EnvContext, EnvFactory, EnvRunner, EnvRunnerGroup, PolicyFactory,
    SamplerMetrics, TrainBatchBuilder, WeightBroadcaster,
};

use crate::checkpoint::{
    read_checkpoint, save_checkpoint, AlgorithmState, Counters, CHECKPOINT_FORMAT_VERSION,
};
use crate::result::{LearnerQueueInfo, DEFAULT_POLICY_ID};
use crate::{
    peak_rss_mib, CliError, EpisodeWindow, EvaluationResult, IterationResult, Perf,
    PolicyLearnerInfo, Result, ResultInfo,
};

/// Runner id of the evaluation runner (distinct from the sampling runners' 0..=num_env_runners,
/// so its env seeds differ from theirs).
const EVALUATION_RUNNER_ID: usize = 1_000;

/// How long the driver sleeps when a training step found nothing to do, instead of spinning a
/// core that the runners and the learner need (RLlib's `timeout_s_sampler_manager = 0` polls).
const IDLE_SLEEP: Duration = Duration::from_micros(500);

/// Checks what can be checked before any thread starts: the environment id and `env_config`
/// (by building one env) and the resource request against this machine's cores and CUDA
/// devices. Returns the warnings (e.g. more CPUs asked for than the machine has).
pub fn check_environment(config: &ImpalaConfig) -> Result<Vec<String>> {
    make_env(config, &EnvContext::new(0, 0, config.seed, config.env_config.clone()))?;
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let gpus = tch::Cuda::device_count().max(0);
    let asked = config.default_resource_request().total_gpus();
    if asked > 0.0 && gpus == 0 && !cfg!(feature = "cuda") {
        return Err(CliError::ImpossibleResources {
            reason: format!("the config asks for {asked} GPU(s) but this impala was built without CUDA support"),
            fix: "rebuild with `cargo build --release -p impala-cli --features cuda` on a CUDA machine, or set \
                  `num_gpus = 0` (or `_fake_gpus = true` to run the GPU towers on the CPU)"
                .into(),
        });
    }
    let warnings = config.default_resource_request().check(cpus as f64, gpus as f64)?;
    Ok(warnings.iter().map(ToString::to_string).collect())
}

/// Builds one environment as the runners do: the registered env with its time limit, then
/// observation normalisation and frame stacking when the config asks (rewards are clipped by
/// the runners, so episode returns stay unclipped).
fn make_env(config: &ImpalaConfig, ctx: &EnvContext) -> Result<Box<dyn Env>> {
    let mut env = impala_envs::make(&config.env, &ctx.env_config)?;
    if config.normalize_observations {
        // RLlib's MeanStdFilter clips normalised observations to [-10, 10].
        env = Box::new(impala_envs::NormalizeObservation::new(env, Some(10.0))?);
    }
    if config.model.framestack > 1 {
        env = Box::new(impala_envs::FrameStack::new(env, config.model.framestack)?);
    }
    Ok(env)
}

/// Where train batches are built: on the driver thread, or on aggregation worker threads.
enum Batching {
    /// RLlib's `process_experiences_directly` (mix-in replay + concatenation on the driver).
    Direct(Box<TrainBatchBuilder>),
    /// RLlib's tree aggregation; fragments the workers could not take yet wait here.
    Aggregated { workers: AggregationWorkers, waiting: VecDeque<SampleBatch> },
}

/// Running sums of the learner stats of one iteration (RLlib's `LearnerInfoBuilder` mean).
#[derive(Default)]
struct StatsMean {
    sums: BTreeMap<&'static str, f64>,
    count: usize,
}

impl StatsMean {
    fn add(&mut self, s: &LearnerStats) {
        for (k, v) in stats_fields(s) {
            *self.sums.entry(k).or_insert(0.0) += v;
        }
        self.count += 1;
    }

    fn mean(&self) -> BTreeMap<String, f64> {
        self.sums.iter().map(|(k, v)| ((*k).to_string(), v / self.count as f64)).collect()
    }
}

fn stats_fields(s: &LearnerStats) -> [(&'static str, f64); 9] {
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
    ]
}

/// The IMPALA algorithm: build it from an [`ImpalaConfig`], call [`Impala::train`] once per
/// iteration, [`Impala::save`] / [`Impala::restore`] checkpoints, [`Impala::evaluate`] the
/// policy.
///
/// ```no_run
/// use impala_cli::Impala;
/// let mut config = impala_config::ImpalaConfig::default();
/// config.min_time_s_per_iteration = 1.0;
/// let mut algo = Impala::new(config)?;
/// let result = algo.train()?;
/// println!("{}", result.progress_line());
/// let checkpoint = algo.save(std::path::Path::new("impala_results/example"))?;
/// algo.stop()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Impala {
    config: ImpalaConfig,
    spec: EnvSpec,
    env_factory: EnvFactory,
    policy_factory: PolicyFactory,
    runners: Option<EnvRunnerGroup>,
    learner: Option<LearnerHandle>,
    broadcaster: WeightBroadcaster,
    batching: Batching,
    /// RLlib's `batches_to_place_on_learner`: train batches the learner queue had no room for,
    /// oldest first; retried every step, never dropped.
    to_place: VecDeque<SampleBatch>,
    /// The learner's newest weights not yet broadcast.
    pending_weights: Option<Arc<Weights>>,
    /// The learner's newest weights (for evaluation and restarted runners).
    latest_weights: Arc<Weights>,
    counters: Counters,
    episodes: EpisodeWindow,
    iteration: u64,
    time_total_s: f64,
    base_seed: u64,
    last_learner_stats: BTreeMap<String, f64>,
    interrupt: Option<Arc<AtomicBool>>,
    evaluation_runner: Option<EnvRunner>,
    last_evaluation: Option<EvaluationResult>,
}

impl std::fmt::Debug for Impala {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Impala")
            .field("env", &self.config.env)
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
    episodes: Vec<impala_core::EpisodeStats>,
}

impl Impala {
    /// Builds the env runners, the learner (and its thread) and the batching stage from
    /// `config`, which should be validated (`ImpalaConfig::validate`). Runners start sampling
    /// at once, with the learner's initial weights.
    pub fn new(config: ImpalaConfig) -> Result<Self> {
        // The driver only builds the model and evaluates; one libtorch thread keeps it from
        // competing with the learner thread (which uses `num_learner_threads`) and the runners
        // (one each, set by their policies).
        tch::set_num_threads(1);
        let base_seed = config.seed.unwrap_or_else(random_seed);
        let env_config = config.clone();
        let env_factory: EnvFactory = Arc::new(move |ctx: &EnvContext| {
            make_env(&env_config, ctx)
                .map_err(|e| CoreError::Env { env: env_config.env.clone(), reason: e.to_string() })
        });
        let spec =
            make_env(&config, &EnvContext::new(0, 0, config.seed, config.env_config.clone()))?
                .spec()
                .clone();

        // The learner seeds its initial weights from `seed`; runs without one get a fresh seed.
        let learner_config = ImpalaConfig { seed: Some(base_seed), ..config.clone() };
        let devices = learner_devices(&learner_config)?;
        let learner = Learner::with_devices(&learner_config, &spec, &devices)?;
        let initial = learner.weights()?;
        let learner = LearnerHandle::spawn(&config, learner)?;

        let (policy_config, policy_spec, weights) =
            (config.clone(), spec.clone(), Arc::clone(&initial));
        let policy_factory: PolicyFactory = Arc::new(move |runner_id: usize| {
            let seed =
                base_seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(runner_id as u64 + 1);
            let mut policy =
                TorchPolicy::new(&policy_config, &policy_spec, seed).map_err(CoreError::from)?;
            policy.set_weights(&weights)?;
            Ok(Box::new(policy) as Box<dyn Policy>)
        });
        let runners =
            EnvRunnerGroup::new(&config, Arc::clone(&env_factory), Arc::clone(&policy_factory))?;
        let batching = if config.num_aggregation_workers > 0 {
            Batching::Aggregated {
                workers: AggregationWorkers::new(&config)?,
                waiting: VecDeque::new(),
            }
        } else {
            Batching::Direct(Box::new(TrainBatchBuilder::new(&config)?))
        };
        Ok(Impala {
            broadcaster: WeightBroadcaster::new(config.broadcast_interval),
            episodes: EpisodeWindow::new(config.metrics_num_episodes_for_smoothing),
            config,
            spec,
            env_factory,
            policy_factory,
            runners: Some(runners),
            learner: Some(learner),
            batching,
            to_place: VecDeque::new(),
            pending_weights: None,
            latest_weights: initial,
            counters: Counters::default(),
            iteration: 0,
            time_total_s: 0.0,
            base_seed,
            last_learner_stats: BTreeMap::new(),
            interrupt: None,
            evaluation_runner: None,
            last_evaluation: None,
        })
    }

    /// The config the algorithm was built from.
    pub fn config(&self) -> &ImpalaConfig {
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

    /// A flag that, once set (by a Ctrl-C handler), ends the current iteration early so the
    /// caller can save and exit.
    pub fn set_interrupt_flag(&mut self, flag: Arc<AtomicBool>) {
        self.interrupt = Some(flag);
    }

    fn interrupted(&self) -> bool {
        self.interrupt.as_ref().is_some_and(|f| f.load(Ordering::SeqCst))
    }

    fn learner(&self) -> Result<&LearnerHandle> {
        self.learner.as_ref().ok_or(CliError::Stopped)
    }

    fn runners(&mut self) -> Result<&mut EnvRunnerGroup> {
        self.runners.as_mut().ok_or(CliError::Stopped)
    }

    /// Runs `training_step` until `min_time_s_per_iteration` has passed and at least
    /// `min_sample_timesteps_per_iteration` / `min_train_timesteps_per_iteration` steps were
    /// sampled / trained (RLlib's `Algorithm.train`), then returns the iteration's result.
    pub fn train(&mut self) -> Result<IterationResult> {
        let started = Instant::now();
        let before = self.counters;
        let min_time = Duration::from_secs_f64(self.config.min_time_s_per_iteration.max(0.0));
        let mut stats = StatsMean::default();
        let mut num_episodes = 0u64;
        loop {
            let activity = self.training_step(&mut stats)?;
            num_episodes += activity.episodes.len() as u64;
            let sampled = self.counters.num_env_steps_sampled - before.num_env_steps_sampled;
            let trained = self.counters.num_env_steps_trained - before.num_env_steps_trained;
            let done = started.elapsed() >= min_time
                && sampled >= self.config.min_sample_timesteps_per_iteration as u64
                && trained >= self.config.min_train_timesteps_per_iteration as u64;
            if done || self.interrupted() {
                break;
            }
            if activity.fragments == 0 && activity.placed == 0 && activity.trained == 0 {
                std::thread::sleep(IDLE_SLEEP);
            }
        }
        if stats.count > 0 {
            self.last_learner_stats = stats.mean();
        }
        self.iteration += 1;
        let time_this_iter_s = started.elapsed().as_secs_f64();
        self.time_total_s += time_this_iter_s;
        if self.config.evaluation_interval.is_some_and(|n| n > 0 && self.iteration % n as u64 == 0)
        {
            self.last_evaluation = Some(self.evaluate()?);
        } else {
            self.last_evaluation = None;
        }
        Ok(self.compile_result(&before, time_this_iter_s, num_episodes))
    }

    /// One pass of RLlib's `Impala.training_step`: check the learner, collect ready sample
    /// fragments, build train batches (mix-in replay + concatenation, on the driver or on
    /// aggregation workers), place them on the learner queue without blocking, process
    /// trained results and broadcast weights to the runners that returned samples.
    fn training_step(&mut self, stats: &mut StatsMean) -> Result<StepActivity> {
        self.counters.num_training_step_calls += 1;
        let mut activity = StepActivity::default();
        // RLlib checks that the learner thread is alive first; a dead learner reports its cause.
        activity.trained += self.process_trained_results(stats)?;

        // Backpressure: while train batches wait for room on the learner queue (or fragments
        // for a free aggregation worker), leave the runners' fragments uncollected (they stop
        // at their in-flight cap), so the driver never piles up batches.
        let mut runners_that_returned = Vec::new();
        let backlog = !self.to_place.is_empty()
            || matches!(&self.batching, Batching::Aggregated { waiting, .. } if !waiting.is_empty());
        if !backlog {
            let fragments = self.runners()?.sample()?;
            activity.fragments = fragments.len();
            for fragment in fragments {
                runners_that_returned.push(fragment.runner_id);
                let steps = fragment.batch.env_steps() as u64;
                self.counters.num_env_steps_sampled += steps;
                self.counters.num_agent_steps_sampled += fragment.batch.agent_steps() as u64;
                self.counters.episodes_total += fragment.episodes.len() as u64;
                self.episodes.extend(&fragment.episodes);
                activity.episodes.extend_from_slice(&fragment.episodes);
                self.add_to_batching(fragment.batch)?;
            }
        }
        self.collect_train_batches()?;
        activity.placed = self.place_on_learner_queue()?;
        activity.trained += self.process_trained_results(stats)?;
        self.update_workers_if_necessary(&runners_that_returned)?;
        Ok(activity)
    }

    fn add_to_batching(&mut self, batch: SampleBatch) -> Result<()> {
        match &mut self.batching {
            Batching::Direct(builder) => self.to_place.extend(builder.add(batch)?),
            Batching::Aggregated { waiting, .. } => waiting.push_back(batch),
        }
        Ok(())
    }

    /// With aggregation workers: hand waiting fragments to them and collect finished train
    /// batches (fragments no worker can take yet stay waiting, never dropped).
    fn collect_train_batches(&mut self) -> Result<()> {
        if let Batching::Aggregated { workers, waiting } = &mut self.batching {
            while let Some(batch) = waiting.pop_front() {
                if let Err(batch) = workers.submit(batch) {
                    waiting.push_front(batch);
                    break;
                }
            }
            self.to_place.extend(workers.ready()?);
        }
        Ok(())
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
        let outputs = self.learner()?.drain().map_err(|cause| CliError::LearnerDied { cause })?;
        for out in &outputs {
            self.counters.num_env_steps_trained += out.env_steps as u64;
            self.counters.num_agent_steps_trained += out.agent_steps as u64;
            self.counters.num_grad_updates = out.stats.num_grad_updates;
            stats.add(&out.stats);
        }
        Ok(outputs.len())
    }

    /// RLlib's `update_workers_if_necessary`: every `broadcast_interval` steps, send the newest
    /// weights to the runners that returned samples since the last broadcast.
    fn update_workers_if_necessary(&mut self, runners_that_returned: &[usize]) -> Result<()> {
        if let Some(w) = self.learner()?.take_new_weights() {
            self.latest_weights = Arc::clone(&w);
            self.pending_weights = Some(w);
        }
        if let Some(ids) =
            self.broadcaster.step(runners_that_returned, self.pending_weights.is_some())
        {
            if let Some(weights) = self.pending_weights.take() {
                self.runners()?.sync_weights(weights, &ids);
            }
            self.counters.num_weight_broadcasts += 1;
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
        let per_sec = |now: u64, then: u64| {
            if time_this_iter_s > 0.0 {
                (now - then) as f64 / time_this_iter_s
            } else {
                0.0
            }
        };
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
        let timing_breakdown = BTreeMap::from([
            ("learner_dequeue_time_ms".to_string(), q.learner_dequeue_time_ms),
            ("learner_grad_time_ms".to_string(), q.learner_grad_time_ms),
            ("learner_load_time_ms".to_string(), q.learner_load_time_ms),
            ("learner_load_wait_time_ms".to_string(), q.learner_load_wait_time_ms),
        ]);
        let sampler = self.runners.as_ref().map(EnvRunnerGroup::metrics).unwrap_or_default();
        IterationResult {
            training_iteration: self.iteration,
            time_this_iter_s,
            time_total_s: self.time_total_s,
            timestamp: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            timesteps_total: c.num_env_steps_sampled,
            num_env_steps_sampled: c.num_env_steps_sampled,
            num_env_steps_trained: c.num_env_steps_trained,
            num_agent_steps_sampled: c.num_agent_steps_sampled,
            num_agent_steps_trained: c.num_agent_steps_trained,
            num_env_steps_sampled_this_iter: c.num_env_steps_sampled - before.num_env_steps_sampled,
            num_env_steps_trained_this_iter: c.num_env_steps_trained - before.num_env_steps_trained,
            num_agent_steps_sampled_this_iter: c.num_agent_steps_sampled
                - before.num_agent_steps_sampled,
            num_agent_steps_trained_this_iter: c.num_agent_steps_trained
                - before.num_agent_steps_trained,
            num_env_steps_sampled_throughput_per_sec: per_sec(
                c.num_env_steps_sampled,
                before.num_env_steps_sampled,
            ),
            num_env_steps_trained_throughput_per_sec: per_sec(
                c.num_env_steps_trained,
                before.num_env_steps_trained,
            ),
            episode_return_mean: summary.episode_return_mean,
            episode_return_min: summary.episode_return_min,
            episode_return_max: summary.episode_return_max,
            episode_len_mean: summary.episode_len_mean,
            num_episodes,
            episodes_total: c.episodes_total,
            info: ResultInfo {
                learner,
                num_weight_broadcasts: c.num_weight_broadcasts,
                num_times_learner_queue_full: c.num_times_learner_queue_full,
                num_training_step_calls: c.num_training_step_calls,
                learner_queue: LearnerQueueInfo {
                    size_count: q.size_count as u64,
                    size_mean: q.size_mean,
                    size_std: q.size_std,
                    size_quantiles: q.size_quantiles.to_vec(),
                    num_learner_queue_timeouts: q.num_learner_queue_timeouts,
                    num_train_batches_waiting_on_driver: self.to_place.len() as u64,
                },
                timing_breakdown,
            },
            env_runners: env_runner_health(&sampler),
            evaluation: self.last_evaluation.clone(),
            perf: Perf { peak_rss_mib: peak_rss_mib() },
        }
    }

    /// Runs `evaluation_duration` episodes (or env steps) on a separate evaluation env with the
    /// learner's newest weights, greedy unless `evaluation_explore` (RLlib's `evaluate()`).
    pub fn evaluate(&mut self) -> Result<EvaluationResult> {
        if self.evaluation_runner.is_none() {
            // One env, so episodes are run one after another and short ones are not favoured.
            let mut eval_config = self.config.clone();
            eval_config.num_envs_per_env_runner = 1;
            eval_config.seed = Some(self.base_seed);
            let mut runner = EnvRunner::new(
                &eval_config,
                EVALUATION_RUNNER_ID,
                &self.env_factory,
                &self.policy_factory,
            )?;
            runner.set_explore(self.config.evaluation_explore);
            self.evaluation_runner = Some(runner);
        }
        if let Some(w) = self.learner()?.take_new_weights() {
            self.latest_weights = Arc::clone(&w);
            self.pending_weights = Some(w);
        }
        let weights = Arc::clone(&self.latest_weights);
        let duration = self.config.evaluation_duration.max(1);
        let unit = self.config.evaluation_duration_unit;
        let runner = self.evaluation_runner.as_mut().ok_or(CliError::Stopped)?;
        runner.publish_weights(weights);
        let mut episodes = Vec::new();
        let mut steps = 0u64;
        loop {
            let fragment = runner.sample()?;
            steps += fragment.batch.env_steps() as u64;
            episodes.extend(fragment.episodes);
            let done = match unit {
                DurationUnit::Episodes => episodes.len() >= duration,
                DurationUnit::Timesteps => steps >= duration as u64,
            };
            if done {
                break;
            }
        }
        if unit == DurationUnit::Episodes {
            episodes.truncate(duration);
        }
        let mut window = EpisodeWindow::new(episodes.len().max(1));
        window.extend(&episodes);
        let s = window.summary();
        Ok(EvaluationResult {
            episode_return_mean: s.episode_return_mean,
            episode_return_min: s.episode_return_min,
            episode_return_max: s.episode_return_max,
            episode_len_mean: s.episode_len_mean,
            num_episodes: episodes.len() as u64,
            num_env_steps_sampled: steps,
        })
    }

    /// Saves a checkpoint `dir/checkpoint_<iteration>` atomically: config, counters, episode
    /// window, seed, and the learner's weights and optimizer state.
    pub fn save(&mut self, dir: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(dir)
            .map_err(|source| CliError::RunDirNotWritable { path: dir.to_path_buf(), source })?;
        let state = AlgorithmState {
            format_version: CHECKPOINT_FORMAT_VERSION,
            impala_rs_version: env!("CARGO_PKG_VERSION").to_string(),
            training_iteration: self.iteration,
            time_total_s: self.time_total_s,
            counters: self.counters,
            episodes: self.episodes.clone(),
            base_seed: self.base_seed,
        };
        let learner = self.learner()?;
        save_checkpoint(dir, &state, &self.config, |learner_dir| {
            learner.save(learner_dir).map_err(|e| CliError::LearnerCheckpoint {
                path: learner_dir.to_path_buf(),
                cause: e,
            })
        })
    }

    /// Restores a checkpoint written by [`Impala::save`] (a checkpoint folder or a run folder):
    /// weights, optimizer state, counters, episode window and iteration, so training continues
    /// where it stopped. The checkpoint must be for the same environment and model.
    pub fn restore(&mut self, path: &Path) -> Result<()> {
        let dir = crate::checkpoint::find_checkpoint(path)?;
        let (state, saved) = read_checkpoint(&dir)?;
        let incompatible =
            |what: &str, saved: String, now: String| CliError::IncompatibleCheckpoint {
                path: dir.clone(),
                reason: format!("it was trained with {what} {saved}, this run uses {now}"),
                fix: format!("resume without changing {what}, or start a new run"),
            };
        if saved.env != self.config.env {
            return Err(incompatible("env", saved.env, self.config.env.clone()));
        }
        if saved.model != self.config.model {
            return Err(incompatible(
                "model",
                format!("{:?}", saved.model),
                format!("{:?}", self.config.model),
            ));
        }
        // The learner loads between SGD steps: stop its thread, load, start it again.
        let handle = self.learner.take().ok_or(CliError::Stopped)?;
        let mut learner = handle.stop().map_err(|cause| CliError::LearnerDied { cause })?;
        let learner_dir = dir.join(crate::checkpoint::LEARNER_DIR);
        let loaded = learner.load(&learner_dir).map_err(|e| CliError::CorruptCheckpoint {
            path: dir.clone(),
            reason: format!("the learner state does not load ({e})"),
        });
        let weights = learner.weights();
        self.learner = Some(LearnerHandle::spawn(&self.config, learner)?);
        loaded?;
        let weights = weights?;
        let ids: Vec<usize> = self.runners()?.healthy_runner_ids();
        self.runners()?.sync_weights(Arc::clone(&weights), &ids);
        self.latest_weights = weights;
        self.pending_weights = None;
        self.counters = state.counters;
        self.episodes = state.episodes;
        self.iteration = state.training_iteration;
        self.time_total_s = state.time_total_s;
        self.base_seed = state.base_seed;
        Ok(())
    }

    /// Stops the runner, aggregation and learner threads and joins them, reporting the first
    /// failure. Dropping an `Impala` stops them too, without reporting.
    pub fn stop(&mut self) -> Result<()> {
        let runners = self.runners.take().map(EnvRunnerGroup::shutdown);
        let learner = self.learner.take().map(LearnerHandle::stop);
        if let Some(r) = runners {
            r?;
        }
        if let Some(l) = learner {
            l.map_err(|cause| CliError::LearnerDied { cause })?;
        }
        Ok(())
    }
}

/// The sampler's health counters under RLlib's names (`num_healthy_workers` became
/// `num_healthy_env_runners` on the new stack).
fn env_runner_health(m: &SamplerMetrics) -> BTreeMap<String, f64> {
    BTreeMap::from([
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
    ])
}

/// A seed for runs without one (`seed = None`), recorded in checkpoints.
fn random_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ (u64::from(std::process::id()) << 32)
}
