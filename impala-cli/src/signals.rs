//! SIGINT (Ctrl-C) and SIGTERM (what Kubernetes, Slurm and systemd send): the first asks the
//! run to finish its iteration, save a checkpoint and exit with 128 + the signal's number
//! (130, 143), as shells report a process the signal ended. Later signals are acknowledged and
//! change nothing: the checkpoint is always completed, so the process never dies mid-save or
//! while other threads use libtorch. The signals are read on a thread of their own
//! (`signal-hook`'s iterator), never handled inside a signal handler.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// The signals received by this process, from [`Interrupts::install`] on.
#[derive(Debug)]
pub(crate) struct Interrupts {
    flag: Arc<AtomicBool>,
    first: Arc<AtomicI32>,
}

impl Interrupts {
    /// Starts listening for SIGINT and SIGTERM (until the process exits).
    pub(crate) fn install() -> std::io::Result<Self> {
        let flag = Arc::new(AtomicBool::new(false));
        let first = Arc::new(AtomicI32::new(0));
        let mut signals = Signals::new([SIGINT, SIGTERM])?;
        let (thread_flag, thread_first) = (Arc::clone(&flag), Arc::clone(&first));
        std::thread::Builder::new().name("signals".into()).spawn(move || {
            for signal in signals.forever() {
                let name = signal_name(signal);
                if thread_first
                    .compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
                {
                    eprintln!(
                        "\ninterrupted ({name}): finishing this iteration, saving a checkpoint, \
                         then exiting"
                    );
                    thread_flag.store(true, Ordering::SeqCst);
                } else {
                    eprintln!(
                        "{name} again: still saving the checkpoint, exiting as soon as it is \
                         written (SIGKILL, `kill -9`, quits without it)"
                    );
                }
            }
        })?;
        Ok(Interrupts { flag, first })
    }

    /// The flag the first signal sets (for [`impala::Impala::set_interrupt_flag`] and the run).
    pub(crate) fn flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.flag)
    }

    /// The first signal received, if any.
    pub(crate) fn received(&self) -> Option<i32> {
        Some(self.first.load(Ordering::SeqCst)).filter(|&s| s != 0)
    }

    /// `SIGINT`/`SIGTERM`, for messages.
    pub(crate) fn received_name(&self) -> Option<&'static str> {
        self.received().map(signal_name)
    }

    /// The first signal received, to pass on to child processes.
    pub(crate) fn forward(&self) -> Option<impala_tune::Forward> {
        self.received().map(|signal| match signal {
            SIGTERM => impala_tune::Forward::Terminate,
            _ => impala_tune::Forward::Interrupt,
        })
    }

    /// 128 + the first signal's number, if one was received.
    pub(crate) fn exit_code(&self) -> Option<ExitCode> {
        self.received().and_then(|s| u8::try_from(128 + s).ok()).map(ExitCode::from)
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        SIGINT => "SIGINT",
        SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}
