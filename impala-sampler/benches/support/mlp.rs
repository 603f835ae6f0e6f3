//! A pure-Rust tanh MLP policy: a stand-in for the tch model with the same per-row inference
//! cost, to drive the sampler in benches without libtorch. The sampler's test binary includes
//! this file too (`#[path]`), so its tests run with the suite.

#![allow(dead_code, reason = "the bench and the tests each use part of it")]

use std::sync::Arc;

use impala_core::{
    CoreError, EnvSpec, NamedTensor, Policy, PolicyInput, PolicyOutput, Space, Weights,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// One dense layer, `y = W x + b` with `W` stored `[out, in]` (torch's layout).
#[derive(Debug, Clone)]
struct Linear {
    name: String,
    inputs: usize,
    outputs: usize,
    weight: Vec<f32>,
    bias: Vec<f32>,
}

impl Linear {
    fn new(name: String, inputs: usize, outputs: usize, rng: &mut SmallRng) -> Self {
        // torch.nn.Linear's default init range.
        let bound = 1.0 / (inputs as f32).sqrt();
        let mut draw = |k: usize| (0..k).map(|_| rng.random_range(-bound..=bound)).collect();
        Linear { name, inputs, outputs, weight: draw(inputs * outputs), bias: draw(outputs) }
    }

    /// `y[r] = act(W x[r] + b)` for `n` rows, four rows per pass over `W` (so the weights are
    /// read from cache once per four rows, as a GEMM would).
    fn forward(&self, x: &[f32], n: usize, y: &mut Vec<f32>, tanh: bool) {
        let (k, m) = (self.inputs, self.outputs);
        y.resize(n * m, 0.0);
        for (xb, yb) in x[..n * k].chunks(ROWS * k).zip(y.chunks_mut(ROWS * m)) {
            let rows = xb.len() / k;
            for (j, (wj, bj)) in self.weight.chunks_exact(k).zip(&self.bias).enumerate() {
                let sums = if rows == ROWS {
                    dot_rows(xb, wj)
                } else {
                    let mut sums = [0.0; ROWS];
                    for (r, xr) in xb.chunks_exact(k).enumerate() {
                        sums[r] = dot(xr, wj);
                    }
                    sums
                };
                for (r, sum) in sums.iter().take(rows).enumerate() {
                    let v = bj + sum;
                    yb[r * m + j] = if tanh { v.tanh() } else { v };
                }
            }
        }
    }

    fn load(&mut self, weights: &Weights) -> impala_core::Result<()> {
        for (suffix, shape, data) in [
            ("weight", vec![self.outputs, self.inputs], &mut self.weight),
            ("bias", vec![self.outputs], &mut self.bias),
        ] {
            let name = format!("{}.{suffix}", self.name);
            let t = weights
                .get(&name)
                .ok_or_else(|| CoreError::Policy { reason: format!("weights lack `{name}`") })?;
            if t.shape != shape || t.data.len() != data.len() {
                return Err(CoreError::Policy {
                    reason: format!("`{name}` has shape {:?}, the model needs {shape:?}", t.shape),
                });
            }
            data.copy_from_slice(&t.data);
        }
        Ok(())
    }

    fn export(&self) -> [NamedTensor; 2] {
        [
            NamedTensor {
                name: format!("{}.weight", self.name),
                shape: vec![self.outputs, self.inputs],
                data: self.weight.clone(),
            },
            NamedTensor {
                name: format!("{}.bias", self.name),
                shape: vec![self.outputs],
                data: self.bias.clone(),
            },
        ]
    }
}

/// Rows per block in [`Linear::forward`].
const ROWS: usize = 4;

/// The dot products of `ROWS` rows of `xb` with `w`, in eight lanes per row.
fn dot_rows(xb: &[f32], w: &[f32]) -> [f32; ROWS] {
    let k = w.len();
    let mut acc = [[0.0f32; 8]; ROWS];
    let chunks = k / 8;
    for c in 0..chunks {
        let wc = &w[c * 8..c * 8 + 8];
        for (r, acc_r) in acc.iter_mut().enumerate() {
            let xc = &xb[r * k + c * 8..r * k + c * 8 + 8];
            for l in 0..8 {
                acc_r[l] += xc[l] * wc[l];
            }
        }
    }
    let mut out = [0.0; ROWS];
    for (r, o) in out.iter_mut().enumerate() {
        let tail: f32 = (chunks * 8..k).map(|i| xb[r * k + i] * w[i]).sum();
        *o = acc[r].iter().sum::<f32>() + tail;
    }
    out
}

/// A dot product in eight independent lanes, so the compiler vectorises it.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// A feed-forward tanh MLP with a shared trunk and logits + value heads (RLlib's default
/// `fcnet` with `vf_share_layers=True`), for `Discrete` action spaces, in plain Rust. Parameters
/// are named `fc_{i}.weight|bias`, `logits.weight|bias`, `value.weight|bias` with torch's
/// `[out, in]` layout, and load from [`Weights`] by name.
///
/// It exists to drive samplers with a realistic inference cost without libtorch; the trained
/// model lives in impala-learner.
#[derive(Debug, Clone)]
pub struct MlpPolicy {
    trunk: Vec<Linear>,
    logits: Linear,
    value: Linear,
    num_actions: usize,
    rng: SmallRng,
    version: u64,
    /// Activations, reused across calls.
    scratch: [Vec<f32>; 2],
}

impl MlpPolicy {
    /// A randomly initialised MLP with `hiddens` tanh layers for `spec` (Discrete actions).
    pub fn new(spec: &EnvSpec, hiddens: &[usize], seed: u64) -> impala_core::Result<Self> {
        let Space::Discrete(num_actions) = spec.action_space else {
            return Err(CoreError::Policy {
                reason: format!(
                    "MlpPolicy needs a Discrete action space, got {}",
                    spec.action_space
                ),
            });
        };
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut inputs = spec.observation_space.flat_dim();
        let mut trunk = Vec::with_capacity(hiddens.len());
        for (i, &h) in hiddens.iter().enumerate() {
            trunk.push(Linear::new(format!("fc_{i}"), inputs, h, &mut rng));
            inputs = h;
        }
        Ok(MlpPolicy {
            trunk,
            logits: Linear::new("logits".into(), inputs, num_actions, &mut rng),
            value: Linear::new("value".into(), inputs, 1, &mut rng),
            num_actions,
            rng,
            version: 0,
            scratch: [Vec::new(), Vec::new()],
        })
    }

    /// The parameters as a weights snapshot with this `version`.
    pub fn weights(&self, version: u64) -> Weights {
        let layers = self.trunk.iter().chain([&self.logits, &self.value]);
        Weights::new(version, layers.flat_map(Linear::export).collect())
    }

    /// Runs the trunk on `n` rows; the features end in `scratch[0]`.
    fn trunk(&mut self, obs: &[f32], n: usize) {
        let [a, b] = &mut self.scratch;
        a.clear();
        a.extend_from_slice(obs);
        for layer in &self.trunk {
            layer.forward(a, n, b, true);
            std::mem::swap(a, b);
        }
    }
}

impl Policy for MlpPolicy {
    fn compute_actions(
        &mut self,
        input: &PolicyInput<'_>,
        out: &mut PolicyOutput,
    ) -> impala_core::Result<()> {
        let n = input.num_envs;
        self.trunk(input.obs, n);
        let features = &self.scratch[0];
        self.logits.forward(features, n, &mut out.action_dist_inputs, false);
        self.value.forward(features, n, &mut out.vf_preds, false);
        out.actions.resize(n, 0.0);
        out.action_logp.resize(n, 0.0);
        out.state_out.clear();
        let rows = out.action_dist_inputs.chunks_exact(self.num_actions);
        for ((logits, a), logp) in rows.zip(&mut out.actions).zip(&mut out.action_logp) {
            let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let sum: f32 = logits.iter().map(|l| (l - max).exp()).sum();
            let log_z = max + sum.ln();
            let choice = if input.explore {
                let mut u = self.rng.random::<f32>() * sum;
                let mut pick = self.num_actions - 1;
                for (i, l) in logits.iter().enumerate() {
                    u -= (l - max).exp();
                    if u <= 0.0 {
                        pick = i;
                        break;
                    }
                }
                pick
            } else {
                logits
                    .iter()
                    .enumerate()
                    .fold(0, |best, (i, l)| if *l > logits[best] { i } else { best })
            };
            *a = choice as f32;
            *logp = logits[choice] - log_z;
        }
        Ok(())
    }

    fn compute_values(
        &mut self,
        obs: &[f32],
        num_envs: usize,
        _state: &[f32],
    ) -> impala_core::Result<Vec<f32>> {
        self.trunk(obs, num_envs);
        let mut values = Vec::with_capacity(num_envs);
        self.value.forward(&self.scratch[0], num_envs, &mut values, false);
        Ok(values)
    }

    fn set_weights(&mut self, weights: &Arc<Weights>) -> impala_core::Result<()> {
        for layer in self.trunk.iter_mut().chain([&mut self.logits, &mut self.value]) {
            layer.load(weights)?;
        }
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

    fn spec() -> EnvSpec {
        EnvSpec {
            id: "t".into(),
            observation_space: Space::Box {
                low: vec![-1.0; 5],
                high: vec![1.0; 5],
                shape: vec![5],
            },
            action_space: Space::Discrete(3),
            max_episode_steps: None,
        }
    }

    #[test]
    fn blocked_rows_match_single_rows() -> impala_core::Result<()> {
        let mut policy = MlpPolicy::new(&spec(), &[13, 9], 1)?;
        let obs: Vec<f32> = (0..7 * 5).map(|i| (i as f32 * 0.37).sin()).collect();
        let all = policy.compute_values(&obs, 7, &[])?;
        for (r, v) in all.iter().enumerate() {
            let one = policy.compute_values(&obs[r * 5..(r + 1) * 5], 1, &[])?;
            assert!((one[0] - v).abs() < 1e-5, "row {r}: {} vs {v}", one[0]);
        }
        Ok(())
    }

    #[test]
    fn logp_is_the_log_softmax_of_the_chosen_action() -> impala_core::Result<()> {
        let mut policy = MlpPolicy::new(&spec(), &[8], 2)?;
        let mut out = PolicyOutput::default();
        let obs = [0.3f32; 10];
        policy.compute_actions(
            &PolicyInput { obs: &obs, num_envs: 2, state: &[], explore: true },
            &mut out,
        )?;
        for r in 0..2 {
            let logits = &out.action_dist_inputs[r * 3..(r + 1) * 3];
            let log_z = logits.iter().map(|l| l.exp()).sum::<f32>().ln();
            let a = out.actions[r] as usize;
            assert!((out.action_logp[r] - (logits[a] - log_z)).abs() < 1e-5);
        }
        Ok(())
    }

    #[test]
    fn weights_round_trip_and_reject_wrong_shapes() -> impala_core::Result<()> {
        let source = MlpPolicy::new(&spec(), &[8], 3)?;
        let mut target = MlpPolicy::new(&spec(), &[8], 4)?;
        target.set_weights(&Arc::new(source.weights(5)))?;
        assert_eq!(target.weights(5), source.weights(5));
        let other = MlpPolicy::new(&spec(), &[6], 3)?;
        let err = target.set_weights(&Arc::new(other.weights(6))).err();
        assert!(
            matches!(&err, Some(CoreError::Policy { reason }) if reason.contains("shape")),
            "{err:?}"
        );
        assert_eq!(target.weights_version(), 5); // the rejected snapshot's version is not taken
        Ok(())
    }
}
