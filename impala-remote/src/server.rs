//! The driver's side: a gRPC server whose sessions fill runner slots, and the launcher that
//! makes those slots members of an [`EnvRunnerGroup`](impala_sampler::EnvRunnerGroup).
//!
//! A slot is one incarnation of one runner id. The group's requests accumulate in it (samples
//! counted, only the newest weights kept) whether or not a runner holds it; the session that
//! holds it forwards them. A session that ends before its runner is ready gives the slot back
//! untouched; one that ends after is a failed runner, reported to the group, which relaunches
//! the slot for the next runner that connects.

use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use impala_core::{EnvSpec, Weights};
use impala_sampler::{EnvRunnerHandle, EnvRunnerLauncher, ReplySender, RunnerReply, RunnerRequest};
use tokio::sync::{mpsc, watch, Notify};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::codec::{fragment_from_proto, spec_to_proto, weights_to_proto};
use crate::proto::env_runner_service_server::{EnvRunnerService, EnvRunnerServiceServer};
use crate::proto::{self, driver_message, runner_message};
use crate::{RemoteError, Token, DEFAULT_MAX_MESSAGE_BYTES, PROTOCOL_VERSION, STREAM_WINDOW};

/// A certificate chain and private key (PEM) the driver serves TLS with.
#[derive(Clone)]
pub struct ServerTls {
    /// The certificate chain, PEM.
    pub cert_pem: Vec<u8>,
    /// The private key, PEM.
    pub key_pem: Vec<u8>,
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
    /// How long a connecting runner may take to say hello.
    pub hello_timeout: Duration,
}

impl ServerSettings {
    /// Plain HTTP/2 on `listen` with `token`, 64 MiB messages, a 60 s stall timeout and 2 s
    /// heartbeats.
    pub fn new(listen: impl Into<String>, token: Token) -> Self {
        ServerSettings {
            listen: listen.into(),
            token,
            tls: None,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            stall_timeout: Duration::from_secs(60),
            heartbeat_interval: Duration::from_secs(2),
            hello_timeout: Duration::from_secs(10),
        }
    }
}

/// What one runner group's slots hand every runner that takes them: the env's spec (checked by
/// the runner and used to validate its fragments), the application's session data (impala-rs:
/// the config and seeds) and whether to LZ4-compress uint8 observations.
#[derive(Debug, Clone)]
pub struct RunSession {
    /// The spec of the driver's env.
    pub spec: EnvSpec,
    /// Opaque to the transport; handed to the runner's [`BuildRunner`](crate::BuildRunner).
    pub session: Vec<u8>,
    /// RLlib's `compress_observations`.
    pub compress_observations: bool,
}

/// What the group asked of a slot: samples its session has not forwarded yet, and the newest
/// weights (each session sends them once, so a runner that takes the slot later gets them).
#[derive(Default)]
struct Pending {
    samples: u32,
    weights: Option<Arc<Weights>>,
}

enum Holder {
    /// No runner holds the slot.
    Free,
    /// Session `id` was welcomed into it; `ready` once the runner built its env runner.
    Held { id: u64, ready: bool },
    /// The runner that held it failed; the group will join it and launch a new slot.
    Failed,
}

struct Slot {
    runner_id: usize,
    incarnation: u64,
    replies: ReplySender,
    run: Arc<RunSession>,
    pending: Pending,
    holder: Holder,
    /// Wakes the holding session when requests arrive or the slot goes away.
    wake: Arc<Notify>,
}

#[derive(Default)]
struct State {
    slots: Vec<Slot>,
    next_session: u64,
}

impl State {
    /// The slot of incarnation `incarnation` of runner `runner_id`, while the group has not
    /// joined it.
    fn slot_mut(&mut self, runner_id: usize, incarnation: u64) -> Option<&mut Slot> {
        self.slots.iter_mut().find(|s| s.runner_id == runner_id && s.incarnation == incarnation)
    }

    /// That slot, if session `session` holds it.
    fn held_mut(&mut self, runner_id: usize, incarnation: u64, session: u64) -> Option<&mut Slot> {
        self.slot_mut(runner_id, incarnation)
            .filter(|s| matches!(s.holder, Holder::Held { id, .. } if id == session))
    }
}

/// Whether and how the server is closing.
#[derive(Debug, Clone, PartialEq)]
enum Closing {
    /// Serving.
    No,
    /// Going away without ending the run: runners keep trying to reconnect (a driver resumed
    /// on the same address takes them back).
    Closed,
    /// The run is over: runners are told this reason and exit.
    Finished(String),
}

