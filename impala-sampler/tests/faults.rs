//! Fault tolerance: failing runners are dropped, restarted, and nothing is counted twice.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use impala_core::{CoreError, Policy, Weights};
use impala_sampler::{EnvContext, EnvRunnerGroup, Fragment, SamplerError, BROKEN_ENV_FAILURES};

use crate::support::{
    counting_policies, settings, unique_steps, CountingPolicy, Deadline, EnvSetup, Fault, Sampled,
    TestResult, WAIT,
};

/// Samples until a call fails; returns the error and everything delivered before it.
fn sample_until_error(group: &mut EnvRunnerGroup) -> TestResult<(SamplerError, Vec<Fragment>)> {
    let deadline = Deadline::start();
    let mut delivered = Vec::new();
    loop {
        deadline.check("sample() to fail")?;
        match group.sample() {
            Ok(fragments) => delivered.extend(fragments),
            Err(e) => return Ok((e, delivered)),
        }
    }
}

fn run_with_fault(fault: Fault) -> TestResult {
    // Runner 1's first env breaks at its 7th step (inside its second fragment of 5 steps).
    let setup = EnvSetup { fault: Some((1, 1, 7, fault)), ..EnvSetup::default() };
    let mut s = settings(2, 2, 5);
    s.sample_timeout = Some(Duration::from_millis(500));
    let mut group = EnvRunnerGroup::new(&s, setup.factory(), counting_policies())?;
    group.sync_weights(0, Arc::new(Weights::new(9, vec![])), &[1, 2]);
    let mut fragments = Vec::new();
    let mut restarted_runner_fragments = 0;
    let deadline = Deadline::start();
    while restarted_runner_fragments < 3 {
        deadline.check("3 fragments of the restarted runner")?;
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
    // Nothing delivered twice, and the caller's counts (from the delivered fragments, once)
    // match what was delivered.
    let steps = unique_steps(&fragments);
    let sampled = Sampled::of(&fragments);
    assert_eq!(steps.len() as u64, sampled.env_steps);
    assert_eq!(fragments.len() as u64, sampled.fragments);
    // What was dropped is whole fragments of runner 1 (2 envs x 5 steps): at most the one it
    // finished before failing.
    assert!(m.num_fragments_dropped <= 1, "{m:?}");
    assert_eq!(m.num_env_steps_dropped, 10 * m.num_fragments_dropped);
    // Runner 1 delivered at most its first fragment before failing; the rebuilt runner started
    // from the newest weights.
    let runner1: Vec<&Fragment> = fragments.iter().filter(|f| f.runner_id == 1).collect();
    assert!(runner1
        .iter()
        .all(|f| f.batch.weights_version[0] == 9 || f.batch.weights_version[0] == 0));
    assert_eq!(runner1.last().map(|f| f.batch.weights_version[0]), Some(9));
    Ok(group.shutdown()?)
}

#[test]
fn a_panicking_env_runner_is_restarted_and_sampling_goes_on() -> TestResult {
    run_with_fault(Fault::Panic)
}

#[test]
fn an_env_error_restarts_the_runner_too() -> TestResult {
    run_with_fault(Fault::Error)
}

#[test]
fn without_restarts_a_failure_is_an_error() -> TestResult {
    let setup = EnvSetup { fault: Some((2, 1, 3, Fault::Error)), ..EnvSetup::default() };
    let mut s = settings(2, 1, 5);
    s.restart_failed_env_runners = false;
    s.sample_timeout = Some(Duration::from_millis(500));
    let mut group = EnvRunnerGroup::new(&s, setup.factory(), counting_policies())?;
    let (err, _) = sample_until_error(&mut group)?;
    assert!(
        matches!(&err, SamplerError::EnvRunnerFailed { runner_id: 2, reason } if reason.contains("injected error at step 3")),
        "{err}"
    );
    Ok(())
}

#[test]
fn restarts_are_limited() -> TestResult {
    // Runner 1 breaks every time it is built.
    let setup = EnvSetup { fault: Some((1, usize::MAX, 2, Fault::Panic)), ..EnvSetup::default() };
    let mut s = settings(1, 1, 5);
    s.max_num_env_runner_restarts = 2;
    s.sample_timeout = Some(Duration::from_millis(500));
    let mut group = EnvRunnerGroup::new(&s, setup.factory(), counting_policies())?;
    let (err, delivered) = sample_until_error(&mut group)?;
    assert!(
        matches!(&err, SamplerError::TooManyRestarts { runner_id: 1, max_restarts: 2, reason } if reason.contains("injected panic")),
        "{err}"
    );
    let m = group.metrics();
    assert_eq!(
        (m.num_env_runner_failures, m.num_env_runner_restarts, Sampled::of(&delivered).env_steps),
        (3, 2, 0)
    );
    Ok(())
}

#[test]
fn a_runner_that_fails_before_its_first_fragment_again_and_again_is_a_broken_env() -> TestResult {
    // Runner 1 breaks every time it is built, before its first fragment; restarts are plenty.
    let setup = EnvSetup { fault: Some((1, usize::MAX, 2, Fault::Error)), ..EnvSetup::default() };
    let mut s = settings(2, 1, 5);
    s.max_num_env_runner_restarts = 1000;
    s.sample_timeout = Some(Duration::from_millis(500));
    let mut group = EnvRunnerGroup::new(&s, setup.factory(), counting_policies())?;
    let (err, _) = sample_until_error(&mut group)?;
    assert!(
        matches!(&err, SamplerError::BrokenEnv { runner_id: 1, failures, first_error }
            if *failures == BROKEN_ENV_FAILURES && first_error.contains("injected error at step 2")),
        "{err}"
    );
    assert!(err.to_string().contains("fix the env"), "{err}");
    // Two restarts, not a thousand.
    assert_eq!(group.metrics().num_env_runner_restarts, BROKEN_ENV_FAILURES as u64 - 1);
    Ok(())
}

#[test]
fn a_failing_local_runner_is_an_error() -> TestResult {
    let setup = EnvSetup { fault: Some((0, 1, 2, Fault::Panic)), ..EnvSetup::default() };
    let mut group = EnvRunnerGroup::new(&settings(0, 1, 5), setup.factory(), counting_policies())?;
    let err = group.sample().err();
    assert!(matches!(err, Some(SamplerError::EnvRunnerFailed { runner_id: 0, .. })));
    Ok(())
}

#[test]
fn shutdown_reports_a_failure_not_yet_collected() -> TestResult {
    let setup = EnvSetup { fault: Some((1, 1, 1, Fault::Error)), ..EnvSetup::default() };
    let group = EnvRunnerGroup::new(&settings(1, 1, 5), setup.factory(), counting_policies())?;
    // The runner fails on its first step; shutting down without sampling surfaces it. Once the
    // fault is hit the runner reports it before its thread ends, and shutdown joins it first.
    setup.fault_events.recv_timeout(WAIT)?;
    let err = group.shutdown().err();
    assert!(matches!(err, Some(SamplerError::EnvRunnerFailed { runner_id: 1, .. })), "{err:?}");
    Ok(())
}

#[test]
fn a_restarted_runner_draws_new_env_and_action_streams() -> TestResult {
    // Runner 1's env breaks at its 3rd step, once; its next incarnation must not replay the
    // random streams of the first (same env seeds, same policy seed).
    let setup = EnvSetup { fault: Some((1, 1, 3, Fault::Error)), ..EnvSetup::default() };
    let mut s = settings(1, 1, 5);
    s.sample_timeout = Some(Duration::from_millis(500));
    let built: Arc<Mutex<Vec<EnvContext>>> = Arc::default();
    let seen = Arc::clone(&built);
    let policies = Arc::new(move |ctx: &EnvContext| {
        seen.lock().map_err(|_| CoreError::Policy { reason: "poisoned".into() })?.push(ctx.clone());
        Ok(Box::new(CountingPolicy::default()) as Box<dyn Policy>)
    });
    let mut group =
        EnvRunnerGroup::<Fragment>::with_context_policies(&s, setup.factory(), policies)?;
    let deadline = Deadline::start();
    let mut restarted_fragments = 0;
    while restarted_fragments == 0 {
        deadline.check("a fragment of the restarted runner")?;
        let got = group.sample()?;
        if group.metrics().num_env_runner_restarts == 1 {
            restarted_fragments += got.len();
        }
    }
    group.shutdown()?;
    let first = EnvContext::new(1, 0, Some(0), Default::default());
    let second = EnvContext::for_incarnation(1, 1, 0, Some(0), Default::default());
    assert_eq!(first.seed, Some(1000), "incarnation 0 keeps RLlib's seed + 1000 * runner + env");
    assert_ne!(second.seed, first.seed);
    let contexts = built.lock().map_err(|_| "poisoned")?.clone();
    assert_eq!(contexts, vec![first.clone(), second.clone()], "the policy sees the incarnation");
    let seeds: Vec<u64> =
        setup.seeds.lock().map_err(|_| "poisoned")?.iter().filter_map(|s| *s).collect();
    assert_eq!(
        seeds,
        vec![1000, second.seed.ok_or("no seed")?],
        "first resets of each incarnation"
    );
    Ok(())
}
