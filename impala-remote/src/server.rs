//! The driver's side: a gRPC server on a network runtime of its own, whose sessions
//! ([`crate::session`]) claim the slots of its [`RunnerPool`]; the slots are members of an
//! [`EnvRunnerGroup`](impala_sampler::EnvRunnerGroup) through the pool's launcher. This module
//! is the server's lifecycle: listening, TLS, and closing (telling runners the run is over, or
//! not).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use impala_runner_pool::{PoolError, PoolLauncher, RunSession, RunnerPool, RunnerTransport};
use prost::Message;
use tokio::sync::watch;
use tokio_stream::StreamExt as _;

use crate::guard::{Admission, HelloLimit};
use crate::proto::env_runner_service_server::EnvRunnerServiceServer;
use crate::proto::{self, driver_message};
use crate::session::{welcome_message, Service};
use crate::{
    read_pem, ClientTls, RemoteError, Token, DEFAULT_MAX_MESSAGE_BYTES, MAX_STREAMS_PER_CONNECTION,
    STREAM_WINDOW,
};

/// A certificate chain and private key (PEM) the driver serves TLS with.
#[derive(Clone)]
pub struct ServerTls {
    /// The certificate chain, PEM.
    pub cert_pem: Vec<u8>,
    /// The private key, PEM.
    pub key_pem: Vec<u8>,
}

impl ServerTls {
    /// Reads the certificate chain and private key from PEM files; an error names the file.
    ///
    /// ```
    /// use std::path::Path;
    /// use impala_remote::ServerTls;
    ///
    /// let file = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"));
    /// assert_eq!(ServerTls::from_files(file, file)?.key_pem, std::fs::read(file)?);
    /// let missing = ServerTls::from_files(file, Path::new("no/key.pem")).err().ok_or("read")?;
    /// assert!(missing.to_string().starts_with("TLS key `no/key.pem`: "), "{missing}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_files(cert: &Path, key: &Path) -> Result<Self, RemoteError> {
        Ok(ServerTls {
            cert_pem: read_pem("TLS certificate", cert)?,
            key_pem: read_pem("TLS key", key)?,
        })
    }
}

/// The server name in a certificate [`ServerTls::for_run`] makes.
pub const RUN_CERTIFICATE_NAME: &str = "impala-driver";

impl ServerTls {
    /// A self-signed certificate and key made for one run, in memory only, and what its
    /// runners trust (that certificate, checked for [`RUN_CERTIFICATE_NAME`] whatever address
    /// they connect to): TLS for runners the driver starts itself and can hand the
    /// certificate to (Ray env runner actors), with no files to make or share.
    ///
    /// ```
    /// let (server, client) = impala_remote::ServerTls::for_run()?;
    /// assert!(String::from_utf8(client.ca_pem)?.starts_with("-----BEGIN CERTIFICATE-----"));
    /// assert_eq!(client.domain.as_deref(), Some(impala_remote::RUN_CERTIFICATE_NAME));
    /// assert!(String::from_utf8(server.key_pem)?.contains("PRIVATE KEY"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn for_run() -> Result<(ServerTls, ClientTls), RemoteError> {
        let made = rcgen::generate_simple_self_signed(vec![RUN_CERTIFICATE_NAME.to_string()])
            .map_err(|e| RemoteError::Tls(format!("cannot make the run's certificate: {e}")))?;
        let cert_pem = made.cert.pem().into_bytes();
        let server = ServerTls {
            cert_pem: cert_pem.clone(),
            key_pem: made.key_pair.serialize_pem().into_bytes(),
        };
        Ok((server, ClientTls::for_run(cert_pem)))
    }
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerTls { .. }")
    }
}

/// How the driver serves remote env runners.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// Where to listen (`--listen HOST:PORT`; port 0 picks a free one).
    pub listen: String,
    /// The shared token runners must present.
    pub token: Token,
    /// Serve TLS with this certificate, or plain HTTP/2 when `None`.
    pub tls: Option<ServerTls>,
    /// Largest message accepted or sent.
    pub max_message_bytes: usize,
    /// A ready runner that sends nothing (not even a heartbeat) for this long has failed
    /// (the config's `sample_timeout_s`).
    pub stall_timeout: Duration,
    /// How often runners heartbeat.
    pub heartbeat_interval: Duration,
    /// How long a connecting runner may take to say hello; a connection none of whose
    /// sessions showed the token by then is closed.
    pub hello_timeout: Duration,
    /// Most connections open at once that have not shown the token (a runner shows it
    /// within a round trip of connecting); a new one closes the oldest.
    pub max_unauthenticated_connections: usize,
}

