//! The IMPALA algorithm loop (RLlib's `Impala.training_step`, iteration results, stop criteria,
//! checkpoints) and the `impala` command built on it.
//!
//! Results go to a run folder the way Ray Tune lays it out: `params.json`, `result.json`,
//! `progress.csv`, TensorBoard event files and `checkpoint_NNNNNN/` folders.
//!
//! ```
//! use impala_cli::{IterationResult, StopCriteria};
//! let stop = StopCriteria { training_iteration: Some(2), ..Default::default() };
//! let result = IterationResult { training_iteration: 2, ..Default::default() };
//! assert!(stop.met_by(&result).is_some());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod algorithm;
mod bench;
pub mod checkpoint;
pub mod cli;
mod error;
mod logger;
mod metrics;
mod result;
mod stop;
pub mod tensorboard;

pub use algorithm::{check_environment, Impala};
pub use checkpoint::{AlgorithmState, Counters};
pub use error::{CliError, Result};
pub use logger::{
    read_result_lines, write_params, ResultLogger, PARAMS_FILE, PROGRESS_FILE, RESULT_FILE,
};
pub use metrics::{peak_rss_mib, EpisodeSummary, EpisodeWindow};
pub use result::{
    flatten, EvaluationResult, IterationResult, LearnerQueueInfo, Perf, PolicyLearnerInfo,
    ResultInfo, DEFAULT_POLICY_ID,
};
pub use stop::StopCriteria;
pub use tensorboard::EventWriter;

/// The README's code blocks, run as doctests so the documented usage keeps working.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
