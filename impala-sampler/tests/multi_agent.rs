//! The multi-agent runner: per-policy rows from lanes, agents joining and leaving mid-episode,
//! per-policy returns, mappings that do not fit, and non-finite values from envs; and the runner
//! group driving multi-agent runners: restarts, dropped fragments, weights per policy and runner,
//! sampling on the calling thread.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use impala_core::{
    AgentSpec, CoreError, EnvSpec, MultiAgentEnv, MultiAgentSpec, MultiAgentStep, Policy, Space,
    Weights,
};
use impala_envs::{HalfObserved, MultiAgentCartPole};
use impala_sampler::{
    EnvRunnerGroup, EnvRunnerGroupSettings, EnvRunnerHandle, EnvRunnerLauncher,
    MultiAgentEnvFactory, MultiAgentEnvRunner, MultiAgentFragment, MultiAgentPolicyFactory,
    MultiAgentSettings, MultiAgentThreadLauncher, RandomPolicy, ReplySender, RunnerRequest,
    SamplerError, BROKEN_ENV_FAILURES,
};

use crate::support::{nz, Deadline, Probed, TestResult, WAIT};

fn policy_for(agent: &AgentSpec, seed: u64) -> Box<dyn Policy> {
    let spec = EnvSpec {
        id: agent.id.clone(),
        observation_space: agent.observation_space.clone(),
        action_space: agent.action_space.clone(),
        max_episode_steps: None,
    };
    Box::new(RandomPolicy::new(&spec, seed))
}

fn settings(policy_of_agent: Vec<usize>, t: usize) -> MultiAgentSettings {
    MultiAgentSettings {
        policy_of_agent,
        rollout_fragment_length: t,
        seed: Some(7),
        explore: true,
        normalize_actions: true,
        record_episodes: false,
    }
}

/// Eight steps an episode; agent `a` acts in all of them, agent `b` joins after step 1, acts
/// at steps 2, 3 and 4 and leaves (terminated) with step 4's result; the episode ends
/// truncated after step 7. Each agent gets 1 for each of its own actions, and `b` also gets
/// 10 at step 0 (before it joined: nobody's transition).
struct Staggered {
    spec: MultiAgentSpec,
    k: usize,
}

impl Staggered {
    fn new() -> Result<Self, CoreError> {
        let agent = |id: &str| AgentSpec {
            id: id.into(),
            observation_space: Space::continuous(vec![0.0], vec![10.0])
                .unwrap_or(Space::Discrete(1)),
            action_space: Space::Discrete(2),
        };
        Ok(Staggered {
            spec: MultiAgentSpec::new("Staggered", vec![agent("a"), agent("b")], Some(8))?,
            k: 0,
        })
    }
}

impl MultiAgentEnv for Staggered {
    fn spec(&self) -> &MultiAgentSpec {
        &self.spec
    }
    fn reset(
        &mut self,
        _seed: Option<u64>,
        obs: &mut [Vec<f32>],
        out: &mut MultiAgentStep,
    ) -> Result<(), CoreError> {
        out.clear();
        self.k = 0;
        obs[0][0] = 0.0;
        out.agents[0].observed = true;
        Ok(())
    }
    fn step(
        &mut self,
        _actions: &[Vec<f32>],
        obs: &mut [Vec<f32>],
        out: &mut MultiAgentStep,
    ) -> Result<(), CoreError> {
        let k = self.k;
        out.clear();
        out.agents[0].reward = 1.0;
        if k == 0 {
            out.agents[1].reward = 10.0;
        }
        if (2..=4).contains(&k) {
            out.agents[1].reward = 1.0;
        }
        self.k += 1;
        let now = self.k as f32;
        obs[0][0] = now;
        out.agents[0].observed = true;
        if (1..=4).contains(&k) {
            obs[1][0] = now;
            out.agents[1].observed = true;
            out.agents[1].terminated = k == 4;
        }
        if self.k == 8 {
            out.agents[0].truncated = true;
            out.all_truncated = true;
        }
        Ok(())
    }
}

