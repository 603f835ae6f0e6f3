//! RLlib's `LearnerThread` and `MultiGPULearnerThread` (with its `_MultiGPULoaderThread`s) behind
//! one [`LearnerHandle`].
//!
//! Weights leave the learner only when asked for: copying every parameter off the device after
//! every SGD step costs megabytes of device-to-host traffic per step for a conv net, and the
//! driver broadcasts only every `broadcast_interval` steps anyway (RLlib's driver likewise reads
//! the weights only when it broadcasts: the thread just sets `weights_updated`).

use impala_profile::{span, Activity};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{
    bounded, unbounded, Receiver, RecvTimeoutError, Select, Sender, TryRecvError, TrySendError,
};
use impala_core::{SampleBatch, Weights};

use crate::batch::{BatchLoader, LoadedBatch};
use crate::minibatch::{Minibatch, MinibatchBuffer};
use crate::{Learner, LearnerError, LearnerStats, LearnerThreadSettings, Result};

/// RLlib's `WindowStat("size", 50)` and timer windows.
const STATS_WINDOW: usize = 50;

/// What the learner thread sends back per SGD step (RLlib's outqueue item).
#[derive(Debug, Clone, PartialEq)]
pub struct LearnerOutput {
    /// Env steps in the batch trained on (every pass counts, as in RLlib).
    pub env_steps: usize,
    /// Agent steps in the batch trained on.
    pub agent_steps: usize,
    /// The step's learner stats.
    pub stats: LearnerStats,
}

/// Queue and timing statistics under RLlib's names (`learner_queue`, `timing_breakdown`); the
/// sizes and times are over the last 50 steps.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LearnerQueueStats {
    /// Number of inqueue sizes in the window.
    pub size_count: usize,
    /// Mean inqueue size (train batches waiting) after each step.
    pub size_mean: f64,
    /// Standard deviation of the inqueue size.
    pub size_std: f64,
    /// Min, 25%, median, 75% and max inqueue size.
    pub size_quantiles: [f64; 5],
    /// Mean time the learner waited for its next batch (RLlib's `learner_dequeue_time_ms`).
    pub learner_dequeue_time_ms: f64,
    /// Mean time to split a batch and copy it to the towers' devices.
    pub learner_load_time_ms: f64,
    /// Mean time loader threads waited for a free tower stack.
    pub learner_load_wait_time_ms: f64,
    /// Mean time of one SGD step (forward, V-trace, backward, optimizer step).
    pub learner_grad_time_ms: f64,
    /// Times the learner waited `learner_queue_timeout` without data (stalls, not failures).
    pub num_learner_queue_timeouts: u64,
    /// SGD steps done.
    pub num_steps_trained: u64,
    /// Weight snapshots copied off the learner's device ([`LearnerHandle::request_weights`],
    /// [`LearnerHandle::current_weights`]); none unless asked for.
    pub num_weight_snapshots: u64,
}

impl LearnerQueueStats {
    /// The mean step times under RLlib's `timing_breakdown` names, in ms.
    pub fn timing_breakdown(&self) -> std::collections::BTreeMap<String, f64> {
        std::collections::BTreeMap::from([
            ("learner_dequeue_time_ms".to_string(), self.learner_dequeue_time_ms),
            ("learner_grad_time_ms".to_string(), self.learner_grad_time_ms),
            ("learner_load_time_ms".to_string(), self.learner_load_time_ms),
            ("learner_load_wait_time_ms".to_string(), self.learner_load_wait_time_ms),
        ])
    }
}

#[derive(Debug, Default)]
struct Window(VecDeque<f64>);

impl Window {
    fn push(&mut self, x: f64) {
        if self.0.len() == STATS_WINDOW {
            self.0.pop_front();
        }
        self.0.push_back(x);
    }

    fn mean(&self) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        self.0.iter().sum::<f64>() / self.0.len() as f64
    }
}

#[derive(Debug, Default)]
struct Metrics {
    size: Window,
    dequeue_ms: Window,
    load_ms: Window,
    load_wait_ms: Window,
    grad_ms: Window,
    timeouts: u64,
    steps: u64,
    snapshots: u64,
}

fn lock(m: &Mutex<Metrics>) -> MutexGuard<'_, Metrics> {
    // Metrics stay usable even if a thread panicked while holding the lock.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn millis(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

