//! Action distributions (RLlib's `TorchCategorical`, `TorchMultiCategorical`,
//! `TorchDiagGaussian`): differentiable log-probabilities and entropies on tensors for the loss,
//! and sampling on plain `f32` rows for env runners (seeded, no libtorch call per action).

use impala_core::Space;
use rand::Rng;
use rand_distr::StandardNormal;
use tch::{Kind, Tensor};

use crate::{LearnerError, Result};

/// `0.5 * ln(2 pi)`.
const HALF_LN_2PI: f64 = 0.918_938_533_204_672_8;

/// The distribution an action space gets, as RLlib's `ModelCatalog.get_action_dist`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionDistribution {
    /// `Discrete(n)`: softmax over `n` logits.
    Categorical(usize),
    /// `MultiDiscrete(nvec)`: one independent categorical per component; log-probs and
    /// entropies add up.
    MultiCategorical(Vec<usize>),
    /// `Box` with `d` values: independent Gaussians, inputs are `[mean (d), log_std (d)]`.
    DiagGaussian(usize),
}

impl ActionDistribution {
    /// The distribution for an action space.
    ///
    /// ```
    /// use impala_learner::ActionDistribution;
    /// let d = ActionDistribution::for_space(&impala_core::Space::MultiDiscrete(vec![3, 2]))?;
    /// assert_eq!(d.inputs_dim(), 5);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn for_space(space: &Space) -> Result<Self> {
        let dist = match space {
            Space::Discrete(n) => ActionDistribution::Categorical(*n),
            Space::MultiDiscrete(nvec) => ActionDistribution::MultiCategorical(nvec.clone()),
            Space::Box { low, .. } => ActionDistribution::DiagGaussian(low.len()),
            Space::Bytes { .. } => {
                return Err(LearnerError::Config {
                    reason: format!(
                        "action space {space}: bytes are an observation space; actions are \
                         Discrete, MultiDiscrete or Box"
                    ),
                })
            }
        };
        if dist.components().contains(&0) {
            return Err(LearnerError::Config { reason: format!("empty action space {space}") });
        }
        Ok(dist)
    }

    /// Number of distribution inputs (logits, or mean and log-std).
    pub fn inputs_dim(&self) -> usize {
        match self {
            ActionDistribution::Categorical(n) => *n,
            ActionDistribution::MultiCategorical(nvec) => nvec.iter().sum(),
            ActionDistribution::DiagGaussian(d) => 2 * d,
        }
    }

    /// What the inputs are, for errors: `"2 logits"`, `"3 + 2 logits"`, `"mean and log-std
    /// of 4 dims"`.
    pub fn describe_inputs(&self) -> String {
        match self {
            ActionDistribution::Categorical(n) => format!("{n} logits"),
            ActionDistribution::MultiCategorical(nvec) => {
                let parts: Vec<String> = nvec.iter().map(|n| n.to_string()).collect();
                format!("{} logits", parts.join(" + "))
            }
            ActionDistribution::DiagGaussian(d) => format!("mean and log-std of {d} dims"),
        }
    }

    /// Number of `f32` values per action.
    pub fn action_dim(&self) -> usize {
        match self {
            ActionDistribution::Categorical(_) => 1,
            ActionDistribution::MultiCategorical(nvec) => nvec.len(),
            ActionDistribution::DiagGaussian(d) => *d,
        }
    }

    /// The categorical sizes (`[n]`, `nvec`), or `[d]` for the Gaussian.
    fn components(&self) -> Vec<usize> {
        match self {
            ActionDistribution::Categorical(n) => vec![*n],
            ActionDistribution::MultiCategorical(nvec) => nvec.clone(),
            ActionDistribution::DiagGaussian(d) => vec![*d],
        }
    }

    /// `log p(action)` per row: `inputs` `[N, inputs_dim]`, `actions` `[N, action_dim]` (f32,
    /// indices for categoricals) -> `[N]`. Differentiable in `inputs`.
    pub fn logp(&self, inputs: &Tensor, actions: &Tensor) -> Result<Tensor> {
        match self {
            ActionDistribution::DiagGaussian(d) => {
                let d = *d as i64;
                let mean = inputs.f_narrow(1, 0, d)?;
                let log_std = inputs.f_narrow(1, d, d)?;
                let z = actions.f_sub(&mean)?.f_mul(&log_std.f_neg()?.f_exp()?)?;
                // -0.5 * sum(z^2) - 0.5 * ln(2 pi) * d - sum(log_std), as RLlib's TorchDiagGaussian.
                let quad =
                    z.f_square()?.f_sum_dim_intlist(1, false, Kind::Float)?.f_mul_scalar(-0.5)?;
                let norm = log_std.f_sum_dim_intlist(1, false, Kind::Float)?;
                Ok(quad.f_sub(&norm)?.f_sub_scalar(HALF_LN_2PI * d as f64)?)
            }
            _ => {
                let mut total: Option<Tensor> = None;
                let mut offset = 0i64;
                for (i, &n) in self.components().iter().enumerate() {
                    let logits = inputs.f_narrow(1, offset, n as i64)?;
                    offset += n as i64;
                    let index = actions.f_narrow(1, i as i64, 1)?.f_to_kind(Kind::Int64)?;
                    let lp = logits
                        .f_log_softmax(-1, Kind::Float)?
                        .f_gather(1, &index, false)?
                        .f_squeeze_dim(1)?;
                    total = Some(match total {
                        Some(t) => t.f_add(&lp)?,
                        None => lp,
                    });
                }
                total.ok_or_else(|| LearnerError::Config { reason: "no action components".into() })
            }
        }
    }

    /// Entropy per row, `[N, inputs_dim]` -> `[N]`. Differentiable.
    pub fn entropy(&self, inputs: &Tensor) -> Result<Tensor> {
        match self {
            ActionDistribution::DiagGaussian(d) => {
                let d = *d as i64;
                let log_std = inputs.f_narrow(1, d, d)?;
                // sum(log_std + 0.5 * ln(2 pi e))
                Ok(log_std
                    .f_sum_dim_intlist(1, false, Kind::Float)?
                    .f_add_scalar((HALF_LN_2PI + 0.5) * d as f64)?)
            }
            _ => {
                let mut total: Option<Tensor> = None;
                let mut offset = 0i64;
                for &n in &self.components() {
                    let logits = inputs.f_narrow(1, offset, n as i64)?;
                    offset += n as i64;
                    let logp = logits.f_log_softmax(-1, Kind::Float)?;
                    let h = logp
                        .f_exp()?
                        .f_mul(&logp)?
                        .f_sum_dim_intlist(1, false, Kind::Float)?
                        .f_neg()?;
                    total = Some(match total {
                        Some(t) => t.f_add(&h)?,
                        None => h,
                    });
                }
                total.ok_or_else(|| LearnerError::Config { reason: "no action components".into() })
            }
        }
    }

    /// Picks an action for one row of distribution inputs: sampled when `explore`, else the
    /// mode (argmax / mean), as RLlib's `StochasticSampling` / `deterministic_sample`. Writes
    /// the action into `action` (`action_dim` values) and returns its log-probability.
    pub fn sample_row(
        &self,
        inputs: &[f32],
        explore: bool,
        rng: &mut impl Rng,
        action: &mut [f32],
    ) -> f32 {
        match self {
            ActionDistribution::DiagGaussian(d) => {
                let (mean, log_std) = inputs.split_at(*d);
                for ((a, &m), &ls) in action.iter_mut().zip(mean).zip(log_std) {
                    let noise: f32 = if explore { rng.sample(StandardNormal) } else { 0.0 };
                    *a = m + ls.exp() * noise;
                }
            }
            _ => {
                let mut offset = 0;
                for (a, &n) in action.iter_mut().zip(&self.components()) {
                    let logits = &inputs[offset..offset + n];
                    offset += n;
                    *a = if explore { sample_categorical(logits, rng) } else { argmax(logits) }
                        as f32;
                }
            }
        }
        self.logp_row(inputs, action)
    }

    /// `log p(action)` for one row, in plain `f32` (what runners store as `ACTION_LOGP`).
    pub fn logp_row(&self, inputs: &[f32], action: &[f32]) -> f32 {
        match self {
            ActionDistribution::DiagGaussian(d) => {
                let (mean, log_std) = inputs.split_at(*d);
                let mut lp = -(HALF_LN_2PI as f32) * *d as f32;
                for ((&a, &m), &ls) in action.iter().zip(mean).zip(log_std) {
                    let z = (a - m) * (-ls).exp();
                    lp -= 0.5 * z * z + ls;
                }
                lp
            }
            _ => {
                let mut offset = 0;
                let mut lp = 0.0;
                for (&a, &n) in action.iter().zip(&self.components()) {
                    let logits = &inputs[offset..offset + n];
                    offset += n;
                    let index = (a.max(0.0) as usize).min(n - 1);
                    lp += logits[index] - log_sum_exp(logits);
                }
                lp
            }
        }
    }
}

