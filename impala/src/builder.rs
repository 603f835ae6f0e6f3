//! [`ImpalaBuilder`]: a validated config in; the env factory (a registered env by default, or
//! any [`Env`] of the caller's), the learner and its devices, the batching stage and what the
//! env runners are started from out, each from its own small settings built from the config;
//! and the seeds of the run's random streams.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;

use impala_config::{EnvBackend, ValidatedConfig};
use impala_core::{CoreError, Env, EnvSpec, Policy, Precision, Weights};
use impala_envs::SharedMeanStdFilter;
use impala_learner::{learner_devices, Learner, LearnerHandle, ModelFactory, TorchPolicy};
use impala_runner_pool::RunnerTransport;
use impala_sampler::{
    EnvContext, EnvFactory, EnvRunnerGroup, EnvRunnerGroupSettings, TrainBatchBuilder,
    WeightBroadcaster,
};

use crate::budget::PolicyShare;
use crate::evaluation::Evaluator;
use crate::settings;
use crate::torchscript::ScriptedModel;
use crate::{EpisodeWindow, Impala, ImpalaError, Result};

/// Builds an [`Impala`] (see [`Impala::builder`]).
pub struct ImpalaBuilder {
    config: ValidatedConfig,
    env_factory: Option<EnvFactory>,
    env_creator: Option<PathBuf>,
    remote: Option<Arc<dyn RunnerTransport>>,
    model: Option<Arc<dyn ModelFactory>>,
    checkpoint: Option<PathBuf>,
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
        }
    }
}

impl ImpalaBuilder {
    /// Trains on the envs `factory` builds, one per env slot of every runner (RLlib's env
    /// creator, called with an [`EnvContext`]). `config.env` then only names the run. The
    /// config's `normalize_observations` and `model.framestack` wrap these envs too.
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
    /// like Gymnasium ids, with `env_config` as its argument. `config.env` then only names the
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
    /// restarted runner slots are taken by whichever runner claims one next.
    #[must_use]
    pub fn remote_env_runners(mut self, transport: Arc<dyn RunnerTransport>) -> Self {
        self.remote = Some(transport);
        self
    }

    /// Trains the models `factory` builds (any `tch` network implementing
    /// [`Model`](impala_learner::Model)) instead of the one `config.model` names: the
    /// learner's towers, every env runner's and evaluation runner's policy. Remote env runners
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

