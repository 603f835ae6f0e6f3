//! The closed sets of names the learner and the config share: the optimizer, how the loss is
//! reduced, the models' activations and conv layers, what the learner's towers run on and in
//! which precision.
//! The config parses them from RLlib's spellings; the learner uses them as they are.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The optimizer (`opt_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OptType {
    /// `torch.optim.Adam(lr)`.
    #[default]
    Adam,
    /// `torch.optim.RMSprop(lr, alpha=decay, momentum, eps=epsilon)`: `decay` is the RMSProp
    /// decay, as RLlib documents it (RLlib's old torch policy passes it as `weight_decay`, a bug
    /// not ported).
    Rmsprop,
}

/// How gradients are clipped to `grad_clip` (RLlib's `grad_clip_by`), per optimizer.
///
/// ```
/// use impala_core::GradClipBy;
/// let by: GradClipBy = serde_json::from_value(serde_json::json!("global_norm"))?;
/// assert_eq!(by, GradClipBy::GlobalNorm);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum GradClipBy {
    /// Scales all of an optimizer's gradients together so their global norm is at most
    /// `grad_clip` (RLlib's default, and its old stack's only way).
    #[default]
    GlobalNorm,
    /// Scales each parameter's gradient so its own norm is at most `grad_clip`.
    Norm,
    /// Clamps every gradient element into `[-grad_clip, grad_clip]`.
    Value,
}

/// How the loss terms are reduced over the `T * B` steps of a train batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LossReduction {
    /// Sums, as RLlib's old-stack torch policy and DeepMind's reference (lr 5e-4 is tuned for it).
    #[default]
    Sum,
    /// Means, as RLlib's new API stack learner.
    Mean,
}

/// The numeric precision of the models' forward passes (`precision`, Lightning's spelling).
///
/// ```
/// use impala_core::Precision;
/// let p: Precision = serde_json::from_value(serde_json::json!("bf16-mixed"))?;
/// assert_eq!(p, Precision::Bf16Mixed);
/// assert_eq!(p.to_string(), "bf16-mixed");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Precision {
    /// Everything in float32.
    #[default]
    #[serde(rename = "fp32")]
    Fp32,
    /// Convolutions and matrix products in bfloat16 under libtorch's autocast, with float32
    /// weights, optimizer state, loss and V-trace (Lightning's `"bf16-mixed"`); the env
    /// runners' inference too.
    #[serde(rename = "bf16-mixed")]
    Bf16Mixed,
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Precision::Fp32 => "fp32",
            Precision::Bf16Mixed => "bf16-mixed",
        })
    }
}

/// What the learner's towers run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LearnerDeviceKind {
    /// The CPU (no GPU asked for; with `num_learners > 1`, that many CPU towers).
    Cpu,
    /// CPU copies standing in for GPUs (`_fake_gpus = true`), to test the multi-GPU path.
    FakeGpu,
    /// CUDA devices `0..num_devices`.
    Cuda,
}

/// An activation function, by RLlib's torch name (`get_activation_fn`): the values of
/// `model.fcnet_activation`, `model.conv_activation` and `model.post_fcnet_activation`.
///
/// ```
/// use impala_core::Activation;
/// assert_eq!("silu".parse::<Activation>()?, Activation::Swish);
/// assert_eq!(Activation::Tanh.to_string(), "tanh");
/// let err = "sigmoid".parse::<Activation>().unwrap_err();
/// assert_eq!(err.to_string(), "`sigmoid` is not an activation the models know");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `tanh`.
    Tanh,
    /// `relu`.
    Relu,
    /// `swish`, also spelled `silu`.
    Swish,
    /// `elu`.
    Elu,
    /// `linear`: no activation.
    Linear,
}

impl Activation {
    /// Every name the models accept, RLlib's spellings (`silu` is `swish`).
    pub const NAMES: [&'static str; 6] = ["tanh", "relu", "swish", "silu", "elu", "linear"];
}

/// A name that is not one of [`Activation::NAMES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{name}` is not an activation the models know")]
pub struct UnknownActivation {
    /// The name given.
    pub name: String,
}

impl FromStr for Activation {
    type Err = UnknownActivation;

    fn from_str(name: &str) -> Result<Self, UnknownActivation> {
        Ok(match name {
            "tanh" => Activation::Tanh,
            "relu" => Activation::Relu,
            "swish" | "silu" => Activation::Swish,
            "elu" => Activation::Elu,
            "linear" => Activation::Linear,
            other => return Err(UnknownActivation { name: other.into() }),
        })
    }
}

impl fmt::Display for Activation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Activation::Tanh => "tanh",
            Activation::Relu => "relu",
            Activation::Swish => "swish",
            Activation::Elu => "elu",
            Activation::Linear => "linear",
        })
    }
}
