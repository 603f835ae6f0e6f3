//! `impala_rs._impala_rs`: the native half of the `impala_rs` Python package. It holds no
//! logic of its own: configs go through `impala-config` (the CLI's key checks, messages and
//! validation), training through the `impala` library's [`Impala`], so Python and the CLI
//! cannot drift apart. The builder (`IMPALAConfig`), `register_env` and the Ray Tune trainable
//! are Python, in `python/impala_rs/`.
//!
//! Every call that trains, evaluates, saves, restores or acts releases the interpreter lock, so
//! other Python threads run meanwhile; Ctrl-C during `train()` ends the iteration early and
//! then raises `KeyboardInterrupt` with the algorithm intact.
#![deny(missing_docs)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once, PoisonError};

use impala::config::{ConfigError as RustConfigError, ImpalaConfig, ValidatedConfig};
use impala::core::{NamedTensor, Space};
use impala::{Algorithm, Impala, ImpalaError as RustImpalaError, Trainable, TrainedPolicy};
use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::Value;

create_exception!(
    _impala_rs,
    ConfigError,
    PyValueError,
    "A config with problems; `problems` lists every one, in the `impala` command's words."
);
create_exception!(
    _impala_rs,
    ImpalaError,
    PyRuntimeError,
    "Building, training, saving, restoring or evaluating failed."
);

/// Every config key as `(name, group, expected, rust_type)`: top-level keys, then the model's
/// as `model.<name>`; `group` is RLlib's builder method that sets it, `expected` what it accepts
/// in words, `rust_type` its Rust type (which the type stubs are generated from).
#[pyfunction]
fn config_keys() -> Vec<(String, &'static str, String, &'static str)> {
    let top = impala::config::keys().iter().map(|k| (k.name.to_string(), k));
    let model = impala::config::model_keys().iter().map(|k| (format!("model.{}", k.name), k));
    top.chain(model).map(|(name, k)| (name, k.group.name(), k.expected(), k.type_name)).collect()
}

/// Every other spelling of a key as `(alias, key, deprecated)` (RLlib's old names such as
/// `num_workers`, and new-stack names).
#[pyfunction]
fn config_aliases() -> Vec<(&'static str, &'static str, bool)> {
    impala::config::ALIASES.iter().map(|a| (a.name, a.canonical, a.deprecated)).collect()
}

/// The nearest config key to `name` (for "did you mean" messages).
#[pyfunction]
fn nearest_key(name: &str) -> String {
    impala::config::nearest_key(name)
}

/// RLlib's `IMPALAConfig()` defaults as a dict (the model as a nested dict under `model`).
#[pyfunction]
fn default_config(py: Python<'_>) -> PyResult<Py<PyAny>> {
    config_to_python(py, &ImpalaConfig::default())
}

/// Checks a config dict like the one `IMPALAConfig.to_dict()` returns, as `impala train` checks
/// a file, and returns its warnings. Raises [`ConfigError`] listing every problem.
#[pyfunction]
fn check_config(config: &Bound<'_, PyDict>) -> PyResult<Vec<String>> {
    Ok(validated(config)?.1)
}

/// Runs `episodes` episodes with a checkpoint's policy (greedy unless `explore`), as
/// `impala evaluate --checkpoint` does, and returns the evaluation result dict.
#[pyfunction]
#[pyo3(signature = (path, episodes = 10, explore = false))]
fn evaluate_checkpoint(
    py: Python<'_>,
    path: PathBuf,
    episodes: usize,
    explore: bool,
) -> PyResult<Py<PyAny>> {
    let result =
        py.detach(|| impala::evaluate_checkpoint(&path, episodes, explore)).map_err(impala_err)?;
    serialized_to_python(py, &result)
}

