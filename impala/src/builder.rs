//! [`ImpalaBuilder`]: a validated config in; the run's envs (a registered env by default, any
//! [`Env`] of the caller's, or a Python env or env creator, single- or multi-agent), a policy
//! per id with its model, learner and batching stage, and the env runners out.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

use impala_config::ValidatedConfig;
use impala_core::{CoreError, Env, EnvSpec};
use impala_learner::ModelFactory;
use impala_runner_pool::RunnerTransport;
use impala_sampler::{EnvContext, EnvFactory, WeightBroadcaster};

use crate::budget::PolicyShare;
use crate::evaluation::Evaluator;
use crate::policies::{
    new_learner, random_seed, start_learners, stream_seed, PolicyLearner, PolicySlot, PolicySource,
    StatsMean, Streams,
};
use crate::run_envs::{check_single_agent, default_env, env_spec, uses_python, RunEnvs};
use crate::settings;
use crate::torchscript::ScriptedModel;
use crate::{EpisodeWindow, Impala, ImpalaError, Result, DEFAULT_POLICY_ID};

/// Builds an [`Impala`] (see [`Impala::builder`]).
pub struct ImpalaBuilder {
    config: ValidatedConfig,
    env_factory: Option<EnvFactory>,
    env_creator: Option<PathBuf>,
    remote: Option<Arc<dyn RunnerTransport>>,
    model: Option<Arc<dyn ModelFactory>>,
    checkpoint: Option<PathBuf>,
    record_episodes: bool,
}

impl std::fmt::Debug for ImpalaBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImpalaBuilder")
            .field("env", &self.config.config().env)
            .field("custom_env_factory", &self.env_factory.is_some())
            .field("env_creator", &self.env_creator)
            .field("remote", &self.remote)
            .field("model", &self.model)
            .field("checkpoint", &self.checkpoint)
            .field("record_episodes", &self.record_episodes)
            .finish()
    }
}

impl Impala {
    /// Starts building the algorithm from a config that passed validation
    /// ([`impala_config::ImpalaConfig::validate`]). Without [`ImpalaBuilder::env_factory`]
    /// the env is `config.env` from the [`impala_envs`] registry.
    pub fn builder(config: ValidatedConfig) -> ImpalaBuilder {
        ImpalaBuilder {
            config,
            env_factory: None,
            env_creator: None,
            remote: None,
            model: None,
            checkpoint: None,
            record_episodes: false,
        }
    }
}

impl ImpalaBuilder {
    /// Trains on the single-agent envs `factory` builds, one per env slot of every runner
    /// (RLlib's env creator, called with an [`EnvContext`]). `config.env` then only names the
    /// run. The config's `normalize_observations` and `model.framestack` wrap these envs too.
    #[must_use]
    pub fn env_factory(mut self, factory: EnvFactory) -> Self {
        self.env_factory = Some(factory);
        self
    }

    /// As [`env_factory`](Self::env_factory), from a closure.
    #[must_use]
    pub fn env<F>(self, make: F) -> Self
    where
        F: Fn(&EnvContext) -> std::result::Result<Box<dyn Env>, CoreError> + Send + Sync + 'static,
    {
        self.env_factory(Arc::new(make))
    }

    /// Trains on the envs a pickled Python env creator builds (RLlib's `register_env(name,
    /// creator)`, as the `impala_rs` Python package writes it): stepped in env worker processes
    /// like Gymnasium ids, with `env_config` as its argument; a multi-agent one (PettingZoo,
    /// RLlib's `MultiAgentEnv`) trains the config's policies. `config.env` then only names the
    /// run. Ignored when an [`env_factory`](Self::env_factory) is given.
    #[must_use]
    pub fn python_env_creator(mut self, pickled: impl Into<PathBuf>) -> Self {
        self.env_creator = Some(pickled.into());
        self
    }

