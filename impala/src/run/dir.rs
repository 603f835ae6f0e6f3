//! Opening a run folder: a new one (named to the microsecond, claimed atomically), or the one a
//! checkpoint continues: in place from the newest checkpoint, rewound (`truncate`), or forked
//! into a new folder that gets the history up to the checkpoint. Every opened folder is locked
//! for this process and cleared of the temporaries of dead processes.

use std::fs;
use std::path::{Path, PathBuf};

use super::history::{copy_history, rewind_history, HistoryCut};
use super::lock::{process_alive, DirLock};
use super::RunError;
use crate::checkpoint::{find_checkpoint, read_checkpoint};
use crate::{ImpalaError, RESULT_FILE};

const CHECKPOINT_PREFIX: &str = "checkpoint_";

/// The files a sweep writes into a trial's run folder before the trial's run opens it: the
/// trial's resolved config, and the run process's standard output and error.
pub const TRIAL_FILES: [&str; 3] = ["trial.json", "stdout.log", "stderr.log"];
/// The part of a forked run folder's name that says where it came from.
const FORK_MARK: &str = "-from-checkpoint_";

/// Where a run writes its results.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunTarget {
    /// A new run in this folder (created if missing; refused if it already holds results).
    New(PathBuf),
    /// A new run in a new folder `parent/<prefix>_<UTC date and time to the microsecond>`
    /// (`_2`, `_3`, ... appended if two runs start in the same microsecond).
    Unique {
        /// The folder that holds run folders (`impala_results`).
        parent: PathBuf,
        /// The name's start (`IMPALA_CartPole-v1`).
        prefix: String,
    },
    /// Continue from a checkpoint (a `checkpoint_NNNNNN` folder, or a run folder: its newest).
    /// From the newest checkpoint of its run folder, the run continues there; from an older
    /// one, a new run folder is forked (next to it, or `run_dir`) with the history up to the
    /// checkpoint, unless `truncate` rewinds the old folder to it.
    Resume {
        /// The checkpoint.
        checkpoint: PathBuf,
        /// Where the resumed run writes, if not the checkpoint's run folder (a fork).
        run_dir: Option<PathBuf>,
        /// Rewind the checkpoint's run folder to it instead of forking: later results, events
        /// and checkpoints are deleted.
        truncate: bool,
    },
}

/// How a run folder was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Opened {
    /// A new run.
    New,
    /// The run continues in its folder from its newest checkpoint (`iteration`). `dropped` are
    /// iterations logged after that checkpoint (no checkpoint holds them): their results were
    /// removed and are trained again.
    Continued {
        /// The checkpoint's iteration.
        iteration: u64,
        /// The first and last iteration whose results were removed.
        dropped: Option<(u64, u64)>,
    },
    /// A new run folder, forked from a checkpoint of another run folder with its history up
    /// to the checkpoint; the other folder is unchanged.
    Forked {
        /// The checkpoint.
        checkpoint: PathBuf,
        /// The run folder it belongs to.
        source: PathBuf,
        /// The checkpoint's iteration (the history copied ends there).
        iteration: u64,
        /// The source's last logged iteration, if it went further.
        source_last: Option<u64>,
    },
    /// The checkpoint's run folder, rewound to it (`truncate`).
    Truncated {
        /// The checkpoint's iteration.
        iteration: u64,
        /// The first and last iteration whose results were removed.
        dropped: Option<(u64, u64)>,
        /// The later checkpoint folders that were deleted.
        removed_checkpoints: Vec<String>,
    },
}

