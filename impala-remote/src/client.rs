//! The runner's side: `impala env-runner --connect`. One session per runner slot: hello,
//! welcome, build the env runner for the [`Assignment`] with the driver's weights, then serve
//! requests on a thread of its own ([`serve_on_thread`]) while the network runtime forwards
//! requests in and fragments out. A lost driver is retried with backoff until
//! [`ClientSettings::reconnect_timeout`]; a refusal is final.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use impala_core::Weights;
use impala_runner_pool::{Assignment, BuildRunner, RunEnv};
use impala_sampler::{serve_on_thread, ReplySender, RunnerMessage, RunnerReply, RunnerRequest};
use tokio::sync::{mpsc, Notify};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use crate::codec::{
    fragment_to_proto, multi_agent_fragment_to_proto, multi_agent_spec_from_proto, spec_from_proto,
    weights_from_proto,
};
use crate::proto::{
    self, driver_message, env_runner_service_client::EnvRunnerServiceClient, runner_message,
};
use crate::{
    read_pem, RemoteError, Token, DEFAULT_MAX_MESSAGE_BYTES, PROTOCOL_VERSION, STREAM_WINDOW,
};

/// The CA certificate (PEM) a runner trusts the driver's TLS certificate by, and the name to
/// check it for (default: the host in `--connect`).
#[derive(Clone)]
pub struct ClientTls {
    /// The CA (or self-signed) certificate, PEM.
    pub ca_pem: Vec<u8>,
    /// The server name in the driver's certificate.
    pub domain: Option<String>,
}

impl ClientTls {
    /// Trusts the CA certificate in the PEM file `ca`, checking the driver's certificate for
    /// `domain` (default: the host it connects to).
    ///
    /// ```
    /// use std::path::Path;
    /// use impala_remote::ClientTls;
    ///
    /// let file = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"));
    /// let tls = ClientTls::from_file(file, Some("driver".into()))?;
    /// assert_eq!(tls.ca_pem, std::fs::read(file)?);
    /// let missing = ClientTls::from_file(Path::new("no/ca.pem"), None).err().ok_or("read")?;
    /// assert!(missing.to_string().starts_with("TLS CA certificate `no/ca.pem`: "), "{missing}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_file(ca: &Path, domain: Option<String>) -> Result<Self, RemoteError> {
        Ok(ClientTls { ca_pem: read_pem("TLS CA certificate", ca)?, domain })
    }

    /// Trusts `ca_pem`, a certificate [`ServerTls::for_run`](crate::ServerTls::for_run) made,
    /// under the name it was made for.
    pub fn for_run(ca_pem: Vec<u8>) -> Self {
        ClientTls { ca_pem, domain: Some(crate::RUN_CERTIFICATE_NAME.to_string()) }
    }
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls").field("domain", &self.domain).finish_non_exhaustive()
    }
}

/// How a runner process reaches its driver.
#[derive(Debug, Clone)]
pub struct ClientSettings {
    /// The driver's `HOST:PORT`.
    pub connect: String,
    /// The shared token.
    pub token: Token,
    /// TLS, or plain HTTP/2 when `None`.
    pub tls: Option<ClientTls>,
    /// Refuse a driver that trains another env (`--expect-env`).
    pub expect_env: Option<String>,
    /// How long to keep trying to (re)connect before giving up.
    pub reconnect_timeout: Duration,
    /// Largest message accepted or sent.
    pub max_message_bytes: usize,
}

impl ClientSettings {
    /// Plain HTTP/2 to `connect` with `token`, retrying for 60 s.
    pub fn new(connect: impl Into<String>, token: Token) -> Self {
        ClientSettings {
            connect: connect.into(),
            token,
            tls: None,
            expect_env: None,
            reconnect_timeout: Duration::from_secs(60),
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        }
    }
}

/// How one session ended.
enum End {
    /// The slot was replaced or the runner failed: open a new session now.
    Stopped,
    /// The run is over; exit with this reason.
    Shutdown(String),
    /// The connection broke after the driver welcomed us.
    Lost(String),
}

/// Why a session could not go on.
enum Fail {
    /// Retrying will not help.
    Fatal(RemoteError),
    /// The driver is not reachable (yet, or any more).
    Retry(String),
}

