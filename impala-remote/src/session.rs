//! One runner's gRPC session, from hello to the end of its stream: it checks the hello (protocol
//! version, token), claims a slot of the server's pool (waiting as a spare while none is free)
//! and turns the protocol's messages into pool calls: the group's work out as `SetWeights` and
//! `Sample`, `Ready`, fragments and applied weights in, and how the session ended (released,
//! failed, lost) back to the pool.

use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::time::{Duration, Instant};

use impala_runner_pool::{Claim, Lost, RunEnv, RunSession, Wakeup};
use tokio::sync::{mpsc, watch, Notify};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::codec::{
    fragment_from_proto, multi_agent_fragment_from_proto, multi_agent_spec_to_proto, spec_to_proto,
    weights_to_proto,
};
use crate::guard::{ConnInfo, Gate};
use crate::proto::env_runner_service_server::EnvRunnerService;
use crate::proto::{self, driver_message, runner_message};
use crate::server::{Closing, ServerSettings, Shared};
use crate::PROTOCOL_VERSION;

/// The tonic service: a session task per runner stream.
pub(crate) struct Service {
    shared: Arc<Shared>,
}

impl Service {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Service { shared }
    }
}

type Outbound = mpsc::Sender<Result<proto::DriverMessage, Status>>;

#[tonic::async_trait]
impl EnvRunnerService for Service {
    type SessionStream = ReceiverStream<Result<proto::DriverMessage, Status>>;

