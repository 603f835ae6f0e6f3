//! `impala_rs._impala_rs`: the native half of the `impala_rs` Python package. It holds no
//! logic of its own: configs go through `impala-config` (the CLI's key checks, messages and
//! validation), training through the `impala` library's [`Impala`](impala::Impala), so Python
//! and the CLI cannot drift apart. The builder (`IMPALAConfig`), `register_env` and the Ray Tune
//! trainable are Python, in `python/impala_rs/`.
//!
//! Every call that trains, evaluates, saves, restores or acts releases the interpreter lock, so
//! other Python threads run meanwhile; Ctrl-C during `train()` ends the iteration early and
//! then raises `KeyboardInterrupt` with the algorithm intact.
#![deny(missing_docs)]

mod algorithm;
mod config;
mod convert;
mod episodes;
mod errors;
mod policy;
mod runners;

use std::sync::Once;

use pyo3::prelude::*;

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

/// The native module.
#[pymodule]
fn _impala_rs(m: &Bound<'_, PyModule>) -> PyResult<()> {
    init_logging();
    m.add("ConfigError", m.py().get_type::<errors::ConfigError>())?;
    m.add("ImpalaError", m.py().get_type::<errors::ImpalaError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<algorithm::PyAlgorithm>()?;
    m.add_class::<policy::Policy>()?;
    m.add_class::<runners::RunnerServer>()?;
    m.add_function(wrap_pyfunction!(runners::run_env_runner, m)?)?;
    m.add_function(wrap_pyfunction!(config::config_keys, m)?)?;
    m.add_function(wrap_pyfunction!(config::config_aliases, m)?)?;
    m.add_function(wrap_pyfunction!(config::nearest_key, m)?)?;
    m.add_function(wrap_pyfunction!(config::default_config, m)?)?;
    m.add_function(wrap_pyfunction!(config::check_config, m)?)?;
    m.add_function(wrap_pyfunction!(policy::evaluate_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(config::checkpoint_config, m)?)?;
    m.add_function(wrap_pyfunction!(config::resource_bundles, m)?)?;
    m.add_function(wrap_pyfunction!(config::policy_specs, m)?)?;
    m.add_function(wrap_pyfunction!(config::multi_agent_ids, m)?)?;
    Ok(())
}