enum Control {
    Save(PathBuf, Sender<Result<()>>),
    /// [`LearnerHandle::request_weights`]: publish a snapshot once the version has moved.
    PublishWeights,
    /// [`LearnerHandle::current_weights`].
    Weights(Sender<Result<Arc<Weights>>>),
    /// [`LearnerHandle::set_weights`].
    SetWeights(Arc<Weights>, Sender<Result<()>>),
    Stop,
}

/// A loaded batch and the tower stack it occupies (multi-GPU path).
struct Slot {
    stack: Option<usize>,
    batch: LoadedBatch,
}

/// Where the learner thread gets its batches.
enum Source {
    /// `LearnerThread`: straight from the inqueue, loaded on the learner thread.
    Inqueue { inqueue: Receiver<SampleBatch>, loader: BatchLoader },
    /// `MultiGPULearnerThread`: tower stacks that loader threads filled.
    Stacks { ready: Receiver<Result<Slot>>, idle: Sender<usize> },
}

/// Why no batch came.
enum Interrupt {
    /// None is waiting now.
    Empty,
    /// The handle is gone (its queue closed).
    Stop,
    Failed(LearnerError),
}

/// What the learner thread shares with the handle.
struct Shared {
    outqueue: Sender<Result<LearnerOutput>>,
    /// The published snapshot, until [`LearnerHandle::take_new_weights`] takes it.
    new_weights: Arc<Mutex<Option<Arc<Weights>>>>,
    /// Set by the handle when it sends [`Control::PublishWeights`], cleared by the thread when
    /// it publishes: repeated requests before then send nothing.
    weights_requested: Arc<AtomicBool>,
    metrics: Arc<Mutex<Metrics>>,
    /// A receiver of the inqueue, only to read its length.
    inqueue_len: Receiver<SampleBatch>,
}

/// The learner thread's weight snapshots.
struct Snapshots {
    /// A request the thread could not serve yet (no SGD step since the last publication).
    pending: bool,
    /// The version of the last published snapshot (at first the learner's starting version:
    /// those weights are the ones runners start with, or get from `current_weights`).
    published: u64,
    /// The newest snapshot taken, reused while the version stays the same.
    last: Option<Arc<Weights>>,
}

impl Snapshots {
    /// The current weights: the last snapshot if the version has not moved, else a new one.
    fn current(&mut self, learner: &Learner, metrics: &Mutex<Metrics>) -> Result<Arc<Weights>> {
        if let Some(w) = self.last.as_ref().filter(|w| w.version == learner.version()) {
            return Ok(Arc::clone(w));
        }
        let w = {
            let _copying = span(Activity::WeightSnapshot);
            learner.weights()?
        };
        lock(metrics).snapshots += 1;
        self.last = Some(Arc::clone(&w));
        Ok(w)
    }

    /// Publishes a snapshot if one was requested and the version moved since the last one.
    fn publish_if_requested(&mut self, learner: &Learner, shared: &Shared) -> Result<()> {
        if !self.pending || learner.version() == self.published {
            return Ok(());
        }
        let w = self.current(learner, &shared.metrics)?;
        self.pending = false;
        self.published = w.version;
        // Cleared before the snapshot shows: a request made from now on asks for a later one.
        shared.weights_requested.store(false, Ordering::Release);
        *shared.new_weights.lock().unwrap_or_else(|e| e.into_inner()) = Some(w);
        Ok(())
    }
}

