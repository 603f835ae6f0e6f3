//! The raw environments: spaces, reset distributions, seeding, and the step contract.

use crate::TestResult;
use impala_core::{CoreError, Env, Space};
use impala_envs::{
    Acrobot, CartPole, CartPoleConfig, MountainCar, MountainCarConfig, Pendulum, PendulumConfig,
    StatefulEnv,
};
use std::f64::consts::PI;

fn bounds(space: &Space) -> (Vec<f32>, Vec<f32>) {
    match space {
        Space::Box { low, high, .. } => (low.clone(), high.clone()),
        other => panic!("expected a Box, got {other}"),
    }
}

#[test]
fn spaces_match_gymnasium() {
    // Gymnasium 1.4.0's observation_space.high (float32) and action spaces.
    let cartpole = CartPole::new(CartPoleConfig::default());
    let (low, high) = bounds(&cartpole.spec().observation_space);
    assert_eq!(high, [4.8, f32::INFINITY, 0.41887903, f32::INFINITY]);
    assert_eq!(low, [-4.8, f32::NEG_INFINITY, -0.41887903, f32::NEG_INFINITY]);
    assert_eq!(cartpole.spec().action_space, Space::Discrete(2));

    let acrobot = Acrobot::new();
    assert_eq!(
        bounds(&acrobot.spec().observation_space).1,
        [1.0, 1.0, 1.0, 1.0, 12.566371, 28.274334]
    );
    assert_eq!(acrobot.spec().action_space, Space::Discrete(3));

    let car = MountainCar::new(MountainCarConfig::default());
    assert_eq!(bounds(&car.spec().observation_space), (vec![-1.2, -0.07], vec![0.6, 0.07]));
    assert_eq!(car.spec().action_space, Space::Discrete(3));

    let pendulum = Pendulum::new(PendulumConfig::default());
    assert_eq!(bounds(&pendulum.spec().observation_space).1, [1.0, 1.0, 8.0]);
    assert_eq!(bounds(&pendulum.spec().action_space), (vec![-2.0], vec![2.0]));
    assert_eq!(pendulum.spec().max_episode_steps, None); // the raw env has no time limit
}

/// Resets `env` with 300 seeds and returns the per-element minimum and maximum of its state.
fn reset_range(env: &mut dyn StatefulEnv, dim: usize) -> Result<(Vec<f64>, Vec<f64>), CoreError> {
    let mut obs = vec![0.0; env.spec().observation_space.flat_dim()];
    let (mut lo, mut hi) = (vec![f64::INFINITY; dim], vec![f64::NEG_INFINITY; dim]);
    for seed in 0..300 {
        env.reset(Some(seed), &mut obs)?;
        for (i, &s) in env.state().iter().enumerate() {
            lo[i] = lo[i].min(s);
            hi[i] = hi[i].max(s);
        }
    }
    Ok((lo, hi))
}

/// Every element drawn inside `[low, high)` and spread over most of it.
fn assert_uniform_range((lo, hi): (Vec<f64>, Vec<f64>), low: &[f64], high: &[f64]) {
    for i in 0..lo.len() {
        let margin = 0.05 * (high[i] - low[i]);
        assert!(lo[i] >= low[i] && lo[i] < low[i] + margin, "element {i}: min {}", lo[i]);
        assert!(hi[i] <= high[i] && hi[i] > high[i] - margin, "element {i}: max {}", hi[i]);
    }
}

#[test]
fn reset_distributions_match_gymnasium() -> TestResult {
    let range = reset_range(&mut CartPole::new(CartPoleConfig::default()), 4)?;
    assert_uniform_range(range, &[-0.05; 4], &[0.05; 4]);
    let range = reset_range(&mut Acrobot::new(), 4)?;
    assert_uniform_range(range, &[-0.1; 4], &[0.1; 4]);
    let (lo, hi) = reset_range(&mut MountainCar::new(MountainCarConfig::default()), 2)?;
    assert_uniform_range((lo[..1].to_vec(), hi[..1].to_vec()), &[-0.6], &[-0.4]);
    assert_eq!((lo[1], hi[1]), (0.0, 0.0));
    let range = reset_range(&mut Pendulum::new(PendulumConfig::default()), 2)?;
    assert_uniform_range(range, &[-PI, -1.0], &[PI, 1.0]);
    Ok(())
}

#[test]
fn acrobot_reset_state_is_float32() -> TestResult {
    let mut env = Acrobot::new();
    let mut obs = [0.0f32; 6];
    env.reset(Some(3), &mut obs)?;
    assert!(env.state().iter().all(|&s| f64::from(s as f32) == s));
    Ok(())
}