#[test]
fn agents_that_join_and_leave_fill_their_own_rows() -> TestResult {
    let envs: MultiAgentEnvFactory =
        Arc::new(|_| Ok(Box::new(Staggered::new()?) as Box<dyn MultiAgentEnv>));
    let agents = Staggered::new()?.spec.agents;
    let policies = vec![policy_for(&agents[0], 1), policy_for(&agents[1], 2)];
    let mut runner = MultiAgentEnvRunner::new(0, 1, &envs, policies, &settings(vec![0, 1], 3))?;
    let mut a_rows = Vec::new();
    let mut b_rows = Vec::new();
    let mut episodes = Vec::new();
    let mut policy_returns = Vec::new();
    let mut agent_steps = 0;
    for _ in 0..6 {
        let fragment = runner.sample()?;
        assert_eq!(fragment.env_steps, 3);
        agent_steps += fragment.agent_steps;
        episodes.extend(fragment.episodes);
        policy_returns.extend(fragment.policy_returns);
        let [a, b] = fragment.batches.as_slice() else { panic!("two policies") };
        a_rows.push(a.clone());
        b_rows.push(b.clone());
    }
    // 18 env steps: two whole episodes (8 + 8) and two steps of a third.
    assert_eq!(episodes.len(), 2);
    assert_eq!(episodes[0].episode_return, 8.0 + 3.0 + 10.0);
    assert_eq!(episodes[0].episode_len, 8);
    assert!(episodes[0].truncated);
    assert_eq!(policy_returns[0], vec![8.0, 13.0]);
    // a acted 18 times, b 3 times an episode.
    assert_eq!(agent_steps, 18 + 3 + 3);
    // a: one row of 3 per fragment, its observations counting env steps across episodes.
    let a = impala_core::SampleBatch::concat(&a_rows)?;
    assert_eq!(a.num_rows, 6);
    let obs: Vec<f32> = (0..6)
        .flat_map(|r| (0..3).map(move |t| (r, t)))
        .map(|(r, t)| {
            let i = t * 6 + r;
            match &a.obs {
                impala_core::Observations::F32(v) => v[i],
                impala_core::Observations::Bytes(v) => f32::from(v[i]),
            }
        })
        .collect();
    assert_eq!(obs, [0., 1., 2., 3., 4., 5., 6., 7., 0., 1., 2., 3., 4., 5., 6., 7., 0., 1.]);
    // The episode's last step of a is truncated (row 2, step 1), not terminated.
    assert!(a.truncateds[a.index(1, 2)] && !a.terminateds[a.index(1, 2)]);
    assert_eq!(a.rewards.iter().sum::<f32>(), 18.0);
    // b: one row per episode, steps 2, 3, 4, the last terminated; the reward it got before it
    // joined is in no transition.
    let b = impala_core::SampleBatch::concat(&b_rows)?;
    assert_eq!(b.num_rows, 2);
    for r in 0..2 {
        let rewards: Vec<f32> = (0..3).map(|t| b.rewards[b.index(t, r)]).collect();
        assert_eq!(rewards, [1.0, 1.0, 1.0]);
        let ended: Vec<bool> = (0..3).map(|t| b.terminateds[b.index(t, r)]).collect();
        assert_eq!(ended, [false, false, true]);
    }
    Ok(())
}

