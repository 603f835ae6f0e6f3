//! The SIGINT or SIGTERM a process received ([`Interrupts`]): the first asks its run to finish
//! the iteration, save a checkpoint and exit with 128 + the signal's number, as shells report a
//! process the signal ended, and a parent passes it on to its children ([`Forward`]). Later
//! signals change nothing: the checkpoint is always completed. Whoever reads the signals (the
//! `impala` command, on a thread of its own, never inside a signal handler) reports each with
//! [`Interrupts::receive`].

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use impala::run::RunSummary;

use crate::Forward;

impl Forward {
    /// `SIGINT` or `SIGTERM`.
    pub fn name(self) -> &'static str {
        match self {
            Forward::Interrupt => "SIGINT",
            Forward::Terminate => "SIGTERM",
        }
    }

    /// 128 + the signal's number (130, 143): what a run the signal ended exits with, so that a
    /// job scheduler does not take an interrupted run for a finished one.
    pub fn exit_code(self) -> u8 {
        match self {
            Forward::Interrupt => 130,
            Forward::Terminate => 143,
        }
    }
}

/// The signals a process received: the first of them, and the flag it raises (what a run
/// stops at, e.g. [`impala::run::Training`]'s `start`). Clones share both.
///
/// ```
/// use std::process::ExitCode;
/// use std::sync::atomic::Ordering;
/// use impala_tune::{Forward, Interrupts};
///
/// let interrupts = Interrupts::default();
/// let flag = interrupts.flag();
/// assert_eq!((interrupts.received(), interrupts.exit_code()), (None, None));
/// interrupts.clone().receive(Forward::Terminate, |first| assert!(first));
/// interrupts.receive(Forward::Interrupt, |first| assert!(!first));
/// assert!(flag.load(Ordering::SeqCst));
/// assert_eq!(interrupts.received(), Some(Forward::Terminate));
/// assert_eq!(interrupts.exit_code(), Some(ExitCode::from(143)));
/// ```
#[derive(Debug, Clone, Default)]
pub struct Interrupts {
    flag: Arc<AtomicBool>,
    first: Arc<OnceLock<Forward>>,
}

impl Interrupts {
    /// Records a received `signal` and calls `announce` with whether it is the first; only
    /// then does the first raise the flag, so that what is announced comes before anything the
    /// run does about it.
    pub fn receive(&self, signal: Forward, announce: impl FnOnce(bool)) {
        let first = self.first.set(signal).is_ok();
        announce(first);
        if first {
            self.flag.store(true, Ordering::SeqCst);
        }
    }

    /// The flag the first signal raises.
    pub fn flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.flag)
    }

    /// The first signal received, if any (what a parent passes on to its children).
    pub fn received(&self) -> Option<Forward> {
        self.first.get().copied()
    }

    /// 128 + the first signal's number, if one was received.
    pub fn exit_code(&self) -> Option<ExitCode> {
        self.received().map(|signal| ExitCode::from(signal.exit_code()))
    }

    /// Names the signal in the stop reason of a run it interrupted: `interrupted (SIGINT)`, as
    /// [`TrainSummary::stop_reason`](crate::TrainSummary::stop_reason) reads.
    pub fn name_signal_in(&self, summary: &mut RunSummary) {
        if summary.interrupted {
            let signal = self.received().map_or("signal", Forward::name);
            summary.stop_reason = format!("interrupted ({signal})");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interrupted_run_names_the_first_signal() {
        let interrupts = Interrupts::default();
        let mut summary = RunSummary {
            stop_reason: "interrupted".into(),
            interrupted: true,
            last: Default::default(),
            checkpoint: "run/checkpoint_000001".into(),
            best: None,
        };
        interrupts.name_signal_in(&mut summary);
        assert_eq!(summary.stop_reason, "interrupted (signal)");
        interrupts.receive(Forward::Interrupt, |_| {});
        interrupts.receive(Forward::Terminate, |_| {});
        interrupts.name_signal_in(&mut summary);
        assert_eq!(summary.stop_reason, "interrupted (SIGINT)");
        summary.interrupted = false;
        summary.stop_reason = "episode_return_mean >= 475".into();
        interrupts.name_signal_in(&mut summary);
        assert_eq!(summary.stop_reason, "episode_return_mean >= 475");
    }
}