#[test]
fn seeding_is_reproducible() -> TestResult {
    let mut a = CartPole::new(CartPoleConfig::default());
    let mut b = CartPole::new(CartPoleConfig::default());
    let (mut oa, mut ob) = ([0.0f32; 4], [0.0f32; 4]);
    a.reset(Some(7), &mut oa)?;
    b.reset(Some(7), &mut ob)?;
    assert_eq!(oa, ob);
    // Unseeded resets continue the seeded stream, identically in both.
    a.reset(None, &mut oa)?;
    b.reset(None, &mut ob)?;
    assert_eq!(oa, ob);
    b.reset(Some(8), &mut ob)?;
    assert_ne!(oa, ob);
    Ok(())
}

#[test]
fn step_needs_a_running_episode() -> TestResult {
    let mut env = CartPole::new(CartPoleConfig::default());
    let mut obs = [0.0f32; 4];
    let before = env.step(&[0.0], &mut obs);
    assert!(matches!(before, Err(CoreError::NeedsReset { ref env }) if env == "CartPole-v1"));
    env.reset(Some(0), &mut obs)?;
    let mut steps = 0;
    while !env.step(&[1.0], &mut obs)?.terminated {
        steps += 1;
        assert!(steps < 100, "always pushing right must topple the pole");
    }
    assert!(matches!(env.step(&[1.0], &mut obs), Err(CoreError::NeedsReset { .. })));
    env.reset(None, &mut obs)?;
    assert_eq!(env.step(&[1.0], &mut obs)?.reward, 1.0);
    Ok(())
}

#[test]
fn invalid_actions_and_buffers_are_errors() -> TestResult {
    let mut env = CartPole::new(CartPoleConfig::default());
    let mut obs = [0.0f32; 4];
    env.reset(Some(0), &mut obs)?;
    for bad in [&[2.0][..], &[0.5], &[-1.0], &[0.0, 1.0], &[]] {
        assert!(matches!(env.step(bad, &mut obs), Err(CoreError::InvalidAction { .. })), "{bad:?}");
    }
    let short = env.step(&[0.0], &mut [0.0; 3]);
    assert!(matches!(short, Err(CoreError::ShapeMismatch { expected: 4, got: 3, .. })));
    assert!(matches!(env.reset(None, &mut [0.0; 5]), Err(CoreError::ShapeMismatch { .. })));
    assert!(env.reset_to_state(&[0.0; 3], &mut obs).is_err());
    assert!(env.reset_to_state(&[0.0, f64::NAN, 0.0, 0.0], &mut obs).is_err());

    let mut pendulum = Pendulum::new(PendulumConfig::default());
    let mut obs = [0.0f32; 3];
    pendulum.reset(Some(0), &mut obs)?;
    assert!(matches!(pendulum.step(&[f32::NAN], &mut obs), Err(CoreError::InvalidAction { .. })));
    Ok(())
}

#[test]
fn pendulum_clips_torque() -> TestResult {
    let mut env = Pendulum::new(PendulumConfig::default());
    let mut obs = [0.0f32; 3];
    let mut outcomes = Vec::new();
    for torque in [2.0f32, 7.5] {
        env.reset_to_state(&[0.3, -0.2], &mut obs)?;
        outcomes.push((env.step(&[torque], &mut obs)?, obs, env.state().to_vec()));
    }
    assert_eq!(outcomes[0], outcomes[1]);
    Ok(())
}

#[test]
fn pendulum_angular_velocity_is_bounded() -> TestResult {
    let mut env = Pendulum::new(PendulumConfig { g: 100.0 });
    let mut obs = [0.0f32; 3];
    env.reset_to_state(&[1.5, 7.9], &mut obs)?;
    for _ in 0..50 {
        env.step(&[2.0], &mut obs)?;
        assert!(env.state()[1].abs() <= 8.0 && obs[2].abs() <= 8.0);
        assert!((f64::from(obs[0]).hypot(f64::from(obs[1])) - 1.0).abs() < 1e-6);
    }
    Ok(())
}

#[test]
fn mountain_car_stops_at_the_left_wall() -> TestResult {
    let mut env = MountainCar::new(MountainCarConfig::default());
    let mut obs = [0.0f32; 2];
    env.reset_to_state(&[-1.19, -0.05], &mut obs)?;
    env.step(&[0.0], &mut obs)?;
    assert_eq!(env.state(), [-1.2, 0.0]);
    Ok(())
}

#[test]
fn acrobot_wraps_angles_and_bounds_velocities() -> TestResult {
    let mut env = Acrobot::new();
    let mut obs = [0.0f32; 6];
    env.reset_to_state(&[3.1, -3.1, 12.0, -28.0], &mut obs)?;
    for _ in 0..20 {
        if env.step(&[2.0], &mut obs)?.terminated {
            break;
        }
        let s = env.state();
        assert!(s[0].abs() <= PI && s[1].abs() <= PI, "{s:?}");
        assert!(s[2].abs() <= 4.0 * PI && s[3].abs() <= 9.0 * PI, "{s:?}");
    }
    Ok(())
}
