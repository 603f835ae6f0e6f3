//! Frame stacking (Gymnasium's `FrameStackObservation`).

use super::check_obs;
use crate::EnvError;
use impala_core::{Env, EnvSpec, Result, Space, StepOutcome};

/// Observes the last `num_stack` observations, oldest first, as Gymnasium's
/// `FrameStackObservation(env, stack_size)` with its default `padding_type="reset"`: the
/// observation space gains a leading axis of `num_stack` (`[k, ...shape]`, row-major) and after a
/// reset every slot holds the reset observation.
///
/// ```
/// use impala_core::Env;
/// use impala_envs::{CartPole, CartPoleConfig, FrameStack};
///
/// let mut env = FrameStack::new(CartPole::new(CartPoleConfig::default()), 4)?;
/// assert_eq!(env.spec().observation_space.shape(), [4, 4]);
/// let mut obs = [0.0f32; 16];
/// env.reset(Some(0), &mut obs)?;
/// env.step(&[1.0], &mut obs)?;
/// assert_eq!(obs[4..8], obs[0..4]); // two copies of the reset observation, then the new one
/// assert_ne!(obs[8..12], obs[12..16]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct FrameStack<E> {
    env: E,
    spec: EnvSpec,
    frame_dim: usize,
    /// The stacked observation, `[num_stack, frame_dim]`, oldest first.
    frames: Vec<f32>,
    /// The newest frame, written here first so a failed step leaves the stack intact.
    scratch: Vec<f32>,
}

impl<E: Env> FrameStack<E> {
    /// Wraps `env`, whose observation space must be a `Box`; `num_stack` must be at least 1.
    pub fn new(env: E, num_stack: usize) -> crate::Result<Self> {
        let invalid = |reason: String| EnvError::InvalidSetup { what: "FrameStack".into(), reason };
        if num_stack == 0 {
            return Err(invalid("num_stack must be at least 1".into()));
        }
        let Space::Box { low, high, shape } = &env.spec().observation_space else {
            return Err(invalid(format!(
                "the observation space must be a Box, got {}",
                env.spec().observation_space
            )));
        };
        let observation_space = Space::Box {
            low: low.repeat(num_stack),
            high: high.repeat(num_stack),
            shape: std::iter::once(num_stack).chain(shape.iter().copied()).collect(),
        };
        let frame_dim = low.len();
        let spec = EnvSpec { observation_space, ..env.spec().clone() };
        Ok(Self {
            env,
            spec,
            frame_dim,
            frames: vec![0.0; frame_dim * num_stack],
            scratch: vec![0.0; frame_dim],
        })
    }
}

impl<E: Env> Env for FrameStack<E> {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> Result<()> {
        check_obs(obs, self.frames.len())?;
        self.env.reset(seed, &mut self.scratch)?;
        for frame in self.frames.chunks_exact_mut(self.frame_dim) {
            frame.copy_from_slice(&self.scratch);
        }
        obs.copy_from_slice(&self.frames);
        Ok(())
    }

    fn step(&mut self, action: &[f32], obs: &mut [f32]) -> Result<StepOutcome> {
        check_obs(obs, self.frames.len())?;
        let outcome = self.env.step(action, &mut self.scratch)?;
        self.frames.copy_within(self.frame_dim.., 0);
        let newest = self.frames.len() - self.frame_dim;
        self.frames[newest..].copy_from_slice(&self.scratch);
        obs.copy_from_slice(&self.frames);
        Ok(outcome)
    }

    fn info(&self) -> &[u8] {
        self.env.info()
    }
}
