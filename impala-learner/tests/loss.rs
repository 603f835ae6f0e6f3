//! The loss, the statistics and the first optimizer step against an independent f64
//! computation.
//!
//! How the expected numbers are made: the model is linear (`fcnet_hiddens = []`, shared value
//! layer), so with the learner's initial weights `W, b` (logits) and `v, c` (value) the test
//! computes in f64, by hand: logits `W x + b`, log-softmax, the target log-prob of the taken
//! action, the entropy, values `v.x + c` and the bootstrap values `V(bootstrap_obs)`; rewards
//! and discounts with DESIGN.md's truncation rule; V-trace by DeepMind's O(T^2) ground-truth
//! formula (`vtrace_test.py::_ground_truth_calculation`), or A3C returns; the loss terms of
//! RLlib's `VTraceLoss`; and the analytic gradient (softmax: `-adv (onehot - p)`, entropy:
//! `p (log p + H)`, value: `V - vs`), its global norm and the first Adam / RMSprop step.

use impala_core::{
    ConvFilter, LossReduction, Observations, OptType, SampleBatch, Schedule, Space, Weights,
};
use impala_learner::{Learner, LearnerSettings};
use tch::Device;

use crate::common::{nz, random_batch, settings, spec, TestResult};

const OBS: usize = 3;
const ACTIONS: usize = 3;
const T: usize = 4;
const B: usize = 3;

/// One variant of the loss configuration.
#[derive(Clone, Copy)]
enum Variant {
    VTraceSum,
    VTraceMeanDropLast,
    A3cSum,
    RmsProp,
    SeparateVf,
}

fn variant_settings(v: Variant) -> LearnerSettings {
    let mut c = settings(vec![]);
    c.loss.gamma = 0.9;
    c.optimizer.lr = 0.01;
    c.loss.entropy_coeff = 0.1;
    c.loss.vf_loss_coeff = 0.5;
    c.optimizer.grad_clip = None;
    c.loss.vtrace_clip_rho_threshold = Some(1.2);
    c.loss.vtrace_clip_pg_rho_threshold = Some(0.8);
    match v {
        Variant::VTraceSum => {}
        Variant::VTraceMeanDropLast => {
            c.loss.loss_reduction = LossReduction::Mean;
            c.loss.vtrace_drop_last_ts = true;
        }
        Variant::A3cSum => c.loss.vtrace = false,
        Variant::RmsProp => {
            c.optimizer.opt_type = OptType::Rmsprop;
            c.optimizer.decay = 0.9;
        }
        Variant::SeparateVf => {
            c.optimizer.separate_vf_optimizer = true;
            c.optimizer.lr_vf = 0.003;
        }
    }
    c
}

/// Row-major `[rows, cols]` weights of `name`.
fn tensor(w: &Weights, name: &str) -> Result<Vec<f64>, String> {
    let t = w.get(name).ok_or(format!("no tensor {name}"))?;
    Ok(t.data.iter().map(|&x| x as f64).collect())
}

struct Expected {
    policy_loss: f64,
    vf_loss: f64,
    entropy: f64,
    total_loss: f64,
    explained_var: f64,
    var_gnorm: f64,
    grad_gnorm: f64,
    /// (name, gradient) per parameter.
    grads: Vec<(String, Vec<f64>)>,
}

/// DeepMind's ground truth: `vs_s = V_s + sum_t (prod_{i<t} d_i c_i) rho_t delta_t`.
fn ground_truth_vtrace(
    log_rhos: &[f64],
    d: &[f64],
    r: &[f64],
    v: &[f64],
    boot: &[f64],
    steps: usize,
    (rho_bar, pg_bar): (f64, f64),
) -> (Vec<f64>, Vec<f64>) {
    let at = |t: usize, b: usize| t * B + b;
    let mut vs = vec![0.0; steps * B];
    let mut pg = vec![0.0; steps * B];
    for b in 0..B {
        let v_next = |t: usize| if t + 1 < steps { v[at(t + 1, b)] } else { boot[b] };
        for s in 0..steps {
            let mut acc = v[at(s, b)];
            let mut prod = 1.0;
            for t in s..steps {
                let rho = log_rhos[at(t, b)].exp();
                let delta =
                    rho.min(rho_bar) * (r[at(t, b)] + d[at(t, b)] * v_next(t) - v[at(t, b)]);
                acc += prod * delta;
                prod *= d[at(t, b)] * rho.min(1.0);
            }
            vs[at(s, b)] = acc;
        }
        for s in 0..steps {
            let vs_next = if s + 1 < steps { vs[at(s + 1, b)] } else { boot[b] };
            let rho = log_rhos[at(s, b)].exp();
            pg[at(s, b)] = rho.min(pg_bar) * (r[at(s, b)] + d[at(s, b)] * vs_next - v[at(s, b)]);
        }
    }
    (vs, pg)
}

