//! Fault tolerance: failing runners are dropped, restarted, and nothing is counted twice.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use impala_core::Weights;
use impala_sampler::{EnvRunnerGroup, Fragment, Result, SamplerError};

use crate::support::{config, counting_policies, EnvSetup, Fault};

/// Every (env instance, lifetime step) pair in the delivered fragments, checked unique.
fn unique_steps(fragments: &[Fragment]) -> BTreeSet<(u32, u32)> {
    let mut seen = BTreeSet::new();
    for f in fragments {
        let b = &f.batch;
        for t in 0..b.fragment_len {
            for row in 0..b.num_rows {
                let i = b.index(t, row) * 3;
                let key = (b.obs[i] as u32, b.obs[i + 2] as u32);
                assert!(seen.insert(key), "step {key:?} delivered twice");
            }
        }
    }
    seen
}

fn run_with_fault(fault: Fault) -> Result<()> {
    // Runner 1's first env breaks at its 7th step (inside its second fragment of 5 steps).
    let setup = EnvSetup { fault: Some((1, 1, 7, fault)), ..EnvSetup::default() };
    let mut cfg = config(2, 2, 5);
    cfg.timeout_s_sampler_manager = 0.5;
    let mut group = EnvRunnerGroup::new(&cfg, setup.factory(), counting_policies())?;
    group.sync_weights(Arc::new(Weights::new(9, vec![])), &[1, 2]);
    let mut fragments = Vec::new();
    let mut restarted_runner_fragments = 0;
    while restarted_runner_fragments < 3 {
        let got = group.sample()?;
        if group.metrics().num_env_runner_restarts == 1 {
            restarted_runner_fragments += got.iter().filter(|f| f.runner_id == 1).count();
        }
        fragments.extend(got);
    }
    let m = group.metrics();
    assert_eq!((m.num_env_runner_failures, m.num_env_runner_restarts), (1, 1));
    assert_eq!(m.num_healthy_env_runners, 2);
    let states = group.runner_states();
    assert_eq!((states[0].runner_id, states[0].num_restarts, states[0].is_healthy), (1, 1, true));
    assert!(states[0].last_error.as_deref().is_some_and(|e| e.contains("injected")));
    assert_eq!((states[1].num_restarts, states[1].last_error.as_deref()), (0, None));
    // Nothing delivered twice, and the counters match what was delivered.
    let steps = unique_steps(&fragments);
    assert_eq!(steps.len() as u64, m.num_env_steps_sampled);
    assert_eq!(fragments.len() as u64, m.num_fragments_sampled);
    // Runner 1 delivered at most its first fragment before failing; the rebuilt runner started
    // from the newest weights.
    let runner1: Vec<&Fragment> = fragments.iter().filter(|f| f.runner_id == 1).collect();
    assert!(runner1
        .iter()
        .all(|f| f.batch.weights_version[0] == 9 || f.batch.weights_version[0] == 0));
    assert_eq!(runner1.last().map(|f| f.batch.weights_version[0]), Some(9));
    group.shutdown()
}

#[test]
fn a_panicking_env_runner_is_restarted_and_sampling_goes_on() -> Result<()> {
    run_with_fault(Fault::Panic)
}

#[test]
fn an_env_error_restarts_the_runner_too() -> Result<()> {
    run_with_fault(Fault::Error)
}

#[test]
fn without_restarts_a_failure_is_an_error() -> Result<()> {
    let setup = EnvSetup { fault: Some((2, 1, 3, Fault::Error)), ..EnvSetup::default() };
    let mut cfg = config(2, 1, 5);
    cfg.restart_failed_env_runners = false;
    cfg.timeout_s_sampler_manager = 0.5;
    let mut group = EnvRunnerGroup::new(&cfg, setup.factory(), counting_policies())?;
    let err = loop {
        if let Err(e) = group.sample() {
            break e;
        }
    };
    assert!(
        matches!(&err, SamplerError::EnvRunnerFailed { runner_id: 2, reason } if reason.contains("injected error at step 3")),
        "{err}"
    );
    Ok(())
}

#[test]
fn restarts_are_limited() -> Result<()> {
    // Runner 1 breaks every time it is built.
    let setup = EnvSetup { fault: Some((1, usize::MAX, 2, Fault::Panic)), ..EnvSetup::default() };
    let mut cfg = config(1, 1, 5);
    cfg.max_num_env_runner_restarts = 2;
    cfg.timeout_s_sampler_manager = 0.5;
    let mut group = EnvRunnerGroup::new(&cfg, setup.factory(), counting_policies())?;
    let err = loop {
        if let Err(e) = group.sample() {
            break e;
        }
    };
    assert!(
        matches!(&err, SamplerError::TooManyRestarts { runner_id: 1, max_restarts: 2, reason } if reason.contains("injected panic")),
        "{err}"
    );
    let m = group.metrics();
    assert_eq!(
        (m.num_env_runner_failures, m.num_env_runner_restarts, m.num_env_steps_sampled),
        (3, 2, 0)
    );
    Ok(())
}

#[test]
fn a_failing_local_runner_is_an_error() -> Result<()> {
    let setup = EnvSetup { fault: Some((0, 1, 2, Fault::Panic)), ..EnvSetup::default() };
    let mut group = EnvRunnerGroup::new(&config(0, 1, 5), setup.factory(), counting_policies())?;
    let err = group.sample().err();
    assert!(matches!(err, Some(SamplerError::EnvRunnerFailed { runner_id: 0, .. })));
    Ok(())
}

#[test]
fn shutdown_reports_a_failure_not_yet_collected() -> Result<()> {
    let setup = EnvSetup { fault: Some((1, 1, 1, Fault::Error)), ..EnvSetup::default() };
    let group = EnvRunnerGroup::new(&config(1, 1, 5), setup.factory(), counting_policies())?;
    // The runner fails on its first step; shutting down without sampling surfaces it. Once the
    // fault is hit the runner reports it before its thread ends, and shutdown joins it first.
    while setup.faults_hit.load(Ordering::SeqCst) == 0 {
        std::thread::yield_now();
    }
    let err = group.shutdown().err();
    assert!(matches!(err, Some(SamplerError::EnvRunnerFailed { runner_id: 1, .. })), "{err:?}");
    Ok(())
}
