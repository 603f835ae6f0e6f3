//! RLlib's `SimpleReplayBuffer`: a fixed number of slots, filled in order, then overwritten
//! round-robin; replay draws uniformly with replacement.

use std::sync::Arc;

use rand::Rng;

/// The storage behind one key of a [`MixInReplay`](crate::MixInReplay) (RLlib's
/// `SimpleReplayBuffer(num_slots=capacity)`), read-only from outside the crate.
///
/// Batches are appended until `num_slots` are stored; after that the slot at
/// [`next_overwrite`](SimpleReplayBuffer::next_overwrite) is replaced and the index advances by
/// one modulo `num_slots`. So after `n` adds, slot `i` holds the latest add `k < n` with
/// `k % num_slots == i`.
#[derive(Debug, Clone)]
pub struct SimpleReplayBuffer<T> {
    num_slots: usize,
    slots: Vec<Arc<T>>,
    replay_index: usize,
}

impl<T> SimpleReplayBuffer<T> {
    /// An empty buffer; `num_slots >= 1` is checked by the caller.
    pub(crate) fn new(num_slots: usize) -> Self {
        SimpleReplayBuffer { num_slots, slots: Vec::new(), replay_index: 0 }
    }

    /// RLlib's `add_batch`.
    pub(crate) fn add(&mut self, batch: Arc<T>) {
        if self.slots.len() < self.num_slots {
            self.slots.push(batch);
        } else {
            self.slots[self.replay_index] = batch;
            self.replay_index = (self.replay_index + 1) % self.num_slots;
        }
    }

    /// RLlib's `replay`: `random.choice` over the stored batches; `None` when empty.
    pub(crate) fn replay<R: Rng>(&self, rng: &mut R) -> Option<Arc<T>> {
        if self.slots.is_empty() {
            return None;
        }
        Some(Arc::clone(&self.slots[rng.random_range(0..self.slots.len())]))
    }

    /// Slots the buffer holds at most (the buffer's capacity).
    pub fn num_slots(&self) -> usize {
        self.num_slots
    }

    /// Batches stored now (`min(adds, num_slots)`).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether nothing has been stored yet.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The stored batches in slot order (not in insertion order once the buffer wrapped).
    pub fn slots(&self) -> &[Arc<T>] {
        &self.slots
    }

    /// The slot the next add overwrites once the buffer is full (RLlib's `replay_index`).
    pub fn next_overwrite(&self) -> usize {
        self.replay_index
    }
}
