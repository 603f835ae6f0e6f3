//! What the algorithm needs of a transport.

use std::time::Duration;

use crate::{PoolError, RunSession, RunnerPool};

/// A transport's runners as the algorithm sees them: the pool they claim slots of, and a wait
/// for them that says, when none came, how to start them. A [`RunnerPool`] is one by itself
/// (its error names no transport).
pub trait RunnerTransport: Send + Sync + std::fmt::Debug {
    /// The pool the transport's runners claim slots of.
    fn pool(&self) -> &RunnerPool;

    /// Waits until `expected` runners are ready, or `timeout` passes; returns how many are.
    /// Errors when none came.
    fn wait_for_runners(
        &self,
        expected: usize,
        timeout: Duration,
    ) -> Result<usize, Box<dyn std::error::Error + Send + Sync>> {
        Ok(self.pool().wait_for_runners(expected, timeout)?)
    }

    /// Checks, before any runner waits for it, that the transport can hand `run` to its
    /// runners: a session too large for the transport's messages would otherwise fail each
    /// runner as it is welcomed. By default every session fits.
    fn check_session(&self, run: &RunSession) -> Result<(), PoolError> {
        let _ = run;
        Ok(())
    }

    /// Tells the runners that the run is over, for `reason`: they end instead of waiting for
    /// the run to come back (a resumed driver). Not called for an interrupted run, which may be
    /// resumed. By default nothing is told: the runners' sessions just end.
    fn finish(&self, reason: &str) {
        let _ = reason;
    }
}

impl RunnerTransport for RunnerPool {
    fn pool(&self) -> &RunnerPool {
        self
    }
}
