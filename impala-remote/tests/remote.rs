//! The transport end to end over loopback, in one process: a driver's runner group whose
//! members are remote slots, and runners served by `run_env_runner` on threads (or by a raw
//! protocol client that misbehaves on purpose).

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use impala_core::{CoreError, EnvSpec, MultiAgentEnv, Policy, Weights};
use impala_remote::proto::{self, env_runner_service_client::EnvRunnerServiceClient};
use impala_remote::{
    run_env_runner, Assignment, BuildRunner, BuiltRunner, ClientSettings, RemoteError, RunEnv,
    RunSession, RunnerServer, ServerSettings, Token, MAX_HELLO_BYTES, PROTOCOL_VERSION,
};
use impala_sampler::{
    EnvRunnerGroup, EnvRunnerGroupSettings, Fragment, MultiAgentEnvFactory, MultiAgentEnvRunner,
    MultiAgentFragment, MultiAgentSettings, RandomPolicy,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

mod common;
use common::{builder, walk_spec, TOKEN};

fn server(stall: Duration) -> Result<Arc<RunnerServer>, RemoteError> {
    let mut settings = ServerSettings::new("127.0.0.1:0", Token::new(TOKEN)?);
    settings.stall_timeout = stall;
    settings.heartbeat_interval = Duration::from_millis(100);
    settings.max_message_bytes = 1 << 20;
    Ok(Arc::new(RunnerServer::bind(settings)?))
}

fn group(
    server: &RunnerServer,
    runners: usize,
) -> Result<EnvRunnerGroup, Box<dyn std::error::Error>> {
    group_of_width(server, runners, 1)
}

/// As [`group`], for runners of `Walk` with `width` observations.
fn group_of_width(
    server: &RunnerServer,
    runners: usize,
    width: usize,
) -> Result<EnvRunnerGroup, Box<dyn std::error::Error>> {
    let settings = EnvRunnerGroupSettings {
        num_env_runners: runners,
        sample_timeout: Some(Duration::from_millis(50)),
        ..EnvRunnerGroupSettings::default()
    };
    let env = RunEnv::Single(walk_spec(width));
    let session = RunSession { env, session: b"{}".to_vec(), compress_observations: false };
    let launcher = Box::new(server.launcher(session));
    let weights = vec![Arc::new(Weights::new(1, vec![]))];
    Ok(EnvRunnerGroup::with_launcher(&settings, launcher, weights)?)
}

fn client(server: &RunnerServer, token: &str) -> Result<ClientSettings, RemoteError> {
    let mut settings = ClientSettings::new(server.local_addr().to_string(), Token::new(token)?);
    settings.reconnect_timeout = Duration::from_secs(3);
    Ok(settings)
}

fn spawn_runner(settings: ClientSettings, width: usize) -> JoinHandle<Result<String, RemoteError>> {
    std::thread::spawn(move || run_env_runner(&settings, builder(width)))
}

/// Samples until `done` holds for the fragments so far, or fails after `within`.
fn sample_until(
    group: &mut EnvRunnerGroup,
    within: Duration,
    mut done: impl FnMut(&[Fragment]) -> bool,
) -> Result<Vec<Fragment>, Box<dyn std::error::Error>> {
    let deadline = Instant::now() + within;
    let mut all = Vec::new();
    while !done(&all) {
        if Instant::now() > deadline {
            return Err(
                format!("gave up after {} fragments: {:?}", all.len(), group.metrics()).into()
            );
        }
        all.extend(group.sample()?);
    }
    Ok(all)
}

#[test]
fn remote_runners_sample_for_the_group_and_act_with_the_broadcast_weights() -> TestResult {
    let server = server(Duration::from_secs(10))?;
    let mut group = group(&server, 2)?;
    let runners: Vec<_> = (0..2)
        .map(|_| client(&server, TOKEN).map(|c| spawn_runner(c, 1)))
        .collect::<Result<_, _>>()?;
    assert_eq!(server.wait_for_runners(2, Duration::from_secs(10))?, 2);
    let first = sample_until(&mut group, Duration::from_secs(10), |f| {
        [1, 2].iter().all(|id| f.iter().any(|x| x.runner_id == *id))
    })?;
    assert!(first.iter().all(|f| f.batch.weights_version == vec![1, 1]));
    assert!(first.iter().all(|f| f.batch.env_steps() == 10 && f.batch.obs.len() == 10));
    group.sync_weights(0, Arc::new(Weights::new(2, vec![])), &[1, 2]);
    sample_until(&mut group, Duration::from_secs(10), |f| {
        [1, 2]
            .iter()
            .all(|id| f.iter().any(|x| x.runner_id == *id && x.batch.weights_version[0] == 2))
    })?;
    let metrics = group.metrics();
    assert_eq!(metrics.num_healthy_env_runners, 2);
    assert_eq!(
        metrics.num_weight_syncs_applied, 2,
        "version 2 applied once per runner: {metrics:?}"
    );
    server.finish("the test is over");
    for runner in runners {
        assert_eq!(runner.join().map_err(|_| "runner panicked")??, "the test is over");
    }
    Ok(())
}

#[test]
fn a_wrong_token_or_another_env_is_refused_and_the_runner_gives_up() -> TestResult {
    let server = server(Duration::from_secs(10))?;
    let _group = group(&server, 1)?;
    let wrong = spawn_runner(client(&server, "guessed")?, 1).join().map_err(|_| "panicked")?;
    match wrong {
        Err(RemoteError::Refused { reason, .. }) => {
            assert!(reason.contains("wrong token"), "{reason}")
        }
        other => panic!("a wrong token was not refused: {other:?}"),
    }
    let mut settings = client(&server, TOKEN)?;
    settings.expect_env = Some("Pong-v5".into());
    match spawn_runner(settings, 1).join().map_err(|_| "panicked")? {
        Err(RemoteError::Refused { reason, .. }) => {
            assert!(
                reason.contains("expects env `Pong-v5`") && reason.contains("Walk-v0"),
                "{reason}"
            )
        }
        other => panic!("a runner expecting another env was not refused: {other:?}"),
    }
    assert_eq!(server.num_ready(), 0);
    Ok(())
}

#[test]
fn a_runner_whose_env_differs_rejects_the_run_and_leaves_the_slot_to_the_next() -> TestResult {
    let server = server(Duration::from_secs(10))?;
    let mut group = group(&server, 1)?;
    match spawn_runner(client(&server, TOKEN)?, 3).join().map_err(|_| "panicked")? {
        Err(RemoteError::Rejected { reason, .. }) => {
            assert!(reason.contains("observation spaces differ"), "{reason}")
        }
        other => panic!("a mismatched env was not rejected: {other:?}"),
    }
    let good = spawn_runner(client(&server, TOKEN)?, 1);
    sample_until(&mut group, Duration::from_secs(10), |f| !f.is_empty())?;
    assert_eq!(group.metrics().num_env_runner_failures, 0, "a rejection is not a runner failure");
    server.finish("done");
    good.join().map_err(|_| "panicked")??;
    Ok(())
}

/// A raw protocol client: says hello with `token`, and returns the stream's two ends.
async fn raw_session(
    addr: String,
    token: String,
) -> Result<
    (tokio::sync::mpsc::Sender<proto::RunnerMessage>, tonic::Streaming<proto::DriverMessage>),
    Box<dyn std::error::Error>,
> {
    let mut client = EnvRunnerServiceClient::connect(format!("http://{addr}")).await?;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let hello = proto::Hello { protocol_version: PROTOCOL_VERSION, token, ..Default::default() };
    tx.send(proto::RunnerMessage { kind: Some(proto::runner_message::Kind::Hello(hello)) }).await?;
    let inbound =
        client.session(tokio_stream::wrappers::ReceiverStream::new(rx)).await?.into_inner();
    Ok((tx, inbound))
}

fn ready() -> proto::RunnerMessage {
    proto::RunnerMessage { kind: Some(proto::runner_message::Kind::Ready(proto::Ready {})) }
}

#[test]
fn garbage_oversized_and_forged_messages_are_refused_and_the_driver_keeps_serving() -> TestResult {
    use std::io::Write;
    let server = server(Duration::from_secs(10))?;
    let mut group = group(&server, 1)?;
    let addr = server.local_addr().to_string();
    // Bytes that are not HTTP/2 at all.
    let mut tcp = std::net::TcpStream::connect(&addr)?;
    tcp.write_all(&[0xde, 0xad, 0xbe, 0xef].repeat(1000))?;
    drop(tcp);
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        // A hello bigger than the 1 MiB limit.
        let huge = "x".repeat(2 << 20);
        let outcome = match raw_session(addr.clone(), huge).await {
            Ok((_tx, mut inbound)) => inbound.message().await.map(|_| ()),
            Err(e) => return Err::<(), Box<dyn std::error::Error>>(e),
        };
        let status = outcome.err().ok_or("an oversized message was accepted")?;
        assert!(status.message().contains("too large"), "{status:?}");
        // Refused on its announced length, before the driver buffered it: the hello's limit.
        assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
        assert!(
            status.message().contains("before the hello")
                && status.message().contains(&format!("{MAX_HELLO_BYTES} bytes"))
                && status.message().contains("token"),
            "{status:?}"
        );
        // A welcomed runner that sends a forged fragment is failed, not trusted.
        let (tx, mut inbound) = raw_session(addr.clone(), TOKEN.into()).await?;
        let welcome = inbound.message().await?.ok_or("no welcome")?;
        assert!(matches!(welcome.kind, Some(proto::driver_message::Kind::Welcome(_))));
        tx.send(ready()).await?;
        let forged = proto::Fragment {
            fragment_len: 5,
            num_rows: 2,
            obs_shape: vec![1],
            action_dim: 1,
            dist_inputs_dim: 2,
            ..Default::default()
        };
        tx.send(proto::RunnerMessage { kind: Some(proto::runner_message::Kind::Fragment(forged)) })
            .await?;
        // The session ends; drain it.
        while let Ok(Some(_)) = inbound.message().await {}
        Ok(())
    })?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while group.metrics().num_env_runner_failures == 0 && Instant::now() < deadline {
        group.sample()?;
    }
    let state = &group.runner_states()[0];
    assert!(
        state
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("malformed") && e.contains("no observations")),
        "{state:?}"
    );
    // The group relaunched the slot; a good runner takes it.
    let good = spawn_runner(client(&server, TOKEN)?, 1);
    let fragments = sample_until(&mut group, Duration::from_secs(10), |f| !f.is_empty())?;
    assert!(fragments.iter().all(|f| f.runner_id == 1));
    assert_eq!(group.metrics().num_env_runner_restarts, 1);
    server.finish("done");
    good.join().map_err(|_| "panicked")??;
    Ok(())
}

