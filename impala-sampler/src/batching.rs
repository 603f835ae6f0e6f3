//! The one batching stage between the env runners and the learner queue: mix-in replay
//! (on the driver, or on aggregation workers) followed by concatenation into train batches
//! (always here, once): RLlib's `local_mixin_buffer` add/replay and
//! `concatenate_batches_and_pre_queue`.

use impala_profile::{span, Activity};
use std::collections::VecDeque;
use std::sync::Arc;

use impala_core::SampleBatch;
use impala_replay::{MixInReplay, MixInReplayConfig};

use crate::{AggregationWorkers, BatchingSettings, Result};

/// Where mix-in replay runs.
#[derive(Debug)]
enum MixIn {
    /// On the calling thread (`process_experiences_directly`).
    Here(Box<MixInReplay<SampleBatch>>),
    /// On aggregation workers (`process_experiences_tree_aggregation`); `waiting` holds sampled
    /// batches no worker could take yet, oldest first.
    Workers { workers: AggregationWorkers, waiting: VecDeque<SampleBatch> },
}

/// The mix-in replay buffer of `settings` with replay seed `seed`.
pub(crate) fn mixin_buffer(
    settings: &BatchingSettings,
    seed: Option<u64>,
) -> Result<MixInReplay<SampleBatch>> {
    Ok(MixInReplay::new(MixInReplayConfig::for_impala(
        settings.replay_proportion,
        settings.replay_buffer_num_slots,
        seed,
    )?)?)
}

/// Turns sampled batches into train batches, as IMPALA's driver does: every batch goes through
/// the mix-in replay buffer (`capacity = replay_buffer_num_slots`, or 1 when that is 0;
/// `replay_ratio = p / (1 + p)` from `replay_proportion`), on this thread or on
/// `num_aggregation_workers` [`AggregationWorkers`]; the replay output is appended to the batch
/// being built, and once that holds at least `train_batch_size` env steps it is concatenated
/// into one train batch (which can be larger than `train_batch_size`, as in RLlib).
///
/// ```
/// use std::num::NonZeroUsize;
/// use impala_core::{SampleBatch, Space};
/// use impala_sampler::{BatchingSettings, TrainBatchBuilder};
///
/// let settings = BatchingSettings {
///     train_batch_size: NonZeroUsize::new(100).ok_or("zero")?,
///     ..BatchingSettings::default()
/// };
/// let mut builder = TrainBatchBuilder::new(&settings)?;
/// let fragment = SampleBatch::zeros(50, 1, &Space::Discrete(2), &Space::Discrete(2), 0);
/// assert!(builder.add(fragment.clone())?.is_empty()); // 50 steps: still building
/// let done = builder.add(fragment)?;
/// assert_eq!(done.len(), 1);
/// assert_eq!(done[0].env_steps(), 100);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[doc(alias = "concatenate_batches_and_pre_queue")]
#[derive(Debug)]
pub struct TrainBatchBuilder {
    mixin: MixIn,
    train_batch_size: usize,
    batch_being_built: Vec<Arc<SampleBatch>>,
    steps_being_built: usize,
    num_added: usize,
}

impl TrainBatchBuilder {
    /// A builder for `settings`, with aggregation worker threads when
    /// `num_aggregation_workers > 0`.
    pub fn new(settings: &BatchingSettings) -> Result<Self> {
        let mixin = if settings.num_aggregation_workers > 0 {
            MixIn::Workers { workers: AggregationWorkers::new(settings)?, waiting: VecDeque::new() }
        } else {
            MixIn::Here(Box::new(mixin_buffer(settings, settings.seed)?))
        };
        Ok(TrainBatchBuilder {
            mixin,
            train_batch_size: settings.train_batch_size.get(),
            batch_being_built: Vec::new(),
            steps_being_built: 0,
            num_added: 0,
        })
    }

    /// Adds one sampled batch and returns the train batches finished now: with replay on this
    /// thread, those this batch completed; with aggregation workers the batch is handed to a
    /// worker (or waits for one) and its output comes from [`ready`](Self::ready).
    pub fn add(&mut self, batch: SampleBatch) -> Result<Vec<SampleBatch>> {
        let _building = span(Activity::BatchBuild);
        self.num_added += batch.env_steps();
        let mut done = Vec::new();
        match &mut self.mixin {
            MixIn::Here(buffer) => {
                buffer.add(batch);
                if let Some(replay) = buffer.replay() {
                    let parts = replay.into_parts();
                    self.append(parts, &mut done)?;
                }
            }
            MixIn::Workers { workers, waiting } => {
                waiting.push_back(batch);
                submit_waiting(workers, waiting);
            }
        }
        Ok(done)
    }

    /// The train batches finished from aggregation workers' output, waiting at most
    /// `aggregator_timeout` for the batches they hold; batches that waited for a free worker
    /// are handed over. Always empty with replay on this thread (see [`add`](Self::add)).
    pub fn ready(&mut self) -> Result<Vec<SampleBatch>> {
        let mut done = Vec::new();
        let MixIn::Workers { workers, waiting } = &mut self.mixin else { return Ok(done) };
        submit_waiting(workers, waiting);
        let outputs = workers.ready()?;
        submit_waiting(workers, waiting);
        for parts in outputs {
            self.append(parts, &mut done)?;
        }
        Ok(done)
    }

    /// Appends replay output to the batch being built; concatenates it once it is full.
    fn append(&mut self, parts: Vec<Arc<SampleBatch>>, done: &mut Vec<SampleBatch>) -> Result<()> {
        let _building = span(Activity::BatchBuild);
        for part in parts {
            self.steps_being_built += part.env_steps();
            self.batch_being_built.push(part);
        }
        if self.steps_being_built >= self.train_batch_size {
            // The parts are shared with the replay buffer: concatenate them in place. A batch
            // that does not concatenate is dropped with its error, not retried forever.
            let parts = std::mem::take(&mut self.batch_being_built);
            self.steps_being_built = 0;
            done.push(SampleBatch::concat(&parts)?);
        }
        Ok(())
    }

    /// Env steps waiting in the batch being built.
    pub fn num_steps_being_built(&self) -> usize {
        self.steps_being_built
    }

    /// Env steps added over the builder's lifetime (new batches only, not replays).
    pub fn num_added(&self) -> usize {
        self.num_added
    }

    /// Sampled batches waiting for a free aggregation worker (0 without workers).
    pub fn num_waiting(&self) -> usize {
        match &self.mixin {
            MixIn::Here(_) => 0,
            MixIn::Workers { waiting, .. } => waiting.len(),
        }
    }

    /// Stops the aggregation workers, if any, surfacing a panic that escaped one.
    pub fn shutdown(self) -> Result<()> {
        match self.mixin {
            MixIn::Here(_) => Ok(()),
            MixIn::Workers { workers, .. } => workers.shutdown(),
        }
    }
}

/// Hands waiting batches to the workers, oldest first, until they are full.
fn submit_waiting(workers: &mut AggregationWorkers, waiting: &mut VecDeque<SampleBatch>) {
    while let Some(batch) = waiting.pop_front() {
        if let Err(batch) = workers.submit(batch) {
            waiting.push_front(batch);
            break;
        }
    }
}