impl Opened {
    /// What opening the run folder `path` did besides starting, in a sentence for the user: a
    /// fork, a rewind, or results dropped (see [`is_warning`](Self::is_warning)); `None` for
    /// a new run and a plain continuation. `truncate` is how the caller names the `truncate`
    /// option (`--truncate` on the command line).
    ///
    /// ```
    /// use std::path::Path;
    /// use impala::run::Opened;
    ///
    /// let rewound = Opened::Truncated {
    ///     iteration: 4,
    ///     dropped: Some((5, 9)),
    ///     removed_checkpoints: vec!["checkpoint_000008".into()],
    /// };
    /// assert_eq!(
    ///     rewound.describe(Path::new("run"), "truncate").as_deref(),
    ///     Some("rewound run to iteration 4 (truncate): removed the results of iteration(s) 5-9 \
    ///           and checkpoint(s) checkpoint_000008")
    /// );
    /// assert!(!rewound.is_warning());
    /// assert_eq!(Opened::New.describe(Path::new("run"), "truncate"), None);
    /// ```
    pub fn describe(&self, path: &Path, truncate: &str) -> Option<String> {
        let path = path.display();
        let range = |(a, b): (u64, u64)| if a == b { format!("{a}") } else { format!("{a}-{b}") };
        match self {
            Opened::New | Opened::Continued { dropped: None, .. } => None,
            Opened::Continued { iteration, dropped: Some(dropped) } => Some(format!(
                "iteration(s) {} of `{path}` came after its newest checkpoint (iteration \
                 {iteration}); their results are removed and they are trained again",
                range(*dropped)
            )),
            Opened::Forked { checkpoint, source, iteration, source_last } => Some(format!(
                "forked a new run folder {path} from {}: it holds the history up to iteration \
                 {iteration}; {} is unchanged{}",
                checkpoint.display(),
                source.display(),
                source_last.map_or_else(String::new, |l| format!(
                    " and keeps iterations to {l} ({truncate} rewinds it to {iteration} instead)"
                ))
            )),
            Opened::Truncated { iteration, dropped, removed_checkpoints } => Some(format!(
                "rewound {path} to iteration {iteration} ({truncate}): removed the results of \
                 iteration(s) {} and checkpoint(s) {}",
                dropped.map_or_else(|| "none".to_string(), range),
                if removed_checkpoints.is_empty() {
                    "none".to_string()
                } else {
                    removed_checkpoints.join(", ")
                }
            )),
        }
    }

    /// Whether [`describe`](Self::describe) is a warning: results were dropped to be trained
    /// again.
    pub fn is_warning(&self) -> bool {
        matches!(self, Opened::Continued { dropped: Some(_), .. })
    }
}

/// An open run folder: created, locked for this process (a second process is refused with
/// [`RunError::Locked`]), and cleared of stale temporaries. The lock is released on drop.
#[derive(Debug)]
pub struct RunDir {
    path: PathBuf,
    resume_at: Option<u64>,
    opened: Opened,
    _lock: DirLock,
}

impl RunDir {
    /// Opens the folder `target` names. Nothing is written before the lock is held; a resume
    /// reads the checkpoint's iteration from it.
    ///
    /// ```
    /// use impala::run::{Opened, RunDir, RunTarget};
    /// let tmp = tempfile::tempdir()?;
    /// let target = RunTarget::Unique { parent: tmp.path().into(), prefix: "IMPALA_X".into() };
    /// let (a, b) = (RunDir::open(&target)?, RunDir::open(&target)?);
    /// assert_ne!(a.path(), b.path());
    /// assert_eq!(a.opened(), &Opened::New);
    /// // The same folder twice at once is refused.
    /// assert!(RunDir::open(&RunTarget::New(a.path().into())).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open(target: &RunTarget) -> Result<Self, RunError> {
        match target {
            RunTarget::New(dir) => Self::create(dir, false),
            RunTarget::Unique { parent, prefix } => {
                let dir = claim_unique(parent, &format!("{prefix}_{}", utc_stamp_now()))?;
                Self::create(&dir, true)
            }
            RunTarget::Resume { checkpoint, run_dir, truncate } => {
                Self::resume(checkpoint, run_dir.as_deref(), *truncate)
            }
        }
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How it was opened.
    pub fn opened(&self) -> &Opened {
        &self.opened
    }

    /// The iteration the run continues from (`None` for a new run).
    pub fn resume_at(&self) -> Option<u64> {
        self.resume_at
    }

    /// A new run in `dir` (`claimed`: this process just created it). A folder that exists
    /// must be empty, a run folder, or a sweep's trial folder: a run never writes among a
    /// user's own files.
    fn create(dir: &Path, claimed: bool) -> Result<Self, RunError> {
        let existed = claimed || dir.exists();
        if !claimed {
            refuse_foreign_files(dir)?;
        }
        let not_writable =
            |source| ImpalaError::RunDirNotWritable { path: dir.to_path_buf(), source };
        fs::create_dir_all(dir).map_err(not_writable)?;
        let opened = Self::lock(dir).and_then(|lock| {
            let results = dir.join(RESULT_FILE);
            if results.metadata().is_ok_and(|m| m.len() > 0) {
                return Err(ImpalaError::RunDirInUse { path: dir.to_path_buf() }.into());
            }
            Ok(RunDir {
                path: dir.to_path_buf(),
                resume_at: None,
                opened: Opened::New,
                _lock: lock,
            })
        });
        if opened.is_err() && (claimed || !existed) {
            // Leave nothing behind (the folder is empty unless someone else holds it).
            let _ = fs::remove_dir(dir);
        }
        opened
    }