/// With `record_episodes`, each ended episode comes per agent: the observations with the env
/// step each came at, the actions of its rows, and per action the rewards until it was next
/// observed; an agent that joins late starts later, and its reward from before it joined is
/// in the episode's return only. Several envs, episodes longer than a fragment.
#[test]
fn recorded_episodes_hold_each_agent_from_when_it_joins() -> TestResult {
    let envs: MultiAgentEnvFactory =
        Arc::new(|_| Ok(Box::new(Staggered::new()?) as Box<dyn MultiAgentEnv>));
    let agents = Staggered::new()?.spec.agents;
    let policies = vec![policy_for(&agents[0], 1), policy_for(&agents[1], 2)];
    let settings = MultiAgentSettings { record_episodes: true, ..settings(vec![0, 1], 3) };
    let mut runner = MultiAgentEnvRunner::new(4, 2, &envs, policies, &settings)?;
    // Per env, agent a's actions in its rows, step after step.
    let (mut records, mut a_actions) = (Vec::new(), vec![Vec::new(); 2]);
    for _ in 0..6 {
        let fragment = runner.sample()?;
        assert_eq!(fragment.episode_records.len(), fragment.episodes.len());
        for (record, stats) in fragment.episode_records.iter().zip(&fragment.episodes) {
            assert_eq!(&record.stats, stats);
        }
        records.extend(fragment.episode_records);
        // a fills a row of 3 steps per env and fragment, env 0's first.
        let a = &fragment.batches[0];
        assert_eq!(a.num_rows, 2);
        for (row, actions) in a_actions.iter_mut().enumerate() {
            actions.extend((0..3).map(|t| a.actions[a.index(t, row)]));
        }
    }
    // 18 env steps an env: two episodes of 8 each.
    assert_eq!(records.len(), 4);
    for (env_index, env_actions) in a_actions.iter().enumerate() {
        let of_env: Vec<_> = records.iter().filter(|r| r.env_index == env_index).collect();
        assert_eq!(of_env.len(), 2);
        for (episode, record) in of_env.into_iter().enumerate() {
            assert_eq!(record.runner_id, 4);
            assert_eq!((record.stats.episode_return, record.stats.episode_len), (21.0, 8));
            assert!(record.stats.truncated && !record.terminated());
            let [a, b] = record.agents.as_slice() else { return Err("two agents".into()) };
            assert_eq!((a.agent, b.agent), (0, 1));
            // a: observed at every step (its observation counts them), acts 8 times.
            assert_eq!(a.observations.to_f32(), (0..=8).map(|k| k as f32).collect::<Vec<_>>());
            assert_eq!(a.observed_at, (0..=8).collect::<Vec<u64>>());
            assert_eq!(a.rewards, vec![1.0; 8]);
            assert_eq!(a.actions, env_actions[episode * 8..episode * 8 + 8].to_vec());
            // b: observed after env steps 2 to 5, acts on the first three, leaves at 5.
            assert_eq!(b.observations.to_f32(), vec![2.0, 3.0, 4.0, 5.0]);
            assert_eq!(b.observed_at, vec![2, 3, 4, 5]);
            assert_eq!((b.actions.len(), b.rewards.clone()), (3, vec![1.0; 3]));
        }
    }
    Ok(())
}

#[test]
fn two_policies_get_a_row_per_env_from_a_coordination_game() -> TestResult {
    let envs: MultiAgentEnvFactory =
        Arc::new(|_| Ok(Box::new(HalfObserved::new()) as Box<dyn MultiAgentEnv>));
    let agents = HalfObserved::new().spec().agents.clone();
    let policies = vec![policy_for(&agents[0], 1), policy_for(&agents[1], 2)];
    let mut runner = MultiAgentEnvRunner::new(0, 4, &envs, policies, &settings(vec![0, 1], 5))?;
    let mut returns = Vec::new();
    for _ in 0..40 {
        let fragment = runner.sample()?;
        assert_eq!((fragment.env_steps, fragment.agent_steps), (20, 40));
        for batch in &fragment.batches {
            assert_eq!((batch.fragment_len, batch.num_rows), (5, 4));
        }
        returns.extend(fragment.episodes.iter().map(|e| e.episode_return));
        for (episode, per_policy) in fragment.episodes.iter().zip(&fragment.policy_returns) {
            assert_eq!(per_policy[0], per_policy[1]);
            assert_eq!(per_policy[0] + per_policy[1], episode.episode_return);
        }
    }
    // 800 env steps, episodes of 10; random play pays half the time, to both agents.
    assert_eq!(returns.len(), 80);
    let mean = returns.iter().sum::<f64>() / returns.len() as f64;
    assert!((8.0..12.0).contains(&mean), "{mean}");
    Ok(())
}

#[test]
fn agents_sharing_a_policy_are_rows_of_one_batch() -> TestResult {
    let envs: MultiAgentEnvFactory =
        Arc::new(|_| Ok(Box::new(MultiAgentCartPole::new(3)?) as Box<dyn MultiAgentEnv>));
    let agents = MultiAgentCartPole::new(3)?.spec().agents.clone();
    let mut runner = MultiAgentEnvRunner::new(
        0,
        2,
        &envs,
        vec![policy_for(&agents[0], 1)],
        &settings(vec![0, 0, 0], 4),
    )?;
    let fragment = runner.sample()?;
    // No pole falls within 4 steps: every lane fills one row.
    assert_eq!(fragment.batches[0].num_rows, 6);
    assert_eq!(fragment.agent_steps, 24);
    Ok(())
}

