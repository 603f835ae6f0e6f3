//! `EnvRunner`: the layout of fragments, episodes, truncation values, recurrent state, weights.

use std::sync::Arc;

use impala_core::{CoreError, Policy, PolicyInput, PolicyOutput, Weights};
use impala_sampler::{EnvRunner, EnvRunnerSettings, PolicyFactory, Result, SamplerError};

use crate::support::{counting_policies, runner_settings, EnvSetup, TestResult};

#[test]
fn fragments_are_time_major_with_episode_boundaries() -> Result<()> {
    // 3 envs, episodes terminate after 4 steps, fragments of 5 steps.
    let setup = EnvSetup::default();
    let mut runner =
        EnvRunner::new(&runner_settings(3, 5), 0, &setup.factory(), &counting_policies())?;
    let f = runner.sample()?;
    let b = &f.batch;
    b.validate()?;
    assert_eq!((b.fragment_len, b.num_rows, b.obs_dim()), (5, 3, 3));
    let (obs, bootstrap) = (b.obs.to_f32(), b.bootstrap_obs.to_f32());
    for t in 0..5 {
        for row in 0..3 {
            let i = b.index(t, row);
            // obs[1] is the step in the episode: 0,1,2,3 then the new episode's 0.
            assert_eq!(obs[i * 3 + 1], (t % 4) as f32, "t={t} row={row}");
            assert_eq!(b.terminateds[i], t == 3);
            assert!(!b.truncateds[i]);
            assert_eq!(b.rewards[i], 1.0);
        }
    }
    // The bootstrap observation is the one after the last step (step 1 of the 2nd episode).
    for row in 0..3 {
        assert_eq!(bootstrap[row * 3 + 1], 1.0);
        // Rows come from distinct envs.
        assert_eq!(bootstrap[row * 3], obs[b.index(0, row) * 3]);
    }
    assert_eq!(f.episodes.len(), 3);
    assert!(f
        .episodes
        .iter()
        .all(|e| e.episode_len == 4 && e.episode_return == 4.0 && !e.truncated));
    Ok(())
}

#[test]
fn truncation_stores_the_value_of_the_final_observation() -> Result<()> {
    // The spec's time limit (3 steps) truncates episodes that never terminate.
    let setup =
        EnvSetup { max_episode_steps: Some(3), terminate_after: None, ..EnvSetup::default() };
    let mut runner =
        EnvRunner::new(&runner_settings(2, 4), 0, &setup.factory(), &counting_policies())?;
    let f = runner.sample()?;
    let b = &f.batch;
    for row in 0..2 {
        for t in 0..4 {
            let i = b.index(t, row);
            assert_eq!(b.truncateds[i], t == 2);
            assert!(!b.terminateds[i]);
            // CountingPolicy: 100 + obs[1] of the final observation (3) + 1000 * state after the
            // last step (3 steps into the episode).
            let expected = if t == 2 { 100.0 + 3.0 + 3000.0 } else { 0.0 };
            assert_eq!(b.truncation_values[i], expected, "t={t} row={row}");
        }
    }
    assert!(f.episodes.iter().all(|e| e.truncated && e.episode_len == 3));
    Ok(())
}

#[test]
fn recurrent_state_is_carried_and_zeroed_at_episode_start() -> Result<()> {
    // One env, episodes of 4 steps, fragments of 3: CountingPolicy's state counts the steps
    // since the episode started, and it reports the state it was given as vf_preds.
    let setup = EnvSetup::default();
    let mut runner =
        EnvRunner::new(&runner_settings(1, 3), 0, &setup.factory(), &counting_policies())?;
    let f1 = runner.sample()?;
    let f2 = runner.sample()?;
    let f3 = runner.sample()?;
    assert_eq!(f1.batch.state_in, vec![0.0]);
    assert_eq!(f1.batch.vf_preds, vec![0.0, 1.0, 2.0]);
    assert_eq!(f2.batch.state_in, vec![3.0]);
    // Step 3 ends the episode; the next episode starts from a zero state.
    assert_eq!(f2.batch.vf_preds, vec![3.0, 0.0, 1.0]);
    assert_eq!(f3.batch.state_in, vec![2.0]);
    assert_eq!(f3.batch.vf_preds, vec![2.0, 3.0, 0.0]);
    Ok(())
}

