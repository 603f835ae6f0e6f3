//! The crate's error type.

use impala_core::CoreError;

/// What can go wrong between an env runner and its Python env workers.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GymError {
    /// The Python interpreter could not be started.
    #[error(
        "cannot start Python `{python}` for env `{env}`: {reason}; set `python_executable` in the config or IMPALA_PYTHON to an interpreter with gymnasium installed (`./dev setup` makes .venv/bin/python)"
    )]
    PythonNotFound {
        /// The interpreter that was tried.
        python: String,
        /// The env being started.
        env: String,
        /// What the OS said.
        reason: String,
    },
    /// The worker started, but creating the env raised in Python (unknown id, import error in
    /// the user's module, bad `env_config`, missing gymnasium, ...).
    #[error("cannot create env `{env}` in Python `{python}`: {message}{hint}")]
    Creation {
        /// The env id or entry point.
        env: String,
        /// The interpreter.
        python: String,
        /// The Python exception and its last frame.
        message: String,
        /// A fix, when the message points at one.
        hint: String,
    },
    /// The env has a space impala-rs cannot train on.
    #[error("env `{env}`: unsupported {which} space: {reason}")]
    UnsupportedSpace {
        /// The env id.
        env: String,
        /// `observation` or `action`.
        which: &'static str,
        /// Why.
        reason: String,
    },
    /// The env is of the other kind than the caller expects (a multi-agent env where one agent
    /// was expected, or the other way round).
    #[error("env `{env}` is {found}; {fix}")]
    WrongKind {
        /// The env id.
        env: String,
        /// What it is.
        found: &'static str,
        /// What to do.
        fix: &'static str,
    },
    /// A Python exception in `reset` or `step`.
    #[error("env `{env}` raised in Python: {message}")]
    EnvFailed {
        /// The env id.
        env: String,
        /// The Python exception and its last frame.
        message: String,
    },
    /// The worker process exited (crashed, was killed).
    #[error("the env worker of `{env}` (pid {pid}) died: {status}")]
    WorkerDied {
        /// The env id.
        env: String,
        /// The worker's process id.
        pid: u32,
        /// Its exit status, described.
        status: String,
    },
    /// The worker did not answer within `sample_timeout_s`; it was killed.
    #[error(
        "the env worker of `{env}` (pid {pid}) did not answer within {seconds} s ({what}); killed it (raise `sample_timeout_s` if the env is just slow)"
    )]
    Timeout {
        /// The env id.
        env: String,
        /// The worker's process id.
        pid: u32,
        /// The timeout in seconds.
        seconds: f64,
        /// What it was asked to do.
        what: &'static str,
    },
    /// The worker sent something that does not follow the protocol.
    #[error("the env worker of `{env}` broke the protocol: {reason}")]
    Protocol {
        /// The env id.
        env: String,
        /// What was wrong.
        reason: String,
    },
    /// An OS error talking to the worker or setting up shared memory (part of the message,
    /// which crosses threads as text, and so not a `source`).
    #[error("env worker of `{env}`: {what}: {cause}")]
    Io {
        /// The env id.
        env: String,
        /// What was being done.
        what: &'static str,
        /// The OS error.
        cause: std::io::Error,
    },
}

impl From<GymError> for CoreError {
    fn from(e: GymError) -> Self {
        let env = match &e {
            GymError::PythonNotFound { env, .. }
            | GymError::Creation { env, .. }
            | GymError::UnsupportedSpace { env, .. }
            | GymError::WrongKind { env, .. }
            | GymError::EnvFailed { env, .. }
            | GymError::WorkerDied { env, .. }
            | GymError::Timeout { env, .. }
            | GymError::Protocol { env, .. }
            | GymError::Io { env, .. } => env.clone(),
        };
        CoreError::Env { env, reason: e.to_string() }
    }
}

/// The crate's result alias.
pub type Result<T, E = GymError> = std::result::Result<T, E>;
