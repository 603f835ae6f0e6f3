//! `EnvRunnerGroup`: local sampling, in-flight caps, collection, weight sync, shutdown.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use impala_core::{Policy, Weights};
use impala_sampler::{
    policy_lag, EnvContext, EnvRunnerGroup, Fragment, MultiAgentFragment, WeightBroadcaster,
};

use crate::support::{
    counting_policies, nz, reporting_policies, sampled_in, settings, spec, wait_for_calls,
    CountingPolicy, Deadline, EnvSetup, Sampled, TestResult,
};

/// Samples until at least `n` fragments arrived (each call waits up to the settings' timeout).
fn collect(group: &mut EnvRunnerGroup, n: usize) -> TestResult<Vec<Fragment>> {
    let deadline = Deadline::start();
    let mut out = Vec::new();
    while out.len() < n {
        deadline.check(&format!("{n} fragments"))?;
        out.extend(group.sample()?);
    }
    Ok(out)
}

/// Samples until `done` holds for every fragment of the call's output in turn; returns all of
/// them.
fn sample_until(
    group: &mut EnvRunnerGroup,
    what: &str,
    mut done: impl FnMut(&Fragment) -> bool,
) -> TestResult<Vec<Fragment>> {
    let deadline = Deadline::start();
    let mut out: Vec<Fragment> = Vec::new();
    loop {
        deadline.check(what)?;
        let got = group.sample()?;
        // `done` sees every fragment, also after one finished the wait.
        let mut finished = false;
        for f in &got {
            finished |= done(f);
        }
        out.extend(got);
        if finished {
            return Ok(out);
        }
    }
}

#[test]
fn local_runner_samples_on_the_calling_thread() -> TestResult {
    let setup = EnvSetup::default();
    let mut group = EnvRunnerGroup::new(&settings(0, 2, 5), setup.factory(), counting_policies())?;
    let fragments = group.sample()?;
    assert_eq!(fragments.len(), 1);
    assert_eq!(fragments[0].runner_id, 0);
    assert_eq!(group.healthy_runner_ids(), vec![0]);
    let s = Sampled::of(&fragments);
    assert_eq!((s.env_steps, s.fragments, s.episodes), (10, 1, 2));
    assert!(fragments.iter().all(|f| sampled_in(&f.batch, &spec(None))));
    group.sync_weights(0, Arc::new(Weights::new(2, vec![])), &[0]);
    assert_eq!(group.sample()?[0].batch.weights_version, vec![2, 2]);
    assert_eq!(group.metrics().num_weight_syncs_applied, 1);
    Ok(group.shutdown()?)
}

#[test]
fn each_runner_holds_at_most_max_requests_in_flight() -> TestResult {
    let setup = EnvSetup::default();
    let mut s = settings(2, 3, 4);
    s.max_requests_in_flight = nz(2);
    s.sample_timeout = Some(Duration::from_secs(10)); // waits until every request in flight returned
    let mut group = EnvRunnerGroup::new(&s, setup.factory(), counting_policies())?;
    assert_eq!(group.metrics().num_in_flight_requests, 4);
    let fragments = group.sample()?;
    // Exactly the two requests of each runner came back, and each got two new ones.
    let per_runner = |id| fragments.iter().filter(|f| f.runner_id == id).count();
    assert_eq!((per_runner(1), per_runner(2)), (2, 2));
    assert_eq!(group.metrics().num_in_flight_requests, 4);
    // Runners never ran ahead of their requests: 4 delivered + at most 4 in flight.
    assert!(setup.steps.load(Ordering::Relaxed) <= 8 * 3 * 4);
    let second = group.sample()?;
    assert_eq!(second.len(), 4);
    let sampled = Sampled::of(&[fragments, second].concat());
    assert_eq!(sampled.env_steps, 8 * 3 * 4);
    assert_eq!(group.metrics().num_healthy_env_runners, 2);
    Ok(group.shutdown()?)
}

