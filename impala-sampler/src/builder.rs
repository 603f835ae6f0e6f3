//! Mix-in replay and concatenation into train batches: the seed's `local_mixin_buffer`
//! add/replay followed by `concatenate_batches_and_pre_queue`.

use std::sync::Arc;

use impala_config::ImpalaConfig;
use impala_core::SampleBatch;
use impala_replay::{MixInReplay, MixInReplayConfig};

use crate::{Result, SamplerError};

/// Turns sampled batches into train batches, as IMPALA's driver does (and each aggregation
/// worker, see [`AggregationWorkers`](crate::AggregationWorkers)): every batch goes through the
/// mix-in replay buffer (`capacity = replay_buffer_num_slots`, or 1 when that is 0;
/// `replay_ratio = p / (1 + p)` from `replay_proportion`), and the buffer's output is appended
/// to the batch being built; once that holds at least `train_batch_size` env steps it is
/// concatenated into one train batch (which can be larger than `train_batch_size`, as in RLlib).
///
/// The train batch size is `train_batch_size_per_learner` when set, else `train_batch_size`.
///
/// ```
/// use impala_config::ImpalaConfig;
/// use impala_core::{SampleBatch, Space};
/// use impala_sampler::TrainBatchBuilder;
///
/// let mut config = ImpalaConfig::default();
/// config.train_batch_size = 100;
/// let mut builder = TrainBatchBuilder::new(&config)?;
/// let fragment = SampleBatch::zeros(50, 1, &Space::Discrete(2), &Space::Discrete(2), 0);
/// assert!(builder.add(fragment.clone())?.is_empty()); // 50 steps: still building
/// let done = builder.add(fragment)?;
/// assert_eq!(done.len(), 1);
/// assert_eq!(done[0].env_steps(), 100);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct TrainBatchBuilder {
    mixin: MixInReplay<SampleBatch>,
    train_batch_size: usize,
    batch_being_built: Vec<Arc<SampleBatch>>,
    steps_being_built: usize,
}

impl TrainBatchBuilder {
    /// A builder for `config` (replay settings, train batch size, `seed`).
    pub fn new(config: &ImpalaConfig) -> Result<Self> {
        Self::with_seed(config, config.seed)
    }

    /// A builder whose replay RNG uses `seed` (aggregation workers offset the config's seed).
    pub(crate) fn with_seed(config: &ImpalaConfig, seed: Option<u64>) -> Result<Self> {
        let train_batch_size =
            config.train_batch_size_per_learner.unwrap_or(config.train_batch_size);
        if train_batch_size == 0 {
            return Err(SamplerError::InvalidConfig {
                field: "train_batch_size",
                reason: "must be at least 1".into(),
            });
        }
        let mixin = MixInReplay::new(MixInReplayConfig::for_impala(
            config.replay_proportion,
            config.replay_buffer_num_slots,
            seed,
        )?)?;
        Ok(TrainBatchBuilder {
            mixin,
            train_batch_size,
            batch_being_built: Vec::new(),
            steps_being_built: 0,
        })
    }

    /// Adds one sampled batch; returns the train batches it completed (usually none or one).
    pub fn add(&mut self, batch: SampleBatch) -> Result<Vec<SampleBatch>> {
        self.mixin.add(batch);
        let mut done = Vec::new();
        if let Some(replay) = self.mixin.replay() {
            for part in replay.into_parts() {
                self.steps_being_built += part.env_steps();
                self.batch_being_built.push(part);
            }
            if self.steps_being_built >= self.train_batch_size {
                // The parts are shared with the replay buffer: concatenate them in place.
                let train_batch = SampleBatch::concat(&self.batch_being_built)?;
                self.batch_being_built.clear();
                self.steps_being_built = 0;
                done.push(train_batch);
            }
        }
        Ok(done)
    }

    /// Env steps waiting in the batch being built.
    pub fn num_steps_being_built(&self) -> usize {
        self.steps_being_built
    }

    /// Env steps added over the builder's lifetime (new batches only, not replays).
    pub fn num_added(&self) -> usize {
        self.mixin.num_added()
    }
}
