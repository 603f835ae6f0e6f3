//! A second transport into the same runner pool as gRPC's: env runner processes (this test
//! binary again, told a socket path in its environment) over a Unix socket, exchanging the
//! protocol's protobuf messages in length-prefixed frames, without gRPC. The transport only
//! moves messages: the slots, spares, restarts and the runners' build are the pool's and the
//! library's.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use impala::config::{ConfigFormat, ImpalaConfig};
use impala::runner_pool::{Assignment, Claim, RunEnv, RunnerPool, RunnerTransport, Wakeup};
use impala::sampler::{serve_on_thread, ReplySender, RunnerMessage, RunnerReply, RunnerRequest};
use impala::Impala;
use impala_remote::{codec, proto};
use prost::Message;
use proto::{driver_message, runner_message};

use crate::common::TestResult;

/// Set in a runner process: the socket of its driver.
const RUNNER_SOCKET: &str = "IMPALA_TEST_RUNNER_SOCKET";
/// The test that runner processes run (as a filter of this binary's tests).
const THIS_TEST: &str =
    "runner_processes_over_a_socket_train_cartpole_and_a_killed_one_is_replaced";
/// A runner or a driver that hears nothing for this long is gone.
const SILENCE: Duration = Duration::from_secs(60);
/// Larger frames are refused.
const MAX_FRAME_BYTES: usize = 64 << 20;

#[test]
fn runner_processes_over_a_socket_train_cartpole_and_a_killed_one_is_replaced() -> TestResult {
    if let Ok(socket) = std::env::var(RUNNER_SOCKET) {
        return serve_as_runner(Path::new(&socket));
    }
    let dir = tempfile::tempdir()?;
    let transport = Arc::new(SocketRunners::bind(dir.path().join("runners.sock"))?);
    let mut runners = RunnerProcesses::default();
    runners.start(&transport.path)?;
    runners.start(&transport.path)?;
    let text = include_str!("../../examples/cartpole-impala.toml");
    let mut config = ImpalaConfig::from_str_as(text, ConfigFormat::Toml)?.config;
    config.num_env_runners = 2;
    config.seed = Some(0);
    config.env_runner_connect_timeout_s = SILENCE.as_secs_f64();
    let mut algo = Impala::builder(config.validate()?)
        .remote_env_runners(Arc::clone(&transport) as Arc<dyn RunnerTransport>)
        .build()?;
    assert_eq!(transport.pool.num_ready(), 2, "the build waits for both runners");
    // A spare: it waits for a slot until the group relaunches the killed runner's.
    runners.start(&transport.path)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut killed = None;
    let runner_count = |result: &impala::IterationResult, key: &str| {
        result.env_runners.get(key).copied().ok_or(format!("no {key} in {result:?}"))
    };
    let result = loop {
        let result = algo.train()?;
        if killed.is_none() && result.training_iteration == 2 {
            killed = Some(runners.kill_first()?);
        }
        let restarts = runner_count(&result, "num_env_runner_restarts")?;
        if restarts >= 1.0 && result.episode_return_mean >= 450.0 {
            break result;
        }
        if Instant::now() > deadline {
            return Err(format!("not solved with a runner replaced in 120 s: {result:?}").into());
        }
    };
    assert!(killed.is_some_and(|status| !status.success()), "{killed:?}");
    assert_eq!(runner_count(&result, "num_env_runner_restarts")?, 1.0);
    assert_eq!(runner_count(&result, "num_healthy_env_runners")?, 2.0);
    algo.stop()?;
    // The group joined its slots: the transport stopped both runners, and they exit.
    for status in runners.wait_all(Duration::from_secs(30))? {
        assert!(status.success(), "{status}");
    }
    Ok(())
}

/// The driver's side: runner processes connect to a Unix socket, one session thread each.
#[derive(Debug)]
struct SocketRunners {
    pool: RunnerPool,
    path: PathBuf,
    closing: Arc<AtomicBool>,
    accepting: Option<JoinHandle<()>>,
}

