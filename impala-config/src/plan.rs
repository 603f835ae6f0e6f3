//! How the learner's work maps onto devices: RLlib's old-stack `num_gpus` (towers of one
//! `MultiGPULearnerThread`) and new-stack `num_learners` x `num_gpus_per_learner` both become
//! one learner process with `num_devices` towers, each taking an equal share of the train batch.

use std::fmt;

use impala_core::LearnerDeviceKind;

use crate::config::ImpalaConfig;

/// The learner's device plan, from a config: how many towers on what, which learner thread
/// (RLlib's `LearnerThread` or `MultiGPULearnerThread`), and the batch sizes.
///
/// ```
/// use impala_config::{ImpalaConfig, LearnerDeviceKind};
///
/// let config = ImpalaConfig::default()
///     .learners(|l| l.num_learners(2).num_gpus_per_learner(1.0))
///     .training(|t| t.train_batch_size_per_learner(Some(256)));
/// let plan = config.learner_plan();
/// assert_eq!((plan.kind, plan.num_devices), (LearnerDeviceKind::Cuda, 2));
/// assert_eq!((plan.train_batch_size, plan.per_device_batch_size), (512, 256));
/// assert!(plan.multi_gpu_thread);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LearnerPlan {
    /// What the towers run on.
    pub kind: LearnerDeviceKind,
    /// Towers (devices), at least 1.
    pub num_devices: usize,
    /// Whether the `MultiGPULearnerThread` (loader threads, tower stacks) trains, rather than
    /// the single-device `LearnerThread`: used for GPUs and for more than one tower, unless
    /// `simple_optimizer` asks for the simple thread.
    pub multi_gpu_thread: bool,
    /// Env steps per train batch the driver builds (all learners together; RLlib's
    /// `total_train_batch_size`).
    pub train_batch_size: usize,
    /// Env steps each tower trains on per step: `train_batch_size / num_devices`.
    pub per_device_batch_size: usize,
}

impl LearnerPlan {
    /// Whether any tower runs on a real GPU.
    pub fn uses_cuda(&self) -> bool {
        self.kind == LearnerDeviceKind::Cuda
    }
}

impl fmt::Display for LearnerPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            LearnerDeviceKind::Cpu => "CPU",
            LearnerDeviceKind::FakeGpu => "fake GPU (CPU)",
            LearnerDeviceKind::Cuda => "CUDA",
        };
        let thread = if self.multi_gpu_thread { "MultiGPULearnerThread" } else { "LearnerThread" };
        write!(
            f,
            "{} {what} tower(s) in one {thread}; train batch {} env steps, {} per tower",
            self.num_devices, self.train_batch_size, self.per_device_batch_size
        )
    }
}

impl ImpalaConfig {
    /// The learner's device plan (see [`LearnerPlan`]). Old stack: `ceil(num_gpus)` devices,
    /// CUDA (or fake GPUs with `_fake_gpus`), CPU when 0. New stack: `max(num_learners, 1)`
    /// learners with `num_gpus_per_learner` GPUs each (a fraction below 1 shares one GPU), CPU
    /// towers when 0. Validation refuses configs that set both.
    pub fn learner_plan(&self) -> LearnerPlan {
        let learners = self.num_learners.max(1);
        // Both are validated finite and >= 0; silly values saturate instead of panicking.
        let (gpus, kind) = if self.num_gpus_per_learner > 0.0 {
            let per_learner = (self.num_gpus_per_learner.ceil() as usize).max(1);
            (learners.saturating_mul(per_learner), self.gpu_kind())
        } else if self.num_gpus > 0.0 {
            ((self.num_gpus.ceil() as usize).max(1), self.gpu_kind())
        } else {
            (0, LearnerDeviceKind::Cpu)
        };
        let num_devices = if gpus == 0 { learners } else { gpus };
        let train_batch_size = self.total_train_batch_size();
        LearnerPlan {
            kind,
            num_devices,
            multi_gpu_thread: !self.simple_optimizer
                && (num_devices > 1 || kind != LearnerDeviceKind::Cpu),
            train_batch_size,
            per_device_batch_size: train_batch_size / num_devices,
        }
    }

    fn gpu_kind(&self) -> LearnerDeviceKind {
        if self.fake_gpus {
            LearnerDeviceKind::FakeGpu
        } else {
            LearnerDeviceKind::Cuda
        }
    }
}
