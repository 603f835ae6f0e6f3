#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod batch;
mod conv;
mod custom_model;
mod env;
mod env_actions;
mod error;
mod machine;
mod multi_agent;
mod obs;
mod policy;
mod record;
mod schedule;
mod space;
mod stats;
pub mod suggest;
mod training;
mod weights;

pub use batch::SampleBatch;
pub use conv::ConvFilter;
pub use custom_model::{CustomModel, ResNetSettings};
pub use env::{Env, EnvSpec, StepOutcome};
pub use env_actions::EnvActions;
pub use error::{CoreError, Result};
pub use machine::{gib, machine_memory_bytes, machine_thread_room, ThreadRoom};
pub use multi_agent::{AgentSpec, AgentStep, MultiAgentEnv, MultiAgentSpec, MultiAgentStep};
pub use obs::Observations;
pub use policy::{Policy, PolicyInput, PolicyOutput};
pub use record::{AgentRecord, EpisodeRecord};
pub use schedule::Schedule;
pub use space::Space;
pub use stats::EpisodeStats;
pub use training::{
    Activation, GradClipBy, LearnerDeviceKind, LossReduction, OptType, Precision, UnknownActivation,
};
pub use weights::{NamedTensor, Weights};
