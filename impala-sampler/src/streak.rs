//! Tells a broken env from one that fails now and then: a runner slot whose runners failed
//! [`BROKEN_ENV_FAILURES`] times in a row without ever delivering a fragment is a broken env
//! (every step or reset fails), and restarting it again only hides the env's error behind a
//! run that trains nothing; a slot that delivered once keeps its restarts.

use crate::{Result, SamplerError};

/// Failures in a row, with no fragment ever delivered, that make a runner slot's env broken.
pub const BROKEN_ENV_FAILURES: usize = 3;

/// One runner slot's failures since it last delivered a fragment.
#[derive(Debug, Default, Clone)]
pub(crate) struct FailureStreak {
    /// Whether any incarnation of the slot delivered a fragment.
    delivered: bool,
    failures: usize,
    /// The first failure's message: the env's own error, before restarts add their noise.
    first_error: Option<String>,
}

impl FailureStreak {
    /// The slot delivered a fragment: its env works.
    pub(crate) fn delivered(&mut self) {
        self.delivered = true;
        self.failures = 0;
    }

    /// The slot's runner failed with `reason`; errors when that makes its env a broken one.
    pub(crate) fn failed(&mut self, runner_id: usize, reason: &str) -> Result<()> {
        self.failures += 1;
        let first_error = self.first_error.get_or_insert_with(|| reason.to_string());
        if !self.delivered && self.failures >= BROKEN_ENV_FAILURES {
            return Err(SamplerError::BrokenEnv {
                runner_id,
                failures: self.failures,
                first_error: first_error.clone(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_that_never_delivered_is_broken_after_a_few_failures_with_its_first_error() {
        let mut streak = FailureStreak::default();
        assert!(streak.failed(2, "ValueError: bad shape").is_ok());
        assert!(streak.failed(2, "restarted: ValueError: bad shape").is_ok());
        let err = streak.failed(2, "again");
        assert!(
            matches!(&err, Err(SamplerError::BrokenEnv { runner_id: 2, failures: 3, first_error })
                if first_error == "ValueError: bad shape"),
            "{err:?}"
        );
    }

    #[test]
    fn a_slot_that_delivered_once_keeps_restarting() {
        let mut streak = FailureStreak::default();
        streak.delivered();
        for _ in 0..10 {
            assert!(streak.failed(1, "flaky").is_ok());
        }
    }
}
