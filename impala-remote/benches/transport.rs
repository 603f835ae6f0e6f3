//! The transport alone over loopback: a driver-side runner group fed by one remote runner
//! whose env is free (it returns the same frame) and whose policy is random, so what is
//! measured is fragments through gRPC, validation and the group. Atari-sized frames (84x84x4
//! uint8, 8 envs x 50 steps per fragment, as `examples/pong-impala.toml`) with and without LZ4,
//! and CartPole-sized ones. Prints one JSON line per case:
//! `cargo bench -p impala-remote --bench transport`.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use impala_core::{CoreError, Env, EnvSpec, Policy, Space, StepOutcome, Weights};
use impala_remote::{
    run_env_runner, BuildRunner, BuiltRunner, ClientSettings, RunEnv, RunSession, RunnerServer,
    ServerSettings, Token,
};
use impala_sampler::{
    EnvFactory, EnvRunner, EnvRunnerGroup, EnvRunnerGroupSettings, EnvRunnerSettings, Fragment,
    RandomPolicy,
};

/// An env that costs nothing: a fixed frame (a Pong-like mostly-flat image), reward 0.
struct Still {
    spec: EnvSpec,
    frame: Vec<f32>,
}

impl Env for Still {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }
    fn reset(&mut self, _: Option<u64>, obs: &mut [f32]) -> Result<(), CoreError> {
        obs.copy_from_slice(&self.frame);
        Ok(())
    }
    fn step(&mut self, _: &[f32], obs: &mut [f32]) -> Result<StepOutcome, CoreError> {
        obs.copy_from_slice(&self.frame);
        Ok(StepOutcome::default())
    }
}

fn measure(
    name: &str,
    obs: Space,
    compress: bool,
    steps: usize,
    seconds: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    let spec = EnvSpec {
        id: "Still-v0".into(),
        observation_space: obs,
        action_space: Space::Discrete(6),
        max_episode_steps: None,
    };
    let dim = spec.observation_space.flat_dim();
    // A frame like Atari's: a flat background with a few bright objects.
    let frame: Vec<f32> = (0..dim).map(|i| if i % 997 < 12 { 236.0 } else { 144.0 }).collect();
    let token = Token::new("bench")?;
    let server = RunnerServer::bind(ServerSettings::new("127.0.0.1:0", token.clone()))?;
    let group_settings = EnvRunnerGroupSettings {
        num_env_runners: 1,
        sample_timeout: Some(Duration::from_millis(5)),
        ..Default::default()
    };
    let env = RunEnv::Single(spec.clone());
    let session = RunSession { env, session: Vec::new(), compress_observations: compress };
    let mut group = EnvRunnerGroup::<Fragment>::with_launcher(
        &group_settings,
        Box::new(server.launcher(session)),
        vec![Arc::new(Weights::new(1, vec![]))],
    )?;
    let build: BuildRunner = Arc::new(move |a, _weights| {
        let (spec, frame, policy_spec) = (spec.clone(), frame.clone(), spec.clone());
        let envs: EnvFactory = Arc::new(move |_| {
            Ok(Box::new(Still { spec: spec.clone(), frame: frame.clone() }) as Box<dyn Env>)
        });
        let settings = EnvRunnerSettings {
            num_envs: NonZeroUsize::new(8).ok_or("zero")?,
            rollout_fragment_length: NonZeroUsize::new(steps).ok_or("zero")?,
            ..EnvRunnerSettings::default()
        };
        EnvRunner::build(&settings, a.runner_id, a.incarnation, &envs, |_| {
            Ok(Box::new(RandomPolicy::new(&policy_spec, 0)) as Box<dyn Policy>)
        })
        .map(|runner| BuiltRunner::Single(Box::new(runner)))
        .map_err(|e| e.to_string())
    });
    let client = ClientSettings::new(server.local_addr().to_string(), token);
    let runner = std::thread::spawn(move || run_env_runner(&client, build));
    server.wait_for_runners(1, Duration::from_secs(10))?;
    let rx_before = loopback_bytes();
    let cpu_before = driver_network_cpu_s();
    let started = Instant::now();
    let (mut env_steps, mut fragments) = (0usize, 0usize);
    while started.elapsed().as_secs_f64() < seconds {
        for f in group.sample()? {
            env_steps += f.batch.env_steps();
            fragments += 1;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let driver_cpu = driver_network_cpu_s() - cpu_before;
    let wire = loopback_bytes().zip(rx_before).map(|(after, before)| after.saturating_sub(before));
    server.finish("bench over");
    drop(group);
    runner.join().map_err(|_| "runner panicked")??;
    println!(
        "{}",
        serde_json::json!({
            "case": name,
            "compress_observations": compress,
            "env_steps_per_s": env_steps as f64 / elapsed,
            "fragments_per_s": fragments as f64 / elapsed,
            "ms_per_fragment": 1e3 * elapsed / fragments.max(1) as f64,
            // Receiving, decoding, decompressing and validating, on the driver's side.
            "driver_network_cpu_ms_per_fragment": 1e3 * driver_cpu / fragments.max(1) as f64,
            "loopback_bytes_per_env_step": wire.map(|w| w as f64 / env_steps.max(1) as f64),
        })
    );
    Ok(())
}

/// CPU seconds of the driver's network threads (`impala-remote`) in this process (Linux).
fn driver_network_cpu_s() -> f64 {
    let ticks = 100.0; // USER_HZ
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0.0 };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("stat")).ok())
        .filter(|stat| stat.contains("(impala-remote)"))
        .filter_map(|stat| {
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            let user: f64 = fields.get(11)?.parse().ok()?;
            let system: f64 = fields.get(12)?.parse().ok()?;
            Some((user + system) / ticks)
        })
        .sum()
}

/// Bytes received on the loopback interface so far (Linux), for bytes on the wire.
fn loopback_bytes() -> Option<u64> {
    std::fs::read_to_string("/sys/class/net/lo/statistics/rx_bytes").ok()?.trim().parse().ok()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `cargo bench` passes `--bench`; nothing else is read.
    let atari = Space::Bytes { shape: vec![84, 84, 4] };
    measure("atari_84x84x4_8x50", atari.clone(), false, 50, 5.0)?;
    measure("atari_84x84x4_8x50", atari, true, 50, 5.0)?;
    let cartpole = Space::continuous(vec![-5.0; 4], vec![5.0; 4])?;
    measure("cartpole_8x10", cartpole, false, 10, 5.0)?;
    Ok(())
}
