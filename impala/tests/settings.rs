//! The lower crates' settings as `impala::settings` builds them from a validated config, and
//! their `Default`s, which are the default config's.

use std::time::Duration;

use std::num::NonZeroUsize;

use impala::config::{ConfigError, ImpalaConfig};
use impala::learner::{LearnerSettings, LearnerThreadSettings};
use impala::sampler::{BatchingSettings, EnvRunnerGroupSettings};
use impala::settings;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn nz(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN)
}

#[test]
fn settings_come_from_the_validated_config() -> TestResult {
    let config = ImpalaConfig {
        num_env_runners: 3,
        num_envs_per_env_runner: 4,
        rollout_fragment_length: 7,
        max_requests_in_flight_per_sampler_worker: 3,
        timeout_s_sampler_manager: 0.5,
        restart_failed_env_runners: false,
        max_num_env_runner_restarts: 9,
        clip_rewards: Some(2.0),
        seed: Some(5),
        evaluation_num_env_runners: 2,
        evaluation_explore: false,
        train_batch_size: 280,
        replay_proportion: 0.5,
        replay_buffer_num_slots: 6,
        num_aggregation_workers: 2,
        max_requests_in_flight_per_aggregator_worker: 4,
        timeout_s_aggregator_manager: 1.5,
        ..ImpalaConfig::default()
    }
    .validate()?;

    let group = settings::env_runner_group(&config);
    assert_eq!(group.num_env_runners, 3);
    assert_eq!((group.runner.num_envs, group.runner.rollout_fragment_length), (nz(4), nz(7)));
    assert_eq!(group.runner.clip_rewards, Some(2.0));
    assert_eq!((group.runner.seed, group.runner.explore), (Some(5), true));
    assert_eq!(group.max_requests_in_flight, nz(3));
    assert_eq!(group.sample_timeout, Some(Duration::from_millis(500)));
    assert!(!group.restart_failed_env_runners);
    assert_eq!(group.max_num_env_runner_restarts, 9);
    assert_eq!(group.runner, settings::env_runner(&config));

    // RLlib's evaluation group: one env per runner, one request each, its own seeds and explore.
    let eval = settings::evaluation_runner_group(&config, 100);
    assert_eq!(eval.num_env_runners, 2);
    assert_eq!((eval.runner.num_envs, eval.max_requests_in_flight), (nz(1), nz(1)));
    assert_eq!((eval.runner.seed, eval.runner.explore), (Some(105), false));
    assert_eq!(eval.runner.rollout_fragment_length, nz(7));

    let batching = settings::batching(&config);
    assert_eq!(batching.train_batch_size, nz(280));
    assert_eq!((batching.replay_proportion, batching.replay_buffer_num_slots), (0.5, 6));
    assert_eq!((batching.num_aggregation_workers, batching.seed), (2, Some(5)));
    assert_eq!(batching.max_requests_in_flight_per_aggregator_worker, nz(4));
    assert_eq!(batching.aggregator_timeout, Some(Duration::from_millis(1500)));
    Ok(())
}

#[test]
fn defaults_are_the_default_config() -> TestResult {
    let config = ImpalaConfig::default().validate()?;
    assert_eq!(settings::env_runner_group(&config), EnvRunnerGroupSettings::default());
    assert_eq!(settings::batching(&config), BatchingSettings::default());
    assert_eq!(settings::learner(&config), LearnerSettings::default());
    assert_eq!(settings::learner_thread(&config), LearnerThreadSettings::default());
    // RLlib's defaults: 2 runners of 1 env, fragments of 50, 2 requests in flight, a zero
    // collection timeout (take what is ready), restarts on.
    let group = EnvRunnerGroupSettings::default();
    assert_eq!((group.num_env_runners, group.runner.num_envs), (2, nz(1)));
    assert_eq!(group.runner.rollout_fragment_length, nz(50));
    assert_eq!(group.max_requests_in_flight, nz(2));
    assert_eq!(group.sample_timeout, Some(Duration::ZERO));
    assert!(group.restart_failed_env_runners && group.runner.explore);
    let batching = BatchingSettings::default();
    assert_eq!((batching.train_batch_size, batching.num_aggregation_workers), (nz(500), 0));
    assert_eq!(batching.aggregator_timeout, Some(Duration::ZERO));
    Ok(())
}

/// The settings hold `NonZeroUsize`, so a zero count cannot reach a runner: the config's
/// validation rejects it, naming the field.
#[test]
fn zero_envs_is_a_config_error() {
    let config = ImpalaConfig { num_envs_per_env_runner: 0, ..ImpalaConfig::default() };
    let err = config.validate().err();
    assert!(
        matches!(&err, Some(ConfigError::Invalid { violations })
            if violations.iter().any(|v| v.key == "num_envs_per_env_runner")),
        "{err:?}"
    );
}
