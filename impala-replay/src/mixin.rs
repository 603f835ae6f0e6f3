//! RLlib's `MixInMultiAgentReplayBuffer` (`rllib/execution/buffers/mixin_replay_buffer.py`).

use std::collections::HashMap;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::ratio::{check_replay_ratio, replay_ratio_from_proportion};
use crate::{ReplayBatch, ReplayError, Result, SimpleReplayBuffer};

/// The key of the single store in [`ReplayMode::Lockstep`] (RLlib's `_ALL_POLICIES`).
pub const ALL_POLICIES: &str = "__all__";

/// The key single-agent batches go under in [`ReplayMode::Independent`] (RLlib's
/// `DEFAULT_POLICY_ID`, what `as_multi_agent()` wraps a plain batch in).
pub const DEFAULT_POLICY_ID: &str = "default_policy";

/// How batches of several policies share the buffer (RLlib's `ReplayMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReplayMode {
    /// One store per policy id; RLlib's default for this buffer.
    #[default]
    Independent,
    /// One store for all policies under [`ALL_POLICIES`], so a replayed batch holds every
    /// policy's data from the same steps; what IMPALA uses.
    Lockstep,
}

/// Settings of a [`MixInReplay`], checked by [`MixInReplay::new`].
#[derive(Debug, Clone, PartialEq)]
pub struct MixInReplayConfig {
    /// Batches (slots, not timesteps) each store keeps; at least 1.
    pub capacity: usize,
    /// Fraction of replayed batches in the output, in `[0, 1]`: 0 returns only new batches,
    /// 0.5 one old batch per new one on average, 1 one random stored batch per call.
    pub replay_ratio: f64,
    /// One store for all policies, or one per policy.
    pub replay_mode: ReplayMode,
    /// Seed of the buffer's RNG; `None` seeds from the OS (runs are then not reproducible).
    pub seed: Option<u64>,
}

impl MixInReplayConfig {
    /// The buffer IMPALA builds from its config: `capacity = replay_buffer_num_slots`, or 1 when
    /// that is 0 (RLlib's default, so the buffer then keeps only the latest batch), lockstep
    /// mode, and `replay_ratio = p / (1 + p)` from `replay_proportion` (see
    /// [`replay_ratio_from_proportion`] for why not RLlib's `1 / p`).
    ///
    /// ```
    /// use impala_replay::{MixInReplayConfig, ReplayMode};
    /// let config = MixInReplayConfig::for_impala(1.0, 0, Some(7))?;
    /// assert_eq!((config.capacity, config.replay_ratio), (1, 0.5));
    /// assert_eq!(config.replay_mode, ReplayMode::Lockstep);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn for_impala(
        replay_proportion: f64,
        replay_buffer_num_slots: usize,
        seed: Option<u64>,
    ) -> Result<Self> {
        Ok(MixInReplayConfig {
            capacity: replay_buffer_num_slots.max(1),
            replay_ratio: replay_ratio_from_proportion(replay_proportion)?,
            replay_mode: ReplayMode::Lockstep,
            seed,
        })
    }
}

/// What one [`MixInReplay::replay`] call returns: the new batches first, in the order they were
/// added, then the replayed ones, each shared with the buffer rather than copied.
///
/// RLlib returns `concat_samples(parts)`. The parts are returned instead because IMPALA's driver
/// concatenates again when it builds a train batch of `train_batch_size` steps; keeping the parts
/// lets it copy the data once. [`Replay::concat`] gives RLlib's single batch.
#[derive(Debug, Clone)]
pub struct Replay<T> {
    parts: Vec<Arc<T>>,
    num_new: usize,
}

impl<T> Replay<T> {
    /// All parts: `num_new()` new batches, then `num_replayed()` replayed ones.
    pub fn parts(&self) -> &[Arc<T>] {
        &self.parts
    }

    /// The parts, to move elsewhere without copying.
    pub fn into_parts(self) -> Vec<Arc<T>> {
        self.parts
    }

    /// Batches added since the previous replay (0 with `replay_ratio = 1`, where the new
    /// batches are only stored).
    pub fn num_new(&self) -> usize {
        self.num_new
    }

    /// Batches drawn from the store.
    pub fn num_replayed(&self) -> usize {
        self.parts.len() - self.num_new
    }

    /// Number of parts (never 0).
    pub fn num_batches(&self) -> usize {
        self.parts.len()
    }
}

impl<T: ReplayBatch> Replay<T> {
    /// Timesteps over all parts: the `len()` of RLlib's concatenated output.
    pub fn count(&self) -> usize {
        self.parts.iter().map(|p| p.count()).sum()
    }

    /// The parts joined into one batch, as RLlib's `concat_samples` returns. A single part
    /// is handed over without copying when the buffer no longer holds it.
    pub fn concat(mut self) -> Result<T> {
        if self.parts.len() == 1 {
            if let Some(only) = self.parts.pop() {
                return Ok(Arc::unwrap_or_clone(only));
            }
        }
        let refs: Vec<&T> = self.parts.iter().map(|p| p.as_ref()).collect();
        T::concat(&refs).map_err(|e| ReplayError::Concat { cause: Box::new(e) })
    }
}

