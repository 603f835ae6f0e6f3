//! The learner learns: on an on-policy contextual bandit the reward rises and the losses fall.

use impala_core::{EnvSpec, Policy, PolicyInput, PolicyOutput, SampleBatch, Space};
use impala_learner::{Learner, TorchPolicy};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tch::Device;

use crate::common::{settings, spec, TestResult};

/// An on-policy contextual bandit: each iteration `contexts` draws `t x b` observations with
/// the right action for each, `policy` acts, the reward is 1 for the right action and 0 otherwise
/// (episodes of one step), and `learner` trains on the batch. Returns (mean reward, vf_loss) of
/// each of `iters` iterations.
pub fn run_bandit(
    learner: &mut Learner,
    policy: &mut TorchPolicy,
    spec: &EnvSpec,
    iters: usize,
    mut contexts: impl FnMut(&mut SmallRng, usize) -> (Vec<f32>, Vec<f32>),
) -> Result<Vec<(f64, f64)>, Box<dyn std::error::Error>> {
    let mut rng = SmallRng::seed_from_u64(0);
    let (t, b, dim) = (4, 32, spec.observation_space.flat_dim());
    let mut history = Vec::with_capacity(iters);
    let mut out = PolicyOutput::default();
    for _ in 0..iters {
        let mut batch = SampleBatch::zeros(t, b, &spec.observation_space, &spec.action_space, 0);
        for step in 0..t {
            let (obs, right) = contexts(&mut rng, b);
            policy.compute_actions(
                &PolicyInput { obs: &obs, num_envs: b, state: &[], explore: true },
                &mut out,
            )?;
            for row in 0..b {
                let i = step * b + row;
                batch.obs.write(i * dim, &obs[row * dim..(row + 1) * dim]);
                batch.actions[i] = out.actions[row];
                batch.action_logp[i] = out.action_logp[row];
                batch.vf_preds[i] = out.vf_preds[row];
                batch.rewards[i] = if out.actions[row] == right[row] { 1.0 } else { 0.0 };
                batch.terminateds[i] = true;
            }
        }
        let mean_reward = batch.rewards.iter().sum::<f32>() as f64 / (t * b) as f64;
        let stats = learner.update(&batch, 0)?;
        assert!(stats.total_loss.is_finite() && stats.grad_gnorm.is_finite(), "{stats:?}");
        policy.set_weights(&learner.weights()?)?;
        history.push((mean_reward, stats.vf_loss));
    }
    Ok(history)
}

/// [`run_bandit`] on observations in [-1, 1]^4 whose right action is `obs[0] > 0`.
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
    run_bandit(&mut learner, &mut policy, &s, iters, |rng, b| {
        let obs: Vec<f32> = (0..b * 4).map(|_| rng.random_range(-1.0..1.0)).collect();
        let right = (0..b).map(|row| if obs[row * 4] > 0.0 { 1.0 } else { 0.0 }).collect();
        (obs, right)
    })
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
