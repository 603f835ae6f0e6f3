//! Errors of the command line itself (everything else is the library's `ImpalaError`).

use std::path::PathBuf;

/// A command-line value that cannot work, or a library error worded for this command.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// A command-line value is malformed or conflicts with another.
    #[error("invalid {what} `{value}`: {reason}")]
    InvalidArgument {
        /// Which argument.
        what: &'static str,
        /// The value given.
        value: String,
        /// Why it is invalid and what to do instead.
        reason: String,
    },
    /// `impala evaluate` was given a damaged checkpoint.
    #[error(
        "checkpoint `{path}` is unreadable: {reason}; evaluate another checkpoint_NNNNNN folder \
         of the run"
    )]
    UnreadableCheckpoint {
        /// The checkpoint folder.
        path: PathBuf,
        /// What is missing or damaged.
        reason: String,
    },
    /// `impala evaluate` was given a checkpoint of another version.
    #[error(
        "checkpoint `{path}` cannot be used here: {reason}; evaluate it with the impala-rs \
         version that wrote it"
    )]
    IncompatibleCheckpoint {
        /// The checkpoint folder.
        path: PathBuf,
        /// What does not match.
        reason: String,
    },
}
