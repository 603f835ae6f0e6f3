//! The small settings this crate reads, built once from a validated config.
//!
//! Only [`ImpalaConfig::validate`](impala_config::ImpalaConfig::validate) makes the config the
//! algorithm takes; the learner gets the few values it uses as typed settings, so it can be
//! built without the whole RLlib config (every field is public) and never re-checks it.

use std::num::NonZeroUsize;
use std::time::Duration;

use impala_config::{
    LearnerDeviceKind, LearnerPlan, LossReduction, ModelConfig, OptType, Schedule, ValidatedConfig,
};
use tch::Device;

use crate::{LearnerError, Result};

/// The shortest wait for a train batch [`LearnerThreadSettings::from_config`] makes: validation
/// allows `learner_queue_timeout = 0`, and a thread that polls an empty queue without waiting
/// only burns a core counting stalls.
pub const MIN_LEARNER_QUEUE_TIMEOUT: Duration = Duration::from_millis(1);

/// The loss of RLlib's old-stack torch IMPALA policy (`VTraceLoss`, or the A3C loss), under
/// RLlib's key names.
#[derive(Debug, Clone, PartialEq)]
pub struct LossSettings {
    /// The discount (`gamma`).
    pub gamma: f64,
    /// V-trace targets (`vtrace`); false is the A3C loss with GAE(lambda = 1) advantages.
    pub vtrace: bool,
    /// V-trace's `rho_bar` (`vtrace_clip_rho_threshold`); `None` does not clip.
    pub vtrace_clip_rho_threshold: Option<f64>,
    /// V-trace's `pg_rho_bar` (`vtrace_clip_pg_rho_threshold`); `None` does not clip.
    pub vtrace_clip_pg_rho_threshold: Option<f64>,
    /// Train on `T - 1` steps and bootstrap from the dropped step's value
    /// (`vtrace_drop_last_ts`).
    pub vtrace_drop_last_ts: bool,
    /// Sum the loss terms over the batch or take their mean over its steps (`loss_reduction`).
    pub loss_reduction: LossReduction,
    /// Weight of the value loss in the total loss (`vf_loss_coeff`).
    pub vf_loss_coeff: f64,
    /// Entropy bonus (`entropy_coeff`), unless `entropy_coeff_schedule` is set.
    pub entropy_coeff: f64,
    /// The entropy coefficient over agent steps trained (`entropy_coeff_schedule`).
    pub entropy_coeff_schedule: Option<Schedule>,
}

impl LossSettings {
    /// The entropy coefficient after `timestep` agent steps trained.
    pub fn entropy_coeff_at(&self, timestep: u64) -> f64 {
        self.entropy_coeff_schedule.as_ref().map_or(self.entropy_coeff, |s| s.value_at(timestep))
    }
}

/// The optimizer(s): update rule, learning rates and gradient clipping, under RLlib's key names.
#[derive(Debug, Clone, PartialEq)]
pub struct OptimizerSettings {
    /// Adam or RMSprop (`opt_type`).
    pub opt_type: OptType,
    /// The learning rate (`lr`), unless `lr_schedule` is set.
    pub lr: f64,
    /// The learning rate over agent steps trained (`lr_schedule`).
    pub lr_schedule: Option<Schedule>,
    /// Global-norm gradient clipping per optimizer (`grad_clip`); `None` does not clip.
    pub grad_clip: Option<f64>,
    /// RMSprop's `eps` (`epsilon`).
    pub epsilon: f64,
    /// RMSprop's squared-gradient decay, torch's `alpha` (`decay`).
    pub decay: f64,
    /// RMSprop's momentum (`momentum`).
    pub momentum: f64,
    /// Train the value-only parameters with their own optimizer on the value loss
    /// (`_separate_vf_optimizer`).
    pub separate_vf_optimizer: bool,
    /// The value optimizer's learning rate (`_lr_vf`), with `separate_vf_optimizer`.
    pub lr_vf: f64,
}

impl OptimizerSettings {
    /// The learning rate after `timestep` agent steps trained.
    pub fn lr_at(&self, timestep: u64) -> f64 {
        self.lr_schedule.as_ref().map_or(self.lr, |s| s.value_at(timestep))
    }
}

/// What a [`Learner`](crate::Learner) is built from: the model, the seed of its initial
/// weights, the loss and the optimizer.
///
/// ```
/// use impala_config::ImpalaConfig;
/// use impala_learner::LearnerSettings;
///
/// let config = ImpalaConfig::default().training(|t| t.lr(1e-3)).validate()?;
/// let mut settings = LearnerSettings::from_config(&config);
/// assert_eq!((settings.optimizer.lr, settings.model_seed), (1e-3, 0));
/// settings.model_seed = 7; // e.g. a fresh seed for a run without `seed`
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct LearnerSettings {
    /// The model (`model`).
    pub model: ModelConfig,
    /// Seeds the initial weights; a [`TorchPolicy`](crate::TorchPolicy) built with the same
    /// seed starts with the same weights.
    pub model_seed: u64,
    /// The loss.
    pub loss: LossSettings,
    /// The optimizer(s).
    pub optimizer: OptimizerSettings,
}

