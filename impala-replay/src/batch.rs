//! What the buffer needs from a stored batch: its size and a way to join several.

use impala_core::{CoreError, SampleBatch};

/// A batch the mix-in buffer can store and hand back: RLlib's `batch.count` and
/// `concat_samples`, and nothing more.
///
/// The buffer stores batches behind [`Arc`](std::sync::Arc), so `Clone` is only used when a
/// caller asks to own a single part that the buffer still holds (see
/// [`Replay::concat`](crate::Replay::concat)).
pub trait ReplayBatch: Clone {
    /// The error [`concat`](ReplayBatch::concat) may return.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Timesteps in the batch (RLlib's `batch.count`), summed into
    /// [`MixInReplay::num_added`](crate::MixInReplay::num_added).
    fn count(&self) -> usize;

    /// Joins `parts` (never empty) into one batch, in order.
    fn concat(parts: &[&Self]) -> Result<Self, Self::Error>;
}

/// IMPALA's batches: parts are joined along the row axis by [`SampleBatch::concat`], which reads
/// the borrowed parts directly, so the data is copied once.
impl ReplayBatch for SampleBatch {
    type Error = CoreError;

    fn count(&self) -> usize {
        self.env_steps()
    }

    fn concat(parts: &[&Self]) -> Result<Self, CoreError> {
        SampleBatch::concat(parts)
    }
}

/// A plain list of items (timesteps, rows, ids) is a batch of `len()` items; handy in tests and
/// for callers whose batches are already `Vec`s.
impl<I: Clone> ReplayBatch for Vec<I> {
    type Error = std::convert::Infallible;

    fn count(&self) -> usize {
        self.len()
    }

    fn concat(parts: &[&Self]) -> Result<Self, Self::Error> {
        Ok(parts.iter().flat_map(|p| p.iter().cloned()).collect())
    }
}
