//! Trained samples per second of the CartPole MLP (RLlib's default model: [256, 256] tanh,
//! shared value layer) at RLlib's tuned CartPole train batch, 800 (T = 50, B = 16), with one
//! libtorch thread:
//!
//! - `bare_libtorch_step`: forward, the same loss terms, backward and libtorch's own Adam step
//!   on the same model, nothing else (the floor);
//! - `learner_update`: `Learner::update` (batch upload, bootstrap forward, V-trace on the CPU,
//!   global-norm clipping, our Adam over flat slots with its finiteness guard, stats);
//! - `learner_thread`: the same through `LearnerHandle` (inqueue, learner thread, outqueue),
//!   with a few batches queued ahead as in training and no weight snapshot;
//! - `learner_thread_weights_every_step`: the same with a weight snapshot requested and taken
//!   after every step (the old behaviour; a driver asks every `broadcast_interval` steps).
//!
//! Custom models, at train batch 500 (T = 50, B = 10):
//!
//! - `cartpole_64x64_train_batch_500`: the embedded CartPole config's network (two [64, 64]
//!   tanh torsos, policy and value) as a TorchScript module (`benches/cartpole_mlp.py`, run with
//!   the venv's Python or `IMPALA_PYTHON`): `Learner::update` with it, with the built-in model
//!   of the same shape, and a hand-written tch step on the same module (forward, the same loss
//!   terms, backward, libtorch's Adam with global-norm clipping: the floor);
//! - `impala_resnet_train_batch_500`: `Learner::update` of the IMPALA paper's ResNet
//!   (`model.custom_model = "impala_resnet"`, channels [16, 32, 32], hidden 256) on 84x84x4
//!   byte observations at 1 and 2 libtorch threads, beside `atari_cnn_train_batch_500`;
//!   `benches/resnet_pytorch.py` times bare PyTorch's same network and step.
//!
//! Plus `Learner::update` of RLlib's default 84x84x4 Atari conv net on byte observations (what
//! Pong trains) at 1 and 2 libtorch threads, in float32 and bf16-mixed, each beside a bare tch
//! step of the same net (`atari_cnn_train_batch_500`), and `TorchPolicy` inference for 1, 8 and
//! 32 envs; `Learner::update` of the fast Pong config's 42x42 net on its train batch of 160
//! (`pong_fast_train_batch_160`) and its `TorchPolicy` inference for 8 and 16 games in float32
//! and bf16-mixed (`pong_fast_policy_inference_*`). The GPU's learner steps are `benches/cuda.rs`.
//!
//! `cargo bench -p impala-learner --bench learner -- --measurement-time 3 --warm-up-time 1`

#![allow(missing_docs, reason = "criterion_group! generates an undocumented function")]

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use impala_core::{
    CustomModel, EnvSpec, Policy, PolicyInput, PolicyOutput, Precision, ResNetSettings,
};
use impala_learner::{
    Autocast, Learner, LearnerHandle, LearnerSettings, LearnerThreadSettings, ModelSettings,
    TorchPolicy,
};
use tch::nn::{self, Module, OptimizerConfig};
use tch::{Device, IValue, Kind, TchError, Tensor, TrainableCModule};

mod common;
use common::{atari, batch, cartpole, scripted_cartpole_mlp, T};

const B: usize = 10;
/// RLlib's tuned CartPole train batch: 2 fragments of 8 envs x 50 steps.
const CARTPOLE_B: usize = 16;

/// The bare steps' loss: RLlib's terms, summed, on fixed advantages and value targets
/// (`-sum(logp(a) * adv) - 0.01 * entropy + 0.5 * 0.5 * sum((v - target)^2)`).
fn bare_loss(
    logp: &Tensor,
    v: &Tensor,
    actions: &Tensor,
    adv: &Tensor,
    targets: &Tensor,
) -> Tensor {
    let pi = -(logp.gather(1, actions, false).squeeze_dim(1) * adv).sum(Kind::Float);
    let entropy = -(logp.exp() * logp).sum(Kind::Float);
    let vf = (v - targets).square().sum(Kind::Float) * 0.5;
    pi - entropy * 0.01 + vf * 0.5
}

/// The same network and loss terms in plain tch with libtorch's Adam.
struct Bare {
    net: nn::Sequential,
    logits: nn::Linear,
    value: nn::Linear,
    opt: nn::Optimizer,
}