#[test]
fn mappings_that_do_not_fit_are_refused_naming_the_agent() -> TestResult {
    let envs: MultiAgentEnvFactory =
        Arc::new(|_| Ok(Box::new(Staggered::new()?) as Box<dyn MultiAgentEnv>));
    let agents = Staggered::new()?.spec.agents;
    let other = AgentSpec { observation_space: Space::Discrete(3), ..agents[1].clone() };
    let refusal = |policies: Vec<Box<dyn Policy>>, map: Vec<usize>| match MultiAgentEnvRunner::new(
        0,
        1,
        &envs,
        policies,
        &settings(map, 2),
    ) {
        Err(SamplerError::PolicyMapping { reason }) => reason,
        other => panic!("accepted: {other:?}"),
    };
    let one = || vec![policy_for(&agents[0], 1)];
    let two = || vec![policy_for(&agents[0], 1), policy_for(&agents[1], 2)];
    assert!(refusal(one(), vec![0]).contains("maps 1 agents, but env `Staggered` has 2"));
    assert!(refusal(one(), vec![0, 1]).contains("agent `b` to policy 1, but there are 1"));
    assert!(refusal(two(), vec![0, 0]).contains("no agent maps to policy 1"));
    // Spaces that differ within one policy.
    let odd: MultiAgentEnvFactory = Arc::new(move |_| {
        let mut env = Staggered::new()?;
        env.spec.agents[1] = other.clone();
        Ok(Box::new(env) as Box<dyn MultiAgentEnv>)
    });
    match MultiAgentEnvRunner::new(0, 1, &odd, one(), &settings(vec![0, 0], 2)) {
        Err(SamplerError::PolicyMapping { reason }) => {
            assert!(reason.contains("agent `b` maps to policy 0"), "{reason}")
        }
        other => panic!("accepted: {other:?}"),
    }
    Ok(())
}

/// What [`Poisoned`] spoils at the third step of its episodes.
#[derive(Clone, Copy)]
enum Poison {
    /// Agent `a`'s observation holds a NaN.
    Observation,
    /// Agent `b` gets an infinite reward.
    Reward,
}

/// [`Staggered`], spoiled at step 3 of each episode when `poison` says so.
struct Poisoned {
    inner: Staggered,
    poison: Option<Poison>,
    t: usize,
}

impl MultiAgentEnv for Poisoned {
    fn spec(&self) -> &MultiAgentSpec {
        &self.inner.spec
    }
    fn reset(
        &mut self,
        seed: Option<u64>,
        obs: &mut [Vec<f32>],
        out: &mut MultiAgentStep,
    ) -> Result<(), CoreError> {
        self.t = 0;
        self.inner.reset(seed, obs, out)
    }
    fn step(
        &mut self,
        actions: &[Vec<f32>],
        obs: &mut [Vec<f32>],
        out: &mut MultiAgentStep,
    ) -> Result<(), CoreError> {
        self.inner.step(actions, obs, out)?;
        self.t += 1;
        match self.poison.filter(|_| self.t == 3) {
            Some(Poison::Observation) => obs[0][0] = f32::NAN,
            Some(Poison::Reward) => out.agents[1].reward = f64::INFINITY,
            None => {}
        }
        Ok(())
    }
}

fn poisoned(poison: Option<Poison>) -> Result<Box<dyn MultiAgentEnv>, CoreError> {
    Ok(Box::new(Poisoned { inner: Staggered::new()?, poison, t: 0 }))
}

#[test]
fn a_non_finite_value_from_an_env_fails_its_runner_naming_the_agent() -> TestResult {
    let agents = Staggered::new()?.spec.agents;
    for (poison, expected) in [
        (Poison::Observation, "non-finite observation for agent `a` (NaN at value 0) at step 3"),
        (Poison::Reward, "non-finite reward for agent `b` (inf at value 0) at step 3"),
    ] {
        let envs: MultiAgentEnvFactory = Arc::new(move |_| poisoned(Some(poison)));
        let policies = vec![policy_for(&agents[0], 1), policy_for(&agents[1], 2)];
        let mut runner = MultiAgentEnvRunner::new(0, 1, &envs, policies, &settings(vec![0, 1], 5))?;
        let error = runner.sample().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains(expected) && error.contains("env `Staggered`"), "{error}");
    }
    Ok(())
}

