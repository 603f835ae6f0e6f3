//! Piecewise-linear schedules (`lr_schedule`, `entropy_coeff_schedule`).

use serde::{Deserialize, Serialize};

/// RLlib's `PiecewiseSchedule` with linear interpolation, written `[[timestep, value], ...]`:
/// before the first point it holds the first value, past the last point the last value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Schedule {
    /// `(timestep, value)` points, sorted by timestep (checked by validation).
    pub points: Vec<(u64, f64)>,
}

impl Schedule {
    /// The value at `timestep` (RLlib drives schedules by agent steps trained).
    ///
    /// ```
    /// use impala_config::Schedule;
    /// let s = Schedule { points: vec![(0, 1.0), (100, 0.0)] };
    /// assert_eq!(s.value_at(50), 0.5);
    /// assert_eq!(s.value_at(1_000), 0.0);
    /// ```
    pub fn value_at(&self, timestep: u64) -> f64 {
        let Some(&(t0, v0)) = self.points.first() else {
            return 0.0;
        };
        if timestep <= t0 {
            return v0;
        }
        for w in self.points.windows(2) {
            let ((ta, va), (tb, vb)) = (w[0], w[1]);
            if timestep < tb {
                let alpha = (timestep - ta) as f64 / (tb - ta) as f64;
                return va + alpha * (vb - va);
            }
        }
        self.points.last().map_or(v0, |&(_, v)| v)
    }
}