impl Bare {
    fn new() -> Result<Self, tch::TchError> {
        let vs = nn::VarStore::new(Device::Cpu);
        let p = vs.root();
        let net = nn::seq()
            .add(nn::linear(&p / "fc0", 4, 256, Default::default()))
            .add_fn(|x| x.tanh())
            .add(nn::linear(&p / "fc1", 256, 256, Default::default()))
            .add_fn(|x| x.tanh());
        let logits = nn::linear(&p / "logits", 256, 2, Default::default());
        let value = nn::linear(&p / "value", 256, 1, Default::default());
        let opt = nn::Adam::default().build(&vs, 5e-4)?;
        Ok(Bare { net, logits, value, opt })
    }

    fn step(&mut self, obs: &Tensor, actions: &Tensor, adv: &Tensor, targets: &Tensor) -> f64 {
        let h = self.net.forward(obs);
        let logp = self.logits.forward(&h).log_softmax(-1, Kind::Float);
        let v = self.value.forward(&h).squeeze_dim(1);
        let loss = bare_loss(&logp, &v, actions, adv, targets);
        self.opt.backward_step(&loss);
        loss.double_value(&[])
    }
}

/// The learner's and the learner thread's settings of RLlib's defaults with seed 0.
fn default_settings() -> (LearnerSettings, LearnerThreadSettings) {
    (
        LearnerSettings { model_seed: 0, ..LearnerSettings::default() },
        LearnerThreadSettings::default(),
    )
}

fn cartpole_train_batch(c: &mut Criterion) {
    tch::set_num_threads(1);
    let spec = cartpole();
    let (settings, thread_settings) = default_settings();
    let train = batch(&spec, CARTPOLE_B, 0);
    let n = (T * CARTPOLE_B) as i64;
    let mut group = c.benchmark_group("cartpole_train_batch_800");
    group.throughput(Throughput::Elements(n as u64));

    if let Ok(mut bare) = Bare::new() {
        let obs = Tensor::from_slice(&train.obs.to_f32()).view([n, 4]);
        let actions = Tensor::from_slice(&train.actions).to_kind(Kind::Int64).view([n, 1]);
        let adv = Tensor::from_slice(&train.rewards);
        let targets = Tensor::from_slice(&train.rewards);
        group.bench_function("bare_libtorch_step", |b| {
            b.iter(|| black_box(bare.step(&obs, &actions, &adv, &targets)))
        });
    }
    if let Ok(mut learner) = Learner::new(&settings, &spec, Device::Cpu) {
        group.bench_function("learner_update", |b| {
            b.iter(|| black_box(learner.update(&train, 0).map(|s| s.total_loss)))
        });
    }
    for (name, weights_every_step) in
        [("learner_thread", false), ("learner_thread_weights_every_step", true)]
    {
        let Ok(handle) = Learner::new(&settings, &spec, Device::Cpu)
            .and_then(|l| LearnerHandle::spawn(&thread_settings, l))
        else {
            continue;
        };
        // Steady state: the driver keeps AHEAD batches queued (as a training loop does), so the
        // learner thread never waits on the driver; one iteration = one batch trained.
        const AHEAD: usize = 4;
        let (mut sent, mut received) = (0usize, 0usize);
        group.bench_function(name, |b| {
            b.iter(|| {
                if weights_every_step {
                    black_box(handle.take_new_weights());
                    handle.request_weights();
                }
                while sent < received + AHEAD + 1 {
                    let mut pending = Some(train.clone());
                    while let Some(batch) = pending.take() {
                        pending = handle.try_enqueue(batch).err();
                    }
                    sent += 1;
                }
                while received + AHEAD < sent {
                    match handle.drain_wait(Duration::from_secs(60)) {
                        Ok(out) => received += out.len(),
                        Err(_) => return,
                    }
                }
            })
        });
    }
    group.finish();
}

/// RLlib's 84x84 Atari conv net (`[16, 8, 4], [32, 4, 2], [256, 11, 1]`, ReLU, linear logits
/// and value heads) in plain tch: bytes scaled and viewed channels-last as the learner does,
/// the same loss terms, backward, global-norm clipping at 40 and libtorch's Adam; in bf16 the
/// forward pass runs under the same [`Autocast`] guard the learner uses.
struct BareCnn {
    convs: Vec<nn::Conv2D>,
    logits: nn::Linear,
    value: nn::Linear,
    opt: nn::Optimizer,
    precision: Precision,
}

