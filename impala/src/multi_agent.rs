//! [`MultiAgentImpala`]: RLlib's `Impala` on a multi-agent env (old API stack): env runner
//! threads return per-policy batches (`MultiAgentBatch.policy_batches`), each policy to train
//! has its own mix-in replay and train batches of `train_batch_size` of its agent steps, its own
//! learner (model, optimizer, schedules and V-trace), and its weights go to the runners only
//! when it changed. Policies left out of `policies_to_train` act with the weights they start
//! with (or restore) and never change.
//!
//! As in RLlib's old stack, one learner thread serves every policy to train
//! ([`LearnerHandle::spawn_shared`]): each policy keeps its own queue, minibatch buffer, model,
//! optimizer and schedules, and the thread steps the policies whose batches are ready in turn.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use impala_config::{CountStepsBy, DurationUnit, PolicyMap, ValidatedConfig};
use impala_core::Precision;
use impala_core::{
    EnvSpec, EpisodeStats, MultiAgentEnv, MultiAgentSpec, Policy, SampleBatch, Weights,
};
use impala_gym::{EnvKind, GymEnvPool};
use impala_learner::{Learner, LearnerHandle, ModelFactory, TorchPolicy};
use impala_runner_pool::{RunEnv, RunnerTransport};
use impala_sampler::{
    MultiAgentEnvFactory, MultiAgentEnvRunner, MultiAgentFragment, MultiAgentGroupSettings,
    MultiAgentPolicyFactory, MultiAgentRunnerGroup, MultiAgentSettings, SamplerError,
    TrainBatchBuilder,
};

use crate::algorithm::StatsMean;
use crate::budget::PolicyShare;
use crate::builder::{
    batching_stage, new_learner, random_seed, runner_sample_seed, PolicySource, Streams,
};
use crate::checkpoint::{
    find_checkpoint, policy_learner_dir, read_checkpoint, save_checkpoint, AlgorithmState, Counters,
};
use crate::settings;
use crate::torchscript::ScriptedModel;
use crate::{
    EpisodeWindow, EvaluationResult, ImpalaError, IterationResult, LearnerQueueInfo,
    PolicyLearnerInfo, Result, ResultInfo, TrainedPolicy,
};

/// How long the driver waits for a fragment when a training step found nothing to do.
const FRAGMENT_WAIT: Duration = Duration::from_millis(1);

/// A policy's learner: on the learner thread while it trains, held here when it does not
/// (a policy not to train, or a trained one between two learner threads).
enum PolicyLearner {
    Training(LearnerHandle),
    Held(Learner),
    /// After `stop()`.
    Stopped,
}

/// One policy of the run.
struct PolicyState {
    id: String,
    spec: EnvSpec,
    /// The config it learns with (the run's, with its `policy_config` entries).
    config: ValidatedConfig,
    model: Arc<dyn ModelFactory>,
    learner: PolicyLearner,
    /// Whether it is one of `policies_to_train`.
    trains: bool,
    /// Mix-in replay and concatenation into train batches (trained policies only).
    batching: Option<TrainBatchBuilder>,
    /// Train batches its learner queue had no room for, oldest first.
    to_place: VecDeque<SampleBatch>,
    stats: StatsMean,
    last_stats: BTreeMap<String, f64>,
    agent_steps_trained: u64,
    num_grad_updates: u64,
    /// The weights version the runners act with.
    broadcast_version: u64,
    /// Its agents' summed rewards per episode (`policy_reward_mean`).
    episodes: EpisodeWindow,
}

impl PolicyState {
    fn weights(&self) -> Result<Arc<Weights>> {
        Ok(match &self.learner {
            PolicyLearner::Training(handle) => handle.current_weights()?,
            PolicyLearner::Held(learner) => learner.weights()?,
            PolicyLearner::Stopped => return Err(ImpalaError::Stopped),
        })
    }

    fn save(&self, dir: &Path) -> Result<()> {
        let cause = |e| ImpalaError::LearnerCheckpoint { path: dir.to_path_buf(), cause: e };
        match &self.learner {
            PolicyLearner::Training(handle) => handle.save(dir).map_err(cause),
            PolicyLearner::Held(learner) => learner.save(dir).map_err(cause),
            PolicyLearner::Stopped => Err(ImpalaError::Stopped),
        }
    }
}

/// IMPALA on a multi-agent env: several policies, RLlib's `policy_mapping_fn` (the config's
/// `policy_mapping`), `policies_to_train` and `count_steps_by` (see the module docs).
///
/// ```
/// use impala::config::ImpalaConfig;
/// use impala::MultiAgentImpala;
///
/// let mut config = ImpalaConfig::default();
/// config.env = "HalfObserved".into(); // two agents, each seeing one bit of the state
/// config.policies = vec!["left".into(), "right".into()];
/// config.num_env_runners = 1;
/// config.min_time_s_per_iteration = 0.2;
/// let mut algo = MultiAgentImpala::new(config.validate()?)?;
/// let result = algo.train()?;
/// assert!(result.num_agent_steps_sampled == 2 * result.num_env_steps_sampled);
/// assert!(result.info.learner.contains_key("left"));
/// algo.stop()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct MultiAgentImpala {
    config: ValidatedConfig,
    spec: MultiAgentSpec,
    map: PolicyMap,
    envs: MultiAgentEnvFactory,
    policies: Vec<PolicyState>,
    runners: Option<MultiAgentRunnerGroup>,
    /// The transport of remote env runners, when they sample instead of runner threads.
    remote: Option<Arc<dyn RunnerTransport>>,
    /// The Python env workers' pool, when the env is Python's: `stop()` kills the workers that
    /// runners stuck in an env step still hold.
    python_pool: Option<Arc<GymEnvPool>>,
    counters: Counters,
    episodes: EpisodeWindow,
    iteration: u64,
    time_total_s: f64,
    base_seed: u64,
    num_restores: u64,
    interrupt: Option<Arc<AtomicBool>>,
    last_evaluation: Option<EvaluationResult>,
    /// Training steps that took fragments since the last broadcast (`broadcast_interval`).
    steps_since_broadcast: usize,
    stopped: bool,
}

