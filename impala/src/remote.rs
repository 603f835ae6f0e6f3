//! Env runners in other processes or on other hosts (RLlib's remote env runners), over
//! [`impala_remote`]: what the driver hands each remote runner (the config and the run's seeds)
//! and how a runner process builds its env runner from that ([`serve_env_runner`]).

use std::sync::Arc;

use impala_config::{ImpalaConfig, ValidatedConfig};
use impala_core::{EnvSpec, Weights};
use impala_remote::{Assignment, BuildRunner, RunSession};
use impala_sampler::{EnvRunner, EnvRunnerSettings};
use serde::{Deserialize, Serialize};

use crate::builder::{run_envs, PolicySource, Streams};
use crate::{error_chain, ImpalaError, Result};

pub use impala_remote::{
    read_pem, ClientSettings, ClientTls, RemoteError, RunnerServer, ServerSettings, ServerTls,
    Token,
};

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
        compress_observations: config.compress_observations,
    })
}

/// Refuses what remote runners cannot do, before anything starts.
pub(crate) fn check_remote_config(config: &ValidatedConfig) -> Result<()> {
    if config.num_env_runners == 0 {
        return Err(ImpalaError::EnvOption {
            key: "num_env_runners",
            problem: "is 0, but with remote env runners it counts the runners to wait for".into(),
            fix: "set `num_env_runners` to the number of remote env runners".into(),
        });
    }
    if config.normalize_observations {
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
    if config.compress_observations {
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
    let mut settings = EnvRunnerSettings::from_config(&config);
    settings.seed = data.env_seed;
    let policies = PolicySource {
        model: config.model.clone(),
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

/// Runs this process as a remote env runner of the driver in `settings` (`impala env-runner`)
/// until the driver's run is over (returns its reason), the driver refuses it, or the driver
/// stays unreachable for the reconnect timeout.
pub fn serve_env_runner(settings: &ClientSettings) -> Result<String> {
    // One libtorch thread: the runner's inference is small batches, and more threads only
    // contend with the env and network threads.
    tch::set_num_threads(1);
    let build: BuildRunner = Arc::new(|assignment, weights| {
        build_runner(assignment, weights).map_err(|e| error_chain(&e))
    });
    Ok(impala_remote::run_env_runner(settings, build)?)
}
