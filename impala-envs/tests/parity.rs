//! Replays trajectories recorded from Gymnasium 1.4.0 / numpy 2.4 (x86-64, glibc 2.36) by
//! `scripts/record_env_fixtures.py` and asserts bit-for-bit equality: every observation, reward
//! and flag, and the internal state after each episode's last step.
//!
//! Each fixture holds chosen episodes (full per-step values) and one free run: a single env
//! stepped with random actions for thousands of steps over many episodes, as an env runner
//! uses it (a 32-bit digest per step, so the file stays small and a failure still names the
//! first step that differs). Start states are recorded: this crate's reset RNG is not numpy's.

use crate::TestResult;
use impala_core::{CoreError, Space};
use impala_envs::{make_stateful, Acrobot, EnvConfig, StatefulEnv};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    id: String,
    episodes: Vec<Episode>,
    #[serde(default)]
    float32_trig: Vec<TrigSweep>,
}

/// One recorded episode (see the script's docstring for the encoding).
#[derive(Deserialize)]
struct Episode {
    /// `"episode"` (own env, full values) or `"free"` (the free run's shared env, digests).
    run: String,
    env_config: EnvConfig,
    seed: Option<u64>,
    start_state: Vec<f64>,
    steps: usize,
    reset_obs: String,
    actions: String,
    obs: Option<String>,
    rewards: Option<String>,
    terminated: Option<String>,
    truncated: Option<String>,
    step_digests: Option<String>,
    final_state: Vec<f64>,
}

/// Digests of numpy's float32 `np.sin`/`np.cos` over every `stride`-th float32 bit pattern in
/// `[start_bits, end_bits)`.
#[derive(Deserialize)]
struct TrigSweep {
    start_bits: u32,
    end_bits: u32,
    stride: u32,
    count: usize,
    sin_digest: u64,
    cos_digest: u64,
}

/// Standard base64 (with padding), as Python's `base64.b64encode`.
fn base64(text: &str) -> Result<Vec<u8>, String> {
    let value = |c: u8| -> Result<u32, String> {
        Ok(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return Err(format!("bad base64 character {:?}", c as char)),
        }
        .into())
    };
    let bytes = text.as_bytes();
    if bytes.len() % 4 != 0 {
        return Err(format!("base64 length {} is not a multiple of 4", bytes.len()));
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for chunk in bytes.chunks_exact(4) {
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        let mut n = 0u32;
        for &c in &chunk[..4 - pad] {
            n = n << 6 | value(c)?;
        }
        n <<= 6 * pad as u32;
        out.extend_from_slice(&n.to_be_bytes()[1..4 - pad]);
    }
    Ok(out)
}

