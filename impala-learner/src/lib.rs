//! The learner side of IMPALA on libtorch (tch): the model seam ([`Model`], [`ModelFactory`])
//! with RLlib's catalog models, the IMPALA paper's ResNet and TorchScript modules, the V-trace loss of
//! RLlib's old-stack torch policy, its optimizers, the learner thread and the multi-GPU towers,
//! plus [`TorchPolicy`], the CPU inference copy env runners act with.
//!
//! - [`LearnerSettings`] (with [`ModelSettings`]), [`LearnerThreadSettings`],
//!   [`learner_devices`]: the little this crate reads, under RLlib's key names; the `impala`
//!   crate builds them from a validated config, and their `Default`s are RLlib's defaults, so
//!   the crate is used without an RLlib config.
//! - [`Learner`]: towers + optimizer(s) + loss; [`Learner::update`] is one SGD step on a
//!   time-major [`impala_core::SampleBatch`] and returns RLlib's [`LearnerStats`].
//! - [`LearnerHandle`]: the learner thread (RLlib's `LearnerThread` / `MultiGPULearnerThread`)
//!   with its bounded inqueue, [`MinibatchBuffer`], loader threads and outqueue; it copies
//!   weights off the device only when asked ([`LearnerHandle::request_weights`]).
//! - [`TorchPolicy`]: implements [`impala_core::Policy`] and loads the learner's
//!   [`impala_core::Weights`] snapshots.
//!
//! V-trace targets are computed on the CPU by `impala-vtrace` from the current network's
//! values and log-probabilities (they carry no gradient, as in RLlib's `vtrace_torch_v2`).
//!
//! [`Learner::weights`] returns `Result<Arc<Weights>>`: copying weights off a device can fail.
//!
//! ```
//! use impala_core::{EnvSpec, Policy, SampleBatch, Space};
//! use impala_learner::{Learner, LearnerSettings, TorchPolicy};
//!
//! let spec = EnvSpec {
//!     id: "CartPole-v1".into(),
//!     observation_space: Space::continuous(vec![-5.0; 4], vec![5.0; 4])?,
//!     action_space: Space::Discrete(2),
//!     max_episode_steps: Some(500),
//! };
//! let settings = LearnerSettings::default();
//! let mut learner = Learner::new(&settings, &spec, tch::Device::Cpu)?;
//! let mut policy = TorchPolicy::new(&settings.model, &spec, settings.model_seed, 0)?;
//! let mut batch = SampleBatch::zeros(50, 10, &spec.observation_space, &spec.action_space, 0);
//! batch.action_logp = vec![(0.5f32).ln(); 500];
//! let stats = learner.update(&batch, 0)?;
//! println!("total_loss {} grad_gnorm {}", stats.total_loss, stats.grad_gnorm);
//! policy.set_weights(&learner.weights()?)?;
//! assert_eq!(policy.weights_version(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod batch;
mod distribution;
mod error;
mod export;
mod learner;
mod minibatch;
mod model;
mod optim;
mod policy;
mod precision;
mod settings;
mod thread;

pub use batch::{BatchLoader, LoadedBatch};
pub use distribution::ActionDistribution;
pub use error::{LearnerError, Result};
pub use export::ExportFilter;
pub use impala_core::{CustomModel, Precision, ResNetSettings};
pub use learner::{read_model_weights, Learner, LearnerStats, LEARNER_STATE_FILE, MODEL_FILE};
pub use minibatch::{Minibatch, MinibatchBuffer};
pub use model::{
    observations, ActorCritic, ImpalaResNet, Model, ModelFactory, ModelOutput, TorchScriptModel,
    Unroll, TORCHSCRIPT_VF_PREFIXES,
};
pub use policy::TorchPolicy;
pub use precision::{check_precision, Autocast};
pub use settings::{
    learner_devices, LearnerSettings, LearnerThreadSettings, LossSettings, ModelSettings,
    OptimizerSettings, MIN_LEARNER_QUEUE_TIMEOUT,
};
pub use thread::{LearnerHandle, LearnerOutput, LearnerQueueStats};

/// The README's snippet, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctest;