/// Serves the driver at `settings.connect` until its run is over (returns the driver's
/// reason), the driver refuses this runner or its run cannot be served here (an error that
/// retrying will not fix, such as `build` failing), or the driver stays unreachable for
/// [`ClientSettings::reconnect_timeout`].
pub fn run_env_runner(
    settings: &ClientSettings,
    build: BuildRunner,
) -> Result<String, RemoteError> {
    let endpoint = endpoint(settings)?;
    // The connection and the session on this thread: a message in or out wakes no other thread
    // than the one handing fragments over.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .thread_name("remote-runner")
        .enable_all()
        .build()
        .map_err(|e| RemoteError::Runtime(e.to_string()))?;
    let mut lost_since = Instant::now();
    let mut backoff = Duration::from_millis(100);
    let mut last_error;
    loop {
        match runtime.block_on(session(settings, &endpoint, &build)) {
            Ok(End::Shutdown(reason)) => return Ok(reason),
            Ok(End::Stopped) => {
                lost_since = Instant::now();
                backoff = Duration::from_millis(100);
                continue;
            }
            Ok(End::Lost(reason)) => {
                tracing::warn!(driver = %settings.connect, %reason, "lost the driver; reconnecting");
                lost_since = Instant::now();
                backoff = Duration::from_millis(100);
                last_error = reason;
            }
            Err(Fail::Fatal(e)) => return Err(e),
            Err(Fail::Retry(reason)) => last_error = reason,
        }
        if lost_since.elapsed() >= settings.reconnect_timeout {
            return Err(RemoteError::DriverLost {
                addr: settings.connect.clone(),
                seconds: settings.reconnect_timeout.as_secs_f64(),
                last_error,
            });
        }
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

fn endpoint(settings: &ClientSettings) -> Result<Endpoint, RemoteError> {
    let addr = settings.connect.trim();
    let bad = |reason: &str| RemoteError::Address { addr: addr.to_string(), reason: reason.into() };
    let (host, port) = addr.rsplit_once(':').ok_or_else(|| bad("no port"))?;
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(bad("the host is empty or the port is not a number"));
    }
    let scheme = if settings.tls.is_some() { "https" } else { "http" };
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))
        .map_err(|e| bad(&e.to_string()))?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(2 * STREAM_WINDOW)
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(20))
        .keep_alive_while_idle(true);
    if let Some(tls) = &settings.tls {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let domain = tls.domain.clone().unwrap_or_else(|| host.to_string());
        let config = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&tls.ca_pem))
            .domain_name(domain);
        endpoint = endpoint.tls_config(config).map_err(|e| RemoteError::Tls(e.to_string()))?;
    }
    Ok(endpoint)
}

fn runner_msg(kind: runner_message::Kind) -> proto::RunnerMessage {
    proto::RunnerMessage { kind: Some(kind) }
}

/// Sends a heartbeat every `every` until the session's channel closes.
fn heartbeats(
    out: mpsc::Sender<proto::RunnerMessage>,
    every: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            if out
                .send(runner_msg(runner_message::Kind::Heartbeat(proto::Heartbeat {})))
                .await
                .is_err()
            {
                return;
            }
        }
    })
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn status_reason(status: &tonic::Status) -> String {
    match status.code() {
        tonic::Code::Unavailable => format!("the driver is unreachable ({})", status.message()),
        _ => format!("{:?}: {}", status.code(), status.message()),
    }
}

