//! Gymnasium's classic-control environments, ported operation for operation.
//!
//! Each env keeps its internal state in `f64` (as Gymnasium's numpy `float64` state) and evaluates
//! the same expressions in the same order, so trajectories match Gymnasium's to the last bits
//! (both call the platform's `sin`/`cos`/`pow`; see [`numpy`] for the two numpy operations that
//! are not the obvious Rust ones). Observations are cast to `f32` as Gymnasium returns
//! `float32` arrays. Time limits are not part of the raw envs: [`crate::make`] wraps them in
//! [`crate::TimeLimit`] as `gymnasium.make` does.

mod acrobot;
mod cartpole;
mod mountain_car;
mod numpy;
mod pendulum;

pub use acrobot::Acrobot;
pub use cartpole::{CartPole, CartPoleConfig};
pub use mountain_car::{MountainCar, MountainCarConfig};
pub use pendulum::{Pendulum, PendulumConfig};

use impala_core::{CoreError, Env, EnvSpec, Result, Space};
use rand::{rngs::SmallRng, Rng, SeedableRng};

/// An environment whose physical state can be read and set, as Gymnasium's
/// `env.unwrapped.state`. Parity tests replay Gymnasium's recorded start states through it.
pub trait StatefulEnv: Env {
    /// The internal state (`f64`, Gymnasium's layout, e.g. `[x, x_dot, theta, theta_dot]`).
    fn state(&self) -> &[f64];

    /// Starts a new episode from `state` instead of a random one and writes its observation,
    /// as Gymnasium's `reset` would from that state (Acrobot's is rounded to `f32`, the type of
    /// Gymnasium's reset state).
    fn reset_to_state(&mut self, state: &[f64], obs: &mut [f32]) -> Result<()>;
}

/// The reset RNG of one env: seeded by `reset(Some(seed))`, from OS entropy until then (as
/// Gymnasium's `np_random`). Draws are not numpy's; only the distributions match.
#[derive(Debug, Clone)]
pub(crate) struct ResetRng(SmallRng);

impl ResetRng {
    pub(crate) fn new() -> Self {
        Self(SmallRng::from_os_rng())
    }

    /// Reseeds on `Some(seed)`, as Gymnasium's `reset(seed=...)`.
    pub(crate) fn reseed(&mut self, seed: Option<u64>) {
        if let Some(seed) = seed {
            self.0 = SmallRng::seed_from_u64(seed);
        }
    }

    /// A draw from `U[low, high)`, computed as numpy's `uniform`: `low + (high - low) * U[0, 1)`.
    pub(crate) fn uniform(&mut self, low: f64, high: f64) -> f64 {
        low + (high - low) * self.0.random::<f64>()
    }
}

/// Episode bookkeeping shared by the classic envs: the spec and whether a reset is due.
#[derive(Debug, Clone)]
pub(crate) struct Episode {
    pub(crate) spec: EnvSpec,
    obs_dim: usize,
    /// `n` of a `Discrete(n)` action space (0 otherwise).
    num_actions: usize,
    needs_reset: bool,
}

impl Episode {
    pub(crate) fn new(id: &str, observation_space: Space, action_space: Space) -> Self {
        let spec = EnvSpec {
            id: id.to_string(),
            observation_space,
            action_space,
            max_episode_steps: None,
        };
        let num_actions = match spec.action_space {
            Space::Discrete(n) => n,
            _ => 0,
        };
        Self { obs_dim: spec.observation_space.flat_dim(), num_actions, spec, needs_reset: true }
    }

    /// Checks the observation buffer and, for `step`, that an episode is running.
    #[inline]
    pub(crate) fn check(&self, obs: &[f32], stepping: bool) -> Result<()> {
        let expected = self.obs_dim;
        if obs.len() != expected {
            return Err(CoreError::ShapeMismatch {
                what: "observation buffer".into(),
                expected,
                got: obs.len(),
            });
        }
        if stepping && self.needs_reset {
            return Err(CoreError::NeedsReset { env: self.spec.id.clone() });
        }
        Ok(())
    }

    /// Checks a state given to `reset_to_state`.
    pub(crate) fn check_state(&self, state: &[f64], expected: usize) -> Result<()> {
        if state.len() != expected {
            return Err(CoreError::ShapeMismatch {
                what: "state".into(),
                expected,
                got: state.len(),
            });
        }
        if state.iter().any(|v| !v.is_finite()) {
            return Err(CoreError::Env {
                env: self.spec.id.clone(),
                reason: format!("state must be finite, got {state:?}"),
            });
        }
        Ok(())
    }

    pub(crate) fn start(&mut self) {
        self.needs_reset = false;
    }

    /// Records the step's outcome: a terminated episode must be reset before the next step.
    #[inline]
    pub(crate) fn end_if(&mut self, terminated: bool) {
        self.needs_reset = terminated;
    }

    /// Reads a `Discrete(n)` action: a fast path for valid ones, [`Space::check_action`]'s
    /// error otherwise.
    #[inline]
    pub(crate) fn discrete_action(&self, action: &[f32]) -> Result<usize> {
        if let [a] = *action {
            // The saturating cast maps negatives and NaN to 0; the round trip rejects those
            // and fractions.
            let i = a as usize;
            if i < self.num_actions && i as f32 == a {
                return Ok(i);
            }
        }
        self.spec.action_space.check_action(action)?;
        Ok(action[0] as usize) // not reached: the fast path takes every valid action
    }
}

/// A `Box` space from `f32` bounds, with a flat shape.
pub(crate) fn flat_box(low: Vec<f32>, high: Vec<f32>) -> Space {
    let shape = vec![low.len()];
    Space::Box { low, high, shape }
}
