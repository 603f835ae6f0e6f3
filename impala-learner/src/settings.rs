//! The small settings this crate reads, under RLlib's key names.
//!
//! The crate never sees the RLlib config: the `impala` crate builds these from a validated
//! config, and a user of the learner alone starts from `Default` (RLlib's defaults) and sets
//! fields. Types rule out what validation refuses (zero counts, unknown activations), so the
//! learner never re-checks them.

use std::num::NonZeroUsize;
use std::time::Duration;

use impala_core::{
    Activation, ConvFilter, CustomModel, GradClipBy, LearnerDeviceKind, LossReduction, OptType,
    Precision, Schedule,
};
use tch::Device;

use crate::{LearnerError, Result};

/// The shortest wait for a train batch worth making: RLlib allows `learner_queue_timeout = 0`,
/// and a thread that polls an empty queue without waiting only burns a core counting stalls.
pub const MIN_LEARNER_QUEUE_TIMEOUT: Duration = Duration::from_millis(1);

/// `n`, which is positive: the defaults' literal counts (the fallback is never taken).
fn count(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN)
}

/// The model of RLlib's catalog (`config.model`, the keys IMPALA uses), with
/// `MODEL_DEFAULTS` values by default.
///
/// ```
/// use impala_learner::ModelSettings;
/// let model = ModelSettings { fcnet_hiddens: vec![64], ..ModelSettings::default() };
/// assert_eq!(model.fcnet_activation.to_string(), "tanh");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSettings {
    /// Hidden layer sizes of the fully connected net (`fcnet_hiddens`).
    pub fcnet_hiddens: Vec<usize>,
    /// Activation of the fully connected net (`fcnet_activation`).
    pub fcnet_activation: Activation,
    /// Conv filters (`conv_filters`); `None` picks RLlib's default for the image size (84, 96,
    /// 64, 42, 10). Every size must be at least 1 ([`ConvFilter::has_zero`]).
    pub conv_filters: Option<Vec<ConvFilter>>,
    /// Activation of the conv layers (`conv_activation`).
    pub conv_activation: Activation,
    /// Hidden layers after the conv stack, or after the fully connected net's
    /// (`post_fcnet_hiddens`).
    pub post_fcnet_hiddens: Vec<usize>,
    /// Activation of `post_fcnet_hiddens` (`post_fcnet_activation`).
    pub post_fcnet_activation: Activation,
    /// Share the torso between the policy and value heads (`vf_share_layers`).
    pub vf_share_layers: bool,
    /// Wrap the torso in an LSTM (`use_lstm`).
    pub use_lstm: bool,
    /// LSTM cell size (`lstm_cell_size`).
    pub lstm_cell_size: NonZeroUsize,
    /// Steps the LSTM is unrolled over at most (`max_seq_len`).
    pub max_seq_len: NonZeroUsize,
    /// A state-independent log-std for Gaussian actions (`free_log_std`).
    pub free_log_std: bool,
    /// A model other than the catalog's (`custom_model` with `custom_model_config`); the
    /// catalog keys above then apply only where that model reads them (`use_lstm`,
    /// `lstm_cell_size` and `max_seq_len` for the ResNet, `max_seq_len` for TorchScript).
    pub custom_model: Option<CustomModel>,
}

impl Default for ModelSettings {
    /// RLlib's `MODEL_DEFAULTS`.
    fn default() -> Self {
        ModelSettings {
            fcnet_hiddens: vec![256, 256],
            fcnet_activation: Activation::Tanh,
            conv_filters: None,
            conv_activation: Activation::Relu,
            post_fcnet_hiddens: vec![],
            post_fcnet_activation: Activation::Relu,
            vf_share_layers: true,
            use_lstm: false,
            lstm_cell_size: count(256),
            max_seq_len: count(20),
            free_log_std: false,
            custom_model: None,
        }
    }
}

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