impl RunnerTransport for SocketRunners {
    fn pool(&self) -> &RunnerPool {
        &self.pool
    }
}

impl SocketRunners {
    fn bind(path: PathBuf) -> std::io::Result<Self> {
        let listener = UnixListener::bind(&path)?;
        let pool = RunnerPool::new();
        let closing = Arc::new(AtomicBool::new(false));
        let (sessions, stop) = (pool.clone(), Arc::clone(&closing));
        let accepting = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                if let Ok(stream) = stream {
                    let pool = sessions.clone();
                    std::thread::spawn(move || session(&pool, stream));
                }
            }
        });
        Ok(SocketRunners { pool, path, closing, accepting: Some(accepting) })
    }
}

impl Drop for SocketRunners {
    fn drop(&mut self) {
        self.closing.store(true, Ordering::SeqCst);
        // Wakes the accepting thread, which sees it is closing.
        let _ = UnixStream::connect(&self.path);
        if let Some(accepting) = self.accepting.take() {
            let _ = accepting.join();
        }
    }
}

/// What a session waits for.
enum Event {
    /// The pool: a slot may be free, or the claimed one has work or went away.
    Woken,
    /// The runner sent this.
    Heard(Box<runner_message::Kind>),
    /// The runner is gone (its connection closed, or it sent garbage).
    Gone(String),
}

/// One runner process's connection: claims a slot (waiting as a spare while none is free),
/// welcomes the runner into it and turns messages into pool calls until the slot or the
/// connection ends.
fn session(pool: &RunnerPool, stream: UnixStream) {
    let Ok(mut input) = stream.try_clone() else { return };
    let (events_tx, events) = mpsc::channel();
    let heard = events_tx.clone();
    std::thread::spawn(move || loop {
        let event = match read_frame::<proto::RunnerMessage>(&mut input) {
            Ok(proto::RunnerMessage { kind: Some(kind) }) => Event::Heard(Box::new(kind)),
            Ok(_) => Event::Gone("sent an empty message".into()),
            Err(e) => Event::Gone(e.to_string()),
        };
        let gone = matches!(event, Event::Gone(_));
        if heard.send(event).is_err() || gone {
            return;
        }
    });
    let wakeup: Wakeup = Arc::new(move || {
        let _ = events_tx.send(Event::Woken);
    });
    let claim = loop {
        match pool.claim(None, &wakeup) {
            Ok(Some(claim)) => break claim,
            Ok(None) => {}
            Err(_) => return,
        }
        if !matches!(events.recv_timeout(SILENCE), Ok(Event::Woken)) {
            return;
        }
    };
    let mut out = stream;
    let run = claim.run();
    let RunEnv::Single(spec) = &run.env else {
        return claim.release(); // this transport serves single-agent runs
    };
    let welcome = proto::Welcome {
        runner_id: claim.runner_id() as u64,
        incarnation: claim.incarnation(),
        spec: Some(codec::spec_to_proto(spec)),
        session: run.session.clone(),
        ..Default::default()
    };
    if write_frame(&mut out, &to_runner(driver_message::Kind::Welcome(welcome))).is_err() {
        return claim.release();
    }
    serve_claim(claim, &mut out, &events);
}