/// The config's resource request as Ray's placement group: `(bundles, strategy)`, each bundle
/// `{"CPU": n, "GPU": n, <custom>: n}` (the driver with its learner first, then one per env
/// runner), for the Tune trainable's `default_resource_request`.
#[pyfunction]
fn resource_bundles(config: &Bound<'_, PyDict>) -> PyResult<(Vec<BTreeMap<String, f64>>, String)> {
    let (config, _) = validated(config)?;
    let request = config.config().default_resource_request();
    let bundles = request
        .bundles
        .iter()
        .map(|bundle| {
            let mut resources = bundle.custom.clone();
            resources.insert("CPU".into(), bundle.cpus);
            if bundle.gpus > 0.0 {
                resources.insert("GPU".into(), bundle.gpus);
            }
            resources
        })
        .collect();
    Ok((bundles, request.strategy.as_str().to_string()))
}

/// The spaces of the envs a run of `config` trains on, after its wrappers (framestack,
/// observation normalisation), for building a user's torch model before the run:
/// `{"observation_space": space, "action_space": space, "max_episode_steps": int | None}`,
/// each space `{"type": "Discrete", "n"}`, `{"type": "MultiDiscrete", "nvec"}`,
/// `{"type": "Box", "low", "high", "shape"}` (flat bounds) or `{"type": "Bytes", "shape"}` (a
/// uint8 box). One env is built, from `config.env` or the pickled `env_creator`.
#[pyfunction]
#[pyo3(signature = (config, env_creator = None))]
fn env_spec(
    py: Python<'_>,
    config: &Bound<'_, PyDict>,
    env_creator: Option<PathBuf>,
) -> PyResult<Py<PyAny>> {
    let (config, _) = validated(config)?;
    let spec = py.detach(|| impala::run_env_spec(&config, env_creator)).map_err(impala_err)?;
    let dict = PyDict::new(py);
    dict.set_item("observation_space", space_to_python(py, &spec.observation_space)?)?;
    dict.set_item("action_space", space_to_python(py, &spec.action_space)?)?;
    dict.set_item("max_episode_steps", spec.max_episode_steps)?;
    Ok(dict.into_any().unbind())
}

/// A space as the dict [`env_spec`] describes (bounds as Python floats, infinities included).
fn space_to_python<'py>(py: Python<'py>, space: &Space) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    match space {
        Space::Discrete(n) => {
            dict.set_item("type", "Discrete")?;
            dict.set_item("n", n)?;
        }
        Space::MultiDiscrete(nvec) => {
            dict.set_item("type", "MultiDiscrete")?;
            dict.set_item("nvec", nvec)?;
        }
        Space::Box { low, high, shape } => {
            dict.set_item("type", "Box")?;
            dict.set_item("low", low)?;
            dict.set_item("high", high)?;
            dict.set_item("shape", shape)?;
        }
        Space::Bytes { shape } => {
            dict.set_item("type", "Bytes")?;
            dict.set_item("shape", shape)?;
        }
    }
    Ok(dict)
}

/// The config a checkpoint was trained with (a checkpoint folder, or a run folder's newest
/// checkpoint), for `Impala.from_checkpoint`.
#[pyfunction]
fn checkpoint_config(py: Python<'_>, path: PathBuf) -> PyResult<Py<PyAny>> {
    let (_, config) = py
        .detach(|| {
            let dir = impala::checkpoint::find_checkpoint(&path)?;
            impala::checkpoint::read_checkpoint(&dir)
        })
        .map_err(impala_err)?;
    config_to_python(py, &config)
}

/// RLlib's `Impala` algorithm: built from a checked config dict, trained one iteration per
/// `train()` call.
#[pyclass(name = "Algorithm", module = "impala_rs._impala_rs")]
struct PyAlgorithm {
    /// `None` once stopped. Calls from several Python threads take turns.
    inner: Mutex<Option<Algorithm>>,
    /// Set by Ctrl-C during `train()`: the iteration ends early.
    interrupt: Arc<AtomicBool>,
}

