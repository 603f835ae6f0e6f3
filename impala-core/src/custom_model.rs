//! The models `model.custom_model` names: what validation parses the key into and the learner
//! builds.

use std::path::PathBuf;

/// A model other than RLlib's catalog, named by `model.custom_model` (with
/// `model.custom_model_config`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CustomModel {
    /// `"impala_resnet"`: the IMPALA paper's deep ResNet.
    ImpalaResNet(ResNetSettings),
    /// The path of a TorchScript file (`torch.jit.script(module).save(path)`).
    TorchScript(PathBuf),
}

impl CustomModel {
    /// The built-in names `model.custom_model` takes besides a file.
    pub const NAMES: [&'static str; 1] = ["impala_resnet"];
}

/// The IMPALA ResNet's sizes (`model.custom_model_config`), the paper's by default.
///
/// ```
/// let resnet = impala_core::ResNetSettings::default();
/// assert_eq!((resnet.channels, resnet.hidden), (vec![16, 32, 32], 256));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResNetSettings {
    /// Output channels of each section (`channels`).
    pub channels: Vec<usize>,
    /// Width of the fully connected layer after the sections (`hidden`).
    pub hidden: usize,
}

impl ResNetSettings {
    /// The `custom_model_config` keys the ResNet reads.
    pub const KEYS: [&'static str; 2] = ["channels", "hidden"];
}

impl Default for ResNetSettings {
    fn default() -> Self {
        ResNetSettings { channels: vec![16, 32, 32], hidden: 256 }
    }
}
