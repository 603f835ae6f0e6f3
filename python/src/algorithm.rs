//! The `Algorithm` class: RLlib's `Impala` built, trained, evaluated, saved and restored from
//! Python, with Ctrl-C ending a `train()` iteration early.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use impala::{Impala, Trainable};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::config::validated;
use crate::convert::{config_to_python, serialized_to_python, to_python};
use crate::episodes::EpisodeLayout;
use crate::errors::{impala_err, ImpalaError};
use crate::policy::{named_tensors, Policy, RawTensor};
use crate::runners::RunnerServer;

/// RLlib's `Impala` algorithm: built from a checked config dict, trained one iteration per
/// `train()` call.
#[pyclass(name = "Algorithm", module = "impala_rs._impala_rs")]
pub(crate) struct PyAlgorithm {
    /// `None` once stopped. Calls from several Python threads take turns.
    inner: Mutex<Option<Impala>>,
    /// Set by Ctrl-C during `train()`: the iteration ends early.
    interrupt: Arc<AtomicBool>,
}

#[pymethods]
impl PyAlgorithm {
    /// Builds the algorithm (learner, env runners, their env workers) from a config dict;
    /// `env_creator` is a pickled env creator (`impala_rs.register_env`) the env workers call.
    /// With `runner_server` the env runners are the processes that connect to it (Ray
    /// actors), waited for up to `env_runner_connect_timeout_s`. With `checkpoint` it is
    /// restored from that checkpoint before its env runners start. With `record_episodes` the
    /// env runners record every episode for `take_episodes` (refused with `runner_server`).
    #[new]
    #[pyo3(signature = (
        config, env_creator = None, runner_server = None, checkpoint = None, record_episodes = false
    ))]
    fn new(
        py: Python<'_>,
        config: &Bound<'_, PyDict>,
        env_creator: Option<PathBuf>,
        runner_server: Option<PyRef<'_, RunnerServer>>,
        checkpoint: Option<PathBuf>,
        record_episodes: bool,
    ) -> PyResult<Self> {
        // The package's `IMPALAConfig` already reported the warnings (`check_config`).
        let (config, _warnings) = validated(config)?;
        let transport = runner_server.map(|server| {
            Arc::clone(&server.inner) as Arc<dyn impala::runner_pool::RunnerTransport>
        });
        let mut algo = py
            .detach(|| {
                let mut builder = Impala::builder(config).record_episodes(record_episodes);
                if let Some(creator) = env_creator {
                    builder = builder.python_env_creator(creator);
                }
                if let Some(transport) = transport {
                    builder = builder.remote_env_runners(transport);
                }
                if let Some(checkpoint) = checkpoint {
                    builder = builder.restore_from(checkpoint);
                }
                builder.build()
            })
            .map_err(impala_err)?;
        let interrupt = Arc::new(AtomicBool::new(false));
        algo.set_interrupt_flag(Arc::clone(&interrupt));
        Ok(PyAlgorithm { inner: Mutex::new(Some(algo)), interrupt })
    }

    /// One training iteration; returns the result dict with result.json's keys.
    fn train(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.interrupt.store(false, Ordering::SeqCst);
        let result = {
            let _ctrl_c = CtrlC::watch(py, &self.interrupt)?;
            self.with(py, |algo| algo.train())
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

    /// The episodes the env runners recorded since the last call (`record_episodes`; none
    /// without it), in the order they were counted, as dicts of numpy arrays (see
    /// `impala_rs.episode`).
    fn take_episodes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let (records, layout) =
            self.with(py, |algo| Ok((algo.take_episode_records(), EpisodeLayout::of(algo))))?;
        layout.to_python(py, records)
    }

    /// Runs `evaluation_duration` evaluation episodes with the current weights (RLlib's
    /// `evaluate()`); returns `{"env_runners": {...}}` like RLlib's evaluation results.
    fn evaluate(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let result = self.with(py, |algo| algo.evaluate())?;
        serialized_to_python(py, &BTreeMap::from([("env_runners", result)]))
    }

    /// Saves a checkpoint `dir/checkpoint_<iteration>` (the CLI's format) and returns its path.
    fn save(&self, py: Python<'_>, dir: PathBuf) -> PyResult<String> {
        let path = self.with(py, |algo| algo.save(&dir))?;
        Ok(path.display().to_string())
    }

    /// Restores a checkpoint folder (or the newest checkpoint of a run folder).
    fn restore(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        self.with(py, |algo| algo.restore(&path))
    }

    /// Stops the env runners, their env workers and the learner; later calls raise.
    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        let taken = self.lock().take();
        match taken {
            Some(mut algo) => py.detach(|| algo.stop()).map_err(impala_err),
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
        let policy = self.with(py, |algo| algo.get_policy_by_id(&policy_id))?;
        Ok(policy.into())
    }

    /// The policy ids: `default_policy`, or a multi-agent run's `policies`.
    #[getter]
    fn policy_ids(&self) -> PyResult<Vec<String>> {
        self.lock().as_ref().map(Impala::policy_ids).ok_or_else(stopped)
    }

    /// Restores only policy `policy_id`'s weights and optimizer state from a checkpoint (the
    /// run's counters and other policies stay as they are).
    fn restore_policy(&self, py: Python<'_>, path: PathBuf, policy_id: String) -> PyResult<()> {
        self.with(py, |algo| algo.restore_policy(&path, &policy_id))
    }

    /// Replaces policy `policy_id`'s learner weights with `(name, shape, float32 bytes)`, one
    /// per parameter (the env runners act with them from their next fragment); a missing,
    /// unknown or misshapen one raises `ImpalaError` naming it.
    #[pyo3(signature = (weights, policy_id = impala::DEFAULT_POLICY_ID.to_string()))]
    fn set_weights(
        &self,
        py: Python<'_>,
        weights: Vec<RawTensor>,
        policy_id: String,
    ) -> PyResult<()> {
        let tensors = named_tensors(weights)?;
        self.with(py, |algo| algo.set_weights_of(&policy_id, tensors))
    }

    /// Gives `policy` (one of `get_policy(policy_id)`) that policy's current weights and the
    /// run's current observation filter.
    #[pyo3(signature = (policy, policy_id = impala::DEFAULT_POLICY_ID.to_string()))]
    fn update_policy(&self, py: Python<'_>, policy: &Policy, policy_id: String) -> PyResult<()> {
        self.with(py, |algo| algo.update_policy_of(&policy_id, &mut policy.lock()))
    }

    /// The validated config, every option included.
    #[getter]
    fn config(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let config = self.lock().as_ref().ok_or_else(stopped)?.config().config().clone();
        config_to_python(py, &config)
    }
}

impl PyAlgorithm {
    /// Runs `f` on the algorithm with the interpreter lock released.
    fn with<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Impala) -> impala::Result<R> + Send,
    ) -> PyResult<R> {
        py.detach(|| match self.lock().as_mut() {
            Some(algo) => f(algo).map_err(impala_err),
            None => Err(stopped()),
        })
    }

    /// The algorithm; a panic in an earlier call (already reported) does not lock it away.
    fn lock(&self) -> MutexGuard<'_, Option<Impala>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for PyAlgorithm {
    /// An algorithm dropped without `stop()` still stops its threads and env workers.
    fn drop(&mut self) {
        if let Some(mut algo) = self.lock().take() {
            if let Err(e) = algo.stop() {
                eprintln!(
                    "impala_rs: stopping a dropped algorithm failed: {}",
                    impala::error_chain(&e)
                );
            }
        }
    }
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
