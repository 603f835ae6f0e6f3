//! N towers make the same update as one tower on the whole batch.

use impala_core::{LearnerDeviceKind, LossReduction, Space};
use impala_learner::{learner_devices, Learner, LearnerError};
use tch::Device;

use crate::common::{
    max_weight_diff, nz, paired_loss_stats, random_batch, settings, spec, TestResult,
};

/// Two SGD steps with `towers` against one tower on `single`, for sum and mean reduction and a
/// recurrent model.
pub fn towers_match_one_tower(single: Device, towers: &[Device]) -> TestResult {
    let s = spec(4, Space::Discrete(3));
    for (reduction, lstm) in
        [(LossReduction::Sum, false), (LossReduction::Mean, false), (LossReduction::Sum, true)]
    {
        let mut settings = settings(vec![16, 16]);
        settings.loss.loss_reduction = reduction;
        settings.model.use_lstm = lstm;
        settings.model.lstm_cell_size = nz(8);
        settings.optimizer.grad_clip = Some(0.5); // the clip must act on the combined gradient
        let mut one = Learner::new(&settings, &s, single)?;
        let mut many = Learner::with_devices(&settings, &s, towers)?;
        assert_eq!(many.num_towers(), towers.len());
        let state_dim = one.model().state_dim();
        for seed in 0..2 {
            // 7 rows do not split evenly over 3 towers: the shards differ in size.
            let batch = random_batch(&s, 6, 7, state_dim, seed);
            let a = one.update(&batch, 0)?;
            let b = many.update(&batch, 0)?;
            for (what, x, y) in paired_loss_stats(&a, &b) {
                assert!(
                    (x - y).abs() <= 1e-4 * (1.0 + x.abs()),
                    "{reduction:?} lstm={lstm} {what}: one tower {x}, towers {y}"
                );
            }
        }
        let diff = max_weight_diff(&one.weights()?, &many.weights()?);
        assert!(diff < 1e-5, "{reduction:?} lstm={lstm}: weights differ by {diff}");
    }
    Ok(())
}

#[test]
fn three_cpu_towers_equal_one_tower() -> TestResult {
    towers_match_one_tower(Device::Cpu, &[Device::Cpu; 3])
}

/// Fake GPUs and CPU learners are CPU towers; the `impala` crate's tests check which kind and
/// count a config plans (`impala/tests/learner_settings.rs`).
#[test]
fn fake_gpus_give_cpu_towers() -> TestResult {
    assert_eq!(learner_devices(LearnerDeviceKind::FakeGpu, 2)?, vec![Device::Cpu; 2]);
    assert_eq!(learner_devices(LearnerDeviceKind::Cpu, 1)?, vec![Device::Cpu]);
    // The new stack's CPU learners are CPU towers too.
    assert_eq!(learner_devices(LearnerDeviceKind::Cpu, 2)?, vec![Device::Cpu; 2]);
    Ok(())
}

#[test]
fn more_cuda_devices_than_libtorch_sees_is_no_cuda() -> TestResult {
    let available = tch::Cuda::device_count();
    let requested = usize::try_from(available)? + 1;
    let err = learner_devices(LearnerDeviceKind::Cuda, requested);
    assert!(
        matches!(err, Err(LearnerError::NoCuda { requested: r, available: a }) if r == requested && a == available),
        "{err:?}"
    );
    Ok(())
}

#[test]
fn too_few_rows_for_the_towers_is_an_error() -> TestResult {
    let s = spec(4, Space::Discrete(3));
    let mut learner = Learner::with_devices(&settings(vec![4]), &s, &[Device::Cpu; 3])?;
    let err = learner.update(&random_batch(&s, 4, 2, 0, 0), 0);
    assert!(matches!(err, Err(LearnerError::Batch { .. })), "{err:?}");
    Ok(())
}