fn f32s(text: &str) -> Result<Vec<f32>, String> {
    let bytes = base64(text)?;
    Ok(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
}

fn f64s(text: &str) -> Result<Vec<f64>, String> {
    let bytes = base64(text)?;
    Ok(bytes.chunks_exact(8).map(|b| f64::from_le_bytes(std::array::from_fn(|i| b[i]))).collect())
}

fn u32s(text: &str) -> Result<Vec<u32>, String> {
    let bytes = base64(text)?;
    Ok(bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
}

fn flags(text: &str) -> Vec<bool> {
    text.bytes().map(|b| b == b'1').collect()
}

/// The script's per-step digest: FNV-1a (32 bits) of the obs (f32 LE), the reward (f64 LE),
/// then one byte each for terminated and truncated.
fn step_digest(obs: &[f32], reward: f64, terminated: bool, truncated: bool) -> u32 {
    let bytes = obs
        .iter()
        .flat_map(|o| o.to_le_bytes())
        .chain(reward.to_le_bytes())
        .chain([u8::from(terminated), u8::from(truncated)]);
    bytes.fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
}

fn same_f32s(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

fn same_f64s(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// What a fixture's replay covered.
#[derive(Debug, Default)]
struct Replayed {
    episodes: usize,
    steps: usize,
    terminated: usize,
    truncated: usize,
    free_run_steps: usize,
    free_run_episodes: usize,
}

/// Replays one episode on `env` from its start state and checks every step exactly.
fn replay_episode(
    env: &mut dyn StatefulEnv,
    id: &str,
    k: usize,
    ep: &Episode,
) -> Result<(bool, bool), Box<dyn std::error::Error>> {
    let at = |t: usize| format!("{id} {} episode {k} (seed {:?}) step {t}", ep.run, ep.seed);
    let obs_dim = env.spec().observation_space.flat_dim();
    let act_dim = env.spec().action_space.flat_dim();
    let actions: Vec<Vec<f32>> = if matches!(env.spec().action_space, Space::Box { .. }) {
        f32s(&ep.actions)?.chunks_exact(act_dim).map(<[f32]>::to_vec).collect()
    } else {
        ep.actions.bytes().map(|d| vec![f32::from(d - b'0')]).collect()
    };
    assert_eq!(actions.len(), ep.steps, "{}: actions", at(0));
    let mut obs = vec![0.0f32; obs_dim];
    env.reset_to_state(&ep.start_state, &mut obs)?;
    let reset_obs = f32s(&ep.reset_obs)?;
    assert!(same_f32s(&obs, &reset_obs), "{}: reset obs {obs:?} vs {reset_obs:?}", at(0));
    let full = match (&ep.obs, &ep.rewards, &ep.terminated, &ep.truncated) {
        (Some(o), Some(r), Some(te), Some(tr)) => Some((f32s(o)?, f64s(r)?, flags(te), flags(tr))),
        _ => None,
    };
    let digests = ep.step_digests.as_deref().map(u32s).transpose()?;
    let (mut terminated, mut truncated) = (false, false);
    for (t, action) in actions.iter().enumerate() {
        let outcome = env.step(action, &mut obs)?;
        (terminated, truncated) = (outcome.terminated, outcome.truncated);
        if let Some((want_obs, rewards, want_te, want_tr)) = &full {
            let want = &want_obs[t * obs_dim..(t + 1) * obs_dim];
            assert!(same_f32s(&obs, want), "{}: obs {obs:?} vs {want:?}", at(t));
            assert_eq!(outcome.reward.to_bits(), rewards[t].to_bits(), "{}: reward", at(t));
            assert_eq!(terminated, want_te[t], "{}: terminated", at(t));
            assert_eq!(truncated, want_tr[t], "{}: truncated", at(t));
        } else {
            let want = digests.as_ref().ok_or("an episode with neither values nor digests")?[t];
            let got = step_digest(&obs, outcome.reward, terminated, truncated);
            assert_eq!(
                got,
                want,
                "{}: differs from Gymnasium (got obs {obs:?}, reward {:?}, terminated \
                 {terminated}, truncated {truncated})",
                at(t),
                outcome.reward
            );
        }
        // Only a free run's last episode may stop before the episode ends.
        if outcome.done() {
            assert_eq!(t + 1, ep.steps, "{}: episode ended early", at(t));
        }
    }
    let state = env.state();
    assert!(
        same_f64s(state, &ep.final_state),
        "{}: final state {state:?} vs {:?}",
        at(ep.steps),
        ep.final_state
    );
    if terminated || truncated {
        // The episode is over: stepping again needs a reset (Gymnasium would warn and go on).
        let again = env.step(&actions[0], &mut obs);
        assert!(matches!(again, Err(CoreError::NeedsReset { .. })), "{}: {again:?}", at(ep.steps));
    }
    Ok((terminated, truncated))
}

/// Replays every episode of a fixture: chosen episodes on their own env, the free run's on one
/// env reset from each recorded start state in turn.
fn replay(json: &str) -> Result<Replayed, Box<dyn std::error::Error>> {
    let fixture: Fixture = serde_json::from_str(json)?;
    let mut free_env = make_stateful(&fixture.id, &EnvConfig::new())?;
    let mut done = Replayed::default();
    for (k, ep) in fixture.episodes.iter().enumerate() {
        let (terminated, truncated) = if ep.run == "free" {
            done.free_run_steps += ep.steps;
            done.free_run_episodes += 1;
            replay_episode(free_env.as_mut(), &fixture.id, k, ep)?
        } else {
            let mut env = make_stateful(&fixture.id, &ep.env_config)?;
            replay_episode(env.as_mut(), &fixture.id, k, ep)?
        };
        done.episodes += 1;
        done.steps += ep.steps;
        done.terminated += usize::from(terminated);
        done.truncated += usize::from(truncated);
    }
    Ok(done)
}

#[test]
fn cartpole_matches_gymnasium() -> TestResult {
    let done = replay(include_str!("fixtures/CartPole-v1.json"))?;
    assert!(done.free_run_steps >= 3000 && done.free_run_episodes >= 100, "{done:?}");
    assert!(done.terminated >= 100 && done.truncated >= 2, "{done:?}");
    Ok(())
}

#[test]
fn acrobot_matches_gymnasium() -> TestResult {
    let done = replay(include_str!("fixtures/Acrobot-v1.json"))?;
    assert!(done.free_run_steps >= 10_000 && done.free_run_episodes >= 20, "{done:?}");
    assert!(done.terminated >= 2 && done.truncated >= 10, "{done:?}");
    Ok(())
}

#[test]
fn mountain_car_matches_gymnasium() -> TestResult {
    let done = replay(include_str!("fixtures/MountainCar-v0.json"))?;
    assert!(done.free_run_steps >= 4000 && done.free_run_episodes >= 20, "{done:?}");
    assert!(done.terminated >= 2 && done.truncated >= 10, "{done:?}");
    Ok(())
}

#[test]
fn pendulum_matches_gymnasium() -> TestResult {
    let done = replay(include_str!("fixtures/Pendulum-v1.json"))?;
    assert!(done.free_run_steps >= 6000 && done.free_run_episodes >= 30, "{done:?}");
    assert!(done.terminated == 0 && done.truncated >= 30, "{done:?}");
    Ok(())
}

/// Acrobot's reset observation is numpy's float32 `cos`/`sin` of the float32 reset state:
/// checked against numpy's on about 2.6 million float32 values, through `reset_to_state`.
#[test]
fn acrobot_reset_obs_matches_numpys_float32_trig() -> TestResult {
    let fixture: Fixture = serde_json::from_str(include_str!("fixtures/Acrobot-v1.json"))?;
    assert_eq!(fixture.float32_trig.len(), 4);
    let mut env = Acrobot::new();
    let mut obs = [0.0f32; 6];
    for sweep in &fixture.float32_trig {
        let xs: Vec<f32> = (u64::from(sweep.start_bits)..u64::from(sweep.end_bits))
            .step_by(sweep.stride as usize)
            .map(|b| f32::from_bits(b as u32))
            .collect();
        assert_eq!(xs.len(), sweep.count);
        let (mut sin_digest, mut cos_digest) = (0u64, 0u64);
        let mut add = |i: usize, sin: f32, cos: f32| {
            let weight = 2 * i as u64 + 1;
            sin_digest = sin_digest.wrapping_add(u64::from(sin.to_bits()).wrapping_mul(weight));
            cos_digest = cos_digest.wrapping_add(u64::from(cos.to_bits()).wrapping_mul(weight));
        };
        // Two values per reset: the state's two angles.
        for (pair, x) in xs.chunks(2).enumerate() {
            let second = x.get(1).copied().unwrap_or(0.0);
            env.reset_to_state(&[f64::from(x[0]), f64::from(second), 0.0, 0.0], &mut obs)?;
            add(2 * pair, obs[1], obs[0]);
            if x.len() == 2 {
                add(2 * pair + 1, obs[3], obs[2]);
            }
        }
        let range =
            format!("bits {:#x}..{:#x} step {}", sweep.start_bits, sweep.end_bits, sweep.stride);
        assert_eq!(sin_digest, sweep.sin_digest, "sin over {range}");
        assert_eq!(cos_digest, sweep.cos_digest, "cos over {range}");
    }
    Ok(())
}
