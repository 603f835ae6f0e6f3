//! Atari games through ale-py's `AtariVectorEnv`: episodic life, seeds, the frame stack.

use impala_core::Env;
use impala_envs::VectorEnv;
use impala_gym::GymEnvPool;

use crate::{config, settings, TestResult};

/// Breakout's FIRE: the ball launches and, with the paddle still, is missed about every 24
/// steps (five lives, so a game ends after about 120).
const FIRE: f32 = 1.0;
/// `[84, 84, 4]` frames.
const OBS_DIM: usize = 84 * 84 * 4;
const STACK: usize = 4;

fn breakout(episodic_life: bool) -> GymEnvPool {
    let mut s = settings("ALE/Breakout-v5");
    s.env_config = config(&[("episodic_life", episodic_life.into())]);
    GymEnvPool::new(s)
}

/// Channel `c` of every pixel of a `[H, W, stack]` frame stack.
fn channel(obs: &[f32], c: usize) -> Vec<f32> {
    obs.iter().skip(c).step_by(STACK).copied().collect()
}

#[test]
fn a_life_lost_ends_the_episode_for_learning_but_the_game_goes_on() -> TestResult {
    let env = breakout(true).make(0, 0, 0)?;
    let mut envs = VectorEnv::new(vec![Box::new(env) as Box<dyn Env>], Some(3))?;
    envs.reset()?;
    let (mut steps, mut lives_lost, mut game_return) = (0u64, 0, 0.0);
    let game = loop {
        steps += 1;
        let step = envs.step(&[FIRE])?.clone();
        game_return += step.rewards[0];
        assert!(steps < 2_000, "no game over after {steps} steps");
        if !step.terminateds[0] {
            continue;
        }
        if let Some((_, stats)) = step.episodes.first() {
            break (*stats, step);
        }
        // A life lost: the episode ended for learning, the game did not. The next episode
        // starts from the very frames the last one ended on, and nothing was reported.
        lives_lost += 1;
        assert!(envs.envs()[0].episode_continues());
        assert_eq!(step.final_obs(0), Some(&step.obs[..OBS_DIM]));
    };
    let (stats, step) = game;
    assert_eq!(lives_lost, 4, "Breakout has five lives");
    assert!(!envs.envs()[0].episode_continues());
    // The reported episode is the whole game.
    assert_eq!(stats.episode_len, steps);
    assert_eq!(stats.episode_return, game_return);
    // A new game starts from other frames than the one that ended.
    assert_ne!(step.final_obs(0), Some(&step.obs[..OBS_DIM]));
    Ok(())
}

#[test]
fn without_episodic_life_only_game_overs_end_episodes() -> TestResult {
    let mut env = breakout(false).make(0, 0, 0)?;
    let mut obs = vec![0.0; OBS_DIM];
    env.reset(Some(3), &mut obs)?;
    for step in 1..2_000 {
        let outcome = env.step(&[FIRE], &mut obs)?;
        if outcome.terminated {
            assert!(step > 100, "a game of five lives ended after {step} steps");
            assert!(!env.episode_continues());
            return Ok(());
        }
    }
    Err("no game over in 2000 steps".into())
}

#[test]
fn seeds_of_2_to_the_31_or_more_reset_and_repeat() -> TestResult {
    let mut env = breakout(false).make(0, 0, 0)?;
    let (mut a, mut b) = (vec![0.0; OBS_DIM], vec![0.0; OBS_DIM]);
    for seed in [1u64 << 31, 1 << 40, u64::MAX] {
        env.reset(Some(seed), &mut a)?;
        env.step(&[FIRE], &mut a)?;
        env.reset(Some(seed), &mut b)?;
        env.step(&[FIRE], &mut b)?;
        assert_eq!(a, b, "seed {seed}");
    }
    Ok(())
}

#[test]
fn frames_from_before_a_game_repeat_its_first() -> TestResult {
    let mut env = breakout(false).make(0, 0, 0)?;
    let mut obs = vec![0.0; OBS_DIM];
    env.reset(Some(5), &mut obs)?;
    let first = channel(&obs, STACK - 1);
    assert!(first.iter().any(|&p| p > 0.0), "the first frame is blank");
    for c in 0..STACK - 1 {
        assert_eq!(channel(&obs, c), first, "channel {c} at reset");
    }
    // One step later the three oldest frames are still the first one.
    env.step(&[FIRE], &mut obs)?;
    for c in 0..STACK - 2 {
        assert_eq!(channel(&obs, c), first, "channel {c} after a step");
    }
    assert_eq!(channel(&obs, STACK - 2), first);
    Ok(())
}

