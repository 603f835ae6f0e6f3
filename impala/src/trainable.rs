//! [`Trainable`]: what a training run drives (Tune's `Trainable`, which RLlib's `Algorithm`
//! is): one call per iteration, checkpoints, an interrupt and a stop. [`Impala`](crate::Impala)
//! trains one agent, [`MultiAgentImpala`](crate::MultiAgentImpala) several policies; the run
//! loop ([`crate::run::run`]) and `impala train` take either.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use impala_config::ValidatedConfig;

use crate::{EvaluationResult, IterationResult, Result};

/// An algorithm a run trains: RLlib's `Algorithm` methods that Tune calls.
pub trait Trainable: Send + std::fmt::Debug {
    /// The config it was built from.
    fn config(&self) -> &ValidatedConfig;
    /// Iterations completed.
    fn iteration(&self) -> u64;
    /// Runs one training iteration.
    fn train(&mut self) -> Result<IterationResult>;
    /// Runs the evaluation episodes the config asks for.
    fn evaluate(&mut self) -> Result<EvaluationResult>;
    /// Saves a checkpoint `dir/checkpoint_<iteration>`; returns its path.
    fn save(&mut self, dir: &Path) -> Result<PathBuf>;
    /// Continues from a checkpoint (a checkpoint folder or a run folder).
    fn restore(&mut self, path: &Path) -> Result<()>;
    /// A flag that, once set, ends the current iteration early.
    fn set_interrupt_flag(&mut self, flag: Arc<AtomicBool>);
    /// Stops every thread, reporting the first failure.
    fn stop(&mut self) -> Result<()>;
}

/// Implements [`Trainable`] by the inherent methods of the same names.
macro_rules! trainable_by_inherent_methods {
    ($algo:ty) => {
        impl $crate::Trainable for $algo {
            fn config(&self) -> &impala_config::ValidatedConfig {
                <$algo>::config(self)
            }
            fn iteration(&self) -> u64 {
                <$algo>::iteration(self)
            }
            fn train(&mut self) -> $crate::Result<$crate::IterationResult> {
                <$algo>::train(self)
            }
            fn evaluate(&mut self) -> $crate::Result<$crate::EvaluationResult> {
                <$algo>::evaluate(self)
            }
            fn save(&mut self, dir: &std::path::Path) -> $crate::Result<std::path::PathBuf> {
                <$algo>::save(self, dir)
            }
            fn restore(&mut self, path: &std::path::Path) -> $crate::Result<()> {
                <$algo>::restore(self, path)
            }
            fn set_interrupt_flag(&mut self, flag: std::sync::Arc<std::sync::atomic::AtomicBool>) {
                <$algo>::set_interrupt_flag(self, flag)
            }
            fn stop(&mut self) -> $crate::Result<()> {
                <$algo>::stop(self)
            }
        }
    };
}
pub(crate) use trainable_by_inherent_methods;

trainable_by_inherent_methods!(crate::Impala);

/// The algorithm a config builds: [`Impala`](crate::Impala) for a single-agent env,
/// [`MultiAgentImpala`](crate::MultiAgentImpala) for a multi-agent one (native, or a Python env
/// with PettingZoo's or RLlib's multi-agent API, known once one is built).
#[derive(Debug)]
pub enum Algorithm {
    /// One policy.
    Single(Box<crate::Impala>),
    /// A multi-agent env's policies.
    Multi(Box<crate::MultiAgentImpala>),
}

impl Algorithm {
    /// Builds the algorithm for `config`: on the envs of a pickled Python `env_creator` when
    /// given (as [`ImpalaBuilder::python_env_creator`](crate::ImpalaBuilder::python_env_creator)),
    /// sampling with the env runners `transport` brings when given.
    pub fn build(
        config: ValidatedConfig,
        env_creator: Option<PathBuf>,
        transport: Option<Arc<dyn impala_runner_pool::RunnerTransport>>,
    ) -> Result<Self> {
        Self::build_restored(config, env_creator, transport, None)
    }