    /// Locks `dir`, proves it writable and removes stale temporaries.
    fn lock(dir: &Path) -> Result<DirLock, RunError> {
        let lock = DirLock::acquire(dir)?;
        let not_writable =
            |source| ImpalaError::RunDirNotWritable { path: dir.to_path_buf(), source };
        let probe = dir.join(format!(".write-test-{}", std::process::id()));
        fs::write(&probe, b"").map_err(not_writable)?;
        fs::remove_file(&probe).map_err(not_writable)?;
        remove_stale_temporaries(dir)?;
        Ok(lock)
    }

    fn resume(checkpoint: &Path, run_dir: Option<&Path>, truncate: bool) -> Result<Self, RunError> {
        let checkpoint = find_checkpoint(checkpoint)?;
        let (state, config) = read_checkpoint(&checkpoint)?;
        let iteration = state.training_iteration;
        let source = checkpoint
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        check_run_env(&source, &checkpoint, &config.env)?;
        if let Some(dir) = run_dir.filter(|d| !same_dir(d, &source)) {
            if truncate {
                return Err(RunError::TruncateElsewhere {
                    run_dir: source,
                    other: dir.to_path_buf(),
                });
            }
            return Self::fork(&checkpoint, &source, iteration, dir, false);
        }
        let newer = |dir: &Path| -> Result<Vec<u64>, RunError> {
            Ok(checkpoint_iterations(dir)?.into_iter().filter(|&i| i > iteration).collect())
        };
        let fork_beside = |source: &Path| -> Result<Self, RunError> {
            // `.` or `..`: name the fork after the folder's real name, next to it.
            let named = match source.file_name() {
                Some(_) => source.to_path_buf(),
                None => fs::canonicalize(source).unwrap_or_else(|_| source.to_path_buf()),
            };
            let parent = named.parent().filter(|p| !p.as_os_str().is_empty());
            let parent = parent.unwrap_or(Path::new("."));
            let name = named.file_name().map_or_else(
                || "run".to_string(),
                |n| {
                    let n = n.to_string_lossy();
                    n.rfind(FORK_MARK).map_or(n.to_string(), |at| n[..at].to_string())
                },
            );
            let dir = claim_unique(parent, &format!("{name}{FORK_MARK}{iteration:06}"))?;
            Self::fork(&checkpoint, source, iteration, &dir, true)
        };
        // Decided before locking, so an older checkpoint of a run still going can be forked.
        if !truncate && !newer(&source)?.is_empty() {
            return fork_beside(&source);
        }
        let lock = Self::lock(&source)?;
        let mut later = newer(&source)?;
        if !truncate && !later.is_empty() {
            // A newer checkpoint appeared before we held the lock.
            drop(lock);
            return fork_beside(&source);
        }
        let mut removed_checkpoints = Vec::new();
        later.sort_unstable_by(|a, b| b.cmp(a));
        for i in later {
            // Newest first, so an interrupted rewind leaves the newest checkpoint nearest the
            // one asked for.
            let name = crate::checkpoint::checkpoint_name(i);
            remove_checkpoint(&source.join(&name))?;
            removed_checkpoints.push(name);
        }
        removed_checkpoints.reverse();
        let cut = rewind_history(&source, iteration)?;
        let opened = if removed_checkpoints.is_empty() && !(truncate && cut.dropped.is_some()) {
            Opened::Continued { iteration, dropped: cut.dropped }
        } else {
            Opened::Truncated { iteration, dropped: cut.dropped, removed_checkpoints }
        };
        Ok(RunDir { path: source, resume_at: Some(iteration), opened, _lock: lock })
    }

    fn fork(
        checkpoint: &Path,
        source: &Path,
        iteration: u64,
        dir: &Path,
        claimed: bool,
    ) -> Result<Self, RunError> {
        let existed = !claimed && dir.exists();
        let mut opened = Self::create(dir, claimed)?;
        let copied: Result<HistoryCut, ImpalaError> = copy_history(source, dir, iteration);
        let cut = match copied {
            Ok(cut) => cut,
            Err(e) => {
                if !existed {
                    let _ = fs::remove_dir_all(dir);
                }
                return Err(e.into());
            }
        };
        opened.resume_at = Some(iteration);
        opened.opened = Opened::Forked {
            checkpoint: checkpoint.to_path_buf(),
            source: source.to_path_buf(),
            iteration,
            source_last: cut.dropped.map(|(_, last)| last),
        };
        Ok(opened)
    }
}