fn expected(c: &LearnerSettings, w: &Weights, batch: &SampleBatch) -> Result<Expected, String> {
    let (wl, bl, wv, bv) = (
        tensor(w, "logits.weight")?,
        tensor(w, "logits.bias")?,
        tensor(w, "value.weight")?,
        tensor(w, "value.bias")?,
    );
    let gamma = c.loss.gamma;
    let value = |x: &[f32]| bv[0] + (0..OBS).map(|j| wv[j] * x[j] as f64).sum::<f64>();
    let n_all = T * B;
    let steps = if c.loss.vtrace_drop_last_ts { T - 1 } else { T };
    let n = steps * B;
    let (all_obs, all_bootstrap) = (batch.obs.to_f32(), batch.bootstrap_obs.to_f32());
    let obs = |i: usize| &all_obs[i * OBS..(i + 1) * OBS];
    // Per step: log-softmax, probabilities, target log-prob, entropy, value.
    let mut logp_all = vec![[0.0; ACTIONS]; n_all];
    let mut target_logp = vec![0.0; n_all];
    let mut entropy = vec![0.0; n_all];
    let mut values = vec![0.0; n_all];
    for i in 0..n_all {
        let x = obs(i);
        let z: Vec<f64> = (0..ACTIONS)
            .map(|k| bl[k] + (0..OBS).map(|j| wl[k * OBS + j] * x[j] as f64).sum::<f64>())
            .collect();
        let max = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = max + z.iter().map(|zk| (zk - max).exp()).sum::<f64>().ln();
        for k in 0..ACTIONS {
            logp_all[i][k] = z[k] - lse;
        }
        target_logp[i] = logp_all[i][batch.actions[i] as usize];
        entropy[i] = -(0..ACTIONS).map(|k| logp_all[i][k].exp() * logp_all[i][k]).sum::<f64>();
        values[i] = value(x);
    }
    let boot: Vec<f64> = if c.loss.vtrace_drop_last_ts {
        (0..B).map(|b| values[(T - 1) * B + b]).collect()
    } else {
        (0..B).map(|b| value(&all_bootstrap[b * OBS..(b + 1) * OBS])).collect()
    };
    let mut rewards = vec![0.0; n];
    let mut discounts = vec![0.0; n];
    for i in 0..n {
        let (term, trunc) = (batch.terminateds[i], batch.truncateds[i]);
        rewards[i] = batch.rewards[i] as f64
            + if trunc && !term { gamma * batch.truncation_values[i] as f64 } else { 0.0 };
        discounts[i] = if term || trunc { 0.0 } else { gamma };
    }
    let (vs, adv) = if c.loss.vtrace {
        let log_rhos: Vec<f64> =
            (0..n).map(|i| target_logp[i] - batch.action_logp[i] as f64).collect();
        let thr = |t: Option<f64>| t.unwrap_or(f64::INFINITY);
        ground_truth_vtrace(
            &log_rhos,
            &discounts,
            &rewards,
            &values,
            &boot,
            steps,
            (thr(c.loss.vtrace_clip_rho_threshold), thr(c.loss.vtrace_clip_pg_rho_threshold)),
        )
    } else {
        let mut ret = vec![0.0; n];
        for (b, &last) in boot.iter().enumerate() {
            let mut acc = last;
            for t in (0..steps).rev() {
                let i = t * B + b;
                acc = rewards[i] + discounts[i] * acc;
                ret[i] = acc;
            }
        }
        let adv = (0..n).map(|i| ret[i] - batch.vf_preds[i] as f64).collect();
        (ret, adv)
    };
    let scale = match c.loss.loss_reduction {
        LossReduction::Sum => 1.0,
        LossReduction::Mean => 1.0 / n as f64,
    };
    let pi_sum: f64 = -(0..n).map(|i| target_logp[i] * adv[i]).sum::<f64>();
    let vf_sum: f64 = 0.5 * (0..n).map(|i| (values[i] - vs[i]).powi(2)).sum::<f64>();
    let ent_sum: f64 = entropy[..n].iter().sum();
    let (ec, vc) = (c.loss.entropy_coeff, c.loss.vf_loss_coeff);
    // Gradients of the linear model.
    let (mut g_wl, mut g_bl, mut g_wv, mut g_bv) =
        (vec![0.0; ACTIONS * OBS], vec![0.0; ACTIONS], vec![0.0; OBS], 0.0);
    // With a separate vf optimizer the value parameters get d(vf_loss) without the coefficient.
    let vf_weight = if c.optimizer.separate_vf_optimizer { 1.0 } else { vc };
    for i in 0..n {
        let x = obs(i);
        let a = batch.actions[i] as usize;
        for k in 0..ACTIONS {
            let p = logp_all[i][k].exp();
            let onehot = if k == a { 1.0 } else { 0.0 };
            let dz = scale * (-adv[i] * (onehot - p) + ec * p * (logp_all[i][k] + entropy[i]));
            g_bl[k] += dz;
            for j in 0..OBS {
                g_wl[k * OBS + j] += dz * x[j] as f64;
            }
        }
        let dv = scale * vf_weight * (values[i] - vs[i]);
        g_bv += dv;
        for j in 0..OBS {
            g_wv[j] += dv * x[j] as f64;
        }
    }
    let grads = vec![
        ("logits.bias".to_string(), g_bl),
        ("logits.weight".to_string(), g_wl),
        ("value.bias".to_string(), vec![g_bv]),
        ("value.weight".to_string(), g_wv),
    ];
    let norm = |gs: &[&(String, Vec<f64>)]| {
        gs.iter().flat_map(|(_, g)| g.iter()).map(|x| x * x).sum::<f64>().sqrt()
    };
    let grad_gnorm = if c.optimizer.separate_vf_optimizer {
        norm(&[&grads[0], &grads[1]]) + norm(&[&grads[2], &grads[3]])
    } else {
        norm(&grads.iter().collect::<Vec<_>>())
    };
    let mean = |x: &[f64]| x.iter().sum::<f64>() / x.len() as f64;
    let var = |x: &[f64]| {
        let m = mean(x);
        x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (x.len() as f64 - 1.0)
    };
    let diff: Vec<f64> = (0..n).map(|i| vs[i] - values[i]).collect();
    let var_gnorm =
        [&wl, &bl, &wv, &bv].iter().flat_map(|v| v.iter()).map(|x| x * x).sum::<f64>().sqrt();
    Ok(Expected {
        policy_loss: pi_sum * scale,
        vf_loss: vf_sum * scale,
        entropy: ent_sum / n as f64,
        total_loss: (pi_sum - ec * ent_sum + vc * vf_sum) * scale,
        explained_var: (1.0 - var(&diff) / var(&vs)).max(-1.0),
        var_gnorm,
        grad_gnorm,
        grads,
    })
}