fn log_sum_exp(logits: &[f32]) -> f32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    max + logits.iter().map(|&l| (l - max).exp()).sum::<f32>().ln()
}

fn argmax(logits: &[f32]) -> usize {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best
}

/// Inverse-CDF sampling from softmax(logits).
fn sample_categorical(logits: &[f32], rng: &mut impl Rng) -> usize {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let total: f32 = logits.iter().map(|&l| (l - max).exp()).sum();
    let mut u = rng.random::<f32>() * total;
    for (i, &l) in logits.iter().enumerate() {
        u -= (l - max).exp();
        if u < 0.0 {
            return i;
        }
    }
    logits.len() - 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn categorical_samples_follow_the_softmax() {
        let dist = ActionDistribution::Categorical(3);
        let logits = [0.0f32, (2.0f32).ln(), (3.0f32).ln()]; // probabilities 1/6, 2/6, 3/6
        let mut rng = rand::rngs::SmallRng::seed_from_u64(0);
        let mut counts = [0usize; 3];
        let mut a = [0.0f32];
        for _ in 0..60_000 {
            dist.sample_row(&logits, true, &mut rng, &mut a);
            counts[a[0] as usize] += 1;
        }
        for (c, p) in counts.iter().zip([1.0 / 6.0, 2.0 / 6.0, 3.0 / 6.0]) {
            assert!((*c as f64 / 60_000.0 - p).abs() < 0.01, "{counts:?}");
        }
        assert_eq!(
            dist.sample_row(&logits, false, &mut rng, &mut a),
            logits[2] - log_sum_exp(&logits)
        );
        assert_eq!(a[0], 2.0);
    }
}