impl Default for LossSettings {
    /// RLlib's IMPALA defaults.
    fn default() -> Self {
        LossSettings {
            gamma: 0.99,
            vtrace: true,
            vtrace_clip_rho_threshold: Some(1.0),
            vtrace_clip_pg_rho_threshold: Some(1.0),
            vtrace_drop_last_ts: false,
            loss_reduction: LossReduction::Sum,
            vf_loss_coeff: 0.5,
            entropy_coeff: 0.01,
            entropy_coeff_schedule: None,
        }
    }
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
    /// Gradient clipping per optimizer (`grad_clip`); `None` does not clip.
    pub grad_clip: Option<f64>,
    /// What `grad_clip` bounds (`grad_clip_by`).
    pub grad_clip_by: GradClipBy,
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

impl Default for OptimizerSettings {
    /// RLlib's IMPALA defaults.
    fn default() -> Self {
        OptimizerSettings {
            opt_type: OptType::Adam,
            lr: 5e-4,
            lr_schedule: None,
            grad_clip: Some(40.0),
            grad_clip_by: GradClipBy::GlobalNorm,
            epsilon: 0.1,
            decay: 0.99,
            momentum: 0.0,
            separate_vf_optimizer: false,
            lr_vf: 5e-4,
        }
    }
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
/// use impala_learner::LearnerSettings;
///
/// let mut settings = LearnerSettings::default();
/// settings.optimizer.lr = 1e-3;
/// settings.model_seed = 7;
/// assert_eq!((settings.optimizer.lr, settings.loss.gamma), (1e-3, 0.99));
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LearnerSettings {
    /// The model (`model`).
    pub model: ModelSettings,
    /// Seeds the initial weights; a [`TorchPolicy`](crate::TorchPolicy) built with the same
    /// seed starts with the same weights.
    pub model_seed: u64,
    /// The loss.
    pub loss: LossSettings,
    /// The optimizer(s).
    pub optimizer: OptimizerSettings,
    /// Precision of the towers' forward passes (`precision`); the optimizer state and the
    /// weights stay float32 either way.
    pub precision: Precision,
}

/// What [`LearnerHandle::spawn`](crate::LearnerHandle::spawn) reads: RLlib's
/// `LearnerThread` / `MultiGPULearnerThread` options. Counts and sizes are [`NonZeroUsize`] and
/// the timeout a [`Duration`], so a settings value cannot ask for an empty queue or zero passes.
///
/// ```
/// use impala_learner::LearnerThreadSettings;
///
/// let settings = LearnerThreadSettings::default();
/// assert!(!settings.multi_gpu_thread);
/// assert_eq!(settings.learner_queue_size.get(), 16);
/// assert_eq!(settings.learner_queue_timeout, std::time::Duration::from_secs(300));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LearnerThreadSettings {
    /// Train batches the inqueue holds (`learner_queue_size`).
    pub learner_queue_size: NonZeroUsize,
    /// How long the thread waits for data before it counts a stall and waits again
    /// (`learner_queue_timeout`); the `impala` crate makes it at least
    /// [`MIN_LEARNER_QUEUE_TIMEOUT`], a zero set by hand makes the thread poll without waiting.
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
    /// single-device `LearnerThread`: GPUs or more than one tower, unless `simple_optimizer`.
    pub multi_gpu_thread: bool,
}

impl Default for LearnerThreadSettings {
    /// RLlib's IMPALA defaults, on one CPU tower.
    fn default() -> Self {
        LearnerThreadSettings {
            learner_queue_size: count(16),
            learner_queue_timeout: Duration::from_secs(300),
            num_sgd_iter: count(1),
            minibatch_buffer_size: count(1),
            num_multi_gpu_tower_stacks: count(1),
            num_gpu_loader_threads: count(8),
            num_learner_threads: count(1),
            multi_gpu_thread: false,
        }
    }
}

/// The devices of `n` towers of `kind`: `n` CPUs for CPU towers and fake GPUs, else CUDA
/// devices `0..n`, or [`LearnerError::NoCuda`] when libtorch sees fewer.
///
/// ```
/// use impala_core::LearnerDeviceKind;
///
/// let devices = impala_learner::learner_devices(LearnerDeviceKind::FakeGpu, 2)?;
/// assert_eq!(devices, vec![tch::Device::Cpu; 2]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn learner_devices(kind: LearnerDeviceKind, n: usize) -> Result<Vec<Device>> {
    match kind {
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
