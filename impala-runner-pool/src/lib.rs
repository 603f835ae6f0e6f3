//! Env runners in other processes or on other hosts (RLlib's remote env runners), for any
//! transport. On the driver a [`RunnerPool`] holds *runner slots*: its [`PoolLauncher`] is an
//! [`impala_sampler::EnvRunnerLauncher`], so in-flight caps, weight broadcast, restarts and
//! counting stay the [`EnvRunnerGroup`](impala_sampler::EnvRunnerGroup)'s, and a transport's
//! session turns what it hears into calls on a [`Claim`]: claim a slot, take the group's work
//! (the newest weights, samples), say the runner is ready, deliver its fragments, report it
//! failed or lost. Runners that find no free slot wait as spares and take the slots the group
//! relaunches after a failure. On the runner's side the slot is an [`Assignment`] that builds
//! the env runner ([`Assignment::build`], checking its env against the driver's), which the
//! sampler's [`serve_on_thread`](impala_sampler::serve_on_thread) serves. A transport (gRPC in
//! `impala-remote`, a pipe, a Ray actor) only moves these messages.
//!
//! ```
//! use std::num::NonZeroUsize;
//! use std::sync::Arc;
//! use impala_core::{CoreError, Env, EnvSpec, Policy, Space, StepOutcome, Weights};
//! use impala_runner_pool::{BuildRunner, BuiltRunner, RunEnv, RunSession, RunnerPool, Wakeup};
//! use impala_sampler::{
//!     EnvFactory, EnvRunner, EnvRunnerGroup, EnvRunnerGroupSettings, EnvRunnerSettings,
//!     Fragment, RandomPolicy,
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
//!
//! // The driver: a runner group whose one member is a slot of the pool.
//! let pool = RunnerPool::new();
//! let env = RunEnv::Single(spec.clone());
//! let run = RunSession { env, session: Vec::new(), compress_observations: false };
//! let settings = EnvRunnerGroupSettings { num_env_runners: 1, ..Default::default() };
//! let launcher = Box::new(pool.launcher(run));
//! let weights = vec![Arc::new(Weights::new(1, vec![]))]; // policy 0's, sent to each runner
//! let mut group = EnvRunnerGroup::<Fragment>::with_launcher(&settings, launcher, weights)?;
//!
//! // A transport's session claims the slot and hands its runner the assignment and weights...
//! let nothing_waits: Wakeup = Arc::new(|| {});
//! let mut claim = pool.claim(None, &nothing_waits)?.ok_or("no free slot")?;
//! let weights: Vec<_> = claim.take_work().map(|work| work.weights).unwrap_or_default();
//! let weights = weights.into_iter().map(|(_policy, w)| w).collect();
//! // ... the runner (here in this process) builds its env runner and is ready ...
//! let walk = spec.clone();
//! let build: BuildRunner = Arc::new(move |assignment, _weights| {
//!     let (walk, policy_spec) = (walk.clone(), walk.clone());
//!     let envs: EnvFactory =
//!         Arc::new(move |_| Ok(Box::new(Walk { spec: walk.clone(), t: 0 }) as Box<dyn Env>));
//!     let settings = EnvRunnerSettings {
//!         rollout_fragment_length: NonZeroUsize::new(10).ok_or("zero")?,
//!         ..Default::default()
//!     };
//!     let policy = RandomPolicy::new(&policy_spec, 0);
//!     EnvRunner::build(&settings, assignment.runner_id, assignment.incarnation, &envs, |_| {
//!         Ok(Box::new(policy) as Box<dyn Policy>)
//!     })
//!     .map(|runner| BuiltRunner::Single(Box::new(runner)))
//!     .map_err(|e| e.to_string())
//! });
//! let BuiltRunner::Single(mut runner) = claim.assignment().build(&build, weights)? else {
//!     return Err("a single-agent run builds a single-agent runner".into());
//! };
//! claim.ready();
//! // ... and samples what the group asked for; its fragments reach the group.
//! let asked = claim.take_work().map_or(0, |work| work.samples);
//! for _ in 0..asked {
//!     claim.deliver(runner.sample()?);
//! }
//! let fragments = group.sample()?;
//! assert!(asked > 0 && fragments.len() == asked as usize);
//! assert!(fragments.iter().all(|f| f.runner_id == 1 && f.batch.env_steps() == 10));
//! assert_eq!(pool.num_ready(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod error;
mod pool;
mod runner;
mod transport;

pub use error::{PoolError, Result};
pub use pool::{Claim, Lost, PoolLauncher, RunSession, RunnerPool, Wakeup, Work};
pub use runner::{Assignment, BuildRunner, BuiltRunner, RunEnv};
pub use transport::RunnerTransport;

/// The README's snippet, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
