//! `replay_proportion` (the config's knob) and `replay_ratio` (the buffer's).

use crate::{ReplayError, Result};

/// Converts IMPALA's `replay_proportion` p ("on average p replayed batches per new batch") into
/// the buffer's `replay_ratio` r (the fraction of replayed batches in its output):
/// `r = p / (1 + p)`, the inverse of the buffer's own `p = r / (1 - r)`.
///
/// RLlib's `ImpalaConfig.replay_ratio` computes `1 / p` instead, which contradicts its own
/// documentation: p = 0.5 gives r = 2 (nothing is ever replayed), p = 1 gives r = 1 (each call
/// returns one random stored batch and the new batch only if that draw happens to pick it),
/// p = 2 gives r = 0.5 (a 1:1 mix, not 2:1). impala-rs does not port that bug (DESIGN.md);
/// `ImpalaConfig::replay_ratio()` in impala-config uses the same formula as this function.
///
/// ```
/// use impala_replay::replay_ratio_from_proportion;
/// assert_eq!(replay_ratio_from_proportion(0.0)?, 0.0);
/// assert_eq!(replay_ratio_from_proportion(1.0)?, 0.5);
/// assert_eq!(replay_ratio_from_proportion(9.0)?, 0.9);
/// assert!(replay_ratio_from_proportion(-1.0).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn replay_ratio_from_proportion(replay_proportion: f64) -> Result<f64> {
    if !(replay_proportion.is_finite() && replay_proportion >= 0.0) {
        return Err(ReplayError::InvalidReplayProportion { replay_proportion });
    }
    Ok(replay_proportion / (1.0 + replay_proportion))
}

/// Checks that `replay_ratio` is in `[0, 1]` (NaN is not).
pub(crate) fn check_replay_ratio(replay_ratio: f64) -> Result<()> {
    if (0.0..=1.0).contains(&replay_ratio) {
        Ok(())
    } else {
        Err(ReplayError::InvalidReplayRatio { replay_ratio })
    }
}
