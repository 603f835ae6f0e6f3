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