#[test]
fn zero_timeout_returns_only_what_is_ready() -> TestResult {
    let setup = EnvSetup::default();
    let mut group = EnvRunnerGroup::new(&settings(2, 2, 5), setup.factory(), counting_policies())?;
    // Busy-polls with a zero timeout until both runners delivered and 10 fragments arrived.
    let mut fragments = collect(&mut group, 10)?;
    let deadline = Deadline::start();
    while fragments.iter().all(|f| f.runner_id == fragments[0].runner_id) {
        deadline.check("fragments of both runners")?;
        fragments.extend(group.sample()?);
    }
    // Rows from the same env continue each other: consecutive fragments of one runner and env
    // carry increasing lifetime steps (obs[2]) with no gap.
    let mut last: std::collections::BTreeMap<u32, f32> = Default::default();
    for f in &fragments {
        let (obs, bootstrap) = (f.batch.obs.to_f32(), f.batch.bootstrap_obs.to_f32());
        for row in 0..f.batch.num_rows {
            let instance = obs[f.batch.index(0, row) * 3] as u32;
            let first = obs[f.batch.index(0, row) * 3 + 2];
            if let Some(prev_bootstrap) = last.insert(instance, bootstrap[row * 3 + 2]) {
                assert_eq!(first, prev_bootstrap);
            }
        }
    }
    assert_eq!(last.len(), 4);
    Ok(group.shutdown()?)
}

#[test]
fn weights_reach_the_runners_they_are_sent_to() -> TestResult {
    let setup = EnvSetup::default();
    let mut s = settings(2, 1, 5);
    s.sample_timeout = Some(Duration::from_secs(1));
    let mut group = EnvRunnerGroup::new(&s, setup.factory(), counting_policies())?;
    let mut broadcaster = WeightBroadcaster::new(1);
    // Only runner 2 gets version 3.
    let _ = collect(&mut group, 1)?;
    group.sync_weights(0, Arc::new(Weights::new(3, vec![])), &[2]);
    let mut seen = BTreeSet::new();
    let deadline = Deadline::start();
    while !seen.contains(&(2, 3)) {
        deadline.check("a fragment of runner 2 with version 3")?;
        for f in group.sample()? {
            assert!(f.runner_id == 2 || f.batch.weights_version[0] == 0);
            seen.insert((f.runner_id, f.batch.weights_version[0]));
        }
    }
    // The broadcaster sends version 4 to everyone that returned samples; the caller counts
    // the broadcasts (one per `Some`).
    let mut num_weight_broadcasts = 0;
    let returned: Vec<usize> = group.sample()?.iter().map(|f| f.runner_id).collect();
    let ids = match broadcaster.step(&returned, true) {
        Some(ids) => {
            num_weight_broadcasts += 1;
            ids
        }
        None => Vec::new(),
    };
    assert!(!ids.is_empty());
    group.sync_weights(0, Arc::new(Weights::new(4, vec![])), &ids);
    let mut fresh = BTreeSet::new();
    let deadline = Deadline::start();
    while fresh.len() < ids.len() {
        deadline.check("fragments with version 4 from every runner it was sent to")?;
        for f in group.sample()? {
            if f.batch.weights_version[0] == 4 {
                fresh.insert(f.runner_id);
            }
            assert!(policy_lag(&f.batch, 4) <= 4.0);
        }
    }
    let m = group.metrics();
    assert_eq!(m.latest_weights_version, Some(4));
    assert!(m.num_weight_syncs_applied > ids.len() as u64);
    assert!(m.weight_sync_latency_mean_s > 0.0);
    assert_eq!(num_weight_broadcasts, 1);
    Ok(group.shutdown()?)
}

