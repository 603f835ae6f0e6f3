//! The `Impala` library type on its less common paths: sampling on the driver, aggregation
//! workers with mix-in replay, evaluation during training, save/restore in-process, episode
//! records.

use std::sync::Arc;

use impala::config::ImpalaConfig;
use impala::{Impala, ImpalaError, DEFAULT_POLICY_ID};

use crate::common::TestResult;

fn quick(config: &mut ImpalaConfig) {
    config.min_time_s_per_iteration = 0.3;
    config.num_envs_per_env_runner = 4;
    config.rollout_fragment_length = 10;
    config.train_batch_size = 80;
    config.model.fcnet_hiddens = vec![32, 32];
    config.seed = Some(11);
}

#[test]
fn driver_sampling_aggregation_replay_and_evaluation() -> TestResult {
    // num_env_runners = 0: RLlib's local worker samples on the driver thread.
    let mut local = ImpalaConfig::default();
    quick(&mut local);
    local.num_env_runners = 0;
    local.evaluation_interval = Some(1);
    local.evaluation_duration = 2;
    // Aggregation worker threads build train batches with 1:1 mix-in replay.
    let mut aggregated = ImpalaConfig::default();
    quick(&mut aggregated);
    aggregated.num_env_runners = 1;
    aggregated.num_aggregation_workers = 1;
    aggregated.replay_proportion = 1.0;
    aggregated.replay_buffer_num_slots = 8;
    for config in [local, aggregated] {
        let label = format!(
            "runners={} aggregation={}",
            config.num_env_runners, config.num_aggregation_workers
        );
        let evaluates = config.evaluation_interval.is_some();
        let mut algo = Impala::new(config.validate()?)?;
        let result = algo.train()?;
        assert_eq!(result.training_iteration, 1, "{label}");
        assert!(result.num_env_steps_sampled > 0, "{label}");
        assert!(result.num_env_steps_trained > 0, "{label}: nothing trained");
        let stats = &result.info.learner[DEFAULT_POLICY_ID].learner_stats;
        assert!(stats["total_loss"].is_finite(), "{label}");
        assert_eq!(
            result.evaluation.as_ref().map(|e| e.num_episodes),
            evaluates.then_some(2),
            "{label}"
        );
        algo.stop()?;
    }
    Ok(())
}

#[test]
fn save_and_restore_continue_counters_and_weights() -> TestResult {
    let mut config = ImpalaConfig::default();
    quick(&mut config);
    let dir = tempfile::tempdir()?;
    let mut algo = Impala::new(config.validate()?)?;
    let first = algo.train()?;
    let checkpoint = algo.save(dir.path())?;
    algo.stop()?;

    let mut restored = Impala::new(config.validate()?)?;
    restored.restore(&checkpoint)?;
    assert_eq!(restored.iteration(), 1);
    assert_eq!(restored.counters().num_env_steps_sampled, first.num_env_steps_sampled);
    assert!(restored.evaluate()?.num_episodes > 0);
    let second = restored.train()?;
    assert_eq!(second.training_iteration, 2);
    assert!(second.num_env_steps_sampled > first.num_env_steps_sampled);
    restored.stop()?;

    // A checkpoint of another model is refused with the reason.
    config.model.fcnet_hiddens = vec![16];
    let mut other = Impala::new(config.validate()?)?;
    let err = other.restore(&checkpoint).err().ok_or("restore should fail")?.to_string();
    // The option that differs, each side's value; not a debug dump of both models.
    assert!(err.contains("model fcnet_hiddens = [32,32]"), "{err}");
    assert!(err.contains("fcnet_hiddens = [16]") && !err.contains("ModelConfig {"), "{err}");
    other.stop()?;
    Ok(())
}

