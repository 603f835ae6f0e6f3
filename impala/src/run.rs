//! A Ray Tune-style run: train until a stop criterion, log every result to a run folder
//! (`params.json`, `result.json`, `progress.csv`, TensorBoard), checkpoint every N iterations
//! and at the end, keeping the newest and the best. [`Training`] is a whole run as the
//! `impala train` command makes it (the command adds only printing and signals): the config
//! from its source or a resumed checkpoint, the algorithm built and restored, the run folder
//! opened, [`run`], the algorithm stopped.
//!
//! A run folder is opened with [`RunDir::open`]: a new folder (uniquely named), or the one a
//! checkpoint continues. It is locked for the process that writes it. Resuming from the newest
//! checkpoint continues in place; from an older one, a new folder is forked with the history up
//! to that checkpoint (or, with `truncate`, the old folder is rewound to it), so no result is
//! ever lost silently.
//!
//! ```no_run
//! use std::sync::atomic::AtomicBool;
//! use impala::config::ImpalaConfig;
//! use impala::run::{run, RunDir, RunOptions, RunTarget};
//! use impala::{Impala, StopCriteria};
//!
//! let mut algo = Impala::new(ImpalaConfig::default().validate()?)?;
//! let dir = RunDir::open(&RunTarget::Unique {
//!     parent: "impala_results".into(),
//!     prefix: "IMPALA_CartPole-v1".into(),
//! })?;
//! let options = RunOptions {
//!     stop: StopCriteria { training_iteration: Some(3), ..Default::default() },
//!     ..Default::default()
//! };
//! let summary = run(&mut algo, &dir, &options, &AtomicBool::new(false), |_| {})?;
//! println!("best: {:?}", summary.best);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod dir;
pub(crate) mod files;
pub(crate) mod history;
mod keep;
mod lock;
pub(crate) mod logger;
pub mod tensorboard;
mod train;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

pub use dir::{folder_safe, utc_stamp, Opened, RunDir, RunTarget, TRIAL_FILES};
pub use keep::{BestCheckpoint, CheckpointPolicy, ScoreOrder, BEST_CHECKPOINT_FILE};
pub use lock::LOCK_FILE;
pub use train::{Started, TrainSpec, Trained, Training, PROFILE_FILE};

use crate::checkpoint::checkpoint_name;
use crate::{
    error_chain, write_params, ImpalaError, IterationResult, ResultLogger, StopCriteria, Trainable,
};
use dir::checkpoint_iterations;
use keep::Keeper;

/// How a run ends in error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The algorithm, its files or its checkpoints failed.
    #[error(transparent)]
    Impala(#[from] ImpalaError),
    /// A checkpoint of one env sits in the run folder of another.
    #[error(
        "checkpoint `{checkpoint}` trains `{checkpoint_env}` but its run folder `{run_dir}` \
         trains `{run_env}` (params.json); resuming would mix both envs' results: resume a \
         checkpoint of `{run_env}`, or move this one into a run folder of its own"
    )]
    EnvMismatch {
        /// The run folder.
        run_dir: PathBuf,
        /// The env its params.json names.
        run_env: String,
        /// The checkpoint.
        checkpoint: PathBuf,
        /// The env the checkpoint's config trains.
        checkpoint_env: String,
    },
    /// Another process holds the run folder.
    #[error(
        "run folder `{path}` is in use by another impala process ({}); wait for it to end, or \
         choose another run_dir",
        pid.map_or_else(|| "PID unknown".to_string(), |p| format!("PID {p}"))
    )]
    Locked {
        /// The run folder.
        path: PathBuf,
        /// The other process, if its lock file says.
        pid: Option<u32>,
    },
    /// The learner died; the last good weights were saved first. The cause is in the message
    /// (not the source), so that it ends with the checkpoint to go on from.
    #[error("{}; the last good checkpoint is `{checkpoint}`", error_chain(cause.as_ref()))]
    LearnerDied {
        /// The learner's failure ([`ImpalaError::LearnerDied`]).
        cause: Box<ImpalaError>,
        /// The checkpoint saved after it died.
        checkpoint: PathBuf,
    },
    /// Training failed otherwise (env runners failed beyond their restarts, a driver error);
    /// the run's state was saved first, so the run can be resumed from it.
    /// As [`RunError::LearnerDied`], the cause is in the message, before the checkpoint.
    #[error(
        "{}; the run was saved to `{checkpoint}` and can be resumed from it",
        error_chain(cause.as_ref())
    )]
    FailedAndSaved {
        /// Why training failed.
        cause: Box<ImpalaError>,
        /// The checkpoint saved after the failure.
        checkpoint: PathBuf,
    },
    /// A checkpoint, or the file naming the best one, could not be written (a full disk), or
    /// training failed and saving the run failed too: the cause, why no checkpoint could be
    /// written, and which checkpoint is the newest to go on from.
    #[error(
        "{}{}; {}",
        error_chain(cause.as_ref()),
        save_error.as_ref().map_or_else(String::new, |e| format!("; the run could not be saved ({e})")),
        newest.as_ref().map_or_else(
            || "the run folder has no checkpoint to resume from".to_string(),
            |p| format!("the newest checkpoint, to resume from, is `{}`", p.display())
        )
    )]
    NotSaved {
        /// Why training or the checkpoint failed.
        cause: Box<ImpalaError>,
        /// Why the checkpoint after a training failure could not be written.
        save_error: Option<String>,
        /// The newest checkpoint already in the run folder.
        newest: Option<PathBuf>,
    },
    /// The checkpoint score attribute is not a result key.
    #[error(
        "unknown checkpoint score attribute `{attribute}`{}; use a result.json key, nested keys \
         joined with `/` (e.g. `episode_return_mean`, `evaluation/episode_return_mean`)",
        nearest.as_ref().map_or_else(String::new, |k| format!(" (did you mean `{k}`?)"))
    )]
    UnknownScoreAttribute {
        /// The attribute given.
        attribute: String,
        /// The nearest result key.
        nearest: Option<String>,
    },
    /// A config file was given for a resumed run, which continues with its checkpoint's
    /// config.
    #[error(
        "config file `{}` cannot be used with `resume`: a resumed run continues with the \
         checkpoint's config; drop the file and change options with `set` overrides",
        file.display()
    )]
    ConfigWithResume {
        /// The config file.
        file: PathBuf,
    },
    /// `truncate` with a run folder other than the checkpoint's.
    #[error(
        "`truncate` rewinds the checkpoint's own run folder `{run_dir}`, but the run was \
         asked to write to `{other}`; resume without `truncate` to fork into `{other}`, or \
         without a `run_dir` to rewind `{run_dir}`"
    )]
    TruncateElsewhere {
        /// The checkpoint's run folder.
        run_dir: PathBuf,
        /// The other folder asked for.
        other: PathBuf,
    },
}

