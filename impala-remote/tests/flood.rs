//! A flood from peers without the token, alone in its test binary so the process's memory is
//! the driver's: clients that open sessions and announce messages of 60 MiB (or 16 MiB on 50
//! streams of one connection) before any hello must cost the driver a small bounded amount of
//! memory, and its authorised runner must keep being served.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body::Frame;
use impala_core::Weights;
use impala_remote::{
    run_env_runner, ClientSettings, RunEnv, RunSession, RunnerServer, ServerSettings, Token,
};
use impala_sampler::{EnvRunnerGroup, EnvRunnerGroupSettings, Fragment};
use tonic::codegen::{http, Bytes, Service};

type TestResult = Result<(), Box<dyn std::error::Error>>;

mod common;
use common::{builder, walk_spec, TOKEN};

/// What a flooding client sends after its message header: zeros that cost it no memory.
static ZEROS: [u8; 64 << 10] = [0; 64 << 10];

/// A field of `/proc/self/status` in bytes (`VmRSS`, `VmHWM`).
fn proc_status_bytes(field: &str) -> Result<u64, Box<dyn std::error::Error>> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .ok_or_else(|| format!("no {field} in /proc/self/status"))?;
    let kib: u64 =
        line.split_whitespace().nth(1).ok_or_else(|| format!("no value in `{line}`"))?.parse()?;
    Ok(kib << 10)
}

/// Env steps per second the group samples for `within`, and the largest RSS seen meanwhile.
fn sample_rate(
    group: &mut EnvRunnerGroup,
    within: Duration,
) -> Result<(f64, u64), Box<dyn std::error::Error>> {
    let started = Instant::now();
    let (mut steps, mut peak) = (0, 0);
    while started.elapsed() < within {
        steps += group.sample()?.iter().map(|f| f.batch.env_steps()).sum::<usize>();
        peak = peak.max(proc_status_bytes("VmRSS:")?);
    }
    Ok((steps as f64 / started.elapsed().as_secs_f64(), peak))
}

/// A session's request body that announces a message of `announced` bytes and sends `send`
/// bytes of it (as fast as flow control lets it), then nothing, never ending.
struct Announce {
    header: Option<Bytes>,
    left: usize,
}

impl Announce {
    fn new(announced: u32, send: usize) -> Self {
        let mut header = vec![0u8];
        header.extend_from_slice(&announced.to_be_bytes());
        Announce { header: Some(Bytes::from(header)), left: send }
    }
}

impl http_body::Body for Announce {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        if let Some(header) = self.header.take() {
            return Poll::Ready(Some(Ok(Frame::data(header))));
        }
        if self.left == 0 {
            // Holds the stream open; the test's end drops it.
            return Poll::Pending;
        }
        let n = self.left.min(ZEROS.len());
        self.left -= n;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(&ZEROS[..n])))))
    }
}

/// Opens a session stream on `channel` whose body is `body`, and holds it open (with its
/// response) until the runtime is dropped.
async fn flood_stream(mut channel: tonic::transport::Channel, addr: String, body: Announce) {
    let request = http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}/impala.remote.v1.EnvRunnerService/Session"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(tonic::body::Body::new(body));
    let Ok(request) = request else { return };
    if std::future::poll_fn(|cx| channel.poll_ready(cx)).await.is_err() {
        return;
    }
    let response = channel.call(request).await;
    std::future::pending::<()>().await;
    drop(response);
}

#[test]
fn peers_without_the_token_cannot_make_the_driver_buffer_their_messages() -> TestResult {
    const MIB: u64 = 1 << 20;
    // The defaults of `impala train --listen`: 64 MiB messages, a 10 s hello timeout.
    let mut settings = ServerSettings::new("127.0.0.1:0", Token::new(TOKEN)?);
    settings.heartbeat_interval = Duration::from_millis(100);
    let server = RunnerServer::bind(settings)?;
    let addr = server.local_addr().to_string();
    let group_settings = EnvRunnerGroupSettings {
        num_env_runners: 1,
        sample_timeout: Some(Duration::from_millis(50)),
        ..EnvRunnerGroupSettings::default()
    };
    let session = RunSession {
        env: RunEnv::Single(walk_spec(1)),
        session: vec![],
        compress_observations: false,
    };
    let mut group = EnvRunnerGroup::<Fragment>::with_launcher(
        &group_settings,
        Box::new(server.launcher(session)),
        vec![Arc::new(Weights::new(1, vec![]))],
    )?;
    let mut client = ClientSettings::new(addr.clone(), Token::new(TOKEN)?);
    client.reconnect_timeout = Duration::from_secs(3);
    let runner = std::thread::spawn(move || run_env_runner(&client, builder(1)));
    server.wait_for_runners(1, Duration::from_secs(10))?;
    sample_rate(&mut group, Duration::from_millis(500))?;
    let (baseline, _) = sample_rate(&mut group, Duration::from_secs(2))?;
    let before = proc_status_bytes("VmRSS:")?;

    // 50 connections announcing 60 MiB each, and one with 50 streams announcing 16 MiB,
    // each stream sending all of its message but the last byte.
    let flood =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let opened = flood.block_on(async {
        let mut opened = 0;
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?;
        for _ in 0..50 {
            let channel = endpoint.connect().await?;
            let body = Announce::new(60 << 20, (60 << 20) - 1);
            tokio::spawn(flood_stream(channel, addr.clone(), body));
            opened += 1;
        }
        let channel = endpoint.connect().await?;
        for _ in 0..50 {
            let body = Announce::new(16 << 20, (16 << 20) - 1);
            tokio::spawn(flood_stream(channel.clone(), addr.clone(), body));
        }
        opened += 1;
        // And 30 connections of 8 streams announcing hellos of the largest size allowed,
        // each sending all but its last byte (beyond the cap of 64 connections without the
        // token: the oldest are closed).
        for _ in 0..30 {
            let channel = endpoint.connect().await?;
            for _ in 0..8 {
                let body = Announce::new(64 << 10, (64 << 10) - 1);
                tokio::spawn(flood_stream(channel.clone(), addr.clone(), body));
            }
            opened += 1;
        }
        Ok::<_, Box<dyn std::error::Error>>(opened)
    })?;
    let (attacked, peak) = sample_rate(&mut group, Duration::from_secs(3))?;
    let peak = peak.max(proc_status_bytes("VmHWM:")?);
    let growth = peak.saturating_sub(before);
    eprintln!(
        "{opened} flooding connections: RSS {} MiB before, peak {} MiB (+{} MiB); sampling \
         {baseline:.0} env steps/s before, {attacked:.0} during",
        before / MIB,
        peak / MIB,
        growth / MIB
    );
    flood.shutdown_background();
    assert!(growth < 100 * MIB, "the flood grew the driver's memory by {} MiB", growth / MIB);
    assert!(
        attacked >= 0.5 * baseline,
        "sampling fell from {baseline:.0} to {attacked:.0} env steps/s under the flood"
    );
    server.finish("the test is over");
    assert_eq!(runner.join().map_err(|_| "runner panicked")??, "the test is over");
    Ok(())
}
