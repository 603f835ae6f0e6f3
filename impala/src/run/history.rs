//! A run folder's history cut at an iteration: rewound in place (a run resumed from an older
//! checkpoint with `truncate`, or a logger reopened at its checkpoint) or copied into a new
//! folder (a fork). `result.json` is streamed, `progress.csv` rebuilt from it and the
//! TensorBoard event files cut record by record, so memory stays flat however long the run.

use std::fs;
use std::io::Write;
use std::path::Path;

use crate::run::files::{
    create_file, event_files, for_each_result, read_csv_header, tmp_sibling,
    write_progress_from_results, IterationOnly,
};
use crate::run::tensorboard::copy_events_upto;
use crate::{ImpalaError, Result, PROGRESS_FILE, RESULT_FILE};

/// What [`rewind_history`] or [`copy_history`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct HistoryCut {
    /// Iterations kept.
    pub(crate) kept: u64,
    /// The first and last iteration dropped (logged after the one rewound or copied to).
    pub(crate) dropped: Option<(u64, u64)>,
    /// The 1-based line number of a partial last line of `result.json` that was dropped.
    pub(crate) partial_line: Option<u64>,
}

impl HistoryCut {
    fn changed(&self) -> bool {
        self.dropped.is_some() || self.partial_line.is_some()
    }
}

/// What cutting the history in `result_path` (a `result.json`) at iteration `last` keeps and
/// drops, and how many lines it holds.
fn scan(result_path: &Path, last: u64) -> Result<(HistoryCut, u64)> {
    let mut cut = HistoryCut::default();
    let scan = for_each_result(result_path, |_, _, line: IterationOnly| {
        match line.training_iteration {
            Some(i) if i > last => widen(&mut cut.dropped, i),
            _ => cut.kept += 1,
        }
        Ok(())
    })?;
    cut.partial_line = scan.partial_line;
    Ok((cut, scan.lines))
}

/// Rewinds the result files of run folder `dir` to iteration `last`: `result.json` lines,
/// `progress.csv` rows and TensorBoard events of later iterations are removed, and a partial last
/// line is dropped. Files are only rewritten when something is cut (each atomically); a run
/// folder already at `last` is left as it is.
pub(crate) fn rewind_history(dir: &Path, last: u64) -> Result<HistoryCut> {
    let result_path = dir.join(RESULT_FILE);
    let (cut, lines) = scan(&result_path, last)?;
    if cut.changed() {
        let tmp = tmp_sibling(&result_path);
        copy_results_upto(&result_path, &tmp, last)?;
        fs::rename(&tmp, &result_path).map_err(|e| ImpalaError::io("rename", &tmp, e))?;
        write_progress_from_results(dir)?;
        for name in event_files(dir)? {
            let src = dir.join(&name);
            let tmp = tmp_sibling(&src);
            let copied = copy_events_upto(&src, &tmp, last);
            match copied {
                Ok(c) if c.dropped == 0 && !c.partial_tail => {
                    fs::remove_file(&tmp).map_err(|e| ImpalaError::io("remove", &tmp, e))?;
                }
                Ok(_) => fs::rename(&tmp, &src).map_err(|e| ImpalaError::io("rename", &tmp, e))?,
                Err(e) => {
                    let _ = fs::remove_file(&tmp);
                    return Err(e);
                }
            }
        }
    } else if lines > 0 && read_csv_header(&dir.join(PROGRESS_FILE))?.is_empty() {
        // `progress.csv` lost or never written: it is derived from `result.json`.
        write_progress_from_results(dir)?;
    }
    Ok(cut)
}

