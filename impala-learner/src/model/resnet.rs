//! The IMPALA paper's deep network (Espeholt et al. 2018, figure 3): `model.custom_model =
//! "impala_resnet"`.

use impala_core::{EnvSpec, ResNetSettings, Space};
use tch::{nn, Device, Kind, Tensor};

use super::catalog::Lstm;
use super::{Init, Model, ModelOutput, Unroll};
use crate::{ActionDistribution, LearnerError, ModelSettings, Result};

/// A conv 3x3, stride 1, same padding.
#[derive(Debug)]
struct Conv3 {
    ws: Tensor,
    bs: Tensor,
}

impl Conv3 {
    fn new(path: nn::Path<'_>, init: &mut Init, in_c: usize, out_c: usize) -> Result<Self> {
        let (fan_in, fan_out) = ((in_c * 9) as f32, (out_c * 9) as f32);
        let bound = (6.0 / (fan_in + fan_out)).sqrt();
        let shape = [out_c as i64, in_c as i64, 3, 3];
        Ok(Conv3 {
            ws: path.f_var_copy("weight", &init.uniform(&shape, bound)?)?,
            bs: path.f_zeros("bias", &[out_c as i64])?,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x.f_conv2d(&self.ws, Some(&self.bs), [1, 1], [1, 1], [1, 1], 1)?)
    }
}

/// One section: conv 3x3, max-pool 3x3 stride 2, two residual blocks of (ReLU, conv 3x3,
/// ReLU, conv 3x3) plus their input.
#[derive(Debug)]
struct Section {
    conv: Conv3,
    blocks: [[Conv3; 2]; 2],
}

impl Section {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut x = self.conv.forward(x)?.f_max_pool2d([3, 3], [2, 2], [1, 1], [1, 1], false)?;
        for [a, b] in &self.blocks {
            let y = b.forward(&a.forward(&x.f_relu()?)?.f_relu()?)?;
            x = x.f_add(&y)?;
        }
        Ok(x)
    }
}

/// The IMPALA paper's deep network: sections of [`ResNetSettings::channels`], then ReLU, a
/// fully connected layer of [`ResNetSettings::hidden`] and ReLU; with `model.use_lstm` the
/// LSTM of the catalog's models follows; a logits head and a value head share the torso.
/// Observations are `[H, W, C]` images (bytes are scaled to `[0, 1]`).
#[derive(Debug)]
pub struct ImpalaResNet {
    vs: nn::VarStore,
    hwc: [i64; 3],
    bytes: bool,
    sections: Vec<Section>,
    fc: nn::Linear,
    lstm: Option<Lstm>,
    logits: nn::Linear,
    value: nn::Linear,
}

impl ImpalaResNet {
    /// The network of `resnet` (with the LSTM options of `model`) for `spec` on `device`.
    pub fn build(
        resnet: &ResNetSettings,
        model: &ModelSettings,
        spec: &EnvSpec,
        device: Device,
        seed: u64,
    ) -> Result<Self> {
        let (shape, bytes) = match &spec.observation_space {
            Space::Box { shape, .. } if shape.len() == 3 => (shape, false),
            Space::Bytes { shape } if shape.len() == 3 => (shape, true),
            other => {
                return Err(LearnerError::Config {
                    reason: format!(
                        "model.custom_model = \"impala_resnet\" needs image observations \
                         [H, W, C]; {} has {other}",
                        spec.id
                    ),
                })
            }
        };
        if resnet.channels.is_empty() || resnet.channels.contains(&0) || resnet.hidden == 0 {
            return Err(LearnerError::Config {
                reason: format!(
                    "model.custom_model_config: impala_resnet needs positive `channels` (got \
                     {:?}) and `hidden` (got {})",
                    resnet.channels, resnet.hidden
                ),
            });
        }
        let dist = ActionDistribution::for_space(&spec.action_space)?;
        let vs = nn::VarStore::new(device);
        let root = vs.root();
        let mut init = Init::new(seed);
        let (mut h, mut w, mut c) = (shape[0], shape[1], shape[2]);
        let mut sections = Vec::with_capacity(resnet.channels.len());
        for (i, &out) in resnet.channels.iter().enumerate() {
            let p = &root / format!("section{i}");
            let conv = Conv3::new(&p / "conv", &mut init, c, out)?;
            let mut block = |j: usize| -> Result<[Conv3; 2]> {
                Ok([
                    Conv3::new(&p / format!("block{j}_conv0"), &mut init, out, out)?,
                    Conv3::new(&p / format!("block{j}_conv1"), &mut init, out, out)?,
                ])
            };
            let blocks = [block(0)?, block(1)?];
            sections.push(Section { conv, blocks });
            // Max-pool 3x3, stride 2, padding 1.
            (h, w, c) = ((h - 1) / 2 + 1, (w - 1) / 2 + 1, out);
        }
        let fc = init.linear(&root / "fc", h * w * c, resnet.hidden, 1.0)?;
        let (lstm, head_dim) = if model.use_lstm {
            let lstm = Lstm::new(&(&root / "lstm"), &mut init, resnet.hidden, model)?;
            (Some(lstm), model.lstm_cell_size.get())
        } else {
            (None, resnet.hidden)
        };
        let logits = init.linear(&root / "logits", head_dim, dist.inputs_dim(), 0.01)?;
        let value = init.linear(&root / "value", head_dim, 1, 0.01)?;
        let hwc = [shape[0] as i64, shape[1] as i64, shape[2] as i64];
        Ok(ImpalaResNet { vs, hwc, bytes, sections, fc, lstm, logits, value })
    }
}