/// The learner thread (RLlib's `LearnerThread`, or with [`LearnerThreadSettings::multi_gpu_thread`]
/// its `MultiGPULearnerThread` with loader threads and tower stacks), seen from the driver.
///
/// - The inqueue is bounded (`learner_queue_size`); [`LearnerHandle::try_enqueue`] never blocks.
/// - Each train batch is trained on `num_sgd_iter` times through a [`MinibatchBuffer`]
///   (`minibatch_buffer_size` slots, or `num_multi_gpu_tower_stacks` on the multi-GPU path).
/// - Waiting longer than `learner_queue_timeout` for data counts a stall and keeps waiting.
/// - Weights are copied off the device only when asked for: [`LearnerHandle::request_weights`]
///   (then [`LearnerHandle::take_new_weights`]) for broadcasts, [`LearnerHandle::current_weights`]
///   for evaluation and checkpoints.
/// - A failure (non-finite loss or weights, libtorch error) stops the thread;
///   [`LearnerHandle::drain`] returns its cause. The learner's weights are the last good ones
///   (the failing step is not applied), and [`LearnerHandle::finish`] hands the learner back.
///
/// ```
/// use impala_core::{EnvSpec, SampleBatch, Space};
/// use impala_learner::{Learner, LearnerHandle, LearnerSettings, LearnerThreadSettings};
///
/// let spec = EnvSpec {
///     id: "Toy".into(),
///     observation_space: Space::continuous(vec![-1.0; 4], vec![1.0; 4])?,
///     action_space: Space::Discrete(2),
///     max_episode_steps: None,
/// };
/// let mut settings = LearnerSettings::default();
/// settings.model.fcnet_hiddens = vec![8];
/// let learner = Learner::new(&settings, &spec, tch::Device::Cpu)?;
/// let handle = LearnerHandle::spawn(&LearnerThreadSettings::default(), learner)?;
/// let batch = SampleBatch::zeros(4, 2, &spec.observation_space, &spec.action_space, 0);
/// assert!(handle.try_enqueue(batch).is_ok());
/// let outputs = handle.drain_wait(std::time::Duration::from_secs(60))?;
/// assert_eq!(outputs[0].env_steps, 8);
/// // Weights for evaluation or a checkpoint, copied between two SGD steps.
/// assert_eq!(handle.current_weights()?.version, 1);
/// let learner = handle.stop()?;
/// assert_eq!(learner.version(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[doc(alias = "LearnerThread")]
#[doc(alias = "MultiGPULearnerThread")]
#[derive(Debug)]
pub struct LearnerHandle {
    inqueue: Option<Sender<SampleBatch>>,
    outqueue: Receiver<Result<LearnerOutput>>,
    control: Sender<Control>,
    new_weights: Arc<Mutex<Option<Arc<Weights>>>>,
    weights_requested: Arc<AtomicBool>,
    metrics: Arc<Mutex<Metrics>>,
    /// The learner, once the thread let go of it (stopped, or after a failure).
    returned: Receiver<Learner>,
    /// Whether the thread still serves this learner.
    serving: Arc<AtomicBool>,
    /// The learner thread, shared by the handles of every learner it serves.
    thread: Arc<LearnerThread>,
    loader_threads: Vec<JoinHandle<()>>,
    stopped: bool,
}

/// The learner thread, joined when the last handle of a learner it served is gone (it ends as
/// soon as it serves none).
#[derive(Debug)]
struct LearnerThread(Mutex<Option<JoinHandle<()>>>);

impl LearnerThread {
    fn is_finished(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_none_or(JoinHandle::is_finished)
    }
}