impl std::fmt::Debug for MultiAgentImpala {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiAgentImpala")
            .field("env", &self.spec.id)
            .field("policies", &self.map.policy_ids)
            .field("iteration", &self.iteration)
            .finish_non_exhaustive()
    }
}

/// Refuses the options a multi-agent run does not support, naming what to do instead; those of
/// runners in this process or of `remote` ones.
fn check_options(config: &ValidatedConfig, remote: bool) -> Result<()> {
    let c = config.config();
    let refuse = |key: &'static str, reason: &str| {
        Err(ImpalaError::MultiAgentOption { key, reason: reason.to_string() })
    };
    if remote {
        crate::remote::check_remote_config(config)?;
    } else {
        crate::remote::check_local_config(config)?;
    }
    if c.normalize_observations {
        return refuse("normalize_observations", "the observation filter is per env; remove it");
    }
    if c.model.framestack > 1 {
        return refuse("model.framestack", "frames are stacked for single-agent envs; remove it");
    }
    if c.clip_rewards.is_some() {
        return refuse(
            "clip_rewards",
            "agents' rewards are trained as the env gives them; remove it",
        );
    }
    if c.clip_actions {
        return refuse("clip_actions", "actions go to the env as sampled; remove it");
    }
    if c.restart_failed_sub_environments || c.remote_worker_envs {
        return refuse(
            "restart_failed_sub_environments",
            "native envs fail only as a whole runner, which `restart_failed_env_runners` restarts; \
             remove it",
        );
    }
    Ok(())
}

/// The factory of `config`'s multi-agent envs (a native one, or a Python one from `config.env`
/// or the pickled `creator`, stepped in env worker processes) and the Python env workers' pool;
/// builds no env.
fn multi_agent_env_factory(
    config: &ValidatedConfig,
    creator: Option<PathBuf>,
) -> (MultiAgentEnvFactory, Option<Arc<GymEnvPool>>) {
    let (id, env_config) = (config.config().env.clone(), config.config().env_config.clone());
    if creator.is_none() && impala_envs::is_multi_agent(&id) {
        let factory: MultiAgentEnvFactory = Arc::new(move |_| {
            impala_envs::make_multi_agent(&id, &env_config)
                .map_err(|e| impala_core::CoreError::Env { env: id.clone(), reason: e.to_string() })
        });
        return (factory, None);
    }
    let mut settings = settings::python_envs(config);
    settings.creator = creator;
    let pool = Arc::new(GymEnvPool::new(settings));
    let making = Arc::clone(&pool);
    // Each runner builds its envs on its own thread, which keeps its env workers its own.
    let factory: MultiAgentEnvFactory =
        Arc::new(
            move |i| Ok(Box::new(making.make_multi_agent(0, 0, i)?) as Box<dyn MultiAgentEnv>),
        );
    (factory, Some(pool))
}

/// [`multi_agent_env_factory`], and the env's spec from one env built (native) or probed in an
/// env worker (Python), refusing a single-agent Python env.
fn multi_agent_envs(
    config: &ValidatedConfig,
    creator: Option<PathBuf>,
) -> Result<(MultiAgentEnvFactory, MultiAgentSpec, Option<Arc<GymEnvPool>>)> {
    let (factory, pool) = multi_agent_env_factory(config, creator);
    let spec = match &pool {
        None => {
            let c = config.config();
            impala_envs::make_multi_agent(&c.env, &c.env_config)?.spec().clone()
        }
        Some(pool) => match pool.probe_kind()? {
            EnvKind::Multi(spec) => spec,
            EnvKind::Single(_) => {
                return Err(ImpalaError::EnvOption {
                    key: "env",
                    problem: format!("is `{}`, a single-agent env", config.config().env),
                    fix: "train it with `Impala` (as `impala train` does)".into(),
                })
            }
        },
    };
    Ok((factory, spec, pool))
}

/// The config policy `policy_id` learns with (`policy_config`) and its model.
fn policy_model(
    config: &ValidatedConfig,
    policy_id: &str,
) -> Result<(ValidatedConfig, Arc<dyn ModelFactory>)> {
    let policy_config = config.config().for_policy(policy_id)?.validate()?;
    let (model, script) = ScriptedModel::for_config(&policy_config)?;
    if script.is_some() {
        return Err(ImpalaError::MultiAgentOption {
            key: "model.custom_model",
            reason: "a TorchScript module has one observation space; use a built-in model".into(),
        });
    }
    Ok((policy_config, model))
}

/// Per policy of `map`, the spaces of the agents that map to it (the same for all of them, or
/// the mapping is refused naming the agent and the policy).
fn policy_specs(spec: &MultiAgentSpec, map: &PolicyMap) -> Result<Vec<EnvSpec>> {
    impala_sampler::policy_specs(spec, &map.policy_of_agent, &map.policy_ids).map_err(|e| match e {
        SamplerError::PolicyMapping { reason } => {
            ImpalaError::MultiAgentOption { key: "policy_mapping", reason }
        }
        other => other.into(),
    })
}

/// Puts the learners of the policies to train on one learner thread (RLlib's old stack: one
/// thread trains each policy's batches in turn); the others stay held, never changing.
fn start_learners(policies: &mut [PolicyState]) -> Result<()> {
    let mut trained = Vec::new();
    let mut learners = Vec::new();
    for (p, policy) in policies.iter_mut().enumerate() {
        if !policy.trains {
            continue;
        }
        if let PolicyLearner::Held(learner) =
            std::mem::replace(&mut policy.learner, PolicyLearner::Stopped)
        {
            trained.push(p);
            learners.push((settings::learner_thread(&policy.config), learner));
        }
    }
    if learners.is_empty() {
        return Ok(());
    }
    let handles = LearnerHandle::spawn_shared(learners)?;
    for (p, handle) in trained.into_iter().zip(handles) {
        policies[p].learner = PolicyLearner::Training(handle);
    }
    Ok(())
}

/// How a runner of `config` samples: the policy of each agent (`map`), the fragment length,
/// the group's base env seed (each runner's own from [`MultiAgentSettings::for_runner`]).
fn runner_settings(
    config: &ValidatedConfig,
    map: &PolicyMap,
    env_seed: Option<u64>,
) -> MultiAgentSettings {
    MultiAgentSettings {
        policy_of_agent: map.policy_of_agent.clone(),
        rollout_fragment_length: config.config().rollout_fragment_length,
        seed: env_seed,
        explore: true,
    }
}

