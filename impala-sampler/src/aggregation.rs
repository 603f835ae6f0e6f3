//! Aggregation workers (`num_aggregation_workers > 0`): threads that run the mix-in replay
//! off the driver thread, as RLlib's `AggregatorWorker` actors. Concatenation into train
//! batches stays in [`TrainBatchBuilder`](crate::TrainBatchBuilder), once for all workers.

use impala_profile::{span, Activity};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use impala_core::SampleBatch;
use impala_replay::MixInReplay;

use crate::batching::mixin_buffer;
use crate::error::panic_message;
use crate::threads::{deadline_after, receive_until};
use crate::{BatchingSettings, Result, SamplerError};

/// Replay output: the new batch and any replayed ones, shared with the worker's buffer.
pub type ReplayParts = Vec<Arc<SampleBatch>>;

/// One processed request: the replay output, or why the worker failed.
struct Done {
    worker_index: usize,
    result: std::result::Result<ReplayParts, String>,
}

struct Worker {
    input: Option<Sender<SampleBatch>>,
    thread: Option<JoinHandle<()>>,
    in_flight: usize,
    alive: bool,
}

/// `num_aggregation_workers` threads, each with its own mix-in replay buffer (RLlib's
/// `AggregatorWorker.process_episodes`: add the batch, return the buffer's replay). The driver
/// [`submit`](Self::submit)s sampled batches, at most
/// `max_requests_in_flight_per_aggregator_worker` unprocessed per worker, and collects the
/// replay output with [`ready`](Self::ready).
///
/// Where RLlib's `AsyncRequestsManager.call` silently drops a batch when every aggregator is
/// busy, `submit` hands it back so the caller can keep it and retry.
///
/// ```
/// use std::time::Duration;
/// use impala_core::{SampleBatch, Space};
/// use impala_sampler::{AggregationWorkers, BatchingSettings};
///
/// let settings = BatchingSettings {
///     num_aggregation_workers: 1,
///     aggregator_timeout: Some(Duration::from_secs(5)), // wait for the worker in this example
///     ..BatchingSettings::default()
/// };
/// let mut workers = AggregationWorkers::new(&settings)?;
/// let fragment = SampleBatch::zeros(50, 1, &Space::Discrete(2), &Space::Discrete(2), 0);
/// workers.submit(fragment).map_err(|_| "all aggregation workers are busy")?;
/// let outputs = workers.ready()?;
/// assert_eq!(outputs.len(), 1);
/// assert_eq!(outputs[0][0].env_steps(), 50); // no replay: the batch itself
/// workers.shutdown()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[doc(alias = "AggregatorWorker")]
pub struct AggregationWorkers {
    workers: Vec<Worker>,
    output: Receiver<Done>,
    next: usize,
    max_in_flight: usize,
    timeout: Option<Duration>,
    shut_down: bool,
}

impl std::fmt::Debug for AggregationWorkers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AggregationWorkers")
            .field("num_workers", &self.workers.len())
            .field("in_flight", &self.num_in_flight())
            .finish_non_exhaustive()
    }
}

impl AggregationWorkers {
    /// Starts `num_aggregation_workers` threads (at least one is required); worker `i`'s replay
    /// RNG is seeded with `seed + i + 1`.
    pub fn new(settings: &BatchingSettings) -> Result<Self> {
        if settings.num_aggregation_workers == 0 {
            return Err(SamplerError::InvalidConfig {
                field: "num_aggregation_workers",
                reason: "must be at least 1 to start aggregation workers".into(),
            });
        }
        let (done_tx, output) = crossbeam_channel::unbounded();
        let mut workers = Vec::with_capacity(settings.num_aggregation_workers);
        for worker_index in 0..settings.num_aggregation_workers {
            let seed = settings.seed.map(|s| s.wrapping_add(worker_index as u64 + 1));
            let buffer = mixin_buffer(settings, seed)?;
            let (input, requests) = crossbeam_channel::unbounded();
            let done = done_tx.clone();
            let thread =
                crate::threads::spawn(format!("aggregation-worker-{worker_index}"), move || {
                    run_aggregation_worker(worker_index, buffer, &requests, &done)
                })?;
            workers.push(Worker {
                input: Some(input),
                thread: Some(thread),
                in_flight: 0,
                alive: true,
            });
        }
        Ok(AggregationWorkers {
            workers,
            output,
            next: 0,
            max_in_flight: settings.max_requests_in_flight_per_aggregator_worker.get(),
            timeout: settings.aggregator_timeout,
            shut_down: false,
        })
    }

