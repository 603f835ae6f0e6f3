//! `EnvRunnerGroup`: local sampling, in-flight caps, collection, weight sync, shutdown.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use impala_core::Weights;
use impala_sampler::{policy_lag, EnvRunnerGroup, Fragment, Result, WeightBroadcaster};

use crate::support::{config, counting_policies, EnvSetup};

/// Samples until at least `n` fragments arrived (each call waits up to the config's timeout).
fn collect(group: &mut EnvRunnerGroup, n: usize) -> Result<Vec<Fragment>> {
    let mut out = Vec::new();
    while out.len() < n {
        out.extend(group.sample()?);
    }
    Ok(out)
}

#[test]
fn local_runner_samples_on_the_calling_thread() -> Result<()> {
    let setup = EnvSetup::default();
    let mut group = EnvRunnerGroup::new(&config(0, 2, 5), setup.factory(), counting_policies())?;
    let fragments = group.sample()?;
    assert_eq!(fragments.len(), 1);
    assert_eq!(fragments[0].runner_id, 0);
    assert_eq!(group.healthy_runner_ids(), vec![0]);
    let m = group.metrics();
    assert_eq!((m.num_env_steps_sampled, m.num_fragments_sampled, m.num_episodes), (10, 1, 2));
    assert_eq!(group.env_spec().id, "TestEnv");
    group.sync_weights(Arc::new(Weights::new(2, vec![])), &[0]);
    assert_eq!(group.sample()?[0].batch.weights_version, vec![2, 2]);
    assert_eq!(group.metrics().num_weight_syncs_applied, 1);
    group.shutdown()
}

#[test]
fn each_runner_holds_at_most_max_requests_in_flight() -> Result<()> {
    let setup = EnvSetup::default();
    let mut cfg = config(2, 3, 4);
    cfg.max_requests_in_flight_per_sampler_worker = 2;
    cfg.timeout_s_sampler_manager = 10.0; // waits until every request in flight returned
    let mut group = EnvRunnerGroup::new(&cfg, setup.factory(), counting_policies())?;
    assert_eq!(group.metrics().num_in_flight_requests, 4);
    let fragments = group.sample()?;
    // Exactly the two requests of each runner came back, and each got two new ones.
    let per_runner = |id| fragments.iter().filter(|f| f.runner_id == id).count();
    assert_eq!((per_runner(1), per_runner(2)), (2, 2));
    assert_eq!(group.metrics().num_in_flight_requests, 4);
    // Runners never ran ahead of their requests: 4 delivered + at most 4 in flight.
    assert!(setup.steps.load(Ordering::Relaxed) <= 8 * 3 * 4);
    assert_eq!(group.sample()?.len(), 4);
    let m = group.metrics();
    assert_eq!(m.num_env_steps_sampled, 8 * 3 * 4);
    assert_eq!(m.num_healthy_env_runners, 2);
    group.shutdown()
}

#[test]
fn zero_timeout_returns_only_what_is_ready() -> Result<()> {
    let setup = EnvSetup::default();
    let mut group = EnvRunnerGroup::new(&config(2, 2, 5), setup.factory(), counting_policies())?;
    // Busy-polls with a zero timeout until both runners delivered and 10 fragments arrived.
    let mut fragments = collect(&mut group, 10)?;
    while fragments.iter().all(|f| f.runner_id == fragments[0].runner_id) {
        fragments.extend(group.sample()?);
    }
    // Rows from the same env continue each other: consecutive fragments of one runner and env
    // carry increasing lifetime steps (obs[2]) with no gap.
    let mut last: std::collections::BTreeMap<u32, f32> = Default::default();
    for f in &fragments {
        for row in 0..f.batch.num_rows {
            let instance = f.batch.obs[f.batch.index(0, row) * 3] as u32;
            let first = f.batch.obs[f.batch.index(0, row) * 3 + 2];
            if let Some(prev_bootstrap) = last.insert(instance, f.batch.bootstrap_obs[row * 3 + 2])
            {
                assert_eq!(first, prev_bootstrap);
            }
        }
    }
    assert_eq!(last.len(), 4);
    group.shutdown()
}

#[test]
fn weights_reach_the_runners_they_are_sent_to() -> Result<()> {
    let setup = EnvSetup::default();
    let mut cfg = config(2, 1, 5);
    cfg.timeout_s_sampler_manager = 1.0;
    let mut group = EnvRunnerGroup::new(&cfg, setup.factory(), counting_policies())?;
    let mut broadcaster = WeightBroadcaster::new(1);
    // Only runner 2 gets version 3.
    let _ = collect(&mut group, 1)?;
    group.sync_weights(Arc::new(Weights::new(3, vec![])), &[2]);
    let mut seen = BTreeSet::new();
    while !seen.contains(&(2, 3)) {
        for f in group.sample()? {
            assert!(f.runner_id == 2 || f.batch.weights_version[0] == 0);
            seen.insert((f.runner_id, f.batch.weights_version[0]));
        }
    }
    // The broadcaster sends version 4 to everyone that returned samples.
    let returned: Vec<usize> = group.sample()?.iter().map(|f| f.runner_id).collect();
    let ids = broadcaster.step(&returned, true).unwrap_or_default();
    assert!(!ids.is_empty());
    group.sync_weights(Arc::new(Weights::new(4, vec![])), &ids);
    let mut fresh = BTreeSet::new();
    while fresh.len() < ids.len() {
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
    assert_eq!(broadcaster.num_weight_broadcasts(), 1);
    group.shutdown()
}

#[test]
fn dropping_the_group_joins_blocked_runners() -> Result<()> {
    let setup = EnvSetup::default();
    let group = EnvRunnerGroup::new(&config(3, 2, 5), setup.factory(), counting_policies())?;
    // Runners fill their requests and block; dropping must not hang.
    drop(group);
    let after = setup.steps.load(Ordering::Relaxed);
    assert!(after <= 3 * 2 * 2 * 5);
    Ok(())
}
