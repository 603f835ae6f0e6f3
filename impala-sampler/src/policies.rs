//! A pure-Rust uniform random policy (RLlib's `RandomPolicy`), for debugging samplers and envs
//! without a learner.

use std::sync::Arc;

use impala_core::{EnvSpec, Policy, PolicyInput, PolicyOutput, Space, Weights};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;

/// Acts uniformly at random: `Discrete`/`MultiDiscrete` actions uniformly, `Box` actions from a
/// standard normal (its distribution inputs are mean 0 and log-std 0, so `action_logp` is exact).
/// Values are 0. `explore = false` gives the distribution's mode (index 0, or mean 0).
#[derive(Debug, Clone)]
pub struct RandomPolicy {
    action_space: Space,
    rng: SmallRng,
    version: u64,
}

impl RandomPolicy {
    /// A random policy for `spec`'s action space, seeded.
    ///
    /// ```
    /// use impala_core::{EnvSpec, Policy, PolicyInput, PolicyOutput, Space};
    /// let spec = EnvSpec {
    ///     id: "x".into(),
    ///     observation_space: Space::continuous(vec![0.0], vec![1.0])?,
    ///     action_space: Space::Discrete(4),
    ///     max_episode_steps: None,
    /// };
    /// let mut policy = impala_sampler::RandomPolicy::new(&spec, 0);
    /// let mut out = PolicyOutput::default();
    /// let input = PolicyInput { obs: &[0.5, 0.5], num_envs: 2, state: &[], explore: true };
    /// policy.compute_actions(&input, &mut out)?;
    /// assert_eq!(out.actions.len(), 2);
    /// assert!((out.action_logp[0] - (0.25f32).ln()).abs() < 1e-6);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(spec: &EnvSpec, seed: u64) -> Self {
        RandomPolicy {
            action_space: spec.action_space.clone(),
            rng: SmallRng::seed_from_u64(seed),
            version: 0,
        }
    }
}

/// `log N(x; 0, 1)`.
fn std_normal_logpdf(x: f32) -> f32 {
    -0.5 * x * x - 0.5 * (2.0 * std::f32::consts::PI).ln()
}

impl Policy for RandomPolicy {
    fn compute_actions(
        &mut self,
        input: &PolicyInput<'_>,
        out: &mut PolicyOutput,
    ) -> impala_core::Result<()> {
        let n = input.num_envs;
        let ad = self.action_space.flat_dim();
        out.actions.resize(n * ad, 0.0);
        out.action_logp.resize(n, 0.0);
        out.action_dist_inputs.clear();
        out.action_dist_inputs.resize(n * self.action_space.dist_inputs_dim(), 0.0);
        out.vf_preds.clear();
        out.vf_preds.resize(n, 0.0);
        out.state_out.clear();
        for (row, logp) in out.actions.chunks_exact_mut(ad.max(1)).zip(&mut out.action_logp) {
            *logp = 0.0;
            match &self.action_space {
                Space::Discrete(k) => {
                    row[0] = if input.explore { self.rng.random_range(0..*k) as f32 } else { 0.0 };
                    *logp = -(*k as f32).ln();
                }
                Space::MultiDiscrete(nvec) => {
                    for (a, &k) in row.iter_mut().zip(nvec) {
                        *a = if input.explore { self.rng.random_range(0..k) as f32 } else { 0.0 };
                        *logp -= (k as f32).ln();
                    }
                }
                Space::Box { .. } => {
                    for a in row.iter_mut() {
                        *a = if input.explore { self.rng.sample(StandardNormal) } else { 0.0 };
                        *logp += std_normal_logpdf(*a);
                    }
                }
                Space::Bytes { .. } => {
                    for a in row.iter_mut() {
                        *a = if input.explore { f32::from(self.rng.random::<u8>()) } else { 0.0 };
                        *logp -= 256f32.ln();
                    }
                }
            }
        }
        Ok(())
    }

    fn compute_values(
        &mut self,
        _obs: &[f32],
        num_envs: usize,
        _state: &[f32],
    ) -> impala_core::Result<Vec<f32>> {
        Ok(vec![0.0; num_envs])
    }

    fn set_weights(&mut self, weights: &Arc<Weights>) -> impala_core::Result<()> {
        self.version = weights.version;
        Ok(())
    }

    fn weights_version(&self) -> u64 {
        self.version
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn box_actions_are_standard_normal_with_their_log_density() -> impala_core::Result<()> {
        let spec = EnvSpec {
            id: "x".into(),
            observation_space: Space::continuous(vec![0.0], vec![1.0])?,
            action_space: Space::continuous(vec![-2.0, -2.0], vec![2.0, 2.0])?,
            max_episode_steps: None,
        };
        let mut policy = RandomPolicy::new(&spec, 1);
        let mut out = PolicyOutput::default();
        let n = 20_000;
        let obs = vec![0.5; n];
        let input = PolicyInput { obs: &obs, num_envs: n, state: &[], explore: true };
        policy.compute_actions(&input, &mut out)?;
        assert_eq!(out.actions.len(), 2 * n);
        let mean = out.actions.iter().map(|&a| f64::from(a)).sum::<f64>() / (2 * n) as f64;
        let var = out.actions.iter().map(|&a| (f64::from(a) - mean).powi(2)).sum::<f64>()
            / (2 * n) as f64;
        // Standard errors: 1 / sqrt(40000) = 0.005 for the mean, about 0.007 for the variance.
        assert!(mean.abs() < 0.025 && (var - 1.0).abs() < 0.04, "mean {mean}, var {var}");
        for (row, &logp) in out.actions.chunks_exact(2).zip(&out.action_logp) {
            let want = std_normal_logpdf(row[0]) + std_normal_logpdf(row[1]);
            assert!((logp - want).abs() < 1e-5, "{logp} vs {want}");
        }
        // Without exploration: the mode.
        let input = PolicyInput { explore: false, ..input };
        policy.compute_actions(&input, &mut out)?;
        assert!(out.actions.iter().all(|&a| a == 0.0));
        Ok(())
    }
}
