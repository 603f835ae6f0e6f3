//! The minibatch buffer, the learner thread's queues, stalls, failures, weight snapshots and
//! checkpoints.

use std::sync::Arc;
use std::time::{Duration, Instant};

use impala_core::{EnvSpec, SampleBatch, Space, Weights};
use impala_learner::{
    Learner, LearnerError, LearnerHandle, LearnerOutput, LearnerSettings, LearnerThreadSettings,
    Minibatch, MinibatchBuffer,
};
use tch::Device;

use crate::common::{nz, random_batch, settings, spec, TestResult};

/// Hands out `n` items from a buffer fed with A, B, C, ...; `*` marks a release.
fn sequence(size: usize, passes: usize, init: usize, n: usize) -> Vec<String> {
    let mut buf = MinibatchBuffer::new(size, passes, init);
    let mut next = b'A';
    (0..n)
        .map(|_| {
            let got = buf.get(|| {
                let item = (next as char).to_string();
                next += 1;
                Ok::<_, ()>(item)
            });
            match got {
                Ok(Minibatch::Kept(x)) => x.clone(),
                Ok(Minibatch::Released(x)) => format!("{x}*"),
                Err(()) => "error".into(),
            }
        })
        .collect()
}

#[test]
fn minibatch_buffer_reproduces_rllibs_sequences() {
    // rllib-impala-notes.md section 3.2.
    assert_eq!(sequence(1, 2, 2, 4), ["A", "A*", "B", "B*"]);
    assert_eq!(sequence(2, 2, 2, 8), ["A", "B", "A*", "B*", "C", "D", "C*", "D*"]);
    assert_eq!(sequence(1, 3, 1, 9), ["A*", "B", "B*", "C", "C", "C*", "D", "D", "D*"]);
}

#[test]
fn a_failed_fetch_leaves_the_buffer_as_it_was() {
    let mut buf = MinibatchBuffer::new(1, 2, 2);
    assert_eq!(buf.get(|| Err::<&str, _>("timeout")), Err("timeout"));
    assert_eq!(buf.get(|| Ok::<_, ()>("A")), Ok(Minibatch::Kept(&"A")));
    assert_eq!(buf.get(|| Err::<&str, _>(())), Ok(Minibatch::Released("A")));
}

/// What a learner thread is started from, as the program builds it from a config: the
/// learner's settings, the thread's options and the towers' devices (the `impala` crate's
/// tests check that configs plan these: `impala/tests/learner_settings.rs`).
#[derive(Debug, Clone)]
pub struct Setup {
    pub learner: LearnerSettings,
    pub thread: LearnerThreadSettings,
    pub devices: Vec<Device>,
}

impl Setup {
    /// Small, seeded settings on one CPU tower with the single-device `LearnerThread`: what a
    /// config without GPUs plans.
    pub fn new(hiddens: Vec<usize>) -> Self {
        Setup {
            learner: settings(hiddens),
            thread: LearnerThreadSettings::default(),
            devices: vec![Device::Cpu],
        }
    }

    /// Towers on `devices` with the `MultiGPULearnerThread`: what a config with GPUs plans
    /// (`num_gpus = 2` with `_fake_gpus` is two CPU devices).
    pub fn with_towers(mut self, devices: Vec<Device>) -> Self {
        self.devices = devices;
        self.thread.multi_gpu_thread = true;
        self
    }

    /// Builds the learner and starts its thread, as the program does.
    pub fn start(&self) -> Result<(EnvSpec, LearnerHandle), Box<dyn std::error::Error>> {
        let s = spec(4, Space::Discrete(2));
        let learner = Learner::with_devices(&self.learner, &s, &self.devices)?;
        Ok((s, LearnerHandle::spawn(&self.thread, learner)?))
    }
}

