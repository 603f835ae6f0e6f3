//! The device-generic bodies on CUDA (`--features cuda-tests`, needs a CUDA machine).

use impala_core::LearnerDeviceKind;
use impala_learner::learner_devices;
use tch::{Cuda, Device};

use crate::common::TestResult;
use crate::threads::Setup;

fn cuda() -> Device {
    let n = Cuda::device_count();
    println!("tch::Cuda::device_count() = {n}, cudnn = {}", Cuda::cudnn_is_available());
    assert!(n > 0, "cuda-tests need a CUDA device (is libtorch_cuda.so on the loader path?)");
    Device::Cuda(0)
}

#[test]
fn cuda_loss_and_step_match_the_hand_computation() -> TestResult {
    crate::loss::check_loss_and_step(cuda())
}

/// Compared on the same kind of device: Adam's first steps are nearly `lr * sign(g)`, so CPU
/// and GPU rounding of tiny gradients could flip a step.
#[test]
fn cuda_towers_equal_one_cuda_tower() -> TestResult {
    let d = cuda();
    crate::towers::towers_match_one_tower(d, &[d, d, d])?;
    let all: Vec<Device> = (0..Cuda::device_count() as usize).map(Device::Cuda).collect();
    crate::towers::towers_match_one_tower(d, &all)
}

#[test]
fn cuda_learns_the_bandit() -> TestResult {
    crate::learning::check_learning(cuda())
}

#[test]
fn cuda_checkpoint_round_trip() -> TestResult {
    crate::checkpoint::checkpoint_round_trip(cuda())
}

#[test]
fn cuda_learner_thread_failure_reaches_the_driver() -> TestResult {
    let _ = cuda();
    // What `num_gpus = 1` plans: one CUDA tower with the MultiGPULearnerThread.
    let c = Setup::new(vec![8]).with_towers(learner_devices(LearnerDeviceKind::Cuda, 1)?);
    crate::threads::failure_reaches_the_driver(&c)
}

/// Loader threads filling 1 and 2 tower stacks on the GPU take the same SGD steps as on CPU
/// towers.
#[test]
fn cuda_tower_stacks_take_the_cpu_towers_steps() -> TestResult {
    let d = cuda();
    for stacks in [1, 2] {
        let mut on_cpu = Setup::new(vec![8]).with_towers(vec![Device::Cpu]);
        on_cpu.thread.num_multi_gpu_tower_stacks = crate::common::nz(stacks);
        let on_gpu = Setup { devices: vec![d], ..on_cpu.clone() };
        assert_eq!(
            crate::threads::steps_over_four_batches(&on_gpu)?,
            crate::threads::steps_over_four_batches(&on_cpu)?,
            "{stacks} tower stacks"
        );
    }
    Ok(())
}
