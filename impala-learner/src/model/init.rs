//! Deterministic parameter initialisation shared by the built-in models.

use impala_core::{gib, machine_memory_bytes};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;
use tch::{nn, Tensor};

use crate::{LearnerError, Result};

/// Float copies of the parameters that training holds: the learner's weights, gradients, two
/// optimizer slots and the four buffers a step is worked out in, plus a runner's policy copy.
const TRAINING_COPIES: u64 = 9;

/// Deterministic parameter initialisation from the model seed (libtorch's global RNG is shared
/// by every thread, so it cannot make per-model seeds reproducible). Counts the parameters as
/// it goes and refuses a model that training could not hold in memory, before allocating it.
pub(crate) struct Init {
    rng: SmallRng,
    params: u64,
    /// The machine's memory, read once.
    memory: Option<u64>,
}

impl Init {
    pub(crate) fn new(seed: u64) -> Self {
        Init { rng: SmallRng::seed_from_u64(seed), params: 0, memory: machine_memory_bytes() }
    }

    /// Counts a tensor of `shape` towards the model's size; fails, saying the arithmetic, when
    /// the model would not fit.
    pub(crate) fn claim(&mut self, shape: &[usize]) -> Result<usize> {
        let too_big = |total: Option<u64>| {
            let memory = self
                .memory
                .map_or("this machine's memory".to_string(), |m| format!("{:.1} GiB", gib(m)));
            let size = total.map_or("more than 2^64 parameters".to_string(), |t| {
                format!(
                    "{t} parameters ({:.1} GiB as float32; training holds about \
                     {TRAINING_COPIES} copies, {:.1} GiB)",
                    gib(t.saturating_mul(4)),
                    gib(t.saturating_mul(4 * TRAINING_COPIES))
                )
            });
            LearnerError::Config {
                reason: format!(
                    "the model is too large: a tensor of shape {shape:?} brings it to {size}, \
                     more than {memory}; make `model.fcnet_hiddens`, \
                     `model.post_fcnet_hiddens`, `model.conv_filters` or `model.lstm_cell_size` \
                     smaller"
                ),
            }
        };
        let max_params = self.memory.map_or(u64::MAX / 64, |m| m / (4 * TRAINING_COPIES));
        let n = shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d as u64));
        let total = n.and_then(|n| self.params.checked_add(n));
        match (n.and_then(|n| usize::try_from(n).ok()), total) {
            (Some(n), Some(total)) if total <= max_params => {
                self.params = total;
                Ok(n)
            }
            (_, total) => Err(too_big(total)),
        }
    }

    pub(crate) fn tensor(values: Vec<f32>, shape: &[i64]) -> Result<Tensor> {
        Ok(Tensor::f_from_slice(&values)?.f_view(shape)?)
    }

    /// RLlib's `normc_initializer(std)`: normal rows rescaled to norm `std`.
    pub(crate) fn normc(&mut self, out_dim: usize, in_dim: usize, std: f32) -> Result<Tensor> {
        let n = self.claim(&[out_dim, in_dim])?;
        let mut w: Vec<f32> = (0..n).map(|_| self.rng.sample(StandardNormal)).collect();
        for row in w.chunks_mut(in_dim.max(1)) {
            let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt().max(f32::MIN_POSITIVE);
            row.iter_mut().for_each(|x| *x *= std / norm);
        }
        Self::tensor(w, &[out_dim as i64, in_dim as i64])
    }

    /// Uniform in `[-bound, bound]` (torch's Xavier-uniform and LSTM defaults).
    pub(crate) fn uniform(&mut self, shape: &[i64], bound: f32) -> Result<Tensor> {
        let dims: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
        let n = self.claim(&dims)?;
        let w = (0..n).map(|_| self.rng.random_range(-bound..=bound)).collect();
        Self::tensor(w, shape)
    }

    /// A linear layer with RLlib's `SlimFC` init: normc weights, zero bias.
    pub(crate) fn linear(
        &mut self,
        path: nn::Path<'_>,
        in_dim: usize,
        out_dim: usize,
        std: f32,
    ) -> Result<nn::Linear> {
        let ws = path.f_var_copy("weight", &self.normc(out_dim, in_dim, std)?)?;
        let bs = path.f_zeros("bias", &[out_dim as i64])?;
        Ok(nn::Linear { ws, bs: Some(bs) })
    }
}