/// One random policy, acting for both of [`Staggered`]'s agents (they share agent `a`'s
/// spaces), new for each runner incarnation.
fn one_random_policy() -> Result<MultiAgentPolicyFactory, CoreError> {
    let agents = Staggered::new()?.spec.agents;
    let spec = EnvSpec {
        id: "a".into(),
        observation_space: agents[0].observation_space.clone(),
        action_space: agents[0].action_space.clone(),
        max_episode_steps: None,
    };
    Ok(Arc::new(move |runner, incarnation, _| {
        Ok(vec![Box::new(RandomPolicy::new(&spec, runner as u64 + incarnation)) as Box<dyn Policy>])
    }))
}

/// A group of `num_env_runners` multi-agent runners of one env each (two fragments in flight
/// each), waiting up to 100 ms per `sample`, restarting failed runners up to `max_restarts`
/// times when `restart`.
fn group_settings(
    num_env_runners: usize,
    restart: bool,
    max_restarts: usize,
) -> EnvRunnerGroupSettings {
    EnvRunnerGroupSettings {
        num_env_runners,
        runner: crate::support::runner_settings(1, 1),
        sample_timeout: Some(Duration::from_millis(100)),
        restart_failed_env_runners: restart,
        max_num_env_runner_restarts: max_restarts,
        ..EnvRunnerGroupSettings::default()
    }
}

#[test]
fn a_runner_failed_by_a_non_finite_value_is_restarted() -> TestResult {
    let policies = one_random_policy()?;
    for restart in [true, false] {
        // Only the first env built (the first incarnation's) is spoiled.
        let built = Arc::new(AtomicUsize::new(0));
        let envs: MultiAgentEnvFactory = Arc::new(move |_| {
            let first = built.fetch_add(1, Ordering::SeqCst) == 0;
            poisoned(first.then_some(Poison::Observation))
        });
        let mut group = EnvRunnerGroup::multi_agent(
            &group_settings(1, restart, 1),
            envs,
            settings(vec![0, 0], 5),
            Arc::clone(&policies),
            vec![],
        )?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut fragments = 0;
        let outcome = loop {
            match group.sample() {
                Ok(got) => fragments += got.len(),
                Err(e) => break Err(e.to_string()),
            }
            if fragments >= 4 || Instant::now() > deadline {
                break Ok(fragments);
            }
        };
        if restart {
            assert!(matches!(outcome, Ok(n) if n >= 4), "the restarted runner samples on");
            assert_eq!(group.metrics().num_env_runner_restarts, 1);
        } else {
            let error = outcome.err().unwrap_or_default();
            assert!(error.contains("non-finite observation for agent `a`"), "{error}");
        }
        let _ = group.shutdown();
    }
    Ok(())
}

#[test]
fn a_failed_runner_s_uncollected_fragments_are_dropped_and_counted() -> TestResult {
    // Only the first env built is spoiled, at its third step: its runner sends its first
    // fragment (2 steps) and fails in its second.
    let built = Arc::new(AtomicUsize::new(0));
    let envs: MultiAgentEnvFactory = Arc::new(move |_| {
        let first = built.fetch_add(1, Ordering::SeqCst) == 0;
        poisoned(first.then_some(Poison::Observation))
    });
    let mut s = group_settings(1, true, 1);
    s.sample_timeout = Some(WAIT); // both fragments in flight, or the failure
    let policies = one_random_policy()?;
    let mut group =
        EnvRunnerGroup::multi_agent(&s, envs, settings(vec![0, 0], 2), policies, vec![])?;
    let first = group.sample()?;
    assert!(first.is_empty(), "the failed runner's fragment was delivered: {first:?}");
    let m = group.metrics();
    assert_eq!((m.num_env_runner_failures, m.num_env_runner_restarts), (1, 1));
    assert_eq!((m.num_fragments_dropped, m.num_env_steps_dropped), (1, 2), "{m:?}");
    let state = &group.runner_states()[0];
    assert_eq!((state.num_restarts, state.is_healthy, state.num_in_flight_requests), (1, true, 2));
    let error = state.last_error.clone().unwrap_or_default();
    assert!(error.contains("non-finite observation for agent `a`"), "{error}");
    // The restarted runner delivers both fragments it was asked for.
    let next = group.sample()?;
    assert_eq!(next.iter().map(|f| (f.runner_id, f.env_steps)).collect::<Vec<_>>(), [(1, 2); 2]);
    assert_eq!(group.metrics().num_fragments_dropped, 1);
    Ok(group.shutdown()?)
}

