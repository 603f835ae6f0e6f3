//! The crate's error type.

use std::path::PathBuf;

use crate::search::MAX_TRIALS;

/// What an experiment refuses or fails at, each saying what is wrong, where, and how to fix it
/// in terms of its options (a command maps them to its flags).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TuneError {
    /// A search was given no config file.
    #[error(
        "a search needs a config file with `grid_search` or `choice` values, e.g. \
         examples/cartpole-tune.toml (see docs/TUNING.md)"
    )]
    NoConfigFile,
    /// A search space that cannot be expanded.
    #[error("{file}: `{path}` {problem}")]
    BadSearchSpace {
        /// The config file.
        file: PathBuf,
        /// Where the search space is (`lr`, `model.fcnet_hiddens`).
        path: String,
        /// What is wrong with it and how to write it.
        problem: String,
    },
    /// The config file is not a table of config keys.
    #[error("{file}: not a table of config keys")]
    NotATable {
        /// The config file.
        file: PathBuf,
    },
    /// The grid has more trials than [`MAX_TRIALS`].
    #[error(
        "{file}: the search has {count} trials (grid x num_samples), more than {MAX_TRIALS}; \
         shorten the grid lists or split the search into several experiments"
    )]
    TooManyTrials {
        /// The config file.
        file: PathBuf,
        /// How many trials it would be (saturating).
        count: u64,
    },
    /// Some trials' configs are invalid; nothing was run.
    #[error(
        "{invalid} of {total} trial(s) of {file} are invalid, nothing was run; fix the file \
         (or the overrides) and run again:\n{}",
        problems.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n")
    )]
    InvalidTrials {
        /// The config file.
        file: PathBuf,
        /// Invalid trials.
        invalid: usize,
        /// All trials.
        total: usize,
        /// `trial names: problem`, one per distinct problem.
        problems: Vec<String>,
    },
    /// A trial's config would change when written to its folder.
    #[error(
        "{path}: the trial's config does not survive being written as JSON (a non-finite \
         number?); write such values as \"none\" or a finite number"
    )]
    UnwritableConfig {
        /// The trial's config file.
        path: PathBuf,
    },
    /// The metric is no result key.
    #[error("metric: {reason}")]
    BadMetric {
        /// The run library's explanation (with the nearest key).
        reason: String,
    },
    /// The experiment's name is not one folder name.
    #[error("name `{name}`: {reason}")]
    BadName {
        /// The name given.
        name: String,
        /// Why it cannot be a folder name.
        reason: &'static str,
    },
    /// The experiment folder already holds something.
    #[error(
        "the experiment folder {path} already exists and is not empty; choose another name (or \
         output_dir), or remove it"
    )]
    ExperimentExists {
        /// The folder.
        path: PathBuf,
    },
    /// A benchmark's runs folder already holds a seed's run folder.
    #[error("{path} already exists; choose another runs_dir")]
    RunsDirTaken {
        /// The seed's run folder.
        path: PathBuf,
    },
    /// A file or folder could not be read or written, or a process not started.
    #[error("cannot {action} {path}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// No trial finished.
    #[error(
        "all {total} trial(s) failed; their last stderr lines are above, each trial's \
         stderr.log is in {experiment}"
    )]
    AllTrialsFailed {
        /// How many trials ran.
        total: usize,
        /// The experiment folder.
        experiment: PathBuf,
    },
    /// A benchmark seed's `impala train` or `impala evaluate` failed.
    #[error("seed {seed}: {program} failed ({status}){}", detail(log))]
    SeedFailed {
        /// The seed.
        seed: u64,
        /// `` `impala train` `` or `` `impala evaluate` ``.
        program: &'static str,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// Its standard error, where it was kept.
        log: String,
    },
    /// A benchmark seed's process printed something other than its JSON line.
    #[error("seed {seed}: unreadable {what}: not JSON: `{line}`")]
    UnreadableOutput {
        /// The seed.
        seed: u64,
        /// What was read (`` `impala train` summary ``).
        what: &'static str,
        /// Its last line.
        line: String,
        /// Why it does not parse.
        source: serde_json::Error,
    },
    /// The config is invalid or cannot be loaded.
    #[error(transparent)]
    Config(#[from] impala::config::ConfigError),
    /// The algorithm, its run folder or its checkpoints failed.
    #[error(transparent)]
    Impala(#[from] impala::ImpalaError),
    /// A run failed.
    #[error(transparent)]
    Run(#[from] impala::run::RunError),
}

/// `: <log>` for a failed seed whose standard error was kept.
fn detail(log: &str) -> String {
    let log = log.trim();
    if log.is_empty() {
        String::new()
    } else {
        format!(": {log}")
    }
}

impl TuneError {
    /// Shorthand for [`TuneError::Io`].
    pub(crate) fn io(
        action: &'static str,
        path: &std::path::Path,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| TuneError::Io { action, path, source }
    }
}

/// The crate's result alias.
pub type Result<T, E = TuneError> = std::result::Result<T, E>;