/// What the server's sessions and launchers share.
struct Shared {
    settings: ServerSettings,
    addr: SocketAddr,
    state: Mutex<State>,
    /// Signalled when a slot becomes free, for runners waiting for one.
    slot_freed: Notify,
    /// Signalled when a runner becomes ready, for [`RunnerServer::wait_for_runners`].
    ready_changed: Condvar,
    /// Sessions open now (for [`RunnerServer::finish`] to wait for).
    live_sessions: std::sync::atomic::AtomicUsize,
    /// Set when the server closes: sessions end (telling their runners why, when the run is
    /// over).
    shutdown: watch::Sender<Closing>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain bookkeeping behind; keep serving.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn ready_count(state: &State) -> usize {
        state.slots.iter().filter(|s| matches!(s.holder, Holder::Held { ready: true, .. })).count()
    }
}

/// Serves remote env runners on a background network runtime. [`finish`](Self::finish) tells
/// every connected runner the run is over (they exit); dropping it without that just closes the
/// connections, and runners keep trying to reconnect for their reconnect timeout (so a driver
/// resumed on the same address takes them back).
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
    /// Starts listening (errors at once when the address is taken or the TLS files are bad).
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
            state: Mutex::new(State::default()),
            slot_freed: Notify::new(),
            ready_changed: Condvar::new(),
            live_sessions: std::sync::atomic::AtomicUsize::new(0),
            shutdown,
        });
        // Windows large enough for a whole Atari fragment, so a stream never waits on
        // flow control (HTTP/2's default is 64 KiB).
        let mut builder = tonic::transport::Server::builder()
            .initial_stream_window_size(Some(STREAM_WINDOW))
            .initial_connection_window_size(Some(2 * STREAM_WINDOW))
            .tcp_nodelay(true)
            .http2_keepalive_interval(Some(Duration::from_secs(10)))
            .http2_keepalive_timeout(Some(Duration::from_secs(20)));
        if let Some(tls) = &shared.settings.tls {
            let identity = tonic::transport::Identity::from_pem(&tls.cert_pem, &tls.key_pem);
            builder = builder
                .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
                .map_err(|e| RemoteError::Tls(e.to_string()))?;
        }
        let limit = shared.settings.max_message_bytes;
        let service = EnvRunnerServiceServer::new(Service { shared: Arc::clone(&shared) })
            .max_decoding_message_size(limit)
            .max_encoding_message_size(limit);
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
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

    /// A launcher whose slots hand runners `run`: give it to
    /// [`EnvRunnerGroup::with_launcher`](impala_sampler::EnvRunnerGroup::with_launcher). Slots
    /// of an earlier launcher that are still open keep their runners until the group that
    /// launched them joins them.
    pub fn launcher(&self, run: RunSession) -> RemoteLauncher {
        RemoteLauncher { shared: Arc::clone(&self.shared), run: Arc::new(run) }
    }

    /// How many slots a ready runner holds now.
    pub fn num_ready(&self) -> usize {
        Shared::ready_count(&self.shared.lock())
    }

    /// Waits until `expected` slots hold ready runners, or `timeout` passes; returns how many
    /// do. Errors (with how to start runners) when none came.
    pub fn wait_for_runners(
        &self,
        expected: usize,
        timeout: Duration,
    ) -> Result<usize, RemoteError> {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.lock();
        loop {
            let ready = Shared::ready_count(&state);
            let now = Instant::now();
            if ready >= expected || now >= deadline {
                if ready == 0 && expected > 0 {
                    return Err(RemoteError::NoRunners {
                        addr: self.shared.addr.to_string(),
                        connected: 0,
                        expected,
                        seconds: timeout.as_secs_f64(),
                    });
                }
                return Ok(ready);
            }
            state = match self.shared.ready_changed.wait_timeout(state, deadline - now) {
                Ok((s, _)) => s,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }
}

impl RunnerServer {
    /// Ends the run for every runner: each is told `reason` and exits (waits up to 2 s for
    /// their sessions to end); a runner that connects later is told the same.
    pub fn finish(&self, reason: impl Into<String>) {
        self.close(Closing::Finished(reason.into()));
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.shared.live_sessions.load(std::sync::atomic::Ordering::SeqCst) > 0
            && Instant::now() < deadline
        {
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

/// Starts runner slots on a [`RunnerServer`] (see [`RunnerServer::launcher`]).
pub struct RemoteLauncher {
    shared: Arc<Shared>,
    run: Arc<RunSession>,
}

impl std::fmt::Debug for RemoteLauncher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteLauncher").field("env", &self.run.spec.id).finish_non_exhaustive()
    }
}

impl EnvRunnerLauncher for RemoteLauncher {
    /// Opens a free slot for the runner id and incarnation; the next runner that connects (or
    /// one already waiting) takes it. Never blocks.
    fn launch(&mut self, replies: ReplySender) -> impala_sampler::Result<Box<dyn EnvRunnerHandle>> {
        let (runner_id, incarnation) = (replies.runner_id(), replies.incarnation());
        {
            let mut state = self.shared.lock();
            state.slots.retain(|s| s.runner_id != runner_id);
            state.slots.push(Slot {
                runner_id,
                incarnation,
                replies,
                run: Arc::clone(&self.run),
                pending: Pending::default(),
                holder: Holder::Free,
                wake: Arc::new(Notify::new()),
            });
        }
        self.shared.slot_freed.notify_waiters();
        Ok(Box::new(SlotHandle { shared: Arc::clone(&self.shared), runner_id, incarnation }))
    }
}

/// The group's end of one slot.
struct SlotHandle {
    shared: Arc<Shared>,
    runner_id: usize,
    incarnation: u64,
}

impl EnvRunnerHandle for SlotHandle {
    fn send(&mut self, request: RunnerRequest) -> bool {
        let mut state = self.shared.lock();
        let Some(slot) = state.slot_mut(self.runner_id, self.incarnation) else {
            return false;
        };
        if matches!(slot.holder, Holder::Failed) {
            return false;
        }
        match request {
            RunnerRequest::Sample => slot.pending.samples += 1,
            RunnerRequest::SetWeights { weights, .. } => slot.pending.weights = Some(weights),
            // The slot ends when the group joins it.
            RunnerRequest::Stop => return true,
        }
        slot.wake.notify_one();
        true
    }

    fn join(self: Box<Self>, _deadline: Option<std::time::Instant>) -> impala_sampler::Result<()> {
        let mut state = self.shared.lock();
        if let Some(i) = state
            .slots
            .iter()
            .position(|s| s.runner_id == self.runner_id && s.incarnation == self.incarnation)
        {
            // Its session sees the slot gone and stops the runner.
            let slot = state.slots.remove(i);
            slot.wake.notify_one();
        }
        Ok(())
    }
}

struct Service {
    shared: Arc<Shared>,
}

type Outbound = mpsc::Sender<Result<proto::DriverMessage, Status>>;

#[tonic::async_trait]
impl EnvRunnerService for Service {
    type SessionStream = ReceiverStream<Result<proto::DriverMessage, Status>>;

    async fn session(
        &self,
        request: Request<Streaming<proto::RunnerMessage>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let peer = request.remote_addr().map_or_else(|| "unknown".to_string(), |a| a.to_string());
        let inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(16);
        let shared = Arc::clone(&self.shared);
        tokio::spawn(async move {
            use std::sync::atomic::Ordering::SeqCst;
            shared.live_sessions.fetch_add(1, SeqCst);
            let mut session = Session { shared: Arc::clone(&shared), peer, inbound, tx, id: 0 };
            session.run().await;
            drop(session);
            shared.live_sessions.fetch_sub(1, SeqCst);
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// Resolves when the server closes, with the reason to tell runners when the run is over.
async fn run_over(shutdown: &mut watch::Receiver<Closing>) -> Option<String> {
    // The guard `wait_for` returns is not `Send`; read it here, not across an await.
    match shutdown.wait_for(|c| *c != Closing::No).await.map(|c| c.clone()) {
        Ok(Closing::Finished(reason)) => Some(reason),
        _ => None,
    }
}

fn driver_msg(kind: driver_message::Kind) -> Result<proto::DriverMessage, Status> {
    Ok(proto::DriverMessage { kind: Some(kind) })
}

/// One runner's connection, from hello to the end of the stream.
struct Session {
    shared: Arc<Shared>,
    peer: String,
    inbound: Streaming<proto::RunnerMessage>,
    tx: Outbound,
    id: u64,
}

/// The weights a session sent its runner. At most one weights message is on its way at a time
/// (the runner acts only with the newest before each fragment, so the ones in between would
/// be sent for nothing); the newest version bounds the versions its fragments may carry.
#[derive(Default)]
struct WeightsSent {
    last: Option<u64>,
    newest: Option<u64>,
    in_flight: bool,
}

/// How a session ended, for what happens to its slot.
enum End {
    /// Nothing to report (refused, slot replaced, run over).
    Quiet,
    /// The runner failed while it was ready.
    Failed(String),
}

impl Session {
    async fn send(&self, kind: driver_message::Kind) -> bool {
        self.tx.send(driver_msg(kind)).await.is_ok()
    }

    /// After a `Stop` or `Shutdown`: reads (and drops) what the runner still sends until it
    /// closes its side, at most 2 s. Ending the session at once would reset the stream, and the
    /// runner could see the reset before the message that explains it.
    async fn drain(&mut self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while let Ok(Ok(Some(_))) = tokio::time::timeout_at(deadline, self.inbound.message()).await
        {
        }
    }

    /// The server is closing: a finished run (`Some(reason)`) tells the runner why, so it
    /// exits; otherwise the session just ends and the runner reconnects.
    async fn closing(&mut self, finished: Option<String>) {
        if let Some(reason) = finished {
            self.send(driver_message::Kind::Shutdown(proto::Shutdown { reason })).await;
            self.drain().await;
        }
    }

    async fn refuse(&self, reason: String) {
        tracing::warn!(peer = %self.peer, %reason, "refused a remote env runner");
        self.send(driver_message::Kind::Refused(proto::Refused { reason })).await;
    }

    /// The next message, or why there is none (stream ended, error, nothing heard for
    /// `timeout` since `heard`). Cancel-safe, so it can race the slot's wake-ups.
    async fn next(
        &mut self,
        heard: Instant,
        timeout: Duration,
    ) -> Result<runner_message::Kind, String> {
        let deadline = tokio::time::Instant::from_std(heard + timeout);
        match tokio::time::timeout_at(deadline, self.inbound.message()).await {
            Err(_) => Err(format!("sent nothing for {:.0} s", timeout.as_secs_f64())),
            Ok(Err(status)) => {
                // Tell the runner why (an oversized or undecodable message), if it listens.
                let reason = format!("connection lost ({})", status.message());
                let _ = self.tx.try_send(Err(status));
                Err(reason)
            }
            Ok(Ok(None)) => Err("closed the connection".into()),
            Ok(Ok(Some(proto::RunnerMessage { kind: None }))) => {
                Err("sent an empty message".into())
            }
            Ok(Ok(Some(proto::RunnerMessage { kind: Some(kind) }))) => Ok(kind),
        }
    }

    async fn run(&mut self) {
        self.id = {
            let mut state = self.shared.lock();
            state.next_session += 1;
            state.next_session
        };
        let hello = match self.next(Instant::now(), self.shared.settings.hello_timeout).await {
            Ok(runner_message::Kind::Hello(hello)) => hello,
            Ok(_) => return self.refuse("the first message must be a hello".into()).await,
            Err(reason) => {
                tracing::warn!(peer = %self.peer, %reason, "a connection ended before its hello");
                return;
            }
        };
        if let Err(reason) = self.check_hello(&hello) {
            return self.refuse(reason).await;
        }
        let who = format!("{} (host {}, pid {})", self.peer, hello.host, hello.pid);
        let mut shutdown = self.shared.shutdown.subscribe();
        let Some((runner_id, incarnation, wake)) = self.wait_for_slot(&hello, &mut shutdown).await
        else {
            return;
        };
        tracing::info!(runner = %who, runner_id, incarnation, "remote env runner welcomed");
        // A session serves one slot; a runner that is stopped or fails opens a new session.
        if let Err(End::Failed(reason)) =
            self.serve_slot(runner_id, incarnation, &wake, &mut shutdown).await
        {
            tracing::warn!(runner = %who, runner_id, %reason, "remote env runner failed");
            self.fail(runner_id, incarnation, &who, reason);
        }
    }

    fn check_hello(&self, hello: &proto::Hello) -> Result<(), String> {
        if hello.protocol_version != PROTOCOL_VERSION {
            return Err(format!(
                "protocol version {} is not this driver's {PROTOCOL_VERSION}; run the same \
                 impala-rs release on the driver and the runners",
                hello.protocol_version
            ));
        }
        if !self.shared.settings.token.matches(&hello.token) {
            return Err("wrong token; give the runner the driver's --token-file".into());
        }
        Ok(())
    }

    /// Waits for a free slot this runner may take and takes it; `None` when the runner went
    /// away, the run is over, or it expects a different env.
    async fn wait_for_slot(
        &mut self,
        hello: &proto::Hello,
        shutdown: &mut watch::Receiver<Closing>,
    ) -> Option<(usize, u64, Arc<Notify>)> {
        let stall = self.shared.settings.stall_timeout;
        let mut heard = Instant::now();
        let shared = Arc::clone(&self.shared);
        loop {
            let freed = shared.slot_freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            match self.take_free_slot(hello) {
                Ok(Some(taken)) => return Some(taken),
                Ok(None) => {}
                Err(reason) => {
                    self.refuse(reason).await;
                    return None;
                }
            }
            tokio::select! {
                () = &mut freed => {}
                over = run_over(shutdown) => {
                    self.closing(over).await;
                    return None;
                }
                msg = self.next(heard, stall) => match msg {
                    Ok(runner_message::Kind::Heartbeat(_)) => heard = Instant::now(),
                    Ok(_) => {
                        self.refuse("sent a request before it was welcomed".into()).await;
                        return None;
                    }
                    Err(reason) => {
                        tracing::info!(peer = %self.peer, %reason, "a waiting env runner left");
                        return None;
                    }
                },
            }
        }
    }

    /// Takes the lowest free slot, sending the welcome. Errors when the runner expects an env
    /// the driver does not train.
    fn take_free_slot(
        &mut self,
        hello: &proto::Hello,
    ) -> Result<Option<(usize, u64, Arc<Notify>)>, String> {
        let mut state = self.shared.lock();
        let Some(slot) = state
            .slots
            .iter_mut()
            .filter(|s| matches!(s.holder, Holder::Free))
            .min_by_key(|s| s.runner_id)
        else {
            return Ok(None);
        };
        if !hello.expect_env.is_empty() && hello.expect_env != slot.run.spec.id {
            return Err(format!(
                "the runner expects env `{}` but this driver trains `{}`",
                hello.expect_env, slot.run.spec.id
            ));
        }
        slot.holder = Holder::Held { id: self.id, ready: false };
        let welcome = proto::Welcome {
            runner_id: slot.runner_id as u64,
            incarnation: slot.incarnation,
            spec: Some(spec_to_proto(&slot.run.spec)),
            session: slot.run.session.clone(),
            compress_observations: slot.run.compress_observations,
            max_message_bytes: self.shared.settings.max_message_bytes as u64,
            heartbeat_interval_s: self.shared.settings.heartbeat_interval.as_secs_f64(),
        };
        let taken = (slot.runner_id, slot.incarnation, Arc::clone(&slot.wake));
        // The channel has room: nothing else was sent on this session yet.
        if self.tx.try_send(driver_msg(driver_message::Kind::Welcome(welcome))).is_err() {
            slot.holder = Holder::Free;
            return Ok(None);
        }
        Ok(Some(taken))
    }

    /// Forwards the slot's requests and the runner's replies until the slot or the session
    /// ends. `Ok` when the slot was joined or the run is over (the runner was told).
    async fn serve_slot(
        &mut self,
        runner_id: usize,
        incarnation: u64,
        wake: &Notify,
        shutdown: &mut watch::Receiver<Closing>,
    ) -> Result<(), End> {
        let stall = self.shared.settings.stall_timeout;
        let mut ready = false;
        let mut sent = WeightsSent::default();
        let mut heard = Instant::now();
        loop {
            if !self.forward(runner_id, incarnation, ready, &mut sent).await? {
                return Ok(());
            }
            tokio::select! {
                () = wake.notified() => {}
                over = run_over(shutdown) => {
                    self.closing(over).await;
                    return Ok(());
                }
                msg = self.next(heard, stall) => {
                    let msg = msg.map_err(|reason| self.lost(runner_id, incarnation, ready, reason))?;
                    heard = Instant::now();
                    self.receive(msg, runner_id, incarnation, &mut ready, &mut sent)?;
                }
            }
        }
    }

    /// What a lost connection means: a failed runner once it was ready; before, the slot
    /// simply goes back to being free.
    fn lost(&self, runner_id: usize, incarnation: u64, ready: bool, reason: String) -> End {
        if ready {
            return End::Failed(reason);
        }
        self.release(runner_id, incarnation);
        tracing::warn!(peer = %self.peer, %reason, "a remote env runner left before it was ready");
        End::Quiet
    }

    fn release(&self, runner_id: usize, incarnation: u64) {
        let mut state = self.shared.lock();
        if let Some(slot) = state.held_mut(runner_id, incarnation, self.id) {
            slot.holder = Holder::Free;
        }
        drop(state);
        self.shared.slot_freed.notify_waiters();
    }

    /// Sends what the group asked of the slot since the last call: the newest weights unless
    /// the runner has not taken the last ones yet, samples once the runner is ready. `false`
    /// when the slot is gone (the runner was told to stop).
    async fn forward(
        &mut self,
        runner_id: usize,
        incarnation: u64,
        ready: bool,
        sent: &mut WeightsSent,
    ) -> Result<bool, End> {
        let taken = {
            let mut state = self.shared.lock();
            state.slot_mut(runner_id, incarnation).map(|slot| {
                let samples = if ready { std::mem::take(&mut slot.pending.samples) } else { 0 };
                (slot.pending.weights.clone(), samples)
            })
        };
        let Some((weights, samples)) = taken else {
            self.send(driver_message::Kind::Stop(proto::Stop {})).await;
            self.drain().await;
            return Ok(false);
        };
        if let Some(weights) = weights {
            if sent.last != Some(weights.version) && !sent.in_flight {
                sent.last = Some(weights.version);
                sent.newest = sent.newest.max(Some(weights.version));
                sent.in_flight = true;
                let msg = driver_message::Kind::SetWeights(weights_to_proto(&weights));
                if !self.send(msg).await {
                    return Err(self.lost(runner_id, incarnation, ready, "connection lost".into()));
                }
            }
        }
        if samples > 0
            && !self.send(driver_message::Kind::Sample(proto::Sample { count: samples })).await
        {
            return Err(self.lost(runner_id, incarnation, ready, "connection lost".into()));
        }
        Ok(true)
    }

    /// Handles one message from a runner holding a slot.
    fn receive(
        &self,
        msg: runner_message::Kind,
        runner_id: usize,
        incarnation: u64,
        ready: &mut bool,
        sent: &mut WeightsSent,
    ) -> Result<(), End> {
        use runner_message::Kind;
        let (replies, run) = {
            let mut state = self.shared.lock();
            let Some(slot) = state.slot_mut(runner_id, incarnation) else {
                return Ok(()); // joined meanwhile; the next forward stops the runner
            };
            (slot.replies.clone(), Arc::clone(&slot.run))
        };
        match msg {
            Kind::Heartbeat(_) => {}
            Kind::Ready(_) if !*ready => {
                *ready = true;
                // It built its policy with the weights sent first.
                sent.in_flight = false;
                let mut state = self.shared.lock();
                if let Some(slot) = state.slot_mut(runner_id, incarnation) {
                    slot.holder = Holder::Held { id: self.id, ready: true };
                    // Samples queued while the runner was building can go now.
                    slot.wake.notify_one();
                }
                drop(state);
                self.shared.ready_changed.notify_all();
                tracing::info!(peer = %self.peer, runner_id, "remote env runner ready");
            }
            Kind::Rejected(r) if !*ready => {
                tracing::warn!(peer = %self.peer, reason = %r.reason, "a remote env runner cannot serve this run");
                self.release(runner_id, incarnation);
                return Err(End::Quiet);
            }
            Kind::Fragment(f) if *ready => {
                let fragment = fragment_from_proto(f, runner_id, &run.spec, sent.newest)
                    .map_err(|e| End::Failed(format!("sent a {e}")))?;
                replies.send(RunnerReply::Fragment(Box::new(fragment)));
            }
            Kind::WeightsApplied(w) if *ready => {
                let latency = Duration::try_from_secs_f64(w.latency_s).unwrap_or(Duration::ZERO);
                replies.send(RunnerReply::WeightsApplied { latency });
                // The runner took weights; the newest (if newer) can go on the next forward.
                sent.in_flight = false;
            }
            Kind::Failed(f) => return Err(End::Failed(f.reason)),
            other => {
                let what = match other {
                    Kind::Hello(_) => "a second hello",
                    Kind::Ready(_) => "a second ready",
                    Kind::Rejected(_) => "a rejection after it was ready",
                    _ => "a reply before it was ready",
                };
                return Err(End::Failed(format!("broke the protocol: {what}")));
            }
        }
        Ok(())
    }

    /// Reports the slot's runner failed (once) so the group restarts it.
    fn fail(&self, runner_id: usize, incarnation: u64, who: &str, reason: String) {
        let mut state = self.shared.lock();
        let Some(slot) = state.held_mut(runner_id, incarnation, self.id) else {
            return;
        };
        slot.holder = Holder::Failed;
        slot.replies.send(RunnerReply::Failed(format!("remote env runner {who} {reason}")));
        drop(state);
        self.shared.ready_changed.notify_all();
    }
}
