//! Every option of RLlib's IMPALA, with RLlib's defaults.
#![deny(missing_docs)]

mod config;
mod model;
mod schedule;

pub use config::{DurationUnit, ImpalaConfig, LossReduction, OptType};
pub use model::{ConvFilter, ModelConfig};
pub use schedule::Schedule;
