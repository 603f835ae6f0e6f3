//! Asynchronous env runners for IMPALA, with RLlib's sampling semantics: env runners that each
//! step `num_envs_per_env_runner` environments with their own policy copy ([`EnvRunner`], or
//! [`MultiAgentEnvRunner`] with a policy copy per policy), and the one group that drives either
//! kind ([`EnvRunnerGroup`], RLlib's `EnvRunnerGroup` + `FaultTolerantActorManager`): in-flight
//! caps, collection timeouts, health, restarts and versioned weight sync per policy
//! ([`WeightBroadcaster`]). The group is generic over the fragment it delivers
//! ([`RunnerFragment`]: [`Fragment`], or [`MultiAgentFragment`] with a batch per policy), so
//! fault tolerance and counting are written once for both. It talks to every runner through
//! one message seam ([`RunnerRequest`] / [`RunnerReply`], started by an [`EnvRunnerLauncher`]):
//! runner threads here ([`ThreadLauncher`], [`MultiAgentThreadLauncher`]), and runners in other
//! processes or hosts, plug in the same way. Sampled batches become train batches in one stage
//! ([`TrainBatchBuilder`]: mix-in replay, on the driver or on [`AggregationWorkers`], then
//! concatenation).
//!
//! The crate has no libtorch: it drives any [`impala_core::Policy`]. [`RandomPolicy`] is a
//! pure-Rust policy for debugging. Its settings ([`EnvRunnerGroupSettings`],
//! [`BatchingSettings`]) come from a validated config, or from `Default` plus fields.
//!
//! Time limits are the environments' own (Gymnasium's `TimeLimit`, which `impala_envs::make`
//! adds): runners step an [`impala_envs::VectorEnv`] and do not enforce
//! `EnvSpec::max_episode_steps` themselves. Custom env factories wrap with
//! `impala_envs::TimeLimit`.
//!
//! ```
//! use std::num::NonZeroUsize;
//! use std::sync::Arc;
//! use impala_core::{CoreError, Env, EnvSpec, Policy, Space, StepOutcome};
//! use impala_sampler::{
//!     BatchingSettings, EnvFactory, EnvRunnerGroup, EnvRunnerGroupSettings, PolicyFactory,
//!     RandomPolicy, TrainBatchBuilder,
//! };
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
//! let mut settings = EnvRunnerGroupSettings::default();
//! settings.num_env_runners = 0; // sample on this thread, like RLlib's local worker
//! settings.runner.num_envs = NonZeroUsize::new(4).ok_or("zero")?;
//! settings.runner.rollout_fragment_length = NonZeroUsize::new(25).ok_or("zero")?;
//! let batching =
//!     BatchingSettings { train_batch_size: NonZeroUsize::new(200).ok_or("zero")?, ..Default::default() };
//! let mut group = EnvRunnerGroup::new(&settings, envs, policies)?;
//! let mut builder = TrainBatchBuilder::new(&batching)?;
//! let (mut train_batches, mut episodes) = (Vec::new(), 0);
//! while train_batches.is_empty() {
//!     for fragment in group.sample()? {
//!         episodes += fragment.episodes.len();
//!         train_batches.extend(builder.add(fragment.batch)?);
//!     }
//! }
//! assert_eq!(train_batches[0].env_steps(), 200);
//! assert_eq!(episodes, 20); // 4 envs x 50 steps / 10 steps per episode
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod aggregation;
mod batching;
mod context;
mod error;
mod fragment;
mod group;
mod multi_agent;
mod policies;
mod runner;
mod seam;
mod settings;
mod streak;
mod threads;
mod weights;

pub use aggregation::{AggregationWorkers, ReplayParts};
pub use batching::TrainBatchBuilder;
pub use context::{stream_seed, EnvContext, EnvFactory, PolicyFactory};
pub use error::{panic_message, Result, SamplerError};
pub use fragment::RunnerFragment;
pub use group::{EnvRunnerGroup, EnvRunnerState, SamplerMetrics};
pub use multi_agent::{
    policy_specs, MultiAgentEnvFactory, MultiAgentEnvRunner, MultiAgentFragment,
    MultiAgentPolicyFactory, MultiAgentSettings,
};
pub use policies::RandomPolicy;
pub use runner::{EnvRunner, Fragment};
pub use seam::{
    serve, serve_on_thread, EnvRunnerHandle, EnvRunnerLauncher, MultiAgentThreadLauncher,
    ReplySender, RunnerMessage, RunnerReply, RunnerRequest, ServedRunner, ThreadLauncher,
};
pub use settings::{BatchingSettings, EnvRunnerGroupSettings, EnvRunnerSettings};
pub use streak::BROKEN_ENV_FAILURES;
pub use weights::{policy_lag, WeightBroadcaster};

/// The README's snippet, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