#[pymethods]
impl PyAlgorithm {
    /// Builds the algorithm (learner, env runners, their env workers) from a config dict;
    /// `env_creator` is a pickled env creator (`impala_rs.register_env`) the env workers call.
    /// With `runner_server` the env runners are the processes that connect to it (Ray
    /// actors), waited for up to `env_runner_connect_timeout_s`. With `checkpoint` it is
    /// restored from that checkpoint before its env runners start.
    #[new]
    #[pyo3(signature = (config, env_creator = None, runner_server = None, checkpoint = None))]
    fn new(
        py: Python<'_>,
        config: &Bound<'_, PyDict>,
        env_creator: Option<PathBuf>,
        runner_server: Option<PyRef<'_, RunnerServer>>,
        checkpoint: Option<PathBuf>,
    ) -> PyResult<Self> {
        // The package's `IMPALAConfig` already reported the warnings (`check_config`).
        let (config, _warnings) = validated(config)?;
        let transport = runner_server.map(|server| {
            Arc::clone(&server.inner) as Arc<dyn impala::runner_pool::RunnerTransport>
        });
        let mut algo = py
            .detach(|| {
                Algorithm::build_restored(config, env_creator, transport, checkpoint.as_deref())
            })
            .map_err(impala_err)?;
        let interrupt = Arc::new(AtomicBool::new(false));
        algo.trainable().set_interrupt_flag(Arc::clone(&interrupt));
        Ok(PyAlgorithm { inner: Mutex::new(Some(algo)), interrupt })
    }

    /// One training iteration; returns the result dict with result.json's keys.
    fn train(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.interrupt.store(false, Ordering::SeqCst);
        let result = {
            let _ctrl_c = CtrlC::watch(py, &self.interrupt)?;
            self.with(py, |algo| algo.trainable().train())
        };
        let result = to_python(py, &result?.to_json())?;
        // A Ctrl-C during the iteration raises KeyboardInterrupt here (Python's own handler
        // saw it too), carrying the shortened iteration's result as `result` (the iteration
        // counts); the algorithm stays usable, e.g. to save.
        if let Err(interrupted) = py.check_signals() {
            interrupted.value(py).setattr("result", result)?;
            return Err(interrupted);
        }
        Ok(result)
    }

    /// Runs `evaluation_duration` evaluation episodes with the current weights (RLlib's
    /// `evaluate()`); returns `{"env_runners": {...}}` like RLlib's evaluation results.
    fn evaluate(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let result = self.with(py, |algo| algo.trainable().evaluate())?;
        serialized_to_python(py, &BTreeMap::from([("env_runners", result)]))
    }

    /// Saves a checkpoint `dir/checkpoint_<iteration>` (the CLI's format) and returns its path.
    fn save(&self, py: Python<'_>, dir: PathBuf) -> PyResult<String> {
        let path = self.with(py, |algo| algo.trainable().save(&dir))?;
        Ok(path.display().to_string())
    }

    /// Restores a checkpoint folder (or the newest checkpoint of a run folder).
    fn restore(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        self.with(py, |algo| algo.trainable().restore(&path))
    }

    /// Stops the env runners, their env workers and the learner; later calls raise.
    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        let taken = self.lock().take();
        match taken {
            Some(mut algo) => py.detach(|| algo.trainable().stop()).map_err(impala_err),
            None => Ok(()),
        }
    }

    /// Completed training iterations.
    #[getter]
    fn iteration(&self) -> PyResult<u64> {
        self.lock().as_ref().map(Trainable::iteration).ok_or_else(stopped)
    }

    /// Policy `policy_id` with the learner's current weights and the run's observation filter
    /// (a copy: later training does not change it; see `update_policy`).
    #[pyo3(signature = (policy_id = impala::DEFAULT_POLICY_ID.to_string()))]
    fn get_policy(&self, py: Python<'_>, policy_id: String) -> PyResult<Policy> {
        let policy = self.with(py, |algo| algo.get_policy(&policy_id))?;
        Ok(Policy { inner: Mutex::new(policy) })
    }

    /// The policy ids: `default_policy`, or a multi-agent run's `policies`.
    #[getter]
    fn policy_ids(&self) -> PyResult<Vec<String>> {
        self.lock().as_ref().map(Algorithm::policy_ids).ok_or_else(stopped)
    }

    /// Restores only policy `policy_id` of a multi-agent checkpoint.
    fn restore_policy(&self, py: Python<'_>, path: PathBuf, policy_id: String) -> PyResult<()> {
        self.with(py, |algo| match algo {
            Algorithm::Multi(algo) => algo.restore_policy(&path, &policy_id),
            Algorithm::Single(algo) => algo.restore(&path),
        })
    }

    /// Replaces the learner's weights with `(name, shape, float32 bytes)`, one per parameter
    /// (the env runners act with them from their next fragment); a missing, unknown or
    /// misshapen one raises `ImpalaError` naming it.
    fn set_weights(&self, py: Python<'_>, weights: Vec<RawTensor>) -> PyResult<()> {
        let tensors = named_tensors(weights)?;
        self.with(py, |algo| single(algo)?.set_weights(tensors))
    }

    /// Gives `policy` (one of `get_policy()`) the learner's current weights and the run's
    /// current observation filter.
    fn update_policy(&self, py: Python<'_>, policy: &Policy) -> PyResult<()> {
        self.with(py, |algo| single(algo)?.update_policy(&mut policy.lock()))
    }

    /// The validated config, every option included.
    #[getter]
    fn config(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let config =
            self.lock().as_mut().ok_or_else(stopped)?.trainable().config().config().clone();
        config_to_python(py, &config)
    }
}

