//! The sampler's settings, under RLlib's key names, in types that rule out bad values, so it
//! never re-checks them. The crate never sees the RLlib config: the `impala` crate builds these
//! from a validated config; a user of the sampler alone starts from `Default` (RLlib's
//! defaults) and sets fields.

use std::num::NonZeroUsize;
use std::time::Duration;

use impala_envs::EnvConfig;

/// `n`, which is positive; a literal default, so the fallback is never taken.
fn count(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN)
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
    /// Clip `Box` actions to the space's bounds before stepping the envs (without
    /// `normalize_actions`; see [`EnvActions`](impala_core::EnvActions)).
    pub clip_actions: bool,
    /// The policy acts in `[-1, 1]`, mapped onto a bounded `Box` action space's bounds
    /// ([`EnvActions`](impala_core::EnvActions)).
    pub normalize_actions: bool,
    /// Sample actions (`true`) or act greedily (evaluation with `explore = false`).
    pub explore: bool,
    /// Base seed of the envs (see [`EnvContext::new`](crate::EnvContext::new)).
    pub seed: Option<u64>,
    /// Passed to the env factory unchanged.
    pub env_config: EnvConfig,
    /// Record every episode step by step into the fragments
    /// ([`Fragment::episode_records`](crate::Fragment::episode_records)), for callbacks that
    /// replay them; off, the runner pays nothing for it.
    pub record_episodes: bool,
}

impl Default for EnvRunnerSettings {
    /// RLlib's defaults: one env per runner, fragments of 50 steps, no clipping, normalised
    /// `Box` actions, sampling; no episode records.
    fn default() -> Self {
        EnvRunnerSettings {
            num_envs: NonZeroUsize::MIN,
            rollout_fragment_length: count(50),
            clip_rewards: None,
            clip_actions: false,
            normalize_actions: true,
            explore: true,
            seed: None,
            env_config: EnvConfig::default(),
            record_episodes: false,
        }
    }
}

/// What an [`EnvRunnerGroup`](crate::EnvRunnerGroup) needs: its runners' settings, how many,
/// the in-flight cap, the collection timeout and the restart policy.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvRunnerGroupSettings {
    /// Env runners (`num_env_runners`; 0 samples on the calling thread).
    pub num_env_runners: usize,
    /// Each runner's settings. Multi-agent runners take only `num_envs` from them (their
    /// sampling is a [`MultiAgentSettings`](crate::MultiAgentSettings)).
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

impl Default for EnvRunnerGroupSettings {
    /// RLlib's defaults: 2 runners, 2 requests in flight each, a zero collection timeout (take
    /// what is ready), restarts on without a cap, 5 s to stop.
    fn default() -> Self {
        EnvRunnerGroupSettings {
            num_env_runners: 2,
            runner: EnvRunnerSettings::default(),
            max_requests_in_flight: count(2),
            sample_timeout: Some(Duration::ZERO),
            restart_failed_env_runners: true,
            max_num_env_runner_restarts: 1000,
            stop_grace: Some(Duration::from_secs(5)),
        }
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

impl Default for BatchingSettings {
    /// RLlib's defaults: batches of 500 env steps, no replay, replay on the driver.
    fn default() -> Self {
        BatchingSettings {
            train_batch_size: count(500),
            replay_proportion: 0.0,
            replay_buffer_num_slots: 0,
            seed: None,
            num_aggregation_workers: 0,
            max_requests_in_flight_per_aggregator_worker: count(2),
            aggregator_timeout: Some(Duration::ZERO),
        }
    }
}
