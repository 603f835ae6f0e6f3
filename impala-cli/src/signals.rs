//! SIGINT (Ctrl-C) and SIGTERM (what Kubernetes, Slurm and systemd send), read on a thread of
//! their own (`signal-hook`'s iterator), never handled inside a signal handler, and recorded in
//! `impala-tune`'s [`Interrupts`]: the first asks the run to finish its iteration, save a
//! checkpoint and exit with 128 + the signal's number (130, 143). Later ones are acknowledged
//! and change nothing, so the process never dies mid-save or while other threads use libtorch.

use anyhow::Context as _;
use impala_tune::{Forward, Interrupts};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// Starts listening for SIGINT and SIGTERM (until the process exits), saying on stderr what
/// each one does.
pub(crate) fn listen() -> anyhow::Result<Interrupts> {
    install().context("cannot listen for SIGINT and SIGTERM")
}

fn install() -> std::io::Result<Interrupts> {
    let (interrupts, mut signals) = (Interrupts::default(), Signals::new([SIGINT, SIGTERM])?);
    let received = interrupts.clone();
    std::thread::Builder::new().name("signals".into()).spawn(move || {
        for signal in signals.forever() {
            let signal = if signal == SIGTERM { Forward::Terminate } else { Forward::Interrupt };
            let name = signal.name();
            received.receive(signal, |first| {
                if first {
                    eprintln!(
                        "\ninterrupted ({name}): finishing this iteration, saving a checkpoint, \
                         then exiting"
                    );
                } else {
                    eprintln!(
                        "{name} again: still saving the checkpoint, exiting as soon as it is \
                         written (SIGKILL, `kill -9`, quits without it)"
                    );
                }
            });
        }
    })?;
    Ok(interrupts)
}
