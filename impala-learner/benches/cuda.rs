//! The learner on a CUDA GPU, one JSON line per measurement, for comparison with bare PyTorch's
//! same step on the same GPU (`benches/cuda_pytorch.py`, run it beside this):
//!
//! ```text
//! cargo bench -p impala-learner --features cuda-tests --bench cuda [-- --seconds 2]
//! ```
//!
//! For the CartPole MLP (RLlib's default `[256, 256]` tanh net) and the embedded CartPole
//! config's network as TorchScript at train batches of 500 and 4,000, and RLlib's 84x84x4 conv
//! net and the IMPALA paper's ResNet at 500 and 2,000 in `fp32` and `bf16-mixed`, each with
//! T = 50:
//!
//! - `update`: `Learner::update` on a host batch (what the `LearnerThread` does per batch: the
//!   copy to the GPU, the forward passes, V-trace on the CPU, backward, clipping, Adam, stats);
//! - `load`: `BatchLoader::load` alone (checks, shaping and the host-to-device copies);
//! - `update_loaded`: the step on a batch already on the GPU (what the `MultiGPULearnerThread`
//!   does once its loader threads have filled a tower stack);
//! - `thread`: batches through `LearnerHandle` with `multi_gpu_thread`, two tower stacks and two
//!   loader threads, so the copies of the next batches overlap the step (conv nets only);
//! - `copy`: the observation bytes of one batch to the GPU from pageable and from pinned memory.
//!
//! Each value is the median over steps timed for `--seconds` (default 2) after 3 warm-ups; the
//! learner reads its statistics back every step, which waits for the GPU. Prints nothing but a
//! note where libtorch sees no CUDA device.

use std::hint::black_box;
use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use impala_core::{CustomModel, EnvSpec, Precision, ResNetSettings, SampleBatch, Space};
use impala_learner::{
    Learner, LearnerHandle, LearnerSettings, LearnerThreadSettings, ModelSettings,
};
use tch::{Device, Kind, Tensor};

mod common;
use common::{atari, batch, cartpole, scripted_cartpole_mlp, T};

type BenchResult = Result<(), Box<dyn std::error::Error>>;

/// Steps timed per measurement: at least this many, and for at least `--seconds`.
const MIN_STEPS: usize = 5;

