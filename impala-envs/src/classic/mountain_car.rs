//! MountainCar-v0 (Moore's under-powered car), as Gymnasium's `MountainCarEnv`.

use super::{flat_box, Episode, ResetRng, StatefulEnv};
use crate::kwargs::Kwargs;
use crate::Registration;
use impala_core::{Env, EnvSpec, Result, Space, StepOutcome};

const MIN_POSITION: f64 = -1.2;
const MAX_POSITION: f64 = 0.6;
const MAX_SPEED: f64 = 0.07;
const GOAL_POSITION: f64 = 0.5;
const FORCE: f64 = 0.001;
const GRAVITY: f64 = 0.0025;

/// Keyword arguments of `gymnasium.make("MountainCar-v0", ...)`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct MountainCarConfig {
    /// The velocity the car must have at the flag (Gymnasium's `goal_velocity`, default 0).
    pub goal_velocity: f64,
}

/// A car in a valley that must rock back and forth to reach the flag: actions `0, 1, 2`
/// (accelerate left, none, right), observation `[position, velocity]`, reward -1 per step;
/// terminates at `position >= 0.5` with `velocity >= goal_velocity`. Reset draws the position
/// from `U(-0.6, -0.4)` with velocity 0.
///
/// ```
/// use impala_core::Env;
/// use impala_envs::{MountainCar, MountainCarConfig};
///
/// let mut env = MountainCar::new(MountainCarConfig::default());
/// let mut obs = [0.0f32; 2];
/// env.reset(Some(0), &mut obs)?;
/// assert_eq!(env.step(&[2.0], &mut obs)?.reward, -1.0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct MountainCar {
    episode: Episode,
    config: MountainCarConfig,
    state: [f64; 2],
    rng: ResetRng,
}

impl MountainCar {
    /// The Gymnasium id.
    pub const ID: &'static str = "MountainCar-v0";

    /// `MountainCar-v0` as Gymnasium registers it (200 steps, solved at -110), taking
    /// `goal_velocity`.
    pub(crate) fn registration() -> Registration {
        Registration::native(Self::ID, 200, |args: &Kwargs<'_>| {
            let goal_velocity = args.f64("goal_velocity", 0.0)?;
            Ok(Self::new(MountainCarConfig { goal_velocity }))
        })
        .reward_threshold(-110.0)
        .config_keys(["goal_velocity"])
    }

    /// A MountainCar that must be reset before its first step.
    pub fn new(config: MountainCarConfig) -> Self {
        let low = vec![MIN_POSITION as f32, -MAX_SPEED as f32];
        let high = vec![MAX_POSITION as f32, MAX_SPEED as f32];
        Self {
            episode: Episode::new(Self::ID, flat_box(low, high), Space::Discrete(3)),
            config,
            state: [0.0; 2],
            rng: ResetRng::new(),
        }
    }

    fn write_obs(&self, obs: &mut [f32]) {
        obs[0] = self.state[0] as f32;
        obs[1] = self.state[1] as f32;
    }
}

impl Env for MountainCar {
    fn spec(&self) -> &EnvSpec {
        &self.episode.spec
    }

    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> Result<()> {
        self.episode.check(obs, false)?;
        self.rng.reseed(seed);
        self.state = [self.rng.uniform(-0.6, -0.4), 0.0];
        self.episode.start();
        self.write_obs(obs);
        Ok(())
    }

    fn step(&mut self, action: &[f32], obs: &mut [f32]) -> Result<StepOutcome> {
        self.episode.check(obs, true)?;
        let action = self.episode.discrete_action(action)? as f64;
        let [mut position, mut velocity] = self.state;
        velocity += (action - 1.0) * FORCE + (3.0 * position).cos() * -GRAVITY;
        velocity = velocity.clamp(-MAX_SPEED, MAX_SPEED);
        position += velocity;
        position = position.clamp(MIN_POSITION, MAX_POSITION);
        if position == MIN_POSITION && velocity < 0.0 {
            velocity = 0.0;
        }
        self.state = [position, velocity];
        let terminated = position >= GOAL_POSITION && velocity >= self.config.goal_velocity;
        self.episode.end_if(terminated);
        self.write_obs(obs);
        Ok(StepOutcome { reward: -1.0, terminated, truncated: false })
    }
}

impl StatefulEnv for MountainCar {
    fn state(&self) -> &[f64] {
        &self.state
    }

    fn reset_to_state(&mut self, state: &[f64], obs: &mut [f32]) -> Result<()> {
        self.episode.check(obs, false)?;
        self.episode.check_state(state, 2)?;
        self.state.copy_from_slice(state);
        self.episode.start();
        self.write_obs(obs);
        Ok(())
    }
}
