//! The runner seam: a transport of the test's own (an `EnvRunnerLauncher` and its handles)
//! plugged in with `EnvRunnerGroup::with_launcher`, as runners in other processes would be.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use impala_core::Weights;
use impala_sampler::{
    EnvRunnerGroup, EnvRunnerHandle, EnvRunnerLauncher, Fragment, ReplySender, Result, RunnerReply,
    RunnerRequest, SamplerError, ThreadLauncher,
};

use crate::support::{
    counting_policies, reporting_policies, sampled_in, settings, spec, unique_steps,
    wait_for_calls, Deadline, EnvSetup, Sampled, TestResult,
};

/// Runner threads from a [`ThreadLauncher`], counted; the first incarnation of runner
/// `lose` (if any) loses its connection the first time it is sent weights.
struct TestLauncher {
    threads: ThreadLauncher,
    launches: Arc<AtomicUsize>,
    lose: Option<usize>,
}

impl EnvRunnerLauncher for TestLauncher {
    fn launch(&mut self, replies: ReplySender) -> Result<Box<dyn EnvRunnerHandle>> {
        self.launches.fetch_add(1, Ordering::SeqCst);
        let runner_id = replies.runner_id();
        let lose_on_weights = self.lose == Some(runner_id);
        if lose_on_weights {
            self.lose = None; // only the first incarnation
        }
        let inner = self.threads.launch(replies.clone())?;
        Ok(Box::new(LosableHandle { inner, replies, lose_on_weights, lost: false }))
    }
}

/// A handle that, once its connection is lost, reports `Failed("connection lost")` on the
/// runner's reply channel and refuses every request, as a transport would.
struct LosableHandle {
    inner: Box<dyn EnvRunnerHandle>,
    replies: ReplySender,
    lose_on_weights: bool,
    lost: bool,
}

impl EnvRunnerHandle for LosableHandle {
    fn send(&mut self, request: RunnerRequest) -> bool {
        if self.lose_on_weights && matches!(request, RunnerRequest::SetWeights { .. }) {
            self.lost = true;
            self.replies.send(RunnerReply::Failed("connection lost".into()));
        }
        !self.lost && self.inner.send(request)
    }

    fn join(self: Box<Self>, deadline: Option<std::time::Instant>) -> Result<()> {
        // The far end is unreachable to the group; here it is a thread still running: end it.
        let LosableHandle { mut inner, .. } = *self;
        inner.send(RunnerRequest::Stop);
        inner.join(deadline)
    }
}

fn launcher(setup: &EnvSetup, events: Option<crossbeam_channel::Sender<usize>>) -> TestLauncher {
    let policies = match events {
        Some(events) => reporting_policies(events),
        None => counting_policies(),
    };
    let runner = settings(2, 1, 5).runner;
    TestLauncher {
        threads: ThreadLauncher::new(runner, setup.factory(), policies),
        launches: Arc::default(),
        lose: None,
    }
}

#[test]
fn the_group_samples_through_a_launcher() -> TestResult {
    let setup = EnvSetup::default();
    let launcher = launcher(&setup, None);
    let launches = Arc::clone(&launcher.launches);
    let mut s = settings(2, 1, 5);
    s.sample_timeout = Some(Duration::from_secs(10)); // wait for every request in flight
    let mut group = EnvRunnerGroup::<Fragment>::with_launcher(&s, Box::new(launcher), vec![])?;
    assert_eq!(launches.load(Ordering::SeqCst), 2);
    let fragments = group.sample()?;
    assert!(fragments.iter().all(|f| sampled_in(&f.batch, &spec(None))));
    let per_runner = |id| fragments.iter().filter(|f| f.runner_id == id).count();
    assert_eq!((per_runner(1), per_runner(2)), (2, 2));
    group.sync_weights(0, Arc::new(Weights::new(4, vec![])), &[1, 2]);
    let deadline = Deadline::start();
    let mut fresh = BTreeSet::new();
    while fresh.len() < 2 {
        deadline.check("version 4 from both runners")?;
        fresh.extend(
            group
                .sample()?
                .iter()
                .filter(|f| f.batch.weights_version == vec![4])
                .map(|f| f.runner_id),
        );
    }
    assert_eq!(group.metrics().num_weight_syncs_applied, 2);
    assert_eq!(launches.load(Ordering::SeqCst), 2);
    Ok(group.shutdown()?)
}

