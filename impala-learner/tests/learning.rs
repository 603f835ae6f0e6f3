//! The learner learns: on an on-policy contextual bandit the reward rises and the losses fall.

use impala_core::{Policy, PolicyInput, PolicyOutput, SampleBatch, Space};
use impala_learner::{Learner, TorchPolicy};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tch::Device;

use crate::common::{settings, spec, TestResult};

/// Observations in [-1, 1]^4; the right action is `obs[0] > 0` (reward 1, else 0); episodes
/// last one step. Returns (mean reward, vf_loss) of each of `iters` iterations.
pub fn learn_bandit(
    device: Device,
    iters: usize,
) -> Result<Vec<(f64, f64)>, Box<dyn std::error::Error>> {
    let s = spec(4, Space::Discrete(2));
    let mut settings = settings(vec![32]);
    settings.optimizer.lr = 0.01;
    settings.loss.loss_reduction = impala_core::LossReduction::Mean;
    let mut learner = Learner::new(&settings, &s, device)?;
    let mut policy = TorchPolicy::new(&settings.model, &s, settings.model_seed, 5)?;
    let mut rng = SmallRng::seed_from_u64(0);
    let (t, b) = (4, 32);
    let mut history = Vec::with_capacity(iters);
    for _ in 0..iters {
        let mut batch = SampleBatch::zeros(t, b, &s.observation_space, &s.action_space, 0);
        let mut out = PolicyOutput::default();
        for step in 0..t {
            let obs: Vec<f32> = (0..b * 4).map(|_| rng.random_range(-1.0..1.0)).collect();
            policy.compute_actions(
                &PolicyInput { obs: &obs, num_envs: b, state: &[], explore: true },
                &mut out,
            )?;
            for row in 0..b {
                let i = step * b + row;
                batch.obs.write(i * 4, &obs[row * 4..(row + 1) * 4]);
                batch.actions[i] = out.actions[row];
                batch.action_logp[i] = out.action_logp[row];
                batch.vf_preds[i] = out.vf_preds[row];
                let right = if obs[row * 4] > 0.0 { 1.0 } else { 0.0 };
                batch.rewards[i] = if out.actions[row] == right { 1.0 } else { 0.0 };
                batch.terminateds[i] = true;
            }
        }
        let mean_reward = batch.rewards.iter().sum::<f32>() as f64 / (t * b) as f64;
        let stats = learner.update(&batch, 0)?;
        policy.set_weights(&learner.weights()?)?;
        history.push((mean_reward, stats.vf_loss));
    }
    Ok(history)
}

pub fn check_learning(device: Device) -> TestResult {
    let h = learn_bandit(device, 150)?;
    let mean =
        |s: &[(f64, f64)], f: fn(&(f64, f64)) -> f64| s.iter().map(f).sum::<f64>() / s.len() as f64;
    let (first, last) = (&h[..10], &h[h.len() - 10..]);
    let (r0, r1) = (mean(first, |x| x.0), mean(last, |x| x.0));
    let (v0, v1) = (mean(first, |x| x.1), mean(last, |x| x.1));
    assert!(r0 < 0.7 && r1 > 0.9, "mean reward {r0} -> {r1}");
    assert!(v1 < v0 * 0.5, "vf_loss {v0} -> {v1}");
    Ok(())
}

#[test]
fn reward_rises_and_vf_loss_falls_on_a_bandit() -> TestResult {
    check_learning(Device::Cpu)
}
