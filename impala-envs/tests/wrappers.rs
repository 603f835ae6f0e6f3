//! Wrappers: TimeLimit, FrameStack, ClipReward, NormalizeObservation and MeanStdFilter.

use crate::TestResult;
use impala_core::{CoreError, Env};
use impala_envs::{
    CartPole, CartPoleConfig, ClipReward, FrameStack, MeanStdFilter, MountainCar,
    MountainCarConfig, NormalizeObservation, Pendulum, PendulumConfig, RunningStat, StatefulEnv,
    TimeLimit,
};
use proptest::prelude::*;

/// Steps of CartPole from seed 0 with "always push right" until it terminates.
fn steps_to_fall() -> Result<usize, CoreError> {
    let mut env = CartPole::new(CartPoleConfig::default());
    let mut obs = [0.0f32; 4];
    env.reset(Some(0), &mut obs)?;
    let mut n = 1;
    while !env.step(&[1.0], &mut obs)?.terminated {
        n += 1;
    }
    Ok(n)
}

#[test]
fn time_limit_on_the_terminal_step_sets_both_flags() -> TestResult {
    let n = steps_to_fall()?;
    let mut env = TimeLimit::new(CartPole::new(CartPoleConfig::default()), n)?;
    let mut obs = [0.0f32; 4];
    env.reset(Some(0), &mut obs)?;
    for _ in 1..n {
        assert!(!env.step(&[1.0], &mut obs)?.done());
    }
    let last = env.step(&[1.0], &mut obs)?;
    assert!(last.terminated && last.truncated, "Gymnasium reports both");
    assert_eq!(env.elapsed_steps(), n);
    assert!(matches!(env.step(&[1.0], &mut obs), Err(CoreError::NeedsReset { .. })));
    assert!(TimeLimit::new(CartPole::new(CartPoleConfig::default()), 0).is_err());
    Ok(())
}

#[test]
fn frame_stack_keeps_the_last_frames_oldest_first() -> TestResult {
    let mut plain = MountainCar::new(MountainCarConfig::default());
    let mut stacked = FrameStack::new(MountainCar::new(MountainCarConfig::default()), 3)?;
    assert_eq!(stacked.spec().observation_space.shape(), [3, 2]);
    let (mut frames, mut obs) = (Vec::new(), [0.0f32; 2]);
    let mut stack = [0.0f32; 6];
    plain.reset(Some(4), &mut obs)?;
    stacked.reset(Some(4), &mut stack)?;
    frames.extend([obs, obs, obs]);
    assert_eq!(stack, frames.concat()[..]);
    for t in 0..5 {
        plain.step(&[2.0], &mut obs)?;
        stacked.step(&[2.0], &mut stack)?;
        frames.push(obs);
        assert_eq!(stack, frames[t + 1..t + 4].concat()[..], "step {t}");
    }
    // A failed step leaves the stack alone.
    assert!(stacked.step(&[7.0], &mut stack).is_err());
    assert!(stacked.step(&[1.0], &mut [0.0; 2]).is_err());
    assert!(FrameStack::new(CartPole::new(CartPoleConfig::default()), 0).is_err());
    Ok(())
}

#[test]
fn clip_reward_bounds_rewards() -> TestResult {
    let mut env = ClipReward::new(Pendulum::new(PendulumConfig::default()), 0.5)?;
    let mut obs = [0.0f32; 3];
    env.reset_to_state(&[std::f64::consts::PI, 0.0], &mut obs)?;
    assert_eq!(env.step(&[2.0], &mut obs)?.reward, -0.5); // hanging down costs pi^2
    assert!(ClipReward::new(CartPole::new(CartPoleConfig::default()), -1.0).is_err());
    assert!(ClipReward::new(CartPole::new(CartPoleConfig::default()), f64::NAN).is_err());
    Ok(())
}

#[test]
fn normalize_observation_matches_mean_std_filter() -> TestResult {
    let mut env = NormalizeObservation::new(CartPole::new(CartPoleConfig::default()), Some(5.0))?;
    let mut raw_env = CartPole::new(CartPoleConfig::default());
    let mut filter = MeanStdFilter::new(4, Some(5.0));
    let (mut obs, mut raw) = ([0.0f32; 4], [0.0f32; 4]);
    env.reset(Some(1), &mut obs)?;
    raw_env.reset(Some(1), &mut raw)?;
    filter.apply(&mut raw, true)?;
    assert_eq!(obs, raw);
    for _ in 0..8 {
        env.step(&[0.0], &mut obs)?;
        raw_env.step(&[0.0], &mut raw)?;
        filter.apply(&mut raw, true)?;
        assert_eq!(obs, raw);
        assert!(obs.iter().all(|x| x.abs() <= 5.0));
    }
    assert_eq!(env.filter(), &filter);
    env.set_update(false);
    env.step(&[0.0], &mut obs)?;
    assert_eq!(env.filter().running_stats().num_pushes(), 9);
    Ok(())
}