/// The first optimizer step by hand: Adam moves by `lr * g / (|g| + 1e-8)`; RMSprop (alpha =
/// decay, square_avg starting at 0) by `lr * g / (sqrt((1 - decay) g^2) + eps)`.
fn expected_step(c: &LearnerSettings, name: &str, p: f64, g: f64) -> f64 {
    match c.optimizer.opt_type {
        OptType::Adam => {
            let lr = if c.optimizer.separate_vf_optimizer && name.starts_with("value.") {
                c.optimizer.lr_vf
            } else {
                c.optimizer.lr
            };
            p - lr * g / (g.abs() + 1e-8)
        }
        OptType::Rmsprop => {
            p - c.optimizer.lr * g
                / (((1.0 - c.optimizer.decay) * g * g).sqrt() + c.optimizer.epsilon)
        }
    }
}

pub fn check_loss_and_step(device: Device) -> TestResult {
    let s = spec(OBS, Space::Discrete(ACTIONS));
    let batch = random_batch(&s, T, B, 0, 11);
    for v in [
        Variant::VTraceSum,
        Variant::VTraceMeanDropLast,
        Variant::A3cSum,
        Variant::RmsProp,
        Variant::SeparateVf,
    ] {
        let c = variant_settings(v);
        let mut learner = Learner::new(&c, &s, device)?;
        let before = learner.weights()?;
        let e = expected(&c, &before, &batch)?;
        let stats = learner.update(&batch, 0)?;
        let close = |what: &str, got: f64, want: f64| {
            assert!(
                (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                "{what}: learner {got}, by hand {want}"
            );
        };
        close("policy_loss", stats.policy_loss, e.policy_loss);
        close("vf_loss", stats.vf_loss, e.vf_loss);
        close("entropy", stats.entropy, e.entropy);
        close("total_loss", stats.total_loss, e.total_loss);
        close("vf_explained_var", stats.vf_explained_var, e.explained_var);
        close("var_gnorm", stats.var_gnorm, e.var_gnorm);
        close("grad_gnorm", stats.grad_gnorm, e.grad_gnorm);
        assert_eq!(
            (stats.cur_lr, stats.entropy_coeff, stats.num_grad_updates),
            (c.optimizer.lr, c.loss.entropy_coeff, 1)
        );
        let after = learner.weights()?;
        for (name, g) in &e.grads {
            let p0 = tensor(&before, name)?;
            let p1 = tensor(&after, name)?;
            for ((&x0, &x1), &gi) in p0.iter().zip(&p1).zip(g) {
                let want = expected_step(&c, name, x0, gi);
                assert!(
                    (x1 - want).abs() < 2e-5,
                    "{name}: stepped to {x1}, by hand {want} (g = {gi})"
                );
            }
        }
    }
    Ok(())
}

#[test]
fn loss_stats_and_first_step_match_a_hand_computation() -> TestResult {
    check_loss_and_step(Device::Cpu)
}

#[test]
fn schedules_follow_the_timestep() -> TestResult {
    let s = spec(OBS, Space::Discrete(ACTIONS));
    let mut c = variant_settings(Variant::VTraceSum);
    c.optimizer.lr_schedule = Some(Schedule { points: vec![(0, 0.1), (1000, 0.0)] });
    c.loss.entropy_coeff_schedule = Some(Schedule { points: vec![(0, 0.0), (1000, 1.0)] });
    let mut learner = Learner::new(&c, &s, Device::Cpu)?;
    let stats = learner.update(&random_batch(&s, T, B, 0, 1), 250)?;
    assert!((stats.cur_lr - 0.075).abs() < 1e-12);
    assert!((stats.entropy_coeff - 0.25).abs() < 1e-12);
    Ok(())
}

#[test]
fn grad_clip_reports_the_clipped_norm_and_bounds_the_step() -> TestResult {
    let s = spec(OBS, Space::Discrete(ACTIONS));
    let mut c = variant_settings(Variant::VTraceSum);
    c.optimizer.grad_clip = Some(1e-3);
    c.optimizer.opt_type = OptType::Rmsprop;
    c.optimizer.decay = 0.0;
    let batch = random_batch(&s, T, B, 0, 11);
    let mut learner = Learner::new(&c, &s, Device::Cpu)?;
    let before = learner.weights()?;
    let stats = learner.update(&batch, 0)?;
    // RLlib's apply_grad_clipping reports min(norm, grad_clip).
    assert!((stats.grad_gnorm - 1e-3).abs() < 1e-9, "{}", stats.grad_gnorm);
    // RMSprop with eps = 0.1 >> |g| moves by about lr * g / eps: at most lr * clip / eps overall.
    let after = learner.weights()?;
    let moved: f64 = before
        .tensors
        .iter()
        .zip(&after.tensors)
        .flat_map(|(a, b)| a.data.iter().zip(&b.data).map(|(x, y)| ((x - y) as f64).powi(2)))
        .sum::<f64>()
        .sqrt();
    assert!(
        moved <= c.optimizer.lr * 1e-3 / c.optimizer.epsilon * 1.01 && moved > 0.0,
        "moved {moved}"
    );
    Ok(())
}

#[test]
fn every_model_and_action_space_trains_a_step() -> TestResult {
    let image = impala_core::EnvSpec {
        id: "Image".into(),
        observation_space: Space::boxed(vec![0.0; 300], vec![1.0; 300], vec![10, 10, 3])?,
        action_space: Space::MultiDiscrete(vec![2, 3]),
        max_episode_steps: None,
    };
    let gaussian = spec(OBS, Space::continuous(vec![-1.0; 2], vec![1.0; 2])?);
    for (s, lstm, shared) in [
        (image.clone(), false, false),
        (image, true, true),
        (gaussian.clone(), false, false),
        (gaussian, true, true),
    ] {
        let mut c = settings(vec![8]);
        c.model.use_lstm = lstm;
        c.model.lstm_cell_size = nz(4);
        c.model.vf_share_layers = shared;
        c.model.conv_filters = Some(vec![ConvFilter::square(4, 5, 2), ConvFilter::square(8, 5, 2)]);
        let mut learner = Learner::new(&c, &s, Device::Cpu)?;
        let state_dim = learner.model().state_dim();
        let stats = learner.update(&random_batch(&s, 5, 3, state_dim, 1), 0)?;
        assert!(
            stats.total_loss.is_finite() && stats.grad_gnorm > 0.0,
            "{:?} lstm={lstm}: {stats:?}",
            s.action_space
        );
    }
    Ok(())
}

/// Byte frames (what Atari and users' uint8 envs produce) train exactly as the same frames
/// given as floats in `[0, 1]`: the model scales bytes on its device. The conv filters have
/// rectangular kernels and strides (RLlib's `[out, [kh, kw], [sh, sw]]`).
#[test]
fn byte_frames_train_as_unit_floats_with_rectangular_kernels() -> TestResult {
    let shape = vec![12, 6, 2];
    let n: usize = shape.iter().product();
    let as_bytes = impala_core::EnvSpec {
        id: "Frames".into(),
        observation_space: Space::Bytes { shape: shape.clone() },
        action_space: Space::Discrete(3),
        max_episode_steps: None,
    };
    let as_floats = impala_core::EnvSpec {
        observation_space: Space::boxed(vec![0.0; n], vec![1.0; n], shape)?,
        ..as_bytes.clone()
    };
    let mut c = settings(vec![8]);
    c.model.conv_filters = Some(vec![
        ConvFilter { out_channels: 4, kernel: [4, 2], stride: [2, 1] },
        ConvFilter { out_channels: 8, kernel: [6, 5], stride: [1, 1] },
    ]);
    let bytes_batch = random_batch(&as_bytes, 5, 3, 0, 7);
    assert_eq!(bytes_batch.obs.kind(), "bytes");
    let mut floats_batch = bytes_batch.clone();
    for obs in [&mut floats_batch.obs, &mut floats_batch.bootstrap_obs] {
        *obs = Observations::F32(obs.to_f32().iter().map(|v| v / 255.0).collect());
    }
    let mut from_bytes = Learner::new(&c, &as_bytes, Device::Cpu)?;
    let mut from_floats = Learner::new(&c, &as_floats, Device::Cpu)?;
    let kernels: Vec<Vec<usize>> = from_bytes
        .weights()?
        .tensors
        .iter()
        .filter(|t| t.name.ends_with("conv0.weight") || t.name.ends_with("conv1.weight"))
        .map(|t| t.shape.clone())
        .collect();
    assert!(
        kernels.contains(&vec![4, 2, 4, 2]) && kernels.contains(&vec![8, 4, 6, 5]),
        "{kernels:?}"
    );
    for step in 0..3 {
        let (a, b) = (from_bytes.update(&bytes_batch, 0)?, from_floats.update(&floats_batch, 0)?);
        assert!(
            (a.total_loss - b.total_loss).abs() <= 1e-4 * b.total_loss.abs().max(1.0),
            "step {step}: bytes {} vs floats {}",
            a.total_loss,
            b.total_loss
        );
    }
    Ok(())
}