impl ServerSettings {
    /// Plain HTTP/2 on `listen` with `token`, 64 MiB messages, a 60 s stall timeout, 2 s
    /// heartbeats, a 10 s hello timeout and at most 64 connections without the token.
    pub fn new(listen: impl Into<String>, token: Token) -> Self {
        ServerSettings {
            listen: listen.into(),
            token,
            tls: None,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            stall_timeout: Duration::from_secs(60),
            heartbeat_interval: Duration::from_secs(2),
            hello_timeout: Duration::from_secs(10),
            max_unauthenticated_connections: 64,
        }
    }
}

/// Whether and how the server is closing.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Closing {
    /// Serving.
    No,
    /// Going away without ending the run: runners keep trying to reconnect (a driver resumed
    /// on the same address takes them back).
    Closed,
    /// The run is over: runners are told this reason and exit.
    Finished(String),
}

/// What the server's sessions share.
pub(crate) struct Shared {
    pub(crate) settings: ServerSettings,
    addr: SocketAddr,
    pub(crate) pool: RunnerPool,
    /// Sessions open now (for [`RunnerServer::finish`] to wait for).
    pub(crate) live_sessions: AtomicUsize,
    /// Set when the server closes: sessions end (telling their runners why, when the run is
    /// over).
    pub(crate) shutdown: watch::Sender<Closing>,
}

/// Serves remote env runners on a background network runtime, their sessions claiming the
/// slots of its [`RunnerPool`]. [`finish`](Self::finish) tells every connected runner the run
/// is over (they exit); dropping it without that just closes the connections, and runners keep
/// trying to reconnect for their reconnect timeout (so a driver resumed on the same address
/// takes them back).
pub struct RunnerServer {
    shared: Arc<Shared>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for RunnerServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerServer").field("addr", &self.shared.addr).finish_non_exhaustive()
    }
}