impl Drop for LearnerThread {
    fn drop(&mut self) {
        let thread = self.0.get_mut().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

impl LearnerHandle {
    /// Starts the learner thread (and loader threads on the multi-GPU path) for `learner`.
    ///
    /// A learner with more than one tower needs the `MultiGPULearnerThread`: with
    /// `multi_gpu_thread == false` (RLlib's `simple_optimizer`) this is a
    /// [`LearnerError::Config`] (validation refuses such a config first).
    pub fn spawn(settings: &LearnerThreadSettings, learner: Learner) -> Result<Self> {
        let mut handles = Self::spawn_shared(vec![(settings.clone(), learner)])?;
        handles.pop().ok_or_else(|| LearnerError::ThreadDied {
            reason: "the learner thread was started for no learner".into(),
        })
    }

    /// Starts one learner thread serving every learner of `learners` (RLlib's multi-agent
    /// learner thread, which trains each policy's batch in turn): a handle per learner, in
    /// order, each with its own inqueue, minibatch buffer, outqueue and weights, as if it had
    /// the thread to itself. The thread steps the learners whose batches are ready in turn, so
    /// one whose batches come faster is not held back by the others' empty queues. It takes
    /// the largest `num_learner_threads` of them for libtorch; loader threads stay per learner.
    ///
    /// ```
    /// use impala_core::{EnvSpec, SampleBatch, Space};
    /// use impala_learner::{Learner, LearnerHandle, LearnerSettings, LearnerThreadSettings};
    ///
    /// let spec = EnvSpec {
    ///     id: "Toy".into(),
    ///     observation_space: Space::continuous(vec![-1.0; 4], vec![1.0; 4])?,
    ///     action_space: Space::Discrete(2),
    ///     max_episode_steps: None,
    /// };
    /// let mut settings = LearnerSettings::default();
    /// settings.model.fcnet_hiddens = vec![8];
    /// let thread = LearnerThreadSettings::default();
    /// let learners = vec![
    ///     (thread.clone(), Learner::new(&settings, &spec, tch::Device::Cpu)?),
    ///     (thread, Learner::new(&settings, &spec, tch::Device::Cpu)?),
    /// ];
    /// let [left, right] = <[LearnerHandle; 2]>::try_from(LearnerHandle::spawn_shared(learners)?)
    ///     .map_err(|_| "two handles")?;
    /// let batch = SampleBatch::zeros(4, 2, &spec.observation_space, &spec.action_space, 0);
    /// assert!(right.try_enqueue(batch).is_ok());
    /// assert_eq!(right.drain_wait(std::time::Duration::from_secs(60))?.len(), 1);
    /// // Only the learner that had a batch stepped.
    /// assert_eq!((left.current_weights()?.version, right.current_weights()?.version), (0, 1));
    /// assert_eq!(left.stop()?.version(), 0);
    /// assert_eq!(right.stop()?.version(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn spawn_shared(learners: Vec<(LearnerThreadSettings, Learner)>) -> Result<Vec<Self>> {
        let thread = Arc::new(LearnerThread(Mutex::new(None)));
        let threads = learners.iter().map(|(s, _)| s.num_learner_threads.get()).max().unwrap_or(1);
        // tch takes an i32; more threads than that do not exist.
        let threads = i32::try_from(threads).unwrap_or(i32::MAX);
        let mut lanes = Vec::with_capacity(learners.len());
        let mut handles = Vec::with_capacity(learners.len());
        for (settings, learner) in learners {
            let (lane, handle) = Lane::new(&settings, learner, &thread)?;
            lanes.push(lane);
            handles.push(handle);
        }
        let joined = std::thread::Builder::new()
            .name("impala-learner".into())
            .spawn(move || {
                tch::set_num_threads(threads);
                learner_loop(lanes);
            })
            .map_err(|e| LearnerError::ThreadDied {
                reason: format!("cannot spawn the learner thread: {e}"),
            })?;
        *thread.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(joined);
        Ok(handles)
    }

    /// Non-blocking put (RLlib's `inqueue.put` without blocking): gives the batch back when the
    /// queue is full or the learner is gone (then [`LearnerHandle::drain`] says why).
    #[allow(clippy::result_large_err, reason = "the caller keeps the batch it could not place")]
    pub fn try_enqueue(&self, batch: SampleBatch) -> std::result::Result<(), SampleBatch> {
        match &self.inqueue {
            Some(tx) => tx.try_send(batch).map_err(|e| match e {
                TrySendError::Full(b) | TrySendError::Disconnected(b) => b,
            }),
            None => Err(batch),
        }
    }

    /// Drains finished SGD steps (RLlib's outqueue). A failed learner surfaces its error here
    /// (once; later calls report the learner as gone).
    pub fn drain(&self) -> Result<Vec<LearnerOutput>> {
        let mut outputs = Vec::new();
        loop {
            match self.outqueue.try_recv() {
                Ok(Ok(o)) => outputs.push(o),
                Ok(Err(e)) => return Err(e),
                Err(TryRecvError::Empty) if self.is_running() || !outputs.is_empty() => {
                    return Ok(outputs)
                }
                Err(TryRecvError::Disconnected) if !outputs.is_empty() => return Ok(outputs),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => {
                    return Err(LearnerError::ThreadDied {
                        reason: "the learner thread is gone (it failed earlier or panicked)".into(),
                    })
                }
            }
        }
    }

    /// Like [`LearnerHandle::drain`], but first waits up to `timeout` for a step to finish
    /// (for a driver with nothing else to do, tests and benches; no busy waiting).
    pub fn drain_wait(&self, timeout: Duration) -> Result<Vec<LearnerOutput>> {
        match self.outqueue.recv_timeout(timeout) {
            Ok(Ok(first)) => {
                let mut outputs = vec![first];
                outputs.extend(self.drain()?);
                Ok(outputs)
            }
            Ok(Err(e)) => Err(e),
            Err(RecvTimeoutError::Timeout) => Ok(Vec::new()),
            Err(RecvTimeoutError::Disconnected) => self.drain(),
        }
    }

    /// Asks the learner thread for a CPU snapshot of its weights, for
    /// [`LearnerHandle::take_new_weights`]; never blocks. The thread publishes one after its
    /// current SGD step, or right away when it is waiting for data and has stepped since its
    /// last published snapshot; with no step since then it publishes after the next one.
    /// Asking again before the snapshot is published costs nothing.
    ///
    /// Nothing is copied off the device unless asked for (see
    /// [`LearnerQueueStats::num_weight_snapshots`]).
    pub fn request_weights(&self) {
        if !self.weights_requested.swap(true, Ordering::AcqRel) {
            // A gone thread cannot publish; drain says why.
            let _ = self.control.send(Control::PublishWeights);
        }
    }

    /// The snapshot [`LearnerHandle::request_weights`] made the thread publish, once (for
    /// broadcast); `None` until it is published. Its `version` is the learner's number of
    /// gradient updates.
    pub fn take_new_weights(&self) -> Option<Arc<Weights>> {
        self.new_weights.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// The learner's current weights, copied between two SGD steps (the call waits for the
    /// current step), for evaluation and checkpoints. Reuses the last snapshot when the
    /// learner has not stepped since; publishes nothing for
    /// [`LearnerHandle::take_new_weights`].
    pub fn current_weights(&self) -> Result<Arc<Weights>> {
        self.ask(Control::Weights)
    }

    /// Replaces the learner's weights between two SGD steps ([`Learner::set_weights`]); the
    /// next [`LearnerHandle::current_weights`] returns them.
    pub fn set_weights(&self, weights: Arc<Weights>) -> Result<()> {
        self.ask(|reply| Control::SetWeights(weights, reply))
    }

    /// Checkpoints the learner between two SGD steps (the thread pauses while it writes).
    pub fn save(&self, dir: &Path) -> Result<()> {
        self.ask(|reply| Control::Save(dir.to_path_buf(), reply))
    }

    /// Sends the thread a request and waits for its answer.
    fn ask<T>(&self, request: impl FnOnce(Sender<Result<T>>) -> Control) -> Result<T> {
        let (tx, rx) = bounded(1);
        let dead =
            || LearnerError::ThreadDied { reason: "the learner thread is not running".into() };
        self.control.send(request(tx)).map_err(|_| dead())?;
        rx.recv().map_err(|_| dead())?
    }

    /// Queue sizes, timings and stall counts (RLlib's `learner_queue` and `timing_breakdown`).
    pub fn queue_stats(&self) -> LearnerQueueStats {
        let m = lock(&self.metrics);
        let mut sizes: Vec<f64> = m.size.0.iter().copied().collect();
        sizes.sort_by(f64::total_cmp);
        let mean = m.size.mean();
        let std = if sizes.is_empty() {
            0.0
        } else {
            (sizes.iter().map(|s| (s - mean) * (s - mean)).sum::<f64>() / sizes.len() as f64).sqrt()
        };
        let quantile = |q: f64| {
            if sizes.is_empty() {
                0.0
            } else {
                sizes[((sizes.len() - 1) as f64 * q).round() as usize]
            }
        };
        LearnerQueueStats {
            size_count: sizes.len(),
            size_mean: mean,
            size_std: std,
            size_quantiles: [
                quantile(0.0),
                quantile(0.25),
                quantile(0.5),
                quantile(0.75),
                quantile(1.0),
            ],
            learner_dequeue_time_ms: m.dequeue_ms.mean(),
            learner_load_time_ms: m.load_ms.mean(),
            learner_load_wait_time_ms: m.load_wait_ms.mean(),
            learner_grad_time_ms: m.grad_ms.mean(),
            num_learner_queue_timeouts: m.timeouts,
            num_steps_trained: m.steps,
            num_weight_snapshots: m.snapshots,
        }
    }

    /// Stops serving the learner and returns it (for checkpointing), or the failure that
    /// stopped it if [`LearnerHandle::drain`] has not reported it yet (see
    /// [`LearnerHandle::finish`] to get the learner back in that case too).
    pub fn stop(self) -> Result<Learner> {
        let (learner, failure) = self.finish();
        failure?;
        learner.ok_or_else(|| LearnerError::ThreadDied {
            reason: "the learner thread panicked".into(),
        })
    }

    /// Stops serving the learner and hands it back whatever stopped it (`None` only when the
    /// thread panicked), with the failure that stopped it if [`LearnerHandle::drain`] has not
    /// reported it yet. After a failure (a non-finite loss or weights, a libtorch error) the
    /// learner holds its last good weights and optimizer state: the failing step was not
    /// applied, so it can still be saved. The thread ends once it serves no learner.
    pub fn finish(mut self) -> (Option<Learner>, Result<()>) {
        let returned = self.shutdown();
        let failure = self.outqueue.try_iter().find_map(std::result::Result::err);
        match (returned, failure) {
            (Ok(learner), None) => (Some(learner), Ok(())),
            (Ok(learner), Some(e)) => (Some(learner), Err(e)),
            (Err(e), failure) => (None, Err(failure.unwrap_or(e))),
        }
    }

    /// Whether the thread still serves the learner (it stops after the learner's failure,
    /// reported by [`LearnerHandle::drain`]).
    pub fn is_running(&self) -> bool {
        self.serving.load(Ordering::Acquire) && !self.thread.is_finished()
    }

    fn shutdown(&mut self) -> Result<Learner> {
        self.stopped = true;
        let _ = self.control.send(Control::Stop);
        self.inqueue = None;
        let returned = self
            .returned
            .recv()
            .map_err(|_| LearnerError::ThreadDied { reason: "the learner thread panicked".into() });
        for t in self.loader_threads.drain(..) {
            let _ = t.join();
        }
        returned
    }
}

impl Drop for LearnerHandle {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = self.shutdown();
        }
    }
}