/// Pong with `env_config`: no sticky actions, plus `pairs`.
fn pong(pairs: &[(&str, serde_json::Value)]) -> GymEnvPool {
    let mut s = settings("ALE/Pong-v5");
    s.env_config = config(&[("repeat_action_probability", 0.0.into())]);
    s.env_config.extend(config(pairs));
    GymEnvPool::new(s)
}

/// Pong's observation after `steps` steps of a fixed action sequence from seed 7.
fn pong_frames(pool: &GymEnvPool, steps: usize) -> Result<Vec<f32>, Box<dyn std::error::Error>> {
    let dim = pool.probe()?.observation_space.shape().iter().product();
    let mut env = pool.make(0, 0, 0)?;
    let mut obs = vec![0.0; dim];
    env.reset(Some(7), &mut obs)?;
    for step in 0..steps {
        env.step(&[(step % 3) as f32 + 2.0], &mut obs)?;
    }
    Ok(obs)
}

#[test]
fn a_crop_cuts_the_screen_before_the_resize() -> TestResult {
    let screen = [("img_height", 210.into()), ("img_width", 160.into()), ("stack_num", 1.into())];
    let playing_field = serde_json::json!({ "top": 34, "bottom": 16 });
    let field = |size: u32| {
        pong(&[
            ("crop", playing_field.clone()),
            ("img_height", size.into()),
            ("img_width", size.into()),
            ("stack_num", 1.into()),
        ])
    };
    let (whole, same_size, halved) = (pong(&screen), field(160), field(80));
    assert_eq!(same_size.probe()?.observation_space.shape(), [160, 160, 1]);
    assert_eq!(halved.probe()?.observation_space.shape(), [80, 80, 1]);
    for steps in [0, 90] {
        let whole = pong_frames(&whole, steps)?;
        let (same_size, halved) = (pong_frames(&same_size, steps)?, pong_frames(&halved, steps)?);
        // At the screen's resolution the crop is rows 34..194 of the whole screen.
        assert_eq!(same_size, whole[34 * 160..194 * 160], "after {steps} steps");
        // At half of it each pixel is the mean of a 2x2 block, rounded half to even.
        let pixel = |r: usize, c: usize| whole[(34 + r) * 160 + c];
        for (i, &p) in halved.iter().enumerate() {
            let (r, c) = (2 * (i / 80), 2 * (i % 80));
            let sum = pixel(r, c) + pixel(r, c + 1) + pixel(r + 1, c) + pixel(r + 1, c + 1);
            assert_eq!(p, (sum / 4.0).round_ties_even(), "pixel {i} after {steps} steps");
        }
    }
    // The game is on: the ball or a paddle moved.
    assert_ne!(pong_frames(&halved, 0)?, pong_frames(&halved, 90)?);
    Ok(())
}

#[test]
fn cropped_frames_are_stacked_the_first_repeated_before_a_game() -> TestResult {
    let crop = serde_json::json!({ "top": 34, "bottom": 16 });
    let pool = pong(&[("crop", crop), ("img_height", 42.into()), ("img_width", 42.into())]);
    assert_eq!(pool.probe()?.observation_space.shape(), [42, 42, STACK]);
    let at = |steps| pong_frames(&pool, steps);
    let (first, later) = (at(0)?, at(90)?);
    for c in 0..STACK {
        assert_eq!(channel(&first, c), channel(&first, STACK - 1), "channel {c} at reset");
    }
    // Each channel is the newest frame of an earlier step.
    for back in 0..STACK {
        assert_eq!(channel(&later, STACK - 1 - back), channel(&at(90 - back)?, STACK - 1));
    }
    Ok(())
}

#[test]
fn a_crop_that_leaves_no_pixels_fails_the_worker_with_the_key() -> TestResult {
    let pool = pong(&[("crop", serde_json::json!({ "left": 100, "right": 60 }))]);
    let message = pool.probe().err().map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("env_config.crop"), "{message}");
    Ok(())
}
