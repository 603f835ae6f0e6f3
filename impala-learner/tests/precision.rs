//! `precision = "bf16-mixed"`: bfloat16 forward passes under autocast with float32 weights,
//! optimizer state and loss, learning on pixels as float32 does; where the CPU has no bfloat16
//! instructions, refused with the reason (each test checks whichever this CPU calls for).

use impala_core::{EnvSpec, Policy, PolicyInput, PolicyOutput, Precision, Space};
use impala_learner::{check_precision, Learner, LearnerError, LearnerSettings, TorchPolicy};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tch::{Device, Kind};

use crate::common::TestResult;
use crate::learning::run_bandit;

const SIDE: usize = 10;

/// 10x10 grey frames; RLlib's default filters for 10x10 images.
fn pixels() -> EnvSpec {
    EnvSpec {
        id: "PixelBandit".into(),
        observation_space: Space::Bytes { shape: vec![SIDE, SIDE, 1] },
        action_space: Space::Discrete(2),
        max_episode_steps: None,
    }
}

fn settings(precision: Precision) -> LearnerSettings {
    let mut s = LearnerSettings { model_seed: 3, precision, ..LearnerSettings::default() };
    s.optimizer.lr = 3e-3;
    s.loss.loss_reduction = impala_core::LossReduction::Mean;
    s
}

/// Whether this CPU runs bf16-mixed; where it does not, asserts that the learner and the
/// policy refuse it with the reason and the fix.
fn bf16_runs_here() -> Result<bool, Box<dyn std::error::Error>> {
    if check_precision(Precision::Bf16Mixed, Device::Cpu).is_ok() {
        return Ok(true);
    }
    let (spec, s) = (pixels(), settings(Precision::Bf16Mixed));
    let learner = Learner::new(&s, &spec, Device::Cpu);
    let policy = TorchPolicy::new(&s.model, &spec, 3, 0)?.with_precision(Precision::Bf16Mixed);
    for err in [learner.err(), policy.err()] {
        let Some(LearnerError::Precision { reason }) = err else {
            panic!("bf16-mixed on a CPU without bfloat16 instructions was not refused");
        };
        assert!(reason.contains("no bfloat16 instructions"), "{reason}");
        assert!(reason.contains("set precision = \"fp32\""), "{reason}");
    }
    Ok(false)
}

/// One frame per env with a single lit pixel; the rewarded action is the half it lies in.
fn frames(rng: &mut SmallRng, n: usize) -> (Vec<f32>, Vec<f32>) {
    let mut obs = vec![0.0; n * SIDE * SIDE];
    let mut right = Vec::with_capacity(n);
    for i in 0..n {
        let (row, col) = (rng.random_range(0..SIDE), rng.random_range(0..SIDE));
        obs[i * SIDE * SIDE + row * SIDE + col] = 255.0;
        right.push(if col >= SIDE / 2 { 1.0 } else { 0.0 });
    }
    (obs, right)
}

/// Mean reward of each of `iters` on-policy iterations of the pixel bandit.
fn learn_pixels(
    precision: Precision,
    iters: usize,
) -> Result<Vec<f64>, Box<dyn std::error::Error>> {
    let (spec, s) = (pixels(), settings(precision));
    let mut learner = Learner::new(&s, &spec, Device::Cpu)?;
    let mut policy =
        TorchPolicy::new(&s.model, &spec, s.model_seed, 5)?.with_precision(precision)?;
    let history = run_bandit(&mut learner, &mut policy, &spec, iters, frames)?;
    for (name, p) in learner.model().parameters() {
        assert_eq!(p.kind(), Kind::Float, "weight `{name}` left float32");
    }
    Ok(history.into_iter().map(|(reward, _)| reward).collect())
}

#[test]
fn bf16_mixed_learns_pixels_as_float32_does() -> TestResult {
    if !bf16_runs_here()? {
        return Ok(());
    }
    let last = |r: &[f64]| r[r.len() - 10..].iter().sum::<f64>() / 10.0;
    let fp32 = learn_pixels(Precision::Fp32, 120)?;
    let bf16 = learn_pixels(Precision::Bf16Mixed, 120)?;
    let (first, a, b) = (fp32[..10].iter().sum::<f64>() / 10.0, last(&fp32), last(&bf16));
    assert!(first < 0.7, "the bandit starts near chance ({first})");
    assert!(a > 0.9 && b > 0.9 && b > a - 0.05, "last 10 iterations: fp32 {a}, bf16-mixed {b}");
    Ok(())
}

#[test]
fn bf16_mixed_inference_is_bfloat16_close_to_float32() -> TestResult {
    if !bf16_runs_here()? {
        return Ok(());
    }
    let spec = pixels();
    let s = settings(Precision::Fp32);
    let mut rng = SmallRng::seed_from_u64(1);
    let (obs, _) = frames(&mut rng, 16);
    let mut logits = Vec::new();
    for precision in [Precision::Fp32, Precision::Bf16Mixed] {
        let mut policy = TorchPolicy::new(&s.model, &spec, 3, 0)?.with_precision(precision)?;
        let mut out = PolicyOutput::default();
        let input = PolicyInput { obs: &obs, num_envs: 16, state: &[], explore: false };
        policy.compute_actions(&input, &mut out)?;
        assert!(out.action_logp.iter().all(|l| l.is_finite()));
        logits.push(out.action_dist_inputs);
    }
    let diff = logits[0].iter().zip(&logits[1]).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
    let scale = logits[0].iter().map(|a| a.abs()).fold(0.0, f32::max);
    // bfloat16 keeps 8 significant bits: the logits move, by about 2^-8 of their size.
    assert!(diff > 0.0, "bf16-mixed gave float32's exact logits: autocast did not run");
    assert!(diff < 0.05 * scale.max(1e-3), "logits differ by {diff} (largest {scale})");
    Ok(())
}
