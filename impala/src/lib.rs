//! RLlib's IMPALA algorithm as a library: [`Impala`] (RLlib's `Impala` with its
//! `training_step`), built from a validated config with any environment, iteration results
//! under RLlib's names, stop criteria, checkpoints, evaluation, and Ray Tune-style run folders
//! ([`run`]). The `impala` command is a thin layer over this crate.
//!
//! Train an env of your own: implement [`core::Env`] and hand a factory to the builder.
//!
//! ```
//! use impala::core::{CoreError, Env, EnvSpec, Space, StepOutcome};
//! use impala::config::ImpalaConfig;
//! use impala::Impala;
//!
//! /// Walk right to the end of a corridor of 5 cells (action 1) for a reward of 1, within 50
//! /// steps.
//! struct Corridor { spec: EnvSpec, pos: usize, t: usize }
//! impl Env for Corridor {
//!     fn spec(&self) -> &EnvSpec { &self.spec }
//!     fn reset(&mut self, _seed: Option<u64>, obs: &mut [f32]) -> Result<(), CoreError> {
//!         (self.pos, self.t) = (0, 0);
//!         obs[0] = 0.0;
//!         Ok(())
//!     }
//!     fn step(&mut self, action: &[f32], obs: &mut [f32]) -> Result<StepOutcome, CoreError> {
//!         self.pos = if action[0] > 0.5 { self.pos + 1 } else { self.pos.saturating_sub(1) };
//!         self.t += 1;
//!         obs[0] = self.pos as f32;
//!         let terminated = self.pos == 4;
//!         let reward = f64::from(u8::from(terminated));
//!         Ok(StepOutcome { reward, terminated, truncated: self.t == 50 && !terminated })
//!     }
//! }
//!
//! let mut config = ImpalaConfig::default();
//! config.env = "Corridor".into();
//! config.num_env_runners = 1;
//! config.min_time_s_per_iteration = 0.2;
//! config.model.fcnet_hiddens = vec![16];
//! let mut algo = Impala::builder(config.validate()?)
//!     .env(|_ctx| {
//!         let spec = EnvSpec {
//!             id: "Corridor".into(),
//!             observation_space: Space::continuous(vec![0.0], vec![4.0])?,
//!             action_space: Space::Discrete(2),
//!             max_episode_steps: Some(50),
//!         };
//!         Ok(Box::new(Corridor { spec, pos: 0, t: 0 }) as Box<dyn Env>)
//!     })
//!     .build()?;
//! let result = algo.train()?;
//! assert_eq!(result.training_iteration, 1);
//! assert!(result.num_env_steps_sampled > 0);
//! algo.stop()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Where RLlib's names live: `Impala.training_step` is [`Impala`]'s step loop;
//! `EnvRunnerGroup`, `AggregatorWorker`, `MixInMultiAgentReplayBuffer`, `LearnerThread` /
//! `MultiGPULearnerThread` / `MinibatchBuffer` and V-trace are in the re-exported
//! [`sampler`], [`replay`], [`learner`] and [`vtrace`] crates; `ImpalaConfig` and its
//! validation in [`config`].
#![deny(missing_docs)]

mod algorithm;
mod budget;
mod builder;
pub mod checkpoint;
mod error;
mod evaluate_checkpoint;
mod evaluation;

pub mod logging;
mod metrics;
mod module_owner;
mod policies;
mod policy;
pub mod remote;
mod result;
pub mod run;
mod run_envs;
mod runners;
pub mod settings;
mod source;
mod stop;
mod torchscript;
mod trainable;

pub use algorithm::Impala;
pub use builder::{check_environment, run_policy_specs, ImpalaBuilder};
pub use checkpoint::{AlgorithmState, Counters};
pub use error::{error_chain, one_line, ImpalaError, Result};
pub use evaluate_checkpoint::{evaluate_checkpoint, evaluate_checkpoint_with_env};
pub use metrics::{peak_rss_mib, EpisodeSummary, EpisodeWindow};
pub use policy::TrainedPolicy;
pub use result::{
    flatten, EvaluationResult, IterationResult, LearnerQueueInfo, Perf, PolicyLearnerInfo,
    ResultInfo, DEFAULT_POLICY_ID,
};
pub use run::files::{
    params_env, read_result_lines, read_results, write_params, PARAMS_FILE, PROGRESS_FILE,
    RESULT_FILE,
};
pub use run::logger::ResultLogger;
pub use run::tensorboard::{self, EventWriter};
pub use runners::{EnvRunnerGroup, PolicyFragment};
pub use source::{ConfigSource, EXAMPLE_CONFIGS};
pub use stop::StopCriteria;
/// Where a [`TrainedPolicy`] runs (libtorch's device: `Device::Cpu`, `Device::Cuda(i)`).
pub use tch::Device;
pub use trainable::Trainable;

/// `ImpalaConfig`: every RLlib option, builder groups, files, validation.
pub use impala_config as config;
/// The shared vocabulary: `Env`, spaces, `SampleBatch`, `Policy`, `Weights`.
pub use impala_core as core;
/// Native environments, the env registry and wrappers.
pub use impala_envs as envs;
/// Python (Gymnasium, PettingZoo) envs in env worker processes, and the interpreter they run in.
pub use impala_gym as gym;
/// Models, the V-trace loss and the learner threads (libtorch).
pub use impala_learner as learner;
/// Where the time goes: wall time per thread and activity (`impala train --profile`).
pub use impala_profile as profile;
/// RLlib's mix-in replay buffer.
pub use impala_replay as replay;
/// Runner slots for env runners in other processes or on other hosts, for any transport.
pub use impala_runner_pool as runner_pool;
/// Env runners, the runner seam, weight broadcast and the batching stage.
pub use impala_sampler as sampler;
/// V-trace on slices, without libtorch.
pub use impala_vtrace as vtrace;

/// The README's code blocks, run as doctests so the documented usage keeps working.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