/// One learner the thread serves, with what its handle talks to.
struct Lane {
    learner: Learner,
    source: Source,
    buffer: MinibatchBuffer<Slot>,
    control: Receiver<Control>,
    snapshots: Snapshots,
    shared: Shared,
    /// `learner_queue_timeout`: waiting this long for data counts a stall.
    timeout: Duration,
    /// Since when the lane has had no data (`None` while it has).
    waiting_since: Option<Instant>,
    serving: Arc<AtomicBool>,
    returned: Sender<Learner>,
}

/// What became of a lane's turn.
enum Turn {
    Stepped,
    /// No batch was ready.
    Idle,
    /// The lane ends: its handle stopped it, or it failed.
    End(Option<LearnerError>),
}

impl Lane {
    /// The lane for `learner` (with its loader threads on the multi-GPU path) and its handle.
    fn new(
        settings: &LearnerThreadSettings,
        learner: Learner,
        thread: &Arc<LearnerThread>,
    ) -> Result<(Lane, LearnerHandle)> {
        if learner.num_towers() > 1 && !settings.multi_gpu_thread {
            return Err(LearnerError::Config {
                reason: format!(
                    "the learner has {} towers but multi_gpu_thread is false \
                     (simple_optimizer): the single-device LearnerThread trains one tower",
                    learner.num_towers()
                ),
            });
        }
        let (in_tx, in_rx) = bounded::<SampleBatch>(settings.learner_queue_size.get());
        let (out_tx, out_rx) = unbounded();
        let (control_tx, control_rx) = unbounded();
        let (returned_tx, returned_rx) = bounded(1);
        let new_weights = Arc::new(Mutex::new(None));
        let weights_requested = Arc::new(AtomicBool::new(false));
        let metrics = Arc::new(Mutex::new(Metrics::default()));
        let serving = Arc::new(AtomicBool::new(true));
        let shared = Shared {
            outqueue: out_tx,
            new_weights: Arc::clone(&new_weights),
            weights_requested: Arc::clone(&weights_requested),
            metrics: Arc::clone(&metrics),
            inqueue_len: in_rx.clone(),
        };
        let passes = settings.num_sgd_iter.get();
        let mut loader_threads = Vec::new();
        let (source, buffer) = if settings.multi_gpu_thread {
            let stacks = settings.num_multi_gpu_tower_stacks.get();
            let (idle_tx, idle_rx) = bounded(stacks);
            let (ready_tx, ready_rx) = bounded(stacks);
            for i in 0..stacks {
                // The channel holds `stacks` items, so this cannot block or fail.
                let _ = idle_tx.send(i);
            }
            for i in 0..settings.num_gpu_loader_threads.get().min(stacks) {
                let (inqueue, idle, ready, loader) =
                    (in_rx.clone(), idle_rx.clone(), ready_tx.clone(), learner.loader());
                let metrics = Arc::clone(&metrics);
                let handle = std::thread::Builder::new()
                    .name(format!("impala-loader-{i}"))
                    .spawn(move || loader_loop(&inqueue, &idle, &ready, &loader, &metrics))
                    .map_err(|e| LearnerError::ThreadDied {
                        reason: format!("cannot spawn a loader thread: {e}"),
                    })?;
                loader_threads.push(handle);
            }
            // RLlib's ready_tower_stacks_buffer: one slot per stack, passes ramp up from 1.
            (
                Source::Stacks { ready: ready_rx, idle: idle_tx },
                MinibatchBuffer::new(stacks, passes, 1),
            )
        } else {
            let source = Source::Inqueue { inqueue: in_rx, loader: learner.loader() };
            (source, MinibatchBuffer::new(settings.minibatch_buffer_size.get(), passes, passes))
        };
        let snapshots = Snapshots { pending: false, published: learner.version(), last: None };
        let lane = Lane {
            learner,
            source,
            buffer,
            control: control_rx,
            snapshots,
            shared,
            timeout: settings.learner_queue_timeout,
            waiting_since: None,
            serving: Arc::clone(&serving),
            returned: returned_tx,
        };
        let handle = LearnerHandle {
            inqueue: Some(in_tx),
            outqueue: out_rx,
            control: control_tx,
            new_weights,
            weights_requested,
            metrics,
            returned: returned_rx,
            serving,
            thread: Arc::clone(thread),
            loader_threads,
            stopped: false,
        };
        Ok((lane, handle))
    }