impl PyAlgorithm {
    /// Runs `f` on the algorithm with the interpreter lock released.
    fn with<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Algorithm) -> impala::Result<R> + Send,
    ) -> PyResult<R> {
        py.detach(|| match self.lock().as_mut() {
            Some(algo) => f(algo).map_err(impala_err),
            None => Err(stopped()),
        })
    }

    /// The algorithm; a panic in an earlier call (already reported) does not lock it away.
    fn lock(&self) -> MutexGuard<'_, Option<Algorithm>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The single-agent algorithm, for what only it has (one policy's weights and filter).
fn single(algo: &mut Algorithm) -> impala::Result<&mut Impala> {
    match algo {
        Algorithm::Single(algo) => Ok(algo),
        Algorithm::Multi(_) => Err(RustImpalaError::MultiAgentOption {
            key: "policies",
            reason: "this call acts on the one policy of a single-agent run; name the policy \
                     (`get_policy(policy_id)`, `get_weights([policy_id])`)"
                .into(),
        }),
    }
}

impl Drop for PyAlgorithm {
    /// An algorithm dropped without `stop()` still stops its threads and env workers.
    fn drop(&mut self) {
        if let Some(mut algo) = self.lock().take() {
            if let Err(e) = algo.trainable().stop() {
                eprintln!(
                    "impala_rs: stopping a dropped algorithm failed: {}",
                    impala::error_chain(&e)
                );
            }
        }
    }
}

/// The server env runners in other processes connect to (`impala train --listen`'s): the
/// Python package binds it before it starts its Ray env runner actors, so they know where to
/// connect, and hands it to `Algorithm`.
#[pyclass(module = "impala_rs._impala_rs", frozen)]
struct RunnerServer {
    inner: Arc<impala::remote::RunnerServer>,
    /// What its runners trust, when it serves TLS (`env_runner_tls`).
    client_tls: Option<impala::remote::ClientTls>,
}

#[pymethods]
impl RunnerServer {
    /// Listens on `listen` (`HOST:PORT`; port 0 picks a free one) for the env runners of a
    /// run of `config` that present `token`; with `env_runner_tls`, over TLS with a
    /// certificate made for this server (`tls_ca` is what its runners trust).
    #[new]
    fn new(
        py: Python<'_>,
        config: &Bound<'_, PyDict>,
        listen: String,
        token: String,
    ) -> PyResult<Self> {
        use impala::remote::{runner_server, ServerTls, Token};
        let (config, _) = validated(config)?;
        let token = Token::new(&token).map_err(remote_err)?;
        let (server_tls, client_tls) = match config.config().env_runner_tls {
            true => ServerTls::for_run().map(|(s, c)| (Some(s), Some(c))).map_err(remote_err)?,
            false => (None, None),
        };
        let server =
            py.detach(|| runner_server(&config, &listen, token, server_tls)).map_err(impala_err)?;
        Ok(RunnerServer { inner: Arc::new(server), client_tls })
    }