impl LearnerSettings {
    /// The learner's settings from a validated config; the model seed is `seed`, or 0 when
    /// the config has none (a caller that wants a fresh seed overrides `model_seed`).
    pub fn from_config(config: &ValidatedConfig) -> Self {
        LearnerSettings {
            model: config.model.clone(),
            model_seed: config.seed.unwrap_or(0),
            loss: LossSettings {
                gamma: config.gamma,
                vtrace: config.vtrace,
                vtrace_clip_rho_threshold: config.vtrace_clip_rho_threshold,
                vtrace_clip_pg_rho_threshold: config.vtrace_clip_pg_rho_threshold,
                vtrace_drop_last_ts: config.vtrace_drop_last_ts,
                loss_reduction: config.loss_reduction,
                vf_loss_coeff: config.vf_loss_coeff,
                entropy_coeff: config.entropy_coeff,
                entropy_coeff_schedule: config.entropy_coeff_schedule.clone(),
            },
            optimizer: OptimizerSettings {
                opt_type: config.opt_type,
                lr: config.lr,
                lr_schedule: config.lr_schedule.clone(),
                grad_clip: config.grad_clip,
                epsilon: config.epsilon,
                decay: config.decay,
                momentum: config.momentum,
                separate_vf_optimizer: config.separate_vf_optimizer,
                lr_vf: config.lr_vf,
            },
        }
    }
}

/// What [`LearnerHandle::spawn`](crate::LearnerHandle::spawn) reads: RLlib's
/// `LearnerThread` / `MultiGPULearnerThread` options. Counts and sizes are [`NonZeroUsize`] and
/// the timeout a [`Duration`], so a settings value cannot ask for an empty queue or zero passes.
///
/// ```
/// use impala_config::ImpalaConfig;
/// use impala_learner::LearnerThreadSettings;
///
/// let config = ImpalaConfig::default()
///     .resources(|r| r.num_gpus(2.0).fake_gpus(true))
///     .validate()?;
/// let settings = LearnerThreadSettings::from_config(&config);
/// assert!(settings.multi_gpu_thread);
/// assert_eq!(settings.learner_queue_size.get(), 16);
/// assert_eq!(settings.learner_queue_timeout, std::time::Duration::from_secs(300));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LearnerThreadSettings {
    /// Train batches the inqueue holds (`learner_queue_size`).
    pub learner_queue_size: NonZeroUsize,
    /// How long the thread waits for data before it counts a stall and waits again
    /// (`learner_queue_timeout`). [`LearnerThreadSettings::from_config`] makes it at least
    /// [`MIN_LEARNER_QUEUE_TIMEOUT`]; a zero set by hand makes the thread poll without waiting.
    pub learner_queue_timeout: Duration,
    /// Passes over each train batch (`num_sgd_iter`).
    pub num_sgd_iter: NonZeroUsize,
    /// Slots of the `LearnerThread`'s minibatch buffer (`minibatch_buffer_size`).
    pub minibatch_buffer_size: NonZeroUsize,
    /// Tower stacks the loader threads fill (`num_multi_gpu_tower_stacks`); also the
    /// `MultiGPULearnerThread`'s buffer slots.
    pub num_multi_gpu_tower_stacks: NonZeroUsize,
    /// Loader threads of the `MultiGPULearnerThread` (`num_gpu_loader_threads`, at most one
    /// per tower stack is used).
    pub num_gpu_loader_threads: NonZeroUsize,
    /// libtorch intra-op threads of the learner thread (`num_learner_threads`).
    pub num_learner_threads: NonZeroUsize,
    /// Run the `MultiGPULearnerThread` (loader threads, tower stacks) rather than the
    /// single-device `LearnerThread` ([`LearnerPlan::multi_gpu_thread`]: GPUs or more than one
    /// tower, unless `simple_optimizer`).
    pub multi_gpu_thread: bool,
}

impl LearnerThreadSettings {
    /// The learner thread's settings from a validated config.
    pub fn from_config(config: &ValidatedConfig) -> Self {
        // Validation refuses zero for every count; should one slip through, the smallest
        // working value beats a panic.
        let count = |n: usize| NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN);
        // Validation guarantees a finite timeout >= 0, where try_from cannot fail.
        let timeout = Duration::try_from_secs_f64(config.learner_queue_timeout)
            .unwrap_or(MIN_LEARNER_QUEUE_TIMEOUT)
            .max(MIN_LEARNER_QUEUE_TIMEOUT);
        LearnerThreadSettings {
            learner_queue_size: count(config.learner_queue_size),
            learner_queue_timeout: timeout,
            num_sgd_iter: count(config.num_sgd_iter),
            minibatch_buffer_size: count(config.minibatch_buffer_size),
            num_multi_gpu_tower_stacks: count(config.num_multi_gpu_tower_stacks),
            num_gpu_loader_threads: count(config.num_gpu_loader_threads),
            num_learner_threads: count(config.num_learner_threads),
            multi_gpu_thread: config.learner_plan().multi_gpu_thread,
        }
    }
}

/// The devices of a learner plan's towers: `num_devices` CPUs for CPU towers and fake GPUs,
/// else CUDA devices `0..num_devices`, or [`LearnerError::NoCuda`] when libtorch sees fewer.
///
/// ```
/// use impala_config::ImpalaConfig;
///
/// let config = ImpalaConfig::default()
///     .resources(|r| r.num_gpus(2.0).fake_gpus(true))
///     .validate()?;
/// let devices = impala_learner::learner_devices(&config.learner_plan())?;
/// assert_eq!(devices, vec![tch::Device::Cpu; 2]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn learner_devices(plan: &LearnerPlan) -> Result<Vec<Device>> {
    let n = plan.num_devices;
    match plan.kind {
        LearnerDeviceKind::Cpu | LearnerDeviceKind::FakeGpu => Ok(vec![Device::Cpu; n]),
        LearnerDeviceKind::Cuda => {
            let available = tch::Cuda::device_count();
            if usize::try_from(available).map_or(true, |a| a < n) {
                return Err(LearnerError::NoCuda { requested: n, available });
            }
            Ok((0..n).map(Device::Cuda).collect())
        }
    }
}
