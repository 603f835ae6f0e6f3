//! Child processes (search trials, benchmark seeds) started in their own process groups, within
//! a CPU budget, with the signal this process received passed on to them exactly once.
//!
//! A child of its own process group never sees a terminal's Ctrl-C: the parent, which does,
//! forwards it once (a second SIGINT would tell an `impala train` to hurry its checkpoint).
//! A [`Supervisor`] dropped with children still running (an error in the parent) stops them as
//! a signal would (SIGTERM: they save and exit) and waits, so none outlives it unnoticed.

use std::num::NonZeroUsize;
use std::process::{Child, ChildStdout, Command, ExitStatus};
use std::time::Instant;

/// The signal passed on to children: what the parent received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forward {
    /// SIGINT (Ctrl-C): `impala train` finishes its iteration, saves and exits 130.
    Interrupt,
    /// SIGTERM: the same, exiting 143.
    Terminate,
}

/// The CPUs children may use at once, and how many may run at once (Tune's
/// `max_concurrent_trials`).
///
/// ```
/// use std::num::NonZeroUsize;
/// use impala_tune::Budget;
///
/// let budget = Budget { cpus: 4.0, max_concurrent: None };
/// // Trials of 2, 2 and 3 CPUs: the first two fit together, the third waits.
/// assert_eq!(budget.at_once([2.0, 2.0, 3.0]), 2);
/// // One that alone needs more than the budget still runs, on its own.
/// assert_eq!(budget.at_once([6.0, 1.0]), 1);
/// let capped = Budget { cpus: 4.0, max_concurrent: NonZeroUsize::new(1) };
/// assert_eq!(capped.at_once([1.0, 1.0]), 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// CPUs in all.
    pub cpus: f64,
    /// At most this many at once, whatever the CPUs allow.
    pub max_concurrent: Option<NonZeroUsize>,
}

impl Budget {
    /// Whether a child needing `cpus` may start beside `running` children that use `used`
    /// CPUs: it fits in the budget and under the cap. With nothing running, any child starts,
    /// even one that alone needs more than the budget.
    pub fn admits(&self, used: f64, running: usize, cpus: f64) -> bool {
        let cap = self.max_concurrent.map_or(usize::MAX, NonZeroUsize::get);
        running == 0 || (used + cpus <= self.cpus + 1e-9 && running < cap)
    }

    /// Whether a child needing `cpus` fits in the budget at all.
    pub fn fits(&self, cpus: f64) -> bool {
        cpus <= self.cpus + 1e-9
    }

    /// How many of children needing `needs` CPUs (in starting order) run at once, from none.
    pub fn at_once(&self, needs: impl IntoIterator<Item = f64>) -> usize {
        let (mut used, mut running) = (0.0, 0);
        for cpus in needs {
            if !self.admits(used, running, cpus) {
                break;
            }
            used += cpus;
            running += 1;
        }
        running
    }
}

/// A child that exited.
#[derive(Debug)]
pub struct Exited<K> {
    /// The key it was started with.
    pub key: K,
    /// How it exited.
    pub status: ExitStatus,
    /// Seconds from its start to when its exit was seen.
    pub wall_s: f64,
    /// Its standard output, when it was piped.
    pub stdout: Option<ChildStdout>,
}

/// A running child.
#[derive(Debug)]
struct Running<K> {
    key: K,
    child: Child,
    started: Instant,
}

/// The running children, each known by a key (a trial's index, a seed).
///
/// ```
/// use std::process::Command;
/// use impala_tune::{Forward, Supervisor};
///
/// let mut children = Supervisor::default();
/// children.start(7, &mut Command::new("sleep").arg("30"))?;
/// assert_eq!(children.keys().collect::<Vec<_>>(), [7]);
/// assert!(children.forward(Forward::Terminate).is_empty());
/// let exited = loop {
///     let exited = children.reap()?;
///     if !exited.is_empty() {
///         break exited;
///     }
///     std::thread::sleep(std::time::Duration::from_millis(10));
/// };
/// assert_eq!(exited[0].key, 7);
/// assert!(!exited[0].status.success() && children.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Supervisor<K> {
    running: Vec<Running<K>>,
}

impl<K> Default for Supervisor<K> {
    fn default() -> Self {
        Supervisor { running: Vec::new() }
    }
}

impl<K: Copy + PartialEq> Supervisor<K> {
    /// Starts `command` as child `key`, in a process group of its own.
    pub fn start(&mut self, key: K, command: &mut Command) -> std::io::Result<()> {
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(command, 0);
        let child = command.spawn()?;
        self.running.push(Running { key, child, started: Instant::now() });
        Ok(())
    }

    /// The keys of the running children, in starting order.
    pub fn keys(&self) -> impl Iterator<Item = K> + '_ {
        self.running.iter().map(|r| r.key)
    }

    /// How many children run.
    pub fn len(&self) -> usize {
        self.running.len()
    }

    /// Whether no child runs.
    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// Sends `signal` to child `key` (nothing if it is not running).
    pub fn signal(&mut self, key: K, signal: Forward) -> std::io::Result<()> {
        match self.running.iter_mut().find(|r| r.key == key) {
            Some(running) => send(&mut running.child, signal),
            None => Ok(()),
        }
    }

    /// Sends `signal` to every running child; the children it could not reach, with why.
    pub fn forward(&mut self, signal: Forward) -> Vec<(K, std::io::Error)> {
        let mut failed = Vec::new();
        for running in &mut self.running {
            if let Err(e) = send(&mut running.child, signal) {
                failed.push((running.key, e));
            }
        }
        failed
    }

    /// The children that exited since the last call (no longer running).
    pub fn reap(&mut self) -> std::io::Result<Vec<Exited<K>>> {
        let mut exited = Vec::new();
        let mut i = 0;
        while i < self.running.len() {
            match self.running[i].child.try_wait()? {
                None => i += 1,
                Some(status) => {
                    let mut running = self.running.swap_remove(i);
                    exited.push(Exited {
                        key: running.key,
                        status,
                        wall_s: running.started.elapsed().as_secs_f64(),
                        stdout: running.child.stdout.take(),
                    });
                }
            }
        }
        Ok(exited)
    }
}

impl<K> Drop for Supervisor<K> {
    fn drop(&mut self) {
        for running in &mut self.running {
            let _ = send(&mut running.child, Forward::Terminate);
        }
        for running in &mut self.running {
            let _ = running.child.wait();
        }
    }
}

/// Sends SIGINT / SIGTERM to `child` (elsewhere than Unix: kills it).
fn send(child: &mut Child, signal: Forward) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use rustix::process::{kill_process, Pid, Signal};
        let pid = i32::try_from(child.id()).ok().and_then(Pid::from_raw).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "process id out of range")
        })?;
        let signal = match signal {
            Forward::Interrupt => Signal::INT,
            Forward::Terminate => Signal::TERM,
        };
        kill_process(pid, signal).map_err(std::io::Error::from)
    }
    #[cfg(not(unix))]
    {
        let _ = signal;
        child.kill()
    }
}
