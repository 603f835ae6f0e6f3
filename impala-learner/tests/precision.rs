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

/// Any thread that trains or runs a model flushes denormals to zero (x86's FTZ and DAZ), not
/// only the threads the library spawns: a bench or a user's loop calling `Learner::update` or
/// `compute_actions` directly gets the same speed on Intel CPUs.
#[cfg(target_arch = "x86_64")]
#[test]
fn threads_that_update_or_infer_flush_denormals() -> TestResult {
    use crate::common::{random_batch, settings, spec};
    // 1e-37 * 1e-3 is 1e-40, below float32's smallest normal value (1.2e-38).
    fn tiny() -> f32 {
        f32::try_from(tch::Tensor::from_slice(&[1e-37f32]) * 1e-3).unwrap_or(f32::NAN)
    }
    let on_a_new_thread = |update: bool| {
        std::thread::spawn(move || -> Result<(f32, f32), String> {
            let before = tiny();
            let (s, spec) = (settings(vec![8]), spec(4, Space::Discrete(2)));
            if update {
                let mut learner =
                    Learner::new(&s, &spec, Device::Cpu).map_err(|e| e.to_string())?;
                learner.update(&random_batch(&spec, 5, 4, 0, 1), 0).map_err(|e| e.to_string())?;
            } else {
                let mut policy =
                    TorchPolicy::new(&s.model, &spec, 0, 0).map_err(|e| e.to_string())?;
                let mut out = PolicyOutput::default();
                let input = PolicyInput { obs: &[0.0; 4], num_envs: 1, state: &[], explore: true };
                policy.compute_actions(&input, &mut out).map_err(|e| e.to_string())?;
            }
            Ok((before, tiny()))
        })
        .join()
        .map_err(|_| "the thread panicked".to_string())?
    };
    for update in [true, false] {
        let (before, after) = on_a_new_thread(update)?;
        assert!(before > 0.0 && before < f32::MIN_POSITIVE, "{before}");
        assert_eq!(after, 0.0, "update: {update}");
    }
    Ok(())
}
