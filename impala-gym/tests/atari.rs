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
