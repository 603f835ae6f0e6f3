//! Starting and joining the sampler's threads, and waiting on their channels: one place for
//! what the runner group and the aggregation workers both do.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::error::panic_message;
use crate::{Result, SamplerError};

/// Starts a named thread, turning the OS's refusal into [`SamplerError::Spawn`].
pub(crate) fn spawn(name: String, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(f)
        .map_err(|e| SamplerError::Spawn { thread: name, reason: e.to_string() })
}

/// Joins a thread; a panic that escaped it becomes [`SamplerError::ThreadPanicked`].
pub(crate) fn join(handle: JoinHandle<()>) -> Result<()> {
    let name = handle.thread().name().unwrap_or("unnamed").to_string();
    handle.join().map_err(|payload| SamplerError::ThreadPanicked {
        thread: name,
        reason: panic_message(payload.as_ref()),
    })
}

/// Joins every thread (all of them, even after a failure) and returns the first failure.
pub(crate) fn join_all(handles: impl IntoIterator<Item = JoinHandle<()>>) -> Result<()> {
    let mut first = Ok(());
    for handle in handles {
        let joined = join(handle);
        if first.is_ok() {
            first = joined;
        }
    }
    first
}

/// `now + wait`, or `None` (no deadline) when there is no wait limit or it is too far away.
pub(crate) fn deadline_after(wait: Option<Duration>) -> Option<Instant> {
    wait.and_then(|d| Instant::now().checked_add(d))
}

/// The next message, waiting until `deadline` (forever when `None`); `None` on timeout or when
/// every sender is gone.
pub(crate) fn receive_until<T>(rx: &Receiver<T>, deadline: Option<Instant>) -> Option<T> {
    match deadline {
        Some(deadline) => rx.recv_deadline(deadline).ok(),
        None => rx.recv().ok(),
    }
}