/// Copies the history of run folder `src` up to iteration `last` into the new run folder `dst`:
/// `result.json` lines, `progress.csv` (rebuilt from them) and every event file's records up
/// to `last` (same file names, so TensorBoard shows the fork's past as it was).
pub(crate) fn copy_history(src: &Path, dst: &Path, last: u64) -> Result<HistoryCut> {
    let result_path = src.join(RESULT_FILE);
    let (cut, _) = scan(&result_path, last)?;
    let dst_results = dst.join(RESULT_FILE);
    let tmp = tmp_sibling(&dst_results);
    copy_results_upto(&result_path, &tmp, last)?;
    fs::rename(&tmp, &dst_results).map_err(|e| ImpalaError::io("rename", &tmp, e))?;
    write_progress_from_results(dst)?;
    for name in event_files(src)? {
        let target = dst.join(&name);
        let copied = copy_events_upto(&src.join(&name), &target, last)?;
        if copied.kept == 0 {
            fs::remove_file(&target).map_err(|e| ImpalaError::io("remove", &target, e))?;
        }
    }
    Ok(cut)
}

fn widen(range: &mut Option<(u64, u64)>, i: u64) {
    *range = Some(match *range {
        Some((a, b)) => (a.min(i), b.max(i)),
        None => (i, i),
    });
}

/// Writes the lines of `src` (a `result.json`) up to iteration `last` to the new file `dst`,
/// fsynced.
fn copy_results_upto(src: &Path, dst: &Path, last: u64) -> Result<()> {
    let written = (|| -> Result<()> {
        let mut out = std::io::BufWriter::new(create_file(dst)?);
        for_each_result(src, |_, line, value: IterationOnly| {
            if value.training_iteration.is_none_or(|i| i <= last) {
                out.write_all(line)
                    .and_then(|()| out.write_all(b"\n"))
                    .map_err(|e| ImpalaError::io("write", dst, e))?;
            }
            Ok(())
        })?;
        let file = out.into_inner().map_err(|e| ImpalaError::io("write", dst, e.into()))?;
        file.sync_all().map_err(|e| ImpalaError::io("sync", dst, e))
    })();
    if written.is_err() {
        let _ = fs::remove_file(dst);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::files::test_runs::*;
    use crate::ResultLogger;

    #[test]
    fn copy_history_forks_up_to_an_iteration_and_leaves_the_source_alone() -> Result<()> {
        let tmp = tmp()?;
        let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
        for d in [&src, &dst] {
            fs::create_dir(d).map_err(|e| ImpalaError::io("create", d, e))?;
        }
        log_run(&src, 1..=6)?;
        let before = read(&src.join(RESULT_FILE))?;
        let cut = copy_history(&src, &dst, 2)?;
        assert_eq!(cut, HistoryCut { kept: 2, dropped: Some((3, 6)), partial_line: None });
        assert_eq!(read(&src.join(RESULT_FILE))?, before);
        assert_eq!(iterations(&dst)?, vec![1, 2]);
        assert_eq!(csv_iterations(&dst)?, vec![1, 2]);
        assert_eq!(event_iterations(&dst)?, vec![1, 2]);
        assert_eq!(event_iterations(&src)?.len(), 6);
        // The fork continues from there.
        let mut log = ResultLogger::open(&dst, Some(2))?;
        log.log(&result(3))?;
        drop(log);
        assert_eq!(csv_iterations(&dst)?, vec![1, 2, 3]);
        let mut tb = event_iterations(&dst)?;
        tb.sort_unstable();
        assert_eq!(tb, vec![1, 2, 3]);
        Ok(())
    }

    #[test]
    fn rewinding_a_folder_already_there_rewrites_nothing() -> Result<()> {
        let tmp = tmp()?;
        let dir = tmp.path();
        log_run(dir, 1..=3)?;
        let modified = |p: &Path| fs::metadata(p).and_then(|m| m.modified()).ok();
        let before = modified(&dir.join(RESULT_FILE));
        let cut = rewind_history(dir, 3)?;
        assert_eq!(cut, HistoryCut { kept: 3, dropped: None, partial_line: None });
        assert_eq!(modified(&dir.join(RESULT_FILE)), before);
        // A lost progress.csv is rebuilt from result.json.
        fs::remove_file(dir.join(PROGRESS_FILE)).map_err(|e| ImpalaError::io("rm", dir, e))?;
        rewind_history(dir, 3)?;
        assert_eq!(csv_iterations(dir)?, vec![1, 2, 3]);
        Ok(())
    }
}
