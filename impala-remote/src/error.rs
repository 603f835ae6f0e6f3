//! The transport's error type.

/// Everything that can go wrong between a driver and its remote env runners.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteError {
    /// A message from the peer failed its checks (shape, size, finite values, protocol order).
    #[error("malformed message: {0}")]
    Malformed(String),
    /// The driver could not listen on its address.
    #[error("cannot listen on {addr}: {reason}")]
    Bind {
        /// The address to listen on.
        addr: String,
        /// Why.
        reason: String,
    },
    /// A `HOST:PORT` that does not parse or resolve.
    #[error("bad address `{addr}`: {reason} (expected HOST:PORT, e.g. 10.0.0.5:50051)")]
    Address {
        /// The address as given.
        addr: String,
        /// Why it was refused.
        reason: String,
    },
    /// A token, certificate or key file that cannot be used.
    #[error("{what} `{path}`: {reason}")]
    File {
        /// Which file (token, TLS certificate, ...).
        what: &'static str,
        /// Its path.
        path: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// TLS could not be set up.
    #[error("TLS: {0}")]
    Tls(String),
    /// The driver refused this runner (wrong token, protocol version or env); retrying will
    /// not help.
    #[error("the driver at {addr} refused this env runner: {reason}")]
    Refused {
        /// The driver's address.
        addr: String,
        /// The driver's reason.
        reason: String,
    },
    /// This runner cannot serve the driver's run (its env differs, or building it failed);
    /// retrying will not help.
    #[error("this env runner cannot serve the run of the driver at {addr}: {reason}")]
    Rejected {
        /// The driver's address.
        addr: String,
        /// Why.
        reason: String,
    },
    /// The driver went away and did not come back within the reconnect timeout.
    #[error(
        "lost the driver at {addr} and could not reconnect within {seconds} s \
         (reconnect_timeout); last error: {last_error}"
    )]
    DriverLost {
        /// The driver's address.
        addr: String,
        /// The reconnect timeout.
        seconds: f64,
        /// The last connection error.
        last_error: String,
    },
    /// No runner connected in time.
    #[error(
        "{connected} of {expected} env runners connected to {addr} within {seconds} s \
         (env_runner_connect_timeout_s); start the missing runners, connecting to {addr} with \
         the driver's token"
    )]
    NoRunners {
        /// The listening address.
        addr: String,
        /// How many connected.
        connected: usize,
        /// How many were asked for (`num_env_runners`).
        expected: usize,
        /// The timeout.
        seconds: f64,
    },
    /// The async runtime could not start.
    #[error("cannot start the network runtime: {0}")]
    Runtime(String),
    /// The runner pool refused.
    #[error(transparent)]
    Pool(#[from] impala_runner_pool::PoolError),
}
