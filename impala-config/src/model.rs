//! The model options (RLlib's `MODEL_DEFAULTS` catalog dict, the subset IMPALA uses).

use serde::{Deserialize, Serialize};

/// One conv layer, written as RLlib writes it: `[out_channels, kernel, stride]`, where kernel
/// and stride are each an int (square) or an `[h, w]` pair.
///
/// ```
/// use impala_config::ConvFilter;
/// let filters: Vec<ConvFilter> = serde_json::from_str("[[16, 8, 4], [32, [4, 3], [2, 1]]]")?;
/// assert_eq!(filters[0], ConvFilter::square(16, 8, 4));
/// assert_eq!(filters[1], ConvFilter { out_channels: 32, kernel: [4, 3], stride: [2, 1] });
/// assert_eq!(serde_json::to_string(&filters)?, "[[16,8,4],[32,[4,3],[2,1]]]");
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "RllibFilter", into = "RllibFilter")]
pub struct ConvFilter {
    /// Output channels.
    pub out_channels: usize,
    /// Kernel `[height, width]`.
    pub kernel: [usize; 2],
    /// Stride `[height, width]`.
    pub stride: [usize; 2],
}

impl ConvFilter {
    /// A filter with a square kernel and stride, RLlib's `[out, kernel, stride]`.
    pub fn square(out_channels: usize, kernel: usize, stride: usize) -> Self {
        ConvFilter { out_channels, kernel: [kernel; 2], stride: [stride; 2] }
    }

    /// Whether any size is zero (validation refuses such a filter).
    pub fn has_zero(&self) -> bool {
        self.out_channels == 0 || self.kernel.contains(&0) || self.stride.contains(&0)
    }
}

impl std::fmt::Display for ConvFilter {
    /// As RLlib writes it, e.g. `[16, 8, 4]` or `[32, [4, 3], 2]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let size = |[h, w]: [usize; 2]| if h == w { h.to_string() } else { format!("[{h}, {w}]") };
        write!(f, "[{}, {}, {}]", self.out_channels, size(self.kernel), size(self.stride))
    }
}

/// RLlib's spelling of a filter: `(out, kernel, stride)` with int-or-pair sizes.
#[derive(Serialize, Deserialize)]
struct RllibFilter(usize, RllibSize, RllibSize);

#[derive(Serialize, Deserialize)]
#[serde(untagged, expecting = "a kernel or stride: an int or an [h, w] pair")]
enum RllibSize {
    Square(usize),
    Pair([usize; 2]),
}

impl From<RllibSize> for [usize; 2] {
    fn from(size: RllibSize) -> Self {
        match size {
            RllibSize::Square(n) => [n, n],
            RllibSize::Pair(pair) => pair,
        }
    }
}

impl From<[usize; 2]> for RllibSize {
    fn from([h, w]: [usize; 2]) -> Self {
        if h == w {
            RllibSize::Square(h)
        } else {
            RllibSize::Pair([h, w])
        }
    }
}

impl From<RllibFilter> for ConvFilter {
    fn from(RllibFilter(out_channels, kernel, stride): RllibFilter) -> Self {
        ConvFilter { out_channels, kernel: kernel.into(), stride: stride.into() }
    }
}

impl From<ConvFilter> for RllibFilter {
    fn from(f: ConvFilter) -> Self {
        RllibFilter(f.out_channels, f.kernel.into(), f.stride.into())
    }
}

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
}

impl ModelConfig {
    /// The activation names the models accept (`fcnet_activation`, `conv_activation`,
    /// `post_fcnet_activation`), as RLlib's torch `get_activation_fn`; validation rejects others.
    pub const ACTIVATIONS: [&'static str; 6] = ["tanh", "relu", "swish", "silu", "elu", "linear"];
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
        }
    }
}
