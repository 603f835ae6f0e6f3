//! Options that change what the algorithm does: RLlib's debugging switches, the learner's device
//! plan, evaluation runners (also in parallel with training), an env of the caller's own, and
//! weight snapshots taken only when needed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use impala::config::{ImpalaConfig, LearnerDeviceKind};
use impala::core::{CoreError, Env, EnvSpec, Space, StepOutcome};
use impala::{Impala, ImpalaError};

use crate::common::TestResult;

fn quick() -> ImpalaConfig {
    let mut config = ImpalaConfig {
        min_time_s_per_iteration: 0.3,
        num_env_runners: 1,
        num_envs_per_env_runner: 4,
        rollout_fragment_length: 10,
        train_batch_size: 80,
        seed: Some(3),
        ..ImpalaConfig::default()
    };
    config.model.fcnet_hiddens = vec![16];
    config
}

#[test]
fn env_runners_only_samples_and_trains_nothing() -> TestResult {
    let mut config = quick();
    config.env_runners_only = true;
    let mut algo = Impala::new(config.validate()?)?;
    let result = algo.train()?;
    assert!(result.num_env_steps_sampled > 0);
    assert!(result.episodes_total > 0);
    assert_eq!(result.num_env_steps_trained, 0);
    assert_eq!(result.info.learner["default_policy"].num_grad_updates_lifetime, 0);
    algo.stop()?;
    Ok(())
}

#[test]
fn skip_learners_builds_batches_but_sends_none() -> TestResult {
    let mut config = quick();
    config.skip_learners = true;
    let mut algo = Impala::new(config.validate()?)?;
    let result = algo.train()?;
    assert!(result.num_env_steps_sampled > 0);
    assert_eq!(result.num_env_steps_trained, 0);
    assert_eq!(result.info.num_times_learner_queue_full, 0);
    algo.stop()?;
    Ok(())
}

#[test]
fn num_learners_become_cpu_towers_and_train() -> TestResult {
    let mut config = quick();
    config.num_learners = 2;
    config.train_batch_size_per_learner = Some(40);
    let config = config.validate()?;
    let plan = config.config().learner_plan();
    assert_eq!(
        (plan.kind, plan.num_devices, plan.train_batch_size),
        (LearnerDeviceKind::Cpu, 2, 80)
    );
    let mut algo = Impala::new(config)?;
    let result = algo.train()?;
    assert!(result.num_env_steps_trained > 0);
    algo.stop()?;
    Ok(())
}

#[test]
fn a_gpu_without_cuda_is_an_error_not_a_cpu_run() -> TestResult {
    if tch::Cuda::device_count() > 0 {
        return Ok(()); // a CUDA machine trains on its GPU; the refusal is for CPU machines
    }
    for (key, value) in [("num_gpus", 1.0), ("num_gpus_per_learner", 1.0)] {
        let mut config = quick();
        config.set(key, serde_json::json!(value))?;
        let err = Impala::new(config.validate()?).err().ok_or("a GPU run must not start")?;
        assert!(matches!(err, ImpalaError::ImpossibleResources { .. }), "{key}: {err}");
        assert!(err.to_string().contains("1 GPU"), "{err}");
    }
    Ok(())
}

/// An env that counts how many were built, with 3-step episodes.
struct Short {
    spec: EnvSpec,
    t: usize,
}

impl Env for Short {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }
    fn reset(&mut self, _: Option<u64>, obs: &mut [f32]) -> Result<(), CoreError> {
        self.t = 0;
        obs[0] = 0.0;
        Ok(())
    }
    fn step(&mut self, _: &[f32], obs: &mut [f32]) -> Result<StepOutcome, CoreError> {
        self.t += 1;
        obs[0] = self.t as f32;
        Ok(StepOutcome { reward: 1.0, terminated: self.t == 3, truncated: false })
    }
}

