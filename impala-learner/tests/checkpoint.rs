//! Checkpoints restore the model, the optimizer state and the counters.

use impala_core::{OptType, Policy, Space};
use impala_learner::{read_model_weights, Learner, LearnerError, LEARNER_STATE_FILE, MODEL_FILE};
use tch::Device;

use crate::common::{max_weight_diff, random_batch, runner_policy, settings, spec, TestResult};

pub fn checkpoint_round_trip(device: Device) -> TestResult {
    let s = spec(4, Space::Discrete(3));
    for opt in [OptType::Adam, OptType::Rmsprop] {
        let mut c = settings(vec![8]);
        c.optimizer.opt_type = opt;
        c.optimizer.momentum = 0.5;
        c.optimizer.separate_vf_optimizer = opt == OptType::Adam;
        c.model.vf_share_layers = false;
        let mut a = Learner::new(&c, &s, device)?;
        for seed in 0..3 {
            a.update(&random_batch(&s, 5, 4, 0, seed), 0)?;
        }
        let dir = tempfile::tempdir()?;
        a.save(dir.path())?;
        // A learner with other initial weights and no optimizer history takes the state over.
        c.model_seed = 99;
        let mut b = Learner::new(&c, &s, device)?;
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
    Learner::new(&settings(vec![8]), &s, Device::Cpu)?.save(dir.path())?;
    let mut other = Learner::new(&settings(vec![9]), &s, Device::Cpu)?;
    let err = other.load(dir.path());
    assert!(
        matches!(&err, Err(LearnerError::Checkpoint { reason, .. }) if reason.contains("shape")),
        "{err:?}"
    );
    std::fs::remove_file(dir.path().join(MODEL_FILE))?;
    assert!(matches!(other.load(dir.path()), Err(LearnerError::Checkpoint { .. })));
    Ok(())
}

/// Rewrites one tensor of a safetensors file with `value` in its first element.
fn poison(file: &std::path::Path, tensor: &str, value: f32) -> TestResult {
    let mut tensors = tch::Tensor::read_safetensors(file)?;
    let (_, t) = tensors.iter_mut().find(|(n, _)| n == tensor).ok_or("no such tensor")?;
    let mut data = Vec::<f32>::try_from(&t.f_flatten(0, -1)?)?;
    data[0] = value;
    *t = tch::Tensor::f_from_slice(&data)?.f_view(t.size().as_slice())?;
    tch::Tensor::write_safetensors(&tensors, file)?;
    Ok(())
}

#[test]
fn non_finite_tensors_in_a_checkpoint_are_refused_by_name() -> TestResult {
    let s = spec(4, Space::Discrete(3));
    let c = settings(vec![8]);
    let mut a = Learner::new(&c, &s, Device::Cpu)?;
    a.update(&random_batch(&s, 5, 4, 0, 1), 0)?;
    let weights = a.weights()?;
    let name = weights.tensors[0].name.clone();
    for (file, tensor, value) in [
        (MODEL_FILE, name.clone(), f32::NAN),
        (MODEL_FILE, name.clone(), f32::INFINITY),
        (LEARNER_STATE_FILE, format!("optimizer0.exp_avg_sq.{name}"), f32::NAN),
    ] {
        let dir = tempfile::tempdir()?;
        a.save(dir.path())?;
        poison(&dir.path().join(file), &tensor, value)?;
        let mut b = Learner::new(&settings(vec![8]), &s, Device::Cpu)?;
        let before = b.weights()?;
        let err = b.load(dir.path()).err().ok_or("a non-finite checkpoint loaded")?.to_string();
        assert!(err.contains("non-finite") && err.contains(&format!("`{tensor}`")), "{err}");
        assert!(err.contains(file), "{err}");
        // Refused before anything changed.
        assert_eq!((b.version(), max_weight_diff(&before, &b.weights()?)), (0, 0.0));
        if file == MODEL_FILE {
            let err = read_model_weights(dir.path(), 1).err().ok_or("read non-finite weights")?;
            assert!(err.to_string().contains(&format!("`{tensor}`")), "{err}");
        }
    }
    Ok(())
}

#[test]
fn model_weights_are_read_without_a_learner() -> TestResult {
    let s = spec(4, Space::Discrete(3));
    let c = settings(vec![8]);
    let mut a = Learner::new(&c, &s, Device::Cpu)?;
    a.update(&random_batch(&s, 5, 4, 0, 1), 0)?;
    let dir = tempfile::tempdir()?;
    a.save(dir.path())?;
    std::fs::remove_file(dir.path().join(LEARNER_STATE_FILE))?;
    let read = read_model_weights(dir.path(), 1)?;
    assert_eq!(read, a.weights()?);
    let mut policy = runner_policy(&c, &s, 0)?;
    policy.set_weights(&read)?;
    assert_eq!(policy.weights_version(), 1);
    Ok(())
}