/// The store of one key: the slots and the batches added since the last replay.
#[derive(Debug)]
struct PolicyStore<T> {
    buffer: SimpleReplayBuffer<T>,
    last_added: Vec<Arc<T>>,
}

/// RLlib's `MixInMultiAgentReplayBuffer` as IMPALA uses it: every added batch comes back once
/// on the next [`replay`](MixInReplay::replay), mixed with older batches drawn uniformly (with
/// replacement) from a store of `capacity` slots so that, on average, a fraction
/// `replay_ratio` of the output is replayed.
///
/// The mixing is RLlib's, step for step: with `num_new` batches pending and
/// `p = r / (1 - r)`, `while random() < num_new * p { p -= 1; push(random stored batch) }`.
/// With one new batch per call (IMPALA calls `add` then `replay` for every sampled batch) this
/// replays exactly `p` batches on average: `floor(p)` always, one more with probability
/// `p - floor(p)`. With `num_new > 1` it is not `num_new * p` (RLlib's quirk, kept).
///
/// - `r = 0`: only the new batches come back (they are still stored).
/// - `r = 1`: one random stored batch comes back per call, also when nothing is new; new
///   batches are only stored.
/// - `0 <= r < 1` and nothing new: `None`. An empty store: `None`.
///
/// Batches are stored as `Arc<T>` and shared with what `replay` returns; nothing is copied.
/// Batches added without a `replay` pile up until the next one (as in RLlib).
///
/// ```
/// use impala_replay::{MixInReplay, MixInReplayConfig, ReplayMode};
///
/// let mut buffer = MixInReplay::new(MixInReplayConfig {
///     capacity: 4,
///     replay_ratio: 0.5, // one replayed batch per new batch
///     replay_mode: ReplayMode::Lockstep,
///     seed: Some(0),
/// })?;
/// assert!(buffer.replay().is_none()); // nothing stored yet
/// buffer.add(vec![1, 2]);
/// buffer.add(vec![3]);
/// let out = buffer.replay().ok_or("nothing to replay")?;
/// assert_eq!(out.num_new(), 2);
/// assert_eq!(&out.parts()[..2], &[vec![1, 2].into(), vec![3].into()]);
/// assert!(out.concat()?.starts_with(&[1, 2, 3]));
/// assert!(buffer.replay().is_none()); // nothing new since
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[doc(alias = "MixInMultiAgentReplayBuffer")]
#[derive(Debug)]
pub struct MixInReplay<T> {
    capacity: usize,
    replay_ratio: f64,
    replay_mode: ReplayMode,
    stores: HashMap<String, PolicyStore<T>>,
    num_added: usize,
    rng: StdRng,
}

