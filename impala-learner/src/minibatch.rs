//! RLlib's `MinibatchBuffer` (`rllib/execution/minibatch_buffer.py`): a ring of slots that hands
//! out each fetched item `num_passes` times, interleaved across slots.

/// One item handed out by [`MinibatchBuffer::get`].
#[derive(Debug, PartialEq)]
pub enum Minibatch<'a, T> {
    /// The item stays in its slot for more passes.
    Kept(&'a T),
    /// The item's last pass: the slot gave it up (RLlib's `released = True`).
    Released(T),
}

impl<T> Minibatch<'_, T> {
    /// The item, whichever way it was handed out.
    pub fn item(&self) -> &T {
        match self {
            Minibatch::Kept(t) => t,
            Minibatch::Released(t) => t,
        }
    }
}

/// A ring of `size` slots with a time-to-live per slot. A slot whose ttl ran out fetches a new
/// item with ttl `cur_initial_ttl`, which ramps from `init_num_passes` up to `num_passes`, one
/// per fetch, exactly as RLlib's buffer does:
///
/// | size | num_passes | init | hands out (`*` = released) |
/// |---|---|---|---|
/// | 1 | 2 | 2 | A, A*, B, B*, ... |
/// | 2 | 2 | 2 | A, B, A*, B*, C, D, C*, D* |
/// | 1 | 3 | 1 | A*, B, B*, C, C, C*, D, D, D* |
///
/// ```
/// use impala_learner::{Minibatch, MinibatchBuffer};
/// let mut buf = MinibatchBuffer::new(1, 2, 2);
/// assert_eq!(buf.get(|| Ok::<_, ()>("A")), Ok(Minibatch::Kept(&"A")));
/// assert_eq!(buf.get(|| Ok::<_, ()>("B")), Ok(Minibatch::Released("A")));
/// ```
#[derive(Debug)]
pub struct MinibatchBuffer<T> {
    slots: Vec<Option<T>>,
    ttl: Vec<usize>,
    idx: usize,
    cur_initial_ttl: usize,
    max_initial_ttl: usize,
}

impl<T> MinibatchBuffer<T> {
    /// `size` slots (at least 1), `num_passes` per item (at least 1) after a ramp starting at
    /// `init_num_passes`.
    pub fn new(size: usize, num_passes: usize, init_num_passes: usize) -> Self {
        let size = size.max(1);
        let max_initial_ttl = num_passes.max(1);
        MinibatchBuffer {
            slots: (0..size).map(|_| None).collect(),
            ttl: vec![0; size],
            idx: 0,
            cur_initial_ttl: init_num_passes.clamp(1, max_initial_ttl),
            max_initial_ttl,
        }
    }

    /// The next item: the current slot's, or a new one from `fetch` when its ttl ran out (an
    /// error from `fetch`, e.g. a timeout, leaves the buffer unchanged).
    pub fn get<E>(&mut self, fetch: impl FnOnce() -> Result<T, E>) -> Result<Minibatch<'_, T>, E> {
        let i = self.idx;
        let item = match self.slots[i].take() {
            Some(item) if self.ttl[i] > 0 => item,
            _ => {
                let item = fetch()?;
                self.ttl[i] = self.cur_initial_ttl;
                if self.cur_initial_ttl < self.max_initial_ttl {
                    self.cur_initial_ttl += 1;
                }
                item
            }
        };
        self.ttl[i] -= 1;
        self.idx = (i + 1) % self.slots.len();
        if self.ttl[i] == 0 {
            Ok(Minibatch::Released(item))
        } else {
            Ok(Minibatch::Kept(self.slots[i].insert(item)))
        }
    }
}