/// Polls [`LearnerHandle::take_new_weights`] until a snapshot arrives (or a deadline passed).
fn wait_for_weights(h: &LearnerHandle) -> Option<Arc<Weights>> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(w) = h.take_new_weights() {
            return Some(w);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Drains until `n` outputs arrived (or a deadline passed).
fn drain_n(h: &LearnerHandle, n: usize) -> Result<Vec<LearnerOutput>, LearnerError> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut out = Vec::new();
    while out.len() < n && Instant::now() < deadline {
        out.extend(h.drain_wait(Duration::from_millis(100))?);
    }
    Ok(out)
}

/// Queues 4 batches on the learner thread `c` plans (with `num_sgd_iter = 3`) and drains what it
/// trains until it waits for more: the SGD steps taken, each checked.
pub fn steps_over_four_batches(c: &Setup) -> Result<usize, Box<dyn std::error::Error>> {
    let mut c = c.clone();
    c.thread.num_sgd_iter = nz(3);
    c.thread.minibatch_buffer_size = nz(2);
    let (s, h) = c.start()?;
    for seed in 0..4 {
        assert!(h.try_enqueue(random_batch(&s, 5, 4, 0, seed)).is_ok());
    }
    let mut out = drain_n(&h, 1)?;
    loop {
        let more = h.drain_wait(Duration::from_millis(500))?;
        if more.is_empty() {
            break;
        }
        out.extend(more);
    }
    let steps = out.len();
    assert!(out.iter().all(|o| o.env_steps == 20 && o.agent_steps == 20));
    assert!(h.take_new_weights().is_none(), "no snapshot unless asked for");
    h.request_weights();
    assert!(wait_for_weights(&h).is_some_and(|w| w.version == steps as u64));
    assert!(h.take_new_weights().is_none());
    let stats = h.queue_stats();
    assert_eq!(stats.num_steps_trained, steps as u64);
    assert_eq!(stats.num_weight_snapshots, 1);
    assert!(stats.learner_grad_time_ms > 0.0 && stats.size_count > 0);
    let learner = h.stop()?;
    assert_eq!(learner.version(), steps as u64);
    Ok(steps)
}

#[test]
fn num_sgd_iter_passes_per_batch_on_both_threads() -> TestResult {
    // LearnerThread: A, B, A, B, A*, B*, C, D, C, D, C*, D* (12 steps).
    assert_eq!(steps_over_four_batches(&Setup::new(vec![8]))?, 12);
    // The multi-GPU buffer ramps passes up from 1 over its slots: with 2, A*, B, C, B*, C, D,
    // C*, D, then it waits for a fifth batch (8 steps), as RLlib's does; with 1 slot each batch
    // is passed over 3 times before the next is loaded, and the last waits for a fifth (9).
    for (stacks, steps) in [(2, 8), (1, 9)] {
        let mut c = Setup::new(vec![8]).with_towers(vec![Device::Cpu; 2]);
        c.thread.num_multi_gpu_tower_stacks = nz(stacks);
        assert_eq!(steps_over_four_batches(&c)?, steps, "{stacks} tower stacks");
    }
    Ok(())
}

#[test]
fn a_full_inqueue_gives_the_batch_back() -> TestResult {
    let mut c = Setup::new(vec![64, 64]);
    c.thread.learner_queue_size = nz(1);
    let (s, h) = c.start()?;
    let batch = random_batch(&s, 50, 20, 0, 0);
    let mut rejected = None;
    for _ in 0..10_000 {
        if let Err(b) = h.try_enqueue(batch.clone()) {
            rejected = Some(b);
            break;
        }
    }
    assert_eq!(rejected.as_ref(), Some(&batch));
    h.stop()?;
    Ok(())
}

#[test]
fn queue_timeouts_are_stalls_not_failures() -> TestResult {
    let mut c = Setup::new(vec![8]);
    c.thread.learner_queue_timeout = Duration::from_millis(10);
    let (s, h) = c.start()?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while h.queue_stats().num_learner_queue_timeouts < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(h.queue_stats().num_learner_queue_timeouts >= 3);
    assert!(h.drain()?.is_empty());
    assert!(h.try_enqueue(random_batch(&s, 5, 2, 0, 1)).is_ok());
    assert_eq!(drain_n(&h, 1)?.len(), 1);
    h.stop()?;
    Ok(())
}

