//! A Ray Tune-style run: train until a stop criterion, log every result to a run folder
//! (`params.json`, `result.json`, `progress.csv`, TensorBoard), checkpoint every N iterations
//! and at the end. The `impala train` command is this plus printing.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::{
    write_params, Impala, ImpalaError, IterationResult, Result, ResultLogger, StopCriteria,
};

/// How a run goes.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOptions {
    /// The run folder.
    pub run_dir: PathBuf,
    /// When to stop (besides an interrupt).
    pub stop: StopCriteria,
    /// Save a checkpoint every N iterations (0 = only at the end).
    pub checkpoint_every: u64,
    /// Whether the algorithm was restored from a checkpoint of this run folder (its results
    /// continue; a fresh run refuses a folder that already holds results).
    pub resumed: bool,
}

/// Something a run reports as it goes, for the caller to print.
#[derive(Debug)]
pub enum RunEvent<'a> {
    /// An iteration finished (already logged).
    Result(&'a IterationResult),
    /// A checkpoint was saved.
    Checkpoint(&'a Path),
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
}

/// Trains `algo` until `options.stop` is met or `interrupt` is set (checked after every
/// iteration; set it from a signal handler and also pass it to
/// [`Impala::set_interrupt_flag`] to cut the iteration short), logging to `options.run_dir`
/// and saving a final checkpoint. `on_event` sees each result and checkpoint.
pub fn run(
    algo: &mut Impala,
    options: &RunOptions,
    interrupt: &AtomicBool,
    mut on_event: impl FnMut(RunEvent<'_>),
) -> Result<RunSummary> {
    prepare_run_dir(&options.run_dir, options.resumed)?;
    write_params(&options.run_dir, algo.config())?;
    let resumed_at = options.resumed.then(|| algo.iteration());
    let mut logger = ResultLogger::open(&options.run_dir, resumed_at)?;
    let (last, stop_reason, interrupted) = loop {
        let result = algo.train()?;
        logger.log(&result)?;
        on_event(RunEvent::Result(&result));
        if let Some(reason) = options.stop.met_by(&result) {
            break (result, reason, false);
        }
        if interrupt.load(Ordering::SeqCst) {
            break (result, "interrupted".to_string(), true);
        }
        let iteration = result.training_iteration;
        if options.checkpoint_every > 0 && iteration % options.checkpoint_every == 0 {
            let path = algo.save(&options.run_dir)?;
            on_event(RunEvent::Checkpoint(&path));
        }
    };
    let checkpoint = algo.save(&options.run_dir)?;
    Ok(RunSummary { stop_reason, interrupted, last, checkpoint })
}

/// The default run folder: `impala_results/IMPALA_<env>_<UTC date>` (Tune's `~/ray_results/
/// IMPALA_<env>_<date>` naming, relative to the working folder so it is easy to find).
pub fn default_run_dir(env: &str) -> PathBuf {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    PathBuf::from("impala_results").join(format!("IMPALA_{env}_{}", utc_stamp(secs)))
}

/// `YYYY-MM-DD_HH-MM-SS` in UTC (civil-from-days, so no date crate is needed).
pub fn utc_stamp(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}_{:02}-{:02}-{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Creates the run folder and proves it writable before any training starts.
fn prepare_run_dir(dir: &Path, resuming: bool) -> Result<()> {
    let not_writable = |source| ImpalaError::RunDirNotWritable { path: dir.to_path_buf(), source };
    std::fs::create_dir_all(dir).map_err(not_writable)?;
    let probe = dir.join(format!(".write-test-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(not_writable)?;
    std::fs::remove_file(&probe).map_err(not_writable)?;
    if !resuming && dir.join(crate::RESULT_FILE).metadata().is_ok_and(|m| m.len() > 0) {
        return Err(ImpalaError::RunDirInUse { path: dir.to_path_buf() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_stamp_matches_known_dates() {
        assert_eq!(utc_stamp(0), "1970-01-01_00-00-00");
        // 2026-11-30 08:20:50 UTC.
        assert_eq!(utc_stamp(1_796_026_850), "2026-11-30_08-20-50");
        assert_eq!(utc_stamp(951_782_400), "2000-02-29_00-00-00");
    }
}