fn short_env(built: Arc<AtomicUsize>) -> impala::sampler::EnvFactory {
    Arc::new(move |_ctx| {
        built.fetch_add(1, Ordering::SeqCst);
        let spec = EnvSpec {
            id: "Short".into(),
            observation_space: Space::continuous(vec![0.0], vec![3.0])?,
            action_space: Space::Discrete(2),
            max_episode_steps: None,
        };
        Ok(Box::new(Short { spec, t: 0 }) as Box<dyn Env>)
    })
}

#[test]
fn evaluation_runners_start_fresh_episodes_every_call() -> TestResult {
    let mut config = quick();
    config.env = "Short".into();
    config.evaluation_num_env_runners = 2;
    config.evaluation_duration = 5;
    let built = Arc::new(AtomicUsize::new(0));
    let mut algo =
        Impala::builder(config.validate()?).env_factory(short_env(Arc::clone(&built))).build()?;
    assert_eq!(algo.env_spec().id, "Short");
    let before = built.load(Ordering::SeqCst);
    for _ in 0..2 {
        let eval = algo.evaluate()?;
        assert_eq!(eval.num_episodes, 5);
        // Every episode is a whole 3-step episode that began in this call.
        assert_eq!(eval.episode_len_mean, 3.0);
        assert_eq!(eval.episode_return_mean, 3.0);
    }
    // Each call built its 2 runners' envs afresh.
    assert_eq!(built.load(Ordering::SeqCst) - before, 4);
    algo.stop()?;
    Ok(())
}

#[test]
fn evaluation_in_parallel_to_training_is_reported_with_its_iteration() -> TestResult {
    let mut config = quick();
    config.evaluation_interval = Some(2);
    config.evaluation_num_env_runners = 1;
    config.evaluation_parallel_to_training = true;
    config.evaluation_duration = 3;
    let mut algo = Impala::new(config.validate()?)?;
    let first = algo.train()?;
    assert!(first.evaluation.is_none());
    let second = algo.train()?;
    let eval = second.evaluation.as_ref().ok_or("iteration 2 evaluates")?;
    assert_eq!(eval.num_episodes, 3);
    assert!(second.num_env_steps_trained > first.num_env_steps_trained, "training went on");
    algo.stop()?;
    // Timesteps as the unit, sequentially on the driver.
    let mut config = quick();
    config.evaluation_duration_unit = impala::config::DurationUnit::Timesteps;
    config.evaluation_duration = 25;
    let mut algo = Impala::new(config.validate()?)?;
    assert!(algo.evaluate()?.num_env_steps_sampled >= 25);
    algo.stop()?;
    Ok(())
}

#[test]
fn weights_are_snapshotted_only_for_broadcasts() -> TestResult {
    // Broadcasting every 1000 training steps, the learner copies its weights far less often than
    // it steps.
    let mut config = quick();
    config.broadcast_interval = 1000;
    let mut algo = Impala::new(config.validate()?)?;
    let result = algo.train()?;
    let updates = result.info.learner["default_policy"].num_grad_updates_lifetime;
    assert!(updates > 5, "{updates} updates");
    // One for the runners' first weights, then at most one per broadcast that came due (an
    // iteration of 0.3 s makes a few hundred training steps, more on a machine busy elsewhere,
    // whose runners start late and whose driver then idles through more steps).
    // (A snapshot is asked for one training step before the broadcast it is for.)
    let due = (result.info.num_training_step_calls + 1) / 1000;
    assert!(
        result.info.num_weight_snapshots <= 1 + due,
        "{} snapshots, {} training steps, {updates} updates",
        result.info.num_weight_snapshots,
        result.info.num_training_step_calls
    );
    algo.stop()?;
    // With RLlib's default of 1, every broadcast gets fresh weights.
    let mut algo = Impala::new(quick().validate()?)?;
    let result = algo.train()?;
    assert!(result.info.num_weight_snapshots > 0);
    assert!(result.info.num_weight_broadcasts > 0);
    algo.stop()?;
    Ok(())
}