fn main() -> BenchResult {
    let seconds = std::env::args()
        .skip_while(|a| a != "--seconds")
        .nth(1)
        .map(|s| s.parse::<f64>())
        .transpose()?
        .unwrap_or(2.0);
    let budget = Duration::from_secs_f64(seconds);
    let devices = tch::Cuda::device_count();
    if devices == 0 {
        println!("{{\"note\": \"libtorch sees no CUDA device; nothing to measure\"}}");
        return Ok(());
    }
    println!("{{\"cuda_devices\": {devices}, \"cudnn\": {}}}", tch::Cuda::cudnn_is_available());
    let device = Device::Cuda(0);
    let scripted = scripted_cartpole_mlp();
    let resnet = ModelSettings {
        custom_model: Some(CustomModel::ImpalaResNet(ResNetSettings::default())),
        ..ModelSettings::default()
    };
    let mut cases: Vec<Case> = vec![
        ("cartpole_mlp", cartpole(), ModelSettings::default(), [500, 4000], vec![Precision::Fp32]),
        (
            "atari_cnn",
            atari(),
            ModelSettings::default(),
            [500, 2000],
            vec![Precision::Fp32, Precision::Bf16Mixed],
        ),
        (
            "impala_resnet",
            atari(),
            resnet,
            [500, 2000],
            vec![Precision::Fp32, Precision::Bf16Mixed],
        ),
    ];
    if let Some(path) = &scripted {
        let model = ModelSettings {
            custom_model: Some(CustomModel::TorchScript(path.clone())),
            fcnet_hiddens: vec![64, 64],
            vf_share_layers: false,
            ..ModelSettings::default()
        };
        cases.push((
            "torchscript_cartpole_64x64",
            cartpole(),
            model,
            [500, 4000],
            vec![Precision::Fp32],
        ));
    }
    for (model_name, spec, model, sizes, precisions) in &cases {
        for &size in sizes {
            let train = batch(spec, size / T, 3);
            for &precision in precisions {
                let label = Label { model: model_name, batch: size, precision };
                if let Err(e) = impala_learner::check_precision(precision, device) {
                    label.print("skipped", &format!("\"{e}\""));
                    continue;
                }
                let settings = LearnerSettings {
                    model_seed: 0,
                    model: model.clone(),
                    precision,
                    ..LearnerSettings::default()
                };
                let mut learner = Learner::new(&settings, spec, device)?;
                let loader = learner.loader();
                let loaded = loader.load(&train)?;
                let update = median(budget, || {
                    black_box(learner.update(&train, 0)?.total_loss);
                    Ok(())
                })?;
                let step = median(budget, || {
                    black_box(learner.update_loaded(&loaded, 0)?.total_loss);
                    Ok(())
                })?;
                let load = median(budget, || {
                    let l = loader.load(&train)?;
                    tch::Cuda::synchronize(0);
                    black_box(l);
                    Ok(())
                })?;
                label.timing("update", update);
                label.timing("update_loaded", step);
                label.timing("load", load);
                if matches!(spec.observation_space, Space::Bytes { .. }) {
                    let thread = through_thread(&settings, spec, &train, budget)?;
                    label.timing("thread", thread);
                    copies(&label, &train, budget)?;
                }
            }
        }
    }
    if let Some(path) = scripted {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// A model on an env's spaces, its train batch sizes and the precisions it runs in.
type Case = (&'static str, EnvSpec, ModelSettings, [usize; 2], Vec<Precision>);

/// What one line measures.
struct Label<'a> {
    model: &'a str,
    batch: usize,
    precision: Precision,
}

impl Label<'_> {
    fn print(&self, what: &str, value: &str) {
        println!(
            "{{\"model\": \"{}\", \"batch\": {}, \"precision\": \"{}\", \"{what}\": {value}}}",
            self.model, self.batch, self.precision
        );
    }

    fn timing(&self, what: &str, seconds: f64) {
        println!(
            "{{\"model\": \"{}\", \"batch\": {}, \"precision\": \"{}\", \"measure\": \"{what}\", \
             \"ms\": {:.3}, \"samples_per_s\": {:.0}}}",
            self.model,
            self.batch,
            self.precision,
            seconds * 1e3,
            self.batch as f64 / seconds
        );
    }
}

/// The median seconds of `step` after 3 warm-ups, over at least [`MIN_STEPS`] steps and
/// `budget`.
fn median(
    budget: Duration,
    mut step: impl FnMut() -> Result<(), Box<dyn std::error::Error>>,
) -> Result<f64, Box<dyn std::error::Error>> {
    for _ in 0..3 {
        step()?;
    }
    let (start, mut times) = (Instant::now(), Vec::new());
    while times.len() < MIN_STEPS || start.elapsed() < budget {
        let t = Instant::now();
        step()?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Seconds per batch through the `MultiGPULearnerThread` (two tower stacks, two loader
/// threads), with the driver keeping batches queued ahead as a training loop does. The batches
/// are copied before the clock starts: copying a 2,000-frame batch on the driver's thread
/// takes longer than the conv net's step.
fn through_thread(
    settings: &LearnerSettings,
    spec: &EnvSpec,
    train: &SampleBatch,
    budget: Duration,
) -> Result<f64, Box<dyn std::error::Error>> {
    let two = NonZeroUsize::new(2).ok_or("2 is not zero")?;
    let thread_settings = LearnerThreadSettings {
        multi_gpu_thread: true,
        num_multi_gpu_tower_stacks: two,
        num_gpu_loader_threads: two,
        ..LearnerThreadSettings::default()
    };
    let learner = Learner::new(settings, spec, Device::Cuda(0))?;
    let handle = LearnerHandle::spawn(&thread_settings, learner)?;
    let timed = |count: usize| -> Result<f64, Box<dyn std::error::Error>> {
        let mut batches: Vec<SampleBatch> = (0..count).map(|_| train.clone()).collect();
        let (start, mut received) = (Instant::now(), 0);
        while received < count {
            while let Some(batch) = batches.pop() {
                if let Err(batch) = handle.try_enqueue(batch) {
                    batches.push(batch);
                    break;
                }
            }
            received += handle.drain_wait(Duration::from_secs(60))?.len();
        }
        Ok(start.elapsed().as_secs_f64() / count as f64)
    };
    timed(3)?;
    // As many batches as the step and the copy take in `budget`, at least MIN_STEPS.
    let estimate = timed(MIN_STEPS)?;
    let count = ((budget.as_secs_f64() / estimate) as usize).clamp(MIN_STEPS, 200);
    let per_batch = timed(count)?;
    drop(handle);
    Ok(per_batch)
}

/// The observation bytes of `train` to the GPU, from pageable and from pinned host memory.
fn copies(label: &Label<'_>, train: &SampleBatch, budget: Duration) -> BenchResult {
    let bytes = Tensor::f_from_slice(&train.obs.to_f32())?.f_to_kind(Kind::Uint8)?;
    let pinned = bytes.f_pin_memory(Device::Cuda(0))?;
    for (what, host) in [("copy_pageable", &bytes), ("copy_pinned", &pinned)] {
        let seconds = median(budget, || {
            let on_gpu = host.f_to_device_(Device::Cuda(0), Kind::Uint8, true, false)?;
            tch::Cuda::synchronize(0);
            drop(black_box(on_gpu));
            Ok(())
        })?;
        label.timing(what, seconds);
    }
    Ok(())
}
