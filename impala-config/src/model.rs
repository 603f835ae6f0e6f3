//! The model options (RLlib's `MODEL_DEFAULTS` catalog dict, the subset IMPALA uses).

use std::collections::BTreeMap;

use impala_core::{Activation, ConvFilter};
use serde::{Deserialize, Serialize};

/// RLlib's model config (`config.model`), with `MODEL_DEFAULTS` values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    /// Hidden layer sizes of the fully connected net.
    pub fcnet_hiddens: Vec<usize>,
    /// Activation of the fully connected net: one of [`ModelConfig::ACTIVATIONS`].
    pub fcnet_activation: String,
    /// Conv filters; `None` picks RLlib's default for the observation size (84, 64, 42, 10).
    pub conv_filters: Option<Vec<ConvFilter>>,
    /// Activation of the conv layers.
    pub conv_activation: String,
    /// Hidden layers after the conv stack (or after the LSTM).
    pub post_fcnet_hiddens: Vec<usize>,
    /// Activation of `post_fcnet_hiddens`.
    pub post_fcnet_activation: String,
    /// Share the torso between policy and value heads.
    pub vf_share_layers: bool,
    /// Wrap the model in an LSTM.
    pub use_lstm: bool,
    /// LSTM cell size.
    pub lstm_cell_size: usize,
    /// Maximum sequence length the LSTM is unrolled over.
    pub max_seq_len: usize,
    /// Stack this many frames of observations (RLlib's `framestack` for image envs).
    pub framestack: usize,
    /// Use a state-independent log-std for Gaussian actions (RLlib's `free_log_std`).
    pub free_log_std: bool,
    /// A model other than the catalog's: `"impala_resnet"` (the IMPALA paper's deep network)
    /// or the path of a TorchScript file (RLlib's `custom_model`).
    pub custom_model: Option<String>,
    /// The custom model's options (`impala_resnet`: `channels`, `hidden`).
    pub custom_model_config: BTreeMap<String, serde_json::Value>,
}

impl ModelConfig {
    /// The activation names the models accept (`fcnet_activation`, `conv_activation`,
    /// `post_fcnet_activation`), as RLlib's torch `get_activation_fn`; validation rejects others.
    pub const ACTIVATIONS: [&'static str; 6] = Activation::NAMES;

    /// Where `self` and `other` differ, each side as `key = value, ...` in RLlib's option names:
    /// what a message about two models (a checkpoint's and a run's) names.
    ///
    /// ```
    /// use impala_config::ModelConfig;
    ///
    /// let saved = ModelConfig { fcnet_hiddens: vec![256, 256], ..ModelConfig::default() };
    /// let now = ModelConfig { fcnet_hiddens: vec![64], use_lstm: true, ..ModelConfig::default() };
    /// let (was, is) = saved.differences(&now);
    /// assert_eq!(was, "fcnet_hiddens = [256,256], use_lstm = false");
    /// assert_eq!(is, "fcnet_hiddens = [64], use_lstm = true");
    /// ```
    pub fn differences(&self, other: &ModelConfig) -> (String, String) {
        use serde_json::Value;
        let (Ok(Value::Object(a)), Ok(Value::Object(b))) =
            (serde_json::to_value(self), serde_json::to_value(other))
        else {
            return (format!("{self:?}"), format!("{other:?}"));
        };
        let keys: Vec<&String> = a.keys().filter(|k| a.get(*k) != b.get(*k)).collect();
        let side = |m: &serde_json::Map<String, Value>| {
            let entries: Vec<String> = keys
                .iter()
                .map(|k| format!("{k} = {}", m.get(*k).unwrap_or(&Value::Null)))
                .collect();
            entries.join(", ")
        };
        (side(&a), side(&b))
    }
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            fcnet_hiddens: vec![256, 256],
            fcnet_activation: "tanh".into(),
            conv_filters: None,
            conv_activation: "relu".into(),
            post_fcnet_hiddens: vec![],
            post_fcnet_activation: "relu".into(),
            vf_share_layers: true,
            use_lstm: false,
            lstm_cell_size: 256,
            max_seq_len: 20,
            framestack: 1,
            free_log_std: false,
            custom_model: None,
            custom_model_config: BTreeMap::new(),
        }
    }
}
