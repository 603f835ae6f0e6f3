//! The module's Python exceptions, and the `impala` library's errors raised as them.

use impala::config::ConfigError as RustConfigError;
use impala::ImpalaError as RustImpalaError;
use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

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

/// A [`ConfigError`] whose `problems` holds each problem on its own.
pub(crate) fn config_err(error: RustConfigError) -> PyErr {
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

pub(crate) fn impala_err(error: RustImpalaError) -> PyErr {
    match error {
        RustImpalaError::Config(e) => config_err(e),
        other => ImpalaError::new_err(impala::error_chain(&other)),
    }
}