/// A NaN reward stops the thread; the driver gets the cause; the weights stay the last good ones.
pub fn failure_reaches_the_driver(c: &Setup) -> TestResult {
    for vtrace in [true, false] {
        let mut c = c.clone();
        c.learner.loss.vtrace = vtrace;
        let (s, h) = c.start()?;
        assert!(h.try_enqueue(random_batch(&s, 5, 2, 0, 1)).is_ok());
        assert_eq!(drain_n(&h, 1)?.len(), 1);
        let mut bad: SampleBatch = random_batch(&s, 5, 2, 0, 2);
        bad.rewards[3] = f32::NAN;
        assert!(h.try_enqueue(bad).is_ok());
        let deadline = Instant::now() + Duration::from_secs(20);
        let err = loop {
            match h.drain_wait(Duration::from_millis(100)) {
                Err(e) => break Some(e),
                Ok(_) if Instant::now() > deadline => break None,
                Ok(_) => {}
            }
        };
        // V-trace rejects the NaN input; the A3C path sees a NaN loss.
        let expected = matches!(
            (vtrace, &err),
            (true, Some(LearnerError::VTrace(_)))
                | (false, Some(LearnerError::NonFiniteLoss { .. }))
        );
        assert!(expected, "vtrace={vtrace}: {err:?}");
        assert!(matches!(h.drain(), Err(LearnerError::ThreadDied { .. })));
        let learner = h.stop()?;
        assert_eq!(learner.version(), 1);
        assert!(learner.weights()?.tensors.iter().all(|t| t.data.iter().all(|x| x.is_finite())));
    }
    Ok(())
}

#[test]
fn a_nan_stops_the_learner_with_its_cause() -> TestResult {
    failure_reaches_the_driver(&Setup::new(vec![8]))
}

#[test]
fn an_undrained_failure_is_returned_by_stop() -> TestResult {
    // A queue that cannot fill up in this test: try_enqueue fails only once the thread is gone.
    let mut c = Setup::new(vec![8]);
    c.thread.learner_queue_size = nz(50_000);
    let (s, h) = c.start()?;
    let mut bad = random_batch(&s, 5, 2, 0, 2);
    bad.obs.write(0, &[f32::NAN]);
    assert!(h.try_enqueue(bad).is_ok());
    let deadline = Instant::now() + Duration::from_secs(20);
    while h.try_enqueue(random_batch(&s, 5, 2, 0, 2)).is_ok() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(h.stop().is_err());
    Ok(())
}

#[test]
fn save_while_running() -> TestResult {
    let c = Setup::new(vec![8]);
    let (s, h) = c.start()?;
    assert!(h.try_enqueue(random_batch(&s, 5, 2, 0, 1)).is_ok());
    assert_eq!(drain_n(&h, 1)?.len(), 1);
    let dir = tempfile::tempdir()?;
    h.save(dir.path())?;
    let mut restored = Learner::new(&c.learner, &s, Device::Cpu)?;
    restored.load(dir.path())?;
    assert_eq!(restored.version(), 1);
    let learner = h.stop()?;
    assert_eq!(learner.weights()?, restored.weights()?);
    Ok(())
}

