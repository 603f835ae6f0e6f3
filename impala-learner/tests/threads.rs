//! The minibatch buffer, the learner thread's queues, stalls, failures and checkpoints.

use std::time::{Duration, Instant};

use impala_config::ImpalaConfig;
use impala_core::{EnvSpec, SampleBatch, Space};
use impala_learner::{
    Learner, LearnerError, LearnerHandle, LearnerOutput, Minibatch, MinibatchBuffer,
};
use tch::Device;

use crate::common::{config, random_batch, spec, TestResult};

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

fn setup(c: &ImpalaConfig) -> Result<(EnvSpec, LearnerHandle), LearnerError> {
    let s = spec(4, Space::Discrete(2));
    let devices = impala_learner::learner_devices(c)?;
    let learner = Learner::with_devices(c, &s, &devices)?;
    Ok((s, LearnerHandle::spawn(c, learner)?))
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

#[test]
fn num_sgd_iter_passes_per_batch_on_both_threads() -> TestResult {
    for fake_gpus in [false, true] {
        let mut c = config(vec![8]);
        c.num_sgd_iter = 3;
        c.num_multi_gpu_tower_stacks = 2;
        c.minibatch_buffer_size = 2;
        if fake_gpus {
            c.num_gpus = 2.0;
            c.fake_gpus = true;
        }
        let (s, h) = setup(&c)?;
        for seed in 0..4 {
            assert!(h.try_enqueue(random_batch(&s, 5, 4, 0, seed)).is_ok());
        }
        // LearnerThread: A, B, A, B, A*, B*, C, D, C, D, C*, D* (12 steps). The multi-GPU
        // buffer ramps passes up from 1 over its 2 slots: A*, B, C, B*, C, D, C*, D, then it
        // waits for a fifth batch (8 steps), as RLlib's does.
        let expected = if fake_gpus { 8 } else { 12 };
        let out = drain_n(&h, expected)?;
        assert_eq!(out.len(), expected, "fake_gpus={fake_gpus}");
        assert!(out.iter().all(|o| o.env_steps == 20 && o.agent_steps == 20));
        assert!(h.take_new_weights().is_some_and(|w| w.version == expected as u64));
        assert!(h.take_new_weights().is_none());
        let stats = h.queue_stats();
        assert_eq!(stats.num_steps_trained, expected as u64);
        assert!(stats.learner_grad_time_ms > 0.0 && stats.size_count > 0);
        let learner = h.stop()?;
        assert_eq!(learner.version(), expected as u64);
    }
    Ok(())
}

#[test]
fn a_full_inqueue_gives_the_batch_back() -> TestResult {
    let mut c = config(vec![64, 64]);
    c.learner_queue_size = 1;
    let (s, h) = setup(&c)?;
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
    let mut c = config(vec![8]);
    c.learner_queue_timeout = 0.01;
    let (s, h) = setup(&c)?;
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
pub fn failure_reaches_the_driver(c: &ImpalaConfig) -> TestResult {
    for vtrace in [true, false] {
        let mut c = c.clone();
        c.vtrace = vtrace;
        let (s, h) = setup(&c)?;
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
    failure_reaches_the_driver(&config(vec![8]))
}

#[test]
fn an_undrained_failure_is_returned_by_stop() -> TestResult {
    // A queue that cannot fill up in this test: try_enqueue fails only once the thread is gone.
    let mut c = config(vec![8]);
    c.learner_queue_size = 50_000;
    let (s, h) = setup(&c)?;
    let mut bad = random_batch(&s, 5, 2, 0, 2);
    bad.obs[0] = f32::NAN;
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
    let c = config(vec![8]);
    let (s, h) = setup(&c)?;
    assert!(h.try_enqueue(random_batch(&s, 5, 2, 0, 1)).is_ok());
    assert_eq!(drain_n(&h, 1)?.len(), 1);
    let dir = tempfile::tempdir()?;
    h.save(dir.path())?;
    let mut restored = Learner::new(&c, &s, Device::Cpu)?;
    restored.load(dir.path())?;
    assert_eq!(restored.version(), 1);
    let learner = h.stop()?;
    assert_eq!(learner.weights()?, restored.weights()?);
    Ok(())
}

#[test]
fn bad_queue_settings_are_config_errors() -> TestResult {
    for change in [
        |c: &mut ImpalaConfig| c.learner_queue_size = 0,
        |c: &mut ImpalaConfig| c.num_sgd_iter = 0,
        |c: &mut ImpalaConfig| c.learner_queue_timeout = 0.0,
    ] {
        let mut c = config(vec![4]);
        change(&mut c);
        assert!(matches!(setup(&c), Err(LearnerError::Config { .. })));
    }
    Ok(())
}

#[test]
fn handle_and_policy_can_move_to_other_threads() {
    fn send<T: Send>() {}
    send::<LearnerHandle>();
    send::<Learner>();
    send::<impala_learner::TorchPolicy>();
}
