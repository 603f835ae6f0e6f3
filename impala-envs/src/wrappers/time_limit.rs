//! Gymnasium's `TimeLimit`.

use crate::{EnvError, StatefulEnv};
use impala_core::{CoreError, Env, EnvSpec, Result, StepOutcome};

/// Truncates episodes after `max_episode_steps` steps (Gymnasium's `TimeLimit`, which
/// `gymnasium.make` adds from the registered `max_episode_steps`). An episode that terminates on
/// its last allowed step reports both `terminated` and `truncated`, as Gymnasium does.
///
/// ```
/// use impala_core::Env;
/// use impala_envs::{Pendulum, PendulumConfig, TimeLimit};
///
/// let mut env = TimeLimit::new(Pendulum::new(PendulumConfig::default()), 3)?;
/// let mut obs = [0.0f32; 3];
/// env.reset(Some(1), &mut obs)?;
/// let truncated: Vec<bool> =
///     (0..3).map(|_| env.step(&[0.0], &mut obs).map(|o| o.truncated)).collect::<Result<_, _>>()?;
/// assert_eq!(truncated, [false, false, true]);
/// assert!(env.step(&[0.0], &mut obs).is_err()); // must reset first
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct TimeLimit<E> {
    env: E,
    spec: EnvSpec,
    max_episode_steps: usize,
    elapsed_steps: usize,
    needs_reset: bool,
}

impl<E: Env> TimeLimit<E> {
    /// Wraps `env`; its spec's `max_episode_steps` becomes `max_episode_steps` (at least 1).
    pub fn new(env: E, max_episode_steps: usize) -> crate::Result<Self> {
        if max_episode_steps == 0 {
            return Err(EnvError::InvalidSetup {
                what: "TimeLimit".into(),
                reason: "max_episode_steps must be at least 1".into(),
            });
        }
        let spec = EnvSpec { max_episode_steps: Some(max_episode_steps), ..env.spec().clone() };
        Ok(Self { env, spec, max_episode_steps, elapsed_steps: 0, needs_reset: true })
    }

    /// Steps taken in the current episode.
    pub fn elapsed_steps(&self) -> usize {
        self.elapsed_steps
    }

    /// The wrapped env.
    pub fn inner(&self) -> &E {
        &self.env
    }

    fn start(&mut self) {
        self.elapsed_steps = 0;
        self.needs_reset = false;
    }
}

impl<E: Env> Env for TimeLimit<E> {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> Result<()> {
        self.env.reset(seed, obs)?;
        self.start();
        Ok(())
    }

    #[inline]
    fn step(&mut self, action: &[f32], obs: &mut [f32]) -> Result<StepOutcome> {
        if self.needs_reset {
            return Err(CoreError::NeedsReset { env: self.spec.id.clone() });
        }
        let mut outcome = self.env.step(action, obs)?;
        self.elapsed_steps += 1;
        if self.elapsed_steps >= self.max_episode_steps {
            outcome.truncated = true;
        }
        self.needs_reset = outcome.done();
        Ok(outcome)
    }

    fn info(&self) -> &[u8] {
        self.env.info()
    }
}

impl<E: StatefulEnv> StatefulEnv for TimeLimit<E> {
    fn state(&self) -> &[f64] {
        self.env.state()
    }

    fn reset_to_state(&mut self, state: &[f64], obs: &mut [f32]) -> Result<()> {
        self.env.reset_to_state(state, obs)?;
        self.start();
        Ok(())
    }
}