impl BareCnn {
    fn new(precision: Precision) -> Result<Self, TchError> {
        let vs = nn::VarStore::new(Device::Cpu);
        let p = vs.root();
        let conv = |name: &str, i, o, k, stride, padding| {
            let config = nn::ConvConfig { stride, padding, ..Default::default() };
            nn::conv2d(&p / name, i, o, k, config)
        };
        // 84 -> 21 -> 11 -> 1, RLlib's output sizes.
        let convs = vec![
            conv("conv0", 4, 16, 8, 4, 2),
            conv("conv1", 16, 32, 4, 2, 2),
            conv("conv2", 32, 256, 11, 1, 0),
        ];
        let logits = nn::linear(&p / "logits", 256, 6, Default::default());
        let value = nn::linear(&p / "value", 256, 1, Default::default());
        let opt = nn::Adam::default().build(&vs, 5e-4)?;
        Ok(BareCnn { convs, logits, value, opt, precision })
    }

    fn step(&mut self, obs: &Tensor, actions: &Tensor, adv: &Tensor, targets: &Tensor) -> f64 {
        let autocast = match self.precision {
            Precision::Bf16Mixed => Autocast::bf16(Device::Cpu).ok(),
            Precision::Fp32 => None,
        };
        let mut x = (obs.to_kind(Kind::Float) / 255.0).permute([0, 3, 1, 2]);
        for conv in &self.convs {
            x = conv.forward(&x).relu();
        }
        let h = x.flatten(1, -1);
        let (logits, v) = (self.logits.forward(&h), self.value.forward(&h));
        drop(autocast);
        let logp = logits.to_kind(Kind::Float).log_softmax(-1, Kind::Float);
        let v = v.to_kind(Kind::Float).squeeze_dim(1);
        let loss = bare_loss(&logp, &v, actions, adv, targets);
        self.opt.backward_step_clip_norm(&loss, 40.0);
        loss.double_value(&[])
    }
}

/// The Atari conv net's learner step on the CPU at 1 and 2 libtorch threads, in float32 and
/// bf16-mixed, each beside the bare tch step ([`BareCnn`]). bf16-mixed is skipped, saying why,
/// on a CPU without bfloat16 instructions.
fn atari_train_batch(c: &mut Criterion) {
    let spec = atari();
    let (settings, _) = default_settings();
    let train = batch(&spec, B, 2);
    let n = (T * B) as i64;
    let obs = Tensor::from_slice(&train.obs.to_f32()).to_kind(Kind::Uint8).view([n, 84, 84, 4]);
    let actions = Tensor::from_slice(&train.actions).to_kind(Kind::Int64).view([n, 1]);
    let adv = Tensor::from_slice(&train.rewards);
    let mut group = c.benchmark_group("atari_cnn_train_batch_500");
    group.throughput(Throughput::Elements(n as u64));
    group.sample_size(10);
    for precision in [Precision::Fp32, Precision::Bf16Mixed] {
        if let Err(e) = impala_learner::check_precision(precision, Device::Cpu) {
            eprintln!("atari_cnn_train_batch_500: skipping {precision}: {e}");
            continue;
        }
        let settings = LearnerSettings { precision, ..settings.clone() };
        for threads in [1, 2] {
            tch::set_num_threads(threads);
            if let Ok(mut bare) = BareCnn::new(precision) {
                let id =
                    BenchmarkId::new(format!("bare_libtorch_step_{precision}_threads"), threads);
                group.bench_function(id, |b| {
                    b.iter(|| black_box(bare.step(&obs, &actions, &adv, &adv)))
                });
            }
            if let Ok(mut learner) = Learner::new(&settings, &spec, Device::Cpu) {
                let id = BenchmarkId::new(format!("learner_update_{precision}_threads"), threads);
                group.bench_function(id, |b| {
                    b.iter(|| black_box(learner.update(&train, 0).map(|s| s.total_loss)))
                });
            }
        }
    }
    tch::set_num_threads(1);
    group.finish();
}

/// A hand-written tch training step on a TorchScript module returning `(logits, value)`:
/// forward, the learner's loss terms, backward, libtorch's Adam with global-norm clipping.
struct BareScripted {
    module: TrainableCModule,
    opt: nn::Optimizer,
    _vs: nn::VarStore,
}

