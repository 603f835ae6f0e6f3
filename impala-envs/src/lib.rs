//! Native environments that match Gymnasium step for step, and the helpers IMPALA's env runners
//! step them with.
//!
//! - [`CartPole`] (`CartPole-v1`), [`Acrobot`] (`Acrobot-v1`), [`MountainCar`] (`MountainCar-v0`)
//!   and [`Pendulum`] (`Pendulum-v1`): Gymnasium's classic-control dynamics in `f64`, observations
//!   in `f32`, same spaces, rewards, termination and reset distributions. Tests replay
//!   trajectories recorded from Gymnasium (`scripts/record_env_fixtures.py`).
//! - [`CartPoleCrashing`] (`CartPoleCrashing-v1`): RLlib's `CartPoleCrashing`, a CartPole that
//!   fails and stalls at random (seeded), to test env runner fault tolerance.
//! - [`make`] creates them by id with an `env_config` (as `gymnasium.make`), time limit included;
//!   [`list`] describes them. [`register`] adds your own env under a new id (as
//!   `gymnasium.register`), which [`make`] and [`list`] then know for the rest of the process.
//! - [`VectorEnv`] steps N envs with automatic resets, keeping each finished episode's final
//!   observation (to bootstrap truncated episodes) and its [`impala_core::EpisodeStats`].
//! - Wrappers: [`TimeLimit`], [`FrameStack`], [`ClipReward`], [`NormalizeObservation`] (RLlib's
//!   [`MeanStdFilter`]).
//!
//! ```
//! use impala_envs::{make, EnvConfig};
//!
//! let mut env = make("CartPole-v1", &EnvConfig::new())?;
//! let mut obs = vec![0.0f32; env.spec().observation_space.flat_dim()];
//! env.reset(Some(42), &mut obs)?;
//! let mut episode_return = 0.0;
//! loop {
//!     let action = if obs[2] + obs[3] > 0.0 { 1.0 } else { 0.0 }; // lean into the fall
//!     let outcome = env.step(&[action], &mut obs)?;
//!     episode_return += outcome.reward;
//!     if outcome.done() {
//!         break;
//!     }
//! }
//! assert!(episode_return >= 1.0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod classic;
mod crashing;
mod error;
mod kwargs;
mod multi_agent;
mod registry;
mod vector;
mod wrappers;

pub use classic::{
    Acrobot, CartPole, CartPoleConfig, MountainCar, MountainCarConfig, Pendulum, PendulumConfig,
    StatefulEnv,
};
pub use crashing::{CartPoleCrashing, CartPoleCrashingConfig};
pub use error::{EnvError, Result};
pub use multi_agent::{
    is_multi_agent, make_multi_agent, HalfObserved, MultiAgentCartPole, SignalingGame,
    SignalingReward, MULTI_AGENT_ENVS,
};
pub use registry::{
    contains, list, make, make_for_worker, make_stateful, register, reward_threshold, EnvConfig,
    EnvInfo, Registration, MAX_EPISODE_STEPS,
};
pub use vector::{VectorEnv, VectorStep};
pub use wrappers::{
    ClipReward, FrameStack, MeanStdFilter, NormalizeObservation, RunningStat, SharedMeanStdFilter,
    TimeLimit,
};

/// The README's snippet, run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