    async fn session(
        &self,
        request: Request<Streaming<proto::RunnerMessage>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let conn = request.extensions().get::<ConnInfo>().cloned();
        let peer = conn
            .as_ref()
            .and_then(|c| c.remote)
            .or_else(|| request.remote_addr())
            .map_or_else(|| "unknown".to_string(), |a| a.to_string());
        let gate = conn.map(|c| c.gate);
        let inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(16);
        let shared = Arc::clone(&self.shared);
        tokio::spawn(async move {
            shared.live_sessions.fetch_add(1, SeqCst);
            let wake = Arc::new(Notify::new());
            let mut session =
                Session { shared: Arc::clone(&shared), peer, gate, inbound, tx, wake };
            session.run().await;
            drop(session);
            shared.live_sessions.fetch_sub(1, SeqCst);
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// The welcome of runner `runner_id`'s incarnation `incarnation` into a slot of `run`.
pub(crate) fn welcome_message(
    run: &RunSession,
    runner_id: u64,
    incarnation: u64,
    settings: &ServerSettings,
) -> proto::Welcome {
    let (spec, multi_agent) = match &run.env {
        RunEnv::Single(spec) => (Some(spec_to_proto(spec)), None),
        RunEnv::Multi { spec, policies } => (None, Some(multi_agent_spec_to_proto(spec, policies))),
    };
    proto::Welcome {
        runner_id,
        incarnation,
        spec,
        multi_agent,
        session: run.session.clone(),
        compress_observations: run.compress_observations,
        max_message_bytes: settings.max_message_bytes as u64,
        heartbeat_interval_s: settings.heartbeat_interval.as_secs_f64(),
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
    /// Its connection's standing, which a hello with the token authenticates.
    gate: Option<Arc<Gate>>,
    inbound: Streaming<proto::RunnerMessage>,
    tx: Outbound,
    /// Woken by the pool: a slot may be free, or the claimed one has work or went away.
    wake: Arc<Notify>,
}

/// How a session that held a slot ended, for what happens to the slot.
enum End {
    /// Nothing to report (slot joined, run over).
    Quiet,
    /// The runner cannot serve this run: the slot goes to the next runner.
    Rejected,
    /// The connection broke or went silent.
    Lost(String),
    /// The runner failed, or broke the protocol.
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
    /// `timeout` since `heard`). Cancel-safe, so it can race the pool's wake-ups.
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
        // The token was shown: this connection's messages may now be as large as any.
        if let Some(gate) = &self.gate {
            gate.authenticate();
        }
        let who = format!("{} (host {}, pid {})", self.peer, hello.host, hello.pid);
        let mut shutdown = self.shared.shutdown.subscribe();
        let Some(mut claim) = self.wait_for_slot(&hello, &mut shutdown).await else {
            return;
        };
        let runner_id = claim.runner_id();
        tracing::info!(runner = %who, runner_id, incarnation = claim.incarnation(), "remote env runner welcomed");
        // A session serves one slot; a runner that is stopped or fails opens a new session.
        match self.serve_slot(&mut claim, &mut shutdown).await {
            End::Quiet => {}
            End::Rejected => claim.release(),
            End::Lost(reason) => match claim.lost(format!("remote env runner {who} {reason}")) {
                Lost::Failed => {
                    tracing::warn!(runner = %who, runner_id, %reason, "remote env runner failed");
                }
                Lost::Released => tracing::warn!(
                    peer = %self.peer,
                    %reason,
                    "a remote env runner left before it was ready"
                ),
            },
            End::Failed(reason) => {
                tracing::warn!(runner = %who, runner_id, %reason, "remote env runner failed");
                claim.fail(format!("remote env runner {who} {reason}"));
            }
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

    /// Waits for a free slot this runner may take and takes it, sending the welcome; `None`
    /// when the runner went away, the run is over, or it expects a different env.
    async fn wait_for_slot(
        &mut self,
        hello: &proto::Hello,
        shutdown: &mut watch::Receiver<Closing>,
    ) -> Option<Claim> {
        let stall = self.shared.settings.stall_timeout;
        let mut heard = Instant::now();
        let wake = Arc::clone(&self.wake);
        let notify = Arc::clone(&wake);
        let wakeup: Wakeup = Arc::new(move || notify.notify_one());
        loop {
            match self.shared.pool.claim(Some(&hello.expect_env), &wakeup) {
                Ok(Some(claim)) => return self.welcome(claim),
                Ok(None) => {}
                Err(refusal) => {
                    self.refuse(refusal.to_string()).await;
                    return None;
                }
            }
            tokio::select! {
                () = wake.notified() => {}
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

    /// Welcomes the runner into the slot it claimed (giving the slot back when it is gone).
    fn welcome(&self, claim: Claim) -> Option<Claim> {
        let welcome = welcome_message(
            claim.run(),
            claim.runner_id() as u64,
            claim.incarnation(),
            &self.shared.settings,
        );
        // The channel has room: nothing else was sent to this runner yet.
        if self.tx.try_send(driver_msg(driver_message::Kind::Welcome(welcome))).is_err() {
            claim.release();
            return None;
        }
        Some(claim)
    }

    /// Forwards the slot's work and the runner's replies until the slot or the session ends.
    async fn serve_slot(
        &mut self,
        claim: &mut Claim,
        shutdown: &mut watch::Receiver<Closing>,
    ) -> End {
        let stall = self.shared.settings.stall_timeout;
        let mut heard = Instant::now();
        let wake = Arc::clone(&self.wake);
        loop {
            match self.forward(claim).await {
                Ok(true) => {}
                Ok(false) => return End::Quiet,
                Err(end) => return end,
            }
            tokio::select! {
                () = wake.notified() => {}
                over = run_over(shutdown) => {
                    self.closing(over).await;
                    return End::Quiet;
                }
                msg = self.next(heard, stall) => {
                    let msg = match msg {
                        Ok(msg) => msg,
                        Err(reason) => return End::Lost(reason),
                    };
                    heard = Instant::now();
                    if let Err(end) = self.receive(msg, claim) {
                        return end;
                    }
                }
            }
        }
    }

    /// Sends what the group asked of the slot since the last call. `false` when the slot is
    /// gone (the runner was told to stop).
    async fn forward(&mut self, claim: &mut Claim) -> Result<bool, End> {
        let Some(work) = claim.take_work() else {
            self.send(driver_message::Kind::Stop(proto::Stop {})).await;
            self.drain().await;
            return Ok(false);
        };
        let lost = || End::Lost("connection lost".into());
        for (policy, weights) in work.weights {
            let mut msg = weights_to_proto(&weights);
            msg.policy = u32::try_from(policy).unwrap_or(u32::MAX);
            if !self.send(driver_message::Kind::SetWeights(msg)).await {
                return Err(lost());
            }
        }
        let samples = work.samples;
        if samples > 0
            && !self.send(driver_message::Kind::Sample(proto::Sample { count: samples })).await
        {
            return Err(lost());
        }
        Ok(true)
    }

    /// Handles one message from a runner holding a slot.
    fn receive(&self, msg: runner_message::Kind, claim: &mut Claim) -> Result<(), End> {
        use runner_message::Kind;
        if !claim.is_open() {
            return Ok(()); // joined meanwhile; the next forward stops the runner
        }
        let ready = claim.is_ready();
        match msg {
            Kind::Heartbeat(_) => {}
            Kind::Ready(_) if !ready => {
                claim.ready();
                tracing::info!(peer = %self.peer, runner_id = claim.runner_id(), "remote env runner ready");
            }
            Kind::Rejected(r) if !ready => {
                tracing::warn!(peer = %self.peer, reason = %r.reason, "a remote env runner cannot serve this run");
                return Err(End::Rejected);
            }
            Kind::Fragment(f) if ready => {
                let RunEnv::Single(spec) = &claim.run().env else {
                    return Err(broke("a single-agent fragment in a multi-agent run"));
                };
                let newest = claim.newest_weights_version(0);
                let fragment = fragment_from_proto(f, claim.runner_id(), spec, newest)
                    .map_err(|e| End::Failed(format!("sent a {e}")))?;
                claim.deliver(fragment);
            }
            Kind::MultiAgentFragment(f) if ready => {
                let RunEnv::Multi { policies, .. } = &claim.run().env else {
                    return Err(broke("a multi-agent fragment in a single-agent run"));
                };
                let newest: Vec<Option<u64>> =
                    (0..policies.len()).map(|p| claim.newest_weights_version(p)).collect();
                let fragment =
                    multi_agent_fragment_from_proto(f, claim.runner_id(), policies, &newest)
                        .map_err(|e| End::Failed(format!("sent a {e}")))?;
                claim.deliver_multi_agent(fragment);
            }
            Kind::WeightsApplied(w) if ready => {
                let latency = Duration::try_from_secs_f64(w.latency_s).unwrap_or(Duration::ZERO);
                let policy = usize::try_from(w.policy).unwrap_or(usize::MAX);
                claim.weights_applied(policy, latency);
            }
            Kind::Failed(f) => return Err(End::Failed(f.reason)),
            other => {
                let what = match other {
                    Kind::Hello(_) => "a second hello",
                    Kind::Ready(_) => "a second ready",
                    Kind::Rejected(_) => "a rejection after it was ready",
                    _ => "a reply before it was ready",
                };
                return Err(broke(what));
            }
        }
        Ok(())
    }
}

/// A runner that broke the protocol with `what`: a failed runner.
fn broke(what: &str) -> End {
    End::Failed(format!("broke the protocol: {what}"))
}