impl BareScripted {
    fn new(path: &Path) -> Result<Self, TchError> {
        let vs = nn::VarStore::new(Device::Cpu);
        let mut module = TrainableCModule::load(path, vs.root())?;
        module.f_set_train()?;
        let opt = nn::Adam::default().build(&vs, 5e-4)?;
        Ok(BareScripted { module, opt, _vs: vs })
    }

    fn step(
        &mut self,
        obs: &Tensor,
        actions: &Tensor,
        adv: &Tensor,
        targets: &Tensor,
    ) -> Result<f64, TchError> {
        let IValue::Tuple(out) = self.module.forward_is(&[IValue::Tensor(obs.shallow_clone())])?
        else {
            return Err(TchError::Kind("forward should return (logits, value)".into()));
        };
        let [IValue::Tensor(logits), IValue::Tensor(v)] = &out[..] else {
            return Err(TchError::Kind("forward should return (logits, value)".into()));
        };
        let logp = logits.log_softmax(-1, Kind::Float);
        let loss = bare_loss(&logp, v, actions, adv, targets);
        self.opt.backward_step_clip_norm(&loss, 40.0);
        loss.f_double_value(&[])
    }
}

/// `Learner::update` of the fast Pong config's net (`examples/pong-impala-fast.toml`: 42x42x4
/// bytes, RLlib's filters for 42x42, a 256-unit post layer; 1.07M weights) on its train batch of
/// 160 (T = 10, B = 16), float32, one libtorch thread: the step the Pong learner repeats, where
/// the optimizer's share is largest. `benches/atari_cnn_pytorch.py --net pong-fast` times bare
/// PyTorch's with its default (`foreach`) and its `fused=True` Adam.
fn pong_fast_train_batch(c: &mut Criterion) {
    tch::set_num_threads(1);
    let spec = common::atari_of(42);
    let (mut settings, _) = default_settings();
    settings.model.post_fcnet_hiddens = vec![256];
    let train = common::batch_of(&spec, 10, 16, 2);
    let mut group = c.benchmark_group("pong_fast_train_batch_160");
    group.throughput(Throughput::Elements(160));
    if let Ok(mut learner) = Learner::new(&settings, &spec, Device::Cpu) {
        group.bench_function("learner_update", |b| {
            b.iter(|| black_box(learner.update(&train, 0).map(|s| s.total_loss)))
        });
    }
    group.finish();
}

/// The embedded CartPole config's network at train batch 500: built in, as TorchScript through
/// the learner, and the same TorchScript module in a bare tch loop.
fn cartpole_custom_model_train_batch(c: &mut Criterion) {
    tch::set_num_threads(1);
    let Some(path) = scripted_cartpole_mlp() else {
        return;
    };
    let spec = cartpole();
    let train = batch(&spec, B, 0);
    let n = (T * B) as i64;
    let mut group = c.benchmark_group("cartpole_64x64_train_batch_500");
    group.throughput(Throughput::Elements(n as u64));
    if let Ok(mut bare) = BareScripted::new(&path) {
        let obs = Tensor::from_slice(&train.obs.to_f32()).view([n, 4]);
        let actions = Tensor::from_slice(&train.actions).to_kind(Kind::Int64).view([n, 1]);
        let adv = Tensor::from_slice(&train.rewards);
        let targets = Tensor::from_slice(&train.rewards);
        group.bench_function("bare_libtorch_torchscript_step", |b| {
            b.iter(|| black_box(bare.step(&obs, &actions, &adv, &targets)))
        });
    }
    let builtin = ModelSettings {
        fcnet_hiddens: vec![64, 64],
        vf_share_layers: false,
        ..ModelSettings::default()
    };
    let scripted = ModelSettings {
        custom_model: Some(CustomModel::TorchScript(path.clone())),
        ..builtin.clone()
    };
    let models = [("torchscript", scripted), ("builtin", builtin)];
    for (name, model) in &models {
        let settings =
            LearnerSettings { model_seed: 0, model: model.clone(), ..Default::default() };
        match Learner::new(&settings, &spec, Device::Cpu) {
            Ok(mut learner) => {
                group.bench_function(format!("learner_update_{name}"), |b| {
                    b.iter(|| black_box(learner.update(&train, 0).map(|s| s.total_loss)))
                });
            }
            Err(e) => println!("learner_update_{name}: {e}"),
        }
    }
    group.finish();
    // What an env runner of the embedded config does per step: act for its 8 envs.
    for (name, model) in &models {
        match TorchPolicy::new(model, &spec, 0, 0) {
            Ok(policy) => {
                let group = format!("cartpole_64x64_{name}_policy_inference");
                bench_inference(c, &group, policy, &spec, &[1, 8]);
            }
            Err(e) => println!("{name} policy: {e}"),
        }
    }
    let _ = std::fs::remove_file(&path);
}

