//! [`ImpalaBuilder`]: a validated config in; the env factory (a registered env by default, or
//! any [`Env`] of the caller's), the learner and its devices, the env runners and the batching
//! stage out, each from its own small settings built from the config.

use std::collections::VecDeque;
use std::sync::Arc;

use impala_config::ValidatedConfig;
use impala_core::{CoreError, Env, Policy};
use impala_learner::{
    learner_devices, Learner, LearnerHandle, LearnerSettings, LearnerThreadSettings, TorchPolicy,
};
use impala_sampler::{
    BatchingSettings, EnvContext, EnvFactory, EnvRunnerGroup, EnvRunnerGroupSettings,
    PolicyFactory, TrainBatchBuilder, WeightBroadcaster,
};

use crate::evaluation::Evaluator;
use crate::{EpisodeWindow, Impala, ImpalaError, Result};

/// Builds an [`Impala`] (see [`Impala::builder`]).
pub struct ImpalaBuilder {
    config: ValidatedConfig,
    env_factory: Option<EnvFactory>,
}

impl std::fmt::Debug for ImpalaBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImpalaBuilder")
            .field("env", &self.config.env)
            .field("custom_env_factory", &self.env_factory.is_some())
            .finish()
    }
}

impl Impala {
    /// Starts building the algorithm from a config that passed validation
    /// ([`impala_config::ImpalaConfig::validate`]). Without [`ImpalaBuilder::env_factory`]
    /// the env is `config.env` from the [`impala_envs`] registry.
    pub fn builder(config: ValidatedConfig) -> ImpalaBuilder {
        ImpalaBuilder { config, env_factory: None }
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

    /// Builds the learner (and its thread), the env runners and the batching stage. Runners
    /// start sampling at once, with the learner's initial weights.
    pub fn build(self) -> Result<Impala> {
        let ImpalaBuilder { config, env_factory } = self;
        // The driver only builds the model and evaluates; one libtorch thread keeps it from
        // competing with the learner thread (`num_learner_threads`) and the runners (one each).
        tch::set_num_threads(1);
        check_devices(&config)?;
        let base = match env_factory {
            Some(factory) => factory,
            None => {
                // Reported as the registry's error (unknown id with a suggestion, bad keys).
                impala_envs::make(&config.env, &config.env_config)?;
                registered_env(&config)
            }
        };
        let env_factory = wrapped(&config, base);
        let spec = env_factory(&EnvContext::new(0, 0, config.seed, config.env_config.clone()))?
            .spec()
            .clone();

        // The learner seeds its initial weights from `seed`; runs without one get a fresh seed.
        let base_seed = config.seed.unwrap_or_else(random_seed);
        let mut learner_settings = LearnerSettings::from_config(&config);
        learner_settings.model_seed = base_seed;
        let devices = learner_devices(&config.learner_plan())?;
        let learner = Learner::with_devices(&learner_settings, &spec, &devices)?;
        let initial = learner.weights()?;
        let learner = LearnerHandle::spawn(&LearnerThreadSettings::from_config(&config), learner)?;

        let (model, policy_spec, weights) =
            (config.model.clone(), spec.clone(), Arc::clone(&initial));
        let policy_factory: PolicyFactory = Arc::new(move |runner_id: usize| {
            let seed =
                base_seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(runner_id as u64 + 1);
            let mut policy =
                TorchPolicy::new(&model, &policy_spec, base_seed, seed).map_err(CoreError::from)?;
            policy.set_weights(&weights)?;
            Ok(Box::new(policy) as Box<dyn Policy>)
        });
        let mut runners = EnvRunnerGroup::new(
            &EnvRunnerGroupSettings::from_config(&config),
            Arc::clone(&env_factory),
            Arc::clone(&policy_factory),
        )?;
        runners.set_latest_weights(initial);
        let batching = if config.env_runners_only {
            None
        } else {
            Some(TrainBatchBuilder::new(&BatchingSettings::from_config(&config))?)
        };
        Ok(Impala {
            broadcaster: WeightBroadcaster::new(config.broadcast_interval),
            episodes: EpisodeWindow::new(config.metrics_num_episodes_for_smoothing),
            evaluator: Evaluator::new(config.clone(), env_factory, policy_factory),
            spec,
            runners: Some(runners),
            learner: Some(learner),
            batching,
            to_place: VecDeque::new(),
            counters: crate::Counters::default(),
            iteration: 0,
            time_total_s: 0.0,
            base_seed,
            last_learner_stats: Default::default(),
            interrupt: None,
            last_evaluation: None,
            stalls_reported: 0,
            config,
        })
    }
}

/// Checks what can be checked before any thread starts: the environment (by building one env,
/// so a bad id or `env_config` is reported now) and the resource request against this
/// machine's cores and CUDA devices. Returns the warnings (e.g. more CPUs asked for than the
/// machine has).
pub fn check_environment(config: &ValidatedConfig) -> Result<Vec<String>> {
    impala_envs::make(&config.env, &config.env_config)?;
    check_devices(config)?;
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let gpus = tch::Cuda::device_count().max(0);
    let warnings = config.default_resource_request().check(cpus as f64, gpus as f64)?;
    Ok(warnings.iter().map(ToString::to_string).collect())
}

/// A GPU asked on a build or machine without CUDA is an error, never a silent CPU run.
fn check_devices(config: &ValidatedConfig) -> Result<()> {
    let plan = config.learner_plan();
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
            fix: "run on a machine with that many GPUs (the `impala` binary needs `--features cuda`), \
                  or set `num_gpus = 0` and `num_gpus_per_learner = 0` (or `_fake_gpus = true` to \
                  run the GPU towers on the CPU)"
                .into(),
        });
    }
    Ok(())
}

/// The registered env `config.env` (see [`impala_envs::make`]).
fn registered_env(config: &ValidatedConfig) -> EnvFactory {
    let id = config.env.clone();
    Arc::new(move |ctx: &EnvContext| {
        impala_envs::make(&id, &ctx.env_config)
            .map_err(|e| CoreError::Env { env: id.clone(), reason: e.to_string() })
    })
}

/// `base` with the config's env wrappers: observation normalisation (RLlib's MeanStdFilter
/// clips to [-10, 10]) and frame stacking. Rewards are clipped by the runners, so episode
/// returns stay unclipped.
fn wrapped(config: &ValidatedConfig, base: EnvFactory) -> EnvFactory {
    let (normalize, framestack) = (config.normalize_observations, config.model.framestack);
    if !normalize && framestack <= 1 {
        return base;
    }
    let env_id = config.env.clone();
    Arc::new(move |ctx: &EnvContext| {
        let wrap_error = |e: impala_envs::EnvError| CoreError::Env {
            env: env_id.clone(),
            reason: e.to_string(),
        };
        let mut env = base(ctx)?;
        if normalize {
            env = Box::new(
                impala_envs::NormalizeObservation::new(env, Some(10.0)).map_err(wrap_error)?,
            );
        }
        if framestack > 1 {
            env = Box::new(impala_envs::FrameStack::new(env, framestack).map_err(wrap_error)?);
        }
        Ok(env)
    })
}

/// A seed for runs without one (`seed = None`), recorded in checkpoints.
fn random_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ (u64::from(std::process::id()) << 32)
}
