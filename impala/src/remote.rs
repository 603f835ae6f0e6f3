//! Env runners in other processes or on other hosts (RLlib's remote env runners), over any
//! transport of [`impala_runner_pool`] ([`impala_remote`]'s gRPC is one): what the driver hands
//! each remote runner (the config, the run's seeds and its TorchScript module) and how a runner
//! process builds its env runner from that ([`env_runner_builder`]; [`serve_env_runner`] over
//! gRPC).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use impala_config::{EnvRunnerBackend, ImpalaConfig, ValidatedConfig};
use impala_core::{EnvSpec, MultiAgentSpec, Weights};
use impala_runner_pool::{
    Assignment, BuildRunner, BuiltRunner, PoolError, RunEnv, RunSession, RunnerTransport,
};
use impala_sampler::{EnvRunner, MultiAgentEnvRunner, MultiAgentSettings};
use serde::{Deserialize, Serialize};

use crate::checkpoint::sha256_hex;
use crate::module_owner::{set_custom_model, ModuleOwner};
use crate::policies::{acting_policies, PolicySource, Streams};
use crate::run_envs::{multi_agent_env_factory, python_envs, python_pool, single_agent_envs};
use crate::settings;
use crate::torchscript::{ScriptModule, SharedModule};
use crate::{error_chain, ImpalaError, Result};

pub use impala_remote::{
    read_pem, ClientSettings, ClientTls, RemoteError, RunnerServer, ServerSettings, ServerTls,
    Token,
};

/// The gRPC server for the remote env runners of a run of `config` (`impala train --listen`):
/// listening on `listen` (`HOST:PORT`; port 0 picks a free one), admitting runners that present
/// `token` ([`Token::from_file`] for `--token-file`), serving TLS with `tls` when given
/// ([`ServerTls::from_files`], or [`ServerTls::for_run`] for runners the caller starts itself).
/// A ready runner that sends nothing for the config's `sample_timeout_s` has
/// failed. Hand it to [`ImpalaBuilder::remote_env_runners`](crate::ImpalaBuilder::remote_env_runners)
/// or [`Training::start`](crate::run::Training::start).
///
/// ```
/// use impala::remote::{runner_server, Token};
///
/// let config = impala::config::ImpalaConfig::default().validate()?;
/// let token = Token::new("0123456789abcdef0123456789abcdef")?;
/// let server = runner_server(&config, "127.0.0.1:0", token, None)?;
/// assert_ne!(server.local_addr().port(), 0);
/// assert!(Token::new(" \n").is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn runner_server(
    config: &ValidatedConfig,
    listen: &str,
    token: Token,
    tls: Option<ServerTls>,
) -> Result<RunnerServer> {
    let mut settings = ServerSettings::new(listen, token);
    settings.stall_timeout = config.durations().sample_timeout;
    settings.tls = tls;
    Ok(RunnerServer::bind(settings)?)
}

/// Where a remote runner's session comes from, for messages.
const SESSION: &str = "(remote session)";

/// What a remote runner needs besides the env spec: the run's config, the seeds of its
/// current streams (they move on with every restore, as for runner threads) and the run's
/// TorchScript module, which the runner's host need not have.
#[derive(Debug, Serialize, Deserialize)]
struct SessionData {
    config: ImpalaConfig,
    env_seed: Option<u64>,
    sample_seed: u64,
    base_seed: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    modules: Vec<SessionModule>,
}

/// A TorchScript module in the session: whose it is (the run's model, or a policy's own: see
/// [`ModuleOwner`]), its bytes (base64, inside the JSON) and their SHA-256, which the runner
/// checks before it writes them to its private copy and loads them.
#[derive(Debug, Serialize, Deserialize)]
struct SessionModule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    policy: ModuleOwner,
    sha256: String,
    base64: String,
}

impl SessionModule {
    fn new(policy: &ModuleOwner, module: &ScriptModule) -> Self {
        SessionModule {
            policy: policy.clone(),
            sha256: module.sha256().to_string(),
            base64: BASE64.encode(module.bytes()),
        }
    }

    /// The module the driver sent, refused when it is not the one whose SHA-256 came with it.
    fn into_module(self) -> Result<ScriptModule> {
        let damaged = |problem: String| ImpalaError::SessionModule { problem };
        let bytes = BASE64
            .decode(&self.base64)
            .map_err(|e| damaged(format!("is not valid base64 ({e})")))?;
        let sha256 = sha256_hex(&bytes);
        if sha256 != self.sha256 {
            return Err(damaged(format!(
                "has SHA-256 {sha256}, but the driver sent it as {}",
                self.sha256
            )));
        }
        ScriptModule::new(bytes, Path::new(SESSION))
    }
}