/// Restoring an older checkpoint: the newest message wins, whatever its version.
#[test]
fn an_older_version_sent_later_is_applied() -> TestResult {
    let setup = EnvSetup::default();
    let mut s = settings(2, 1, 5);
    s.sample_timeout = Some(Duration::from_secs(1));
    let mut group = EnvRunnerGroup::new(&s, setup.factory(), counting_policies())?;
    for version in [5, 3] {
        group.sync_weights(0, Arc::new(Weights::new(version, vec![])), &[1, 2]);
        assert_eq!(group.latest_weights(0).map(|w| w.version), Some(version));
        let mut fresh = BTreeSet::new();
        sample_until(&mut group, &format!("version {version} from both runners"), |f| {
            if f.batch.weights_version[0] == version {
                fresh.insert(f.runner_id);
            }
            fresh.len() == 2
        })?;
    }
    // Once a runner acted with version 3, it keeps it.
    let later = collect(&mut group, 4)?;
    assert!(later.iter().all(|f| f.batch.weights_version == vec![3]), "{later:?}");
    assert_eq!(group.metrics().latest_weights_version, Some(3));
    group.shutdown()?;

    // The local runner loads what it is given, too.
    let mut local = EnvRunnerGroup::new(&settings(0, 1, 5), setup.factory(), counting_policies())?;
    local.sync_weights(0, Arc::new(Weights::new(5, vec![])), &[0]);
    assert_eq!(local.sample()?[0].batch.weights_version, vec![5]);
    local.sync_weights(0, Arc::new(Weights::new(3, vec![])), &[0]);
    assert_eq!(local.sample()?[0].batch.weights_version, vec![3]);
    Ok(local.shutdown()?)
}

#[test]
fn latest_weights_are_kept_until_sent() -> TestResult {
    let setup = EnvSetup::default();
    let mut s = settings(1, 1, 5);
    s.sample_timeout = Some(Duration::from_secs(1));
    let mut group = EnvRunnerGroup::new(&s, setup.factory(), counting_policies())?;
    assert!(group.latest_weights(0).is_none());
    assert!(!group.has_unsent_weights());
    group.set_latest_weights(0, Arc::new(Weights::new(1, vec![])));
    assert!(group.has_unsent_weights());
    assert_eq!(group.metrics().latest_weights_version, Some(1));
    // Not sent: the runner goes on with its own weights.
    let before = collect(&mut group, 3)?;
    assert!(before.iter().all(|f| f.batch.weights_version == vec![0]));
    group.send_latest_weights(&[1]);
    assert!(!group.has_unsent_weights());
    sample_until(&mut group, "version 1", |f| f.batch.weights_version == vec![1])?;
    // The same version again is nothing new; a new one is.
    group.sync_weights(0, Arc::new(Weights::new(1, vec![])), &[1]);
    assert!(!group.has_unsent_weights());
    group.set_latest_weights(0, Arc::new(Weights::new(2, vec![])));
    assert!(group.has_unsent_weights());
    Ok(group.shutdown()?)
}

#[test]
fn weight_syncs_applied_are_counted_for_threads_and_the_local_runner() -> TestResult {
    let setup = EnvSetup::default();
    let mut s = settings(2, 1, 5);
    s.sample_timeout = Some(Duration::from_secs(1));
    let mut group = EnvRunnerGroup::new(&s, setup.factory(), counting_policies())?;
    assert_eq!(group.metrics().num_weight_syncs_applied, 0);
    group.sync_weights(0, Arc::new(Weights::new(1, vec![])), &[1, 2]);
    let mut fresh = BTreeSet::new();
    sample_until(&mut group, "version 1 from both runners", |f| {
        if f.batch.weights_version == vec![1] {
            fresh.insert(f.runner_id);
        }
        fresh.len() == 2
    })?;
    // A runner reports loading weights before it samples with them.
    let m = group.metrics();
    assert_eq!(m.num_weight_syncs_applied, 2);
    assert!(m.weight_sync_latency_mean_s > 0.0);
    group.sync_weights(0, Arc::new(Weights::new(2, vec![])), &[2]);
    sample_until(&mut group, "version 2 from runner 2", |f| {
        f.runner_id == 2 && f.batch.weights_version == vec![2]
    })?;
    assert_eq!(group.metrics().num_weight_syncs_applied, 3);
    group.shutdown()?;

    let mut local = EnvRunnerGroup::new(&settings(0, 1, 5), setup.factory(), counting_policies())?;
    local.sync_weights(0, Arc::new(Weights::new(1, vec![])), &[0]);
    assert_eq!(local.metrics().num_weight_syncs_applied, 1);
    local.sync_weights(0, Arc::new(Weights::new(2, vec![])), &[0, 7]); // 7: unknown, ignored
    assert_eq!(local.metrics().num_weight_syncs_applied, 2);
    assert_eq!(local.sample()?[0].batch.weights_version, vec![2]);
    Ok(local.shutdown()?)
}

