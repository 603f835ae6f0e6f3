//! The envs a run trains on: a single-agent env (the caller's factory, the native registry or
//! Gymnasium in env worker processes, with the config's wrappers and the run's observation
//! filter) or a multi-agent one (native, or PettingZoo / RLlib's `MultiAgentEnv` in Python)
//! whose agents the config maps to policies. Everything above this module sees a run as a set
//! of policies, whatever the env.

use std::path::PathBuf;
use std::sync::Arc;

use impala_config::{EnvBackend, PolicyMap, ValidatedConfig};
use impala_core::{CoreError, Env, EnvSpec, MultiAgentEnv, MultiAgentSpec};
use impala_envs::SharedMeanStdFilter;
use impala_gym::{EnvKind, GymEnvPool};
use impala_sampler::{EnvContext, EnvFactory, MultiAgentEnvFactory, SamplerError};

use crate::settings;
use crate::{ImpalaError, Result};

/// The envs of a run and how its agents map to policies.
pub(crate) enum RunEnvs {
    /// One agent, trained as policy `default_policy`.
    Single(SingleAgentEnvs),
    /// A multi-agent env.
    Multi(MultiAgentEnvs),
}

/// A multi-agent env's factory, agents and policy mapping.
pub(crate) struct MultiAgentEnvs {
    pub(crate) factory: MultiAgentEnvFactory,
    pub(crate) spec: MultiAgentSpec,
    pub(crate) map: PolicyMap,
    /// Per policy, the spaces of the agents mapped to it.
    pub(crate) policy_specs: Vec<EnvSpec>,
    pub(crate) python: Option<Arc<GymEnvPool>>,
}

impl RunEnvs {
    /// The envs of `config`: the caller's single-agent `custom` factory, the envs of a pickled
    /// Python `creator`, or `config.env`; one env is built (or probed in a worker) now, so a
    /// bad id, `env_config` or import is reported before any thread starts. Python envs send
    /// their infos with `record_infos` (for recorded episodes).
    pub(crate) fn new(
        config: &ValidatedConfig,
        custom: Option<EnvFactory>,
        creator: Option<PathBuf>,
        record_infos: bool,
    ) -> Result<Self> {
        if custom.is_none()
            && creator.is_none()
            && impala_envs::is_multi_agent(&config.config().env)
        {
            return MultiAgentEnvs::native(config).map(RunEnvs::Multi);
        }
        if custom.is_none() && (creator.is_some() || uses_python(config)?) {
            // One probe tells a Python env's kind; its worker pool then serves the run.
            let pool = python_pool(config, creator, record_infos);
            return match pool.probe_kind()? {
                EnvKind::Multi(spec) => {
                    MultiAgentEnvs::of_python(config, pool, spec).map(RunEnvs::Multi)
                }
                EnvKind::Single(_) => {
                    check_single_agent(config)?;
                    Ok(RunEnvs::Single(python_single_agent_envs(config, pool)))
                }
            };
        }
        check_single_agent(config)?;
        single_agent_envs(config, custom).map(RunEnvs::Single)
    }

    /// The Python env workers' pool, when the envs are Python's: `stop()` kills the workers
    /// that runners stuck in an env step still hold.
    pub(crate) fn python_pool(&self) -> Option<&Arc<GymEnvPool>> {
        match self {
            RunEnvs::Single(envs) => envs.python.as_ref(),
            RunEnvs::Multi(envs) => envs.python.as_ref(),
        }
    }

    /// Whether the env is a multi-agent one.
    pub(crate) fn is_multi_agent(&self) -> bool {
        matches!(self, RunEnvs::Multi(_))
    }
}

impl MultiAgentEnvs {
    /// `config.env`, a native multi-agent env, its agents mapped to the config's policies;
    /// refuses the options a multi-agent run does not take.
    fn native(config: &ValidatedConfig) -> Result<Self> {
        let c = config.config();
        let spec = impala_envs::make_multi_agent(&c.env, &c.env_config)?.spec().clone();
        Self::mapped(config, multi_agent_env_factory(config, None), spec, None)
    }