    /// The port it listens on.
    #[getter]
    fn port(&self) -> u16 {
        self.inner.local_addr().port()
    }

    /// The certificate (PEM) its runners trust, when it serves TLS; `None` otherwise. Public:
    /// the private key never leaves this process.
    #[getter]
    fn tls_ca<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.client_tls.as_ref().map(|tls| PyBytes::new(py, &tls.ca_pem))
    }

    /// Tells the env runners that the run is over, for `reason`: they end instead of waiting
    /// for a driver to come back.
    fn finish(&self, reason: &str) {
        self.inner.finish(reason);
    }
}

/// Serves the driver at `connect` (`HOST:PORT`) as one of its env runners, presenting
/// `token`, until the driver's run is over (returns the driver's reason), the driver refuses
/// it, or the driver stays unreachable for 60 s. The env workers run `python_executable` and
/// build the env with the pickled `env_creator` when given. With `tls_ca` (a `RunnerServer`'s)
/// it connects over TLS, trusting that certificate. Blocks with the interpreter lock
/// released: what a Ray env runner actor runs.
#[pyfunction]
#[pyo3(signature = (connect, token, env_creator = None, python_executable = None, tls_ca = None))]
fn run_env_runner(
    py: Python<'_>,
    connect: String,
    token: String,
    env_creator: Option<PathBuf>,
    python_executable: Option<String>,
    tls_ca: Option<Vec<u8>>,
) -> PyResult<String> {
    use impala::remote::{serve_env_runner, ClientSettings, ClientTls, RunnerHost, Token};
    let token = Token::new(&token).map_err(remote_err)?;
    let mut settings = ClientSettings::new(connect, token);
    settings.tls = tls_ca.map(ClientTls::for_run);
    let host = RunnerHost { python_executable, env_creator };
    py.detach(|| serve_env_runner(&settings, host)).map_err(impala_err)
}

/// A trained policy ([`impala::TrainedPolicy`]): a checkpoint's, or a snapshot of an
/// algorithm's current weights. Observations, states and outputs cross as native-endian
/// `float32` bytes (the package's `Policy` turns numpy arrays into them and back).
#[pyclass(module = "impala_rs._impala_rs")]
struct Policy {
    /// Calls from several Python threads take turns.
    inner: Mutex<TrainedPolicy>,
}

/// What `compute_actions` returns: actions, state_out, action-distribution inputs, action
/// log-probabilities and value predictions, each as `float32` bytes.
type ActionBytes = (Py<PyBytes>, Py<PyBytes>, Py<PyBytes>, Py<PyBytes>, Py<PyBytes>);

#[pymethods]
impl Policy {
    /// Loads a checkpoint's policy (a checkpoint folder, or a run folder's newest checkpoint)
    /// onto the CPU: no algorithm, env runners or learner. A run on a Python env creator's
    /// envs needs it again as `env_creator` (pickled, as for `Algorithm`) for the spaces.
    #[staticmethod]
    #[pyo3(signature = (path, env_creator = None))]
    fn from_checkpoint(
        py: Python<'_>,
        path: PathBuf,
        env_creator: Option<PathBuf>,
    ) -> PyResult<Self> {
        let cpu = impala::Device::Cpu;
        let policy = py
            .detach(|| match env_creator {
                Some(creator) => {
                    TrainedPolicy::from_checkpoint_with_python_env_creator(&path, creator, cpu)
                }
                None => TrainedPolicy::from_checkpoint(&path, cpu),
            })
            .map_err(impala_err)?;
        Ok(Policy { inner: Mutex::new(policy) })
    }