    /// Serves the control messages waiting (checkpoints, weights); `Err` when the lane ends.
    fn serve_control(&mut self) -> std::result::Result<(), Option<LearnerError>> {
        loop {
            let msg = match self.control.try_recv() {
                Ok(msg) => Some(msg),
                Err(TryRecvError::Empty) => return Ok(()),
                Err(TryRecvError::Disconnected) => None,
            };
            match serve(msg, &mut self.learner, &mut self.snapshots, &self.shared) {
                Ok(()) => {}
                Err(Interrupt::Failed(e)) => return Err(Some(e)),
                Err(Interrupt::Stop | Interrupt::Empty) => return Err(None),
            }
        }
    }

    /// One SGD step if a minibatch is ready (a kept one, or a new batch).
    fn turn(&mut self) -> Turn {
        let Lane { learner, source, buffer, shared, .. } = self;
        let minibatch = match buffer.get(|| source.try_next(&shared.metrics)) {
            Ok(minibatch) => minibatch,
            Err(Interrupt::Empty) => {
                let since = *self.waiting_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= self.timeout {
                    lock(&self.shared.metrics).timeouts += 1;
                    self.waiting_since = Some(Instant::now());
                }
                return Turn::Idle;
            }
            Err(Interrupt::Stop) => return Turn::End(None),
            Err(Interrupt::Failed(e)) => return Turn::End(Some(e)),
        };
        let dequeue_ms = self.waiting_since.take().map_or(0.0, millis);
        let start = Instant::now();
        let timestep = learner.agent_steps_trained();
        let slot = minibatch.item();
        let (env_steps, agent_steps) = (slot.batch.env_steps, slot.batch.agent_steps);
        let result = learner.update_loaded(&slot.batch, timestep);
        if let (Minibatch::Released(Slot { stack: Some(i), .. }), Source::Stacks { idle, .. }) =
            (minibatch, &*source)
        {
            let _ = idle.send(i);
        }
        let stats = match result {
            Ok(stats) => stats,
            Err(e) => return Turn::End(Some(e)),
        };
        {
            let mut m = lock(&shared.metrics);
            m.dequeue_ms.push(dequeue_ms);
            m.grad_ms.push(millis(start));
            m.size.push(shared.inqueue_len.len() as f64);
            m.steps += 1;
        }
        // Published before the step's output, so a driver that drained it sees the snapshot.
        if let Err(e) = self.snapshots.publish_if_requested(learner, shared) {
            return Turn::End(Some(e));
        }
        match shared.outqueue.send(Ok(LearnerOutput { env_steps, agent_steps, stats })) {
            Ok(()) => Turn::Stepped,
            Err(_) => Turn::End(None),
        }
    }

