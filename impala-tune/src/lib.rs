//! Experiments over `impala train` processes, for users without Ray: hyperparameter searches
//! with Ray Tune's search spaces in an ordinary config file ([`Experiment`]), the CartPole
//! time-to-solve and stability benchmark ([`mod@bench`]) and the memory soak ([`soak`]).
//!
//! A trial (or a benchmark's seed) is a child `impala train` process in its own run folder, so
//! its libtorch threads, signals and memory are its own. One [`Supervisor`] starts children
//! within a CPU [`Budget`] and passes the signal the parent received on to them; the parent
//! asks through typed [`TrainCommand`]s and reads the answers through the `impala` crate's
//! types ([`impala::read_results`], [`TrainSummary`]).
//!
//! ```
//! use impala_tune::{Experiment, SearchOptions};
//!
//! // A 2 x 2 grid: `lr` varies fastest (grid keys are sorted by path, as Ray Tune sorts them).
//! let dir = tempfile::tempdir()?;
//! let file = dir.path().join("grid.toml");
//! std::fs::write(
//!     &file,
//!     "env = \"CartPole-v1\"\n\
//!      lr = {grid_search = [0.001, 0.0005]}\n\
//!      [model]\nfcnet_hiddens = {grid_search = [[16], [32]]}\n",
//! )?;
//! let options = SearchOptions {
//!     source: impala::ConfigSource { file: Some(file), ..Default::default() },
//!     stop: Default::default(),
//!     num_samples: 1,
//!     search_seed: 0,
//!     metric: "episode_return_mean".into(),
//!     mode: Default::default(),
//!     cpus: Some(4.0),
//!     max_concurrent: None,
//!     output_dir: dir.path().join("out"),
//!     name: Some("grid".into()),
//! };
//! let experiment = Experiment::new(options)?;
//! let names: Vec<&str> = experiment.trials().iter().map(|t| t.name()).collect();
//! assert_eq!(names[1], "trial_001_lr=0.0005,fcnet_hiddens=16");
//! assert_eq!(names.len(), 4);
//! // Running it takes an `impala` executable: `experiment.claim()?` then
//! // `experiment.run(trainer, &|| None, |event| println!("{event}"))?`.
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

pub mod bench;
mod error;
mod experiment;
mod finished;
mod interrupts;
mod search;
pub mod soak;
mod supervisor;
mod trainer;
mod trials;

pub use error::{Result, TuneError};
pub use experiment::{Event, Experiment, SearchOptions, SUMMARY_FILE, TRIAL_CONFIG_FILE};
pub use interrupts::Interrupts;
pub use search::{ValuePath, MAX_TRIALS};
pub use supervisor::{Budget, Exited, Forward, Supervisor};
pub use trainer::{evaluate_command, stop_arguments, TrainCommand, TrainSummary};
pub use trials::{Outcome, Status, Trial};

/// The README's code blocks, run as doctests so the documented usage keeps working.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