    /// Builds the learner (and its thread), the env runners and the batching stage. Runners
    /// start sampling at once, with the learner's initial weights, or with
    /// [`restore_from`](Self::restore_from) the restored ones: the learner loads the checkpoint
    /// before its thread and the runners start. ([`Impala::restore`] on a running algorithm
    /// replaces its runners, and drops what they sampled, with runners that act with the
    /// restored weights.)
    pub fn build(self) -> Result<Impala> {
        let ImpalaBuilder { config, env_factory, env_creator, remote, model, checkpoint } = self;
        let custom_env = env_factory.is_some() || env_creator.is_some();
        if !custom_env && impala_envs::is_multi_agent(&config.config().env) {
            return Err(ImpalaError::EnvOption {
                key: "env",
                problem: format!("is `{}`, a multi-agent env", config.config().env),
                fix: "train it with `MultiAgentImpala::new` (as `impala train` does)".into(),
            });
        }
        if model.is_some() && remote.is_some() {
            return Err(ImpalaError::ModelFactoryWithRemoteRunners);
        }
        match &remote {
            Some(_) => crate::remote::check_remote_config(&config)?,
            None => crate::remote::check_local_config(&config)?,
        }
        let (model, script) = match model {
            Some(factory) => (factory, None),
            None => ScriptedModel::for_config(&config)?,
        };
        // The driver only builds the model and evaluates; one libtorch thread keeps it from
        // competing with the learner thread (`num_learner_threads`) and the runners (one each).
        tch::set_num_threads(1);
        check_devices(&config)?;
        // Env runners infer on the CPU; the learner's towers check their own devices.
        impala_learner::check_precision(config.config().precision, tch::Device::Cpu)?;
        let (env_factory, creator_pool) = match (env_factory, env_creator) {
            (None, Some(creator)) => {
                let (factory, pool) = python_envs(&config, Some(creator))?;
                (Some(factory), Some(pool))
            }
            (factory, _) => (factory, None),
        };
        let envs = run_envs(&config, env_factory)?;
        // A Python env's kind is known once one was built.
        check_single_agent(&config)?;
        let python_pool = creator_pool.or_else(|| envs.python.clone());
        let spec = env_spec(&config, &envs.sampling)?;

        // The learner seeds its initial weights from `seed`; runs without one get a fresh seed.
        let base_seed = config.config().seed.unwrap_or_else(random_seed);
        let learner = new_learner(&config, model.as_ref(), &spec, base_seed)?;
        let share = PolicyShare {
            config: &config,
            spec: &spec,
            agents_per_env: 1,
            params: learner.num_parameters(),
            trained: true,
        };
        crate::budget::check_memory(&config, &[share])?;
        let precision = config.config().precision;
        let policies = PolicySource { model, spec: spec.clone(), base_seed, precision };
        let streams = Streams::new(&config, base_seed, 0);
        // A restore loads the learner before its thread starts (it is handed over idle) and
        // builds the batching stage on the restored run's streams.
        let (learner, idle_learner, batching) = match &checkpoint {
            Some(_) => (None, Some(learner), None),
            None => {
                let thread = LearnerHandle::spawn(&settings::learner_thread(&config), learner)?;
                (Some(thread), None, batching_stage(&config, &streams)?)
            }
        };
        let mut algo = Impala {
            broadcaster: WeightBroadcaster::new(config.config().broadcast_interval),
            episodes: EpisodeWindow::new(config.config().metrics_num_episodes_for_smoothing),
            evaluator: Evaluator::new(config.clone(), envs.evaluation, policies.clone(), &streams),
            env_factory: envs.sampling,
            python_pool,
            observation_filter: envs.filter,
            policies,
            spec,
            runners: None,
            learner,
            idle_learner,
            learner_death: None,
            stopped: false,
            batching,
            to_place: VecDeque::new(),
            counters: crate::Counters::default(),
            iteration: 0,
            time_total_s: 0.0,
            base_seed,
            num_restores: 0,
            last_learner_stats: Default::default(),
            interrupt: None,
            last_evaluation: None,
            stalls_reported: 0,
            staleness_reported: false,
            remote,
            script,
            config,
        };
        match &checkpoint {
            // Restoring starts the runners, with the restored weights.
            Some(path) => algo.restore(path)?,
            None => {
                algo.env_runner_group()?;
            }
        }
        if let Some(transport) = &algo.remote {
            crate::remote::wait_for_runners(transport.as_ref(), &algo.config)?;
        }
        Ok(algo)
    }
}

/// A learner for `config` training `model`, its initial weights from `base_seed`.
pub(crate) fn new_learner(
    config: &ValidatedConfig,
    model: &dyn ModelFactory,
    spec: &EnvSpec,
    base_seed: u64,
) -> Result<Learner> {
    let mut learner_settings = settings::learner(config);
    learner_settings.model_seed = base_seed;
    let plan = config.config().learner_plan();
    let devices = learner_devices(plan.kind, plan.num_devices)?;
    Ok(Learner::with_model(&learner_settings, model, spec, &devices)?)
}

/// The batching stage of `config`, its replay drawing from `streams`; none with
/// `_env_runners_only`.
pub(crate) fn batching_stage(
    config: &ValidatedConfig,
    streams: &Streams,
) -> Result<Option<TrainBatchBuilder>> {
    if config.config().env_runners_only {
        return Ok(None);
    }
    let mut settings = settings::batching(config);
    settings.seed = streams.env_seed;
    Ok(Some(TrainBatchBuilder::new(&settings)?))
}

/// A run's envs: the caller's, or the registered `config.env` (its errors reported as the
/// registry's), with the config's wrappers; with `normalize_observations`, the run's filter.
pub(crate) struct RunEnvs {
    /// The sampling runners' envs: they update the run's filter.
    pub(crate) sampling: EnvFactory,
    /// The evaluation runners' envs: they normalise with the run's filter as it is when they
    /// are built (every evaluation round builds them afresh) and leave it unchanged.
    pub(crate) evaluation: EnvFactory,
    /// RLlib's `MeanStdFilter` of the run (what checkpoints keep).
    pub(crate) filter: Option<SharedMeanStdFilter>,
    /// The Python env workers' pool, for `config.env` in Python.
    pub(crate) python: Option<Arc<impala_gym::GymEnvPool>>,
}

/// The envs of `config` (see [`RunEnvs`]).
pub(crate) fn run_envs(config: &ValidatedConfig, custom: Option<EnvFactory>) -> Result<RunEnvs> {
    let (base, python) = match custom {
        Some(factory) => (factory, None),
        None => default_env(config)?,
    };
    // RLlib's MeanStdFilter clips to [-10, 10].
    let filter =
        config.config().normalize_observations.then(|| SharedMeanStdFilter::new(Some(10.0)));
    Ok(RunEnvs {
        sampling: wrapped(config, Arc::clone(&base), filter.as_ref(), true),
        evaluation: wrapped(config, base, filter.as_ref(), false),
        filter,
        python,
    })
}

