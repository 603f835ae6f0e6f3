//! Validation problems ([`Violation`]) and warnings ([`Warning`]): returned, never printed.

use std::fmt;

/// The rule a [`Violation`] broke; tests and callers match on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Rule {
    /// `entropy_coeff >= 0` (RLlib's `validate_config`).
    EntropyCoeffNonNegative,
    /// `num_aggregation_workers <= num_env_runners` (RLlib's `validate_config`).
    AggregationWorkersWithinEnvRunners,
    /// The train batch splits evenly over the learner's devices (RLlib's
    /// `MultiGPULearnerThread` asserts `train_batch_size % len(devices) == 0`).
    TrainBatchDivisibleByDevices,
    /// `_separate_vf_optimizer` needs `_lr_vf > 0`.
    SeparateVfOptimizer,
    /// A size or count that must be at least 1.
    PositiveSize,
    /// A clip threshold that must be a finite number > 0 when set (`none` turns it off).
    PositiveThreshold,
    /// A rate that must be a finite number > 0 (`lr`, `epsilon`).
    PositiveNumber,
    /// A finite number that must be >= 0 (timeouts, coefficients, resources).
    NonNegativeNumber,
    /// An option in seconds above `MAX_SECONDS` (1e9, about 31 years), the longest wait.
    TooManySeconds,
    /// `gamma` in `[0, 1]`.
    GammaInUnitInterval,
    /// A schedule that is empty, unsorted, or has a non-finite or negative value.
    Schedule,
    /// `replay_proportion > 0` needs `replay_buffer_num_slots > 0`.
    ReplayNeedsSlots,
    /// An activation name the models do not know.
    ActivationName,
    /// `model.custom_model` names neither a built-in model nor a TorchScript file, or its
    /// `custom_model_config` does not fit it.
    CustomModel,
    /// A log level that is not TRACE, DEBUG, INFO, WARN or ERROR.
    LogLevel,
    /// More than one GPU must be a whole number of GPUs.
    WholeGpus,
    /// The environment id is empty.
    EnvName,
    /// GPUs asked for both the old way (`num_gpus`) and the new way (`num_gpus_per_learner`).
    LearnerGpusTwice,
    /// `simple_optimizer` (the single-device `LearnerThread`) with more than one learner tower.
    SimpleOptimizerOneDevice,
    /// `vtrace_drop_last_ts` needs fragments of at least 2 steps.
    DropLastTsNeedsTwoSteps,
    /// `evaluation_parallel_to_training` needs evaluation env runners.
    ParallelEvaluationNeedsRunners,
    /// `remote_worker_envs` (one env per worker) with a different `num_envs_per_env_worker`.
    EnvWorkersTwice,
    /// A Ray scheduling option that has nothing to act on in impala-rs (placement strategy,
    /// custom resources, GPUs for env runners, whose policies infer on the CPU).
    NotSupported,
    /// `env_config.frameskip = 1` for an Atari game: RLlib's Atari configs set it because their
    /// wrapper skips frames, but ale-py's vector env is the only skipping here, so it would
    /// turn action repeat off.
    AtariFrameskip,
    /// `env_config.crop` for an Atari game that is not a table of sides (`top`, `bottom`,
    /// `left`, `right`) in pixels, leaves nothing of the screen, or comes with colour frames.
    AtariCrop,
    /// A count above what impala-rs lets one run or command take on (evaluation episodes).
    AboveLimit,
}

/// One problem found by [`crate::ImpalaConfig::validate`]: what, where and how to fix it.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    /// The offending key (`model.fcnet_activation`, `lr_schedule[2]`).
    pub key: String,
    /// The rule broken.
    pub rule: Rule,
    /// What is wrong, with the value found.
    pub problem: String,
    /// How to fix it.
    pub fix: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}`: {}; fix: {}", self.key, self.problem, self.fix)
    }
}

/// What a [`Warning`] is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WarningKind {
    /// A deprecated key was used; its value went to `new`.
    DeprecatedKey {
        /// The deprecated spelling.
        old: String,
        /// The key that now holds the value.
        new: String,
    },
    /// `num_aggregation_workers > num_env_runners / 2` (RLlib's warning).
    AggregationWorkersAboveHalf,
    /// `minibatch_buffer_size` was lowered to `num_multi_gpu_tower_stacks` (RLlib's fix-up in
    /// `make_learner_thread`).
    MinibatchBufferLowered {
        /// The configured size.
        from: usize,
        /// The size used.
        to: usize,
    },
    /// `minibatch_buffer_size > 1` has no effect with `num_sgd_iter = 1`.
    MinibatchBufferUnused,
    /// A train batch is smaller than one sample batch from an env runner.
    TrainBatchSmallerThanSampleBatch,
    /// Concatenated sample batches overshoot `train_batch_size`.
    TrainBatchNotMultipleOfSampleBatch,
    /// A schedule starts after timestep 0 (RLlib uses its last value there; impala-rs holds
    /// the first value).
    ScheduleStartsAfterZero,
    /// `_lr_vf` was changed but `_separate_vf_optimizer` is off, so it is ignored.
    LrVfIgnored,
    /// `lr` differs from where `lr_schedule` starts; the schedule wins, as in RLlib.
    LrIgnoredBySchedule,
    /// An override set `lr` (`entropy_coeff`) alone, so the config's schedule of it was
    /// dropped.
    ScheduleReplacedByOverride,
    /// `_separate_vf_optimizer` with shared layers: only the value head gets `_lr_vf`.
    SeparateVfOptimizerSharedLayers,
    /// `vf_loss_coeff` was changed but `_separate_vf_optimizer` minimises the value loss
    /// unweighted (as RLlib's does), so the coefficient only weighs the reported total_loss.
    VfLossCoeffIgnored,
    /// The request asks for more CPUs than the machine has; threads will time-share.
    CpusOversubscribed,
    /// An Atari game with `env_config.frameskip` other than IMPALA's 4 (ale-py repeats each
    /// action that many frames).
    AtariFrameskip,
}

/// Something the user should know but that does not stop training.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// The key it is about.
    pub key: String,
    /// What it is about.
    pub kind: WarningKind,
    /// The explanation, with the fix when there is one.
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}`: {}", self.key, self.message)
    }
}