/// Reads `tcp` until the driver closes it; how long after `since` that was.
fn closed_after(mut tcp: std::net::TcpStream, since: Instant) -> Result<Duration, std::io::Error> {
    use std::io::Read;
    tcp.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut buf = [0u8; 1024];
    loop {
        match tcp.read(&mut buf) {
            Ok(0) => return Ok(since.elapsed()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(since.elapsed()),
            Err(e) => return Err(e),
        }
    }
}

#[test]
fn connections_without_the_token_are_closed_after_the_hello_timeout_or_to_make_room() -> TestResult
{
    let mut settings = ServerSettings::new("127.0.0.1:0", Token::new(TOKEN)?);
    settings.heartbeat_interval = Duration::from_millis(100);
    settings.hello_timeout = Duration::from_secs(2);
    settings.max_unauthenticated_connections = 2;
    let server = Arc::new(RunnerServer::bind(settings)?);
    let mut group = group(&server, 1)?;
    let addr = server.local_addr();
    let started = Instant::now();
    // Three connections that say nothing: the third closes the first (only two may wait for
    // their hello), the other two are closed after the hello timeout.
    let mut silent = Vec::new();
    for _ in 0..3 {
        silent.push(std::net::TcpStream::connect(addr)?);
        std::thread::sleep(Duration::from_millis(100));
    }
    let closed: Vec<Duration> =
        silent.into_iter().map(|tcp| closed_after(tcp, started)).collect::<Result<_, _>>()?;
    assert!(closed[0] < Duration::from_millis(1500), "the oldest was not evicted: {closed:?}");
    assert!(
        closed[1..]
            .iter()
            .all(|t| *t >= Duration::from_millis(1900) && *t < Duration::from_secs(8)),
        "not closed at the hello timeout: {closed:?}"
    );
    // A runner shows the token at once and is served; nothing limits its connection after.
    let good = spawn_runner(client(&server, TOKEN)?, 1);
    sample_until(&mut group, Duration::from_secs(10), |f| f.len() >= 3)?;
    server.finish("done");
    good.join().map_err(|_| "panicked")??;
    Ok(())
}

#[test]
fn a_runner_that_showed_the_token_sends_fragments_of_megabytes() -> TestResult {
    // The default limit of 64 MiB; a fragment of 2 envs x 5 steps x 300 000 floats is 12 MB
    // (as an Atari fragment of 8 envs x 50 steps of 84x84x4 bytes is 11 MB), far above what
    // a connection may send before its hello.
    let width = 300_000;
    let mut settings = ServerSettings::new("127.0.0.1:0", Token::new(TOKEN)?);
    settings.heartbeat_interval = Duration::from_millis(100);
    let server = Arc::new(RunnerServer::bind(settings)?);
    let mut group = group_of_width(&server, 1, width)?;
    let good = spawn_runner(client(&server, TOKEN)?, width);
    let fragments = sample_until(&mut group, Duration::from_secs(20), |f| f.len() >= 3)?;
    assert!(fragments.iter().all(|f| f.batch.obs.len() == 10 * width));
    assert_eq!(group.metrics().num_env_runner_failures, 0);
    server.finish("done");
    good.join().map_err(|_| "panicked")??;
    Ok(())
}

#[test]
fn a_runner_that_vanishes_or_goes_silent_fails_and_a_new_one_takes_its_slot() -> TestResult {
    let server = server(Duration::from_millis(500))?;
    let mut group = group(&server, 1)?;
    let addr = server.local_addr().to_string();
    let rt = tokio::runtime::Runtime::new()?;
    // Silent: welcomed and ready, then nothing at all (no heartbeats).
    let silent = rt.block_on(async {
        let (tx, mut inbound) = raw_session(addr.clone(), TOKEN.into()).await?;
        inbound.message().await?;
        tx.send(ready()).await?;
        Ok::<_, Box<dyn std::error::Error>>((tx, inbound))
    })?;
    let started = Instant::now();
    while group.metrics().num_env_runner_failures == 0 {
        assert!(started.elapsed() < Duration::from_secs(5), "a silent runner was never failed");
        group.sample()?;
    }
    let reason = group.runner_states()[0].last_error.clone().unwrap_or_default();
    assert!(reason.contains("sent nothing for"), "{reason}");
    drop(silent);
    // Vanishes: ready, then the connection drops.
    rt.block_on(async {
        let (tx, mut inbound) = raw_session(addr.clone(), TOKEN.into()).await?;
        inbound.message().await?;
        tx.send(ready()).await?;
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok::<_, Box<dyn std::error::Error>>(())
    })?;
    while group.metrics().num_env_runner_failures < 2 {
        assert!(started.elapsed() < Duration::from_secs(10), "a vanished runner was never failed");
        group.sample()?;
    }
    let good = spawn_runner(client(&server, TOKEN)?, 1);
    let fragments = sample_until(&mut group, Duration::from_secs(10), |f| !f.is_empty())?;
    assert_eq!(group.runner_states()[0].num_restarts, 2);
    assert!(
        fragments.iter().all(|f| f.batch.weights_version == vec![1, 1]),
        "the new runner got the current weights"
    );
    server.finish("done");
    good.join().map_err(|_| "panicked")??;
    Ok(())
}

#[test]
fn runners_wait_for_a_restarted_driver_and_give_up_when_none_comes() -> TestResult {
    let first = server(Duration::from_secs(10))?;
    let addr = first.local_addr();
    let mut group1 = group(&first, 1)?;
    let runner = spawn_runner(client(&first, TOKEN)?, 1);
    sample_until(&mut group1, Duration::from_secs(10), |f| !f.is_empty())?;
    // The driver goes away without finishing the run (as when it is killed) ...
    drop(group1);
    drop(first);
    // ... and comes back on the same address: the same runner serves it.
    let mut settings = ServerSettings::new(addr.to_string(), Token::new(TOKEN)?);
    settings.heartbeat_interval = Duration::from_millis(100);
    let second = Arc::new(RunnerServer::bind(settings)?);
    let mut group2 = group(&second, 1)?;
    sample_until(&mut group2, Duration::from_secs(10), |f| !f.is_empty())?;
    assert!(!runner.is_finished());
    // Gone for good: the runner gives up after its reconnect timeout (3 s).
    drop(group2);
    drop(second);
    let gone = Instant::now();
    match runner.join().map_err(|_| "panicked")? {
        Err(RemoteError::DriverLost { .. }) => {}
        other => panic!("expected the driver to be lost: {other:?}"),
    }
    assert!(gone.elapsed() < Duration::from_secs(10), "gave up after {:?}", gone.elapsed());
    Ok(())
}

#[test]
fn tls_runners_trust_the_drivers_certificate_and_refuse_another() -> TestResult {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])?;
    let (cert_pem, key_pem) = (cert.cert.pem(), cert.key_pair.serialize_pem());
    let mut settings = ServerSettings::new("127.0.0.1:0", Token::new(TOKEN)?);
    settings.tls = Some(impala_remote::ServerTls {
        cert_pem: cert_pem.clone().into_bytes(),
        key_pem: key_pem.into_bytes(),
    });
    let server = Arc::new(RunnerServer::bind(settings)?);
    let mut group = group(&server, 1)?;
    let tls = |ca: String| {
        let mut c = ClientSettings::new(
            format!("localhost:{}", server.local_addr().port()),
            Token::new(TOKEN)?,
        );
        c.reconnect_timeout = Duration::from_secs(1);
        c.tls = Some(impala_remote::ClientTls { ca_pem: ca.into_bytes(), domain: None });
        Ok::<_, RemoteError>(c)
    };
    // A runner that trusts another CA cannot connect, and gives up.
    let other = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])?;
    match spawn_runner(tls(other.cert.pem())?, 1).join().map_err(|_| "panicked")? {
        Err(RemoteError::DriverLost { last_error, .. }) => {
            assert!(last_error.contains("connect"), "{last_error}")
        }
        other => panic!("an untrusted certificate was accepted: {other:?}"),
    }
    // Plain HTTP/2 to a TLS driver does not get in either.
    let mut plain = client(&server, TOKEN)?;
    plain.reconnect_timeout = Duration::from_secs(1);
    assert!(spawn_runner(plain, 1).join().map_err(|_| "panicked")?.is_err());
    assert_eq!(group.metrics().num_env_runner_failures, 0);
    let good = spawn_runner(tls(cert_pem)?, 1);
    sample_until(&mut group, Duration::from_secs(10), |f| !f.is_empty())?;
    server.finish("done");
    assert_eq!(good.join().map_err(|_| "panicked")??, "done");
    Ok(())
}