    /// Acts on `obs` (rows of the observation space's flat size) with recurrent `states`
    /// (empty: initial states); see [`TrainedPolicy::compute_actions`].
    fn compute_actions(
        &self,
        py: Python<'_>,
        obs: &[u8],
        states: &[u8],
        explore: bool,
    ) -> PyResult<ActionBytes> {
        let (obs, states) = (floats(obs, "observations")?, floats(states, "state")?);
        let out = py
            .detach(|| self.lock().compute_actions(&obs, &states, explore))
            .map_err(impala_err)?;
        let bytes = |v: &[f32]| PyBytes::new(py, &to_bytes(v)).unbind();
        Ok((
            bytes(&out.actions),
            bytes(&out.state_out),
            bytes(&out.action_dist_inputs),
            bytes(&out.action_logp),
            bytes(&out.vf_preds),
        ))
    }

    /// The weights as `(name, shape, float32 bytes)`, sorted by name.
    fn get_weights(&self, py: Python<'_>) -> Vec<(String, Vec<usize>, Py<PyBytes>)> {
        let weights = self.lock().get_weights();
        weights
            .into_iter()
            .map(|w| (w.name, w.shape, PyBytes::new(py, &to_bytes(&w.data)).unbind()))
            .collect()
    }

    /// Replaces the weights with `(name, shape, float32 bytes)`, one per parameter; a missing,
    /// unknown or misshapen one raises `ImpalaError` naming it.
    fn set_weights(&self, py: Python<'_>, weights: Vec<RawTensor>) -> PyResult<()> {
        let tensors = named_tensors(weights)?;
        py.detach(|| self.lock().set_weights(tensors)).map_err(impala_err)
    }

    /// Writes the policy as a TorchScript module at `path`; see
    /// [`TrainedPolicy::export_torchscript`].
    fn export_torchscript(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        py.detach(|| self.lock().export_torchscript(&path)).map_err(impala_err)
    }

    /// The observation space as [`env_spec`] describes spaces.
    #[getter]
    fn observation_space(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(space_to_python(py, self.lock().observation_space())?.into_any().unbind())
    }

    /// The action space as [`env_spec`] describes spaces.
    #[getter]
    fn action_space(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(space_to_python(py, self.lock().action_space())?.into_any().unbind())
    }

    /// Values of one episode's recurrent state (0 without one).
    #[getter]
    fn state_dim(&self) -> usize {
        self.lock().state_dim()
    }
}

impl Policy {
    /// The policy; a panic in an earlier call (already reported) does not lock it away.
    fn lock(&self) -> MutexGuard<'_, TrainedPolicy> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A weight as Python passes it: `(name, shape, float32 bytes)`.
type RawTensor = (String, Vec<usize>, Vec<u8>);

/// Weights from Python as tensors.
fn named_tensors(weights: Vec<RawTensor>) -> PyResult<Vec<NamedTensor>> {
    weights
        .into_iter()
        .map(|(name, shape, data)| {
            let data = floats(&data, &format!("weight `{name}`"))?;
            Ok(NamedTensor { name, shape, data })
        })
        .collect()
}

/// Native-endian `float32` bytes as floats; `what` names them in the error.
fn floats(bytes: &[u8], what: &str) -> PyResult<Vec<f32>> {
    if bytes.len() % 4 != 0 {
        return Err(PyValueError::new_err(format!(
            "{what}: {} bytes are no whole number of float32 values",
            bytes.len()
        )));
    }
    Ok(bytes.chunks_exact(4).map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// Floats as native-endian `float32` bytes.
fn to_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_ne_bytes()).collect()
}

fn stopped() -> PyErr {
    ImpalaError::new_err("the algorithm was stopped; build a new one with config.build()")
}

/// While alive, Ctrl-C (SIGINT) also sets the algorithm's interrupt flag, so `train()` returns
/// instead of running out its iteration. Python's handler still runs (it is chained), so
/// [`Python::check_signals`] raises `KeyboardInterrupt` afterwards. Nothing is installed when
/// Python does not handle SIGINT itself (ignored, or default), so its choice stands.
struct CtrlC(Option<signal_hook::SigId>);

impl CtrlC {
    fn watch(py: Python<'_>, flag: &Arc<AtomicBool>) -> PyResult<Self> {
        let signal = py.import("signal")?;
        let current = signal.getattr("getsignal")?.call1((signal.getattr("SIGINT")?,))?;
        let python_handles_it = current.is_callable();
        if !python_handles_it {
            return Ok(CtrlC(None));
        }
        let id = signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(flag))
            .map_err(|e| ImpalaError::new_err(format!("cannot watch for Ctrl-C: {e}")))?;
        Ok(CtrlC(Some(id)))
    }
}

