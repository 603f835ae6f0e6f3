#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod batch;
mod error;
mod mixin;
mod ratio;
mod store;

pub use batch::ReplayBatch;
pub use error::{ReplayError, Result};
pub use mixin::{
    MixInReplay, MixInReplayConfig, Replay, ReplayMode, ALL_POLICIES, DEFAULT_POLICY_ID,
};
pub use ratio::replay_ratio_from_proportion;
pub use store::SimpleReplayBuffer;