/// How a run goes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunOptions {
    /// When to stop (besides an interrupt).
    pub stop: StopCriteria,
    /// Save a checkpoint every N iterations (0 = only at the end).
    pub checkpoint_every: u64,
    /// Which checkpoints to keep, and how to score them.
    pub checkpoints: CheckpointPolicy,
}

/// Something a run reports as it goes, for the caller to print.
#[derive(Debug)]
#[non_exhaustive]
pub enum RunEvent<'a> {
    /// An iteration finished (already logged).
    Result(&'a IterationResult),
    /// A periodic checkpoint was saved.
    Checkpoint {
        /// The checkpoint folder.
        path: &'a Path,
        /// Its score (`None`: the attribute has no value yet).
        score: Option<f64>,
        /// The run's best checkpoint so far.
        best: Option<&'a BestCheckpoint>,
    },
}

/// What `impala train` prints for the event: the result's progress line, or
/// `checkpoint saved: PATH (episode_return_mean 21.5; best checkpoint_000004 at 30.25)`.
impl std::fmt::Display for RunEvent<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunEvent::Result(result) => f.write_str(&result.progress_line()),
            RunEvent::Checkpoint { path, score, best } => {
                write!(f, "checkpoint saved: {}", path.display())?;
                let Some(best) = best else { return Ok(()) };
                let name = best.path.file_name().unwrap_or_default().to_string_lossy();
                let own = score.map_or_else(|| "no score yet".to_string(), |s| format!("{s}"));
                write!(f, " ({} {own}; best {name} at {})", best.attribute, best.score)
            }
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunSummary {
    /// Why it stopped (the criterion met, or the interrupt).
    pub stop_reason: String,
    /// Whether an interrupt ended it.
    pub interrupted: bool,
    /// The last iteration's result.
    pub last: IterationResult,
    /// The final checkpoint.
    pub checkpoint: PathBuf,
    /// The best checkpoint (`None` if no checkpoint had a score).
    pub best: Option<BestCheckpoint>,
}

impl RunSummary {
    /// `stopped: REASON; episode_return_mean 475.20 after 200000 env steps in 31.2s;
    /// checkpoint PATH; best checkpoint PATH (ATTRIBUTE SCORE)`.
    pub fn describe(&self) -> String {
        let best = self.best.as_ref().map_or_else(String::new, |b| {
            format!("; best checkpoint {} ({} {})", b.path.display(), b.attribute, b.score)
        });
        format!(
            "stopped: {}; episode_return_mean {:.2} after {} env steps in {:.1}s; checkpoint \
             {}{best}",
            self.stop_reason,
            self.last.episode_return_mean,
            self.last.num_env_steps_sampled,
            self.last.time_total_s,
            self.checkpoint.display()
        )
    }
}