#[test]
fn token_files_need_a_secret_of_16_bytes() -> TestResult {
    use impala_remote::Token;
    let dir = std::env::temp_dir().join(format!("impala-remote-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("token");
    std::fs::write(&file, "abc\n")?;
    let error = Token::from_file(&file).err().ok_or("a 3-byte secret was accepted")?.to_string();
    assert!(error.contains("3 bytes") && error.contains("openssl rand -hex 32"), "{error}");
    std::fs::write(&file, "0123456789abcdef\n")?;
    assert!(Token::from_file(&file)?.matches("0123456789abcdef"));
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

#[test]
fn a_session_that_would_not_fit_the_welcome_message_is_refused_before_runners_wait() -> TestResult {
    use impala_runner_pool::{PoolError, RunnerTransport};
    let server = server(Duration::from_secs(5))?;
    let limit = 1 << 20;
    let run = |session_bytes: usize| RunSession {
        env: RunEnv::Single(walk_spec(1)),
        session: vec![b'x'; session_bytes],
        compress_observations: false,
    };
    // The spec and the other fields of the welcome take less than 200 bytes.
    server.check_session(&run(limit - 200))?;
    match server.check_session(&run(limit)) {
        Err(PoolError::SessionTooLarge { bytes, limit: l }) => {
            assert!(bytes > limit && l == limit, "{bytes} {l}");
        }
        other => return Err(format!("a session of the whole limit fit: {other:?}").into()),
    }
    Ok(())
}

/// Two agents of CartPole, one policy each; weights of policy `p` are version `10 * p + v`.
fn cartpoles() -> Result<(impala_core::MultiAgentSpec, Vec<EnvSpec>), CoreError> {
    let spec = impala_envs::MultiAgentCartPole::new(2)?.spec().clone();
    let policies = spec
        .agents
        .iter()
        .map(|a| EnvSpec {
            id: a.id.clone(),
            observation_space: a.observation_space.clone(),
            action_space: a.action_space.clone(),
            max_episode_steps: None,
        })
        .collect();
    Ok((spec, policies))
}

/// Two CartPoles whose step fails after `fail_after` steps (never when `None`).
struct Failing {
    inner: impala_envs::MultiAgentCartPole,
    fail_after: Option<usize>,
    steps: usize,
}

impl MultiAgentEnv for Failing {
    fn spec(&self) -> &impala_core::MultiAgentSpec {
        self.inner.spec()
    }
    fn reset(
        &mut self,
        seed: Option<u64>,
        obs: &mut [Vec<f32>],
        out: &mut impala_core::MultiAgentStep,
    ) -> Result<(), CoreError> {
        self.inner.reset(seed, obs, out)
    }
    fn step(
        &mut self,
        actions: &[Vec<f32>],
        obs: &mut [Vec<f32>],
        out: &mut impala_core::MultiAgentStep,
    ) -> Result<(), CoreError> {
        self.steps += 1;
        if self.fail_after.is_some_and(|n| self.steps > n) {
            return Err(CoreError::Env {
                env: "Failing".into(),
                reason: "the game crashed".into(),
            });
        }
        self.inner.step(actions, obs, out)
    }
}

/// Builds multi-agent runners of two CartPoles with a random policy per agent.
fn multi_agent_builder() -> BuildRunner {
    failing_multi_agent_builder(None)
}

/// As [`multi_agent_builder`], the envs of every runner's first incarnation failing after
/// `fail_after` steps.
fn failing_multi_agent_builder(fail_after: Option<usize>) -> BuildRunner {
    Arc::new(move |a: &Assignment, weights: Vec<Arc<Weights>>| {
        let RunEnv::Multi { policies, .. } = &a.env else {
            return Err("not a multi-agent run".into());
        };
        let fail_after = fail_after.filter(|_| a.incarnation == 0);
        let envs: MultiAgentEnvFactory = Arc::new(move |_| {
            let inner = impala_envs::MultiAgentCartPole::new(2)?;
            Ok(Box::new(Failing { inner, fail_after, steps: 0 }) as Box<dyn MultiAgentEnv>)
        });
        let mut acting = Vec::new();
        for (spec, w) in policies.iter().zip(&weights) {
            let mut policy = RandomPolicy::new(spec, a.runner_id as u64);
            policy.set_weights(w).map_err(|e| e.to_string())?;
            acting.push(Box::new(policy) as Box<dyn Policy>);
        }
        let settings = MultiAgentSettings {
            policy_of_agent: vec![0, 1],
            rollout_fragment_length: 5,
            seed: Some(a.incarnation),
            explore: true,
            normalize_actions: true,
            record_episodes: false,
        };
        MultiAgentEnvRunner::new(a.runner_id, 2, &envs, acting, &settings)
            .map(|runner| BuiltRunner::Multi(Box::new(runner)))
            .map_err(|e| e.to_string())
    })
}

/// Samples `group` until `done` holds for the fragments so far, or fails after 10 s.
fn wait_until(
    group: &mut EnvRunnerGroup<MultiAgentFragment>,
    mut done: impl FnMut(&[MultiAgentFragment]) -> bool,
) -> Result<Vec<MultiAgentFragment>, Box<dyn std::error::Error>> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut all = Vec::new();
    while !done(&all) {
        if Instant::now() > deadline {
            return Err(format!("gave up after {} fragments: {group:?}", all.len()).into());
        }
        all.extend(group.sample()?);
    }
    Ok(all)
}

/// A multi-agent group of `runners` remote slots on `server` for two CartPoles (a policy per
/// agent), its policies first acting with `versions`.
fn multi_agent_group(
    server: &RunnerServer,
    runners: usize,
    versions: [u64; 2],
) -> Result<EnvRunnerGroup<MultiAgentFragment>, Box<dyn std::error::Error>> {
    multi_agent_group_restarting(server, runners, versions, false)
}

/// As [`multi_agent_group`], restarting failed runners (at most twice) when `restart`.
fn multi_agent_group_restarting(
    server: &RunnerServer,
    runners: usize,
    versions: [u64; 2],
    restart: bool,
) -> Result<EnvRunnerGroup<MultiAgentFragment>, Box<dyn std::error::Error>> {
    let (spec, policies) = cartpoles()?;
    let env = RunEnv::Multi { spec, policies };
    let session = RunSession { env, session: b"{}".to_vec(), compress_observations: false };
    // The runners build their own envs and sampling (`multi_agent_builder`); the group holds two
    // fragments in flight per runner and waits up to 50 ms per `sample`.
    let settings = EnvRunnerGroupSettings {
        num_env_runners: runners,
        sample_timeout: Some(Duration::from_millis(50)),
        restart_failed_env_runners: restart,
        max_num_env_runner_restarts: 2,
        ..EnvRunnerGroupSettings::default()
    };
    let weights = versions.iter().map(|&v| Arc::new(Weights::new(v, vec![]))).collect();
    let launcher = Box::new(server.launcher(session));
    Ok(EnvRunnerGroup::with_launcher(&settings, launcher, weights)?)
}

#[test]
fn remote_runners_of_a_multi_agent_env_send_a_batch_per_policy_and_take_weights_per_policy(
) -> TestResult {
    let server = server(Duration::from_secs(10))?;
    let mut group = multi_agent_group(&server, 2, [1, 11])?;
    let runners: Vec<_> = (0..2)
        .map(|_| {
            client(&server, TOKEN)
                .map(|c| std::thread::spawn(move || run_env_runner(&c, multi_agent_builder())))
        })
        .collect::<Result<_, _>>()?;
    assert_eq!(server.wait_for_runners(2, Duration::from_secs(10))?, 2);
    let first =
        wait_until(&mut group, |f| [1, 2].iter().all(|id| f.iter().any(|x| x.runner_id == *id)))?;
    for f in &first {
        assert_eq!((f.batches.len(), f.env_steps), (2, 10), "2 envs x 5 steps, a batch per policy");
        assert!(f.batches[0].weights_version.iter().all(|&v| v == 1));
        assert!(f.batches[1].weights_version.iter().all(|&v| v == 11));
        // Rows hold complete fragments of an agent; an agent whose pole fell left its row.
        let in_rows: usize = f.batches.iter().map(|b| b.env_steps()).sum();
        assert!(in_rows <= f.agent_steps && f.agent_steps <= 2 * f.env_steps, "{in_rows} {f:?}");
    }
    // Only policy 1 changes: its runners act with 12 from then on, policy 0 stays at 1.
    let ids = group.healthy_runner_ids();
    group.sync_weights(1, Arc::new(Weights::new(12, vec![])), &ids);
    let later = wait_until(&mut group, |f| {
        [1, 2].iter().all(|id| {
            f.iter().any(|x| x.runner_id == *id && x.batches[1].weights_version.contains(&12))
        })
    })?;
    assert!(later.iter().all(|f| f.batches[0].weights_version.iter().all(|&v| v == 1)));
    assert_eq!(group.metrics().num_env_runner_failures, 0);
    server.finish("the test is over");
    for runner in runners {
        assert_eq!(runner.join().map_err(|_| "runner panicked")??, "the test is over");
    }
    group.shutdown()?;
    Ok(())
}

#[test]
fn a_runner_that_builds_a_single_agent_env_for_a_multi_agent_run_is_rejected() -> TestResult {
    let server = server(Duration::from_secs(10))?;
    let _group = multi_agent_group(&server, 1, [1, 1])?;
    let refused = spawn_runner(client(&server, TOKEN)?, 1).join().map_err(|_| "panicked")?;
    match refused {
        Err(RemoteError::Rejected { reason, .. }) => {
            assert!(reason.contains("the runner built a single-agent env"), "{reason}");
        }
        other => {
            return Err(format!("a single-agent runner served a multi-agent run: {other:?}").into())
        }
    }
    Ok(())
}

#[test]
fn a_remote_multi_agent_runner_that_fails_is_relaunched_and_its_process_serves_the_new_slot(
) -> TestResult {
    let server = server(Duration::from_secs(10))?;
    let mut group = multi_agent_group_restarting(&server, 1, [1, 11], true)?;
    let settings = client(&server, TOKEN)?;
    // The first incarnation's envs crash in their 13th step (the third fragment of 5 steps).
    let runner = std::thread::spawn(move || {
        run_env_runner(&settings, failing_multi_agent_builder(Some(12)))
    });
    assert_eq!(server.wait_for_runners(1, Duration::from_secs(10))?, 1);
    let fragments = wait_until(&mut group, |f| f.len() >= 6)?;
    let m = group.metrics();
    assert_eq!((m.num_env_runner_failures, m.num_env_runner_restarts), (1, 1), "{m:?}");
    assert!(fragments.iter().all(|f| f.runner_id == 1 && f.batches.len() == 2));
    assert_eq!(m.num_healthy_env_runners, 1);
    server.finish("the test is over");
    assert_eq!(runner.join().map_err(|_| "runner panicked")??, "the test is over");
    group.shutdown()?;
    Ok(())
}
