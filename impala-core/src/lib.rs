#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod batch;
mod env;
mod error;
mod machine;
mod obs;
mod policy;
mod space;
mod stats;
pub mod suggest;
mod weights;

pub use batch::SampleBatch;
pub use env::{Env, EnvSpec, StepOutcome};
pub use error::{CoreError, Result};
pub use machine::{gib, machine_memory_bytes};
pub use obs::Observations;
pub use policy::{Policy, PolicyInput, PolicyOutput};
pub use space::Space;
pub use stats::EpisodeStats;
pub use weights::{NamedTensor, Weights};