/// Whether `a` and `b` are the same existing folder.
fn same_dir(a: &Path, b: &Path) -> bool {
    match (fs::canonicalize(a), fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Creates `parent/name` (or `name_2`, `name_3`, ... if taken) and returns it; creating the
/// folder is what claims the name, so two processes never get the same one.
fn claim_unique(parent: &Path, name: &str) -> Result<PathBuf, RunError> {
    let not_writable = |source| ImpalaError::RunDirNotWritable { path: parent.join(name), source };
    fs::create_dir_all(parent).map_err(not_writable)?;
    let mut n = 1u32;
    loop {
        let dir = if n == 1 { parent.join(name) } else { parent.join(format!("{name}_{n}")) };
        match fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 10_000 => n += 1,
            Err(e) => return Err(not_writable(e).into()),
        }
    }
}

impl RunTarget {
    /// A new run of `env` in `impala_results/IMPALA_<env>_<UTC date and time>`: Tune's
    /// `~/ray_results/IMPALA_<env>_<date>` naming, relative to the working folder so it is easy
    /// to find.
    ///
    /// ```
    /// use impala::run::RunTarget;
    /// let target = RunTarget::for_env("ALE/Pong-v5");
    /// assert!(matches!(target, RunTarget::Unique { prefix, .. } if prefix == "IMPALA_ALE_Pong-v5"));
    /// ```
    pub fn for_env(env: &str) -> RunTarget {
        let prefix = format!("IMPALA_{}", folder_safe(env));
        RunTarget::Unique { parent: PathBuf::from("impala_results"), prefix }
    }
}

/// `text` (an env id) as part of a folder name: `/` and `\` become `_`.
///
/// ```
/// assert_eq!(impala::run::folder_safe("ALE/Pong-v5"), "ALE_Pong-v5");
/// ```
pub fn folder_safe(text: &str) -> String {
    text.chars().map(|c| if matches!(c, '/' | '\\') { '_' } else { c }).collect()
}

/// `YYYY-MM-DD_HH-MM-SS.ffffff` in UTC: Tune's run-folder date, to the microsecond.
pub fn utc_stamp(time: std::time::SystemTime) -> String {
    let t = time::OffsetDateTime::from(time);
    format!(
        "{:04}-{:02}-{:02}_{:02}-{:02}-{:02}.{:06}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.microsecond()
    )
}

fn utc_stamp_now() -> String {
    utc_stamp(std::time::SystemTime::now())
}

/// The iterations of the `checkpoint_NNNNNN` folders in `dir`.
pub(crate) fn checkpoint_iterations(dir: &Path) -> Result<Vec<u64>, ImpalaError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(ImpalaError::io("read", dir, e)),
    };
    let mut out: Vec<u64> = entries
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().into_string().ok()?;
            let digits = name.strip_prefix(CHECKPOINT_PREFIX)?;
            if !digits.bytes().all(|b| b.is_ascii_digit()) || !e.path().is_dir() {
                return None;
            }
            digits.parse().ok()
        })
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// Deletes a checkpoint folder: renamed to a temporary name first, so an interrupted delete
/// never leaves a half-deleted folder under a checkpoint's name.
pub(crate) fn remove_checkpoint(path: &Path) -> Result<(), ImpalaError> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let doomed = path.with_file_name(format!(".{name}.old-{}", std::process::id()));
    fs::rename(path, &doomed).map_err(|e| ImpalaError::io("rename", path, e))?;
    fs::remove_dir_all(&doomed).map_err(|e| ImpalaError::io("remove", &doomed, e))
}

/// A temporary of `dir` written by process `pid`: `.<name>.tmp-PID` (a file or checkpoint
/// being written), `.<name>.old-PID` (a checkpoint being replaced or deleted) or
/// `.write-test-PID`. Returns `(name, pid, is_old)`.
fn parse_temporary(file_name: &str) -> Option<(&str, u32, bool)> {
    if let Some(pid) = file_name.strip_prefix(".write-test-") {
        return Some(("", pid.parse().ok()?, false));
    }
    let rest = file_name.strip_prefix('.')?;
    let (name, pid, old) = if let Some((name, pid)) = rest.rsplit_once(".tmp-") {
        (name, pid, false)
    } else {
        let (name, pid) = rest.rsplit_once(".old-")?;
        (name, pid, true)
    };
    if name.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((name, pid.parse().ok()?, old))
}

