//! Asynchronous env runners for IMPALA, with RLlib's sampling semantics: runner threads that each
//! step `num_envs_per_env_runner` environments with their own policy copy ([`EnvRunner`]), an
//! async manager with in-flight caps, collection timeouts, health tracking and restarts
//! ([`EnvRunnerGroup`], RLlib's `EnvRunnerGroup` + `FaultTolerantActorManager`), versioned weight
//! sync ([`EnvRunnerGroup::sync_weights`], [`WeightBroadcaster`]), and the mix-in replay +
//! concatenation into train batches ([`TrainBatchBuilder`]) on the driver or on aggregation
//! worker threads ([`AggregationWorkers`]), behind one API ([`TrainBatchAggregator`]).
//!
//! The crate has no libtorch: it drives any [`impala_core::Policy`]. [`RandomPolicy`] and
//! [`MlpPolicy`] are pure-Rust policies for debugging and benchmarks.
//!
//! Departures from the lead's interface sketch, all small:
//! - [`AggregationWorkers::submit`] returns `Result<(), SampleBatch>` and hands the batch back
//!   when every worker is at `max_requests_in_flight_per_aggregator_worker` (RLlib silently
//!   drops it there).
//! - Time limits are the environments' own (Gymnasium's `TimeLimit`, which `impala_envs::make`
//!   adds): runners step an [`impala_envs::VectorEnv`] and do not enforce
//!   `EnvSpec::max_episode_steps` themselves. Custom env factories wrap with
//!   `impala_envs::TimeLimit`.
//!
//! ```
//! use std::sync::Arc;
//! use impala_config::ImpalaConfig;
//! use impala_core::{CoreError, Env, EnvSpec, Policy, Space, StepOutcome};
//! use impala_sampler::{EnvFactory, EnvRunnerGroup, PolicyFactory, RandomPolicy, TrainBatchBuilder};
//!
//! /// Ten steps of reward 1, then a time-limit truncation.
//! struct Walk { spec: EnvSpec, t: usize }
//! impl Env for Walk {
//!     fn spec(&self) -> &EnvSpec { &self.spec }
//!     fn reset(&mut self, _: Option<u64>, obs: &mut [f32]) -> Result<(), CoreError> {
//!         self.t = 0;
//!         obs[0] = 0.0;
//!         Ok(())
//!     }
//!     fn step(&mut self, _: &[f32], obs: &mut [f32]) -> Result<StepOutcome, CoreError> {
//!         self.t += 1;
//!         obs[0] = self.t as f32;
//!         Ok(StepOutcome { reward: 1.0, terminated: false, truncated: self.t == 10 })
//!     }
//! }
//! let spec = EnvSpec {
//!     id: "Walk".into(),
//!     observation_space: Space::continuous(vec![0.0], vec![10.0])?,
//!     action_space: Space::Discrete(2),
//!     max_episode_steps: Some(10),
//! };
//! let (s1, s2) = (spec.clone(), spec);
//! let envs: EnvFactory = Arc::new(move |_| Ok(Box::new(Walk { spec: s1.clone(), t: 0 }) as Box<dyn Env>));
//! let policies: PolicyFactory =
//!     Arc::new(move |id| Ok(Box::new(RandomPolicy::new(&s2, id as u64)) as Box<dyn Policy>));
//!
//! let mut config = ImpalaConfig::default();
//! config.num_env_runners = 0; // sample on this thread, like RLlib's local worker
//! config.num_envs_per_env_runner = 4;
//! config.rollout_fragment_length = 25;
//! config.train_batch_size = 200;
//! let mut group = EnvRunnerGroup::new(&config, envs, policies)?;
//! let mut builder = TrainBatchBuilder::new(&config)?;
//! let mut train_batches = Vec::new();
//! while train_batches.is_empty() {
//!     for fragment in group.sample()? {
//!         train_batches.extend(builder.add(fragment.batch)?);
//!     }
//! }
//! assert_eq!(train_batches[0].env_steps(), 200);
//! assert_eq!(group.metrics().num_episodes, 20); // 4 envs x 50 steps / 10 steps per episode
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod aggregation;
mod builder;
mod context;
mod error;
mod group;
mod policies;
mod runner;
mod weights;

pub use aggregation::{AggregationWorkers, TrainBatchAggregator};
pub use builder::TrainBatchBuilder;
pub use context::{EnvContext, EnvFactory, PolicyFactory};
pub use error::{Result, SamplerError};
pub use group::{EnvRunnerGroup, EnvRunnerState, SamplerMetrics};
pub use policies::{MlpPolicy, RandomPolicy};
pub use runner::{EnvRunner, Fragment};
pub use weights::{policy_lag, WeightBroadcaster};

/// The README's snippet, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
