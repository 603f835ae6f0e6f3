//! Env runners in other processes or on other hosts (RLlib's remote env runners), over any
//! transport of [`impala_runner_pool`] ([`impala_remote`]'s gRPC is one): what the driver hands
//! each remote runner (the config and the run's seeds) and how a runner process builds its env
//! runner from that ([`env_runner_builder`]; [`serve_env_runner`] over gRPC).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use impala_config::{ImpalaConfig, ValidatedConfig};
use impala_core::{EnvSpec, Weights};
use impala_runner_pool::{Assignment, BuildRunner, RunSession};
use impala_sampler::EnvRunner;
use serde::{Deserialize, Serialize};

use crate::builder::{run_envs, PolicySource, Streams};
use crate::settings;
use crate::{error_chain, ImpalaError, Result};

pub use impala_remote::{
    read_pem, ClientSettings, ClientTls, RemoteError, RunnerServer, ServerSettings, ServerTls,
    Token,
};

/// The gRPC server for the remote env runners of a run of `config` (`impala train --listen`):
/// listening on `listen` (`HOST:PORT`; port 0 picks a free one), admitting runners that present
/// the secret in `token_file`, serving TLS with the PEM files `tls` (certificate chain, private
/// key) when given. A ready runner that sends nothing for the config's `sample_timeout_s` has
/// failed. Hand it to [`ImpalaBuilder::remote_env_runners`](crate::ImpalaBuilder::remote_env_runners)
/// or [`Training::start`](crate::run::Training::start).
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let token = dir.path().join("token");
/// std::fs::write(&token, "0123456789abcdef0123456789abcdef")?;
/// let config = impala::config::ImpalaConfig::default().validate()?;
/// let server = impala::remote::runner_server(&config, "127.0.0.1:0", &token, None)?;
/// assert_ne!(server.local_addr().port(), 0);
/// let short = dir.path().join("short");
/// std::fs::write(&short, "s3cret")?;
/// assert!(impala::remote::runner_server(&config, "127.0.0.1:0", &short, None).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn runner_server(
    config: &ValidatedConfig,
    listen: &str,
    token_file: &Path,
    tls: Option<(&Path, &Path)>,
) -> Result<RunnerServer> {
    let mut settings = ServerSettings::new(listen, Token::from_file(token_file)?);
    settings.stall_timeout =
        Duration::try_from_secs_f64(config.config().sample_timeout_s).unwrap_or(Duration::MAX);
    settings.tls = tls.map(|(cert, key)| ServerTls::from_files(cert, key)).transpose()?;
    Ok(RunnerServer::bind(settings)?)
}

/// What a remote runner needs besides the env spec: the run's config and the seeds of its
/// current streams (they move on with every restore, as for runner threads).
#[derive(Debug, Serialize, Deserialize)]
struct SessionData {
    config: ImpalaConfig,
    env_seed: Option<u64>,
    sample_seed: u64,
    base_seed: u64,
}

/// The session remote runners of a runner group get.
pub(crate) fn run_session(
    config: &ValidatedConfig,
    spec: &EnvSpec,
    streams: Streams,
    base_seed: u64,
) -> Result<RunSession> {
    let data = SessionData {
        config: config.config().clone(),
        env_seed: streams.env_seed,
        sample_seed: streams.sample_seed,
        base_seed,
    };
    let session = serde_json::to_vec(&data).map_err(|source| ImpalaError::Json {
        action: "write",
        path: "(remote session)".into(),
        source,
    })?;
    Ok(RunSession {
        spec: spec.clone(),
        session,
        compress_observations: config.config().compress_observations,
    })
}

/// Refuses what remote runners cannot do, before anything starts.
pub(crate) fn check_remote_config(config: &ValidatedConfig) -> Result<()> {
    if config.config().num_env_runners == 0 {
        return Err(ImpalaError::EnvOption {
            key: "num_env_runners",
            problem: "is 0, but with remote env runners it counts the runners to wait for".into(),
            fix: "set `num_env_runners` to the number of remote env runners".into(),
        });
    }
    if config.config().normalize_observations {
        return Err(ImpalaError::EnvOption {
            key: "normalize_observations",
            problem: "needs the run's observation filter, which remote env runners do not share"
                .into(),
            fix: "turn it off, or train with local env runners".into(),
        });
    }
    Ok(())
}

/// Refuses `compress_observations` for runners in this process, where fragments never
/// cross a wire.
pub(crate) fn check_local_config(config: &ValidatedConfig) -> Result<()> {
    if config.config().compress_observations {
        return Err(ImpalaError::EnvOption {
            key: "compress_observations",
            problem: "compresses fragments sent by remote env runners, and this run has none"
                .into(),
            fix: "remove it, or serve remote env runners".into(),
        });
    }
    Ok(())
}

/// Builds a remote runner's env runner from its assignment: the driver's config (validated
/// again here), its env (built as the driver builds its runners' envs) and a CPU policy copy
/// acting with `weights`, its env and action streams those of the assigned runner and
/// incarnation.
fn build_runner(assignment: &Assignment, weights: Arc<Weights>) -> Result<EnvRunner> {
    let data: SessionData = serde_json::from_slice(&assignment.session).map_err(|source| {
        ImpalaError::Json { action: "read", path: "(remote session)".into(), source }
    })?;
    let config = data.config.validate()?;
    let envs = run_envs(&config, None)?;
    let mut settings = settings::env_runner(&config);
    settings.seed = data.env_seed;
    let policies = PolicySource {
        model: Arc::new(settings::model(&config)),
        spec: assignment.spec.clone(),
        base_seed: data.base_seed,
    }
    .with_weights(weights, data.sample_seed);
    Ok(EnvRunner::build(
        &settings,
        assignment.runner_id,
        assignment.incarnation,
        &envs.sampling,
        |ctx| policies(ctx),
    )?)
}

/// How a runner process of any transport builds its env runner from the slot it was given
/// (the driver's session data, see [`Assignment`]), acting with the driver's weights. Sets this
/// process's libtorch to one thread: the runner's inference is small batches, and more threads
/// only contend with the env and transport threads.
///
/// ```
/// use std::sync::Arc;
/// use impala::core::{EnvSpec, Space, Weights};
/// use impala::runner_pool::Assignment;
///
/// let build = impala::remote::env_runner_builder();
/// let spec = EnvSpec {
///     id: "CartPole-v1".into(),
///     observation_space: Space::continuous(vec![-5.0; 4], vec![5.0; 4])?,
///     action_space: Space::Discrete(2),
///     max_episode_steps: Some(500),
/// };
/// let garbled = Assignment { runner_id: 1, incarnation: 0, spec, session: b"{".to_vec() };
/// let error = build(&garbled, Arc::new(Weights::new(1, vec![]))).err().ok_or("built")?;
/// assert!(error.contains("(remote session)"), "{error}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn env_runner_builder() -> BuildRunner {
    tch::set_num_threads(1);
    Arc::new(|assignment, weights| build_runner(assignment, weights).map_err(|e| error_chain(&e)))
}

/// Runs this process as a remote env runner of the driver in `settings` (`impala env-runner`)
/// until the driver's run is over (returns its reason), the driver refuses it, or the driver
/// stays unreachable for the reconnect timeout.
pub fn serve_env_runner(settings: &ClientSettings) -> Result<String> {
    Ok(impala_remote::run_env_runner(settings, env_runner_builder())?)
}