    /// When waiting for data next counts a stall.
    fn deadline(&self) -> Instant {
        self.waiting_since.unwrap_or_else(Instant::now) + self.timeout
    }

    /// Hands the learner back to its handle, after the failure that ended the lane if any.
    fn end(self, failure: Option<LearnerError>) {
        if let Some(e) = failure {
            let _ = self.shared.outqueue.send(Err(e));
        }
        self.serving.store(false, Ordering::Release);
        let _ = self.returned.send(self.learner);
    }
}

impl Source {
    /// The next loaded batch if one is ready, without waiting.
    fn try_next(&self, metrics: &Mutex<Metrics>) -> std::result::Result<Slot, Interrupt> {
        match self {
            Source::Inqueue { inqueue, loader } => match inqueue.try_recv() {
                Ok(batch) => {
                    let start = Instant::now();
                    let loaded = loader.load(&batch).map_err(Interrupt::Failed)?;
                    lock(metrics).load_ms.push(millis(start));
                    Ok(Slot { stack: None, batch: loaded })
                }
                Err(TryRecvError::Empty) => Err(Interrupt::Empty),
                Err(TryRecvError::Disconnected) => Err(Interrupt::Stop),
            },
            Source::Stacks { ready, .. } => match ready.try_recv() {
                Ok(Ok(slot)) => Ok(slot),
                Ok(Err(e)) => Err(Interrupt::Failed(e)),
                Err(TryRecvError::Empty) => Err(Interrupt::Empty),
                Err(TryRecvError::Disconnected) => Err(Interrupt::Stop),
            },
        }
    }
}