#[test]
fn rewards_are_clipped_but_returns_are_not() -> Result<()> {
    let setup = EnvSetup { reward: 5.0, ..EnvSetup::default() };
    let cfg = EnvRunnerSettings { clip_rewards: Some(1.0), ..runner_settings(1, 4) };
    let mut runner = EnvRunner::new(&cfg, 0, &setup.factory(), &counting_policies())?;
    let f = runner.sample()?;
    assert!(f.batch.rewards.iter().all(|&r| r == 1.0));
    assert_eq!(f.episodes[0].episode_return, 20.0);
    Ok(())
}

#[test]
fn envs_are_seeded_once_by_runner_and_index() -> Result<()> {
    let setup = EnvSetup::default();
    let cfg = EnvRunnerSettings { seed: Some(10), ..runner_settings(2, 5) };
    let mut runner = EnvRunner::new(&cfg, 3, &setup.factory(), &counting_policies())?;
    runner.sample()?;
    let seeds = setup
        .seeds
        .lock()
        .map_err(|_| SamplerError::InvalidConfig { field: "seeds", reason: "poisoned".into() })?
        .clone();
    // First resets get seed + 1000 * runner + env; resets after an episode get None.
    assert_eq!(seeds, vec![Some(3010), Some(3011), None, None]);
    Ok(())
}

#[test]
fn weights_set_before_a_fragment_are_used_in_it() -> Result<()> {
    let setup = EnvSetup::default();
    let mut runner =
        EnvRunner::new(&runner_settings(2, 3), 0, &setup.factory(), &counting_policies())?;
    assert_eq!(runner.sample()?.batch.weights_version, vec![0, 0]);
    runner.set_weights(&Arc::new(Weights::new(7, vec![])))?;
    assert_eq!(runner.sample()?.batch.weights_version, vec![7, 7]);
    assert_eq!(runner.weights_version(), 7);
    // An older version is loaded too (restoring a checkpoint): the runner acts with what it
    // was given last.
    runner.set_weights(&Arc::new(Weights::new(6, vec![])))?;
    assert_eq!(runner.sample()?.batch.weights_version, vec![6, 6]);
    assert_eq!(runner.weights_version(), 6);
    Ok(())
}

/// Returns one action too few.
struct ShortPolicy;

impl Policy for ShortPolicy {
    fn compute_actions(
        &mut self,
        input: &PolicyInput<'_>,
        out: &mut PolicyOutput,
    ) -> Result<(), CoreError> {
        out.actions = vec![0.0; input.num_envs - 1];
        Ok(())
    }
    fn compute_values(&mut self, _: &[f32], n: usize, _: &[f32]) -> Result<Vec<f32>, CoreError> {
        Ok(vec![0.0; n])
    }
    fn set_weights(&mut self, _: &Arc<Weights>) -> Result<(), CoreError> {
        Ok(())
    }
    fn weights_version(&self) -> u64 {
        0
    }
}

#[test]
fn a_policy_with_wrong_output_sizes_is_an_error() -> Result<()> {
    let policies: PolicyFactory = Arc::new(|_| Ok(Box::new(ShortPolicy) as Box<dyn Policy>));
    let mut runner =
        EnvRunner::new(&runner_settings(2, 3), 0, &EnvSetup::default().factory(), &policies)?;
    let err = runner.sample().err();
    assert!(matches!(
        err,
        Some(SamplerError::PolicyOutput { what: "actions", expected: 2, got: 1 })
    ));
    Ok(())
}

