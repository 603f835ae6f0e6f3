//! Env runners in other processes (Ray actors): the server a driver binds for them, and the
//! loop each one runs.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::config::validated;
use crate::errors::impala_err;

/// The server env runners in other processes connect to (`impala train --listen`'s): the
/// Python package binds it before it starts its Ray env runner actors, so they know where to
/// connect, and hands it to `Algorithm`.
#[pyclass(module = "impala_rs._impala_rs", frozen)]
pub(crate) struct RunnerServer {
    pub(crate) inner: Arc<impala::remote::RunnerServer>,
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
pub(crate) fn run_env_runner(
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

fn remote_err(error: impala::remote::RemoteError) -> PyErr {
    impala_err(error.into())
}