#[test]
fn syncs_sent_before_the_next_fragment_are_applied_once_newest_message_first() -> TestResult {
    let setup = EnvSetup::default();
    let mut s = settings(1, 1, 5);
    s.max_requests_in_flight = nz(1);
    s.sample_timeout = Some(Duration::from_secs(10));
    let (events_tx, events) = crossbeam_channel::unbounded();
    let mut group = EnvRunnerGroup::new(&s, setup.factory(), reporting_policies(events_tx))?;
    // The runner started its only requested fragment: it gets no other request until `sample`
    // collects this one, so the three syncs all wait for the fragment after it.
    wait_for_calls(&events, 1, 1)?;
    for version in [1, 3, 2] {
        group.sync_weights(0, Arc::new(Weights::new(version, vec![])), &[1]);
    }
    let first = group.sample()?;
    assert_eq!(first.iter().map(|f| f.batch.weights_version[0]).collect::<Vec<_>>(), vec![0]);
    let second = group.sample()?;
    // The newest message wins (version 2), not the highest version, and it is loaded once.
    assert_eq!(second.iter().map(|f| f.batch.weights_version[0]).collect::<Vec<_>>(), vec![2]);
    assert_eq!(group.metrics().num_weight_syncs_applied, 1);
    Ok(group.shutdown()?)
}

#[test]
fn dropping_the_group_joins_blocked_runners() -> TestResult {
    let setup = EnvSetup::default();
    let group = EnvRunnerGroup::new(&settings(3, 2, 5), setup.factory(), counting_policies())?;
    // Runners fill their requests and block; dropping must not hang.
    drop(group);
    let after = setup.steps.load(Ordering::Relaxed);
    assert!(after <= 3 * 2 * 2 * 5);
    Ok(())
}

#[test]
fn a_group_of_multi_agent_fragments_drives_single_agent_runners_as_one_policy() -> TestResult {
    let setup = EnvSetup::default();
    // The local runner (one fragment a call, two calls) and two runner threads (both requests
    // in flight of each, as the timeout waits for them): every env steps 10 times, finishing 2
    // episodes of 4.
    for (runners, fragments, episodes) in [(0, 2, 4), (2, 4, 8)] {
        let mut s = settings(runners, 2, 5);
        s.sample_timeout = Some(Duration::from_secs(10));
        let policies =
            Arc::new(|_: &EnvContext| Ok(Box::new(CountingPolicy::default()) as Box<dyn Policy>));
        let mut group = EnvRunnerGroup::<MultiAgentFragment>::with_context_policies(
            &s,
            setup.factory(),
            policies,
        )?;
        // Known but not sent: every row acted 3 versions behind.
        group.set_latest_weights(0, Arc::new(Weights::new(3, vec![])));
        let mut got = group.sample()?;
        if runners == 0 {
            got.extend(group.sample()?);
        }
        assert_eq!(got.len(), fragments, "{runners} runners");
        for f in &got {
            let [batch] = f.batches.as_slice() else { panic!("one batch: {f:?}") };
            assert_eq!((f.env_steps, f.agent_steps, batch.env_steps()), (10, 10, 10));
            assert!(sampled_in(batch, &spec(None)));
            let returns: Vec<Vec<f64>> =
                f.episodes.iter().map(|e| vec![e.episode_return]).collect();
            assert_eq!(f.policy_returns, returns);
            assert!(f.episodes.iter().all(|e| (e.episode_return, e.episode_len) == (4.0, 4)));
        }
        let all: usize = got.iter().map(|f| f.episodes.len()).sum();
        assert_eq!(all, episodes);
        assert_eq!(group.metrics().policy_lag_mean, 3.0);
        group.shutdown()?;
    }
    Ok(())
}
