//! Checkpoints restore the model, the optimizer state and the counters.

use impala_config::OptType;
use impala_core::Space;
use impala_learner::{Learner, LearnerError, MODEL_FILE};
use tch::Device;

use crate::common::{config, max_weight_diff, random_batch, settings, spec, TestResult};

pub fn checkpoint_round_trip(device: Device) -> TestResult {
    let s = spec(4, Space::Discrete(3));
    for opt in [OptType::Adam, OptType::Rmsprop] {
        let mut c = config(vec![8]);
        c.opt_type = opt;
        c.momentum = 0.5;
        c.separate_vf_optimizer = opt == OptType::Adam;
        c.model.vf_share_layers = false;
        let mut a = Learner::new(&settings(&c)?, &s, device)?;
        for seed in 0..3 {
            a.update(&random_batch(&s, 5, 4, 0, seed), 0)?;
        }
        let dir = tempfile::tempdir()?;
        a.save(dir.path())?;
        // A learner with other initial weights and no optimizer history takes the state over.
        c.seed = Some(99);
        let mut b = Learner::new(&settings(&c)?, &s, device)?;
        assert!(max_weight_diff(&a.weights()?, &b.weights()?) > 0.0);
        b.load(dir.path())?;
        assert_eq!((b.version(), b.agent_steps_trained()), (3, 60));
        assert_eq!(max_weight_diff(&a.weights()?, &b.weights()?), 0.0);
        // Same optimizer state: the next step is the same too.
        let batch = random_batch(&s, 5, 4, 0, 7);
        a.update(&batch, 0)?;
        b.update(&batch, 0)?;
        assert!(max_weight_diff(&a.weights()?, &b.weights()?) < 1e-6);
    }
    Ok(())
}

#[test]
fn checkpoint_restores_model_and_optimizer_state() -> TestResult {
    checkpoint_round_trip(Device::Cpu)
}

#[test]
fn a_checkpoint_of_another_model_is_rejected() -> TestResult {
    let s = spec(4, Space::Discrete(3));
    let dir = tempfile::tempdir()?;
    Learner::new(&settings(&config(vec![8]))?, &s, Device::Cpu)?.save(dir.path())?;
    let mut other = Learner::new(&settings(&config(vec![9]))?, &s, Device::Cpu)?;
    let err = other.load(dir.path());
    assert!(
        matches!(&err, Err(LearnerError::Checkpoint { reason, .. }) if reason.contains("shape")),
        "{err:?}"
    );
    std::fs::remove_file(dir.path().join(MODEL_FILE))?;
    assert!(matches!(other.load(dir.path()), Err(LearnerError::Checkpoint { .. })));
    Ok(())
}
