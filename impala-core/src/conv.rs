//! A conv layer as RLlib's `model.conv_filters` writes it.

use serde::{Deserialize, Serialize};

/// One conv layer, written as RLlib writes it: `[out_channels, kernel, stride]`, where kernel
/// and stride are each an int (square) or an `[h, w]` pair.
///
/// ```
/// use impala_core::ConvFilter;
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
