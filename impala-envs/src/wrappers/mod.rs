//! Wrappers that change what an [`impala_core::Env`] returns, each a generic struct that is itself
//! an `Env`: time limits, frame stacking, reward clipping and observation normalisation.

mod clip_reward;
mod frame_stack;
mod normalize;
mod time_limit;

pub use clip_reward::ClipReward;
pub use frame_stack::FrameStack;
pub use normalize::{MeanStdFilter, NormalizeObservation, RunningStat, SharedMeanStdFilter};
pub use time_limit::TimeLimit;

use impala_core::{CoreError, Result};

/// Checks a caller's observation buffer against the wrapper's observation width.
#[inline]
fn check_obs(obs: &[f32], expected: usize) -> Result<()> {
    if obs.len() != expected {
        return Err(CoreError::ShapeMismatch {
            what: "observation buffer".into(),
            expected,
            got: obs.len(),
        });
    }
    Ok(())
}
