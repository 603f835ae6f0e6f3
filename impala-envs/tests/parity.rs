//! Replays trajectories recorded from Gymnasium 1.4.0 / numpy 2.4 by
//! `scripts/record_env_fixtures.py` (start state, actions) and checks every observation, reward
//! and flag, plus the internal state after the last step.

use crate::TestResult;
use impala_core::CoreError;
use impala_envs::{make_stateful, EnvConfig};
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
struct Fixture {
    id: String,
    episodes: Vec<Episode>,
}

#[derive(Deserialize)]
struct Episode {
    env_config: EnvConfig,
    seed: u64,
    start_state: Vec<f64>,
    reset_obs: Vec<f32>,
    actions: Vec<Value>,
    obs: Vec<Vec<f32>>,
    rewards: Vec<f64>,
    terminated: Vec<u8>,
    truncated: Vec<u8>,
    final_state: Vec<f64>,
}

/// A recorded action as the `f32` slice the Rust env takes.
fn action(v: &Value) -> Result<Vec<f32>, String> {
    match v {
        Value::Number(n) => n.as_f64().map(|a| vec![a as f32]).ok_or(format!("bad action {v}")),
        Value::Array(a) => a
            .iter()
            .map(|x| x.as_f64().map(|x| x as f32).ok_or(format!("bad action {v}")))
            .collect(),
        _ => Err(format!("bad action {v}")),
    }
}

/// Observations within 1e-5 relative (1e-6 absolute near 0): Gymnasium computes the reset
/// observation of Acrobot with float32 `cos`, and the fixtures store shortest decimals.
fn obs_close(got: &[f32], want: &[f32]) -> bool {
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(&g, &w)| approx::relative_eq!(g, w, epsilon = 1e-6, max_relative = 1e-5))
}

/// Replays every episode of a fixture; returns (steps, terminated episodes, truncated episodes).
fn replay(json: &str) -> Result<(usize, usize, usize), Box<dyn std::error::Error>> {
    let fixture: Fixture = serde_json::from_str(json)?;
    let (mut steps, mut terminated, mut truncated) = (0, 0, 0);
    for (k, ep) in fixture.episodes.iter().enumerate() {
        let at = |t: usize| format!("{} episode {k} (seed {}) step {t}", fixture.id, ep.seed);
        let mut env = make_stateful(&fixture.id, &ep.env_config)?;
        let mut obs = vec![0.0f32; env.spec().observation_space.flat_dim()];
        env.reset_to_state(&ep.start_state, &mut obs)?;
        assert!(
            obs_close(&obs, &ep.reset_obs),
            "{}: reset obs {obs:?} vs {:?}",
            at(0),
            ep.reset_obs
        );
        for (t, a) in ep.actions.iter().enumerate() {
            let outcome = env.step(&action(a)?, &mut obs)?;
            assert!(obs_close(&obs, &ep.obs[t]), "{}: obs {obs:?} vs {:?}", at(t), ep.obs[t]);
            assert!(
                approx::relative_eq!(
                    outcome.reward,
                    ep.rewards[t],
                    epsilon = 1e-12,
                    max_relative = 1e-12
                ),
                "{}: reward {} vs {}",
                at(t),
                outcome.reward,
                ep.rewards[t]
            );
            assert_eq!(outcome.terminated, ep.terminated[t] == 1, "{}: terminated", at(t));
            assert_eq!(outcome.truncated, ep.truncated[t] == 1, "{}: truncated", at(t));
            assert_eq!(outcome.done(), t + 1 == ep.actions.len(), "{}: episode end", at(t));
        }
        let state = env.state();
        assert!(
            state.iter().zip(&ep.final_state).all(|(g, w)| approx::relative_eq!(
                g,
                w,
                epsilon = 1e-12,
                max_relative = 1e-9
            )),
            "{}: final state {state:?} vs {:?}",
            at(ep.actions.len()),
            ep.final_state
        );
        // The episode is over: stepping again needs a reset (Gymnasium would warn and go on).
        let again = env.step(&action(&ep.actions[0])?, &mut obs);
        assert!(
            matches!(again, Err(CoreError::NeedsReset { .. })),
            "{}: {again:?}",
            at(ep.actions.len())
        );
        steps += ep.actions.len();
        terminated += usize::from(ep.terminated.last() == Some(&1));
        truncated += usize::from(ep.truncated.last() == Some(&1));
    }
    Ok((steps, terminated, truncated))
}

#[test]
fn cartpole_matches_gymnasium() -> TestResult {
    let (steps, terminated, truncated) = replay(include_str!("fixtures/CartPole-v1.json"))?;
    assert!(steps >= 500 && terminated >= 3 && truncated >= 2, "{steps} {terminated} {truncated}");
    Ok(())
}

#[test]
fn acrobot_matches_gymnasium() -> TestResult {
    let (steps, terminated, truncated) = replay(include_str!("fixtures/Acrobot-v1.json"))?;
    assert!(steps >= 500 && terminated >= 2 && truncated >= 1, "{steps} {terminated} {truncated}");
    Ok(())
}

#[test]
fn mountain_car_matches_gymnasium() -> TestResult {
    let (steps, terminated, truncated) = replay(include_str!("fixtures/MountainCar-v0.json"))?;
    assert!(steps >= 400 && terminated >= 2 && truncated >= 1, "{steps} {terminated} {truncated}");
    Ok(())
}

#[test]
fn pendulum_matches_gymnasium() -> TestResult {
    let (steps, terminated, truncated) = replay(include_str!("fixtures/Pendulum-v1.json"))?;
    assert!(steps >= 400 && terminated == 0 && truncated == 3, "{steps} {terminated} {truncated}");
    Ok(())
}