async fn session(
    settings: &ClientSettings,
    endpoint: &Endpoint,
    build: &BuildRunner,
) -> Result<End, Fail> {
    let channel: Channel = endpoint.connect().await.map_err(|e| {
        let source = std::error::Error::source(&e).map_or_else(String::new, |s| format!(": {s}"));
        Fail::Retry(format!("cannot connect to {}: {e}{source}", settings.connect))
    })?;
    let limit = settings.max_message_bytes;
    let mut client = EnvRunnerServiceClient::new(channel)
        .max_decoding_message_size(limit)
        .max_encoding_message_size(limit);
    let (out, out_rx) = mpsc::channel(16);
    let hello = proto::Hello {
        protocol_version: PROTOCOL_VERSION,
        token: settings.token.as_str().to_string(),
        expect_env: settings.expect_env.clone().unwrap_or_default(),
        host: hostname(),
        pid: std::process::id(),
    };
    let _ = out.send(runner_msg(runner_message::Kind::Hello(hello))).await;
    let mut inbound = client
        .session(ReceiverStream::new(out_rx))
        .await
        .map_err(|s| Fail::Retry(status_reason(&s)))?
        .into_inner();
    let waiting = AbortOnDrop(heartbeats(out.clone(), Duration::from_secs(1)));
    let driver = settings.connect.clone();
    let refused =
        |reason: String| Fail::Fatal(RemoteError::Refused { addr: driver.clone(), reason });

    let welcome = match next(&mut inbound).await? {
        driver_message::Kind::Welcome(w) => w,
        driver_message::Kind::Refused(r) => return Err(refused(r.reason)),
        driver_message::Kind::Shutdown(s) => return Ok(End::Shutdown(s.reason)),
        _ => return Err(refused("the driver broke the protocol (no welcome)".into())),
    };
    drop(waiting);
    let every = Duration::try_from_secs_f64(welcome.heartbeat_interval_s)
        .ok()
        .filter(|d| !d.is_zero())
        .unwrap_or(Duration::from_secs(1));
    let _beating = AbortOnDrop(heartbeats(out.clone(), every));
    let lost = |fail: Fail| match fail {
        Fail::Retry(reason) => Ok(End::Lost(reason)),
        fatal => Err(fatal),
    };
    match serve_welcome(settings, welcome, &mut inbound, &out, build).await {
        Ok(end) => Ok(end),
        Err(fail) => lost(fail),
    }
}

/// The next message from the driver.
async fn next(
    inbound: &mut tonic::Streaming<proto::DriverMessage>,
) -> Result<driver_message::Kind, Fail> {
    match inbound.message().await {
        Ok(Some(proto::DriverMessage { kind: Some(kind) })) => Ok(kind),
        Ok(Some(_)) => Err(Fail::Retry("the driver sent an empty message".into())),
        Ok(None) => Err(Fail::Retry("the driver closed the connection".into())),
        Err(status) => Err(Fail::Retry(status_reason(&status))),
    }
}