impl Model for ImpalaResNet {
    fn forward(&self, obs: &Tensor, unroll: Option<Unroll<'_>>) -> Result<ModelOutput> {
        let [h, w, c] = self.hwc;
        let mut x = obs.f_to_kind(Kind::Float)?;
        if self.bytes {
            x = x.f_mul_scalar(1.0 / 255.0)?;
        }
        // The permuted view is channels-last, and the network keeps it so: libtorch's
        // max-pool is vectorised only for channels-last tensors, and oneDNN convolves them
        // natively. On one CPU thread (libtorch 2.11, 84x84x4), bare PyTorch's training step
        // of this network on 500 images takes about half the time so (impala-learner's
        // README), and runners' batches of 1 to 32 images inferred 1.5 to 2.4 times faster than
        // made contiguous NCHW first.
        let mut x = x.f_view([-1, h, w, c])?.f_permute([0, 3, 1, 2])?;
        for section in &self.sections {
            x = section.forward(&x)?;
        }
        let x = x.f_relu()?.f_flatten(1, -1)?;
        let feats = x.f_linear(&self.fc.ws, self.fc.bs.as_ref())?.f_relu()?;
        let (head_in, state) = Lstm::wrap(self.lstm.as_ref(), feats, unroll)?;
        let dist_inputs = head_in.f_linear(&self.logits.ws, self.logits.bs.as_ref())?;
        let values = head_in.f_linear(&self.value.ws, self.value.bs.as_ref())?.f_squeeze_dim(1)?;
        Ok(ModelOutput { dist_inputs, values, state })
    }

    fn parameters(&self) -> Vec<(String, Tensor)> {
        self.vs.variables().into_iter().collect()
    }

    fn state_dim(&self) -> usize {
        self.lstm.as_ref().map_or(0, Lstm::state_dim)
    }

    fn is_value_parameter(&self, name: &str) -> bool {
        name.starts_with("value.")
    }

    fn name(&self) -> String {
        "impala_resnet (model.custom_model)".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_papers_network_brings_84x84_to_11x11x32() -> Result<()> {
        let spec = EnvSpec {
            id: "Frames".into(),
            observation_space: Space::Bytes { shape: vec![84, 84, 4] },
            action_space: Space::Discrete(6),
            max_episode_steps: None,
        };
        let settings = ResNetSettings::default();
        let net = ImpalaResNet::build(&settings, &ModelSettings::default(), &spec, Device::Cpu, 0)?;
        assert_eq!(net.fc.ws.size(), vec![256, 11 * 11 * 32]);
        let obs = Tensor::f_zeros([3, 84 * 84 * 4], (Kind::Uint8, Device::Cpu))?;
        let out = net.forward(&obs, None)?;
        assert_eq!(out.dist_inputs.size(), vec![3, 6]);
        assert_eq!(out.values.size(), vec![3]);
        Ok(())
    }
}
