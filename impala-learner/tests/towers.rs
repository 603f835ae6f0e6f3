//! N towers make the same update as one tower on the whole batch.

use impala_config::LossReduction;
use impala_core::Space;
use impala_learner::{Learner, LearnerError};
use tch::Device;

use crate::common::{config, max_weight_diff, random_batch, settings, spec, TestResult};

/// Two SGD steps with `towers` against one tower on `single`, for sum and mean reduction and a
/// recurrent model.
pub fn towers_match_one_tower(single: Device, towers: &[Device]) -> TestResult {
    let s = spec(4, Space::Discrete(3));
    for (reduction, lstm) in
        [(LossReduction::Sum, false), (LossReduction::Mean, false), (LossReduction::Sum, true)]
    {
        let mut c = config(vec![16, 16]);
        c.loss_reduction = reduction;
        c.model.use_lstm = lstm;
        c.model.lstm_cell_size = 8;
        c.grad_clip = Some(0.5); // the clip must act on the combined gradient
        let settings = settings(&c)?;
        let mut one = Learner::new(&settings, &s, single)?;
        let mut many = Learner::with_devices(&settings, &s, towers)?;
        assert_eq!(many.num_towers(), towers.len());
        let state_dim = one.model().state_dim();
        for seed in 0..2 {
            // 7 rows do not split evenly over 3 towers: the shards differ in size.
            let batch = random_batch(&s, 6, 7, state_dim, seed);
            let a = one.update(&batch, 0)?;
            let b = many.update(&batch, 0)?;
            for (what, x, y) in [
                ("total_loss", a.total_loss, b.total_loss),
                ("policy_loss", a.policy_loss, b.policy_loss),
                ("vf_loss", a.vf_loss, b.vf_loss),
                ("entropy", a.entropy, b.entropy),
                ("grad_gnorm", a.grad_gnorm, b.grad_gnorm),
                ("vf_explained_var", a.vf_explained_var, b.vf_explained_var),
            ] {
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

#[test]
fn fake_gpus_give_cpu_towers() -> TestResult {
    let mut c = config(vec![4]);
    c.num_gpus = 2.0;
    c.fake_gpus = true;
    assert_eq!(
        impala_learner::learner_devices(&c.validate()?.learner_plan())?,
        vec![Device::Cpu; 2]
    );
    c.num_gpus = 0.0;
    assert_eq!(impala_learner::learner_devices(&c.validate()?.learner_plan())?, vec![Device::Cpu]);
    // The new stack's CPU learners are CPU towers too.
    c.num_learners = 2;
    assert_eq!(
        impala_learner::learner_devices(&c.validate()?.learner_plan())?,
        vec![Device::Cpu; 2]
    );
    Ok(())
}

#[test]
fn more_cuda_devices_than_libtorch_sees_is_no_cuda() -> TestResult {
    let available = tch::Cuda::device_count();
    let requested = usize::try_from(available)? + 1;
    let mut c = config(vec![4]);
    c.num_gpus = requested as f64;
    c.train_batch_size = 100 * requested; // splits evenly over the towers
    let err = impala_learner::learner_devices(&c.validate()?.learner_plan());
    assert!(
        matches!(err, Err(LearnerError::NoCuda { requested: r, available: a }) if r == requested && a == available),
        "{err:?}"
    );
    Ok(())
}

#[test]
fn too_few_rows_for_the_towers_is_an_error() -> TestResult {
    let s = spec(4, Space::Discrete(3));
    let mut learner = Learner::with_devices(&settings(&config(vec![4]))?, &s, &[Device::Cpu; 3])?;
    let err = learner.update(&random_batch(&s, 4, 2, 0, 0), 0);
    assert!(matches!(err, Err(LearnerError::Batch { .. })), "{err:?}");
    Ok(())
}