#[test]
fn filter_sync_round_trip() -> TestResult {
    // Two runners see different data; the driver merges their buffers, then both sync.
    let mut runners = [MeanStdFilter::new(2, None), MeanStdFilter::new(2, None)];
    let mut all = RunningStat::new(2);
    for (k, runner) in runners.iter_mut().enumerate() {
        for t in 0..10 {
            let x = [k as f32 * 3.0 + t as f32, (t * t) as f32];
            all.push(&x)?;
            runner.apply(&mut x.clone(), true)?;
        }
    }
    let mut driver = MeanStdFilter::new(2, None);
    for runner in &runners {
        driver.apply_changes(runner)?;
    }
    assert_eq!(driver.running_stats().num_pushes(), 20);
    for i in 0..2 {
        assert!((driver.running_stats().mean()[i] - all.mean()[i]).abs() < 1e-12);
        assert!((driver.running_stats().std(i) - all.std(i)).abs() < 1e-12);
    }
    for runner in &mut runners {
        runner.sync(&driver);
        runner.reset_buffer();
        assert_eq!(runner.running_stats(), driver.running_stats());
        assert_eq!(runner.buffer().num_pushes(), 0);
    }
    // The state survives serialisation (checkpoints).
    let json = serde_json::to_string(&driver)?;
    assert_eq!(serde_json::from_str::<MeanStdFilter>(&json)?, driver);
    let mut wrong = MeanStdFilter::new(3, None);
    assert!(wrong.apply_changes(&driver).is_err());
    assert!(wrong.apply(&mut [0.0; 4], true).is_err());
    Ok(())
}

proptest! {
    /// Welford's running mean/std agree with the two-pass formulas, and merging two halves
    /// equals pushing everything into one statistic.
    #[test]
    fn running_stat_matches_two_pass(
        xs in prop::collection::vec(-100.0f32..100.0, 2..60),
        split in 0usize..60,
    ) {
        let split = split.min(xs.len());
        let (mut whole, mut left, mut right) = (RunningStat::new(1), RunningStat::new(1), RunningStat::new(1));
        for (i, &x) in xs.iter().enumerate() {
            whole.push(&[x]).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let half = if i < split { &mut left } else { &mut right };
            half.push(&[x]).map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        let n = xs.len() as f64;
        let mean = xs.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
        let var = xs.iter().map(|&x| (f64::from(x) - mean).powi(2)).sum::<f64>() / (n - 1.0);
        prop_assert!((whole.mean()[0] - mean).abs() < 1e-9);
        prop_assert!((whole.std(0) - var.sqrt()).abs() < 1e-9);
        left.merge(&right).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(left.num_pushes(), whole.num_pushes());
        prop_assert!((left.mean()[0] - mean).abs() < 1e-9);
        prop_assert!((left.std(0) - var.sqrt()).abs() < 1e-9);
    }
}

#[test]
fn envs_synced_with_one_run_filter_share_what_they_saw_and_frozen_copies_change_nothing(
) -> TestResult {
    use impala_envs::{CartPole, CartPoleConfig, SharedMeanStdFilter};
    let run = SharedMeanStdFilter::new(Some(10.0));
    let mut a = NormalizeObservation::synced(CartPole::new(CartPoleConfig::default()), &run, true)?;
    let mut b = NormalizeObservation::synced(CartPole::new(CartPoleConfig::default()), &run, true)?;
    let mut obs = [0.0f32; 4];
    // Each env's observations reach the run's filter at its next episode start.
    for (env, seed) in [(&mut a, 1), (&mut b, 2)] {
        env.reset(Some(seed), &mut obs)?;
        for _ in 0..5 {
            env.step(&[1.0], &mut obs)?;
        }
    }
    assert_eq!(run.snapshot()?.map(|f| f.running_stats().num_pushes()), Some(0));
    a.reset(Some(3), &mut obs)?;
    b.reset(Some(4), &mut obs)?;
    let synced = run.snapshot()?.ok_or("no run filter")?;
    assert_eq!(synced.running_stats().num_pushes(), 12, "6 observations of each env");
    // After its sync, b normalises with a's observations too (and its own reset observation).
    assert_eq!(b.filter().running_stats().num_pushes(), 13);

    // A frozen copy normalises with the statistics it was built with and reports nothing back.
    let mut frozen =
        NormalizeObservation::synced(CartPole::new(CartPoleConfig::default()), &run, false)?;
    let mut raw = CartPole::new(CartPoleConfig::default());
    let (mut x, mut y) = ([0.0f32; 4], [0.0f32; 4]);
    frozen.reset(Some(9), &mut x)?;
    raw.reset(Some(9), &mut y)?;
    for i in 0..4 {
        let expected = (f64::from(y[i]) - synced.running_stats().mean()[i])
            / (synced.running_stats().std(i) + 1e-8);
        assert!((f64::from(x[i]) - expected.clamp(-10.0, 10.0)).abs() < 1e-5, "{i}");
    }
    frozen.reset(Some(10), &mut x)?;
    assert_eq!(run.snapshot()?, Some(synced.clone()));
    // A run filter of another size is refused when restored.
    let other = impala_envs::MeanStdFilter::new(3, Some(10.0));
    assert!(run.replace(other).is_err());
    Ok(())
}