#[test]
fn explore_false_acts_greedily() -> TestResult {
    let spec = crate::support::spec(None);
    let policies: PolicyFactory = Arc::new(move |id| {
        Ok(Box::new(impala_sampler::RandomPolicy::new(&spec, id as u64)) as Box<dyn Policy>)
    });
    let envs = EnvSetup::default().factory();
    let explore = runner_settings(4, 25);
    let greedy = EnvRunnerSettings { explore: false, ..explore.clone() };
    let sampled = EnvRunner::new(&explore, 0, &envs, &policies)?.sample()?;
    let modes = EnvRunner::new(&greedy, 0, &envs, &policies)?.sample()?;
    // RandomPolicy's mode of Discrete(2) is action 0; 100 uniform draws are not all 0.
    assert!(modes.batch.actions.iter().all(|&a| a == 0.0));
    assert!(sampled.batch.actions.contains(&1.0));
    Ok(())
}

/// Box actions in [-0.1, 0.1]; the observation echoes the action the env received.
struct Echo {
    spec: impala_core::EnvSpec,
}

impl impala_core::Env for Echo {
    fn spec(&self) -> &impala_core::EnvSpec {
        &self.spec
    }
    fn reset(&mut self, _: Option<u64>, obs: &mut [f32]) -> Result<(), CoreError> {
        obs[0] = 0.0;
        Ok(())
    }
    fn step(
        &mut self,
        action: &[f32],
        obs: &mut [f32],
    ) -> Result<impala_core::StepOutcome, CoreError> {
        obs[0] = action[0];
        Ok(impala_core::StepOutcome::default())
    }
}

/// A runner of one `Echo` env whose actions are bounded to `[-0.1, 0.1]`, sampling standard
/// normal actions, with `settings` changed by `set`.
fn echo_fragment(set: impl FnOnce(&mut EnvRunnerSettings)) -> Result<impala_sampler::Fragment> {
    let spec = impala_core::EnvSpec {
        id: "Echo".into(),
        observation_space: impala_core::Space::continuous(vec![-1.0], vec![1.0])?,
        action_space: impala_core::Space::continuous(vec![-0.1], vec![0.1])?,
        max_episode_steps: None,
    };
    let (s1, s2) = (spec.clone(), spec);
    let envs: impala_sampler::EnvFactory =
        Arc::new(move |_| Ok(Box::new(Echo { spec: s1.clone() }) as Box<dyn impala_core::Env>));
    let policies: PolicyFactory = Arc::new(move |_| {
        Ok(Box::new(impala_sampler::RandomPolicy::new(&s2, 0)) as Box<dyn Policy>)
    });
    let mut cfg = runner_settings(1, 200);
    set(&mut cfg);
    EnvRunner::new(&cfg, 0, &envs, &policies)?.sample()
}

#[test]
fn clip_actions_clips_what_the_env_gets_not_what_the_batch_keeps() -> Result<()> {
    let f = echo_fragment(|c| (c.clip_actions, c.normalize_actions) = (true, false))?;
    let b = &f.batch;
    // Standard-normal actions: most exceed 0.1 in the batch, none reach the env unclipped.
    assert!(b.actions.iter().filter(|a| a.abs() > 0.1).count() > 100);
    let got = [b.obs.to_f32(), b.bootstrap_obs.to_f32()].concat();
    for (a, o) in b.actions.iter().zip(&got[1..]) {
        assert_eq!(*o, a.clamp(-0.1, 0.1));
    }
    Ok(())
}

#[test]
fn normalize_actions_maps_the_unit_range_onto_the_bounds_for_the_env_only() -> Result<()> {
    // RLlib's default: the env gets `low + (a + 1) (high - low) / 2`, clipped; here `0.1 a`.
    let f = echo_fragment(|c| assert!(c.normalize_actions && !c.clip_actions))?;
    let b = &f.batch;
    let got = [b.obs.to_f32(), b.bootstrap_obs.to_f32()].concat();
    let inside = b.actions.iter().filter(|a| a.abs() < 1.0).count();
    assert!(inside > 100 && inside < 200, "{inside} of 200 standard-normal actions in (-1, 1)");
    for (a, o) in b.actions.iter().zip(&got[1..]) {
        assert!((o - (0.1 * a).clamp(-0.1, 0.1)).abs() < 1e-6, "action {a} reached the env as {o}");
    }
    Ok(())
}