#[test]
fn a_lost_runner_is_relaunched_and_its_fragments_dropped() -> TestResult {
    let setup = EnvSetup::default();
    let (events_tx, events) = crossbeam_channel::unbounded();
    let mut launcher = launcher(&setup, Some(events_tx));
    launcher.lose = Some(1);
    let launches = Arc::clone(&launcher.launches);
    let mut s = settings(2, 1, 5);
    s.sample_timeout = Some(Duration::from_secs(10)); // wait for every healthy request in flight
    let mut group = EnvRunnerGroup::<Fragment>::with_launcher(&s, Box::new(launcher), vec![])?;
    let mut delivered: Vec<Fragment> = group.sample()?;
    assert_eq!(delivered.iter().filter(|f| f.runner_id == 1).count(), 2);
    let lost_instance =
        delivered.iter().find(|f| f.runner_id == 1).map(|f| f.batch.obs.to_f32()[0]);
    // Runner 1 has two more fragments requested; once it starts the second (its 16th step of
    // 5-step fragments), the first is on the reply channel. Then its connection is lost.
    wait_for_calls(&events, 1, 3 * 5 + 1)?;
    group.sync_weights(0, Arc::new(Weights::new(1, vec![])), &[1]);

    let after_loss = group.sample()?;
    assert!(after_loss.iter().all(|f| f.runner_id == 2), "{after_loss:?}");
    assert_eq!(launches.load(Ordering::SeqCst), 3);
    let m = group.metrics();
    assert_eq!((m.num_env_runner_failures, m.num_env_runner_restarts), (1, 1));
    assert_eq!(m.num_healthy_env_runners, 2);
    let states = group.runner_states();
    assert_eq!((states[0].runner_id, states[0].num_restarts, states[0].is_healthy), (1, 1, true));
    assert_eq!(states[0].last_error.as_deref(), Some("connection lost"));
    assert_eq!(states[0].num_in_flight_requests, 2); // the relaunched runner's full allowance
    delivered.extend(after_loss);

    // Both fragments in flight on the lost runner are dropped: the one it sent before the loss,
    // and the one it finished when it was stopped (collected by a later call).
    let deadline = Deadline::start();
    let mut relaunched = 0;
    while relaunched < 2 {
        deadline.check("2 fragments of the relaunched runner")?;
        let got = group.sample()?;
        relaunched += got.iter().filter(|f| f.runner_id == 1).count();
        delivered.extend(got);
    }
    let m = group.metrics();
    assert_eq!((m.num_fragments_dropped, m.num_env_steps_dropped), (2, 10), "{m:?}");
    assert_eq!((m.num_env_runner_failures, m.num_env_runner_restarts), (1, 1));
    assert_eq!(launches.load(Ordering::SeqCst), 3);
    // The relaunched runner has new envs and starts from the newest weights.
    let runner1: Vec<&Fragment> = delivered.iter().filter(|f| f.runner_id == 1).collect();
    assert_eq!(runner1.len(), 2 + relaunched);
    assert!(runner1[2..].iter().all(|f| Some(f.batch.obs.to_f32()[0]) != lost_instance));
    assert!(runner1[2..].iter().all(|f| f.batch.weights_version == vec![1]));
    // Nothing delivered twice, and the caller's counts match what was delivered.
    let steps = unique_steps(&delivered);
    let sampled = Sampled::of(&delivered);
    assert_eq!(steps.len() as u64, sampled.env_steps);
    assert_eq!(sampled.env_steps, 5 * sampled.fragments);
    Ok(group.shutdown()?)
}

#[test]
fn a_launcher_needs_at_least_one_runner() {
    let setup = EnvSetup::default();
    let launcher = launcher(&setup, None);
    let launches = Arc::clone(&launcher.launches);
    let err =
        EnvRunnerGroup::<Fragment>::with_launcher(&settings(0, 1, 5), Box::new(launcher), vec![])
            .err();
    assert!(
        matches!(&err, Some(SamplerError::InvalidConfig { field: "num_env_runners", .. })),
        "{err:?}"
    );
    assert_eq!(launches.load(Ordering::SeqCst), 0);
}
