//! Piecewise-linear schedules (`lr_schedule`, `entropy_coeff_schedule`).

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

/// RLlib's `PiecewiseSchedule` with linear interpolation, written `[[timestep, value], ...]`:
/// before the first point it holds the first value, past the last point the last value.
/// Timesteps may be written as whole floats (`2e7`), as Python configs often do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Schedule {
    /// `(timestep, value)` points, sorted by timestep (checked by validation).
    #[serde(deserialize_with = "points")]
    pub points: Vec<(u64, f64)>,
}

/// A timestep: a non-negative integer, or a float with a whole value (`2e7`).
struct Timestep(u64);

impl<'de> Deserialize<'de> for Timestep {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TimestepVisitor;

        impl Visitor<'_> for TimestepVisitor {
            type Value = Timestep;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a non-negative whole timestep")
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Timestep, E> {
                Ok(Timestep(v))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Timestep, E> {
                u64::try_from(v)
                    .map(Timestep)
                    .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Timestep, E> {
                // Whole floats up to 2^53 are exact; larger ones are rejected, not rounded.
                if v >= 0.0 && v.fract() == 0.0 && v <= 9_007_199_254_740_992.0 {
                    Ok(Timestep(v as u64))
                } else {
                    Err(E::invalid_value(de::Unexpected::Float(v), &self))
                }
            }
        }

        deserializer.deserialize_any(TimestepVisitor)
    }
}

fn points<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<(u64, f64)>, D::Error> {
    let points = Vec::<(Timestep, f64)>::deserialize(deserializer)?;
    Ok(points.into_iter().map(|(Timestep(t), v)| (t, v)).collect())
}

impl Schedule {
    /// The value at `timestep` (RLlib drives schedules by agent steps trained).
    ///
    /// ```
    /// use impala_core::Schedule;
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