/// The IMPALA paper's ResNet's learner step on 84x84x4 byte observations on the CPU at 1 and 2
/// libtorch threads (`benches/resnet_pytorch.py` is bare PyTorch's).
fn impala_resnet_train_batch(c: &mut Criterion) {
    let spec = atari();
    let model = ModelSettings {
        custom_model: Some(CustomModel::ImpalaResNet(ResNetSettings::default())),
        ..ModelSettings::default()
    };
    let settings = LearnerSettings { model_seed: 0, model, ..LearnerSettings::default() };
    let train = batch(&spec, B, 2);
    let mut group = c.benchmark_group("impala_resnet_train_batch_500");
    group.throughput(Throughput::Elements((T * B) as u64));
    group.sample_size(10);
    for threads in [1, 2] {
        tch::set_num_threads(threads);
        match Learner::new(&settings, &spec, Device::Cpu) {
            Ok(mut learner) => {
                group.bench_function(BenchmarkId::new("learner_update_threads", threads), |b| {
                    b.iter(|| black_box(learner.update(&train, 0).map(|s| s.total_loss)))
                });
            }
            Err(e) => println!("impala_resnet: {e}"),
        }
    }
    tch::set_num_threads(1);
    group.finish();
}

fn policy_inference(c: &mut Criterion) {
    tch::set_num_threads(1);
    let (settings, _) = default_settings();
    for (name, spec, sizes) in
        [("cartpole", cartpole(), [1usize, 8, 32]), ("atari", atari(), [1, 4, 8])]
    {
        let Ok(policy) = TorchPolicy::new(&settings.model, &spec, settings.model_seed, 0) else {
            continue;
        };
        bench_inference(c, &format!("{name}_policy_inference"), policy, &spec, &sizes);
    }
    // The Atari runners' inference in bf16-mixed, where this CPU runs it.
    let spec = atari();
    if let Ok(policy) = TorchPolicy::new(&settings.model, &spec, settings.model_seed, 0)
        .and_then(|p| p.with_precision(Precision::Bf16Mixed))
    {
        bench_inference(c, "atari_policy_inference_bf16-mixed", policy, &spec, &[1, 4, 8]);
    }
    // The fast Pong config's net on a runner's group of 8 games and on both groups (16), in
    // float32 (what runners run) and bf16-mixed (what they ran before).
    let spec = common::atari_of(42);
    let mut pong = settings.model.clone();
    pong.post_fcnet_hiddens = vec![256];
    for precision in [Precision::Fp32, Precision::Bf16Mixed] {
        if let Ok(policy) = TorchPolicy::new(&pong, &spec, settings.model_seed, 0)
            .and_then(|p| p.with_precision(precision))
        {
            let name = format!("pong_fast_policy_inference_{precision}");
            bench_inference(c, &name, policy, &spec, &[8, 16]);
        }
    }
}

/// `compute_actions` of `policy` for each number of envs in `sizes`.
fn bench_inference(
    c: &mut Criterion,
    name: &str,
    mut policy: TorchPolicy,
    spec: &EnvSpec,
    sizes: &[usize],
) {
    let obs_dim = spec.observation_space.flat_dim();
    let mut group = c.benchmark_group(name);
    for &n in sizes {
        let obs: Vec<f32> = (0..n * obs_dim).map(|i| (i % 7) as f32 * 0.1 - 0.3).collect();
        let mut out = PolicyOutput::default();
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::new("compute_actions", n), &n, |b, &n| {
            b.iter(|| {
                black_box(policy.compute_actions(
                    &PolicyInput { obs: &obs, num_envs: n, state: &[], explore: true },
                    &mut out,
                ))
            })
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    cartpole_train_batch,
    cartpole_custom_model_train_batch,
    atari_train_batch,
    pong_fast_train_batch,
    impala_resnet_train_batch,
    policy_inference
);
criterion_main!(benches);
