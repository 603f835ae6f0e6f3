//! The actor-critic models of RLlib's model catalog (`config.model`): a fully connected net,
//! a conv net for image observations, either optionally wrapped in an LSTM, with a logits head
//! and a value head.

use impala_core::{gib, machine_memory_bytes, Activation, ConvFilter, EnvSpec, Space};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;
use tch::{nn, Kind, Tensor};

use crate::{ActionDistribution, LearnerError, ModelSettings, Result};

/// Bounds of a Gaussian policy's log standard deviation (std in [2e-9, 7.4]).
const LOG_STD_MIN: f64 = -20.0;
const LOG_STD_MAX: f64 = 2.0;

/// Prefixes of the parameters that only the value function uses (the value head and the
/// separate value torso). `_separate_vf_optimizer` trains exactly these with `_lr_vf`; RLlib
/// finds the same set with a dummy backward pass through the policy output.
const VF_PREFIXES: [&str; 2] = ["value.", "vf_torso."];

/// Whether a parameter belongs to the value function only (see [`VF_PREFIXES`]).
pub(crate) fn is_vf_param(name: &str) -> bool {
    VF_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Applies an activation (RLlib's torch `get_activation_fn`).
fn activate(activation: Activation, x: Tensor) -> Result<Tensor> {
    Ok(match activation {
        Activation::Tanh => x.f_tanh()?,
        Activation::Relu => x.f_relu()?,
        Activation::Swish => x.f_silu()?,
        Activation::Elu => x.f_elu()?,
        Activation::Linear => x,
    })
}

/// Float copies of the parameters that training holds: the learner's weights, gradients, two
/// optimizer slots and the four buffers a step is worked out in, plus a runner's policy copy.
const TRAINING_COPIES: u64 = 9;

/// Deterministic parameter initialisation from the model seed (libtorch's global RNG is shared
/// by every thread, so it cannot make per-model seeds reproducible). Counts the parameters as
/// it goes and refuses a model that training could not hold in memory, before allocating it.
struct Init {
    rng: SmallRng,
    params: u64,
    /// The machine's memory, read once.
    memory: Option<u64>,
}

impl Init {
    fn new(seed: u64) -> Self {
        Init { rng: SmallRng::seed_from_u64(seed), params: 0, memory: machine_memory_bytes() }
    }

    /// Counts a tensor of `shape` towards the model's size; fails, saying the arithmetic, when
    /// the model would not fit.
    fn claim(&mut self, shape: &[usize]) -> Result<usize> {
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

    fn tensor(values: Vec<f32>, shape: &[i64]) -> Result<Tensor> {
        Ok(Tensor::f_from_slice(&values)?.f_view(shape)?)
    }

    /// RLlib's `normc_initializer(std)`: normal rows rescaled to norm `std`.
    fn normc(&mut self, out_dim: usize, in_dim: usize, std: f32) -> Result<Tensor> {
        let n = self.claim(&[out_dim, in_dim])?;
        let mut w: Vec<f32> = (0..n).map(|_| self.rng.sample(StandardNormal)).collect();
        for row in w.chunks_mut(in_dim.max(1)) {
            let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt().max(f32::MIN_POSITIVE);
            row.iter_mut().for_each(|x| *x *= std / norm);
        }
        Self::tensor(w, &[out_dim as i64, in_dim as i64])
    }

    /// Uniform in `[-bound, bound]` (torch's Xavier-uniform and LSTM defaults).
    fn uniform(&mut self, shape: &[i64], bound: f32) -> Result<Tensor> {
        let dims: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
        let n = self.claim(&dims)?;
        let w = (0..n).map(|_| self.rng.random_range(-bound..=bound)).collect();
        Self::tensor(w, shape)
    }

    /// A linear layer with RLlib's `SlimFC` init: normc weights, zero bias.
    fn linear(
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

/// Fully connected layers with one activation (after every layer, or every layer but the
/// last).
#[derive(Debug)]
struct Dense {
    layers: Vec<nn::Linear>,
    activation: Activation,
    last_linear: bool,
}

impl Dense {
    fn new(
        path: &nn::Path<'_>,
        init: &mut Init,
        in_dim: usize,
        hiddens: &[usize],
        activation: Activation,
        last_linear: bool,
    ) -> Result<(Self, usize)> {
        let mut layers = Vec::with_capacity(hiddens.len());
        let mut dim = in_dim;
        for (i, &h) in hiddens.iter().enumerate() {
            layers.push(init.linear(path / format!("fc{i}"), dim, h, 1.0)?);
            dim = h;
        }
        Ok((Dense { layers, activation, last_linear }, dim))
    }

    fn forward(&self, mut x: Tensor) -> Result<Tensor> {
        let last = self.layers.len().saturating_sub(1);
        for (i, layer) in self.layers.iter().enumerate() {
            x = x.f_linear(&layer.ws, layer.bs.as_ref())?;
            if !(self.last_linear && i == last) {
                x = activate(self.activation, x)?;
            }
        }
        Ok(x)
    }
}

/// One conv layer with RLlib's explicit zero padding (`same` for all but the last layer).
#[derive(Debug)]
struct Conv {
    ws: Tensor,
    bs: Tensor,
    /// `[height, width]`.
    stride: [i64; 2],
    /// `[left, right, top, bottom]`, as `nn.ZeroPad2d`.
    pad: [i64; 4],
}

/// RLlib's `VisionNetwork` torso: conv layers, flatten, then `post_fcnet_hiddens` (the last of them
/// linear, as RLlib's).
#[derive(Debug)]
struct ConvStack {
    convs: Vec<Conv>,
    activation: Activation,
    post: Dense,
}

impl ConvStack {
    fn new(
        path: &nn::Path<'_>,
        init: &mut Init,
        hwc: [usize; 3],
        filters: &[ConvFilter],
        config: &ModelSettings,
    ) -> Result<(Self, usize)> {
        let [mut h, mut w, mut c] = hwc;
        let mut convs = Vec::with_capacity(filters.len());
        for (i, filter) in filters.iter().enumerate() {
            let ConvFilter { out_channels: out, kernel: [kh, kw], stride: [sh, sw] } = *filter;
            if filter.has_zero() {
                return Err(LearnerError::Config {
                    reason: format!("conv filter {i} {filter} has a zero"),
                });
            }
            let last = i + 1 == filters.len();
            let (pad, oh, ow) = if last {
                if h < kh || w < kw {
                    return Err(LearnerError::Config {
                        reason: format!(
                            "conv filter {i} {filter} (kernel {kh}x{kw}) does not fit its {h}x{w} \
                             input"
                        ),
                    });
                }
                ([0; 4], (h - kh) / sh + 1, (w - kw) / sw + 1)
            } else {
                let (top, bottom, oh) = same_padding(h, kh, sh);
                let (left, right, ow) = same_padding(w, kw, sw);
                ([left, right, top, bottom], oh, ow)
            };
            let p = path / format!("conv{i}");
            let (fan_in, fan_out) = ((c * kh * kw) as f32, (out * kh * kw) as f32);
            let bound = (6.0 / (fan_in + fan_out)).sqrt();
            let shape = [out as i64, c as i64, kh as i64, kw as i64];
            let ws = p.f_var_copy("weight", &init.uniform(&shape, bound)?)?;
            let bs = p.f_zeros("bias", &[out as i64])?;
            convs.push(Conv { ws, bs, stride: [sh as i64, sw as i64], pad });
            (h, w, c) = (oh, ow, out);
        }
        let post_act = config.post_fcnet_activation;
        // RLlib's VisionNetwork leaves the last post-fcnet layer linear: its activation goes
        // between those layers only (`post_fcnet_activation if i < len(hiddens) - 1`).
        let hiddens = &config.post_fcnet_hiddens;
        let (post, dim) = Dense::new(&(path / "post"), init, h * w * c, hiddens, post_act, true)?;
        Ok((ConvStack { convs, activation: config.conv_activation, post }, dim))
    }

    /// `x`: `[N, C, H, W]`.
    fn forward(&self, mut x: Tensor) -> Result<Tensor> {
        for conv in &self.convs {
            if conv.pad.iter().any(|&p| p > 0) {
                x = x.f_constant_pad_nd(conv.pad)?;
            }
            let y = x.f_conv2d(&conv.ws, Some(&conv.bs), conv.stride, [0, 0], [1, 1], 1)?;
            x = activate(self.activation, y)?;
        }
        self.post.forward(x.f_flatten(1, -1)?)
    }
}

/// RLlib's `same_padding`: `(before, after, out_size)`.
fn same_padding(size: usize, kernel: usize, stride: usize) -> (i64, i64, usize) {
    let out = size.div_ceil(stride);
    let along = ((out - 1) * stride + kernel).saturating_sub(size) as i64;
    (along / 2, along - along / 2, out)
}

/// RLlib's default conv filters for square image sizes (`get_filter_config`).
fn default_filters(h: usize, w: usize) -> Result<Vec<ConvFilter>> {
    let filters: Vec<[usize; 3]> = match (h, w) {
        (84, 84) => vec![[16, 8, 4], [32, 4, 2], [256, 11, 1]],
        (96, 96) => vec![[16, 8, 4], [32, 4, 2], [256, 11, 2]],
        (64, 64) => vec![[32, 4, 2], [64, 4, 2], [128, 4, 2], [256, 4, 2]],
        (42, 42) => vec![[16, 4, 2], [32, 4, 2], [256, 11, 1]],
        (10, 10) => vec![[16, 5, 2], [32, 5, 2]],
        _ => {
            return Err(LearnerError::Config {
                reason: format!(
                    "no default conv filters for {h}x{w} observations (RLlib has 84, 96, 64, 42 and 10); set model.conv_filters"
                ),
            })
        }
    };
    Ok(filters.into_iter().map(|[out, k, s]| ConvFilter::square(out, k, s)).collect())
}

/// The policy or value torso.
#[derive(Debug)]
enum Torso {
    Mlp(Dense),
    Conv(ConvStack),
}

impl Torso {
    fn forward(&self, x: Tensor) -> Result<Tensor> {
        match self {
            Torso::Mlp(d) => d.forward(x),
            Torso::Conv(c) => c.forward(x),
        }
    }
}

/// An LSTM cell (torch's `nn.LSTM` parameters and init) unrolled step by step.
#[derive(Debug)]
struct Lstm {
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor,
    b_hh: Tensor,
    cell_size: i64,
    max_seq_len: usize,
}

/// Batches of fewer images than this are made contiguous NCHW before the conv net (see
/// [`ObsEncoding::encode`]).
const CONTIGUOUS_IMAGES_BELOW: i64 = 128;

/// How observations enter the torso.
#[derive(Debug, Clone, PartialEq)]
enum ObsEncoding {
    /// Flattened values (1-D and 2-D `Box`).
    Flat(usize),
    /// One-hot per component (`Discrete`, `MultiDiscrete`), as RLlib's preprocessor.
    OneHot(Vec<usize>),
    /// `[H, W, C]` images for the conv net.
    Image([usize; 3]),
}

impl ObsEncoding {
    fn for_space(space: &Space) -> Self {
        match space {
            Space::Discrete(n) => ObsEncoding::OneHot(vec![*n]),
            Space::MultiDiscrete(nvec) => ObsEncoding::OneHot(nvec.clone()),
            Space::Box { shape, .. } | Space::Bytes { shape } if shape.len() == 3 => {
                ObsEncoding::Image([shape[0], shape[1], shape[2]])
            }
            Space::Box { .. } | Space::Bytes { .. } => ObsEncoding::Flat(space.flat_dim()),
        }
    }

    /// Values per observation in a batch (one index per one-hot component).
    fn raw_dim(&self) -> usize {
        match self {
            ObsEncoding::Flat(d) => *d,
            ObsEncoding::OneHot(nvec) => nvec.len(),
            ObsEncoding::Image([h, w, c]) => h * w * c,
        }
    }

    /// `obs`: `[N, raw_dim]` -> the torso's input.
    fn encode(&self, obs: &Tensor) -> Result<Tensor> {
        match self {
            ObsEncoding::Flat(_) => Ok(obs.shallow_clone()),
            ObsEncoding::OneHot(nvec) => {
                let parts = nvec
                    .iter()
                    .enumerate()
                    .map(|(i, &n)| {
                        let index = obs
                            .f_narrow(1, i as i64, 1)?
                            .f_squeeze_dim(1)?
                            .f_to_kind(Kind::Int64)?;
                        Ok(index.f_one_hot(n as i64)?.f_to_kind(Kind::Float)?)
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok(Tensor::f_cat(&parts, 1)?)
            }
            ObsEncoding::Image([h, w, c]) => {
                let x =
                    obs.f_view([-1, *h as i64, *w as i64, *c as i64])?.f_permute([0, 3, 1, 2])?;
                // The permuted view is channels-last. On the CPU (libtorch 2.11, RLlib's 84x84x4
                // net, one thread) small batches convolve 2-3x faster made contiguous NCHW,
                // while train batches (500) train 10-30% faster channels-last (measured).
                Ok(if x.size()[0] < CONTIGUOUS_IMAGES_BELOW { x.f_contiguous()? } else { x })
            }
        }
    }
}

/// What the model returns for `N` observations.
#[derive(Debug)]
pub(crate) struct ModelOutput {
    /// `[N, inputs_dim]`.
    pub dist_inputs: Tensor,
    /// `[N]`.
    pub values: Tensor,
    /// LSTM state after the last step, `([B, H], [B, H])`.
    pub state: Option<(Tensor, Tensor)>,
}

/// Recurrent unrolling of `steps x rows` time-major observations.
#[derive(Debug)]
pub(crate) struct Unroll<'a> {
    pub steps: usize,
    pub rows: usize,
    /// `[B, 2 * cell]`: `h` then `c`.
    pub state: &'a Tensor,
    /// `[T, B, 1]` floats, 0 after a step that ended an episode (the state resets there).
    pub not_done: Option<&'a Tensor>,
}

/// The actor-critic network: torso (MLP or conv), optional LSTM, logits and value heads.
#[derive(Debug)]
pub struct ActorCritic {
    encoding: ObsEncoding,
    /// Observations are bytes `0..=255` ([`Space::Bytes`]), scaled to `[0, 1]` here, on the
    /// model's device (batches carry them as bytes).
    bytes: bool,
    torso: Torso,
    vf_torso: Option<Torso>,
    lstm: Option<Lstm>,
    logits: nn::Linear,
    log_std: Option<Tensor>,
    value: nn::Linear,
    dist: ActionDistribution,
}

impl ActorCritic {
    /// Builds the model's variables under `path` (deterministically from `seed`).
    pub(crate) fn new(
        path: &nn::Path<'_>,
        config: &ModelSettings,
        spec: &EnvSpec,
        seed: u64,
    ) -> Result<Self> {
        let mut init = Init::new(seed);
        let encoding = ObsEncoding::for_space(&spec.observation_space);
        let dist = ActionDistribution::for_space(&spec.action_space)?;
        let build_torso = |path: nn::Path<'_>, init: &mut Init| -> Result<(Torso, usize)> {
            match &encoding {
                ObsEncoding::Image(hwc) => {
                    let filters = match &config.conv_filters {
                        Some(f) => f.clone(),
                        None => default_filters(hwc[0], hwc[1])?,
                    };
                    let (c, dim) = ConvStack::new(&path, init, *hwc, &filters, config)?;
                    Ok((Torso::Conv(c), dim))
                }
                other => {
                    let in_dim = match other {
                        ObsEncoding::OneHot(nvec) => nvec.iter().sum(),
                        _ => other.raw_dim(),
                    };
                    // RLlib's torch FullyConnectedNetwork appends post_fcnet_hiddens to fcnet_hiddens.
                    let hiddens: Vec<usize> = config
                        .fcnet_hiddens
                        .iter()
                        .chain(&config.post_fcnet_hiddens)
                        .copied()
                        .collect();
                    let act = config.fcnet_activation;
                    let (d, dim) = Dense::new(&path, init, in_dim, &hiddens, act, false)?;
                    Ok((Torso::Mlp(d), dim))
                }
            }
        };
        let (torso, feat_dim) = build_torso(path / "torso", &mut init)?;
        let (lstm, head_dim) = if config.use_lstm {
            let p = path / "lstm";
            let h = config.lstm_cell_size.get();
            let bound = 1.0 / (h as f32).sqrt();
            let (g, hi, fi) = (4 * h as i64, h as i64, feat_dim as i64);
            let lstm = Lstm {
                w_ih: p.f_var_copy("weight_ih", &init.uniform(&[g, fi], bound)?)?,
                w_hh: p.f_var_copy("weight_hh", &init.uniform(&[g, hi], bound)?)?,
                b_ih: p.f_var_copy("bias_ih", &init.uniform(&[g], bound)?)?,
                b_hh: p.f_var_copy("bias_hh", &init.uniform(&[g], bound)?)?,
                cell_size: hi,
                max_seq_len: config.max_seq_len.get(),
            };
            (Some(lstm), h)
        } else {
            (None, feat_dim)
        };
        // The LSTM wrapper's value head reads the LSTM output, so there is no separate torso.
        let vf_torso = if config.vf_share_layers || config.use_lstm {
            None
        } else {
            Some(build_torso(path / "vf_torso", &mut init)?)
        };
        let (logits_dim, log_std) = match (&dist, config.free_log_std) {
            (ActionDistribution::DiagGaussian(d), true) => {
                (*d, Some(path.f_zeros("log_std", &[*d as i64])?))
            }
            _ => (dist.inputs_dim(), None),
        };
        // Both heads start at normc(0.01), as RLlib's fully connected net's, for every torso.
        // RLlib's vision net starts its logits at full scale (a xavier 1x1 conv, or normc(1.0)
        // after post_fcnet_hiddens); on Pong that policy was deterministic within 40k env
        // steps and never recovered (docs/DESIGN.md), so the small start is kept.
        let logits = init.linear(path / "logits", head_dim, logits_dim, 0.01)?;
        let vf_in = vf_torso.as_ref().map_or(head_dim, |(_, d)| *d);
        let value = init.linear(path / "value", vf_in, 1, 0.01)?;
        Ok(ActorCritic {
            encoding,
            bytes: matches!(spec.observation_space, Space::Bytes { .. }),
            torso,
            vf_torso: vf_torso.map(|(t, _)| t),
            lstm,
            logits,
            log_std,
            value,
            dist,
        })
    }

    /// The action distribution of the model's outputs.
    pub fn distribution(&self) -> &ActionDistribution {
        &self.dist
    }

    /// Values per observation the model reads.
    pub fn obs_dim(&self) -> usize {
        self.encoding.raw_dim()
    }

    /// Recurrent state size per env (`2 * lstm_cell_size`, or 0).
    pub fn state_dim(&self) -> usize {
        self.lstm.as_ref().map_or(0, |l| 2 * l.cell_size as usize)
    }

    /// Forward pass over `obs` (`[N, obs_dim]`, floats or bytes); recurrent models need
    /// `unroll` (N = T * B, time-major).
    pub(crate) fn forward(&self, obs: &Tensor, unroll: Option<Unroll<'_>>) -> Result<ModelOutput> {
        let x = if self.bytes {
            self.encoding.encode(&obs.f_to_kind(Kind::Float)?.f_mul_scalar(1.0 / 255.0)?)?
        } else {
            self.encoding.encode(obs)?
        };
        let feats = self.torso.forward(x.shallow_clone())?;
        let (head_in, state) = match (&self.lstm, unroll) {
            (Some(lstm), Some(u)) => {
                let (out, state) = lstm.unroll(&feats, &u)?;
                (out, Some(state))
            }
            (Some(_), None) => {
                return Err(LearnerError::Batch {
                    reason: "an LSTM model needs its recurrent state".into(),
                })
            }
            (None, _) => (feats, None),
        };
        let mut dist_inputs = head_in.f_linear(&self.logits.ws, self.logits.bs.as_ref())?;
        if let Some(log_std) = &self.log_std {
            let n = dist_inputs.size()[0];
            let ls = log_std.f_unsqueeze(0)?.f_expand([n, log_std.size()[0]], false)?;
            dist_inputs = Tensor::f_cat(&[dist_inputs, ls], 1)?;
        }
        if let ActionDistribution::DiagGaussian(d) = self.dist {
            // A collapsing std (log_std -> -inf) makes the behaviour actions' log-probs -inf and
            // the V-trace log-rhos non-finite; bound it as SAC-style Gaussian heads do.
            let d = d as i64;
            let mean = dist_inputs.f_narrow(1, 0, d)?;
            let log_std = dist_inputs.f_narrow(1, d, d)?.f_clamp(LOG_STD_MIN, LOG_STD_MAX)?;
            dist_inputs = Tensor::f_cat(&[mean, log_std], 1)?;
        }
        let vf_in = match &self.vf_torso {
            Some(t) => t.forward(x)?,
            None => head_in,
        };
        let values = vf_in.f_linear(&self.value.ws, self.value.bs.as_ref())?.f_squeeze_dim(1)?;
        Ok(ModelOutput { dist_inputs, values, state })
    }
}

impl Lstm {
    /// `feats`: `[T * B, F]` time-major -> (`[T * B, H]`, final state).
    fn unroll(&self, feats: &Tensor, u: &Unroll<'_>) -> Result<(Tensor, (Tensor, Tensor))> {
        let (t_len, b) = (u.steps as i64, u.rows as i64);
        let feats = feats.f_view([t_len, b, -1])?;
        let mut h = u.state.f_narrow(1, 0, self.cell_size)?;
        let mut c = u.state.f_narrow(1, self.cell_size, self.cell_size)?;
        let mut outs = Vec::with_capacity(u.steps);
        for t in 0..t_len {
            let x = feats.f_select(0, t)?;
            let (h2, c2) = x.f_lstm_cell(
                &[&h, &c],
                &self.w_ih,
                &self.w_hh,
                Some(&self.b_ih),
                Some(&self.b_hh),
            )?;
            outs.push(h2.shallow_clone());
            (h, c) = (h2, c2);
            if let Some(nd) = u.not_done {
                let keep = nd.f_select(0, t)?;
                h = h.f_mul(&keep)?;
                c = c.f_mul(&keep)?;
            }
            // Truncated backpropagation through time every max_seq_len steps (RLlib cuts its
            // sequences there); the state values still carry over.
            if (t + 1) as usize % self.max_seq_len == 0 {
                h = h.f_detach()?;
                c = c.f_detach()?;
            }
        }
        let out = Tensor::f_stack(&outs, 0)?.f_view([t_len * b, self.cell_size])?;
        Ok((out, (h, c)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rllib_default_filters_reduce_to_their_documented_sizes() -> Result<()> {
        // RLlib's filters bring 84, 42 and 10 pixel inputs down to 1x1 (its 1x1-conv logits
        // need that); 64 pixels end at 3x3 and are flattened.
        for (size, channels, flat) in
            [(84, 4, 256), (42, 3, 256), (10, 1, 32), (64, 3, 3 * 3 * 256)]
        {
            let vs = nn::VarStore::new(tch::Device::Cpu);
            let mut init = Init::new(0);
            let filters = default_filters(size, size)?;
            let (stack, dim) = ConvStack::new(
                &vs.root(),
                &mut init,
                [size, size, channels],
                &filters,
                &ModelSettings::default(),
            )?;
            assert_eq!(dim, flat, "{size}x{size}");
            let x = Tensor::f_zeros(
                [2, channels as i64, size as i64, size as i64],
                (Kind::Float, tch::Device::Cpu),
            )?;
            assert_eq!(stack.forward(x)?.size(), vec![2, flat as i64]);
        }
        assert!(default_filters(50, 50).is_err());
        // RLlib's same_padding(84, 8, 4): 21 outputs, 4 padding split 2 + 2.
        assert_eq!(same_padding(84, 8, 4), (2, 2, 21));
        Ok(())
    }

    /// `[N, 10, 10, 2]` byte images and 3 actions, with `post_fcnet_hiddens`.
    fn vision_model(post: Vec<usize>) -> Result<ActorCritic> {
        let spec = EnvSpec {
            id: "Frames".into(),
            observation_space: Space::Bytes { shape: vec![10, 10, 2] },
            action_space: Space::Discrete(3),
            max_episode_steps: None,
        };
        let config = ModelSettings { post_fcnet_hiddens: post, ..ModelSettings::default() };
        let vs = nn::VarStore::new(tch::Device::Cpu);
        ActorCritic::new(&vs.root(), &config, &spec, 3)
    }

    fn row_norms(w: &Tensor) -> Result<Vec<f32>> {
        Ok(Vec::<f32>::try_from(
            &w.f_square()?.f_sum_dim_intlist(1, false, Kind::Float)?.f_sqrt()?,
        )?)
    }

    #[test]
    fn vision_nets_start_as_rllibs() -> Result<()> {
        // After post_fcnet_hiddens: the last post layer is linear.
        let model = vision_model(vec![8])?;
        let Torso::Conv(stack) = &model.torso else {
            return Err(LearnerError::Config { reason: "not a conv torso".into() });
        };
        let x = Tensor::f_rand([4, 2, 10, 10], (Kind::Float, tch::Device::Cpu))?;
        let features = Vec::<f32>::try_from(&stack.forward(x)?.f_flatten(0, -1)?)?;
        assert!(features.iter().any(|&f| f < 0.0), "the last post layer has an activation");
        // Both heads start at normc(0.01), with or without post layers (see `ActorCritic::new`).
        for model in [model, vision_model(vec![])?] {
            for norm in row_norms(&model.logits.ws)?.into_iter().chain(row_norms(&model.value.ws)?)
            {
                assert!((norm - 0.01).abs() < 1e-6, "{norm}");
            }
        }
        Ok(())
    }
}