    /// As [`Algorithm::build`], restored from `checkpoint` when given (a checkpoint folder or
    /// a run folder; see [`Trainable::restore`]), with the env runners started once, acting
    /// with the restored weights: none is started only to be replaced by the restore.
    pub fn build_restored(
        config: ValidatedConfig,
        env_creator: Option<PathBuf>,
        transport: Option<Arc<dyn impala_runner_pool::RunnerTransport>>,
        checkpoint: Option<&Path>,
    ) -> Result<Self> {
        let native_multi_agent =
            env_creator.is_none() && impala_envs::is_multi_agent(&config.config().env);
        if !native_multi_agent {
            let mut builder = crate::Impala::builder(config.clone());
            if let Some(creator) = &env_creator {
                builder = builder.python_env_creator(creator.clone());
            }
            if let Some(transport) = &transport {
                builder = builder.remote_env_runners(Arc::clone(transport));
            }
            if let Some(checkpoint) = checkpoint {
                builder = builder.restore_from(checkpoint);
            }
            match builder.build() {
                Ok(algo) => return Ok(Algorithm::Single(Box::new(algo))),
                // A Python multi-agent env, known now that one was built.
                Err(crate::ImpalaError::Gym(impala_gym::GymError::WrongKind { .. })) => {}
                Err(e) => return Err(e),
            }
        }
        let algo = crate::MultiAgentImpala::build(config, env_creator, transport, checkpoint)?;
        Ok(Algorithm::Multi(Box::new(algo)))
    }

    /// The algorithm as a [`Trainable`].
    pub fn trainable(&mut self) -> &mut dyn Trainable {
        match self {
            Algorithm::Single(algo) => algo.as_mut(),
            Algorithm::Multi(algo) => algo.as_mut(),
        }
    }

    /// The config it was built from.
    pub fn config(&self) -> &ValidatedConfig {
        match self {
            Algorithm::Single(algo) => algo.config(),
            Algorithm::Multi(algo) => algo.config(),
        }
    }

    /// Policy `policy_id` with its current weights, acting on the CPU (RLlib's
    /// `algo.get_policy(policy_id)`; a single-agent run has `default_policy`).
    pub fn get_policy(&self, policy_id: &str) -> Result<crate::TrainedPolicy> {
        match self {
            Algorithm::Single(algo) if policy_id == crate::DEFAULT_POLICY_ID => algo.get_policy(),
            Algorithm::Single(_) => Err(crate::ImpalaError::MultiAgentOption {
                key: "policies",
                reason: format!(
                    "there is no policy `{policy_id}`: a single-agent run trains `{}`",
                    crate::DEFAULT_POLICY_ID
                ),
            }),
            Algorithm::Multi(algo) => algo.get_policy(policy_id),
        }
    }

    /// The policy ids: `default_policy`, or a multi-agent run's `policies`.
    pub fn policy_ids(&self) -> Vec<String> {
        match self {
            Algorithm::Single(_) => vec![crate::DEFAULT_POLICY_ID.to_string()],
            Algorithm::Multi(algo) => algo.policy_map().policy_ids.clone(),
        }
    }
}

impl Trainable for Algorithm {
    fn config(&self) -> &ValidatedConfig {
        Algorithm::config(self)
    }
    fn iteration(&self) -> u64 {
        match self {
            Algorithm::Single(algo) => algo.iteration(),
            Algorithm::Multi(algo) => algo.iteration(),
        }
    }
    fn train(&mut self) -> Result<IterationResult> {
        self.trainable().train()
    }
    fn evaluate(&mut self) -> Result<EvaluationResult> {
        self.trainable().evaluate()
    }
    fn save(&mut self, dir: &Path) -> Result<PathBuf> {
        self.trainable().save(dir)
    }
    fn restore(&mut self, path: &Path) -> Result<()> {
        self.trainable().restore(path)
    }
    fn set_interrupt_flag(&mut self, flag: Arc<AtomicBool>) {
        self.trainable().set_interrupt_flag(flag)
    }
    fn stop(&mut self) -> Result<()> {
        self.trainable().stop()
    }
}
