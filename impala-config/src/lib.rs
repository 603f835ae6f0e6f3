//! Every option of RLlib's IMPALA, with RLlib's defaults, builder groups, config files,
//! overrides, validation, schedules and the resource request.
//!
//! ```
//! use impala_config::{ConfigFormat, ImpalaConfig};
//!
//! // Builder groups, as RLlib's `config.training(lr=...).env_runners(...)`.
//! let mut config = ImpalaConfig::default()
//!     .environment(|e| e.env("CartPole-v1"))
//!     .training(|t| t.lr(3e-4).train_batch_size(500).grad_clip(20.0))
//!     .env_runners(|r| r.num_env_runners(4).rollout_fragment_length(50))
//!     .resources(|r| r.num_gpus(0.0))
//!     .reporting(|r| r.min_time_s_per_iteration(1.0))
//!     .debugging(|d| d.seed(Some(42)));
//!
//! // Command-line overrides go through the same typed path as files.
//! config.apply_override("training.entropy_coeff=0.005")?;
//!
//! // Files: TOML, YAML or JSON by extension; here through a string.
//! let text = config.to_string_as(ConfigFormat::Toml)?;
//! let loaded = ImpalaConfig::from_str_as(&text, ConfigFormat::Toml)?;
//! assert_eq!(loaded.config, config);
//!
//! // Validation collects every problem and returns warnings instead of printing them.
//! let validated = loaded.config.validate()?;
//! assert!(validated.warnings().is_empty());
//! println!("{}", validated.config().default_resource_request());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod config;
mod diagnostics;
mod error;
mod experiment;
mod io;
mod keys;
mod log_level;
mod model;
mod multi_agent;
mod plan;
mod resources;
mod serde_util;
mod validate;

pub use config::{DurationUnit, EnvBackend, EnvRunnerBackend, ImpalaConfig, PlacementStrategy};
pub use diagnostics::{Rule, Violation, Warning, WarningKind};
pub use error::{ConfigError, Origin, Position, Result};
pub use experiment::{experiment_in, Experiment, StopKey};
pub use impala_core::{
    Activation, ConvFilter, GradClipBy, LearnerDeviceKind, LossReduction, OptType, Precision,
    Schedule,
};
pub use io::{nearest_key, ConfigFormat, Loaded};
pub use keys::{
    alias, key_info, keys, model_key_info, model_keys, Alias, Debugging, EnvRunners, Environment,
    Evaluation, FaultTolerance, Group, KeyInfo, Learners, Model, MultiAgent, Reporting, Resources,
    Training, ALIASES,
};
pub use log_level::{LogLevel, UnknownLogLevel};
pub use model::ModelConfig;
pub use multi_agent::{CountStepsBy, MappingError, PolicyMap, DEFAULT_POLICY_ID};
pub use plan::LearnerPlan;
pub use resources::{Bundle, BundleRole, ResourceRequest};
pub use validate::{
    Durations, ModelActivations, ValidatedConfig, MAX_EVALUATION_EPISODES, MAX_SECONDS,
};

/// Runs the README's snippet as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