impl RunnerServer {
    /// Starts listening (errors at once when the address is taken or the TLS files are bad),
    /// with a pool of its own.
    pub fn bind(settings: ServerSettings) -> Result<Self, RemoteError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            // Named apart from the runner side's `remote-runner` threads, for profiles.
            .thread_name("impala-remote")
            .enable_all()
            .build()
            .map_err(|e| RemoteError::Runtime(e.to_string()))?;
        let listen = settings.listen.clone();
        let addr: SocketAddr = resolve(&listen)?;
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(addr))
            .map_err(|e| RemoteError::Bind { addr: listen.clone(), reason: e.to_string() })?;
        let addr = listener
            .local_addr()
            .map_err(|e| RemoteError::Bind { addr: listen.clone(), reason: e.to_string() })?;
        let (shutdown, _) = watch::channel(Closing::No);
        let shared = Arc::new(Shared {
            settings,
            addr,
            pool: RunnerPool::new(),
            live_sessions: AtomicUsize::new(0),
            shutdown,
        });
        // Windows large enough for a whole Atari fragment, so a stream never waits on
        // flow control (HTTP/2's default is 64 KiB).
        let mut builder = tonic::transport::Server::builder()
            .initial_stream_window_size(Some(STREAM_WINDOW))
            .initial_connection_window_size(Some(2 * STREAM_WINDOW))
            .tcp_nodelay(true)
            .http2_keepalive_interval(Some(Duration::from_secs(10)))
            .http2_keepalive_timeout(Some(Duration::from_secs(20)))
            .max_concurrent_streams(Some(MAX_STREAMS_PER_CONNECTION));
        if let Some(tls) = &shared.settings.tls {
            let identity = tonic::transport::Identity::from_pem(&tls.cert_pem, &tls.key_pem);
            builder = builder
                .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
                .map_err(|e| RemoteError::Tls(e.to_string()))?;
        }
        let limit = shared.settings.max_message_bytes;
        // Large messages only once the token was shown: each session's first message (the
        // hello) is limited apart, and so is what a connection without the token may send.
        let service = HelloLimit::new(
            EnvRunnerServiceServer::new(Service::new(Arc::clone(&shared)))
                .max_decoding_message_size(limit)
                .max_encoding_message_size(limit),
        );
        let admission = Admission::new(
            shared.settings.max_unauthenticated_connections,
            shared.settings.hello_timeout,
        );
        let incoming = tonic::transport::server::TcpIncoming::from(listener)
            .with_nodelay(Some(true))
            .map(move |accepted| accepted.map(|io| admission.admit(io)));
        let mut stop = shared.shutdown.subscribe();
        let router = builder.add_service(service);
        runtime.spawn(async move {
            let stopped = async move {
                // Ends when the server closes or is dropped.
                let _ = stop.wait_for(|c| *c != Closing::No).await.map(|_| ());
            };
            if let Err(e) = router.serve_with_incoming_shutdown(incoming, stopped).await {
                tracing::error!(error = %e, "the env runner server stopped");
            }
        });
        tracing::info!(%addr, tls = shared.settings.tls.is_some(), "serving remote env runners");
        Ok(RunnerServer { shared, runtime: Some(runtime) })
    }

    /// The address it listens on (with the port chosen when `listen` asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// The pool whose slots its runners claim.
    pub fn pool(&self) -> &RunnerPool {
        &self.shared.pool
    }

    /// [`RunnerPool::launcher`] of its pool: slots that hand runners `run`.
    pub fn launcher(&self, run: RunSession) -> PoolLauncher {
        self.shared.pool.launcher(run)
    }

    /// How many slots a ready runner holds now.
    pub fn num_ready(&self) -> usize {
        self.shared.pool.num_ready()
    }

    /// Waits until `expected` slots hold ready runners, or `timeout` passes; returns how many
    /// do. Errors (with how to start runners) when none came.
    pub fn wait_for_runners(
        &self,
        expected: usize,
        timeout: Duration,
    ) -> Result<usize, RemoteError> {
        self.shared.pool.wait_for_runners(expected, timeout).map_err(|e| match e {
            PoolError::NoRunners { ready, expected, seconds } => RemoteError::NoRunners {
                addr: self.shared.addr.to_string(),
                connected: ready,
                expected,
                seconds,
            },
            other => RemoteError::Pool(other),
        })
    }

    /// Ends the run for every runner: each is told `reason` and exits (waits up to 2 s for
    /// their sessions to end); a runner that connects later is told the same.
    pub fn finish(&self, reason: impl Into<String>) {
        self.close(Closing::Finished(reason.into()));
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.shared.live_sessions.load(SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn close(&self, how: Closing) {
        let changed = self.shared.shutdown.send_if_modified(|c| {
            let open = *c == Closing::No;
            if open {
                *c = how;
            }
            open
        });
        if changed {
            // Give sessions a moment to tell their runners.
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl RunnerTransport for RunnerServer {
    fn pool(&self) -> &RunnerPool {
        &self.shared.pool
    }

    fn wait_for_runners(
        &self,
        expected: usize,
        timeout: Duration,
    ) -> Result<usize, Box<dyn std::error::Error + Send + Sync>> {
        Ok(RunnerServer::wait_for_runners(self, expected, timeout)?)
    }

    /// The welcome message (with the largest runner id and incarnation) must fit
    /// [`ServerSettings::max_message_bytes`].
    fn check_session(&self, run: &RunSession) -> Result<(), PoolError> {
        let welcome = welcome_message(run, u64::MAX, u64::MAX, &self.shared.settings);
        let message = proto::DriverMessage { kind: Some(driver_message::Kind::Welcome(welcome)) };
        let (bytes, limit) = (message.encoded_len(), self.shared.settings.max_message_bytes);
        if bytes > limit {
            return Err(PoolError::SessionTooLarge { bytes, limit });
        }
        Ok(())
    }

    fn finish(&self, reason: &str) {
        RunnerServer::finish(self, reason);
    }
}

impl Drop for RunnerServer {
    fn drop(&mut self) {
        self.close(Closing::Closed);
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

fn resolve(addr: &str) -> Result<SocketAddr, RemoteError> {
    use std::net::ToSocketAddrs;
    let bad = |reason: String| RemoteError::Address { addr: addr.to_string(), reason };
    addr.to_socket_addrs()
        .map_err(|e| bad(e.to_string()))?
        .next()
        .ok_or_else(|| bad("resolves to no address".into()))
}
