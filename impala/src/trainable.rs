//! [`Trainable`]: what a training run drives (Tune's `Trainable`, which RLlib's `Algorithm`
//! is): one call per iteration, checkpoints, an interrupt and a stop. [`Impala`](crate::Impala)
//! is one; the run loop ([`crate::run::run`]) takes any.

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

impl Trainable for crate::Impala {
    fn config(&self) -> &ValidatedConfig {
        crate::Impala::config(self)
    }
    fn iteration(&self) -> u64 {
        crate::Impala::iteration(self)
    }
    fn train(&mut self) -> Result<IterationResult> {
        crate::Impala::train(self)
    }
    fn evaluate(&mut self) -> Result<EvaluationResult> {
        crate::Impala::evaluate(self)
    }
    fn save(&mut self, dir: &Path) -> Result<PathBuf> {
        crate::Impala::save(self, dir)
    }
    fn restore(&mut self, path: &Path) -> Result<()> {
        crate::Impala::restore(self, path)
    }
    fn set_interrupt_flag(&mut self, flag: Arc<AtomicBool>) {
        crate::Impala::set_interrupt_flag(self, flag)
    }
    fn stop(&mut self) -> Result<()> {
        crate::Impala::stop(self)
    }
}
