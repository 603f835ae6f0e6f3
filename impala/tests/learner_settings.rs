//! Config options as the learner sees them: device plans, refused counts, queue timeouts.
//!
//! impala-learner's own tests build its settings by hand; these check that a config plans and
//! validates into what they assume (`impala::settings` and the config's learner plan).

use impala::config::{ConfigError, ImpalaConfig};
use impala::core::{EnvSpec, LearnerDeviceKind, Space};
use impala::learner::{
    learner_devices, Learner, LearnerError, LearnerHandle, MIN_LEARNER_QUEUE_TIMEOUT,
};
use impala::settings;
use tch::Device;

use crate::common::TestResult;

/// A small, seeded config.
fn config(hiddens: Vec<usize>) -> ImpalaConfig {
    let mut c = ImpalaConfig { seed: Some(3), ..ImpalaConfig::default() };
    c.model.fcnet_hiddens = hiddens;
    c
}

/// A spec with 4 continuous observations in [-1, 1] and 2 actions.
fn spec() -> EnvSpec {
    EnvSpec {
        id: "Test".into(),
        observation_space: Space::Box { low: vec![-1.0; 4], high: vec![1.0; 4], shape: vec![4] },
        action_space: Space::Discrete(2),
        max_episode_steps: None,
    }
}

/// The towers' devices of a validated `c`, from its learner plan, as the program makes them.
fn devices(c: &ImpalaConfig) -> Result<Vec<Device>, Box<dyn std::error::Error>> {
    let plan = c.validate()?.config().learner_plan();
    Ok(learner_devices(plan.kind, plan.num_devices)?)
}

/// Validates `c` and starts its learner thread, as the program does.
fn setup(c: &ImpalaConfig) -> Result<LearnerHandle, Box<dyn std::error::Error>> {
    let config = c.validate()?;
    let plan = config.config().learner_plan();
    let devices = learner_devices(plan.kind, plan.num_devices)?;
    let learner = Learner::with_devices(&settings::learner(&config), &spec(), &devices)?;
    Ok(LearnerHandle::spawn(&settings::learner_thread(&config), learner)?)
}

#[test]
fn fake_gpus_give_cpu_towers() -> TestResult {
    let mut c = config(vec![4]);
    c.num_gpus = 2.0;
    c.fake_gpus = true;
    assert_eq!(devices(&c)?, vec![Device::Cpu; 2]);
    c.num_gpus = 0.0;
    assert_eq!(devices(&c)?, vec![Device::Cpu]);
    // The new stack's CPU learners are CPU towers too.
    c.num_learners = 2;
    assert_eq!(devices(&c)?, vec![Device::Cpu; 2]);
    Ok(())
}

#[test]
fn more_cuda_devices_than_libtorch_sees_is_no_cuda() -> TestResult {
    let available = tch::Cuda::device_count();
    let requested = usize::try_from(available)? + 1;
    let mut c = config(vec![4]);
    c.num_gpus = requested as f64;
    c.train_batch_size = 100 * requested; // splits evenly over the towers
    let plan = c.validate()?.config().learner_plan();
    assert_eq!((plan.kind, plan.num_devices), (LearnerDeviceKind::Cuda, requested));
    let err = learner_devices(plan.kind, plan.num_devices);
    assert!(
        matches!(err, Err(LearnerError::NoCuda { requested: r, available: a }) if r == requested && a == available),
        "{err:?}"
    );
    Ok(())
}

#[test]
fn bad_queue_settings_are_refused_by_validation() -> TestResult {
    // The settings' NonZeroUsize fields cannot hold these: validation refuses the config.
    for change in
        [|c: &mut ImpalaConfig| c.learner_queue_size = 0, |c: &mut ImpalaConfig| c.num_sgd_iter = 0]
    {
        let mut c = config(vec![4]);
        change(&mut c);
        assert!(matches!(c.validate(), Err(ConfigError::Invalid { .. })));
        assert!(matches!(setup(&c), Err(e) if e.is::<ConfigError>()));
    }
    // Validation allows `learner_queue_timeout = 0`; the thread then waits the shortest timeout
    // instead of spinning, and counts stalls as usual.
    let mut c = config(vec![4]);
    c.learner_queue_timeout = 0.0;
    assert_eq!(
        settings::learner_thread(&c.validate()?).learner_queue_timeout,
        MIN_LEARNER_QUEUE_TIMEOUT
    );
    Ok(())
}

#[test]
fn towers_need_the_multi_gpu_thread() -> TestResult {
    let mut c = config(vec![4]);
    c.num_gpus = 2.0;
    c.fake_gpus = true;
    let validated = c.validate()?;
    let mut thread = settings::learner_thread(&validated);
    assert!(thread.multi_gpu_thread);
    thread.multi_gpu_thread = false;
    let learner =
        Learner::with_devices(&settings::learner(&validated), &spec(), &[Device::Cpu; 2])?;
    assert!(matches!(LearnerHandle::spawn(&thread, learner), Err(LearnerError::Config { .. })));
    // simple_optimizer asks for that: validation refuses it first.
    c.simple_optimizer = true;
    assert!(matches!(c.validate(), Err(ConfigError::Invalid { .. })));
    // One real GPU is one tower with the MultiGPULearnerThread too (impala-learner's CUDA test
    // of a failing learner thread starts that).
    let mut c = config(vec![4]);
    c.num_gpus = 1.0;
    let validated = c.validate()?;
    let plan = validated.config().learner_plan();
    assert_eq!((plan.kind, plan.num_devices), (LearnerDeviceKind::Cuda, 1));
    assert!(settings::learner_thread(&validated).multi_gpu_thread);
    // Without GPUs: one CPU tower and the single-device LearnerThread.
    let validated = config(vec![4]).validate()?;
    let plan = validated.config().learner_plan();
    assert_eq!((plan.kind, plan.num_devices), (LearnerDeviceKind::Cpu, 1));
    assert!(!settings::learner_thread(&validated).multi_gpu_thread);
    Ok(())
}
