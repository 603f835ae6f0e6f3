//! Env runners on other hosts: what RLlib calls remote env runners, over gRPC (tonic + prost;
//! the schema is `proto/impala_remote_v1.proto`), as a transport of
//! [`impala_runner_pool`].
//!
//! The driver serves a [`RunnerServer`]; each `impala env-runner --connect` process runs
//! [`run_env_runner`], which opens a session, is welcomed into a free runner slot, builds its
//! envs and policy for the driver's run and then samples fragments on request. On the driver
//! each session is a [`Claim`](impala_runner_pool::Claim) on the server's
//! [`RunnerPool`](impala_runner_pool::RunnerPool), whose slots are ordinary members of an
//! [`impala_sampler::EnvRunnerGroup`] (for a multi-agent env, one of
//! [`MultiAgentFragment`](impala_sampler::MultiAgentFragment)s, whose runners send a batch per
//! policy and get weights per policy), so in-flight caps, weight broadcast (sent once per broadcast per
//! runner), restarts and counting stay the group's; the server is a
//! [`RunnerTransport`](impala_runner_pool::RunnerTransport). A lost, silent or misbehaving
//! runner is a failed runner; a runner process that reconnects (or a new one) takes the slot
//! the group relaunched and gets the current weights.
//!
//! Security: every session starts with the shared token (compared in constant time, never
//! logged), optionally over TLS; the driver checks the protocol version and the env the runner
//! expects, the runner checks the env it built against the driver's spec, and every fragment
//! is validated (shapes against the spec, finite values, sizes) before the group sees it.
//! Messages above [`ServerSettings::max_message_bytes`] are refused by the transport.
//! A peer that has not shown the token costs the driver a small bounded amount: its first
//! message may announce at most [`MAX_HELLO_BYTES`], the driver reads at most
//! [`UNAUTHENTICATED_READ_BYTES`] from its connection and closes it after the hello timeout,
//! at most [`ServerSettings::max_unauthenticated_connections`] such connections are open, and
//! every connection has at most [`MAX_STREAMS_PER_CONNECTION`] sessions at once.
//!
//! The crate has no libtorch: the runner's env runner (envs and policy) comes from the
//! caller's [`BuildRunner`].
#![deny(missing_docs)]

mod client;
pub mod codec;
mod error;
mod guard;
mod server;
mod session;

use std::path::Path;

pub use client::{run_env_runner, ClientSettings, ClientTls};
pub use error::RemoteError;
pub use impala_runner_pool::{Assignment, BuildRunner, BuiltRunner, RunEnv, RunSession};
pub use server::{RunnerServer, ServerSettings, ServerTls, RUN_CERTIFICATE_NAME};

/// The generated protocol types and gRPC stubs (for tools and tests that speak the protocol
/// directly).
#[allow(missing_docs, clippy::all, clippy::pedantic, clippy::unwrap_used)]
pub mod proto {
    tonic::include_proto!("impala.remote.v1");
}

/// The protocol version a runner announces; the driver refuses any other.
pub const PROTOCOL_VERSION: u32 = 1;

/// Largest message either side accepts unless told otherwise: far above a fragment of 8 Atari
/// envs x 50 steps (11 MB uncompressed) or a large model's weights.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 64 << 20;

/// Largest first message of a session, its hello (a few hundred bytes with a token of any
/// sensible length): checked on the message's length prefix before anything is buffered, so
/// a peer without the token cannot make the driver reserve room for a large message.
pub const MAX_HELLO_BYTES: usize = 64 << 10;

/// Most bytes the driver reads from a connection (TLS and HTTP/2 framing included) before one
/// of its sessions shows the token; then it reads nothing more from it until that happens or
/// the hello timeout closes it. A runner's hello takes a few KiB.
pub const UNAUTHENTICATED_READ_BYTES: usize = 256 << 10;

/// Most sessions (HTTP/2 streams) a connection may have open at once; a runner opens one per
/// connection.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 4;

/// HTTP/2 flow-control window of a session's stream (the connection's is twice that): room
/// for a whole large fragment in flight.
const STREAM_WINDOW: u32 = 16 << 20;

/// The shared secret runners authenticate with. Its `Debug` form hides it, so it never
/// reaches logs or results.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<hidden>)")
    }
}

impl Token {
    /// A token from its text (surrounding whitespace is ignored); refuses an empty one.
    ///
    /// ```
    /// let t = impala_remote::Token::new("  s3cret\n")?;
    /// assert!(t.matches("s3cret"));
    /// assert_eq!(format!("{t:?}"), "Token(<hidden>)");
    /// assert!(impala_remote::Token::new(" \n").is_err());
    /// # Ok::<(), impala_remote::RemoteError>(())
    /// ```
    pub fn new(text: &str) -> Result<Self, RemoteError> {
        let token = text.trim();
        if token.is_empty() {
            return Err(RemoteError::File {
                what: "token",
                path: "(given)".into(),
                reason: "is empty".into(),
            });
        }
        Ok(Token(token.to_string()))
    }

    /// Reads a token file (one line, e.g. from `openssl rand -hex 32`). A secret shorter than
    /// [`MIN_TOKEN_FILE_BYTES`] is refused (it could be guessed); a file that other users can
    /// read is used with a warning.
    pub fn from_file(path: &Path) -> Result<Self, RemoteError> {
        let file_error = |reason: String| RemoteError::File {
            what: "token file",
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| file_error(e.to_string()))?;
        let token = Token::new(&text)
            .map_err(|_| file_error("is empty; put the shared secret in it".into()))?;
        let bytes = token.0.len();
        if bytes < MIN_TOKEN_FILE_BYTES {
            return Err(file_error(format!(
                "holds a secret of {bytes} bytes, fewer than {MIN_TOKEN_FILE_BYTES}: make a \
                 longer one, e.g. `openssl rand -hex 32 > {}`",
                path.display()
            )));
        }
        warn_if_readable_by_others(path);
        Ok(token)
    }

    /// Whether `given` is this token, in time that does not depend on where they differ.
    pub fn matches(&self, given: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), given.as_bytes());
        let differ = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
        a.len() == b.len() && differ == 0
    }

    fn as_str(&self) -> &str {
        &self.0
    }
}

/// The shortest secret a token file may hold.
pub const MIN_TOKEN_FILE_BYTES: usize = 16;

/// Warns when users other than the owner may read the token file at `path` (Unix modes).
fn warn_if_readable_by_others(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(path) {
            let mode = meta.permissions().mode();
            if mode & 0o044 != 0 {
                tracing::warn!(
                    token_file = %path.display(),
                    "the token file can be read by {} (mode {:o}); `chmod 600` keeps the shared \
                     secret to its owner",
                    if mode & 0o004 != 0 { "every user" } else { "its group" },
                    mode & 0o777
                );
            }
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}

/// Reads a PEM file for TLS.
pub fn read_pem(what: &'static str, path: &Path) -> Result<Vec<u8>, RemoteError> {
    std::fs::read(path).map_err(|e| RemoteError::File {
        what,
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}