/// Builds, per runner and incarnation, CPU policies of `policies` (spec and model, in policy
/// order) acting with the weights given, each drawing actions from its own stream of
/// `explore_seed`.
fn acting_policies(
    policies: Vec<(EnvSpec, Arc<dyn ModelFactory>)>,
    base_seed: u64,
    precision: Precision,
    explore_seed: u64,
) -> MultiAgentPolicyFactory {
    Arc::new(move |runner, incarnation, weights: &[Arc<Weights>]| {
        let seed = runner_sample_seed(explore_seed, runner, incarnation);
        policies
            .iter()
            .zip(weights)
            .enumerate()
            .map(|(p, ((spec, model), w))| {
                let mut policy = TorchPolicy::new(
                    model.as_ref(),
                    spec,
                    base_seed,
                    impala_sampler::stream_seed(seed, p as u64),
                )
                .and_then(|policy| policy.with_precision(precision))
                .map_err(impala_core::CoreError::from)?;
                policy.set_weights(w)?;
                Ok(Box::new(policy) as Box<dyn Policy>)
            })
            .collect()
    })
}

/// A remote runner's multi-agent env runner: runner `runner_id`'s incarnation `incarnation`
/// of the driver's run of `config` on the driver's env `spec` with its `policies`' specs (its
/// envs built here as the driver builds them, on the envs of `creator` when this host brings
/// one; the agents mapped from the config), acting with `weights` (one per policy), its env and
/// action streams from the run's seeds. No env is probed here: the runner's envs are checked
/// against `spec` once built ([`Assignment::build`](impala_runner_pool::Assignment::build)).
pub(crate) fn remote_runner(
    config: &ValidatedConfig,
    creator: Option<PathBuf>,
    (spec, policies): (&MultiAgentSpec, &[EnvSpec]),
    (runner_id, incarnation): (usize, u64),
    weights: &[Arc<Weights>],
    streams: Streams,
    base_seed: u64,
) -> Result<MultiAgentEnvRunner> {
    let (envs, _pool) = multi_agent_env_factory(config, creator);
    let map = config.config().policy_map(&spec.agent_ids())?;
    if map.policy_ids.len() != policies.len() {
        return Err(ImpalaError::MultiAgentOption {
            key: "policies",
            reason: format!(
                "the driver trains {} policies, but this runner's config maps the env's agents \
                 to {} ({}); run the same config and env on the driver and the runner",
                policies.len(),
                map.policy_ids.len(),
                map.policy_ids.join(", ")
            ),
        });
    }
    let mut acting = Vec::with_capacity(policies.len());
    for (spec, id) in policies.iter().zip(&map.policy_ids) {
        acting.push((spec.clone(), policy_model(config, id)?.1));
    }
    let precision = config.config().precision;
    let acting = acting_policies(acting, base_seed, precision, streams.sample_seed)(
        runner_id,
        incarnation,
        weights,
    )?;
    let settings =
        runner_settings(config, &map, streams.env_seed).for_runner(runner_id, incarnation);
    let num_envs = config.config().num_envs_per_env_runner;
    Ok(MultiAgentEnvRunner::new(runner_id, num_envs, &envs, acting, &settings)?)
}

impl MultiAgentImpala {
    /// Builds the run for `config`, whose `env` is a multi-agent env (a native one, or a Python
    /// one: PettingZoo's parallel or AEC API, or RLlib's `MultiAgentEnv`, by id or entry
    /// point): its policies (mapped, checked against the env's agents), their learners (threads
    /// for the policies to train) and the env runner threads, which start sampling at once.
    pub fn new(config: ValidatedConfig) -> Result<Self> {
        Self::build(config, None, None, None)
    }

    /// As [`MultiAgentImpala::new`], on the envs a pickled Python env creator builds (RLlib's
    /// `register_env(name, creator)`, as the `impala_rs` Python package writes it).
    pub fn with_python_env_creator(config: ValidatedConfig, creator: PathBuf) -> Result<Self> {
        Self::build(config, Some(creator), None, None)
    }