impl Drop for CtrlC {
    fn drop(&mut self) {
        if let Some(id) = self.0.take() {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// `config` checked and validated, with its warnings; every problem in one [`ConfigError`].
fn validated(config: &Bound<'_, PyDict>) -> PyResult<(ValidatedConfig, Vec<String>)> {
    let mut dict = BTreeMap::new();
    for (key, value) in config.iter() {
        let key: String = key
            .extract()
            .map_err(|_| PyTypeError::new_err(format!("config keys must be strings, got {key}")))?;
        let value = to_json(&value, &key)?;
        dict.insert(key, value);
    }
    let loaded = ImpalaConfig::from_dict(dict).map_err(config_err)?;
    let validated = loaded.config.validate().map_err(config_err)?;
    let warnings =
        loaded.warnings.iter().chain(validated.warnings()).map(ToString::to_string).collect();
    Ok((validated, warnings))
}

/// A [`ConfigError`] whose `problems` holds each problem on its own.
fn config_err(error: RustConfigError) -> PyErr {
    let problems: Vec<String> = match &error {
        RustConfigError::Several { errors, .. } => errors.iter().map(ToString::to_string).collect(),
        RustConfigError::Invalid { violations } => {
            violations.iter().map(ToString::to_string).collect()
        }
        other => vec![other.to_string()],
    };
    Python::attach(|py| {
        let err = ConfigError::new_err(error.to_string());
        match err.value(py).setattr("problems", problems) {
            Ok(()) => err,
            Err(e) => e,
        }
    })
}

fn impala_err(error: RustImpalaError) -> PyErr {
    match error {
        RustImpalaError::Config(e) => config_err(e),
        other => ImpalaError::new_err(impala::error_chain(&other)),
    }
}

fn remote_err(error: impala::remote::RemoteError) -> PyErr {
    impala_err(error.into())
}

/// A Python value as JSON; `path` names it in errors (`model.fcnet_hiddens[1]`).
fn to_json(value: &Bound<'_, PyAny>, path: &str) -> PyResult<Value> {
    if value.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = value.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if value.is_instance_of::<PyInt>() {
        if let Ok(n) = value.extract::<i64>() {
            return Ok(Value::from(n));
        }
        if let Ok(n) = value.extract::<u64>() {
            return Ok(Value::from(n));
        }
        return Err(PyValueError::new_err(format!("`{path}`: {value} does not fit in 64 bits")));
    }
    if let Ok(f) = value.cast::<PyFloat>() {
        let x = f.value();
        return serde_json::Number::from_f64(x)
            .map(Value::Number)
            .ok_or_else(|| PyValueError::new_err(format!("`{path}`: {x} is not a finite number")));
    }
    if let Ok(s) = value.cast::<PyString>() {
        return Ok(Value::String(s.to_cow()?.into_owned()));
    }
    if let Ok(d) = value.cast::<PyDict>() {
        let mut map = serde_json::Map::new();
        for (k, v) in d.iter() {
            let k: String = k.extract().map_err(|_| {
                PyTypeError::new_err(format!("`{path}`: dict keys must be strings, got {k}"))
            })?;
            let inner = to_json(&v, &format!("{path}.{k}"))?;
            map.insert(k, inner);
        }
        return Ok(Value::Object(map));
    }
    if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        let items = value
            .try_iter()?
            .enumerate()
            .map(|(i, item)| to_json(&item?, &format!("{path}[{i}]")))
            .collect::<PyResult<Vec<_>>>()?;
        return Ok(Value::Array(items));
    }
    let type_name = value.get_type().name()?;
    Err(PyTypeError::new_err(format!(
        "`{path}`: a {type_name} is no config value; use None, bool, int, float, str, list or dict \
         (a Ray Tune search space must be resolved by Tune first)"
    )))
}

/// A config as the dict `to_dict()` gives (the model nested under `model`).
fn config_to_python(py: Python<'_>, config: &ImpalaConfig) -> PyResult<Py<PyAny>> {
    to_python(py, &Value::Object(config.to_dict().into_iter().collect()))
}

/// A result (anything serializable) as Python objects.
fn serialized_to_python(py: Python<'_>, value: &impl serde::Serialize) -> PyResult<Py<PyAny>> {
    let value = serde_json::to_value(value).map_err(|e| ImpalaError::new_err(e.to_string()))?;
    to_python(py, &value)
}

/// JSON as Python objects (dicts, lists, floats, ...).
fn to_python(py: Python<'_>, value: &Value) -> PyResult<Py<PyAny>> {
    Ok(match value {
        Value::Null => py.None(),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any().unbind(),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => u.into_pyobject(py)?.into_any().unbind(),
            (None, Some(i), _) => i.into_pyobject(py)?.into_any().unbind(),
            (None, None, f) => f.unwrap_or(f64::NAN).into_pyobject(py)?.into_any().unbind(),
        },
        Value::String(s) => s.into_pyobject(py)?.into_any().unbind(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_python(py, item)?)?;
            }
            list.into_any().unbind()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (k, v) in map {
                dict.set_item(k, to_python(py, v)?)?;
            }
            dict.into_any().unbind()
        }
    })
}