/// Removes the temporaries that processes no longer running left in `dir` (a crash or kill
/// mid-save). A checkpoint caught between being moved aside and replaced is moved back.
/// Called with the folder's lock held, so our own PID's temporaries are stale too (a
/// container's process gets the same PID every time).
fn remove_stale_temporaries(dir: &Path) -> Result<(), ImpalaError> {
    let own = std::process::id();
    for entry in fs::read_dir(dir).map_err(|e| ImpalaError::io("read", dir, e))? {
        let entry = entry.map_err(|e| ImpalaError::io("read", dir, e))?;
        let Ok(file_name) = entry.file_name().into_string() else { continue };
        let Some((name, pid, old)) = parse_temporary(&file_name) else { continue };
        if pid != own && process_alive(pid) {
            continue;
        }
        let path = entry.path();
        let real = dir.join(name);
        if old && name.starts_with(CHECKPOINT_PREFIX) && !real.exists() {
            fs::rename(&path, &real).map_err(|e| ImpalaError::io("rename", &path, e))?;
            tracing::info!("restored `{}` from an interrupted save", real.display());
            continue;
        }
        let removed =
            if path.is_dir() { fs::remove_dir_all(&path) } else { fs::remove_file(&path) };
        removed.map_err(|e| ImpalaError::io("remove", &path, e))?;
        tracing::info!("removed `{}`, left by process {pid} (no longer running)", path.display());
    }
    Ok(())
}

/// Refuses a checkpoint of another env than the run folder it sits in trains (its
/// `params.json`): continuing would mix two envs' results in one history.
fn check_run_env(run_dir: &Path, checkpoint: &Path, checkpoint_env: &str) -> Result<(), RunError> {
    // No params yet: nothing to mix with.
    match crate::params_env(run_dir) {
        Some(run_env) if run_env != checkpoint_env => Err(RunError::EnvMismatch {
            run_dir: run_dir.to_path_buf(),
            run_env,
            checkpoint: checkpoint.to_path_buf(),
            checkpoint_env: checkpoint_env.to_string(),
        }),
        _ => Ok(()),
    }
}

