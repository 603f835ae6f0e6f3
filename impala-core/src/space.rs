//! Gymnasium-style spaces.

use crate::{CoreError, Result};

/// An observation or action space, as Gymnasium's `Discrete`, `MultiDiscrete` and `Box`
/// (a uint8 `Box` is [`Space::Bytes`]).
///
/// Envs write observations as flattened `f32` values. Actions are passed as `f32` slices too: a
/// `Discrete` action is one value holding the index, a `MultiDiscrete` action one index per
/// component, a `Box` action its values (indices are exact in `f32` up to 2^24).
#[derive(Debug, Clone, PartialEq)]
pub enum Space {
    /// `n` choices `0..n`.
    Discrete(usize),
    /// One `Discrete(n_i)` per component (RLlib's MultiDiscrete, `nvec`).
    MultiDiscrete(Vec<usize>),
    /// A box of real values with per-element bounds and a shape (row-major).
    Box {
        /// Lower bounds, one per element (may be `-inf`).
        low: Vec<f32>,
        /// Upper bounds, one per element (may be `inf`).
        high: Vec<f32>,
        /// The shape; its product is `low.len()`.
        shape: Vec<usize>,
    },
    /// Bytes `0..=255` of any shape: Gymnasium's uint8 `Box` (image frames, `[H, W, C]`), an
    /// observation space only. Envs write the values as whole `f32`s; sample batches, replay and
    /// the learner queue keep them as bytes ([`crate::Observations::Bytes`]), and models scale
    /// them to `[0, 1]` on the learner's device.
    Bytes {
        /// The shape.
        shape: Vec<usize>,
    },
}

impl Space {
    /// A one-dimensional `Box` with the given bounds.
    ///
    /// ```
    /// let s = impala_core::Space::continuous(vec![-2.0], vec![2.0])?;
    /// assert_eq!(s.flat_dim(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn continuous(low: Vec<f32>, high: Vec<f32>) -> Result<Self> {
        let shape = vec![low.len()];
        Self::boxed(low, high, shape)
    }

    /// A `Box` of any shape; checks that bounds and shape agree and that `low <= high`.
    pub fn boxed(low: Vec<f32>, high: Vec<f32>, shape: Vec<usize>) -> Result<Self> {
        let n: usize = shape.iter().product();
        if low.len() != n || high.len() != n {
            return Err(CoreError::InvalidSpace {
                reason: format!(
                    "shape {shape:?} holds {n} values but low has {} and high has {}",
                    low.len(),
                    high.len()
                ),
            });
        }
        if let Some(i) = (0..n).find(|&i| low[i].is_nan() || high[i].is_nan() || low[i] > high[i]) {
            return Err(CoreError::InvalidSpace {
                reason: format!("bound {i}: low {} must be <= high {}", low[i], high[i]),
            });
        }
        Ok(Space::Box { low, high, shape })
    }

    /// How many `f32` values one element of this space takes when flattened
    /// (1 for `Discrete`, the number of components for `MultiDiscrete`).
    pub fn flat_dim(&self) -> usize {
        match self {
            Space::Discrete(_) => 1,
            Space::MultiDiscrete(nvec) => nvec.len(),
            Space::Box { low, .. } => low.len(),
            Space::Bytes { shape } => shape.iter().product(),
        }
    }

    /// The shape of one element (`[]` for `Discrete`, `[k]` for `MultiDiscrete`).
    pub fn shape(&self) -> Vec<usize> {
        match self {
            Space::Discrete(_) => vec![],
            Space::MultiDiscrete(nvec) => vec![nvec.len()],
            Space::Box { shape, .. } | Space::Bytes { shape } => shape.clone(),
        }
    }

    /// How many action-distribution inputs a policy needs for this action space: `n` logits for
    /// `Discrete`, `sum(nvec)` for `MultiDiscrete`, `2 * dim` (mean and log-std) for `Box`,
    /// as RLlib's `ModelCatalog.get_action_dist` sizes them; 0 for `Bytes`, which is no action
    /// space.
    pub fn dist_inputs_dim(&self) -> usize {
        match self {
            Space::Discrete(n) => *n,
            Space::MultiDiscrete(nvec) => nvec.iter().sum(),
            Space::Box { low, .. } => 2 * low.len(),
            Space::Bytes { .. } => 0,
        }
    }

    /// Whether this space is a (multi-)discrete one.
    pub fn is_discrete(&self) -> bool {
        matches!(self, Space::Discrete(_) | Space::MultiDiscrete(_))
    }

    /// Checks that `action` is a valid element of this space.
    ///
    /// ```
    /// let s = impala_core::Space::Discrete(2);
    /// assert!(s.check_action(&[1.0]).is_ok());
    /// assert!(s.check_action(&[2.0]).is_err());
    /// ```
    pub fn check_action(&self, action: &[f32]) -> Result<()> {
        let reject = |reason: String| CoreError::InvalidAction {
            action: action.to_vec(),
            space: self.to_string(),
            reason,
        };
        if action.len() != self.flat_dim() {
            return Err(reject(format!(
                "expected {} values, got {}",
                self.flat_dim(),
                action.len()
            )));
        }
        let check_index = |a: f32, n: usize| -> Result<()> {
            if a.fract() != 0.0 || a < 0.0 || a >= n as f32 {
                return Err(reject(format!("index must be an integer in 0..{n}")));
            }
            Ok(())
        };
        match self {
            Space::Discrete(n) => check_index(action[0], *n),
            Space::MultiDiscrete(nvec) => {
                action.iter().zip(nvec).try_for_each(|(&a, &n)| check_index(a, n))
            }
            Space::Box { .. } => {
                if action.iter().any(|a| !a.is_finite()) {
                    return Err(reject("values must be finite".into()));
                }
                Ok(())
            }
            Space::Bytes { .. } => action.iter().try_for_each(|&a| check_index(a, 256)),
        }
    }
}

impl std::fmt::Display for Space {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Space::Discrete(n) => write!(f, "Discrete({n})"),
            Space::MultiDiscrete(nvec) => write!(f, "MultiDiscrete({nvec:?})"),
            Space::Box { shape, .. } => write!(f, "Box(shape={shape:?})"),
            Space::Bytes { shape } => write!(f, "Box(0, 255, shape={shape:?}, uint8)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn box_rejects_bad_bounds() {
        assert!(Space::continuous(vec![1.0], vec![0.0]).is_err());
        assert!(Space::boxed(vec![0.0; 3], vec![1.0; 3], vec![2, 2]).is_err());
        assert!(Space::boxed(vec![0.0; 4], vec![1.0; 4], vec![2, 2]).is_ok());
    }

    #[test]
    fn dims() {
        let md = Space::MultiDiscrete(vec![3, 2]);
        assert_eq!(md.flat_dim(), 2);
        assert_eq!(md.dist_inputs_dim(), 5);
        assert!(md.check_action(&[2.0, 1.0]).is_ok());
        assert!(md.check_action(&[2.0, 2.0]).is_err());
        assert!(md.check_action(&[0.5, 1.0]).is_err());
        let b = Space::continuous(vec![-1.0; 2], vec![1.0; 2]).map_err(|e| e.to_string());
        assert_eq!(b.map(|s| s.dist_inputs_dim()), Ok(4));
    }
}