    /// As [`MultiAgentImpala::new`] (on the envs of `creator` when given), sampling with the
    /// env runners `transport` brings instead of runner threads: `impala env-runner` processes
    /// on other hosts ([`runner_server`](crate::remote::runner_server)), Ray actors, or any
    /// other transport. Each runner builds the env and every policy from the run's config and
    /// sends a batch per policy; it gets each policy's weights when that policy changed. Waits
    /// up to `env_runner_connect_timeout_s` for `num_env_runners` of them.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use impala::config::ImpalaConfig;
    /// use impala::remote::{runner_server, serve_env_runner, ClientSettings, RunnerHost, Token};
    /// use impala::MultiAgentImpala;
    ///
    /// let mut config = ImpalaConfig::default();
    /// config.env = "HalfObserved".into();
    /// config.policies = vec!["left".into(), "right".into()];
    /// config.num_env_runners = 1; // the runners to wait for
    /// config.min_time_s_per_iteration = 0.2;
    /// let config = config.validate()?;
    /// let token = Token::new("0123456789abcdef")?;
    /// let server = Arc::new(runner_server(&config, "127.0.0.1:0", token.clone(), None)?);
    /// // A runner on a thread here; `impala env-runner --connect` on another host alike.
    /// let client = ClientSettings::new(server.local_addr().to_string(), token);
    /// let runner = std::thread::spawn(move || serve_env_runner(&client, RunnerHost::default()));
    /// let mut algo = MultiAgentImpala::with_remote_env_runners(config, None, server.clone())?;
    /// let result = algo.train()?;
    /// assert!(result.num_env_steps_sampled > 0 && result.info.learner.contains_key("right"));
    /// // Tell the runners the run is over while their sessions are open, then stop.
    /// server.finish("the example is over");
    /// algo.stop()?;
    /// assert_eq!(runner.join().map_err(|_| "runner panicked")??, "the example is over");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_remote_env_runners(
        config: ValidatedConfig,
        creator: Option<PathBuf>,
        transport: Arc<dyn RunnerTransport>,
    ) -> Result<Self> {
        Self::build(config, creator, Some(transport), None)
    }

    /// The run for `config` (on the envs of `creator`, sampling with the runners of `remote`,
    /// when given); restored from `checkpoint` when given, its env runners then started once,
    /// with the restored weights, instead of started and replaced by [`Self::restore`].
    pub(crate) fn build(
        config: ValidatedConfig,
        creator: Option<PathBuf>,
        remote: Option<Arc<dyn RunnerTransport>>,
        checkpoint: Option<&Path>,
    ) -> Result<Self> {
        check_options(&config, remote.is_some())?;
        let (envs, spec, python_pool) = multi_agent_envs(&config, creator)?;
        let map = config.config().policy_map(&spec.agent_ids())?;
        let specs = policy_specs(&spec, &map)?;
        tch::set_num_threads(1);
        impala_learner::check_precision(config.config().precision, tch::Device::Cpu)?;
        let base_seed = config.config().seed.unwrap_or_else(random_seed);
        let smoothing = config.config().metrics_num_episodes_for_smoothing;
        let streams = Streams::new(&config, base_seed, 0);
        let mut policies = Vec::with_capacity(specs.len());
        for (p, spec) in specs.into_iter().enumerate() {
            let (policy_config, model) = policy_model(&config, &map.policy_ids[p])?;
            let seed = impala_sampler::stream_seed(base_seed, p as u64);
            let learner = new_learner(&policy_config, model.as_ref(), &spec, seed)?;
            // None with `_env_runners_only`: the samples are discarded.
            let batching =
                if map.trains[p] { batching_stage(&policy_config, &streams)? } else { None };
            policies.push(PolicyState {
                id: map.policy_ids[p].clone(),
                spec,
                config: policy_config,
                model,
                learner: PolicyLearner::Held(learner),
                trains: map.trains[p],
                batching,
                to_place: VecDeque::new(),
                stats: StatsMean::default(),
                last_stats: BTreeMap::new(),
                agent_steps_trained: 0,
                num_grad_updates: 0,
                broadcast_version: 0,
                episodes: EpisodeWindow::new(smoothing),
            });
        }
        let shares: Vec<PolicyShare<'_>> = policies
            .iter()
            .enumerate()
            .map(|(p, policy)| PolicyShare {
                config: &policy.config,
                spec: &policy.spec,
                agents_per_env: map.policy_of_agent.iter().filter(|&&a| a == p).count() as u64,
                params: match &policy.learner {
                    PolicyLearner::Held(learner) => learner.num_parameters(),
                    _ => 0,
                },
                trained: policy.trains,
            })
            .collect();
        crate::budget::check_memory(&config, &shares)?;
        drop(shares);
        let mut algo = MultiAgentImpala {
            episodes: EpisodeWindow::new(smoothing),
            config,
            spec,
            map,
            envs,
            policies,
            runners: None,
            remote,
            python_pool,
            counters: Counters::default(),
            iteration: 0,
            time_total_s: 0.0,
            base_seed,
            num_restores: 0,
            interrupt: None,
            last_evaluation: None,
            steps_since_broadcast: 0,
            stopped: false,
        };
        match checkpoint {
            // Restoring loads the held learners, then starts their thread and the runners.
            Some(path) => algo.restore(path)?,
            None => {
                start_learners(&mut algo.policies)?;
                algo.start_runners()?
            }
        }
        if let Some(transport) = &algo.remote {
            crate::remote::wait_for_runners(transport.as_ref(), &algo.config)?;
        }
        Ok(algo)
    }

    /// The config the algorithm was built from.
    pub fn config(&self) -> &ValidatedConfig {
        &self.config
    }

    /// The env's agents and spaces.
    pub fn env_spec(&self) -> &MultiAgentSpec {
        &self.spec
    }

    /// The policy ids, which agent maps to which, and which policies train.
    pub fn policy_map(&self) -> &PolicyMap {
        &self.map
    }

    /// Iterations completed.
    pub fn iteration(&self) -> u64 {
        self.iteration
    }

    /// The lifetime counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// A flag that, once set, ends the current iteration early.
    pub fn set_interrupt_flag(&mut self, flag: Arc<AtomicBool>) {
        self.interrupt = Some(flag);
    }

    /// The current weights of policy `policy_id` (RLlib's `algo.get_weights([policy_id])`).
    pub fn get_weights(&self, policy_id: &str) -> Result<Arc<Weights>> {
        self.policy(policy_id)?.weights()
    }

    /// Policy `policy_id` with its current weights, acting on the CPU (RLlib's
    /// `algo.get_policy(policy_id)`): a copy that later training does not change.
    pub fn get_policy(&self, policy_id: &str) -> Result<TrainedPolicy> {
        let policy = self.policy(policy_id)?;
        let source = PolicySource {
            model: Arc::clone(&policy.model),
            spec: policy.spec.clone(),
            base_seed: self.base_seed,
            precision: self.config.config().precision,
        };
        TrainedPolicy::new(&source, None, false, policy.weights()?, tch::Device::Cpu)
    }

    fn policy(&self, policy_id: &str) -> Result<&PolicyState> {
        self.policies.iter().find(|p| p.id == policy_id).ok_or_else(|| {
            ImpalaError::MultiAgentOption {
                key: "policies",
                reason: format!(
                    "there is no policy `{policy_id}`; the policies are {}",
                    self.map.policy_ids.join(", ")
                ),
            }
        })
    }

    fn alive(&self) -> Result<()> {
        if self.stopped {
            return Err(ImpalaError::Stopped);
        }
        Ok(())
    }

    /// Policies acting with `weights` (one per policy) for a runner, or the evaluation.
    fn policy_factory(&self, explore_seed: u64) -> MultiAgentPolicyFactory {
        let policies: Vec<(EnvSpec, Arc<dyn ModelFactory>)> =
            self.policies.iter().map(|p| (p.spec.clone(), Arc::clone(&p.model))).collect();
        acting_policies(policies, self.base_seed, self.config.config().precision, explore_seed)
    }

    fn start_runners(&mut self) -> Result<()> {
        let c = self.config.config();
        let streams = Streams::new(&self.config, self.base_seed, self.num_restores);
        let weights = self.policies.iter().map(PolicyState::weights).collect::<Result<Vec<_>>>()?;
        for (policy, w) in self.policies.iter_mut().zip(&weights) {
            policy.broadcast_version = w.version;
        }
        let settings = MultiAgentGroupSettings {
            num_env_runners: c.num_env_runners.max(1),
            num_envs_per_env_runner: c.num_envs_per_env_runner,
            max_requests_in_flight: c.max_requests_in_flight_per_sampler_worker,
            runner: runner_settings(&self.config, &self.map, streams.env_seed),
            restart_failed_env_runners: c.restart_failed_env_runners,
            max_num_env_runner_restarts: c.max_num_env_runner_restarts,
        };
        self.runners = Some(match &self.remote {
            Some(transport) => {
                let env = RunEnv::Multi {
                    spec: self.spec.clone(),
                    policies: self.policies.iter().map(|p| p.spec.clone()).collect(),
                };
                let session = crate::remote::run_session(
                    transport.as_ref(),
                    &self.config,
                    env,
                    streams,
                    self.base_seed,
                    None,
                )?;
                let launcher = Box::new(transport.pool().launcher(session));
                MultiAgentRunnerGroup::with_launcher(settings, launcher, weights)?
            }
            None => {
                let policies = self.policy_factory(streams.sample_seed);
                MultiAgentRunnerGroup::new(settings, Arc::clone(&self.envs), policies, weights)?
            }
        });
        Ok(())
    }

    fn interrupted(&self) -> bool {
        self.interrupt.as_ref().is_some_and(|f| f.load(Ordering::SeqCst))
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

    /// Runs training steps until `min_time_s_per_iteration` has passed and at least
    /// `min_sample_timesteps_per_iteration` / `min_train_timesteps_per_iteration` steps (as
    /// `count_steps_by` counts) were sampled / trained; evaluates when `evaluation_interval`
    /// says so; returns the iteration's result.
    pub fn train(&mut self) -> Result<IterationResult> {
        self.alive()?;
        let started = Instant::now();
        let before = self.counters;
        let (sampled_before, trained_before) = (self.sampled(), self.trained());
        let c = self.config.config();
        let min_time = self.config.durations().min_time_per_iteration;
        let (min_sampled, min_trained) = (
            c.min_sample_timesteps_per_iteration as u64,
            c.min_train_timesteps_per_iteration as u64,
        );
        let due =
            c.evaluation_interval.is_some_and(|n| n > 0 && (self.iteration + 1) % n as u64 == 0);
        // `evaluation_parallel_to_training`: the round plays beside this iteration's training,
        // with the weights of its start, and the iteration also waits for it.
        let mut parallel = if due && c.evaluation_parallel_to_training {
            Some(self.start_evaluation()?)
        } else {
            None
        };
        let mut num_episodes = 0;
        loop {
            num_episodes += self.training_step()?;
            let done = started.elapsed() >= min_time
                && self.sampled() - sampled_before >= min_sampled
                && self.trained() - trained_before >= min_trained
                && parallel.as_ref().is_none_or(EvaluationRound::is_finished);
            if done || self.interrupted() {
                break;
            }
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
        match parallel.take() {
            // Interrupted: the round under way finishes, so no episode is lost.
            Some(round) => self.last_evaluation = Some(round.finish()?),
            None if due => self.last_evaluation = Some(self.evaluate()?),
            None => {}
        }
        Ok(self.compile_result(&before, time_this_iter_s, num_episodes))
    }

    /// One pass of RLlib's `training_step`: learner results in, fragments in (unless train
    /// batches wait for room), batches out, changed weights to the runners. Returns the
    /// episodes that ended.
    fn training_step(&mut self) -> Result<u64> {
        self.counters.num_training_step_calls += 1;
        let mut busy = self.process_trained_results()?;
        let backlog = self.policies.iter().any(|p| !p.to_place.is_empty());
        let mut episodes = 0;
        if !backlog {
            let wait = if busy { Duration::ZERO } else { FRAGMENT_WAIT };
            let runners = self.runners.as_mut().ok_or(ImpalaError::Stopped)?;
            let fragments = runners.wait(wait)?;
            busy |= !fragments.is_empty();
            self.steps_since_broadcast += usize::from(!fragments.is_empty());
            for fragment in fragments {
                episodes += fragment.episodes.len() as u64;
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
            let PolicyLearner::Training(handle) = &policy.learner else { continue };
            while let Some(batch) = policy.to_place.pop_front() {
                if let Err(batch) = handle.try_enqueue(batch) {
                    policy.to_place.push_front(batch);
                    self.counters.num_times_learner_queue_full += 1;
                    break;
                }
            }
        }
        self.process_trained_results()?;
        self.broadcast_changed_weights();
        if !busy {
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(episodes)
    }

    /// Counts a fragment (the one place sampled steps and episodes are counted) and hands each
    /// trained policy's rows to its batching.
    fn add_fragment(&mut self, fragment: MultiAgentFragment) -> Result<()> {
        let c = &mut self.counters;
        c.num_env_steps_sampled += fragment.env_steps as u64;
        c.num_agent_steps_sampled += fragment.agent_steps as u64;
        c.episodes_total += fragment.episodes.len() as u64;
        self.episodes.extend(&fragment.episodes);
        for (episode, returns) in fragment.episodes.iter().zip(&fragment.policy_returns) {
            for (policy, &episode_return) in self.policies.iter_mut().zip(returns) {
                policy.episodes.extend(&[EpisodeStats { episode_return, ..*episode }]);
            }
        }
        for (policy, batch) in self.policies.iter_mut().zip(fragment.batches) {
            if let (Some(batching), true) = (policy.batching.as_mut(), batch.num_rows > 0) {
                policy.to_place.extend(batching.add(batch)?);
            }
        }
        Ok(())
    }

    /// Drains every trained policy's learner results into the counters and its stats; says
    /// whether any policy stepped. Env steps trained count the env steps the trained agent
    /// steps stand for (agent steps over the agents acting per env step so far).
    fn process_trained_results(&mut self) -> Result<bool> {
        let agents_per_env_step = if self.counters.num_env_steps_sampled > 0 {
            self.counters.num_agent_steps_sampled as f64
                / self.counters.num_env_steps_sampled as f64
        } else {
            1.0
        };
        let mut stepped = false;
        for policy in &mut self.policies {
            let PolicyLearner::Training(handle) = &policy.learner else { continue };
            let outputs = handle.drain().map_err(|cause| ImpalaError::LearnerDied { cause })?;
            for out in &outputs {
                policy.agent_steps_trained += out.agent_steps as u64;
                policy.num_grad_updates = out.stats.num_grad_updates;
                policy.stats.add(&out.stats);
                self.counters.num_agent_steps_trained += out.agent_steps as u64;
                self.counters.num_env_steps_trained +=
                    (out.agent_steps as f64 / agents_per_env_step).round() as u64;
            }
            if !outputs.is_empty() {
                stepped = true;
                handle.request_weights();
            }
        }
        Ok(stepped)
    }

    /// Every `broadcast_interval` training steps that took fragments, sends each policy's
    /// newest weights to the runners, only for policies that changed.
    fn broadcast_changed_weights(&mut self) {
        if self.steps_since_broadcast < self.config.config().broadcast_interval.max(1) {
            return;
        }
        let Some(runners) = self.runners.as_mut() else { return };
        let mut sent = false;
        for (p, policy) in self.policies.iter_mut().enumerate() {
            let PolicyLearner::Training(handle) = &policy.learner else { continue };
            if let Some(weights) = handle.take_new_weights() {
                if weights.version > policy.broadcast_version {
                    policy.broadcast_version = weights.version;
                    runners.set_weights(p, weights);
                    self.counters.num_weight_broadcasts += 1;
                    sent = true;
                }
            }
        }
        if sent {
            self.steps_since_broadcast = 0;
        }
    }

    fn compile_result(
        &self,
        before: &Counters,
        time_this_iter_s: f64,
        num_episodes: u64,
    ) -> IterationResult {
        let mut learner = BTreeMap::new();
        let mut policy_reward_mean = BTreeMap::new();
        let mut env_runners = BTreeMap::new();
        let mut queue = LearnerQueueInfo::default();
        let mut timing_breakdown = BTreeMap::new();
        for policy in &self.policies {
            let mean = policy.episodes.summary().episode_return_mean;
            policy_reward_mean.insert(policy.id.clone(), mean);
            env_runners.insert(format!("module_episode_returns_mean/{}", policy.id), mean);
            let PolicyLearner::Training(handle) = &policy.learner else { continue };
            learner.insert(
                policy.id.clone(),
                PolicyLearnerInfo {
                    learner_stats: policy.last_stats.clone(),
                    num_agent_steps_trained: policy.agent_steps_trained,
                    num_grad_updates_lifetime: policy.num_grad_updates,
                },
            );
            // The queue and timings of the policies' learners, summed (sizes, stalls) and
            // averaged (times) over them.
            let q = handle.queue_stats();
            queue.size_count += q.size_count as u64;
            queue.size_mean += q.size_mean;
            queue.num_learner_queue_timeouts += q.num_learner_queue_timeouts;
            queue.num_train_batches_waiting_on_driver += policy.to_place.len() as u64;
            let trained = self.map.trains.iter().filter(|&&t| t).count().max(1) as f64;
            for (name, ms) in q.timing_breakdown() {
                *timing_breakdown.entry(name).or_insert(0.0) += ms / trained;
            }
        }
        if let Some(runners) = &self.runners {
            env_runners
                .insert("num_env_runners".into(), self.config.config().num_env_runners as f64);
            env_runners.insert("num_healthy_env_runners".into(), runners.num_healthy() as f64);
            env_runners.insert("num_env_runner_failures".into(), runners.num_failures() as f64);
            env_runners.insert("num_env_runner_restarts".into(), runners.num_restarts() as f64);
        }
        let c = &self.counters;
        let mut result = IterationResult {
            policy_reward_mean,
            info: ResultInfo {
                learner,
                num_weight_broadcasts: c.num_weight_broadcasts,
                num_times_learner_queue_full: c.num_times_learner_queue_full,
                num_training_step_calls: c.num_training_step_calls,
                num_weight_snapshots: 0,
                learner_queue: queue,
                timing_breakdown,
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
        result
    }

    /// Plays `evaluation_duration` episodes (or env steps) on fresh envs with every policy's
    /// current weights, greedily unless `evaluation_explore`: on `evaluation_num_env_runners`
    /// threads side by side, or on this thread when it is 0.
    pub fn evaluate(&mut self) -> Result<EvaluationResult> {
        self.start_evaluation()?.finish()
    }

    /// Starts an evaluation round with every policy's current weights (see
    /// [`MultiAgentImpala::evaluate`]); with 0 evaluation env runners it runs on one thread.
    fn start_evaluation(&self) -> Result<EvaluationRound> {
        self.alive()?;
        let c = self.config.config();
        let weights = self.policies.iter().map(PolicyState::weights).collect::<Result<Vec<_>>>()?;
        let streams = Streams::new(&self.config, self.base_seed, self.num_restores);
        let seed = impala_sampler::stream_seed(streams.sample_seed, 1 + self.iteration);
        let job = Arc::new(EvaluationJob {
            envs: Arc::clone(&self.envs),
            policies: self.policy_factory(seed),
            weights,
            policy_of_agent: self.map.policy_of_agent.clone(),
            policy_ids: self.map.policy_ids.clone(),
            rollout_fragment_length: c.rollout_fragment_length,
            env_seed: streams.env_seed.map(|s| impala_sampler::stream_seed(s, 1 + self.iteration)),
            explore: c.evaluation_explore,
            incarnation: self.iteration,
            unit: c.evaluation_duration_unit,
            duration: c.evaluation_duration,
            done_episodes: AtomicUsize::new(0),
            done_steps: AtomicUsize::new(0),
        });
        let threads = (1..=c.evaluation_num_env_runners.max(1))
            .map(|runner| {
                let job = Arc::clone(&job);
                let runner = if c.evaluation_num_env_runners == 0 { 0 } else { runner };
                std::thread::Builder::new()
                    .name(format!("ma-eval-runner-{runner}"))
                    .spawn(move || job.run(runner))
                    .map_err(|e| {
                        ImpalaError::Sampler(SamplerError::Spawn {
                            thread: format!("ma-eval-runner-{runner}"),
                            reason: e.to_string(),
                        })
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(EvaluationRound { job, threads })
    }

    /// Saves a checkpoint `dir/checkpoint_<iteration>` atomically: every policy's weights and
    /// optimizer state (under `learner/<policy id>/`), the counters, the episode windows (the
    /// run's and each policy's) and the seeds.
    pub fn save(&mut self, dir: &Path) -> Result<PathBuf> {
        self.alive()?;
        std::fs::create_dir_all(dir)
            .map_err(|source| ImpalaError::RunDirNotWritable { path: dir.to_path_buf(), source })?;
        let state = AlgorithmState {
            policy_episodes: self
                .policies
                .iter()
                .map(|p| (p.id.clone(), p.episodes.clone()))
                .collect(),
            ..AlgorithmState::new(
                self.iteration,
                self.time_total_s,
                self.counters,
                self.episodes.clone(),
                self.base_seed,
                self.num_restores,
            )
        };
        save_checkpoint(dir, &state, self.config.config(), None, |learner_dir| {
            for policy in &self.policies {
                policy.save(&learner_dir.join(&policy.id))?;
            }
            Ok(())
        })
    }

    /// Restores every policy of a checkpoint written by [`MultiAgentImpala::save`] (a
    /// checkpoint folder or a run folder) with the counters and episode windows, so training
    /// continues where it stopped; the env runners start anew with the restored weights.
    pub fn restore(&mut self, path: &Path) -> Result<()> {
        let dir = self.checked_checkpoint(path)?;
        let (state, saved) = read_checkpoint(&dir)?;
        let ids = self.map.policy_ids.clone();
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
        self.load_policies(&dir, &ids)?;
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
        self.restart_runners()
    }

    /// Restores only policy `policy_id`'s weights and optimizer state from a checkpoint of a
    /// run with the same env and model (its other policies, the counters and the run's state
    /// stay as they are): a policy trained in one run, brought into another.
    pub fn restore_policy(&mut self, path: &Path, policy_id: &str) -> Result<()> {
        self.policy(policy_id)?;
        let dir = self.checked_checkpoint(path)?;
        let (_, saved) = read_checkpoint(&dir)?;
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

    /// The checkpoint folder of `path`, refused unless it is of this env and model.
    fn checked_checkpoint(&self, path: &Path) -> Result<PathBuf> {
        self.alive()?;
        let dir = find_checkpoint(path)?;
        let (_, saved) = read_checkpoint(&dir)?;
        let now = self.config.config();
        let incompatible =
            |what: &str, saved: String, now: String| ImpalaError::IncompatibleCheckpoint {
                path: dir.clone(),
                reason: format!("it was trained with {what} {saved}, this run uses {now}"),
                fix: format!("use the checkpoint's {what} as it is, or start a new run"),
            };
        if saved.env != now.env || saved.env_config != now.env_config {
            return Err(incompatible(
                "env",
                format!("{} {:?}", saved.env, saved.env_config),
                format!("{} {:?}", now.env, now.env_config),
            ));
        }
        for policy in &self.policies {
            let model = policy.config.config().model.clone();
            let saved_model = saved.for_policy(&policy.id).map(|c| c.model).ok();
            if let Some(saved_model) = saved_model.filter(|m| *m != model) {
                let (was, is) = saved_model.differences(&model);
                return Err(incompatible(&format!("policy `{}`'s model", policy.id), was, is));
            }
        }
        Ok(dir)
    }

    /// Loads the learners of `ids` from checkpoint `dir`: the trained ones come off the
    /// learner thread (between SGD steps) and go back on a new one with the others.
    fn load_policies(&mut self, dir: &Path, ids: &[String]) -> Result<()> {
        self.hold_learners()?;
        let mut loaded = Ok(());
        for policy in self.policies.iter_mut().filter(|p| ids.contains(&p.id)) {
            policy.to_place.clear();
            let PolicyLearner::Held(learner) = &mut policy.learner else { continue };
            let from = dir.join(policy_learner_dir(&policy.id));
            if let Err(e) = learner.load(&from) {
                loaded = Err(ImpalaError::corrupt_checkpoint(
                    dir,
                    format!("policy `{}`'s learner state does not load ({e})", policy.id),
                ));
                break;
            }
        }
        start_learners(&mut self.policies)?;
        loaded
    }

    /// Takes the trained policies' learners off the learner thread (what they had queued is
    /// dropped); a learner lost to a panic is rebuilt, for a checkpoint to replace its state.
    fn hold_learners(&mut self) -> Result<()> {
        for policy in &mut self.policies {
            match std::mem::replace(&mut policy.learner, PolicyLearner::Stopped) {
                PolicyLearner::Training(handle) => {
                    let learner = match handle.finish().0 {
                        Some(learner) => learner,
                        None => new_learner(
                            &policy.config,
                            policy.model.as_ref(),
                            &policy.spec,
                            self.base_seed,
                        )?,
                    };
                    policy.learner = PolicyLearner::Held(learner);
                }
                PolicyLearner::Held(learner) => policy.learner = PolicyLearner::Held(learner),
                PolicyLearner::Stopped => return Err(ImpalaError::Stopped),
            }
        }
        Ok(())
    }

    /// Replaces the env runners (what they had in flight is dropped) and the batching, so
    /// nothing sampled with the weights before a restore is trained on.
    fn restart_runners(&mut self) -> Result<()> {
        if let Some(runners) = self.runners.take() {
            if let Err(e) = runners.shutdown() {
                tracing::warn!(error = %e, "an env runner failed before the restore");
            }
        }
        let streams = Streams::new(&self.config, self.base_seed, self.num_restores);
        for policy in &mut self.policies {
            policy.to_place.clear();
            if let Some(batching) = policy.batching.take() {
                if let Err(e) = batching.shutdown() {
                    tracing::warn!(error = %e, "an aggregation worker failed before the restore");
                }
                policy.batching = batching_stage(&policy.config, &streams)?;
            }
        }
        self.start_runners()
    }

    /// Stops the runner and learner threads and joins them, reporting the first failure.
    pub fn stop(&mut self) -> Result<()> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        if let Some(pool) = &self.python_pool {
            // Runners stuck in an env step end on their workers' closed pipes.
            pool.kill_workers_in_use();
        }
        let runners = self.runners.take().map(MultiAgentRunnerGroup::shutdown);
        let mut first_error = None;
        for policy in &mut self.policies {
            if let Some(batching) = policy.batching.take() {
                if let Err(e) = batching.shutdown() {
                    first_error.get_or_insert(ImpalaError::from(e));
                }
            }
            if let PolicyLearner::Training(handle) =
                std::mem::replace(&mut policy.learner, PolicyLearner::Stopped)
            {
                if let Err(cause) = handle.stop() {
                    first_error.get_or_insert(ImpalaError::LearnerDied { cause });
                }
            }
        }
        runners.transpose()?;
        first_error.map_or(Ok(()), Err)
    }
}

/// What an evaluation round's runners share: envs, policies with the weights of the round's
/// start, and how far the round has come (each runner stops once the whole duration is in).
struct EvaluationJob {
    envs: MultiAgentEnvFactory,
    policies: MultiAgentPolicyFactory,
    weights: Vec<Arc<Weights>>,
    policy_of_agent: Vec<usize>,
    policy_ids: Vec<String>,
    rollout_fragment_length: usize,
    env_seed: Option<u64>,
    explore: bool,
    incarnation: u64,
    unit: DurationUnit,
    duration: usize,
    done_episodes: AtomicUsize,
    done_steps: AtomicUsize,
}

/// One evaluation runner's episodes, their per-policy returns and its env steps.
type EvaluationPart = (Vec<EpisodeStats>, Vec<Vec<f64>>, usize);

impl EvaluationJob {
    fn finished(&self) -> bool {
        match self.unit {
            DurationUnit::Episodes => self.done_episodes.load(Ordering::Acquire) >= self.duration,
            DurationUnit::Timesteps => self.done_steps.load(Ordering::Acquire) >= self.duration,
        }
    }

    /// Evaluation runner `runner` (its envs seeded from `seed + 1000 * runner`, as sampling
    /// runners' are) plays until the round has its duration.
    fn run(&self, runner: usize) -> Result<EvaluationPart> {
        let settings = MultiAgentSettings {
            policy_of_agent: self.policy_of_agent.clone(),
            rollout_fragment_length: self.rollout_fragment_length,
            seed: self.env_seed.map(|s| s.wrapping_add(1000 * runner as u64)),
            explore: self.explore,
        };
        let policies = (self.policies)(runner, self.incarnation, &self.weights)?;
        let mut env_runner = MultiAgentEnvRunner::new(runner, 1, &self.envs, policies, &settings)?;
        let (mut episodes, mut returns, mut env_steps) = (Vec::new(), Vec::new(), 0);
        while !self.finished() {
            let fragment = env_runner.sample()?;
            env_steps += fragment.env_steps;
            self.done_steps.fetch_add(fragment.env_steps, Ordering::AcqRel);
            self.done_episodes.fetch_add(fragment.episodes.len(), Ordering::AcqRel);
            episodes.extend(fragment.episodes);
            returns.extend(fragment.policy_returns);
        }
        Ok((episodes, returns, env_steps))
    }
}

/// An evaluation round under way.
struct EvaluationRound {
    job: Arc<EvaluationJob>,
    threads: Vec<std::thread::JoinHandle<Result<EvaluationPart>>>,
}

impl EvaluationRound {
    /// Whether every runner is done.
    fn is_finished(&self) -> bool {
        self.threads.iter().all(std::thread::JoinHandle::is_finished)
    }

    /// Waits for the runners; the round's result (the first `evaluation_duration` episodes).
    fn finish(self) -> Result<EvaluationResult> {
        let parts: Vec<Result<EvaluationPart>> = self
            .threads
            .into_iter()
            .map(|t| {
                t.join().unwrap_or_else(|payload| {
                    Err(ImpalaError::Sampler(SamplerError::ThreadPanicked {
                        thread: "evaluation env runner".into(),
                        reason: impala_sampler::panic_message(payload.as_ref()),
                    }))
                })
            })
            .collect();
        let job = &self.job;
        let (mut episodes, mut returns, mut env_steps) = (Vec::new(), Vec::new(), 0);
        for part in parts {
            let (part_episodes, part_returns, part_steps) = part?;
            episodes.extend(part_episodes);
            returns.extend(part_returns);
            env_steps += part_steps;
        }
        if job.unit == DurationUnit::Episodes {
            episodes.truncate(job.duration);
            returns.truncate(job.duration);
        }
        let policy_reward_mean = job
            .policy_ids
            .iter()
            .enumerate()
            .map(|(p, id)| {
                let sum: f64 = returns.iter().map(|r| r[p]).sum();
                (id.clone(), sum / returns.len().max(1) as f64)
            })
            .collect();
        Ok(EvaluationResult {
            policy_reward_mean,
            ..EvaluationResult::of_episodes(&episodes, env_steps as u64)
        })
    }
}

crate::trainable::trainable_by_inherent_methods!(MultiAgentImpala);

/// Plays `episodes` episodes of a multi-agent checkpoint in `dir` (whose config is `config`),
/// every policy with its saved weights, greedily unless `explore`.
pub(crate) fn evaluate_checkpoint(
    dir: &Path,
    mut config: impala_config::ImpalaConfig,
    episodes: usize,
    explore: bool,
) -> Result<EvaluationResult> {
    config.evaluation_duration = episodes.max(1);
    config.evaluation_duration_unit = DurationUnit::Episodes;
    config.evaluation_explore = explore;
    // Only the evaluation samples: one runner with one env meanwhile.
    (config.num_env_runners, config.num_envs_per_env_runner) = (1, 1);
    let mut algo = MultiAgentImpala::new(config.validate()?)?;
    algo.restore(dir)?;
    let result = algo.evaluate();
    algo.stop()?;
    result
}