/// Where `config.env` comes from, per `env_backend`: the native registry, or Gymnasium in
/// Python env workers.
fn uses_python(config: &ValidatedConfig) -> Result<bool> {
    let native = impala_envs::contains(&config.config().env);
    match config.config().env_backend {
        EnvBackend::Auto => Ok(!native),
        EnvBackend::Gymnasium => Ok(true),
        EnvBackend::Native if native => Ok(false),
        // Reported as the registry's error (unknown id with a suggestion).
        EnvBackend::Native => Err(probe_native(config).err().map_or(
            ImpalaError::EnvOption {
                key: "env_backend",
                problem: format!("is \"native\" but `{}` is no native env", config.config().env),
                fix: "use a native env id (`envs::list()`), or set `env_backend = \"auto\"`".into(),
            },
            ImpalaError::from,
        )),
    }
}

/// The env factory of `config.env` without a custom one: checked now (one env is built, so
/// an unknown id, bad `env_config` or a Python import error is reported before any thread
/// starts).
fn default_env(
    config: &ValidatedConfig,
) -> Result<(EnvFactory, Option<Arc<impala_gym::GymEnvPool>>)> {
    if !uses_python(config)? {
        if config.config().restart_failed_sub_environments {
            return Err(ImpalaError::EnvOption {
                key: "restart_failed_sub_environments",
                problem: format!(
                    "is true but `{}` is a native env, which fails only as a whole runner",
                    config.config().env
                ),
                fix: "remove it (`restart_failed_env_runners` restarts failed runners), or set \
                      `env_backend = \"gymnasium\"`"
                    .into(),
            });
        }
        // Reported as the registry's error (unknown id with a suggestion, bad keys).
        probe_native(config)?;
        return Ok((registered_env(config), None));
    }
    let (factory, pool) = python_envs(config, None)?;
    Ok((factory, Some(pool)))
}

/// `config`'s Python envs, from `config.env` or from a pickled env creator; one is built now,
/// so an import error or bad `env_config` is reported before any thread starts.
pub(crate) fn python_envs(
    config: &ValidatedConfig,
    creator: Option<PathBuf>,
) -> Result<(EnvFactory, Arc<impala_gym::GymEnvPool>)> {
    let mut settings = settings::python_envs(config);
    settings.creator = creator;
    let pool = Arc::new(impala_gym::GymEnvPool::new(settings));
    pool.probe()?;
    let making = Arc::clone(&pool);
    let factory: EnvFactory = Arc::new(move |ctx: &EnvContext| {
        let env = making.make(ctx.runner_index, ctx.incarnation, ctx.env_index)?;
        Ok(Box::new(env) as Box<dyn Env>)
    });
    Ok((factory, pool))
}

/// The spec of the envs `factory` builds (it builds one).
pub(crate) fn env_spec(config: &ValidatedConfig, factory: &EnvFactory) -> Result<EnvSpec> {
    Ok(factory(&EnvContext::new(0, 0, config.config().seed, config.config().env_config.clone()))?
        .spec()
        .clone())
}

/// The random streams of a run: where its env seeds and its action-sampling seeds come from.
/// A fresh run (no restores) uses the seeds themselves: env seeds from the config's `seed`
/// (RLlib's `seed + 1000 * runner + env`), sampling seeds from the base seed; each restore
/// moves both to streams of their own, so a resumed run does not replay the original run's
/// episodes and actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Streams {
    /// The base seed of the envs (`None`: unseeded envs, as the config asks).
    pub(crate) env_seed: Option<u64>,
    /// The base seed of the runners' action sampling.
    pub(crate) sample_seed: u64,
}

impl Streams {
    /// The streams of a run of `config` with `base_seed`, restored `num_restores` times.
    pub(crate) fn new(config: &ValidatedConfig, base_seed: u64, num_restores: u64) -> Self {
        Streams {
            env_seed: config.config().seed.map(|s| stream_seed(s, num_restores)),
            sample_seed: stream_seed(base_seed, num_restores),
        }
    }
}

pub(crate) use impala_sampler::stream_seed;

/// The action-sampling seed of incarnation `incarnation` of runner `runner` under
/// `sample_seed`: one per runner at first (`sample_seed * golden + runner + 1`), a new one for
/// every restart of the runner.
pub(crate) fn runner_sample_seed(sample_seed: u64, runner: usize, incarnation: u64) -> u64 {
    let first = sample_seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(runner as u64 + 1);
    stream_seed(first, incarnation)
}

