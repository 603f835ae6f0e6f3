//! The pool's slots as a transport's sessions see them: claims, spares, work, readiness, and
//! how a claim's end reaches the group; no transport, no threads but the waits'.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use impala_core::{EnvSpec, Space, Weights};
use impala_runner_pool::{
    Lost, PoolError, RunEnv, RunSession, RunnerPool, RunnerTransport, Wakeup, Work,
};
use impala_sampler::{
    EnvRunnerHandle, EnvRunnerLauncher, ReplySender, RunnerMessage, RunnerReply, RunnerRequest,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn run() -> Result<RunSession, impala_core::CoreError> {
    let spec = EnvSpec {
        id: "Walk-v0".into(),
        observation_space: Space::continuous(vec![0.0], vec![10.0])?,
        action_space: Space::Discrete(2),
        max_episode_steps: Some(10),
    };
    let env = RunEnv::Single(spec);
    Ok(RunSession { env, session: b"{}".to_vec(), compress_observations: false })
}

/// A wakeup that counts on a channel.
fn wakeup() -> (Wakeup, Receiver<()>) {
    let (tx, rx) = crossbeam_channel::unbounded();
    (
        Arc::new(move || {
            let _ = tx.send(());
        }),
        rx,
    )
}

/// What a runner group does with a launcher: incarnation `incarnation` of runner `id`,
/// replying on `replies`.
fn launch(
    pool: &RunnerPool,
    id: usize,
    incarnation: u64,
    replies: &Sender<RunnerMessage>,
) -> Result<Box<dyn EnvRunnerHandle>, Box<dyn std::error::Error>> {
    let sender = ReplySender::new(id, incarnation, replies.clone());
    Ok(pool.launcher(run()?).launch(sender)?)
}

fn weights(version: u64) -> RunnerRequest {
    policy_weights(0, version)
}

fn policy_weights(policy: usize, version: u64) -> RunnerRequest {
    RunnerRequest::SetWeights {
        policy,
        weights: Arc::new(Weights::new(version, vec![])),
        sent: Instant::now(),
    }
}

/// The (policy, version) pairs of the weights in `work`.
fn versions(work: &Work) -> Vec<(usize, u64)> {
    work.weights.iter().map(|(policy, w)| (*policy, w.version)).collect()
}

#[test]
fn runners_take_the_lowest_free_slot_and_spares_wait_for_one() -> TestResult {
    let pool = RunnerPool::new();
    let (replies, _group) = crossbeam_channel::unbounded();
    let _two = launch(&pool, 2, 0, &replies)?;
    let _one = launch(&pool, 1, 0, &replies)?;
    let (first_wakeup, _) = wakeup();
    let (second_wakeup, _) = wakeup();
    let (spare_wakeup, spare_woken) = wakeup();
    let first = pool.claim(None, &first_wakeup)?.ok_or("no slot")?;
    let second = pool.claim(None, &second_wakeup)?.ok_or("no slot")?;
    assert_eq!((first.runner_id(), second.runner_id()), (1, 2));
    assert_eq!(first.assignment().session, b"{}");
    assert!(pool.claim(None, &spare_wakeup)?.is_none(), "two slots, two runners");
    // A runner that leaves before it is ready gives its slot back; the spare takes it.
    assert_eq!(first.lost("closed the connection".into()), Lost::Released);
    spare_woken.recv_timeout(Duration::from_secs(10))?;
    let spare = pool.claim(None, &spare_wakeup)?.ok_or("the freed slot")?;
    assert_eq!((spare.runner_id(), spare.incarnation()), (1, 0));
    Ok(())
}

#[test]
fn a_runner_expecting_another_env_is_refused() -> TestResult {
    let pool = RunnerPool::new();
    let (replies, _group) = crossbeam_channel::unbounded();
    let _slot = launch(&pool, 1, 0, &replies)?;
    let (wake, _) = wakeup();
    match pool.claim(Some("Pong-v5"), &wake) {
        Err(e @ PoolError::OtherEnv { .. }) => {
            let reason = e.to_string();
            assert!(reason.contains("expects env `Pong-v5`") && reason.contains("Walk-v0"));
        }
        other => panic!("not refused: {other:?}"),
    }
    assert!(pool.claim(Some(""), &wake)?.is_some(), "no expectation: any env");
    Ok(())
}

#[test]
fn weights_go_once_and_one_at_a_time_and_samples_wait_for_readiness() -> TestResult {
    let pool = RunnerPool::new();
    let (replies, group) = crossbeam_channel::unbounded();
    let mut slot = launch(&pool, 1, 0, &replies)?;
    // Asked before any runner holds the slot: kept for whoever takes it.
    assert!(slot.send(weights(1)) && slot.send(RunnerRequest::Sample));
    let (wake, woken) = wakeup();
    let mut claim = pool.claim(None, &wake)?.ok_or("no slot")?;
    let work = claim.take_work().ok_or("slot gone")?;
    assert_eq!((versions(&work), work.samples), (vec![(0, 1)], 0));
    assert!(slot.send(weights(2)));
    woken.recv_timeout(Duration::from_secs(10))?;
    let work = claim.take_work().ok_or("slot gone")?;
    assert_eq!(versions(&work), vec![], "version 1 is still on its way");
    claim.ready();
    assert_eq!(pool.num_ready(), 1);
    let work = claim.take_work().ok_or("slot gone")?;
    assert_eq!((versions(&work), work.samples), (vec![(0, 2)], 1));
    assert_eq!(claim.newest_weights_version(0), Some(2));
    assert!(slot.send(RunnerRequest::Sample) && slot.send(RunnerRequest::Sample));
    let work = claim.take_work().ok_or("slot gone")?;
    assert_eq!((versions(&work), work.samples), (vec![], 2));
    claim.weights_applied(0, Duration::from_millis(3));
    let applied = group.try_recv()?;
    assert!(matches!(applied.reply, RunnerReply::WeightsApplied { .. }));
    assert!(slot.send(weights(3)));
    let work = claim.take_work().ok_or("slot gone")?;
    assert_eq!(versions(&work), vec![(0, 3)], "applied: the next can go");
    // Joined by the group: the claim is told to stop its runner.
    slot.join(None)?;
    assert!(claim.take_work().is_none() && !claim.is_open());
    Ok(())
}

#[test]
fn each_policys_weights_go_on_their_own() -> TestResult {
    let pool = RunnerPool::new();
    let (replies, group) = crossbeam_channel::unbounded();
    let mut slot = launch(&pool, 1, 0, &replies)?;
    assert!(slot.send(policy_weights(0, 1)) && slot.send(policy_weights(1, 7)));
    let (wake, _woken) = wakeup();
    let mut claim = pool.claim(None, &wake)?.ok_or("no slot")?;
    let work = claim.take_work().ok_or("slot gone")?;
    assert_eq!(versions(&work), vec![(0, 1), (1, 7)], "every policy's weights before the build");
    claim.ready();
    // Policy 1's next weights go while none of policy 0's are asked for; applying policy 1's
    // lets its next ones go, policy 0's stay as they are.
    assert!(slot.send(policy_weights(1, 8)));
    assert_eq!(versions(&claim.take_work().ok_or("slot gone")?), vec![(1, 8)]);
    assert!(slot.send(policy_weights(0, 2)) && slot.send(policy_weights(1, 9)));
    assert_eq!(versions(&claim.take_work().ok_or("slot gone")?), vec![(0, 2)]);
    claim.weights_applied(1, Duration::ZERO);
    assert!(matches!(group.try_recv()?.reply, RunnerReply::WeightsApplied { policy: 1, .. }));
    assert_eq!(versions(&claim.take_work().ok_or("slot gone")?), vec![(1, 9)]);
    assert_eq!(
        (claim.newest_weights_version(0), claim.newest_weights_version(1)),
        (Some(2), Some(9))
    );
    assert_eq!(claim.newest_weights_version(2), None, "no such policy");
    Ok(())
}

#[test]
fn a_ready_runner_that_fails_or_is_lost_is_reported_once_and_its_slot_refuses_requests(
) -> TestResult {
    let pool = RunnerPool::new();
    let (replies, group) = crossbeam_channel::unbounded();
    let mut slot = launch(&pool, 1, 0, &replies)?;
    let (wake, _) = wakeup();
    let mut claim = pool.claim(None, &wake)?.ok_or("no slot")?;
    claim.ready();
    assert_eq!(claim.lost("remote env runner x closed the connection".into()), Lost::Failed);
    let failed = group.try_recv()?;
    assert_eq!((failed.runner_id, failed.incarnation), (1, 0));
    assert!(matches!(&failed.reply, RunnerReply::Failed(r) if r.contains("closed the connection")));
    assert_eq!(pool.num_ready(), 0);
    assert!(!slot.send(RunnerRequest::Sample), "a failed slot takes no more requests");
    assert!(pool.claim(None, &wake)?.is_none(), "a failed slot is not free");
    // The group restarts it: incarnation 1, free for the next runner.
    let _restarted = launch(&pool, 1, 1, &replies)?;
    let mut next = pool.claim(None, &wake)?.ok_or("the relaunched slot")?;
    assert_eq!(next.incarnation(), 1);
    next.ready();
    next.fail("broke the protocol".into());
    assert!(matches!(group.try_recv()?.reply, RunnerReply::Failed(r) if r == "broke the protocol"));
    assert!(group.try_recv().is_err(), "reported once");
    Ok(())
}

#[test]
fn waiting_for_runners_returns_when_enough_are_ready_and_errors_when_none_came() -> TestResult {
    let pool = RunnerPool::new();
    let (replies, _group) = crossbeam_channel::unbounded();
    let _slots = [launch(&pool, 1, 0, &replies)?, launch(&pool, 2, 0, &replies)?];
    match pool.wait_for_runners(2, Duration::from_millis(20)) {
        Err(e @ PoolError::NoRunners { ready: 0, expected: 2, .. }) => {
            assert!(e.to_string().contains("0 of 2 env runners"), "{e}")
        }
        other => panic!("no runner, yet {other:?}"),
    }
    let (wake, _) = wakeup();
    let mut claim = pool.claim(None, &wake)?.ok_or("no slot")?;
    let waiter = {
        let pool = pool.clone();
        std::thread::spawn(move || pool.wait_for_runners(1, Duration::from_secs(60)))
    };
    claim.ready();
    assert_eq!(waiter.join().map_err(|_| "waiter panicked")??, 1);
    assert_eq!(pool.wait_for_runners(2, Duration::from_millis(20))?, 1, "one of two is enough");
    // A pool is a transport of its own for the algorithm, with the same wait.
    let transport: &dyn RunnerTransport = &pool;
    let ready = transport.wait_for_runners(1, Duration::from_millis(20)).map_err(|e| e.to_string());
    assert_eq!(ready?, 1);
    Ok(())
}
