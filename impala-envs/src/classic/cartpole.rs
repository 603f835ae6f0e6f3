//! CartPole-v1 (Barto, Sutton & Anderson), as Gymnasium's `CartPoleEnv`.

use super::{flat_box, Episode, ResetRng, StatefulEnv};
use crate::kwargs::Kwargs;
use crate::Registration;
use impala_core::{Env, EnvSpec, Result, Space, StepOutcome};

const GRAVITY: f64 = 9.8;
const MASSCART: f64 = 1.0;
const MASSPOLE: f64 = 0.1;
const TOTAL_MASS: f64 = MASSPOLE + MASSCART;
const LENGTH: f64 = 0.5; // half the pole's length
const POLEMASS_LENGTH: f64 = MASSPOLE * LENGTH;
const FORCE_MAG: f64 = 10.0;
const TAU: f64 = 0.02;
const THETA_THRESHOLD_RADIANS: f64 = 12.0 * 2.0 * std::f64::consts::PI / 360.0;
const X_THRESHOLD: f64 = 2.4;

/// Keyword arguments of `gymnasium.make("CartPole-v1", ...)`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CartPoleConfig {
    /// Reward 0 per step and -1 on termination instead of +1 per step (Gymnasium's
    /// `sutton_barto_reward`).
    pub sutton_barto_reward: bool,
}

/// A pole balanced on a cart: actions `0` (push left) and `1` (push right), observation
/// `[x, x_dot, theta, theta_dot]`, reward +1 per step including the terminating one; terminates
/// when `|x| > 2.4` or `|theta| > 12 degrees`. Reset draws the state from `U(-0.05, 0.05)^4`.
///
/// Gymnasium warns and returns reward 0 when stepped after termination; this env returns
/// [`impala_core::CoreError::NeedsReset`] instead, as the [`Env`] trait requires.
///
/// ```
/// use impala_core::Env;
/// use impala_envs::{CartPole, CartPoleConfig};
///
/// let mut env = CartPole::new(CartPoleConfig::default());
/// let mut obs = [0.0f32; 4];
/// env.reset(Some(0), &mut obs)?;
/// let outcome = env.step(&[1.0], &mut obs)?;
/// assert_eq!(outcome.reward, 1.0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct CartPole {
    episode: Episode,
    config: CartPoleConfig,
    state: [f64; 4],
    rng: ResetRng,
}

impl CartPole {
    /// The Gymnasium id.
    pub const ID: &'static str = "CartPole-v1";

    /// `CartPole-v1` as Gymnasium registers it (500 steps, solved at 475), taking
    /// `sutton_barto_reward`.
    pub(crate) fn registration() -> Registration {
        Registration::native(Self::ID, 500, |args: &Kwargs<'_>| {
            let sutton_barto_reward = args.bool("sutton_barto_reward", false)?;
            Ok(Self::new(CartPoleConfig { sutton_barto_reward }))
        })
        .reward_threshold(475.0)
        .config_keys(["sutton_barto_reward"])
    }

    /// A CartPole that must be reset before its first step.
    pub fn new(config: CartPoleConfig) -> Self {
        let theta_high = (THETA_THRESHOLD_RADIANS * 2.0) as f32;
        let high = vec![(X_THRESHOLD * 2.0) as f32, f32::INFINITY, theta_high, f32::INFINITY];
        let low = high.iter().map(|h| -h).collect();
        Self {
            episode: Episode::new(Self::ID, flat_box(low, high), Space::Discrete(2)),
            config,
            state: [0.0; 4],
            rng: ResetRng::new(),
        }
    }

    fn write_obs(&self, obs: &mut [f32]) {
        for (o, s) in obs.iter_mut().zip(self.state) {
            *o = s as f32;
        }
    }
}

impl Env for CartPole {
    fn spec(&self) -> &EnvSpec {
        &self.episode.spec
    }

    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> Result<()> {
        self.episode.check(obs, false)?;
        self.rng.reseed(seed);
        for s in &mut self.state {
            *s = self.rng.uniform(-0.05, 0.05);
        }
        self.episode.start();
        self.write_obs(obs);
        Ok(())
    }

    #[inline]
    fn step(&mut self, action: &[f32], obs: &mut [f32]) -> Result<StepOutcome> {
        self.episode.check(obs, true)?;
        let action = self.episode.discrete_action(action)?;
        let [mut x, mut x_dot, mut theta, mut theta_dot] = self.state;
        let force = if action == 1 { FORCE_MAG } else { -FORCE_MAG };
        let costheta = theta.cos();
        let sintheta = theta.sin();
        // The same expressions, in the same order, as Gymnasium's `step`.
        let temp = (force + POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / TOTAL_MASS;
        let thetaacc = (GRAVITY * sintheta - costheta * temp)
            / (LENGTH * (4.0 / 3.0 - MASSPOLE * (costheta * costheta) / TOTAL_MASS));
        let xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS;
        // Gymnasium's default `kinematics_integrator = "euler"`.
        x += TAU * x_dot;
        x_dot += TAU * xacc;
        theta += TAU * theta_dot;
        theta_dot += TAU * thetaacc;
        self.state = [x, x_dot, theta, theta_dot];

        let terminated = !(-X_THRESHOLD..=X_THRESHOLD).contains(&x)
            || !(-THETA_THRESHOLD_RADIANS..=THETA_THRESHOLD_RADIANS).contains(&theta);
        let reward = match (self.config.sutton_barto_reward, terminated) {
            (false, _) => 1.0,
            (true, false) => 0.0,
            (true, true) => -1.0,
        };
        self.episode.end_if(terminated);
        self.write_obs(obs);
        Ok(StepOutcome { reward, terminated, truncated: false })
    }
}

impl StatefulEnv for CartPole {
    fn state(&self) -> &[f64] {
        &self.state
    }

    fn reset_to_state(&mut self, state: &[f64], obs: &mut [f32]) -> Result<()> {
        self.episode.check(obs, false)?;
        self.episode.check_state(state, 4)?;
        self.state.copy_from_slice(state);
        self.episode.start();
        self.write_obs(obs);
        Ok(())
    }
}
