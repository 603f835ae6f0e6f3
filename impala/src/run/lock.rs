//! The run folder's exclusive lock: `.impala.lock`, `flock`ed by the process that writes the
//! folder (through `fs4`) and holding its PID, so a second process is refused with a message
//! that names the first. The kernel drops the lock when its holder dies, however it dies.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::RunError;
use crate::ImpalaError;

/// The lock file's name inside a run folder.
pub const LOCK_FILE: &str = ".impala.lock";

/// An exclusive lock on a run folder, released (and its file removed) on drop.
#[derive(Debug)]
pub(crate) struct DirLock {
    path: PathBuf,
    /// `None` where the file system has no locks (then nothing is enforced).
    file: Option<File>,
}

impl DirLock {
    /// Locks `dir` (which must exist) for this process, or says who holds it.
    pub(crate) fn acquire(dir: &Path) -> Result<Self, RunError> {
        let path = dir.join(LOCK_FILE);
        let not_writable =
            |source| ImpalaError::RunDirNotWritable { path: dir.to_path_buf(), source };
        // The holder removes the file when it lets go: a file we opened just before that is
        // no longer the lock file, so check and retry.
        for _ in 0..100 {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(not_writable)?;
            match fs4::FileExt::try_lock(&file) {
                Ok(()) => {
                    if !is_same_file(&file, &path) {
                        continue;
                    }
                    file.set_len(0).map_err(not_writable)?;
                    (&file)
                        .write_all(format!("{}\n", std::process::id()).as_bytes())
                        .map_err(not_writable)?;
                    return Ok(DirLock { path, file: Some(file) });
                }
                Err(fs4::TryLockError::WouldBlock) => {
                    let pid = fs::read_to_string(&path).ok().and_then(|s| s.trim().parse().ok());
                    return Err(RunError::Locked { path: dir.to_path_buf(), pid });
                }
                Err(fs4::TryLockError::Error(e)) => {
                    tracing::warn!(
                        "cannot lock run folder `{}` ({e}); make sure no other run writes to it",
                        dir.display()
                    );
                    drop(file);
                    let _ = fs::remove_file(&path);
                    return Ok(DirLock { path, file: None });
                }
            }
        }
        Err(RunError::Locked { path: dir.to_path_buf(), pid: None })
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        if let Some(file) = self.file.take() {
            // Remove the file while still holding the lock, so the folder is left clean; a
            // process that opened it meanwhile sees that it is gone and retries.
            if is_same_file(&file, &self.path) {
                let _ = fs::remove_file(&self.path);
            }
            drop(file);
        }
    }
}

#[cfg(unix)]
fn is_same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn is_same_file(_file: &File, path: &Path) -> bool {
    path.exists()
}

/// Whether process `pid` is running (`kill(pid, 0)`); a PID we may not signal is alive.
#[cfg(unix)]
pub(crate) fn process_alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else {
        return false;
    };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        Err(e) => e != rustix::io::Errno::SRCH,
    }
}

/// Whether process `pid` is running: unknown off Unix, so assumed.
#[cfg(not(unix))]
pub(crate) fn process_alive(_pid: u32) -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_with_the_holders_pid_and_freed_on_drop() -> Result<(), RunError> {
        let tmp =
            tempfile::tempdir().map_err(|e| ImpalaError::io("create", Path::new("tmp"), e))?;
        let first = DirLock::acquire(tmp.path())?;
        match DirLock::acquire(tmp.path()) {
            Err(RunError::Locked { pid, .. }) => assert_eq!(pid, Some(std::process::id())),
            other => panic!("expected Locked, got {other:?}"),
        }
        drop(first);
        assert!(!tmp.path().join(LOCK_FILE).exists(), "the lock file is removed");
        let again = DirLock::acquire(tmp.path())?;
        assert!(again.file.is_some());
        Ok(())
    }

    #[test]
    fn liveness_of_processes() {
        assert!(process_alive(std::process::id()));
        // PIDs are below 2^22 on Linux.
        assert!(!process_alive(i32::MAX as u32));
    }
}