    /// Hands `batch` to the next worker (round robin) below its in-flight cap; gives the batch
    /// back when every worker is at its cap.
    #[allow(
        clippy::result_large_err,
        reason = "the batch is handed back by value, as crossbeam's try_send does"
    )]
    pub fn submit(&mut self, mut batch: SampleBatch) -> std::result::Result<(), SampleBatch> {
        let n = self.workers.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            let worker = &mut self.workers[i];
            if !worker.alive || worker.in_flight >= self.max_in_flight {
                continue;
            }
            if let Some(input) = &worker.input {
                // The worker ends only after reporting a failure, which `ready` surfaces.
                match input.send(batch) {
                    Ok(()) => {
                        worker.in_flight += 1;
                        self.next = (i + 1) % n;
                        return Ok(());
                    }
                    Err(returned) => batch = returned.into_inner(),
                }
            }
        }
        Err(batch)
    }

    /// Replay outputs finished so far, in the order the workers finished them, waiting at most
    /// `aggregator_timeout` for every submitted batch. A failed worker is an error.
    pub fn ready(&mut self) -> Result<Vec<ReplayParts>> {
        let deadline = deadline_after(self.timeout);
        let mut outputs = Vec::new();
        loop {
            let done = match self.output.try_recv() {
                Ok(done) => done,
                Err(TryRecvError::Empty) => {
                    if self.num_in_flight() == 0 {
                        break;
                    }
                    match receive_until(&self.output, deadline) {
                        Some(done) => done,
                        None => break,
                    }
                }
                Err(TryRecvError::Disconnected) => break,
            };
            let worker = &mut self.workers[done.worker_index];
            worker.in_flight = worker.in_flight.saturating_sub(1);
            match done.result {
                Ok(parts) => {
                    if !parts.is_empty() {
                        outputs.push(parts);
                    }
                }
                Err(reason) => {
                    worker.alive = false;
                    worker.in_flight = 0;
                    return Err(SamplerError::AggregationWorkerFailed {
                        worker_index: done.worker_index,
                        reason,
                    });
                }
            }
        }
        Ok(outputs)
    }

    /// Batches submitted and not yet processed, over all workers.
    pub fn num_in_flight(&self) -> usize {
        self.workers.iter().map(|w| w.in_flight).sum()
    }

    /// Stops and joins every worker; a panic that escaped a worker is an error.
    pub fn shutdown(mut self) -> Result<()> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Result<()> {
        if self.shut_down {
            return Ok(());
        }
        self.shut_down = true;
        for worker in &mut self.workers {
            worker.input = None;
        }
        crate::threads::join_all(self.workers.iter_mut().filter_map(|w| w.thread.take()))
    }
}

impl Drop for AggregationWorkers {
    fn drop(&mut self) {
        if let Err(e) = self.stop_and_join() {
            tracing::error!(error = %e, "aggregation workers shut down with an error");
        }
    }
}

/// A worker: one [`Done`] per submitted batch until the input closes or a batch fails.
fn run_aggregation_worker(
    worker_index: usize,
    mut buffer: MixInReplay<SampleBatch>,
    requests: &Receiver<SampleBatch>,
    done: &Sender<Done>,
) {
    for batch in requests.iter() {
        let result = catch_unwind(AssertUnwindSafe(|| {
            let _building = span(Activity::BatchBuild);
            buffer.add(batch);
            buffer.replay().map(|r| r.into_parts()).unwrap_or_default()
        }))
        .map_err(|payload| panic_message(payload.as_ref()));
        let failed = result.is_err();
        if done.send(Done { worker_index, result }).is_err() || failed {
            return;
        }
    }
}