#[test]
fn weights_are_snapshotted_only_when_asked() -> TestResult {
    let (s, h) = Setup::new(vec![8]).start()?;
    for seed in 0..3 {
        assert!(h.try_enqueue(random_batch(&s, 5, 2, 0, seed)).is_ok());
    }
    assert_eq!(drain_n(&h, 3)?.len(), 3);
    // Three SGD steps and no request: nothing left the learner.
    assert!(h.take_new_weights().is_none());
    assert_eq!(h.queue_stats().num_weight_snapshots, 0);

    // Idle with new steps: the request is served right away, repeats cost nothing.
    h.request_weights();
    h.request_weights();
    let published = wait_for_weights(&h).ok_or("no snapshot after request_weights")?;
    assert_eq!(published.version, 3);
    assert!(h.take_new_weights().is_none(), "taken once");
    assert_eq!(h.queue_stats().num_weight_snapshots, 1);

    // current_weights while idle: the trained version, the same snapshot (nothing copied).
    let current = h.current_weights()?;
    assert_eq!(current.version, 3);
    assert!(Arc::ptr_eq(&current, &published));

    // A request with no step since the last snapshot publishes nothing. Control messages are
    // served in order, so once current_weights returned the request has been seen.
    h.request_weights();
    assert_eq!(h.current_weights()?.version, 3);
    assert!(h.take_new_weights().is_none());
    assert_eq!(h.queue_stats().num_weight_snapshots, 1);

    // That request is served after the next step, before its output is sent.
    assert!(h.try_enqueue(random_batch(&s, 5, 2, 0, 3)).is_ok());
    assert_eq!(drain_n(&h, 1)?.len(), 1);
    let next = h.take_new_weights().ok_or("no snapshot after the next step")?;
    assert_eq!(next.version, 4);
    assert_eq!(h.queue_stats().num_weight_snapshots, 2);
    // Without a new request the step after that publishes nothing.
    assert!(h.try_enqueue(random_batch(&s, 5, 2, 0, 4)).is_ok());
    assert_eq!(drain_n(&h, 1)?.len(), 1);
    assert!(h.take_new_weights().is_none());
    assert_eq!(h.queue_stats().num_weight_snapshots, 2);
    let current = h.current_weights()?;
    assert_eq!(current.version, 5);
    let learner = h.stop()?;
    assert_eq!(learner.weights()?, current);
    Ok(())
}

/// Towers need the `MultiGPULearnerThread`: the single-device thread refuses them. A config
/// with fake GPUs plans it, and one that asks for the single-device thread with them
/// (`simple_optimizer`) is refused by validation (`impala/tests/learner_settings.rs`).
#[test]
fn towers_need_the_multi_gpu_thread() -> TestResult {
    let c = Setup::new(vec![4]).with_towers(vec![Device::Cpu; 2]);
    let (_, h) = c.start()?;
    h.stop()?;
    let mut thread = c.thread.clone();
    thread.multi_gpu_thread = false;
    let learner =
        Learner::with_devices(&c.learner, &spec(4, Space::Discrete(2)), &[Device::Cpu; 2])?;
    assert!(matches!(LearnerHandle::spawn(&thread, learner), Err(LearnerError::Config { .. })));
    Ok(())
}

#[test]
fn handle_and_policy_can_move_to_other_threads() {
    fn send<T: Send>() {}
    send::<LearnerHandle>();
    send::<Learner>();
    send::<impala_learner::TorchPolicy>();
}

#[test]
fn a_step_that_overflows_the_weights_is_undone() -> TestResult {
    // The gradient is finite, but Adam's first step moves every weight by about lr: past f32's
    // range. The learner must refuse the step and keep its weights and optimizer state.
    let s = spec(4, Space::Discrete(2));
    let c = settings(vec![8]);
    let mut huge = c.clone();
    huge.optimizer.lr = 1e39;
    huge.optimizer.grad_clip = None;
    let mut learner = Learner::new(&huge, &s, Device::Cpu)?;
    let before = learner.weights()?;
    let err = learner.update(&random_batch(&s, 5, 2, 0, 1), 0);
    assert!(
        matches!(&err, Err(LearnerError::NonFiniteWeights { tensor }) if !tensor.is_empty()),
        "{err:?}"
    );
    assert!(err.is_err_and(|e| e.to_string().contains("non-finite")));
    assert_eq!(learner.version(), 0);
    assert_eq!(learner.weights()?, before);
    // The state is the untouched one: a checkpoint of it loads (finite) into a fresh learner,
    // whose first sane step matches a learner that never saw the overflow.
    let dir = tempfile::tempdir()?;
    learner.save(dir.path())?;
    let mut loaded = Learner::new(&c, &s, Device::Cpu)?;
    loaded.load(dir.path())?;
    let mut fresh = Learner::new(&c, &s, Device::Cpu)?;
    let batch = random_batch(&s, 5, 2, 0, 2);
    loaded.update(&batch, 0)?;
    fresh.update(&batch, 0)?;
    assert_eq!(loaded.weights()?, fresh.weights()?);
    Ok(())
}

