//! Reward clipping (RLlib's `clip_rewards`).

use crate::{EnvError, StatefulEnv};
use impala_core::{Env, EnvSpec, Result, StepOutcome};

/// Clips every reward to `[-max_abs, max_abs]`, as RLlib's `clip_rewards=<float>` (with
/// `max_abs = 1`, the Atari convention, this equals RLlib's `clip_rewards=True` sign clipping
/// for integer rewards).
///
/// ```
/// use impala_core::Env;
/// use impala_envs::{ClipReward, Pendulum, PendulumConfig};
///
/// let mut env = ClipReward::new(Pendulum::new(PendulumConfig::default()), 1.0)?;
/// let mut obs = [0.0f32; 3];
/// env.reset(Some(0), &mut obs)?;
/// assert!(env.step(&[2.0], &mut obs)?.reward >= -1.0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct ClipReward<E> {
    env: E,
    max_abs: f64,
}

impl<E: Env> ClipReward<E> {
    /// Wraps `env`; `max_abs` must be positive.
    pub fn new(env: E, max_abs: f64) -> crate::Result<Self> {
        if max_abs.is_nan() || max_abs <= 0.0 {
            return Err(EnvError::InvalidSetup {
                what: "ClipReward".into(),
                reason: format!("the clip bound must be positive, got {max_abs}"),
            });
        }
        Ok(Self { env, max_abs })
    }
}

impl<E: Env> Env for ClipReward<E> {
    fn spec(&self) -> &EnvSpec {
        self.env.spec()
    }

    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> Result<()> {
        self.env.reset(seed, obs)
    }

    #[inline]
    fn step(&mut self, action: &[f32], obs: &mut [f32]) -> Result<StepOutcome> {
        let mut outcome = self.env.step(action, obs)?;
        outcome.reward = outcome.reward.clamp(-self.max_abs, self.max_abs);
        Ok(outcome)
    }

    fn info(&self) -> &[u8] {
        self.env.info()
    }
}

impl<E: StatefulEnv> StatefulEnv for ClipReward<E> {
    fn state(&self) -> &[f64] {
        self.env.state()
    }

    fn reset_to_state(&mut self, state: &[f64], obs: &mut [f32]) -> Result<()> {
        self.env.reset_to_state(state, obs)
    }
}
