//! Config dicts from Python: their keys, defaults and checks, and what a config (or a
//! checkpoint's) implies before a run: its resources, its envs' spaces and agent ids.

use std::collections::BTreeMap;
use std::path::PathBuf;

use impala::config::{ConfigError as RustConfigError, ImpalaConfig, Origin, ValidatedConfig};
use impala::ImpalaError as RustImpalaError;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::Value;

use crate::convert::{config_to_python, space_to_python, to_json};
#[cfg(doc)]
use crate::errors::ConfigError;
use crate::errors::{config_err, impala_err};

/// Every config key as `(name, group, expected, rust_type)`: top-level keys, then the model's
/// as `model.<name>`; `group` is RLlib's builder method that sets it, `expected` what it accepts
/// in words, `rust_type` its Rust type (which the type stubs are generated from).
#[pyfunction]
pub(crate) fn config_keys() -> Vec<(String, &'static str, String, &'static str)> {
    let top = impala::config::keys().iter().map(|k| (k.name.to_string(), k));
    let model = impala::config::model_keys().iter().map(|k| (format!("model.{}", k.name), k));
    top.chain(model).map(|(name, k)| (name, k.group.name(), k.expected(), k.type_name)).collect()
}

/// Every other spelling of a key as `(alias, key, deprecated)` (RLlib's old names such as
/// `num_workers`, and new-stack names).
#[pyfunction]
pub(crate) fn config_aliases() -> Vec<(&'static str, &'static str, bool)> {
    impala::config::ALIASES.iter().map(|a| (a.name, a.canonical, a.deprecated)).collect()
}

/// The nearest config key to `name` (for "did you mean" messages).
#[pyfunction]
pub(crate) fn nearest_key(name: &str) -> String {
    impala::config::nearest_key(name)
}

/// RLlib's `IMPALAConfig()` defaults as a dict (the model as a nested dict under `model`).
#[pyfunction]
pub(crate) fn default_config(py: Python<'_>) -> PyResult<Py<PyAny>> {
    config_to_python(py, &ImpalaConfig::default())
}

/// Checks a config dict like the one `IMPALAConfig.to_dict()` returns, as `impala train` checks
/// a file, and returns its warnings. Raises [`ConfigError`] listing every problem.
#[pyfunction]
pub(crate) fn check_config(config: &Bound<'_, PyDict>) -> PyResult<Vec<String>> {
    Ok(validated(config)?.1)
}

/// The config's resource request as Ray's placement group: `(bundles, strategy)`, each bundle
/// `{"CPU": n, "GPU": n, <custom>: n}` (the driver with its learner first, then one per env
/// runner), for the Tune trainable's `default_resource_request`.
#[pyfunction]
pub(crate) fn resource_bundles(
    config: &Bound<'_, PyDict>,
) -> PyResult<(Vec<BTreeMap<String, f64>>, String)> {
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

/// Per policy id, in the run's policy order, the spaces its model sees (after the run's
/// wrappers, e.g. observation normalisation), for building a user's torch model or RLModule
/// before the run: `{policy_id: {"observation_space": space, "action_space": space,
/// "max_episode_steps": int | None}}`, `default_policy` alone for a single-agent env. Each
/// space is `{"type": "Discrete", "n"}`, `{"type": "MultiDiscrete", "nvec"}`,
/// `{"type": "Box", "low", "high", "shape"}` (flat bounds) or `{"type": "Bytes", "shape"}` (a
/// uint8 box). One env is built, from `config.env` or the pickled `env_creator`.
#[pyfunction]
#[pyo3(signature = (config, env_creator = None))]
pub(crate) fn policy_specs(
    py: Python<'_>,
    config: &Bound<'_, PyDict>,
    env_creator: Option<PathBuf>,
) -> PyResult<Py<PyAny>> {
    let (config, _) = validated(config)?;
    let specs = py.detach(|| impala::run_policy_specs(&config, env_creator)).map_err(impala_err)?;
    let out = PyDict::new(py);
    for (policy_id, spec) in specs {
        let dict = PyDict::new(py);
        dict.set_item("observation_space", space_to_python(py, &spec.observation_space)?)?;
        dict.set_item("action_space", space_to_python(py, &spec.action_space)?)?;
        dict.set_item("max_episode_steps", spec.max_episode_steps)?;
        out.set_item(policy_id, dict)?;
    }
    Ok(out.into_any().unbind())
}

/// The config a checkpoint was trained with (a checkpoint folder, or a run folder's newest
/// checkpoint), for `Impala.from_checkpoint`.
#[pyfunction]
pub(crate) fn checkpoint_config(py: Python<'_>, path: PathBuf) -> PyResult<Py<PyAny>> {
    let (_, config) = py
        .detach(|| {
            let dir = impala::checkpoint::find_checkpoint(&path)?;
            impala::checkpoint::read_checkpoint(&dir)
        })
        .map_err(impala_err)?;
    config_to_python(py, &config)
}

/// The agent ids of multi-agent env `env` with `env_config`, in its order (what a Python
/// `policy_mapping_fn` is called with); `None` for a single-agent env.
#[pyfunction]
pub(crate) fn multi_agent_ids(
    env: &str,
    env_config: &Bound<'_, PyDict>,
) -> PyResult<Option<Vec<String>>> {
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

/// `config` checked and validated, with its warnings; every problem in one [`ConfigError`].
pub(crate) fn validated(config: &Bound<'_, PyDict>) -> PyResult<(ValidatedConfig, Vec<String>)> {
    let mut dict = BTreeMap::new();
    for (key, value) in config.iter() {
        let key: String = key
            .extract()
            .map_err(|_| PyTypeError::new_err(format!("config keys must be strings, got {key}")))?;
        let value = to_json(&value, &key)?;
        dict.insert(key, value);
    }
    let loaded = ImpalaConfig::from_dict_as(dict.clone(), Origin::Named("IMPALAConfig".into()))
        .map_err(|whole| config_err(by_builder_method(dict).unwrap_or(whole)))?;
    let validated = loaded.config.validate().map_err(config_err)?;
    let warnings =
        loaded.warnings.iter().chain(validated.warnings()).map(ToString::to_string).collect();
    Ok((validated, warnings))
}

/// The problems of a config dict that does not load, each named by the builder method that
/// sets its key (`training(): `lr` expects a number`), rather than by the dict as a whole;
/// `None` when the split finds none of them (the whole dict's error then stands).
fn by_builder_method(dict: BTreeMap<String, Value>) -> Option<RustConfigError> {
    let mut groups: BTreeMap<String, BTreeMap<String, Value>> = BTreeMap::new();
    for (key, value) in dict {
        let group = impala::config::keys().iter().find(|k| k.name == key);
        let origin =
            group.map_or_else(|| "IMPALAConfig".into(), |k| format!("{}()", k.group.name()));
        groups.entry(origin).or_default().insert(key, value);
    }
    let mut errors = Vec::new();
    for (origin, values) in groups {
        match ImpalaConfig::from_dict_as(values, Origin::Named(origin)) {
            Ok(_) => {}
            Err(RustConfigError::Several { errors: several, .. }) => errors.extend(several),
            Err(one) => errors.push(one),
        }
    }
    match errors.len() {
        0 => None,
        1 => errors.pop(),
        _ => {
            Some(RustConfigError::Several { origin: Origin::Named("IMPALAConfig".into()), errors })
        }
    }
}