/// Forwards the slot's work to the runner and its replies to the pool until the slot is gone
/// (the runner is told to stop) or the runner ends.
fn serve_claim(mut claim: Claim, out: &mut UnixStream, events: &Receiver<Event>) {
    loop {
        let Some(work) = claim.take_work() else {
            let _ = write_frame(out, &to_runner(driver_message::Kind::Stop(proto::Stop {})));
            return;
        };
        let mut sent = Ok(());
        for (_policy_0, weights) in work.weights {
            let message = driver_message::Kind::SetWeights(codec::weights_to_proto(&weights));
            sent = sent.and_then(|()| write_frame(out, &to_runner(message)));
        }
        if work.samples > 0 {
            let message = driver_message::Kind::Sample(proto::Sample { count: work.samples });
            sent = sent.and_then(|()| write_frame(out, &to_runner(message)));
        }
        let event = match sent {
            Ok(()) => events.recv_timeout(SILENCE).unwrap_or(Event::Gone("fell silent".into())),
            Err(e) => Event::Gone(e.to_string()),
        };
        let heard = match event {
            Event::Woken => continue,
            Event::Heard(kind) => *kind,
            Event::Gone(reason) => {
                claim.lost(format!("runner process gone: {reason}"));
                return;
            }
        };
        match heard {
            runner_message::Kind::Ready(_) => claim.ready(),
            runner_message::Kind::Fragment(f) => {
                let (id, newest) = (claim.runner_id(), claim.newest_weights_version(0));
                let RunEnv::Single(spec) = &claim.run().env else {
                    return claim.fail("a single-agent fragment in a multi-agent run".into());
                };
                match codec::fragment_from_proto(f, id, spec, newest) {
                    Ok(fragment) => claim.deliver(fragment),
                    Err(e) => return claim.fail(format!("runner process sent a {e}")),
                }
            }
            runner_message::Kind::WeightsApplied(w) => {
                let latency = Duration::try_from_secs_f64(w.latency_s).unwrap_or_default();
                claim.weights_applied(0, latency);
            }
            runner_message::Kind::Rejected(_) => return claim.release(),
            runner_message::Kind::Failed(f) => return claim.fail(f.reason),
            _ => return claim.fail("runner process broke the protocol".into()),
        }
    }
}

/// The runner's side, in a process of its own: connects, builds the env runner of the slot it
/// is welcomed into, and serves it until the driver stops it or goes away.
fn serve_as_runner(socket: &Path) -> TestResult {
    let stream = UnixStream::connect(socket)?;
    let mut input = stream.try_clone()?;
    let out = Arc::new(Mutex::new(stream));
    // A driver that never welcomes this runner (it ended first) is no error.
    let Ok(driver_message::Kind::Welcome(welcome)) = next_from_driver(&mut input) else {
        return Ok(());
    };
    let Ok(driver_message::Kind::SetWeights(weights)) = next_from_driver(&mut input) else {
        return Ok(());
    };
    let assignment = Assignment {
        runner_id: usize::try_from(welcome.runner_id)?,
        incarnation: welcome.incarnation,
        env: RunEnv::Single(codec::spec_from_proto(welcome.spec.as_ref())?),
        session: welcome.session,
    };
    let weights = vec![Arc::new(codec::weights_from_proto(weights)?)];
    let runner = match assignment.build(&impala::remote::env_runner_builder(), weights) {
        Ok(runner) => runner,
        Err(reason) => {
            let rejected = proto::Rejected { reason: reason.clone() };
            to_driver(&out, runner_message::Kind::Rejected(rejected));
            return Err(reason.into());
        }
    };
    to_driver(&out, runner_message::Kind::Ready(proto::Ready {}));
    let wire = Arc::clone(&out);
    let (id, incarnation) = (assignment.runner_id, assignment.incarnation);
    let replies = ReplySender::forwarding(id, incarnation, move |msg: RunnerMessage| {
        let kind = match msg.reply {
            RunnerReply::Fragment(f) => {
                runner_message::Kind::Fragment(codec::fragment_to_proto(*f, false))
            }
            RunnerReply::MultiAgentFragment(f) => runner_message::Kind::MultiAgentFragment(
                codec::multi_agent_fragment_to_proto(*f, false),
            ),
            RunnerReply::WeightsApplied { policy, latency } => {
                let (policy, latency_s) =
                    (u32::try_from(policy).unwrap_or(u32::MAX), latency.as_secs_f64());
                runner_message::Kind::WeightsApplied(proto::WeightsApplied { policy, latency_s })
            }
            RunnerReply::Failed(reason) => runner_message::Kind::Failed(proto::Failed { reason }),
        };
        to_driver(&wire, kind)
    });
    let mut serving = serve_on_thread(runner, replies)?;
    // Until `Stop`, or the driver is gone.
    loop {
        match next_from_driver(&mut input) {
            Ok(driver_message::Kind::SetWeights(w)) => {
                let policy = usize::try_from(w.policy)?;
                let weights = Arc::new(codec::weights_from_proto(w)?);
                serving.send(RunnerRequest::SetWeights { policy, weights, sent: Instant::now() });
            }
            Ok(driver_message::Kind::Sample(s)) => {
                for _ in 0..s.count {
                    serving.send(RunnerRequest::Sample);
                }
            }
            _ => break,
        }
    }
    serving.send(RunnerRequest::Stop);
    serving.join(None)?;
    Ok(())
}

