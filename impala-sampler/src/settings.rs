//! The sampler's settings: what it reads of the config, in types that rule out bad values, so
//! it never re-checks them. Build them from a validated config with `from_config`, or start
//! from `Default` (RLlib's defaults) and set fields to use the sampler on its own.

use std::num::NonZeroUsize;
use std::time::Duration;

use impala_config::{ImpalaConfig, ValidatedConfig};
use impala_envs::EnvConfig;

/// A count the config validated as positive; 1 if it somehow is not (never panics).
fn positive(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN)
}

/// A wait the config validated as finite and >= 0; `None` (no deadline) when it is too long to
/// represent.
fn wait(seconds: f64) -> Option<Duration> {
    Duration::try_from_secs_f64(seconds.max(0.0)).ok()
}

/// What one env runner needs (RLlib's `env_runners()` and `environment()` options).
#[derive(Debug, Clone, PartialEq)]
pub struct EnvRunnerSettings {
    /// Environments stepped together (`num_envs_per_env_runner`).
    pub num_envs: NonZeroUsize,
    /// Steps per row of a fragment (`rollout_fragment_length`).
    pub rollout_fragment_length: NonZeroUsize,
    /// Clip rewards to `[-c, c]` in the fragments (episode returns stay unclipped).
    pub clip_rewards: Option<f64>,
    /// Clip `Box` actions to the space's bounds before stepping the envs.
    pub clip_actions: bool,
    /// Sample actions (`true`) or act greedily (evaluation with `explore = false`).
    pub explore: bool,
    /// Base seed of the envs (see [`EnvContext::new`](crate::EnvContext::new)).
    pub seed: Option<u64>,
    /// Passed to the env factory unchanged.
    pub env_config: EnvConfig,
}

impl EnvRunnerSettings {
    /// The settings of a sampling runner of `config`.
    pub fn from_config(config: &ValidatedConfig) -> Self {
        Self::from_fields(config)
    }

    fn from_fields(config: &ImpalaConfig) -> Self {
        EnvRunnerSettings {
            num_envs: positive(config.num_envs_per_env_runner),
            rollout_fragment_length: positive(config.rollout_fragment_length),
            clip_rewards: config.clip_rewards,
            clip_actions: config.clip_actions,
            explore: true,
            seed: config.seed,
            env_config: config.env_config.clone(),
        }
    }
}

impl Default for EnvRunnerSettings {
    fn default() -> Self {
        Self::from_fields(&ImpalaConfig::default())
    }
}

/// What an [`EnvRunnerGroup`](crate::EnvRunnerGroup) needs: its runners' settings, how many,
/// the in-flight cap, the collection timeout and the restart policy.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvRunnerGroupSettings {
    /// Env runners (`num_env_runners`; 0 samples on the calling thread).
    pub num_env_runners: usize,
    /// Each runner's settings.
    pub runner: EnvRunnerSettings,
    /// Uncollected fragments allowed per runner (`max_requests_in_flight_per_env_runner`).
    pub max_requests_in_flight: NonZeroUsize,
    /// How long [`sample`](crate::EnvRunnerGroup::sample) waits for fragments in flight
    /// (`timeout_s_sampler_manager`); `None` waits for all of them.
    pub sample_timeout: Option<Duration>,
    /// Rebuild failed runners (`restart_failed_env_runners`).
    pub restart_failed_env_runners: bool,
    /// Restarts allowed over the group's life (`max_num_env_runner_restarts`).
    pub max_num_env_runner_restarts: usize,
    /// How long stopping waits for the runners to end, all together (`shutdown_grace_s`);
    /// `None` waits for all of them.
    pub stop_grace: Option<Duration>,
}

impl EnvRunnerGroupSettings {
    /// The sampling runners of `config`.
    pub fn from_config(config: &ValidatedConfig) -> Self {
        Self::from_fields(config)
    }

    /// The evaluation runners of `config` (RLlib's evaluation `EnvRunnerGroup`):
    /// `evaluation_num_env_runners` runners of one env each (so short episodes are not
    /// favoured), acting greedily unless `evaluation_explore`, seeded apart from the sampling
    /// runners by `seed_offset`.
    pub fn evaluation_from_config(config: &ValidatedConfig, seed_offset: u64) -> Self {
        let mut settings = Self::from_fields(config);
        settings.num_env_runners = config.evaluation_num_env_runners;
        settings.max_requests_in_flight = NonZeroUsize::MIN;
        settings.runner.num_envs = NonZeroUsize::MIN;
        settings.runner.explore = config.evaluation_explore;
        settings.runner.seed = config.seed.map(|s| s.wrapping_add(seed_offset));
        settings
    }

    fn from_fields(config: &ImpalaConfig) -> Self {
        EnvRunnerGroupSettings {
            num_env_runners: config.num_env_runners,
            runner: EnvRunnerSettings::from_fields(config),
            max_requests_in_flight: positive(config.max_requests_in_flight_per_sampler_worker),
            sample_timeout: wait(config.timeout_s_sampler_manager),
            restart_failed_env_runners: config.restart_failed_env_runners,
            max_num_env_runner_restarts: config.max_num_env_runner_restarts,
            stop_grace: wait(config.shutdown_grace_s),
        }
    }
}

impl Default for EnvRunnerGroupSettings {
    fn default() -> Self {
        Self::from_fields(&ImpalaConfig::default())
    }
}

/// What the batching stage needs: the train batch size, mix-in replay, and the aggregation
/// workers (RLlib's `AggregatorWorker`s) that run the replay off the driver thread.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchingSettings {
    /// Env steps per train batch, all learners together (RLlib's `total_train_batch_size`).
    pub train_batch_size: NonZeroUsize,
    /// Replayed batches per new batch on average (`replay_proportion`).
    pub replay_proportion: f64,
    /// Sample batches kept for replay (`replay_buffer_num_slots`).
    pub replay_buffer_num_slots: usize,
    /// Seed of the replay RNG.
    pub seed: Option<u64>,
    /// Aggregation worker threads (`num_aggregation_workers`; 0 = replay on the driver).
    pub num_aggregation_workers: usize,
    /// Unprocessed batches allowed per aggregation worker.
    pub max_requests_in_flight_per_aggregator_worker: NonZeroUsize,
    /// How long [`TrainBatchBuilder::ready`](crate::TrainBatchBuilder::ready) waits for the
    /// workers (`timeout_s_aggregator_manager`); `None` waits for all of them.
    pub aggregator_timeout: Option<Duration>,
}

impl BatchingSettings {
    /// The batching stage of `config`.
    pub fn from_config(config: &ValidatedConfig) -> Self {
        Self::from_fields(config)
    }

    fn from_fields(config: &ImpalaConfig) -> Self {
        BatchingSettings {
            train_batch_size: positive(config.learner_plan().train_batch_size),
            replay_proportion: config.replay_proportion,
            replay_buffer_num_slots: config.replay_buffer_num_slots,
            seed: config.seed,
            num_aggregation_workers: config.num_aggregation_workers,
            max_requests_in_flight_per_aggregator_worker: positive(
                config.max_requests_in_flight_per_aggregator_worker,
            ),
            aggregator_timeout: wait(config.timeout_s_aggregator_manager),
        }
    }
}

impl Default for BatchingSettings {
    fn default() -> Self {
        Self::from_fields(&ImpalaConfig::default())
    }
}