    /// The Python multi-agent env of `pool`, whose agents a probe found to be `spec`'s.
    fn of_python(
        config: &ValidatedConfig,
        pool: Arc<GymEnvPool>,
        spec: MultiAgentSpec,
    ) -> Result<Self> {
        Self::mapped(config, multi_agent_env_factory(config, Some(&pool)), spec, Some(pool))
    }

    /// The env's agents mapped to the config's policies; refuses the options a multi-agent run
    /// does not take.
    fn mapped(
        config: &ValidatedConfig,
        factory: MultiAgentEnvFactory,
        spec: MultiAgentSpec,
        python: Option<Arc<GymEnvPool>>,
    ) -> Result<Self> {
        check_multi_agent_options(config)?;
        let map = config.config().policy_map(&spec.agent_ids())?;
        let policy_specs =
            impala_sampler::policy_specs(&spec, &map.policy_of_agent, &map.policy_ids).map_err(
                |e| match e {
                    SamplerError::PolicyMapping { reason } => {
                        ImpalaError::MultiAgentOption { key: "policy_mapping", reason }
                    }
                    other => other.into(),
                },
            )?;
        Ok(MultiAgentEnvs { factory, spec, map, policy_specs, python })
    }
}

/// The factory of `config`'s multi-agent envs: the native `config.env`, or the Python envs
/// of `pool`'s workers (each runner's its own); builds no env.
pub(crate) fn multi_agent_env_factory(
    config: &ValidatedConfig,
    pool: Option<&Arc<GymEnvPool>>,
) -> MultiAgentEnvFactory {
    if let Some(pool) = pool {
        let making = Arc::clone(pool);
        return Arc::new(move |i| {
            Ok(Box::new(making.make_multi_agent(0, 0, i)?) as Box<dyn MultiAgentEnv>)
        });
    }
    let (id, env_config) = (config.config().env.clone(), config.config().env_config.clone());
    Arc::new(move |_| {
        impala_envs::make_multi_agent(&id, &env_config)
            .map_err(|e| CoreError::Env { env: id.clone(), reason: e.to_string() })
    })
}

/// Refuses the options a multi-agent run does not take, naming what to do instead.
fn check_multi_agent_options(config: &ValidatedConfig) -> Result<()> {
    let c = config.config();
    let refuse = |key: &'static str, reason: &str| {
        Err(ImpalaError::MultiAgentOption { key, reason: reason.to_string() })
    };
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

/// A run's envs: the caller's, or the registered `config.env` (its errors reported as the
/// registry's), with the config's wrappers; with `normalize_observations`, the run's filter.
pub(crate) struct SingleAgentEnvs {
    /// The sampling runners' envs: they update the run's filter.
    pub(crate) sampling: EnvFactory,
    /// The evaluation runners' envs: they normalise with the run's filter as it is when they
    /// are built (every evaluation round builds them afresh) and leave it unchanged.
    pub(crate) evaluation: EnvFactory,
    /// RLlib's `MeanStdFilter` of the run (what checkpoints keep).
    pub(crate) filter: Option<SharedMeanStdFilter>,
    /// The Python env workers' pool, for `config.env` in Python.
    pub(crate) python: Option<Arc<GymEnvPool>>,
}

/// The single-agent envs of `config` (see [`SingleAgentEnvs`]).
pub(crate) fn single_agent_envs(
    config: &ValidatedConfig,
    custom: Option<EnvFactory>,
) -> Result<SingleAgentEnvs> {
    let base = match custom {
        Some(factory) => factory,
        None => match default_env(config)? {
            (_, Some(pool)) => return Ok(python_single_agent_envs(config, pool)),
            (factory, None) => factory,
        },
    };
    Ok(with_wrappers(config, Arc::clone(&base), base, None))
}