impl<T: ReplayBatch> MixInReplay<T> {
    /// An empty buffer; errors on `capacity == 0` or a `replay_ratio` outside `[0, 1]` (NaN
    /// included).
    ///
    /// ```
    /// use impala_replay::{MixInReplay, MixInReplayConfig, ReplayError, ReplayMode};
    /// let config = MixInReplayConfig {
    ///     capacity: 0,
    ///     replay_ratio: 0.5,
    ///     replay_mode: ReplayMode::Lockstep,
    ///     seed: Some(0),
    /// };
    /// let err = MixInReplay::<Vec<u8>>::new(config).err();
    /// assert!(matches!(err, Some(ReplayError::ZeroCapacity)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(config: MixInReplayConfig) -> Result<Self> {
        if config.capacity == 0 {
            return Err(ReplayError::ZeroCapacity);
        }
        check_replay_ratio(config.replay_ratio)?;
        Ok(MixInReplay {
            capacity: config.capacity,
            replay_ratio: config.replay_ratio,
            replay_mode: config.replay_mode,
            stores: HashMap::new(),
            num_added: 0,
            rng: config.seed.map_or_else(StdRng::from_os_rng, StdRng::seed_from_u64),
        })
    }

    /// Stores `batch` and queues it for the next [`replay`](MixInReplay::replay): under
    /// [`ALL_POLICIES`] in lockstep mode, under [`DEFAULT_POLICY_ID`] in independent mode (a
    /// single-agent batch, as RLlib's `as_multi_agent()` makes it).
    pub fn add(&mut self, batch: T) {
        let key = self.default_key();
        self.add_under(key, batch);
    }

    /// Stores one policy's batch in that policy's store (independent mode). In lockstep mode only
    /// [`ALL_POLICIES`] is accepted, since there is a single store.
    ///
    /// ```
    /// use impala_replay::{MixInReplay, MixInReplayConfig, ReplayMode};
    /// let mut buffer = MixInReplay::new(MixInReplayConfig {
    ///     capacity: 2,
    ///     replay_ratio: 0.0,
    ///     replay_mode: ReplayMode::Independent,
    ///     seed: Some(0),
    /// })?;
    /// buffer.add_to_policy("attacker", vec![1])?;
    /// buffer.add_to_policy("defender", vec![2])?;
    /// let out = buffer.replay_policy("defender")?.ok_or("nothing new")?;
    /// assert_eq!(out.concat()?, vec![2]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn add_to_policy(&mut self, policy_id: &str, batch: T) -> Result<()> {
        self.check_policy_id(policy_id)?;
        self.add_under(policy_id, batch);
        Ok(())
    }

    /// The new batches of the default key ([`ALL_POLICIES`] in lockstep mode,
    /// [`DEFAULT_POLICY_ID`] in independent mode) mixed with replayed ones; `None` when the
    /// store is empty, or when nothing is new and `replay_ratio < 1`.
    ///
    /// RLlib's `replay()` defaults to `DEFAULT_POLICY_ID` in both modes and so raises in lockstep
    /// mode unless given `_ALL_POLICIES`; here it reads the key [`add`](MixInReplay::add) wrote.
    pub fn replay(&mut self) -> Option<Replay<T>> {
        let key = self.default_key();
        self.replay_from(key)
    }

    /// [`replay`](MixInReplay::replay) for one policy's store. In lockstep mode any id but
    /// [`ALL_POLICIES`] is an error (RLlib's `ValueError`). An id never added to gives `None`.
    pub fn replay_policy(&mut self, policy_id: &str) -> Result<Option<Replay<T>>> {
        self.check_policy_id(policy_id)?;
        Ok(self.replay_from(policy_id))
    }

    /// Slots per store.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Fraction of replayed batches in the output.
    pub fn replay_ratio(&self) -> f64 {
        self.replay_ratio
    }

    /// Replayed batches per new batch on average, `r / (1 - r)`; `None` for `r = 1` (RLlib's
    /// `replay_proportion` attribute of this buffer).
    pub fn replay_proportion(&self) -> Option<f64> {
        (self.replay_ratio < 1.0).then(|| self.replay_ratio / (1.0 - self.replay_ratio))
    }

    /// One store for all policies, or one per policy.
    pub fn replay_mode(&self) -> ReplayMode {
        self.replay_mode
    }

    /// Timesteps ([`ReplayBatch::count`]) added over the buffer's lifetime.
    pub fn num_added(&self) -> usize {
        self.num_added
    }

    /// The store under `policy_id`, if anything was added there.
    pub fn buffer(&self, policy_id: &str) -> Option<&SimpleReplayBuffer<T>> {
        self.stores.get(policy_id).map(|s| &s.buffer)
    }

    /// Batches added under `policy_id` and not yet returned by a replay.
    pub fn num_pending(&self, policy_id: &str) -> usize {
        self.stores.get(policy_id).map_or(0, |s| s.last_added.len())
    }

    /// The keys that have a store, in no particular order.
    pub fn policy_ids(&self) -> impl Iterator<Item = &str> {
        self.stores.keys().map(String::as_str)
    }

    fn default_key(&self) -> &'static str {
        match self.replay_mode {
            ReplayMode::Lockstep => ALL_POLICIES,
            ReplayMode::Independent => DEFAULT_POLICY_ID,
        }
    }

    fn check_policy_id(&self, policy_id: &str) -> Result<()> {
        if self.replay_mode == ReplayMode::Lockstep && policy_id != ALL_POLICIES {
            return Err(ReplayError::LockstepPolicyId { policy_id: policy_id.to_owned() });
        }
        Ok(())
    }

    fn add_under(&mut self, key: &str, batch: T) {
        self.num_added += batch.count();
        let capacity = self.capacity;
        let store = self.stores.entry(key.to_owned()).or_insert_with(|| PolicyStore {
            buffer: SimpleReplayBuffer::new(capacity),
            last_added: Vec::new(),
        });
        let batch = Arc::new(batch);
        store.buffer.add(Arc::clone(&batch));
        store.last_added.push(batch);
    }

    fn replay_from(&mut self, key: &str) -> Option<Replay<T>> {
        let store = self.stores.get_mut(key)?;
        if store.buffer.is_empty() || (store.last_added.is_empty() && self.replay_ratio < 1.0) {
            return None;
        }
        let mut parts = std::mem::take(&mut store.last_added);
        let num_new = parts.len();
        if self.replay_ratio == 0.0 {
            return Some(Replay { parts, num_new });
        }
        if self.replay_ratio == 1.0 {
            let parts = store.buffer.replay(&mut self.rng).into_iter().collect();
            return Some(Replay { parts, num_new: 0 });
        }
        // RLlib: `while random.random() < num_new * replay_proportion: replay_proportion -= 1`.
        let mut proportion = self.replay_ratio / (1.0 - self.replay_ratio);
        while self.rng.random::<f64>() < num_new as f64 * proportion {
            proportion -= 1.0;
            parts.extend(store.buffer.replay(&mut self.rng));
        }
        Some(Replay { parts, num_new })
    }
}