/// Logs (warnings and errors by default) go to stderr, coloured only when it is a terminal
/// (a notebook's or a log file's stderr gets plain text); `IMPALA_LOG` (e.g. `info`) or
/// `RUST_LOG` choose more.
fn init_logging() {
    use std::io::IsTerminal;
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let filter = std::env::var("IMPALA_LOG")
            .or_else(|_| std::env::var("RUST_LOG"))
            .unwrap_or_else(|_| "warn".into());
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .try_init();
    });
}

/// The agent ids of multi-agent env `env` with `env_config`, in its order (what a Python
/// `policy_mapping_fn` is called with); `None` for a single-agent env.
#[pyfunction]
fn multi_agent_ids(env: &str, env_config: &Bound<'_, PyDict>) -> PyResult<Option<Vec<String>>> {
    if !impala::envs::is_multi_agent(env) {
        return Ok(None);
    }
    let env_config: impala::envs::EnvConfig = match to_json(env_config.as_any(), "env_config")? {
        Value::Object(map) => map.into_iter().collect(),
        _ => Default::default(),
    };
    let made = impala::envs::make_multi_agent(env, &env_config)
        .map_err(|e| impala_err(RustImpalaError::from(e)))?;
    Ok(Some(made.spec().agent_ids()))
}

/// The native module.
#[pymodule]
fn _impala_rs(m: &Bound<'_, PyModule>) -> PyResult<()> {
    init_logging();
    m.add("ConfigError", m.py().get_type::<ConfigError>())?;
    m.add("ImpalaError", m.py().get_type::<ImpalaError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<PyAlgorithm>()?;
    m.add_class::<Policy>()?;
    m.add_class::<RunnerServer>()?;
    m.add_function(wrap_pyfunction!(run_env_runner, m)?)?;
    m.add_function(wrap_pyfunction!(config_keys, m)?)?;
    m.add_function(wrap_pyfunction!(config_aliases, m)?)?;
    m.add_function(wrap_pyfunction!(nearest_key, m)?)?;
    m.add_function(wrap_pyfunction!(default_config, m)?)?;
    m.add_function(wrap_pyfunction!(check_config, m)?)?;
    m.add_function(wrap_pyfunction!(evaluate_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoint_config, m)?)?;
    m.add_function(wrap_pyfunction!(resource_bundles, m)?)?;
    m.add_function(wrap_pyfunction!(env_spec, m)?)?;
    m.add_function(wrap_pyfunction!(multi_agent_ids, m)?)?;
    Ok(())
}