    /// Samples with env runners in other processes or on other hosts, which `transport` brings
    /// into the slots of its [`RunnerPool`](impala_runner_pool::RunnerPool) (the gRPC
    /// [`RunnerServer`](crate::remote::RunnerServer) of `impala train --listen`, or any other),
    /// instead of runner threads: `num_env_runners` of them, waited for up to
    /// `env_runner_connect_timeout_s` by [`build`](Self::build). Each runner builds its env
    /// runner with [`env_runner_builder`](crate::remote::env_runner_builder). Restored and
    /// restarted runner slots are taken by whichever runner claims one next. A multi-agent
    /// run's runners send a batch per policy and get each policy's weights when it changed.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use impala::config::ImpalaConfig;
    /// use impala::remote::{runner_server, serve_env_runner, ClientSettings, RunnerHost, Token};
    /// use impala::Impala;
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
    /// let mut algo = Impala::builder(config).remote_env_runners(server.clone()).build()?;
    /// let result = algo.train()?;
    /// assert!(result.num_env_steps_sampled > 0 && result.info.learner.contains_key("right"));
    /// // Tell the runners the run is over while their sessions are open, then stop.
    /// server.finish("the example is over");
    /// algo.stop()?;
    /// assert_eq!(runner.join().map_err(|_| "runner panicked")??, "the example is over");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn remote_env_runners(mut self, transport: Arc<dyn RunnerTransport>) -> Self {
        self.remote = Some(transport);
        self
    }

    /// Trains the models `factory` builds (any `tch` network implementing
    /// [`Model`](impala_learner::Model)) instead of the one `config.model` names, for every
    /// policy: the learners' towers, every env runner's and evaluation runner's policy. Remote env runners
    /// build their own model from the config, so a run with
    /// [`remote_env_runners`](Self::remote_env_runners) refuses a factory.
    #[must_use]
    pub fn model(mut self, factory: Arc<dyn ModelFactory>) -> Self {
        self.model = Some(factory);
        self
    }

    /// Builds the run restored from a checkpoint (a checkpoint folder or a run folder), as
    /// [`Impala::restore`] right after [`build`](Self::build) would, except that the env
    /// runners start once, with the restored weights: none is started only to be replaced
    /// (with Python envs or Atari, worker processes and their games).
    ///
    /// ```
    /// use impala::config::ImpalaConfig;
    /// use impala::Impala;
    ///
    /// let mut config = ImpalaConfig::default();
    /// config.min_time_s_per_iteration = 0.1;
    /// let config = config.validate()?;
    /// let mut algo = Impala::new(config.clone())?;
    /// algo.train()?;
    /// let dir = tempfile::tempdir()?;
    /// let checkpoint = algo.save(dir.path())?;
    /// algo.stop()?;
    /// let mut resumed = Impala::builder(config).restore_from(&checkpoint).build()?;
    /// assert_eq!(resumed.train()?.training_iteration, 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn restore_from(mut self, checkpoint: impl Into<PathBuf>) -> Self {
        self.checkpoint = Some(checkpoint.into());
        self
    }

    /// Has the sampling env runners record every episode step by step, for
    /// [`Impala::take_episode_records`] (evaluation runners do not). RLlib's episode callbacks
    /// run inside its env runners, between env steps; these env runners never wait for user
    /// code, so the `impala_rs` package replays the records to the callbacks on the driver
    /// after each iteration instead. Off by default: records cost memory (every observation
    /// of every episode until taken) and a little sampling time. Refused with
    /// [`remote_env_runners`](Self::remote_env_runners), whose fragments carry none.
    ///
    /// ```
    /// use impala::config::ImpalaConfig;
    /// use impala::Impala;
    ///
    /// let mut config = ImpalaConfig::default();
    /// config.num_env_runners = 1;
    /// config.min_time_s_per_iteration = 0.2;
    /// let mut algo = Impala::builder(config.validate()?).record_episodes(true).build()?;
    /// let result = algo.train()?;
    /// let records = algo.take_episode_records();
    /// assert_eq!(records.len() as u64, result.num_episodes);
    /// let agent = &records[0].agents[0];
    /// assert_eq!(agent.rewards.len() as u64, records[0].stats.episode_len);
    /// assert_eq!(agent.observations.len(), (agent.rewards.len() + 1) * 4); // CartPole's 4 values
    /// assert!(algo.take_episode_records().is_empty()); // taken
    /// algo.stop()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn record_episodes(mut self, record: bool) -> Self {
        self.record_episodes = record;
        self
    }

    /// Builds the policies (a learner each, on one learner thread for those to train), the
    /// env runners and the batching stages. Runners start sampling at once, with the learners'
    /// initial weights, or with [`restore_from`](Self::restore_from) the restored ones: the
    /// learners load the checkpoint before their thread and the runners start.
    /// ([`Impala::restore`] on a running algorithm replaces its runners, and drops what they
    /// sampled, with runners that act with the restored weights.)
    pub fn build(self) -> Result<Impala> {
        let ImpalaBuilder {
            config,
            env_factory,
            env_creator,
            remote,
            model,
            checkpoint,
            record_episodes,
        } = self;
        if model.is_some() && remote.is_some() {
            return Err(ImpalaError::ModelFactoryWithRemoteRunners);
        }
        if record_episodes && remote.is_some() {
            return Err(ImpalaError::EpisodeRecordingWithRemoteRunners);
        }
        match &remote {
            Some(_) => crate::remote::check_remote_config(&config)?,
            None => crate::remote::check_local_config(&config)?,
        }
        // The driver only builds the models and evaluates; one libtorch thread keeps it from
        // competing with the learner thread (`num_learner_threads`) and the runners (one each).
        tch::set_num_threads(1);
        check_devices(&config)?;
        let envs = RunEnvs::new(&config, env_factory, env_creator, record_episodes)?;
        // The learners seed their initial weights from `seed`; runs without one get a fresh one.
        let base_seed = config.config().seed.unwrap_or_else(random_seed);
        let streams = Streams::new(&config, base_seed, 0);
        let policies = policies(&config, &envs, model, base_seed)?;
        let sources = policies.iter().map(|p| p.source.clone()).collect();
        let ids = policies.iter().map(|p| p.id.clone()).collect();
        let mut algo = Impala {
            broadcaster: WeightBroadcaster::new(config.config().broadcast_interval),
            episodes: EpisodeWindow::new(config.config().metrics_num_episodes_for_smoothing),
            evaluator: Evaluator::new(config.clone(), sources, ids, &streams),
            envs,
            policies,
            runners: None,
            learner_death: None,
            stopped: false,
            counters: crate::Counters::default(),
            iteration: 0,
            time_total_s: 0.0,
            base_seed,
            num_restores: 0,
            interrupt: None,
            last_evaluation: None,
            stalls_reported: 0,
            staleness_reported: false,
            remote,
            record_episodes,
            episode_records: Vec::new(),
            config,
        };
        match &checkpoint {
            // Restoring loads the held learners, then starts their thread and the runners.
            Some(path) => algo.restore(path)?,
            // The learners' thread, then the batching stages and the runners.
            None => {
                start_learners(&mut algo.policies)?;
                algo.restart_runners()?;
            }
        }
        if let Some(transport) = &algo.remote {
            crate::remote::wait_for_runners(transport.as_ref(), &algo.config)?;
        }
        Ok(algo)
    }
}