/// Trains `algo` until `options.stop` is met or `interrupt` is set (checked after every
/// iteration; set it from a signal handler and also pass it to
/// [`Trainable::set_interrupt_flag`] to cut the iteration short), logging to `dir` and saving a
/// final checkpoint; checkpoints the policy no longer keeps are deleted (never the final one or
/// the best). A resumed `dir` needs `algo` restored from its checkpoint first. When training
/// fails (the learner died: its last good weights), the run is saved and the error names that
/// checkpoint. `on_event` sees each result and periodic checkpoint.
pub fn run<A: Trainable + ?Sized>(
    algo: &mut A,
    dir: &RunDir,
    options: &RunOptions,
    interrupt: &AtomicBool,
    mut on_event: impl FnMut(RunEvent<'_>),
) -> Result<RunSummary, RunError> {
    options.checkpoints.check()?;
    let path = dir.path();
    write_params(path, algo.config().config())?;
    let mut logger = ResultLogger::open(path, dir.resume_at())?;
    let mut keeper = Keeper::open(path, &options.checkpoints)?;
    let mut score = None;
    let (last, stop_reason, interrupted) = loop {
        // A panic on this thread (the driver's code, or the caller's `on_event`) is a failure
        // like any other: the run is saved before it is reported.
        let result = match catch_unwind(AssertUnwindSafe(|| algo.train())) {
            Ok(Ok(result)) => result,
            Ok(Err(cause)) => {
                return Err(save_after_failure(algo, path, &mut keeper, score, cause))
            }
            Err(payload) => {
                let cause = ImpalaError::DriverPanicked {
                    message: impala_sampler::panic_message(payload.as_ref()),
                };
                return Err(save_after_failure(algo, path, &mut keeper, score, cause));
            }
        };
        score = options.checkpoints.score(&result);
        // A log that cannot be written (a full disk) ends the run as any failure does: saved
        // first, when there is room for a checkpoint, never lost with the weights in memory.
        if let Err(cause) = logger.log(&result) {
            return Err(save_after_failure(algo, path, &mut keeper, score, cause));
        }
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| on_event(RunEvent::Result(&result))))
        {
            let cause = ImpalaError::DriverPanicked {
                message: impala_sampler::panic_message(payload.as_ref()),
            };
            return Err(save_after_failure(algo, path, &mut keeper, score, cause));
        }
        if let Some(reason) = options.stop.met_by(&result) {
            break (result, reason, false);
        }
        if interrupt.load(Ordering::SeqCst) {
            break (result, "interrupted".to_string(), true);
        }
        let iteration = result.training_iteration;
        if options.checkpoint_every > 0 && iteration % options.checkpoint_every == 0 {
            let checkpoint = algo.save(path).map_err(|e| not_saved(path, e, None))?;
            let best =
                keeper.saved(algo.iteration(), score).map_err(|e| not_saved(path, e, None))?;
            on_event(RunEvent::Checkpoint { path: &checkpoint, score, best: best.as_ref() });
        }
    };
    let checkpoint = algo.save(path).map_err(|e| not_saved(path, e, None))?;
    let best = keeper.saved(algo.iteration(), score).map_err(|e| not_saved(path, e, None))?;
    Ok(RunSummary { stop_reason, interrupted, last, checkpoint, best })
}

/// Saves the run after training failed (the last good weights when the learner died), so
/// nothing is lost; the error names the checkpoint. If even that fails, the failure alone.
fn save_after_failure<A: Trainable + ?Sized>(
    algo: &mut A,
    dir: &Path,
    keeper: &mut Keeper,
    score: Option<f64>,
    cause: ImpalaError,
) -> RunError {
    match algo.save(dir) {
        Ok(checkpoint) => {
            if let Err(e) = keeper.saved(algo.iteration(), score) {
                tracing::warn!("{}", error_chain(&e));
            }
            let cause = Box::new(cause);
            match *cause {
                ImpalaError::LearnerDied { .. } => RunError::LearnerDied { cause, checkpoint },
                _ => RunError::FailedAndSaved { cause, checkpoint },
            }
        }
        Err(e) => not_saved(dir, cause, Some(error_chain(&e))),
    }
}

/// [`RunError::NotSaved`]: `cause`, then the run folder's newest checkpoint.
fn not_saved(dir: &Path, cause: ImpalaError, save_error: Option<String>) -> RunError {
    let newest = checkpoint_iterations(dir).ok().and_then(|its| its.last().copied());
    let newest = newest.map(|i| dir.join(checkpoint_name(i)));
    RunError::NotSaved { cause: Box::new(cause), save_error, newest }
}