/// Builds runners' policies: CPU copies of the model.
#[derive(Debug, Clone)]
pub(crate) struct PolicySource {
    pub(crate) model: Arc<dyn ModelFactory>,
    pub(crate) spec: EnvSpec,
    /// Seeds the model's initial weights (overwritten by the weights a policy is given).
    pub(crate) base_seed: u64,
    /// The precision policies infer in (`precision`).
    pub(crate) precision: Precision,
}

/// What [`PolicySource::with_weights`] gives the runner group: a policy per runner context.
pub(crate) type RunnerPolicies =
    Arc<dyn Fn(&EnvContext) -> std::result::Result<Box<dyn Policy>, CoreError> + Send + Sync>;

impl PolicySource {
    /// Policies that act with `weights` from their first step (so no fragment is sampled
    /// with other weights), each runner incarnation sampling actions from its own stream of
    /// `sample_seed`.
    pub(crate) fn with_weights(&self, weights: Arc<Weights>, sample_seed: u64) -> RunnerPolicies {
        let source = self.clone();
        Arc::new(move |ctx: &EnvContext| {
            let seed = runner_sample_seed(sample_seed, ctx.runner_index, ctx.incarnation);
            let mut policy =
                TorchPolicy::new(source.model.as_ref(), &source.spec, source.base_seed, seed)
                    .and_then(|p| p.with_precision(source.precision))
                    .map_err(CoreError::from)?;
            policy.set_weights(&weights)?;
            Ok(Box::new(policy) as Box<dyn Policy>)
        })
    }

    /// A runner group of `settings` whose policies act with `weights` from their first step
    /// (see [`PolicySource::with_weights`]), holding them as its newest weights for restarts.
    pub(crate) fn start_runners(
        &self,
        settings: &EnvRunnerGroupSettings,
        env_factory: &EnvFactory,
        weights: Arc<Weights>,
        sample_seed: u64,
    ) -> Result<EnvRunnerGroup> {
        let policies = self.with_weights(Arc::clone(&weights), sample_seed);
        let mut group =
            EnvRunnerGroup::with_context_policies(settings, Arc::clone(env_factory), policies)?;
        group.set_latest_weights(weights);
        Ok(group)
    }
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

/// The spec of the envs a run of `config` trains on, after the run's wrappers (observation
/// normalisation, `model.framestack`): the spaces the model sees. A model built outside the
/// library for the run (the `impala_rs` Python package scripts a user's torch class with
/// them) needs them before [`ImpalaBuilder::build`]. One env is built to read them, from
/// `config.env` or, with `env_creator`, from the pickled Python env creator
/// ([`ImpalaBuilder::python_env_creator`]); its errors are those `build` would report.
pub fn run_env_spec(config: &ValidatedConfig, env_creator: Option<PathBuf>) -> Result<EnvSpec> {
    let custom = match env_creator {
        Some(creator) => Some(python_envs(config, Some(creator))?.0),
        None => None,
    };
    env_spec(config, &run_envs(config, custom)?.sampling)
}

/// Refuses `multi_agent()` options for a single-agent env.
fn check_single_agent(config: &ValidatedConfig) -> Result<()> {
    let c = config.config();
    if !c.sets_multi_agent_options() {
        return Ok(());
    }
    Err(ImpalaError::EnvOption {
        key: "policies",
        problem: format!(
            "and the other `multi_agent()` options are set, but `{}` is a single-agent env",
            c.env
        ),
        fix: format!(
            "remove them, or train a multi-agent env ({})",
            impala_envs::MULTI_AGENT_ENVS.join(", ")
        ),
    })
}

/// A GPU asked on a build or machine without CUDA is an error, never a silent CPU run.
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
    Ok(())
}

/// One env of `config.env` from the registry, as the local runner (worker index 0) builds it:
/// an unknown id or bad `env_config` is the registry's error.
fn probe_native(
    config: &ValidatedConfig,
) -> std::result::Result<Box<dyn Env>, impala_envs::EnvError> {
    impala_envs::make_for_worker(&config.config().env, &config.config().env_config, 0)
}

/// The registered env `config.env`, each made for its runner (see
/// [`impala_envs::make_for_worker`]).
fn registered_env(config: &ValidatedConfig) -> EnvFactory {
    let id = config.config().env.clone();
    Arc::new(move |ctx: &EnvContext| {
        impala_envs::make_for_worker(&id, &ctx.env_config, ctx.runner_index)
            .map_err(|e| CoreError::Env { env: id.clone(), reason: e.to_string() })
    })
}