#[test]
fn a_multi_agent_env_spoiled_in_every_runner_is_a_broken_env() -> TestResult {
    let policies = one_random_policy()?;
    // Every env built is spoiled before the first fragment (of 5 steps) is full.
    let envs: MultiAgentEnvFactory = Arc::new(|_| poisoned(Some(Poison::Reward)));
    let mut group = EnvRunnerGroup::multi_agent(
        &group_settings(1, true, 1000),
        envs,
        settings(vec![0, 0], 5),
        policies,
        vec![],
    )?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let error = loop {
        match group.sample() {
            Ok(got) => assert!(got.is_empty(), "a spoiled env delivered a fragment"),
            Err(e) => break e,
        }
        assert!(
            Instant::now() < deadline,
            "still restarting after {} restarts",
            group.metrics().num_env_runner_restarts
        );
    };
    assert!(
        matches!(&error, SamplerError::BrokenEnv { failures, first_error, .. }
            if *failures == BROKEN_ENV_FAILURES && first_error.contains("non-finite reward")),
        "{error}"
    );
    assert_eq!(group.metrics().num_env_runner_restarts, BROKEN_ENV_FAILURES as u64 - 1);
    let _ = group.shutdown();
    Ok(())
}

/// Random policies for the agents of `agents` (one each, acting with the weights given), noting
/// where they act in `threads`; the policies of runner 1's first incarnation fail once `fail`
/// is set.
fn watched_policies(
    agents: Vec<AgentSpec>,
    threads: &Arc<Mutex<HashSet<ThreadId>>>,
    fail: &Arc<AtomicBool>,
) -> MultiAgentPolicyFactory {
    let (threads, fail) = (Arc::clone(threads), Arc::clone(fail));
    Arc::new(move |runner, incarnation, weights| {
        let fails = if (runner, incarnation) == (1, 0) {
            Arc::clone(&fail)
        } else {
            Arc::new(AtomicBool::new(false))
        };
        let mut policies = Vec::with_capacity(agents.len());
        for (p, agent) in agents.iter().enumerate() {
            let mut inner = policy_for(agent, runner as u64 + incarnation);
            if let Some(w) = weights.get(p) {
                inner.set_weights(w)?;
            }
            let (threads, fails) = (Arc::clone(&threads), Arc::clone(&fails));
            let watch = move || {
                let poisoned = |_| CoreError::Policy { reason: "poisoned".into() };
                threads.lock().map_err(poisoned)?.insert(std::thread::current().id());
                if fails.load(Ordering::SeqCst) {
                    return Err(CoreError::Policy { reason: "told to fail".into() });
                }
                Ok(())
            };
            policies.push(Box::new(Probed::new(inner, watch)) as Box<dyn Policy>);
        }
        Ok(policies)
    })
}

/// Weights of version `v`, without tensors: the test policies only note the version.
fn version(v: u64) -> Arc<Weights> {
    Arc::new(Weights::new(v, vec![]))
}

#[test]
fn a_multi_agent_group_without_runners_samples_on_the_calling_thread() -> TestResult {
    let envs: MultiAgentEnvFactory =
        Arc::new(|_| Ok(Box::new(HalfObserved::new()) as Box<dyn MultiAgentEnv>));
    let agents = HalfObserved::new().spec().agents.clone();
    let threads = Arc::default();
    let policies = watched_policies(agents, &threads, &Arc::default());
    let mut s = group_settings(0, true, 1);
    s.runner.num_envs = nz(2);
    let mut group = EnvRunnerGroup::multi_agent(
        &s,
        envs,
        settings(vec![0, 1], 5),
        policies,
        vec![version(1), version(11)],
    )?;
    assert_eq!(group.healthy_runner_ids(), vec![0]);
    let fragments = group.sample()?;
    let [f] = fragments.as_slice() else { panic!("one fragment: {fragments:?}") };
    assert_eq!((f.runner_id, f.env_steps, f.batches.len()), (0, 10, 2));
    assert!(f.batches[0].weights_version.iter().all(|&v| v == 1));
    assert!(f.batches[1].weights_version.iter().all(|&v| v == 11));
    // Only policy 1 changes: the local runner loads just it, at once, and acts with it.
    group.sync_weights(1, version(12), &[0]);
    assert_eq!(group.metrics().num_weight_syncs_applied, 1);
    let fragments = group.sample()?;
    assert!(fragments[0].batches[0].weights_version.iter().all(|&v| v == 1));
    assert!(fragments[0].batches[1].weights_version.iter().all(|&v| v == 12));
    let acting = threads.lock().map_err(|_| "poisoned")?.clone();
    assert_eq!(acting, HashSet::from([std::thread::current().id()]));
    Ok(group.shutdown()?)
}