/// The policies of a run of `config` on `envs` (`default_policy` for a single-agent env), each
/// with the config it learns with (`policy_config`), its model (the caller's `factory`, or the
/// one its config names, with the TorchScript module it is, if one) and a held learner (its
/// batching starts with the runners). Refused when they would not fit in memory.
fn policies(
    config: &ValidatedConfig,
    envs: &RunEnvs,
    factory: Option<Arc<dyn ModelFactory>>,
    base_seed: u64,
) -> Result<Vec<PolicySlot>> {
    // Per policy: its id, the spaces of its agents, whether it trains, its agents per env.
    let plan: Vec<(String, EnvSpec, bool, u64)> = match envs {
        RunEnvs::Single(single) => {
            vec![(DEFAULT_POLICY_ID.to_string(), env_spec(config, &single.sampling)?, true, 1)]
        }
        RunEnvs::Multi(multi) => multi
            .policy_specs
            .iter()
            .enumerate()
            .map(|(p, spec)| {
                let agents = multi.map.policy_of_agent.iter().filter(|&&a| a == p).count();
                (multi.map.policy_ids[p].clone(), spec.clone(), multi.map.trains[p], agents as u64)
            })
            .collect(),
    };
    let mut policies = Vec::with_capacity(plan.len());
    let mut agents_per_env = Vec::with_capacity(plan.len());
    for (p, (id, spec, trains, agents)) in plan.into_iter().enumerate() {
        let policy_config = match envs {
            RunEnvs::Single(_) => config.clone(),
            RunEnvs::Multi(_) => config.config().for_policy(&id)?.validate()?,
        };
        let (model, script) = match &factory {
            Some(factory) => (Arc::clone(factory), None),
            None => ScriptedModel::for_config(&policy_config)?,
        };
        let learner =
            new_learner(&policy_config, model.as_ref(), &spec, stream_seed(base_seed, p as u64))?;
        agents_per_env.push(agents);
        policies.push(PolicySlot {
            id,
            source: PolicySource { model, spec, base_seed },
            script,
            config: policy_config,
            trains,
            learner: PolicyLearner::Held(learner),
            batching: None,
            to_place: VecDeque::new(),
            stats: StatsMean::default(),
            last_stats: BTreeMap::new(),
            agent_steps_trained: 0,
            num_grad_updates: 0,
            episodes: EpisodeWindow::new(config.config().metrics_num_episodes_for_smoothing),
        });
    }
    let shares: Vec<PolicyShare<'_>> = policies
        .iter()
        .zip(&agents_per_env)
        .map(|(policy, &agents_per_env)| PolicyShare {
            config: &policy.config,
            spec: &policy.source.spec,
            agents_per_env,
            params: match &policy.learner {
                PolicyLearner::Held(learner) => learner.num_parameters(),
                _ => 0,
            },
            trained: policy.trains,
        })
        .collect();
    crate::budget::check_memory(config, &shares)?;
    Ok(policies)
}