/// The single-agent envs of `config` in `pool`'s env workers. The evaluation runners step one
/// env each ([`settings::evaluation_runner_group`]), so their envs come from a pool of the
/// same envs with one per worker: a worker that steps all of its envs together (Atari's
/// vector env) would otherwise wait for envs no evaluation runner made.
pub(crate) fn python_single_agent_envs(
    config: &ValidatedConfig,
    pool: Arc<GymEnvPool>,
) -> SingleAgentEnvs {
    let one_env = impala_gym::GymSettings {
        num_envs: std::num::NonZeroUsize::MIN,
        envs_per_worker: std::num::NonZeroUsize::MIN,
        ..pool.settings().clone()
    };
    let evaluation = gym_env_factory(&Arc::new(GymEnvPool::new(one_env)));
    with_wrappers(config, gym_env_factory(&pool), evaluation, Some(pool))
}

/// Sampling and evaluation envs from `sampling` and `evaluation` with the config's wrappers.
fn with_wrappers(
    config: &ValidatedConfig,
    sampling: EnvFactory,
    evaluation: EnvFactory,
    python: Option<Arc<GymEnvPool>>,
) -> SingleAgentEnvs {
    // RLlib's MeanStdFilter clips to [-10, 10].
    let filter =
        config.config().normalize_observations.then(|| SharedMeanStdFilter::new(Some(10.0)));
    SingleAgentEnvs {
        sampling: wrapped(config, sampling, filter.as_ref(), true),
        evaluation: wrapped(config, evaluation, filter.as_ref(), false),
        filter,
        python,
    }
}

/// Where `config.env` comes from, per `env_backend`: the native registry, or Gymnasium in
/// Python env workers.
pub(crate) fn uses_python(config: &ValidatedConfig) -> Result<bool> {
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
pub(crate) fn default_env(
    config: &ValidatedConfig,
) -> Result<(EnvFactory, Option<Arc<GymEnvPool>>)> {
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
) -> Result<(EnvFactory, Arc<GymEnvPool>)> {
    let pool = python_pool(config, creator, false);
    pool.probe()?;
    Ok((gym_env_factory(&pool), pool))
}

/// The pool of env worker processes for `config.env` (or the envs of a pickled `creator`),
/// whose workers send infos with `record_infos`; starts no worker.
pub(crate) fn python_pool(
    config: &ValidatedConfig,
    creator: Option<PathBuf>,
    record_infos: bool,
) -> Arc<GymEnvPool> {
    let mut settings = settings::python_envs(config);
    settings.creator = creator;
    settings.record_infos = record_infos;
    Arc::new(GymEnvPool::new(settings))
}

/// Single-agent envs from `pool`'s workers, each runner's envs its own.
fn gym_env_factory(pool: &Arc<GymEnvPool>) -> EnvFactory {
    let making = Arc::clone(pool);
    Arc::new(move |ctx: &EnvContext| {
        let env = making.make(ctx.runner_index, ctx.incarnation, ctx.env_index)?;
        Ok(Box::new(env) as Box<dyn Env>)
    })
}

/// The spec of the envs `factory` builds (it builds one).
pub(crate) fn env_spec(config: &ValidatedConfig, factory: &EnvFactory) -> Result<EnvSpec> {
    Ok(factory(&EnvContext::new(0, 0, config.config().seed, config.config().env_config.clone()))?
        .spec()
        .clone())
}

/// Refuses `multi_agent()` options for a single-agent env.
pub(crate) fn check_single_agent(config: &ValidatedConfig) -> Result<()> {
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

/// One env of `config.env` from the registry, as the local runner (worker index 0) builds it:
/// an unknown id or bad `env_config` is the registry's error.
pub(crate) fn probe_native(
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
        let envs = single_agent_envs(&config, Some(seven))?;
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
}
