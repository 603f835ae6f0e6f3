//! The one place a validated config becomes the lower crates' settings (ripgrep's `HiArgs`):
//! impala-sampler, impala-learner, impala-replay and impala-remote never see the RLlib config,
//! and validation has already ruled out what their types cannot hold.
//!
//! ```
//! use impala::config::ImpalaConfig;
//! use impala::settings;
//!
//! let config = ImpalaConfig::default()
//!     .training(|t| t.lr(1e-3).model(|m| m.fcnet_activation("relu")))
//!     .env_runners(|r| r.num_env_runners(3))
//!     .validate()?;
//! let learner = settings::learner(&config);
//! assert_eq!(learner.optimizer.lr, 1e-3);
//! assert_eq!(learner.model.fcnet_activation, impala::core::Activation::Relu);
//! assert_eq!(settings::env_runner_group(&config).num_env_runners, 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::num::NonZeroUsize;

use impala_config::ValidatedConfig;
use impala_learner::{
    LearnerSettings, LearnerThreadSettings, LossSettings, ModelSettings, OptimizerSettings,
    MIN_LEARNER_QUEUE_TIMEOUT,
};
use impala_sampler::{BatchingSettings, EnvRunnerGroupSettings, EnvRunnerSettings};

/// A count validation checked is at least 1 (the fallback is never taken).
fn count(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN)
}

/// One sampling env runner's settings.
pub fn env_runner(config: &ValidatedConfig) -> EnvRunnerSettings {
    let c = config.config();
    EnvRunnerSettings {
        num_envs: count(c.num_envs_per_env_runner),
        rollout_fragment_length: count(c.rollout_fragment_length),
        clip_rewards: c.clip_rewards,
        clip_actions: c.clip_actions,
        normalize_actions: c.normalize_actions,
        explore: true,
        seed: c.seed,
        env_config: c.env_config.clone(),
        // The algorithm asks for records when it replays them (`ImpalaBuilder::record_episodes`).
        record_episodes: false,
    }
}

/// The sampling runners.
pub fn env_runner_group(config: &ValidatedConfig) -> EnvRunnerGroupSettings {
    let c = config.config();
    EnvRunnerGroupSettings {
        num_env_runners: c.num_env_runners,
        runner: env_runner(config),
        max_requests_in_flight: count(c.max_requests_in_flight_per_sampler_worker),
        sample_timeout: Some(config.durations().sampler_manager_timeout),
        restart_failed_env_runners: c.restart_failed_env_runners,
        max_num_env_runner_restarts: c.max_num_env_runner_restarts,
        stop_grace: Some(config.durations().shutdown_grace),
    }
}

/// The evaluation runners (RLlib's evaluation `EnvRunnerGroup`): `evaluation_num_env_runners`
/// runners of one env each (so short episodes are not favoured), acting greedily unless
/// `evaluation_explore`, seeded apart from the sampling runners by `seed_offset`.
pub fn evaluation_runner_group(
    config: &ValidatedConfig,
    seed_offset: u64,
) -> EnvRunnerGroupSettings {
    let c = config.config();
    let mut settings = env_runner_group(config);
    settings.num_env_runners = c.evaluation_num_env_runners;
    settings.max_requests_in_flight = NonZeroUsize::MIN;
    settings.runner.num_envs = NonZeroUsize::MIN;
    settings.runner.explore = c.evaluation_explore;
    settings.runner.seed = c.seed.map(|s| s.wrapping_add(seed_offset));
    settings
}

/// The batching stage: train batches, mix-in replay and the aggregation workers.
pub fn batching(config: &ValidatedConfig) -> BatchingSettings {
    let c = config.config();
    BatchingSettings {
        train_batch_size: count(c.learner_plan().train_batch_size),
        replay_proportion: c.replay_proportion,
        replay_buffer_num_slots: c.replay_buffer_num_slots,
        seed: c.seed,
        num_aggregation_workers: c.num_aggregation_workers,
        max_requests_in_flight_per_aggregator_worker: count(
            c.max_requests_in_flight_per_aggregator_worker,
        ),
        aggregator_timeout: Some(config.durations().aggregator_manager_timeout),
    }
}

/// The model (`model`), with the activations validation parsed.
pub fn model(config: &ValidatedConfig) -> ModelSettings {
    let m = &config.config().model;
    let activations = config.model_activations();
    ModelSettings {
        fcnet_hiddens: m.fcnet_hiddens.clone(),
        fcnet_activation: activations.fcnet,
        conv_filters: m.conv_filters.clone(),
        conv_activation: activations.conv,
        post_fcnet_hiddens: m.post_fcnet_hiddens.clone(),
        post_fcnet_activation: activations.post_fcnet,
        vf_share_layers: m.vf_share_layers,
        use_lstm: m.use_lstm,
        lstm_cell_size: count(m.lstm_cell_size),
        max_seq_len: count(m.max_seq_len),
        free_log_std: m.free_log_std,
        custom_model: config.custom_model().cloned(),
    }
}

