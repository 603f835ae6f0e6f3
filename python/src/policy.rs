//! Trained policies from Python: the `Policy` class, evaluating a checkpoint's policy, and
//! weights and activations as `float32` bytes.

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};

use impala::core::NamedTensor;
use impala::TrainedPolicy;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

#[cfg(doc)]
use crate::config::env_spec;
use crate::convert::{serialized_to_python, space_to_python};
use crate::errors::impala_err;

/// Runs `episodes` episodes with a checkpoint's policy (greedy unless `explore`), as
/// `impala evaluate --checkpoint` does, and returns the evaluation result dict.
#[pyfunction]
#[pyo3(signature = (path, episodes = 10, explore = false))]
pub(crate) fn evaluate_checkpoint(
    py: Python<'_>,
    path: PathBuf,
    episodes: usize,
    explore: bool,
) -> PyResult<Py<PyAny>> {
    let result =
        py.detach(|| impala::evaluate_checkpoint(&path, episodes, explore)).map_err(impala_err)?;
    serialized_to_python(py, &result)
}

/// A trained policy ([`impala::TrainedPolicy`]): a checkpoint's, or a snapshot of an
/// algorithm's current weights. Observations, states and outputs cross as native-endian
/// `float32` bytes (the package's `Policy` turns numpy arrays into them and back).
#[pyclass(module = "impala_rs._impala_rs")]
pub(crate) struct Policy {
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
        Ok(policy.into())
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
    pub(crate) fn lock(&self) -> MutexGuard<'_, TrainedPolicy> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl From<TrainedPolicy> for Policy {
    fn from(policy: TrainedPolicy) -> Self {
        Policy { inner: Mutex::new(policy) }
    }
}

/// A weight as Python passes it: `(name, shape, float32 bytes)`.
pub(crate) type RawTensor = (String, Vec<usize>, Vec<u8>);

/// Weights from Python as tensors.
pub(crate) fn named_tensors(weights: Vec<RawTensor>) -> PyResult<Vec<NamedTensor>> {
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