/// Checks what can be checked before any thread starts: the environment (by building one env,
/// so a bad id or `env_config` is reported now) and the resource request against this
/// machine's cores and CUDA devices. Returns the warnings (e.g. more CPUs asked for than the
/// machine has).
pub fn check_environment(config: &ValidatedConfig) -> Result<Vec<String>> {
    let c = config.config();
    if impala_envs::is_multi_agent(&c.env) {
        let env = impala_envs::make_multi_agent(&c.env, &c.env_config)?;
        c.policy_map(&env.spec().agent_ids())?;
    } else if uses_python(config)? {
        // One probe tells a Python env's kind; a multi-agent one's agents meet the mapping.
        let pool = impala_gym::GymEnvPool::new(settings::python_envs(config));
        match pool.probe_kind()? {
            impala_gym::EnvKind::Single(_) => check_single_agent(config)?,
            impala_gym::EnvKind::Multi(spec) => {
                c.policy_map(&spec.agent_ids())?;
            }
        }
    } else {
        default_env(config)?;
        check_single_agent(config)?;
    }
    check_devices(config)?;
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let gpus = tch::Cuda::device_count().max(0);
    let warnings = config.config().default_resource_request().check(cpus as f64, gpus as f64)?;
    Ok(warnings.iter().map(ToString::to_string).collect())
}

/// Per policy, in the run's policy order, the spec of the envs it trains on after the run's
/// wrappers (observation normalisation, `model.framestack`): the spaces its model sees
/// (`default_policy` alone for a single-agent env; for a multi-agent one, the spaces of the
/// agents mapped to each policy). A model built outside the library for the run (the
/// `impala_rs` Python package builds a user's torch class or RLModule with them) needs them
/// before [`ImpalaBuilder::build`]. One env is built to read them, from `config.env` or, with
/// `env_creator`, from the pickled Python env creator
/// ([`ImpalaBuilder::python_env_creator`]); its errors are those `build` would report.
pub fn run_policy_specs(
    config: &ValidatedConfig,
    env_creator: Option<PathBuf>,
) -> Result<Vec<(String, EnvSpec)>> {
    match RunEnvs::new(config, None, env_creator, false)? {
        RunEnvs::Single(envs) => {
            Ok(vec![(DEFAULT_POLICY_ID.to_string(), env_spec(config, &envs.sampling)?)])
        }
        RunEnvs::Multi(envs) => {
            Ok(envs.map.policy_ids.into_iter().zip(envs.policy_specs).collect())
        }
    }
}

/// A GPU asked on a build or machine without CUDA is an error, never a silent CPU run; so is
/// `precision` on a learner device that cannot run it fast.
fn check_devices(config: &ValidatedConfig) -> Result<()> {
    let plan = config.config().learner_plan();
    let available = tch::Cuda::device_count().max(0) as usize;
    if plan.uses_cuda() && available < plan.num_devices {
        let asked = plan.num_devices;
        let reason = if cfg!(feature = "cuda") || available > 0 {
            format!(
                "the config asks for {asked} GPU(s) for the learner ({plan}), but this machine has {available} CUDA device(s)"
            )
        } else {
            format!(
                "the config asks for {asked} GPU(s) for the learner ({plan}), but this impala sees no CUDA device (it may be built without CUDA support)"
            )
        };
        return Err(ImpalaError::ImpossibleResources {
            reason,
            fix: "run on a machine with that many GPUs (the `impala` binary needs its `cuda` feature), \
                  or set `num_gpus = 0` and `num_gpus_per_learner = 0` (or `_fake_gpus = true` to \
                  run the GPU towers on the CPU)"
                .into(),
        });
    }
    // Refused before any env is built. Runners infer in float32 on the CPU, so only the
    // learner's devices need bfloat16.
    for device in impala_learner::learner_devices(plan.kind, plan.num_devices)? {
        impala_learner::check_precision(config.config().precision, device)?;
    }
    Ok(())
}
