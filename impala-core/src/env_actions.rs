//! What a policy's sampled actions become before an env steps with them: RLlib's
//! `normalize_actions` and `clip_actions`. The batch keeps the sampled actions (their log-probs
//! are what V-trace compares), only the env sees these.

use crate::Space;

/// How sampled `Box` actions reach the env; other spaces' actions go as sampled.
///
/// With `normalize_actions` (RLlib's default) the policy acts in `[-1, 1]`: an action `a` is
/// mapped linearly onto the space's bounds, `low + (a + 1) (high - low) / 2`, and clipped to
/// them (RLlib's `unsquash_action`), so a Gaussian's initial unit scale explores the whole range
/// whatever its width. That needs every bound finite; a `Box` with an infinite bound goes as
/// sampled, as in RLlib. Otherwise `clip_actions` clips to the bounds.
///
/// ```
/// use impala_core::{EnvActions, Space};
///
/// let torque = Space::continuous(vec![-2.0], vec![2.0])?;
/// let mut actions = vec![-1.0, 0.25, 3.0];
/// EnvActions::new(&torque, true, false).apply(&mut actions);
/// assert_eq!(actions, [-2.0, 0.5, 2.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum EnvActions {
    /// Unchanged.
    AsSampled,
    /// Clipped to `[low, high]` per element (`clip_actions`).
    Clipped {
        /// Lower bounds, one per action element.
        low: Vec<f32>,
        /// Upper bounds.
        high: Vec<f32>,
    },
    /// Mapped from `[-1, 1]` onto `[low, high]`, then clipped to it (`normalize_actions`).
    Unsquashed {
        /// Lower bounds, one per action element (all finite).
        low: Vec<f32>,
        /// Upper bounds (all finite).
        high: Vec<f32>,
    },
}

impl EnvActions {
    /// The mapping for `space` under the two options, as RLlib's env runners choose it:
    /// normalising wins over clipping.
    pub fn new(space: &Space, normalize_actions: bool, clip_actions: bool) -> Self {
        let Space::Box { low, high, .. } = space else { return EnvActions::AsSampled };
        let bounded = low.iter().chain(high).all(|b| b.is_finite());
        match (normalize_actions, clip_actions) {
            (true, _) if bounded => EnvActions::Unsquashed { low: low.clone(), high: high.clone() },
            (true, _) => EnvActions::AsSampled,
            (false, true) => EnvActions::Clipped { low: low.clone(), high: high.clone() },
            (false, false) => EnvActions::AsSampled,
        }
    }

    /// Whether actions reach the env as sampled (no copy needed).
    pub fn is_identity(&self) -> bool {
        matches!(self, EnvActions::AsSampled)
    }

    /// Maps rows of sampled actions (each `low.len()` values) in place.
    pub fn apply(&self, actions: &mut [f32]) {
        match self {
            EnvActions::AsSampled => {}
            EnvActions::Clipped { low, high } => {
                for (i, a) in actions.iter_mut().enumerate() {
                    let k = i % low.len();
                    *a = a.clamp(low[k], high[k]);
                }
            }
            EnvActions::Unsquashed { low, high } => {
                for (i, a) in actions.iter_mut().enumerate() {
                    let k = i % low.len();
                    *a = (low[k] + (*a + 1.0) * (high[k] - low[k]) / 2.0).clamp(low[k], high[k]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalising_maps_the_unit_range_onto_each_bound_and_clips() -> crate::Result<()> {
        let space = Space::continuous(vec![0.0, -1.0], vec![10.0, 3.0])?;
        let mut rows = vec![-1.0, 1.0, 0.0, 0.0, 2.0, -5.0];
        EnvActions::new(&space, true, true).apply(&mut rows);
        assert_eq!(rows, [0.0, 3.0, 5.0, 1.0, 10.0, -1.0]);
        Ok(())
    }

    #[test]
    fn an_unbounded_box_goes_as_sampled_when_normalising_and_is_clipped_otherwise(
    ) -> crate::Result<()> {
        let space = Space::continuous(vec![f32::NEG_INFINITY], vec![1.0])?;
        assert_eq!(EnvActions::new(&space, true, true), EnvActions::AsSampled);
        let mut rows = vec![5.0, -7.0];
        EnvActions::new(&space, false, true).apply(&mut rows);
        assert_eq!(rows, [1.0, -7.0]);
        Ok(())
    }

    #[test]
    fn discrete_actions_are_never_mapped() {
        assert!(EnvActions::new(&Space::Discrete(3), true, true).is_identity());
        let bounded = Space::Box { low: vec![-1.0], high: vec![1.0], shape: vec![1] };
        assert!(EnvActions::new(&bounded, false, false).is_identity());
    }
}