#[test]
fn a_dead_learner_thread_hands_back_its_last_good_learner() -> TestResult {
    // lr = 1e30 without clipping: the weights blow up to ~1e30 in a step, then the loss is
    // NaN or the next step overflows; either way the thread dies.
    let mut c = Setup::new(vec![8]);
    c.learner.optimizer.lr = 1e30;
    c.learner.optimizer.grad_clip = None;
    let (s, h) = c.start()?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seed = 0;
    let err = loop {
        if Instant::now() > deadline {
            return Err("the learner did not die".into());
        }
        seed += 1;
        let _ = h.try_enqueue(random_batch(&s, 5, 2, 0, seed));
        if let Err(e) = h.drain_wait(Duration::from_millis(50)) {
            break e;
        }
    };
    assert!(
        matches!(err, LearnerError::NonFiniteLoss { .. } | LearnerError::NonFiniteWeights { .. }),
        "{err:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while h.is_running() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(!h.is_running());
    let (learner, failure) = h.finish();
    assert!(failure.is_ok(), "the failure was drained already: {failure:?}");
    let learner = learner.ok_or("no learner back")?;
    let weights = learner.weights()?;
    assert!(weights.tensors.iter().all(|t| t.data.iter().all(|x| x.is_finite())));
    // Its last good state saves and loads.
    let dir = tempfile::tempdir()?;
    learner.save(dir.path())?;
    let mut restored = Learner::new(&c.learner, &s, Device::Cpu)?;
    restored.load(dir.path())?;
    assert_eq!(restored.weights()?, weights);
    Ok(())
}

#[test]
fn one_thread_serves_several_learners_each_with_its_own_batches() -> TestResult {
    let c = Setup::new(vec![8]);
    let s = spec(4, Space::Discrete(2));
    let mut learners = Vec::new();
    for _ in 0..3 {
        learners.push((c.thread.clone(), Learner::new(&c.learner, &s, Device::Cpu)?));
    }
    let [first, middle, last] =
        <[LearnerHandle; 3]>::try_from(LearnerHandle::spawn_shared(learners)?)
            .map_err(|_| "three handles")?;
    // Batches for the first and the last only: the middle one never steps.
    for seed in 0..3 {
        assert!(first.try_enqueue(random_batch(&s, 5, 2, 0, seed)).is_ok());
        assert!(last.try_enqueue(random_batch(&s, 5, 2, 0, seed + 10)).is_ok());
    }
    assert_eq!((drain_n(&first, 3)?.len(), drain_n(&last, 3)?.len()), (3, 3));
    let versions = |h: &LearnerHandle| h.current_weights().map(|w| w.version);
    assert_eq!((versions(&first)?, versions(&middle)?, versions(&last)?), (3, 0, 3));
    assert!(middle.drain()?.is_empty());

    // A failing batch stops only its learner; the others go on being served.
    let mut bad = random_batch(&s, 5, 2, 0, 99);
    bad.rewards[3] = f32::NAN;
    assert!(first.try_enqueue(bad).is_ok());
    let deadline = Instant::now() + Duration::from_secs(20);
    while first.drain().is_ok() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(!first.is_running() && middle.is_running() && last.is_running());
    assert!(last.try_enqueue(random_batch(&s, 5, 2, 0, 20)).is_ok());
    assert_eq!(drain_n(&last, 1)?.len(), 1);

    // Each stops on its own, handing back its learner; the thread ends with the last.
    assert_eq!(first.finish().0.ok_or("no learner back")?.version(), 3);
    assert_eq!(middle.stop()?.version(), 0);
    assert!(last.try_enqueue(random_batch(&s, 5, 2, 0, 21)).is_ok());
    assert_eq!(drain_n(&last, 1)?.len(), 1);
    assert_eq!(last.stop()?.version(), 5);
    Ok(())
}
