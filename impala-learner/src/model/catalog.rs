//! The actor-critic models of RLlib's model catalog (`config.model`): a fully connected net,
//! a conv net for image observations, either optionally wrapped in an LSTM, with a logits head
//! and a value head.

use impala_core::{Activation, ConvFilter, EnvSpec, Space};
use tch::{nn, Device, Kind, Tensor};

use super::{one_hot, Init, Model, ModelOutput, Unroll};
use crate::{ActionDistribution, LearnerError, ModelSettings, Result};

/// Prefixes of the parameters that only the value function uses (the value head and the
/// separate value torso). `_separate_vf_optimizer` trains exactly these with `_lr_vf`; RLlib
/// finds the same set with a dummy backward pass through the policy output.
const VF_PREFIXES: [&str; 2] = ["value.", "vf_torso."];

/// Applies an activation (RLlib's torch `get_activation_fn`).
pub(crate) fn activate(activation: Activation, x: Tensor) -> Result<Tensor> {
    Ok(match activation {
        Activation::Tanh => x.f_tanh()?,
        Activation::Relu => x.f_relu()?,
        Activation::Swish => x.f_silu()?,
        Activation::Elu => x.f_elu()?,
        Activation::Linear => x,
    })
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
    /// The kernel covers the whole unpadded input (RLlib's last `[256, 11, 1]` on 11x11): a
    /// dense layer on the flattened input, computed as one. oneDNN's convolution of that shape
    /// took 0.8 ms of a 1 ms forward pass for one 84x84 frame.
    whole_input: bool,
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
            let whole_input = last && (kh, kw) == (h, w);
            convs.push(Conv { ws, bs, stride: [sh as i64, sw as i64], pad, whole_input });
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
            let [left, right, top, bottom] = conv.pad;
            // Even padding is the convolution's own; only uneven padding is a padded copy of
            // the input (for 84x84 frames the first layer's would be a 62 MB copy per batch of
            // 500, filled, copied and page-faulted in: a quarter of the learner step's time).
            let padding = if left == right && top == bottom {
                [top, left]
            } else {
                x = x.f_constant_pad_nd(conv.pad)?;
                [0, 0]
            };
            let y = if conv.whole_input {
                // `[N, C, H, W]` flattened in (C, H, W) order is the weight's `[out, C, kh, kw]`
                // row order: the same sums as the convolution, as `[N, out, 1, 1]`.
                let weights = conv.ws.f_flatten(1, -1)?;
                let y = conv.bs.f_addmm(&x.f_flatten(1, -1)?, &weights.f_tr()?)?;
                y.f_unsqueeze(-1)?.f_unsqueeze(-1)?
            } else {
                x.f_conv2d(&conv.ws, Some(&conv.bs), conv.stride, padding, [1, 1], 1)?
            };
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

/// An LSTM cell (torch's `nn.LSTM` parameters and init) unrolled step by step
/// (`model.use_lstm`, for the catalog's torsos and the ResNet's).
#[derive(Debug)]
pub(crate) struct Lstm {
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
            ObsEncoding::OneHot(nvec) => one_hot(obs, nvec),
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

/// The actor-critic network: torso (MLP or conv), optional LSTM, logits and value heads.
#[derive(Debug)]
pub struct ActorCritic {
    /// Owns the variables below.
    vs: nn::VarStore,
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
}

impl ActorCritic {
    /// Builds the model of `config` for `spec` on `device`, its weights drawn from `seed`.
    pub fn build(
        config: &ModelSettings,
        spec: &EnvSpec,
        device: Device,
        seed: u64,
    ) -> Result<Self> {
        let vs = nn::VarStore::new(device);
        let path = &vs.root();
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
            let lstm = Lstm::new(&(path / "lstm"), &mut init, feat_dim, config)?;
            (Some(lstm), config.lstm_cell_size.get())
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
            vs,
            encoding,
            bytes: matches!(spec.observation_space, Space::Bytes { .. }),
            torso,
            vf_torso: vf_torso.map(|(t, _)| t),
            lstm,
            logits,
            log_std,
            value,
        })
    }

    /// Values per observation the model reads.
    pub fn obs_dim(&self) -> usize {
        self.encoding.raw_dim()
    }
}

impl Model for ActorCritic {
    fn forward(&self, obs: &Tensor, unroll: Option<Unroll<'_>>) -> Result<ModelOutput> {
        let x = if self.bytes {
            self.encoding.encode(&obs.f_to_kind(Kind::Float)?.f_mul_scalar(1.0 / 255.0)?)?
        } else {
            self.encoding.encode(obs)?
        };
        let feats = self.torso.forward(x.shallow_clone())?;
        let (head_in, state) = Lstm::wrap(self.lstm.as_ref(), feats, unroll)?;
        let mut dist_inputs = head_in.f_linear(&self.logits.ws, self.logits.bs.as_ref())?;
        if let Some(log_std) = &self.log_std {
            // `expand_as`, not the batch size: a traced export works for any batch.
            let ls = log_std.f_unsqueeze(0)?.f_expand_as(&dist_inputs)?;
            dist_inputs = Tensor::f_cat(&[dist_inputs, ls], 1)?;
        }
        let vf_in = match &self.vf_torso {
            Some(t) => t.forward(x)?,
            None => head_in,
        };
        let values = vf_in.f_linear(&self.value.ws, self.value.bs.as_ref())?.f_squeeze_dim(1)?;
        Ok(ModelOutput { dist_inputs, values, state })
    }