/// A panic on the driver's thread (here the caller's own callback) is a failure like any
/// other: the run is saved first and the error names the checkpoint.
#[test]
fn a_panic_on_the_driver_thread_saves_the_run() -> TestResult {
    use impala::run::{run, CheckpointPolicy, RunDir, RunError, RunEvent, RunOptions, RunTarget};
    let tmp = tempfile::tempdir()?;
    let mut config = ImpalaConfig::default();
    quick(&mut config);
    let mut algo = Impala::new(config.validate()?)?;
    let dir = RunDir::open(&RunTarget::New(tmp.path().join("run")))?;
    let options = RunOptions {
        stop: impala::StopCriteria { training_iteration: Some(50), ..Default::default() },
        checkpoint_every: 0,
        checkpoints: CheckpointPolicy::default(),
    };
    let interrupt = std::sync::atomic::AtomicBool::new(false);
    let outcome = run(&mut algo, &dir, &options, &interrupt, |event| {
        if let RunEvent::Result(result) = event {
            assert!(result.training_iteration < 2, "the caller's callback gives up");
        }
    });
    match outcome {
        Err(RunError::FailedAndSaved { cause, checkpoint }) => {
            assert!(cause.to_string().contains("the caller's callback gives up"), "{cause}");
            let (state, _) = impala::checkpoint::read_checkpoint(&checkpoint)?;
            assert_eq!(state.training_iteration, 2);
        }
        other => return Err(format!("expected a saved failure, got {other:?}").into()),
    }
    algo.stop()?;
    Ok(())
}

/// `record_episodes`: the episodes the iteration counted come step by step (the sampling
/// runners', not evaluation's), single- and multi-agent, taken once; remote env runners,
/// which send no records, are refused.
#[test]
fn recorded_episodes_are_the_counted_ones_and_need_local_runners() -> TestResult {
    let mut config = ImpalaConfig::default();
    quick(&mut config);
    config.num_env_runners = 1;
    config.evaluation_interval = Some(1);
    config.evaluation_duration = 2;
    let mut algo = Impala::builder(config.clone().validate()?).record_episodes(true).build()?;
    let result = algo.train()?;
    let records = algo.take_episode_records();
    assert!(result.num_episodes > 0);
    assert_eq!(records.len() as u64, result.num_episodes);
    for record in &records {
        let [agent] = record.agents.as_slice() else { return Err("one agent".into()) };
        let len = record.stats.episode_len as usize;
        assert_eq!((agent.rewards.len(), agent.actions.len()), (len, len));
        assert_eq!(agent.observations.len(), (len + 1) * 4);
        let total: f32 = agent.rewards.iter().sum();
        assert_eq!(f64::from(total), record.stats.episode_return);
        assert!(record.env_index < 4 && record.runner_id == 1);
    }
    algo.evaluate()?;
    assert!(algo.take_episode_records().is_empty(), "evaluation records nothing");
    algo.stop()?;

    let mut multi = config.clone();
    multi.env = "HalfObserved".into();
    multi.policies = vec!["left".into(), "right".into()];
    multi.evaluation_interval = None;
    let mut algo = Impala::builder(multi.validate()?).record_episodes(true).build()?;
    let result = algo.train()?;
    let records = algo.take_episode_records();
    algo.stop()?;
    assert_eq!(records.len() as u64, result.num_episodes);
    for record in &records {
        assert_eq!(record.agents.iter().map(|a| a.agent).collect::<Vec<_>>(), [0, 1]);
        let total: f64 = record.agents.iter().flat_map(|a| &a.rewards).map(|&r| f64::from(r)).sum();
        assert_eq!(total, record.stats.episode_return);
    }

    let refused = Impala::builder(config.validate()?)
        .record_episodes(true)
        .remote_env_runners(Arc::new(impala::runner_pool::RunnerPool::new()))
        .build()
        .err();
    assert!(matches!(refused, Some(ImpalaError::EpisodeRecordingWithRemoteRunners)), "{refused:?}");
    assert!(refused.is_some_and(|e| e.to_string().contains("need local env runners")));
    Ok(())
}
