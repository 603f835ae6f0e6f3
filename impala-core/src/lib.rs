//! The shared vocabulary of impala-rs: what an environment is ([`Env`], [`EnvSpec`], [`Space`]),
//! what actor-side inference is ([`Policy`]), what flows from env runners to the learner
//! ([`SampleBatch`], time-major rows of `rollout_fragment_length` steps) and back ([`Weights`]),
//! and the episode statistics the algorithm reports ([`EpisodeStats`]).
//!
//! This crate has no libtorch and almost no dependencies, so every other crate (and any user
//! crate that brings its own environment or policy) can depend on it cheaply, in the spirit of
//! ripgrep's trait-only `grep-matcher`.
//!
//! ```
//! use impala_core::{SampleBatch, Space};
//!
//! let obs_space = Space::continuous(vec![-1.0; 4], vec![1.0; 4])?;
//! let act_space = Space::Discrete(2);
//! // Two env rows of three steps each.
//! let batch = SampleBatch::zeros(3, 2, &obs_space, &act_space, 0);
//! assert_eq!(batch.env_steps(), 6);
//! assert_eq!(batch.obs.len(), 3 * 2 * 4);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod batch;
mod env;
mod error;
mod policy;
mod space;
mod stats;
mod weights;

pub use batch::SampleBatch;
pub use env::{Env, EnvSpec, StepOutcome};
pub use error::{CoreError, Result};
pub use policy::{Policy, PolicyInput, PolicyOutput};
pub use space::Space;
pub use stats::EpisodeStats;
pub use weights::{NamedTensor, Weights};