    fn parameters(&self) -> Vec<(String, Tensor)> {
        self.vs.variables().into_iter().collect()
    }

    /// Recurrent state per env (`2 * lstm_cell_size`: `h` then `c`, or 0).
    fn state_dim(&self) -> usize {
        self.lstm.as_ref().map_or(0, Lstm::state_dim)
    }

    fn is_value_parameter(&self, name: &str) -> bool {
        VF_PREFIXES.iter().any(|p| name.starts_with(p))
    }
}

impl Lstm {
    /// An LSTM of `lstm_cell_size` over `in_dim` features under `path`.
    pub(crate) fn new(
        path: &nn::Path<'_>,
        init: &mut Init,
        in_dim: usize,
        config: &ModelSettings,
    ) -> Result<Self> {
        let h = config.lstm_cell_size.get();
        let bound = 1.0 / (h as f32).sqrt();
        let (g, hi, fi) = (4 * h as i64, h as i64, in_dim as i64);
        Ok(Lstm {
            w_ih: path.f_var_copy("weight_ih", &init.uniform(&[g, fi], bound)?)?,
            w_hh: path.f_var_copy("weight_hh", &init.uniform(&[g, hi], bound)?)?,
            b_ih: path.f_var_copy("bias_ih", &init.uniform(&[g], bound)?)?,
            b_hh: path.f_var_copy("bias_hh", &init.uniform(&[g], bound)?)?,
            cell_size: hi,
            max_seq_len: config.max_seq_len.get(),
        })
    }

    /// The heads' input: `feats` through `lstm` when there is one (with the state after the
    /// last step), else `feats`.
    pub(crate) fn wrap(
        lstm: Option<&Lstm>,
        feats: Tensor,
        unroll: Option<Unroll<'_>>,
    ) -> Result<(Tensor, Option<Tensor>)> {
        match (lstm, unroll) {
            (Some(lstm), Some(u)) => {
                let (out, state) = lstm.unroll(&feats, &u)?;
                Ok((out, Some(state)))
            }
            (Some(_), None) => Err(LearnerError::Batch {
                reason: "an LSTM model needs its recurrent state".into(),
            }),
            (None, _) => Ok((feats, None)),
        }
    }

    /// Recurrent state per env: `h` then `c`.
    pub(crate) fn state_dim(&self) -> usize {
        2 * self.cell_size as usize
    }

    /// `feats`: `[T * B, F]` time-major -> (`[T * B, H]`, final `[B, 2H]` state).
    pub(crate) fn unroll(&self, feats: &Tensor, u: &Unroll<'_>) -> Result<(Tensor, Tensor)> {
        let h = self.cell_size;
        u.step_by_step(feats, self.max_seq_len, |x, state| {
            let (h2, c2) = x.f_lstm_cell(
                &[&state.f_narrow(1, 0, h)?, &state.f_narrow(1, h, h)?],
                &self.w_ih,
                &self.w_hh,
                Some(&self.b_ih),
                Some(&self.b_hh),
            )?;
            let next = Tensor::f_cat(&[&h2, &c2], 1)?;
            Ok((h2, next))
        })
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

    #[test]
    fn a_last_filter_covering_its_input_is_the_convolution() -> Result<()> {
        // RLlib's 42x42 filters end with [256, 11, 1] on 11x11, computed as a dense layer.
        let vs = nn::VarStore::new(tch::Device::Cpu);
        let filters = default_filters(42, 42)?;
        let settings = ModelSettings { post_fcnet_hiddens: vec![], ..ModelSettings::default() };
        let (stack, _) =
            ConvStack::new(&vs.root(), &mut Init::new(1), [42, 42, 4], &filters, &settings)?;
        assert_eq!(
            stack.convs.iter().map(|c| c.whole_input).collect::<Vec<_>>(),
            [false, false, true]
        );
        // As the models see frames: `[N, H, W, C]` permuted, a channels-last view.
        let x = Tensor::f_rand([3, 42, 42, 4], (Kind::Float, tch::Device::Cpu))?
            .f_permute([0, 3, 1, 2])?;
        let mut y = x.shallow_clone();
        for conv in &stack.convs {
            let [left, right, top, bottom] = conv.pad;
            y = y.f_constant_pad_nd([left, right, top, bottom])?;
            y = y.f_conv2d(&conv.ws, Some(&conv.bs), conv.stride, [0, 0], [1, 1], 1)?.f_relu()?;
        }
        let expected = y.f_flatten(1, -1)?;
        let got = stack.forward(x)?;
        assert_eq!(got.size(), expected.size());
        let diff = got.f_sub(&expected)?.f_abs()?.f_max()?.f_double_value(&[])?;
        assert!(diff < 1e-5, "{diff}");
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
        ActorCritic::build(&config, &spec, tch::Device::Cpu, 3)
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
        // Both heads start at normc(0.01), with or without post layers (see `ActorCritic::build`).
        for model in [model, vision_model(vec![])?] {
            for norm in row_norms(&model.logits.ws)?.into_iter().chain(row_norms(&model.value.ws)?)
            {
                assert!((norm - 0.01).abs() < 1e-6, "{norm}");
            }
        }
        Ok(())
    }
}