/// The session remote runners of a runner group get, checked against what `transport` can
/// carry (a TorchScript module too large for its messages is refused here, at start-up).
pub(crate) fn run_session(
    transport: &dyn RunnerTransport,
    config: &ValidatedConfig,
    env: RunEnv,
    streams: Streams,
    base_seed: u64,
    modules: &[(ModuleOwner, SharedModule)],
) -> Result<RunSession> {
    let data = SessionData {
        config: config.config().clone(),
        env_seed: streams.env_seed,
        sample_seed: streams.sample_seed,
        base_seed,
        modules: modules.iter().map(|(owner, m)| SessionModule::new(owner, m)).collect(),
    };
    let session = serde_json::to_vec(&data).map_err(|source| ImpalaError::Json {
        action: "write",
        path: SESSION.into(),
        source,
    })?;
    let run =
        RunSession { env, session, compress_observations: config.config().compress_observations };
    let largest = modules.iter().map(|(_, m)| m).max_by_key(|m| m.bytes().len());
    transport.check_session(&run).map_err(|e| match (e, largest) {
        (PoolError::SessionTooLarge { bytes, limit }, Some(module)) => {
            ImpalaError::ModuleTooLarge {
                path: module.source().to_path_buf(),
                module_bytes: module.bytes().len(),
                message_bytes: bytes,
                limit,
            }
        }
        (e, _) => ImpalaError::RunnerTransport(Box::new(e)),
    })?;
    Ok(run)
}