/// The learner: model, seed of its initial weights (`seed`, or 0 when the config has none; a
/// caller that wants a fresh seed overrides `model_seed`), loss and optimizer.
pub fn learner(config: &ValidatedConfig) -> LearnerSettings {
    let c = config.config();
    LearnerSettings {
        model: model(config),
        model_seed: c.seed.unwrap_or(0),
        loss: LossSettings {
            gamma: c.gamma,
            vtrace: c.vtrace,
            vtrace_clip_rho_threshold: c.vtrace_clip_rho_threshold,
            vtrace_clip_pg_rho_threshold: c.vtrace_clip_pg_rho_threshold,
            vtrace_drop_last_ts: c.vtrace_drop_last_ts,
            loss_reduction: c.loss_reduction,
            vf_loss_coeff: c.vf_loss_coeff,
            entropy_coeff: c.entropy_coeff,
            entropy_coeff_schedule: c.entropy_coeff_schedule.clone(),
        },
        optimizer: OptimizerSettings {
            opt_type: c.opt_type,
            lr: c.lr,
            lr_schedule: c.lr_schedule.clone(),
            grad_clip: c.grad_clip,
            grad_clip_by: c.grad_clip_by,
            epsilon: c.epsilon,
            decay: c.decay,
            momentum: c.momentum,
            separate_vf_optimizer: c.separate_vf_optimizer,
            lr_vf: c.lr_vf,
        },
        precision: c.precision,
    }
}

/// The learner thread (RLlib's `LearnerThread` / `MultiGPULearnerThread` options); the queue
/// timeout is at least [`MIN_LEARNER_QUEUE_TIMEOUT`].
pub fn learner_thread(config: &ValidatedConfig) -> LearnerThreadSettings {
    let c = config.config();
    LearnerThreadSettings {
        learner_queue_size: count(c.learner_queue_size),
        learner_queue_timeout: config
            .durations()
            .learner_queue_timeout
            .max(MIN_LEARNER_QUEUE_TIMEOUT),
        num_sgd_iter: count(c.num_sgd_iter),
        minibatch_buffer_size: count(c.minibatch_buffer_size),
        num_multi_gpu_tower_stacks: count(c.num_multi_gpu_tower_stacks),
        num_gpu_loader_threads: count(c.num_gpu_loader_threads),
        num_learner_threads: count(c.num_learner_threads),
        multi_gpu_thread: c.learner_plan().multi_gpu_thread,
    }
}

/// How the run's Python envs are started (the impala-gym bridge).
pub fn python_envs(config: &ValidatedConfig) -> impala_gym::GymSettings {
    let c = config.config();
    let mut settings = impala_gym::GymSettings::new(c.env.clone());
    settings.env_config = c.env_config.clone();
    if let Some(python) = &c.python_executable {
        settings.python = python.into();
    }
    settings.num_envs = count(c.num_envs_per_env_runner);
    settings.envs_per_worker = count(c.envs_per_env_worker());
    settings.timeout = config.durations().sample_timeout;
    settings.restart_failed_sub_environments = c.restart_failed_sub_environments;
    let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
    settings.spin = busy_threads(config) <= cores;
    settings
}

/// Threads that are busy all the time in a run of `config` with Python envs: each runner and
/// its env workers, plus the learner threads unless nothing is trained. Spinning pays only
/// when they all have a core ([`impala_gym::GymSettings::spin`]).
fn busy_threads(config: &ValidatedConfig) -> usize {
    let c = config.config();
    let workers = c.num_envs_per_env_runner.div_ceil(c.envs_per_env_worker());
    let runners = c.num_env_runners.max(1);
    let learning = !(c.env_runners_only || c.skip_learners);
    let learners = if learning { c.num_learner_threads.max(1) } else { 0 };
    runners * (workers + 1) + learners
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_threads_count_runners_workers_and_learners() -> Result<(), impala_config::ConfigError> {
        let busy = |runners, envs, per_worker: Option<usize>, sampling_only| {
            let config = impala_config::ImpalaConfig {
                num_env_runners: runners,
                num_envs_per_env_runner: envs,
                num_envs_per_env_worker: per_worker,
                env_runners_only: sampling_only,
                ..Default::default()
            };
            config.validate().map(|c| busy_threads(&c))
        };
        // One runner with one worker and nothing trained: 2 (spins on 2 cores).
        assert_eq!(busy(1, 16, None, true)?, 2);
        // Two workers of 8: 3. Training adds the learner thread.
        assert_eq!(busy(1, 16, Some(8), true)?, 3);
        assert_eq!(busy(1, 16, None, false)?, 3);
        // Two runners, 3 workers each (5 envs in workers of 2): 8, plus the learner.
        assert_eq!(busy(2, 5, Some(2), false)?, 9);
        Ok(())
    }
}