/// Which weights each runner incarnation was sent: `(runner, incarnation, policy, version)`.
type SentLog = Arc<Mutex<Vec<(usize, u64, usize, u64)>>>;

/// Multi-agent runner threads whose handles log the weights they are sent.
struct Recording {
    threads: MultiAgentThreadLauncher,
    log: SentLog,
}

impl EnvRunnerLauncher for Recording {
    fn launch(&mut self, replies: ReplySender) -> impala_sampler::Result<Box<dyn EnvRunnerHandle>> {
        let runner = (replies.runner_id(), replies.incarnation());
        let inner = self.threads.launch(replies)?;
        Ok(Box::new(RecordingHandle { inner, runner, log: Arc::clone(&self.log) }))
    }
}

/// A runner's handle that logs the weights it is sent.
struct RecordingHandle {
    inner: Box<dyn EnvRunnerHandle>,
    runner: (usize, u64),
    log: SentLog,
}

impl EnvRunnerHandle for RecordingHandle {
    fn send(&mut self, request: RunnerRequest) -> bool {
        if let RunnerRequest::SetWeights { policy, weights, .. } = &request {
            let (runner, incarnation) = self.runner;
            if let Ok(mut log) = self.log.lock() {
                log.push((runner, incarnation, *policy, weights.version));
            }
        }
        self.inner.send(request)
    }

    fn join(self: Box<Self>, deadline: Option<Instant>) -> impala_sampler::Result<()> {
        self.inner.join(deadline)
    }
}

#[test]
fn runners_are_sent_only_weights_they_lack_and_a_restarted_one_every_policy_s_newest() -> TestResult
{
    let envs: MultiAgentEnvFactory =
        Arc::new(|_| Ok(Box::new(Staggered::new()?) as Box<dyn MultiAgentEnv>));
    let (threads, fail) = (Arc::default(), Arc::new(AtomicBool::new(false)));
    let policies = watched_policies(Staggered::new()?.spec.agents, &threads, &fail);
    let weights = vec![version(1), version(1)];
    let runner = settings(vec![0, 1], 3);
    let threads = MultiAgentThreadLauncher::new(nz(1), runner, envs, policies, weights.clone());
    let log = SentLog::default();
    let launcher = Recording { threads, log: Arc::clone(&log) };
    let mut group = EnvRunnerGroup::<MultiAgentFragment>::with_launcher(
        &group_settings(2, true, 1),
        Box::new(launcher),
        weights,
    )?;
    assert!(!group.has_unsent_weights(), "every runner starts with the weights given");
    group.set_latest_weights(0, version(2));
    assert!(group.has_unsent_weights());
    group.send_latest_weights(&[1]);
    assert!(!group.has_unsent_weights());
    group.send_latest_weights(&[1, 2]); // runner 1 has policy 0's version 2 already
    group.sync_weights(1, version(3), &[2]);
    assert_eq!(group.latest_weights(1).map(|w| w.version), Some(3));
    // Runner 1 fails at its next step and is restarted.
    fail.store(true, Ordering::SeqCst);
    let deadline = Deadline::start();
    loop {
        deadline.check("a fragment of the restarted runner 1")?;
        let got = group.sample()?;
        // The failed incarnation's fragments are dropped in the call that restarts it.
        if group.metrics().num_env_runner_restarts == 1 && got.iter().any(|f| f.runner_id == 1) {
            break;
        }
    }
    let log = log.lock().map_err(|_| "poisoned")?.clone();
    let sent = |runner, incarnation| -> Vec<(usize, u64)> {
        log.iter().filter(|e| (e.0, e.1) == (runner, incarnation)).map(|e| (e.2, e.3)).collect()
    };
    assert_eq!(sent(1, 0), [(0, 1), (1, 1), (0, 2)]);
    assert_eq!(sent(2, 0), [(0, 1), (1, 1), (0, 2), (1, 3)]);
    assert_eq!(sent(1, 1), [(0, 2), (1, 3)], "the restarted runner starts with the newest");
    assert_eq!(log.len(), 9);
    Ok(group.shutdown()?)
}
