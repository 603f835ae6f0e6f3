//! Observation storage: `f32` values, or bytes for [`Space::Bytes`] observations (Atari frames,
//! users' uint8 images), which stay bytes through sample batches, replay and the learner queue
//! and become floats only on the learner's device.

use std::ops::Range;

use crate::{CoreError, Result, Space};

/// Observations of a batch, row-major, in the element type their space calls for.
///
/// Envs write `f32` values (a bytes space's values are whole numbers `0..=255`); the observations
/// of a [`Space::Bytes`] space are kept as `u8`: exact, and a quarter of the memory.
///
/// ```
/// use impala_core::{Observations, Space};
/// let mut obs = Observations::zeros(&Space::Bytes { shape: vec![2] }, 4);
/// obs.write(2, &[7.0, 255.0]);
/// assert_eq!(obs, Observations::Bytes(vec![0, 0, 7, 255]));
/// assert_eq!(obs.to_f32(), vec![0.0, 0.0, 7.0, 255.0]);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Observations {
    /// Real values.
    F32(Vec<f32>),
    /// Bytes `0..=255` ([`Space::Bytes`]).
    Bytes(Vec<u8>),
}

impl Default for Observations {
    fn default() -> Self {
        Observations::F32(Vec::new())
    }
}

impl Observations {
    /// `len` zeros in the element type of `space`'s observations.
    pub fn zeros(space: &Space, len: usize) -> Self {
        match space {
            Space::Bytes { .. } => Observations::Bytes(vec![0; len]),
            _ => Observations::F32(vec![0.0; len]),
        }
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        match self {
            Observations::F32(v) => v.len(),
            Observations::Bytes(v) => v.len(),
        }
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The element type, for messages: `f32` or `bytes`.
    pub fn kind(&self) -> &'static str {
        match self {
            Observations::F32(_) => "f32",
            Observations::Bytes(_) => "bytes",
        }
    }

    /// The values, if they are `f32`.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match self {
            Observations::F32(v) => Some(v),
            Observations::Bytes(_) => None,
        }
    }

    /// The values, if they are bytes.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Observations::Bytes(v) => Some(v),
            Observations::F32(_) => None,
        }
    }

    /// Writes `values` at `start..start + values.len()`. Bytes take `x + 0.5` truncated and
    /// saturated to `0..=255` (NaN to 0): exact for a bytes space's whole numbers, and the
    /// nearest whole number for others (halves round up).
    ///
    /// Panics if the range is out of bounds, as slice indexing does.
    pub fn write(&mut self, start: usize, values: &[f32]) {
        let range = start..start + values.len();
        match self {
            Observations::F32(v) => v[range].copy_from_slice(values),
            Observations::Bytes(v) => {
                // Not `x.round()`: that is a libm call per value without SSE4.1 (12% of an
                // Atari runner's time); this loop vectorises.
                for (b, &x) in v[range].iter_mut().zip(values) {
                    *b = to_byte(x);
                }
            }
        }
    }

    /// Makes room for `additional` more values.
    pub fn reserve(&mut self, additional: usize) {
        match self {
            Observations::F32(v) => v.reserve(additional),
            Observations::Bytes(v) => v.reserve(additional),
        }
    }

    /// Appends `values`, converted as [`Observations::write`] converts them.
    pub fn extend(&mut self, values: &[f32]) {
        match self {
            Observations::F32(v) => v.extend_from_slice(values),
            Observations::Bytes(v) => v.extend(values.iter().map(|&x| to_byte(x))),
        }
    }

    /// The values as `f32` (bytes as `0.0..=255.0`).
    pub fn to_f32(&self) -> Vec<f32> {
        match self {
            Observations::F32(v) => v.clone(),
            Observations::Bytes(v) => v.iter().map(|&b| f32::from(b)).collect(),
        }
    }

    /// Concatenates `pieces` (a part and a range of its values) of `parts`, which all hold the
    /// same element type.
    pub(crate) fn gather(
        parts: &[&Observations],
        pieces: impl Iterator<Item = (usize, Range<usize>)>,
    ) -> Result<Observations> {
        let mixed = |i: usize| CoreError::IncompatibleBatches {
            reason: format!(
                "batch {i} stores observations as {}, batch 0 as {}",
                parts[i].kind(),
                parts[0].kind()
            ),
        };
        fn all<'a, V>(
            parts: &[&'a Observations],
            get: fn(&'a Observations) -> Option<&'a [V]>,
        ) -> std::result::Result<Vec<&'a [V]>, usize> {
            parts.iter().enumerate().map(|(i, p)| get(p).ok_or(i)).collect()
        }
        Ok(match parts.first() {
            Some(Observations::Bytes(_)) => Observations::Bytes(gather(
                &all(parts, Observations::as_bytes).map_err(mixed)?,
                pieces,
            )),
            _ => {
                Observations::F32(gather(&all(parts, Observations::as_f32).map_err(mixed)?, pieces))
            }
        })
    }
}

/// A value of a bytes observation: `x + 0.5` truncated and saturated (see
/// [`Observations::write`]).
#[inline]
fn to_byte(x: f32) -> u8 {
    (x + 0.5) as u8
}

/// Concatenates `pieces` (a part and a range of its values) of `parts`.
pub(crate) fn gather<V: Copy>(
    parts: &[&[V]],
    pieces: impl Iterator<Item = (usize, Range<usize>)>,
) -> Vec<V> {
    // Sized once: train batches of frames are megabytes.
    let pieces: Vec<(usize, Range<usize>)> = pieces.collect();
    let mut out = Vec::with_capacity(pieces.iter().map(|(_, r)| r.len()).sum());
    for (part, range) in pieces {
        out.extend_from_slice(&parts[part][range]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_to_the_nearest_whole_number_and_saturate() {
        let values = [-3.0, 0.4, 2.5, 127.0, 254.6, 300.0, f32::NAN];
        let mut obs = Observations::zeros(&Space::Bytes { shape: vec![values.len()] }, 7);
        obs.write(0, &values);
        assert_eq!(obs, Observations::Bytes(vec![0, 0, 3, 127, 255, 255, 0]));
        let mut appended = Observations::zeros(&Space::Bytes { shape: vec![values.len()] }, 0);
        appended.extend(&values);
        assert_eq!(appended, obs);
    }
}