/// Refuses an existing `dir` holding an entry that is none of a run's or a sweep's own files
/// (the lock, `params.json`, `result.json`, `progress.csv`, TensorBoard events, checkpoints,
/// the best-checkpoint link, plots and profiles, temporaries of saves, [`TRIAL_FILES`]).
fn refuse_foreign_files(dir: &Path) -> Result<(), RunError> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Ok(()); // missing (created next), or unreadable (reported when written)
    };
    let ours = |name: &str| {
        [
            crate::run::LOCK_FILE,
            crate::run::files::PARAMS_FILE,
            RESULT_FILE,
            crate::run::files::PROGRESS_FILE,
        ]
        .contains(&name)
            || TRIAL_FILES.contains(&name)
            || name == crate::run::BEST_CHECKPOINT_FILE
            || name.starts_with(CHECKPOINT_PREFIX)
            || name.starts_with(crate::run::files::EVENTS_PREFIX)
            || parse_temporary(name).is_some()
            || name.ends_with(".png")
            || name == "profile.json"
    };
    let mut foreign: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !ours(n))
        .collect();
    foreign.sort();
    match foreign.first() {
        None => Ok(()),
        Some(example) => Err(ImpalaError::RunDirNotARun {
            path: dir.to_path_buf(),
            example: example.clone(),
            others: foreign.len() - 1,
        }
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opening_is_described_as_impala_train_prints_it() {
        let run = Path::new("runs/a");
        let dropped = Opened::Continued { iteration: 4, dropped: Some((5, 5)) };
        assert_eq!(
            dropped.describe(run, "--truncate").as_deref(),
            Some(
                "iteration(s) 5 of `runs/a` came after its newest checkpoint (iteration 4); \
                 their results are removed and they are trained again"
            )
        );
        assert!(dropped.is_warning());
        let forked = Opened::Forked {
            checkpoint: "runs/b/checkpoint_000004".into(),
            source: "runs/b".into(),
            iteration: 4,
            source_last: Some(9),
        };
        assert_eq!(
            forked.describe(run, "--truncate").as_deref(),
            Some(
                "forked a new run folder runs/a from runs/b/checkpoint_000004: it holds the \
                 history up to iteration 4; runs/b is unchanged and keeps iterations to 9 \
                 (--truncate rewinds it to 4 instead)"
            )
        );
        assert!(!forked.is_warning());
        let rewound =
            Opened::Truncated { iteration: 4, dropped: None, removed_checkpoints: vec![] };
        assert_eq!(
            rewound.describe(run, "--truncate").as_deref(),
            Some(
                "rewound runs/a to iteration 4 (--truncate): removed the results of iteration(s) \
                 none and checkpoint(s) none"
            )
        );
        let continued = Opened::Continued { iteration: 4, dropped: None };
        assert_eq!(continued.describe(run, "--truncate"), None);
    }

    #[test]
    fn stamps_are_utc_to_the_microsecond() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_micros(1_796_026_850_000_042);
        // 2026-11-30 08:20:50 UTC.
        assert_eq!(utc_stamp(t), "2026-11-30_08-20-50.000042");
        let leap = std::time::UNIX_EPOCH + std::time::Duration::from_secs(951_782_400);
        assert_eq!(utc_stamp(leap), "2000-02-29_00-00-00.000000");
    }

    #[test]
    fn names_taken_get_a_suffix() -> Result<(), RunError> {
        let tmp = tempfile::tempdir().map_err(|e| ImpalaError::io("create", Path::new("t"), e))?;
        let a = claim_unique(tmp.path(), "IMPALA_X_stamp")?;
        let b = claim_unique(tmp.path(), "IMPALA_X_stamp")?;
        let c = claim_unique(tmp.path(), "IMPALA_X_stamp")?;
        assert!(a.ends_with("IMPALA_X_stamp"));
        assert!(b.ends_with("IMPALA_X_stamp_2"));
        assert!(c.ends_with("IMPALA_X_stamp_3"));
        Ok(())
    }

    #[test]
    fn temporaries_are_recognised() {
        assert_eq!(
            parse_temporary(".checkpoint_000004.tmp-123"),
            Some(("checkpoint_000004", 123, false))
        );
        assert_eq!(
            parse_temporary(".checkpoint_000004.old-9"),
            Some(("checkpoint_000004", 9, true))
        );
        assert_eq!(parse_temporary(".result.json.tmp-77"), Some(("result.json", 77, false)));
        assert_eq!(parse_temporary(".write-test-5"), Some(("", 5, false)));
        assert_eq!(parse_temporary("checkpoint_000004"), None);
        assert_eq!(parse_temporary(".impala.lock"), None);
        assert_eq!(parse_temporary(".x.tmp-12a"), None);
    }

    #[test]
    fn stale_temporaries_of_dead_processes_are_removed_live_ones_kept() -> Result<(), RunError> {
        let tmp = tempfile::tempdir().map_err(|e| ImpalaError::io("create", Path::new("t"), e))?;
        let dir = tmp.path();
        let dead = i32::MAX as u32;
        let live = std::process::id();
        let mk = |p: PathBuf| fs::create_dir_all(p.join("learner"));
        let io = |e| ImpalaError::io("create", dir, e);
        mk(dir.join(format!(".checkpoint_000002.tmp-{dead}"))).map_err(io)?;
        // A checkpoint moved aside by a process killed before the new one took its name.
        mk(dir.join(format!(".checkpoint_000001.old-{dead}"))).map_err(io)?;
        fs::write(dir.join(format!(".result.json.tmp-{dead}")), "x").map_err(io)?;
        // The parent of this test process is alive and not us.
        let parent = fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|s| s.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse::<u32>().ok());
        if let Some(ppid) = parent.filter(|&p| p != live && p > 1) {
            mk(dir.join(format!(".checkpoint_000003.tmp-{ppid}"))).map_err(io)?;
        }
        remove_stale_temporaries(dir)?;
        let mut names: Vec<String> = fs::read_dir(dir)
            .map_err(io)?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        names.sort();
        let mut expected = vec!["checkpoint_000001".to_string()];
        if let Some(ppid) = parent.filter(|&p| p != live && p > 1) {
            expected.insert(0, format!(".checkpoint_000003.tmp-{ppid}"));
        }
        assert_eq!(names, expected);
        Ok(())
    }
}