/// Waits up to `env_runner_connect_timeout_s` for `num_env_runners` remote runners; training
/// goes on with those that came (the others take their slots when they connect), and none at
/// all is an error that says how to start them.
pub(crate) fn wait_for_runners(
    transport: &dyn RunnerTransport,
    config: &ValidatedConfig,
) -> Result<()> {
    let expected = config.config().num_env_runners;
    let timeout = config.durations().env_runner_connect_timeout;
    tracing::info!(?transport, expected, "waiting for remote env runners");
    let ready =
        transport.wait_for_runners(expected, timeout).map_err(ImpalaError::RunnerTransport)?;
    if ready < expected {
        tracing::warn!(
            ready,
            expected,
            "not every remote env runner connected in time; training with those that did (the \
             others take their slots when they connect)"
        );
    }
    Ok(())
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
/// cross a wire, Ray env runners, which only the Python package starts, and more runner
/// threads than the machine can start.
pub(crate) fn check_local_config(config: &ValidatedConfig) -> Result<()> {
    crate::budget::check_threads(config)?;
    if config.config().env_runner_backend == EnvRunnerBackend::Ray {
        return Err(ImpalaError::EnvOption {
            key: "env_runner_backend",
            problem: "is \"ray\", but env runner actors are started by the Python package, \
                      which serves them to this run"
                .into(),
            fix: "train from Python (`IMPALAConfig().env_runners(env_runner_backend=\"ray\")`), \
                  or serve `impala env-runner --connect` processes with `impala train --listen`"
                .into(),
        });
    }
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
/// again here, its TorchScript module the one the driver sent), its env (built as the driver
/// builds its runners' envs) and CPU policy copies acting with `weights` (one per policy: a
/// multi-agent run's policies come from the config's mapping), its env and action streams
/// those of the assigned runner and incarnation.
fn build_runner(
    assignment: &Assignment,
    weights: Vec<Arc<Weights>>,
    host: &RunnerHost,
) -> Result<BuiltRunner> {
    let SessionData { mut config, env_seed, sample_seed, base_seed, modules } =
        serde_json::from_slice(&assignment.session).map_err(|source| ImpalaError::Json {
            action: "read",
            path: SESSION.into(),
            source,
        })?;
    // The policies load the modules from this runner's private copies, which go once the env
    // runner is built.
    let mut copies = Vec::with_capacity(modules.len());
    for module in modules {
        let owner = module.policy.clone();
        let copy = module.into_module()?;
        let path = copy.path().to_string_lossy().into_owned();
        set_custom_model(&mut config, owner.as_deref(), path);
        copies.push(copy);
    }
    if let Some(python) = &host.python_executable {
        config.python_executable = Some(python.clone());
    }
    let config = config.validate()?;
    let streams = Streams { env_seed, sample_seed };
    let spec = match &assignment.env {
        RunEnv::Single(spec) => spec,
        RunEnv::Multi { spec, policies } => {
            let slot = (assignment.runner_id, assignment.incarnation);
            let creator = host.env_creator.clone();
            let runner = multi_agent_runner(
                &config,
                creator,
                (spec, policies),
                slot,
                &weights,
                streams,
                base_seed,
            )?;
            return Ok(BuiltRunner::Multi(Box::new(runner)));
        }
    };
    let weights = weights.into_iter().next().ok_or_else(|| ImpalaError::EnvOption {
        key: "num_env_runners",
        problem: "a remote env runner was given no weights to act with".into(),
        fix: "run the same impala-rs release on the driver and the runners".into(),
    })?;
    let factory = match &host.env_creator {
        Some(creator) => Some(python_envs(&config, Some(creator.clone()))?.0),
        None => None,
    };
    let envs = single_agent_envs(&config, factory)?;
    let mut settings = settings::env_runner(&config);
    settings.seed = streams.env_seed;
    let policies =
        PolicySource { model: Arc::new(settings::model(&config)), spec: spec.clone(), base_seed }
            .with_weights(weights, streams.sample_seed);
    let runner = EnvRunner::build(
        &settings,
        assignment.runner_id,
        assignment.incarnation,
        &envs.sampling,
        |ctx| policies(ctx),
    )?;
    Ok(BuiltRunner::Single(Box::new(runner)))
}

/// A remote runner's multi-agent env runner: runner `runner_id`'s incarnation `incarnation`
/// of the driver's run of `config` on the driver's env `spec` with its `policies`' specs (its
/// envs built here as the driver builds them, on the envs of `creator` when this host brings
/// one; the agents mapped from the config), acting with `weights` (one per policy), its env and
/// action streams from the run's seeds. No env is probed here: the runner's envs are checked
/// against `spec` once built ([`Assignment::build`]).
fn multi_agent_runner(
    config: &ValidatedConfig,
    creator: Option<PathBuf>,
    (spec, policies): (&MultiAgentSpec, &[EnvSpec]),
    (runner_id, incarnation): (usize, u64),
    weights: &[Arc<Weights>],
    streams: Streams,
    base_seed: u64,
) -> Result<MultiAgentEnvRunner> {
    let python = creator.is_some() || !impala_envs::is_multi_agent(&config.config().env);
    let pool = python.then(|| python_pool(config, creator, false));
    let envs = multi_agent_env_factory(config, pool.as_ref());
    let map = config.config().policy_map(&spec.agent_ids())?;
    if map.policy_ids.len() != policies.len() {
        return Err(ImpalaError::MultiAgentOption {
            key: "policies",
            reason: format!(
                "the driver trains {} policies, but this runner's config maps the env's agents \
                 to {} ({}); run the same config and env on the driver and the runner",
                policies.len(),
                map.policy_ids.len(),
                map.policy_ids.join(", ")
            ),
        });
    }
    let mut sources = Vec::with_capacity(policies.len());
    for (spec, id) in policies.iter().zip(&map.policy_ids) {
        let policy_config = config.config().for_policy(id)?.validate()?;
        let model = Arc::new(settings::model(&policy_config));
        sources.push(PolicySource { model, spec: spec.clone(), base_seed });
    }
    let acting = acting_policies(sources, streams.sample_seed)(runner_id, incarnation, weights)?;
    let settings = MultiAgentSettings {
        policy_of_agent: map.policy_of_agent.clone(),
        rollout_fragment_length: config.config().rollout_fragment_length,
        seed: streams.env_seed,
        explore: true,
        normalize_actions: config.config().normalize_actions,
        record_episodes: false,
    }
    .for_runner(runner_id, incarnation);
    let num_envs = config.config().num_envs_per_env_runner;
    Ok(MultiAgentEnvRunner::new(runner_id, num_envs, &envs, acting, &settings)?)
}

/// How a runner process of any transport builds its env runner from the slot it was given
/// (the driver's session data, see [`Assignment`]), acting with the driver's weights. Sets this
/// process's libtorch to one thread: the runner's inference is small batches, and more threads
/// only contend with the env and transport threads.
///
/// ```
/// use std::sync::Arc;
/// use impala::core::{EnvSpec, Space, Weights};
/// use impala::runner_pool::{Assignment, RunEnv};
///
/// let build = impala::remote::env_runner_builder();
/// let spec = EnvSpec {
///     id: "CartPole-v1".into(),
///     observation_space: Space::continuous(vec![-5.0; 4], vec![5.0; 4])?,
///     action_space: Space::Discrete(2),
///     max_episode_steps: Some(500),
/// };
/// let env = RunEnv::Single(spec);
/// let garbled = Assignment { runner_id: 1, incarnation: 0, env, session: b"{".to_vec() };
/// let error = build(&garbled, vec![Arc::new(Weights::new(1, vec![]))]).err().ok_or("built")?;
/// assert!(error.contains("(remote session)"), "{error}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn env_runner_builder() -> BuildRunner {
    env_runner_builder_on(RunnerHost::default())
}

/// What the host of a remote env runner brings itself instead of taking the driver's: its
/// own Python interpreter for env workers, and the env creator (`impala_rs.register_env`)
/// pickled to a file of its own. A Ray env runner actor has both.
#[derive(Debug, Clone, Default)]
pub struct RunnerHost {
    /// The interpreter this host's Python env workers run, instead of the driver's
    /// `python_executable`.
    pub python_executable: Option<String>,
    /// A pickled env creator this host's env workers call to build `env`.
    pub env_creator: Option<PathBuf>,
}

/// [`env_runner_builder`] on a host that brings its own Python and env creator.
pub fn env_runner_builder_on(host: RunnerHost) -> BuildRunner {
    tch::set_num_threads(1);
    Arc::new(move |assignment, weights| {
        build_runner(assignment, weights, &host).map_err(|e| error_chain(&e))
    })
}

/// Runs this process as a remote env runner of the driver in `settings` (`impala env-runner`)
/// until the driver's run is over (returns its reason), the driver refuses it, or the driver
/// stays unreachable for the reconnect timeout. `host` says what this host brings itself
/// (`RunnerHost::default()`: nothing, as `impala env-runner`).
pub fn serve_env_runner(settings: &ClientSettings, host: RunnerHost) -> Result<String> {
    Ok(impala_remote::run_env_runner(settings, env_runner_builder_on(host))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use impala_core::{EnvSpec, Space};

    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    fn cartpole() -> Result<EnvSpec> {
        Ok(EnvSpec {
            id: "CartPole-v1".into(),
            observation_space: Space::continuous(vec![-5.0; 4], vec![5.0; 4])?,
            action_space: Space::Discrete(2),
            max_episode_steps: Some(500),
        })
    }

    #[test]
    fn a_runner_refuses_a_module_whose_sha256_is_not_the_one_sent_with_it() -> TestResult {
        let data = SessionData {
            config: ImpalaConfig::default(),
            env_seed: None,
            sample_seed: 0,
            base_seed: 0,
            modules: vec![SessionModule {
                policy: None,
                sha256: sha256_hex(b"the driver's module"),
                base64: BASE64.encode(b"another module"),
            }],
        };
        let session = serde_json::to_vec(&data).map_err(|source| ImpalaError::Json {
            action: "write",
            path: SESSION.into(),
            source,
        })?;
        let env = RunEnv::Single(cartpole()?);
        let assignment = Assignment { runner_id: 1, incarnation: 0, env, session };
        let build = env_runner_builder();
        let refused = build(&assignment, vec![Arc::new(Weights::new(1, vec![]))]).err();
        let message = refused.unwrap_or_default();
        assert!(message.contains("damaged on the way"), "{message}");
        assert!(message.contains(&sha256_hex(b"another module")), "{message}");
        Ok(())
    }

    #[test]
    fn a_module_too_large_for_the_transports_messages_is_refused_at_start_up() -> TestResult {
        let token = Token::new("0123456789abcdef")?;
        let mut settings = ServerSettings::new("127.0.0.1:0", token);
        settings.max_message_bytes = 64 << 10;
        let server = RunnerServer::bind(settings)?;
        let config = ImpalaConfig::default().validate()?;
        let streams = Streams { env_seed: None, sample_seed: 0 };
        let session = |module: ScriptModule| {
            let modules = [(None, Arc::new(module))];
            run_session(&server, &config, RunEnv::Single(cartpole()?), streams, 0, &modules)
        };
        // Base64 makes 3 bytes 4: 30 kB fit in 64 KiB with the config, 60 kB do not.
        session(ScriptModule::new(vec![7; 30_000], Path::new("small.pt"))?)?;
        match session(ScriptModule::new(vec![7; 60_000], Path::new("big.pt"))?) {
            Err(e @ ImpalaError::ModuleTooLarge { module_bytes: 60_000, limit: 65_536, .. }) => {
                let message = e.to_string();
                assert!(message.contains("`big.pt`") && message.contains("max_message_bytes"));
                Ok(())
            }
            other => Err(format!("a module above the message limit was sent: {other:?}").into()),
        }
    }
}
