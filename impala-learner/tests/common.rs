//! Shared fixtures: specs, settings and seeded random batches.

use std::num::NonZeroUsize;

use impala_core::{EnvSpec, SampleBatch, Space};
use impala_learner::{LearnerSettings, LearnerStats, TorchPolicy};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

pub type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A spec with `obs_dim` continuous observations in [-1, 1].
pub fn spec(obs_dim: usize, action_space: Space) -> EnvSpec {
    EnvSpec {
        id: "Test".into(),
        observation_space: Space::Box {
            low: vec![-1.0; obs_dim],
            high: vec![1.0; obs_dim],
            shape: vec![obs_dim],
        },
        action_space,
        max_episode_steps: None,
    }
}

/// Small, seeded learner settings: RLlib's defaults with `model_seed` 3 and `hiddens`.
pub fn settings(hiddens: Vec<usize>) -> LearnerSettings {
    let mut c = LearnerSettings { model_seed: 3, ..LearnerSettings::default() };
    c.model.fcnet_hiddens = hiddens;
    c
}

/// A count for the settings' [`NonZeroUsize`] fields (the tests only write positive ones).
pub fn nz(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN)
}

/// The runners' policy for test settings: the learner's model and initial weights.
pub fn runner_policy(
    c: &LearnerSettings,
    spec: &EnvSpec,
    sample_seed: u64,
) -> Result<TorchPolicy, Box<dyn std::error::Error>> {
    Ok(TorchPolicy::new(&c.model, spec, c.model_seed, sample_seed)?)
}

/// A random batch for `spec`: observations, valid actions, behaviour log-probs, rewards, some
/// terminations and truncations (with truncation values), behaviour values and states.
pub fn random_batch(
    spec: &EnvSpec,
    t: usize,
    b: usize,
    state_dim: usize,
    seed: u64,
) -> SampleBatch {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut batch =
        SampleBatch::zeros(t, b, &spec.observation_space, &spec.action_space, state_dim);
    let bytes = matches!(spec.observation_space, Space::Bytes { .. });
    for obs in [&mut batch.obs, &mut batch.bootstrap_obs] {
        let values: Vec<f32> = (0..obs.len())
            .map(|_| {
                if bytes {
                    rng.random_range(0..=255u8).into()
                } else {
                    rng.random_range(-1.0..1.0)
                }
            })
            .collect();
        obs.write(0, &values);
    }
    batch.state_in.iter_mut().for_each(|x| *x = rng.random_range(-0.5..0.5));
    let nvec: Vec<usize> = match &spec.action_space {
        Space::Discrete(n) => vec![*n],
        Space::MultiDiscrete(nvec) => nvec.clone(),
        Space::Box { .. } | Space::Bytes { .. } => vec![],
    };
    for a in batch.actions.chunks_mut(spec.action_space.flat_dim()) {
        if nvec.is_empty() {
            a.iter_mut().for_each(|x| *x = rng.random_range(-1.5..1.5));
        } else {
            a.iter_mut().zip(&nvec).for_each(|(x, &n)| *x = rng.random_range(0..n) as f32);
        }
    }
    for i in 0..t * b {
        batch.rewards[i] = rng.random_range(-1.0..1.0);
        batch.action_logp[i] = rng.random_range(-2.0..-0.2);
        batch.vf_preds[i] = rng.random_range(-1.0..1.0);
        let u: f32 = rng.random();
        batch.terminateds[i] = u < 0.1;
        batch.truncateds[i] = (0.1..0.2).contains(&u) || u > 0.97;
        if batch.truncateds[i] {
            batch.truncation_values[i] = rng.random_range(-2.0..2.0);
        }
    }
    batch
}

/// Largest absolute difference between two weight snapshots (same layout).
pub fn max_weight_diff(
    a: &std::sync::Arc<impala_core::Weights>,
    b: &std::sync::Arc<impala_core::Weights>,
) -> f32 {
    assert_eq!(a.tensors.len(), b.tensors.len());
    a.tensors
        .iter()
        .zip(&b.tensors)
        .flat_map(|(x, y)| {
            assert_eq!(x.name, y.name);
            x.data.iter().zip(&y.data).map(|(p, q)| (p - q).abs())
        })
        .fold(0.0, f32::max)
}

/// The loss statistics of two updates side by side, by name, for tests that compare two ways
/// of computing the same update.
pub fn paired_loss_stats(a: &LearnerStats, b: &LearnerStats) -> [(&'static str, f64, f64); 7] {
    [
        ("total_loss", a.total_loss, b.total_loss),
        ("policy_loss", a.policy_loss, b.policy_loss),
        ("vf_loss", a.vf_loss, b.vf_loss),
        ("entropy", a.entropy, b.entropy),
        ("grad_gnorm", a.grad_gnorm, b.grad_gnorm),
        ("var_gnorm", a.var_gnorm, b.var_gnorm),
        ("vf_explained_var", a.vf_explained_var, b.vf_explained_var),
    ]
}
