//! The pool's error type.

/// What the pool refuses.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    /// A runner that will only serve one env claimed a slot of another.
    #[error("the runner expects env `{expects}` but this driver trains `{trains}`")]
    OtherEnv {
        /// The env the runner expects.
        expects: String,
        /// The env of the free slot.
        trains: String,
    },
    /// No runner took a slot in time.
    #[error(
        "{ready} of {expected} env runners took a slot within {seconds} s \
         (env_runner_connect_timeout_s)"
    )]
    NoRunners {
        /// How many did.
        ready: usize,
        /// How many were asked for (`num_env_runners`).
        expected: usize,
        /// How long the pool waited.
        seconds: f64,
    },
    /// A run's session data does not fit the transport's largest message.
    #[error(
        "the message that welcomes a runner would take {bytes} bytes, above the transport's \
         limit of {limit}"
    )]
    SessionTooLarge {
        /// The welcome message's size.
        bytes: usize,
        /// The transport's largest message.
        limit: usize,
    },
}

/// The crate's result alias.
pub type Result<T, E = PoolError> = std::result::Result<T, E>;