/// Handles a control message between two SGD steps; `Err(Stop)` when the lane should end,
/// `Err(Failed)` when publishing a snapshot failed.
fn serve(
    msg: Option<Control>,
    learner: &mut Learner,
    snapshots: &mut Snapshots,
    shared: &Shared,
) -> std::result::Result<(), Interrupt> {
    match msg {
        Some(Control::Save(dir, reply)) => {
            let _ = reply.send(learner.save(&dir));
            Ok(())
        }
        Some(Control::PublishWeights) => {
            snapshots.pending = true;
            snapshots.publish_if_requested(learner, shared).map_err(Interrupt::Failed)
        }
        Some(Control::Weights(reply)) => {
            let _ = reply.send(snapshots.current(learner, &shared.metrics));
            Ok(())
        }
        Some(Control::SetWeights(weights, reply)) => {
            let set = learner.set_weights(&weights);
            if set.is_ok() {
                // The version stays, so the snapshot of the old weights must not be reused.
                snapshots.last = None;
            }
            let _ = reply.send(set);
            Ok(())
        }
        Some(Control::Stop) | None => Err(Interrupt::Stop),
    }
}

/// The learner thread: serves each lane's control messages, then gives the lanes with a
/// minibatch ready one SGD step each, in turn; when none has one, sleeps until a message or a
/// batch arrives or a lane's wait counts a stall. Ends when it serves no lane.
fn learner_loop(mut lanes: Vec<Lane>) {
    let mut next = 0;
    while !lanes.is_empty() {
        let mut i = 0;
        while i < lanes.len() {
            match lanes[i].serve_control() {
                Ok(()) => i += 1,
                Err(failure) => lanes.remove(i).end(failure),
            }
        }
        let mut stepped = false;
        for _ in 0..lanes.len() {
            next %= lanes.len();
            match lanes[next].turn() {
                Turn::Stepped => {
                    stepped = true;
                    next += 1;
                    break;
                }
                Turn::Idle => next += 1,
                Turn::End(failure) => {
                    lanes.remove(next).end(failure);
                    if lanes.is_empty() {
                        break;
                    }
                }
            }
        }
        if !stepped && !lanes.is_empty() {
            wait_for_work(&lanes);
        }
    }
}

/// Sleeps until a lane has a control message or a batch, or the earliest stall deadline.
fn wait_for_work(lanes: &[Lane]) {
    let _waiting = span(Activity::LearnerWait);
    let mut select = Select::new();
    for lane in lanes {
        select.recv(&lane.control);
        match &lane.source {
            Source::Inqueue { inqueue, .. } => select.recv(inqueue),
            Source::Stacks { ready, .. } => select.recv(ready),
        };
    }
    let deadline = lanes.iter().map(Lane::deadline).min().unwrap_or_else(Instant::now);
    let _ = select.ready_deadline(deadline);
}

/// RLlib's `_MultiGPULoaderThread`: batch from the inqueue -> free tower stack -> load -> ready.
fn loader_loop(
    inqueue: &Receiver<SampleBatch>,
    idle: &Receiver<usize>,
    ready: &Sender<Result<Slot>>,
    loader: &BatchLoader,
    metrics: &Mutex<Metrics>,
) {
    tch::set_num_threads(1);
    while let Ok(batch) = inqueue.recv() {
        let start = Instant::now();
        let Ok(stack) = idle.recv() else { return };
        lock(metrics).load_wait_ms.push(millis(start));
        let start = Instant::now();
        let loaded = loader.load(&batch).map(|batch| Slot { stack: Some(stack), batch });
        lock(metrics).load_ms.push(millis(start));
        if ready.send(loaded).is_err() {
            return;
        }
    }
}
