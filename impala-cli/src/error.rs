//! Errors of the command line itself (everything else is the library's `ImpalaError`).

/// A command-line value that cannot work.
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
}
