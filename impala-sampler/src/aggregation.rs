//! Aggregation workers (`num_aggregation_workers > 0`): threads that run the
//! [`TrainBatchBuilder`] off the driver thread, as the seed's `AggregatorWorker` actors.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use impala_config::ImpalaConfig;
use impala_core::SampleBatch;

use crate::error::panic_message;
use crate::group::{deadline_after, receive_until};
use crate::{Result, SamplerError, TrainBatchBuilder};

/// One processed request: the train batches it completed, or why the worker failed.
struct Done {
    worker_index: usize,
    result: std::result::Result<Vec<SampleBatch>, String>,
}

struct Worker {
    input: Option<Sender<SampleBatch>>,
    thread: Option<JoinHandle<()>>,
    in_flight: usize,
    alive: bool,
}

/// `num_aggregation_workers` threads, each with its own [`TrainBatchBuilder`] (mix-in replay
/// and concatenation to `train_batch_size`). The driver [`submit`](Self::submit)s sampled
/// batches, at most `max_requests_in_flight_per_aggregator_worker` unprocessed per worker, and
/// collects finished train batches with [`ready`](Self::ready).
///
/// Where RLlib's `AsyncRequestsManager.call` silently drops a batch when every aggregator is
/// busy, `submit` hands it back so the caller can keep it and retry.
///
/// ```
/// use impala_config::ImpalaConfig;
/// use impala_core::{SampleBatch, Space};
/// use impala_sampler::AggregationWorkers;
///
/// let mut config = ImpalaConfig::default();
/// config.num_aggregation_workers = 1;
/// config.train_batch_size = 100;
/// config.timeout_s_aggregator_manager = 5.0; // wait for the worker in this example
/// let mut workers = AggregationWorkers::new(&config)?;
/// let fragment = SampleBatch::zeros(50, 1, &Space::Discrete(2), &Space::Discrete(2), 0);
/// for _ in 0..2 {
///     workers.submit(fragment.clone()).map_err(|_| "all aggregation workers are busy")?;
/// }
/// let train_batches = workers.ready()?;
/// assert_eq!(train_batches.len(), 1);
/// workers.shutdown()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct AggregationWorkers {
    workers: Vec<Worker>,
    output: Receiver<Done>,
    next: usize,
    max_in_flight: usize,
    timeout_s: f64,
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
    /// Starts `num_aggregation_workers` threads (at least one is required).
    pub fn new(config: &ImpalaConfig) -> Result<Self> {
        if config.num_aggregation_workers == 0 {
            return Err(SamplerError::InvalidConfig {
                field: "num_aggregation_workers",
                reason: "must be at least 1 to start aggregation workers".into(),
            });
        }
        if config.max_requests_in_flight_per_aggregator_worker == 0 {
            return Err(SamplerError::InvalidConfig {
                field: "max_requests_in_flight_per_aggregator_worker",
                reason: "must be at least 1".into(),
            });
        }
        let timeout = config.timeout_s_aggregator_manager;
        if !timeout.is_finite() || timeout < 0.0 {
            return Err(SamplerError::InvalidConfig {
                field: "timeout_s_aggregator_manager",
                reason: format!("must be finite and >= 0, got {timeout}"),
            });
        }
        let (done_tx, output) = crossbeam_channel::unbounded();
        let mut workers = Vec::with_capacity(config.num_aggregation_workers);
        for worker_index in 0..config.num_aggregation_workers {
            let seed = config.seed.map(|s| s.wrapping_add(worker_index as u64 + 1));
            let builder = TrainBatchBuilder::with_seed(config, seed)?;
            let (input, requests) = crossbeam_channel::unbounded();
            let done = done_tx.clone();
            let name = format!("aggregation-worker-{worker_index}");
            let thread = std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || run_aggregation_worker(worker_index, builder, &requests, &done))
                .map_err(|e| SamplerError::Spawn { thread: name, reason: e.to_string() })?;
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
            max_in_flight: config.max_requests_in_flight_per_aggregator_worker,
            timeout_s: timeout,
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

    /// Train batches finished so far, waiting at most `timeout_s_aggregator_manager` for every
    /// submitted batch to be processed. A failed worker is an error.
    pub fn ready(&mut self) -> Result<Vec<SampleBatch>> {
        let deadline = deadline_after(self.timeout_s);
        let mut batches = Vec::new();
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
                Ok(mut finished) => batches.append(&mut finished),
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
        Ok(batches)
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
        let mut first_error = None;
        for worker in &mut self.workers {
            worker.input = None;
        }
        for (i, worker) in self.workers.iter_mut().enumerate() {
            if let Some(thread) = worker.thread.take() {
                if let Err(payload) = thread.join() {
                    first_error.get_or_insert(SamplerError::ThreadPanicked {
                        thread: format!("aggregation-worker-{i}"),
                        reason: panic_message(payload.as_ref()),
                    });
                }
            }
        }
        first_error.map_or(Ok(()), Err)
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
    mut builder: TrainBatchBuilder,
    requests: &Receiver<SampleBatch>,
    done: &Sender<Done>,
) {
    for batch in requests.iter() {
        let result = match catch_unwind(AssertUnwindSafe(|| builder.add(batch))) {
            Ok(Ok(finished)) => Ok(finished),
            Ok(Err(e)) => Err(e.to_string()),
            Err(payload) => Err(panic_message(payload.as_ref())),
        };
        let failed = result.is_err();
        if done.send(Done { worker_index, result }).is_err() || failed {
            return;
        }
    }
}

/// Where train batches are built: on the calling thread ([`TrainBatchBuilder`], when
/// `num_aggregation_workers == 0`) or on [`AggregationWorkers`]. One API for both, so the
/// training loop has a single path (the seed's `process_experiences_directly` /
/// `process_experiences_tree_aggregation` switch). Batches that no worker can take yet wait here
/// and are resubmitted on the next call.
///
/// ```
/// use impala_config::ImpalaConfig;
/// use impala_core::{SampleBatch, Space};
/// use impala_sampler::TrainBatchAggregator;
///
/// let mut config = ImpalaConfig::default();
/// config.train_batch_size = 100;
/// for workers in [0, 2] {
///     config.num_aggregation_workers = workers;
///     config.timeout_s_aggregator_manager = 5.0;
///     let mut aggregator = TrainBatchAggregator::new(&config)?;
///     let mut built = Vec::new();
///     for _ in 0..4 {
///         aggregator.push(SampleBatch::zeros(50, 1, &Space::Discrete(2), &Space::Discrete(2), 0));
///         built.extend(aggregator.ready()?);
///     }
///     assert_eq!(built.iter().map(|b| b.env_steps()).sum::<usize>(), 200);
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct TrainBatchAggregator {
    inner: Aggregator,
}

#[derive(Debug)]
enum Aggregator {
    /// Mix-in replay and concatenation on the calling thread, applied to `pending` in `ready`.
    Local { builder: Box<TrainBatchBuilder>, pending: Vec<SampleBatch> },
    /// On aggregation worker threads; `pending` holds batches no worker could take yet.
    Workers { workers: AggregationWorkers, pending: VecDeque<SampleBatch> },
}

impl TrainBatchAggregator {
    /// Local when `num_aggregation_workers == 0`, else worker threads.
    pub fn new(config: &ImpalaConfig) -> Result<Self> {
        let inner = if config.num_aggregation_workers == 0 {
            Aggregator::Local {
                builder: Box::new(TrainBatchBuilder::new(config)?),
                pending: Vec::new(),
            }
        } else {
            Aggregator::Workers {
                workers: AggregationWorkers::new(config)?,
                pending: VecDeque::new(),
            }
        };
        Ok(TrainBatchAggregator { inner })
    }

    /// Queues one sampled batch; it is processed by the next [`ready`](Self::ready) call (or
    /// right away by a free worker).
    pub fn push(&mut self, batch: SampleBatch) {
        match &mut self.inner {
            Aggregator::Local { pending, .. } => pending.push(batch),
            Aggregator::Workers { workers, pending } => {
                pending.push_back(batch);
                submit_pending(workers, pending);
            }
        }
    }

    /// The train batches finished so far.
    pub fn ready(&mut self) -> Result<Vec<SampleBatch>> {
        match &mut self.inner {
            Aggregator::Local { builder, pending } => {
                let mut done = Vec::new();
                for batch in pending.drain(..) {
                    done.extend(builder.add(batch)?);
                }
                Ok(done)
            }
            Aggregator::Workers { workers, pending } => {
                submit_pending(workers, pending);
                let done = workers.ready()?;
                submit_pending(workers, pending);
                Ok(done)
            }
        }
    }

    /// Sampled batches waiting to be processed (not counting those inside workers).
    pub fn num_pending(&self) -> usize {
        match &self.inner {
            Aggregator::Local { pending, .. } => pending.len(),
            Aggregator::Workers { pending, .. } => pending.len(),
        }
    }

    /// Stops the worker threads, if any, surfacing a panic.
    pub fn shutdown(self) -> Result<()> {
        match self.inner {
            Aggregator::Local { .. } => Ok(()),
            Aggregator::Workers { workers, .. } => workers.shutdown(),
        }
    }
}

/// Submits waiting batches, oldest first, until the workers are full.
fn submit_pending(workers: &mut AggregationWorkers, pending: &mut VecDeque<SampleBatch>) {
    while let Some(batch) = pending.pop_front() {
        if let Err(batch) = workers.submit(batch) {
            pending.push_front(batch);
            break;
        }
    }
}
