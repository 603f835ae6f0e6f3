//! The `Impala` library type on its less common paths: sampling on the driver, aggregation
//! workers with mix-in replay, evaluation during training, save/restore in-process.

use impala::config::ImpalaConfig;
use impala::{Impala, DEFAULT_POLICY_ID};

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