fn next_from_driver(input: &mut UnixStream) -> std::io::Result<driver_message::Kind> {
    read_frame::<proto::DriverMessage>(input)?
        .kind
        .ok_or_else(|| std::io::Error::other("the driver sent an empty message"))
}

/// Sends a message to the driver; `false` when it is gone.
fn to_driver(out: &Mutex<UnixStream>, kind: runner_message::Kind) -> bool {
    let message = proto::RunnerMessage { kind: Some(kind) };
    out.lock().is_ok_and(|mut stream| write_frame(&mut *stream, &message).is_ok())
}

fn to_runner(kind: driver_message::Kind) -> proto::DriverMessage {
    proto::DriverMessage { kind: Some(kind) }
}

/// One message: its length (4 bytes, little-endian), then its protobuf encoding.
fn write_frame(out: &mut impl Write, message: &impl Message) -> std::io::Result<()> {
    let bytes = message.encode_to_vec();
    let len = u32::try_from(bytes.len()).map_err(std::io::Error::other)?;
    out.write_all(&len.to_le_bytes())?;
    out.write_all(&bytes)
}

fn read_frame<M: Message + Default>(input: &mut impl Read) -> std::io::Result<M> {
    let mut len = [0; 4];
    input.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(std::io::Error::other(format!("a frame of {len} bytes")));
    }
    let mut bytes = vec![0; len];
    input.read_exact(&mut bytes)?;
    M::decode(bytes.as_slice()).map_err(std::io::Error::other)
}

/// Runner processes; those still running when it is dropped are killed.
#[derive(Default)]
struct RunnerProcesses(Vec<Child>);

impl RunnerProcesses {
    /// Starts this test binary as a runner of the driver on `socket`.
    fn start(&mut self, socket: &Path) -> std::io::Result<()> {
        let child = Command::new(std::env::current_exe()?)
            .args([THIS_TEST, "--test-threads=1", "--quiet"])
            .env(RUNNER_SOCKET, socket)
            .stdout(Stdio::null())
            .spawn()?;
        self.0.push(child);
        Ok(())
    }

    /// Kills the first runner started (it holds a slot) and reaps it.
    fn kill_first(&mut self) -> std::io::Result<std::process::ExitStatus> {
        let mut first = self.0.remove(0);
        let killed = first.kill();
        let status = first.wait()?;
        killed.map(|()| status)
    }

    /// Waits up to `within` for every runner to exit.
    fn wait_all(&mut self, within: Duration) -> Result<Vec<std::process::ExitStatus>, String> {
        let deadline = Instant::now() + within;
        let mut statuses = Vec::new();
        for child in &mut self.0 {
            loop {
                match child.try_wait().map_err(|e| e.to_string())? {
                    Some(status) => break statuses.push(status),
                    None if Instant::now() > deadline => {
                        return Err(format!("a runner still runs after {within:?}"))
                    }
                    None => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }
        Ok(statuses)
    }
}

impl Drop for RunnerProcesses {
    fn drop(&mut self) {
        for child in &mut self.0 {
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}