/// `base` with the config's env wrappers: observation normalisation with the run's `filter`
/// (updating it, or frozen) and frame stacking. Rewards are clipped by the runners, so episode
/// returns stay unclipped.
fn wrapped(
    config: &ValidatedConfig,
    base: EnvFactory,
    filter: Option<&SharedMeanStdFilter>,
    update: bool,
) -> EnvFactory {
    let framestack = config.config().model.framestack;
    if filter.is_none() && framestack <= 1 {
        return base;
    }
    let filter = filter.cloned();
    let env_id = config.config().env.clone();
    Arc::new(move |ctx: &EnvContext| {
        let wrap_error = |e: impala_envs::EnvError| CoreError::Env {
            env: env_id.clone(),
            reason: e.to_string(),
        };
        let mut env = base(ctx)?;
        if let Some(filter) = &filter {
            env = Box::new(
                impala_envs::NormalizeObservation::synced(env, filter, update)
                    .map_err(wrap_error)?,
            );
        }
        if framestack > 1 {
            env = Box::new(impala_envs::FrameStack::new(env, framestack).map_err(wrap_error)?);
        }
        Ok(env)
    })
}

/// A seed for runs without one (`seed = None`), recorded in checkpoints.
pub(crate) fn random_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ (u64::from(std::process::id()) << 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One-value observations that are always 7.
    struct Seven(EnvSpec);

    impl Env for Seven {
        fn spec(&self) -> &EnvSpec {
            &self.0
        }
        fn reset(&mut self, _: Option<u64>, obs: &mut [f32]) -> std::result::Result<(), CoreError> {
            obs[0] = 7.0;
            Ok(())
        }
        fn step(
            &mut self,
            _: &[f32],
            obs: &mut [f32],
        ) -> std::result::Result<impala_core::StepOutcome, CoreError> {
            obs[0] = 7.0;
            Ok(impala_core::StepOutcome { reward: 0.0, terminated: false, truncated: false })
        }
    }

    #[test]
    fn evaluation_envs_normalise_with_the_run_filter_and_leave_it_unchanged() -> Result<()> {
        let config =
            impala_config::ImpalaConfig { normalize_observations: true, ..Default::default() }
                .validate()?;
        let spec = EnvSpec {
            id: "Seven".into(),
            observation_space: impala_core::Space::continuous(vec![0.0], vec![10.0])?,
            action_space: impala_core::Space::Discrete(2),
            max_episode_steps: None,
        };
        let seven: EnvFactory =
            Arc::new(move |_: &EnvContext| Ok(Box::new(Seven(spec.clone())) as Box<dyn Env>));
        let envs = run_envs(&config, Some(seven))?;
        let run = envs.filter.ok_or(ImpalaError::Stopped)?;
        // A restored run's statistics: mean 5, sample standard deviation 2.
        let mut saved = impala_envs::MeanStdFilter::new(1, Some(10.0));
        let mut sink = [3.0f32, 7.0, 5.0];
        saved.apply(&mut sink, true)?;
        run.replace(saved.clone())?;
        let mut obs = [0.0f32];
        let ctx = EnvContext::default();
        (envs.evaluation)(&ctx)?.reset(None, &mut obs)?;
        assert!((obs[0] - 1.0).abs() < 1e-6, "(7 - 5) / 2, got {}", obs[0]);
        assert_eq!(run.snapshot()?, Some(saved.clone()));
        // A sampling env's observations reach the run's filter at its next episode start.
        let mut env = (envs.sampling)(&ctx)?;
        env.reset(None, &mut obs)?;
        env.reset(None, &mut obs)?;
        let pushes = run.snapshot()?.map(|f| f.running_stats().num_pushes());
        assert_eq!(pushes, Some(saved.running_stats().num_pushes() + 1));
        Ok(())
    }

    #[test]
    fn streams_keep_the_first_seeds_and_move_on_per_restore_and_restart() {
        // A fresh run's first runner incarnations sample as before: one seed per runner.
        let base = 11;
        assert_eq!(stream_seed(base, 0), base);
        assert_eq!(
            runner_sample_seed(base, 2, 0),
            base.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(3)
        );
        // Restores and restarts each draw seeds of their own.
        let mut seen = std::collections::BTreeSet::new();
        for restores in 0..4 {
            for runner in 0..4 {
                for incarnation in 0..4 {
                    let seed = runner_sample_seed(stream_seed(base, restores), runner, incarnation);
                    assert!(seen.insert(seed), "{restores} {runner} {incarnation}");
                }
            }
        }
    }
}
