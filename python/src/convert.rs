//! Values across the language boundary: Python objects as JSON, and JSON, configs, results
//! and spaces as Python objects.

use impala::config::ImpalaConfig;
use impala::core::Space;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::Value;

use crate::errors::ImpalaError;

/// A Python value as JSON; `path` names it in errors (`model.fcnet_hiddens[1]`).
pub(crate) fn to_json(value: &Bound<'_, PyAny>, path: &str) -> PyResult<Value> {
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
pub(crate) fn config_to_python(py: Python<'_>, config: &ImpalaConfig) -> PyResult<Py<PyAny>> {
    to_python(py, &Value::Object(config.to_dict().into_iter().collect()))
}

/// A result (anything serializable) as Python objects.
pub(crate) fn serialized_to_python(
    py: Python<'_>,
    value: &impl serde::Serialize,
) -> PyResult<Py<PyAny>> {
    let value = serde_json::to_value(value).map_err(|e| ImpalaError::new_err(e.to_string()))?;
    to_python(py, &value)
}

/// JSON as Python objects (dicts, lists, floats, ...).
pub(crate) fn to_python(py: Python<'_>, value: &Value) -> PyResult<Py<PyAny>> {
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

/// A space as the dict [`env_spec`](crate::config::env_spec) describes (bounds as Python
/// floats, infinities included).
pub(crate) fn space_to_python<'py>(py: Python<'py>, space: &Space) -> PyResult<Bound<'py, PyDict>> {
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