/// Steps its env only when the step is finished, as an env in a worker process does.
struct Elsewhere {
    inner: Box<dyn impala_core::Env>,
    action: Vec<f32>,
    /// Steps begun, over every env sharing the counter.
    begun: Arc<std::sync::atomic::AtomicUsize>,
}

impl impala_core::Env for Elsewhere {
    fn spec(&self) -> &impala_core::EnvSpec {
        self.inner.spec()
    }
    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> Result<(), CoreError> {
        self.inner.reset(seed, obs)
    }
    fn step(
        &mut self,
        action: &[f32],
        obs: &mut [f32],
    ) -> Result<impala_core::StepOutcome, CoreError> {
        self.inner.step(action, obs)
    }
    fn steps_elsewhere(&self) -> bool {
        true
    }
    fn begin_step(&mut self, action: &[f32]) -> Result<(), CoreError> {
        self.action = action.to_vec();
        self.begun.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
    fn finish_step(&mut self, obs: &mut [f32]) -> Result<impala_core::StepOutcome, CoreError> {
        self.inner.step(&self.action, obs)
    }
}

/// Envs that step elsewhere are sampled in two groups (inference for one while the other
/// steps); the fragments are the same as one group's: rows, recurrent state, truncation
/// values and episodes in the same order.
#[test]
fn envs_that_step_elsewhere_sample_in_two_groups_with_the_same_fragments() -> TestResult {
    for (num_envs, max_episode_steps) in [(5, Some(3)), (2, None), (1, Some(2))] {
        let setup =
            || EnvSetup { max_episode_steps, terminate_after: Some(4), ..Default::default() };
        let (plain, inner) = (setup().factory(), setup().factory());
        let begun = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = Arc::clone(&begun);
        let elsewhere: impala_sampler::EnvFactory = Arc::new(move |ctx| {
            let (inner, begun) = (inner(ctx)?, Arc::clone(&counter));
            Ok(Box::new(Elsewhere { inner, action: Vec::new(), begun })
                as Box<dyn impala_core::Env>)
        });
        let settings = runner_settings(num_envs, 7);
        let mut one = EnvRunner::new(&settings, 0, &plain, &counting_policies())?;
        let mut two = EnvRunner::new(&settings, 0, &elsewhere, &counting_policies())?;
        let groups = if num_envs >= 2 { 2 } else { 1 };
        assert!(format!("{two:?}").contains(&format!("groups: {groups}")), "{two:?}");
        for k in 1..=3 {
            let (a, b) = (without_instance(one.sample()?), without_instance(two.sample()?));
            assert!(!a.episodes.is_empty());
            assert_eq!(a, b, "{num_envs} envs");
            // Two groups begin the next fragment's first step before handing this one over.
            let ahead = usize::from(groups == 2);
            let steps = begun.load(std::sync::atomic::Ordering::Relaxed);
            assert_eq!(steps, num_envs * (7 * k + ahead), "{num_envs} envs, fragment {k}");
        }
    }
    Ok(())
}

/// The fragment with observation 0 (the env's process-wide instance number) zeroed.
fn without_instance(mut fragment: impala_sampler::Fragment) -> impala_sampler::Fragment {
    for obs in [&mut fragment.batch.obs, &mut fragment.batch.bootstrap_obs] {
        let mut values = obs.to_f32();
        values.iter_mut().step_by(3).for_each(|v| *v = 0.0);
        obs.write(0, &values);
    }
    fragment
}

/// With `record_episodes`, every episode that ends comes with its fragment step by step: the
/// observations its policy acted on and the one that ended it, the actions of the rows, the
/// env's rewards before clipping; across fragment boundaries, with several envs, and with
/// envs that step elsewhere (two groups, the next fragment begun before this one is handed
/// over). Off, there are none.
#[test]
fn recorded_episodes_are_the_steps_of_the_rows() -> TestResult {
    use impala_core::{EpisodeRecord, Observations};

    let random: PolicyFactory = Arc::new(|id| {
        Ok(Box::new(impala_sampler::RandomPolicy::new(&crate::support::spec(None), id as u64))
            as Box<dyn Policy>)
    });
    for (terminate_after, max_episode_steps, elsewhere) in
        [(Some(5), None, false), (None, Some(4), false), (Some(5), Some(7), true)]
    {
        let setup = EnvSetup { max_episode_steps, terminate_after, ..EnvSetup::default() };
        let inner = setup.factory();
        let envs: impala_sampler::EnvFactory = if elsewhere {
            let begun = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            Arc::new(move |ctx| {
                let (inner, begun) = (inner(ctx)?, Arc::clone(&begun));
                Ok(Box::new(Elsewhere { inner, action: Vec::new(), begun })
                    as Box<dyn impala_core::Env>)
            })
        } else {
            inner
        };
        let settings = EnvRunnerSettings {
            clip_rewards: Some(0.5),
            record_episodes: true,
            ..runner_settings(3, 3)
        };
        let mut runner = EnvRunner::new(&settings, 2, &envs, &random)?;
        // Per env: the steps of its rows so far as (obs, action, flags), and its records.
        let mut steps: Vec<Vec<(Vec<f32>, f32, bool)>> = vec![Vec::new(); 3];
        let mut records: Vec<Vec<EpisodeRecord>> = vec![Vec::new(); 3];
        for _ in 0..5 {
            let f = runner.sample()?;
            let b = &f.batch;
            let obs = b.obs.to_f32();
            for t in 0..b.fragment_len {
                for (row, env_steps) in steps.iter_mut().enumerate() {
                    let i = b.index(t, row);
                    assert_eq!(b.rewards[i], 0.5, "clipped in the rows");
                    let done = b.terminateds[i] || b.truncateds[i];
                    env_steps.push((obs[i * 3..(i + 1) * 3].to_vec(), b.actions[i], done));
                }
            }
            assert_eq!(f.episode_records.len(), f.episodes.len());
            for (record, stats) in f.episode_records.into_iter().zip(&f.episodes) {
                assert_eq!(&record.stats, stats, "in the order of the episodes");
                assert_eq!(record.runner_id, 2);
                records[record.env_index].push(record);
            }
        }
        for (env_steps, env_records) in steps.iter().zip(&records) {
            // 15 steps an env: whole episodes of 5 (or 4), the rest under way.
            let len = if terminate_after.is_some() { 5 } else { 4 };
            assert_eq!(env_records.len(), 15 / len);
            let mut episodes = env_steps.split_inclusive(|(_, _, done)| *done);
            for record in env_records {
                let episode = episodes.next().ok_or("a record with no rows")?;
                assert_eq!(episode.len(), len);
                assert_eq!(record.stats.episode_len, len as u64);
                assert_eq!(record.terminated(), terminate_after.is_some());
                let [agent] = record.agents.as_slice() else { return Err("one agent".into()) };
                let Observations::F32(obs) = &agent.observations else {
                    return Err("f32 observations".into());
                };
                assert_eq!(obs.len(), (len + 1) * 3);
                for (k, (row_obs, action, _)) in episode.iter().enumerate() {
                    assert_eq!(&obs[k * 3..(k + 1) * 3], row_obs.as_slice(), "step {k}");
                    assert_eq!(agent.actions[k], *action);
                }
                // The last observation ended the episode: its step in the episode is `len`,
                // one env step after the observation before it.
                let (last, before) = (&obs[len * 3..], &obs[(len - 1) * 3..len * 3]);
                assert_eq!((last[0], last[1], last[2]), (before[0], len as f32, before[2] + 1.0));
                assert_eq!(agent.rewards, vec![1.0; len], "unclipped");
                assert!(agent.observed_at.is_empty());
            }
        }
    }
    // Off by default.
    let setup = EnvSetup::default();
    let mut runner = EnvRunner::new(&runner_settings(2, 9), 0, &setup.factory(), &random)?;
    let f = runner.sample()?;
    assert!(!f.episodes.is_empty() && f.episode_records.is_empty());
    Ok(())
}