async fn serve_welcome(
    settings: &ClientSettings,
    welcome: proto::Welcome,
    inbound: &mut tonic::Streaming<proto::DriverMessage>,
    out: &mpsc::Sender<proto::RunnerMessage>,
    build: &BuildRunner,
) -> Result<End, Fail> {
    let driver = settings.connect.clone();
    let rejected =
        |reason: String| Fail::Fatal(RemoteError::Rejected { addr: driver.clone(), reason });
    let run_env = match welcome.multi_agent.as_ref() {
        Some(multi) => multi_agent_spec_from_proto(Some(multi))
            .map(|(spec, policies)| RunEnv::Multi { spec, policies }),
        None => spec_from_proto(welcome.spec.as_ref()).map(RunEnv::Single),
    }
    .map_err(|e| rejected(e.to_string()))?;
    let runner_id = usize::try_from(welcome.runner_id).map_err(|e| rejected(e.to_string()))?;
    let incarnation = welcome.incarnation;
    // Every policy's weights come before the runner is built.
    let mut weights: Vec<Option<Arc<Weights>>> = vec![None; run_env.num_policies()];
    while weights.iter().any(Option::is_none) {
        let w = match next(inbound).await? {
            driver_message::Kind::SetWeights(w) => w,
            driver_message::Kind::Stop(_) => return Ok(End::Stopped),
            driver_message::Kind::Shutdown(s) => return Ok(End::Shutdown(s.reason)),
            _ => {
                return Err(rejected(
                    "the driver broke the protocol (no weights after the welcome)".into(),
                ))
            }
        };
        let policies = weights.len();
        let slot = usize::try_from(w.policy).ok().and_then(|p| weights.get_mut(p));
        let Some(slot) = slot else {
            return Err(rejected(format!(
                "the driver sent weights of policy {}, but its run has {policies} policies",
                w.policy
            )));
        };
        *slot = Some(Arc::new(weights_from_proto(w).map_err(|e| rejected(e.to_string()))?));
    }
    let weights: Vec<Arc<Weights>> = weights.into_iter().flatten().collect();
    let env = run_env.id().to_string();
    let assignment = Assignment { runner_id, incarnation, env: run_env, session: welcome.session };
    let builder = Arc::clone(build);
    let built = tokio::task::spawn_blocking(move || assignment.build(&builder, weights))
        .await
        .unwrap_or_else(|e| Err(format!("building the env runner panicked: {e}")));
    let runner = match built {
        Ok(runner) => runner,
        Err(reason) => {
            let msg = runner_message::Kind::Rejected(proto::Rejected { reason: reason.clone() });
            let _ = out.send(runner_msg(msg)).await;
            return Err(rejected(reason));
        }
    };
    if out.send(runner_msg(runner_message::Kind::Ready(proto::Ready {}))).await.is_err() {
        return Err(Fail::Retry("the driver closed the connection".into()));
    }
    tracing::info!(driver = %settings.connect, runner_id, incarnation, env = %env, "serving as env runner");
    let failed = Arc::new(Notify::new());
    let replies =
        wire_replies(runner_id, incarnation, out.clone(), welcome.compress_observations, &failed);
    let mut serving = match serve_on_thread(runner, replies) {
        Ok(serving) => serving,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the env runner's thread");
            return Ok(End::Stopped);
        }
    };
    let end = loop {
        tokio::select! {
            msg = next(inbound) => match msg {
                Ok(driver_message::Kind::SetWeights(w)) => match (w.policy, weights_from_proto(w)) {
                    (policy, Ok(weights)) => {
                        serving.send(RunnerRequest::SetWeights {
                            policy: usize::try_from(policy).unwrap_or(usize::MAX),
                            weights: Arc::new(weights),
                            sent: Instant::now(),
                        });
                    }
                    (_, Err(e)) => break Err(rejected(e.to_string())),
                },
                Ok(driver_message::Kind::Sample(s)) => {
                    for _ in 0..s.count {
                        serving.send(RunnerRequest::Sample);
                    }
                }
                Ok(driver_message::Kind::Stop(_)) => break Ok(End::Stopped),
                Ok(driver_message::Kind::Shutdown(s)) => break Ok(End::Shutdown(s.reason)),
                Ok(_) => break Err(rejected("the driver broke the protocol".into())),
                Err(fail) => break Err(fail),
            },
            // The env runner failed (its failure went out as a reply): take a new slot.
            () = failed.notified() => break Ok(End::Stopped),
        }
    };
    // Stops the env runner (it finishes its fragment) and waits for its thread.
    serving.send(RunnerRequest::Stop);
    let _ = tokio::task::spawn_blocking(move || serving.join(None)).await;
    end
}

/// Replies that go straight onto the session: encoded on the sampling thread and queued for
/// the network, no thread in between (the queue is bounded, so a slow link slows sampling
/// rather than piling up). A failure also wakes `failed`.
fn wire_replies(
    runner_id: usize,
    incarnation: u64,
    out: mpsc::Sender<proto::RunnerMessage>,
    compress: bool,
    failed: &Arc<Notify>,
) -> ReplySender {
    let failed = Arc::clone(failed);
    ReplySender::forwarding(runner_id, incarnation, move |msg: RunnerMessage| {
        let (kind, failure) = match msg.reply {
            RunnerReply::Fragment(f) => {
                (runner_message::Kind::Fragment(fragment_to_proto(*f, compress)), false)
            }
            RunnerReply::MultiAgentFragment(f) => {
                let wire = multi_agent_fragment_to_proto(*f, compress);
                (runner_message::Kind::MultiAgentFragment(wire), false)
            }
            RunnerReply::WeightsApplied { policy, latency } => {
                let policy = u32::try_from(policy).unwrap_or(u32::MAX);
                let applied = proto::WeightsApplied { policy, latency_s: latency.as_secs_f64() };
                (runner_message::Kind::WeightsApplied(applied), false)
            }
            RunnerReply::Failed(reason) => {
                tracing::warn!(%reason, "the env runner failed");
                (runner_message::Kind::Failed(proto::Failed { reason }), true)
            }
        };
        let sent = out.blocking_send(runner_msg(kind)).is_ok();
        if failure {
            failed.notify_one();
        }
        sent
    })
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok().map(|h| h.trim().to_string()))
        .unwrap_or_else(|| "unknown".into())
}
