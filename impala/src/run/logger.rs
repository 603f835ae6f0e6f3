//! [`ResultLogger`]: writes each iteration's result to the run folder's files
//! ([`crate::run::files`]) and TensorBoard events, as Ray Tune does.
//!
//! Memory stays flat however long a run is: the logger keeps only the CSV header, and every
//! file is read and rewritten as a stream (a new column rewrites `progress.csv` from the old
//! file). Cutting a history at an iteration is [`crate::run::history`]'s.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::checkpoint::write_file_atomically;
use crate::result::flatten;
use crate::run::files::{
    create_file, csv_error, csv_reader, csv_writer, open_append, read_csv_header, tmp_sibling,
    union_header, write_row, PROGRESS_FILE, RESULT_FILE,
};
use crate::run::history::rewind_history;
use crate::{EventWriter, ImpalaError, IterationResult, Result};

/// Appends iteration results to the run folder's files.
#[derive(Debug)]
pub struct ResultLogger {
    dir: PathBuf,
    result_json: File,
    progress: csv::Writer<File>,
    /// `progress.csv`'s columns: the only per-run state kept in memory.
    header: Vec<String>,
    events: EventWriter,
}

impl ResultLogger {
    /// Opens the result files in `dir` (which must exist). When resuming at iteration
    /// `resume_at`, earlier results are kept and any logged after `resume_at` are dropped
    /// (from `result.json`, `progress.csv` and the event files alike),
    /// so the files continue exactly where the checkpoint stopped; otherwise they start empty.
    ///
    /// ```
    /// use impala::{IterationResult, ResultLogger};
    /// let dir = tempfile::tempdir()?;
    /// let mut log = ResultLogger::open(dir.path(), None)?;
    /// log.log(&IterationResult { training_iteration: 1, ..Default::default() })?;
    /// let csv = std::fs::read_to_string(dir.path().join("progress.csv"))?;
    /// assert!(csv.lines().next().is_some_and(|h| h.contains("training_iteration")));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open(dir: &Path, resume_at: Option<u64>) -> Result<Self> {
        let result_path = dir.join(RESULT_FILE);
        let progress_path = dir.join(PROGRESS_FILE);
        match resume_at {
            Some(last) => {
                rewind_history(dir, last)?;
            }
            None => {
                write_file_atomically(&result_path, b"")?;
                write_file_atomically(&progress_path, b"")?;
            }
        }
        let header = read_csv_header(&progress_path)?;
        let result_json = open_append(&result_path)?;
        let progress = csv_writer(open_append(&progress_path)?);
        let events = EventWriter::create(dir)?;
        Ok(ResultLogger { dir: dir.to_path_buf(), result_json, progress, header, events })
    }

    /// The run folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends one iteration to `result.json`, `progress.csv` and the event file, and flushes.
    /// A write that finds the disk full says how much space the iteration's lines need and how
    /// much is left ([`ImpalaError::DiskFull`]).
    pub fn log(&mut self, result: &IterationResult) -> Result<()> {
        let json = result.to_json();
        let mut line = serde_json::to_string(&json).map_err(|source| ImpalaError::Json {
            action: "write",
            path: self.dir.join(RESULT_FILE),
            source,
        })?;
        line.push('\n');
        // Each file gets about a JSON line's worth: the line itself, a CSV row of the same
        // values, and an event record of its numbers.
        let needed = 3 * line.len() as u64;
        self.append(result, &json, &line).map_err(|e| e.disk_full_needing(needed))
    }

    fn append(
        &mut self,
        result: &IterationResult,
        json: &serde_json::Value,
        line: &str,
    ) -> Result<()> {
        let result_path = self.dir.join(RESULT_FILE);
        // One write per line, so a crash leaves at most a partial last line.
        self.result_json
            .write_all(line.as_bytes())
            .and_then(|()| self.result_json.flush())
            .map_err(|e| ImpalaError::io("write", &result_path, e))?;

        let row = flatten(json);
        if row.keys().any(|k| !self.header.contains(k)) {
            // A new column (e.g. the first evaluation): rewrite the file with the wider header,
            // as Tune users expect one consistent table.
            let header = union_header(&self.header, &row);
            self.widen_progress(header)?;
        }
        let path = self.dir.join(PROGRESS_FILE);
        write_row(&mut self.progress, &self.header, &row, &path)?;
        self.progress.flush().map_err(|e| ImpalaError::io("write", &path, e))?;

        let scalars: Vec<(String, f64)> = row
            .iter()
            .filter_map(|(k, v)| v.as_f64().map(|x| (format!("ray/tune/{k}"), x)))
            .collect();
        let step = i64::try_from(result.timesteps_total).unwrap_or(i64::MAX);
        self.events.add_scalars(step, &scalars)?;
        self.events.flush()
    }

    /// Rewrites `progress.csv` with `header` (the old columns, then new ones) by streaming the
    /// old file: old rows get empty cells in the new columns.
    fn widen_progress(&mut self, header: Vec<String>) -> Result<()> {
        let path = self.dir.join(PROGRESS_FILE);
        self.progress.flush().map_err(|e| ImpalaError::io("write", &path, e))?;
        let tmp = tmp_sibling(&path);
        let written = (|| -> Result<()> {
            let mut out = csv_writer(create_file(&tmp)?);
            out.write_record(&header).map_err(|e| csv_error("write", &tmp, e))?;
            if !self.header.is_empty() {
                let mut old = csv_reader(&path)?;
                let mut record = csv::StringRecord::new();
                while old.read_record(&mut record).map_err(|e| csv_error("read", &path, e))? {
                    let cells = (0..header.len()).map(|i| record.get(i).unwrap_or(""));
                    out.write_record(cells).map_err(|e| csv_error("write", &tmp, e))?;
                }
            }
            let file =
                out.into_inner().map_err(|e| ImpalaError::io("write", &tmp, e.into_error()))?;
            file.sync_all().map_err(|e| ImpalaError::io("sync", &tmp, e))?;
            fs::rename(&tmp, &path).map_err(|e| ImpalaError::io("rename", &tmp, e))
        })();
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        written?;
        self.header = header;
        self.progress = csv_writer(open_append(&path)?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::files::test_runs::*;
    use crate::run::files::*;
    use crate::EvaluationResult;
    use std::collections::BTreeMap;

    #[test]
    fn new_columns_rewrite_the_csv_and_resume_truncates() -> Result<()> {
        let tmp = tmp()?;
        let dir = tmp.path();
        let mut log = ResultLogger::open(dir, None)?;
        log.log(&result(1))?;
        let mut r2 = result(2);
        r2.evaluation = Some(EvaluationResult { episode_return_mean: 9.5, ..Default::default() });
        log.log(&r2)?;
        log.log(&result(3))?;
        drop(log);
        let csv = read(&dir.join(PROGRESS_FILE))?;
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 4);
        let header: Vec<&str> = lines[0].split(',').collect();
        let col = header.iter().position(|h| *h == "evaluation/episode_return_mean");
        let col = col.ok_or_else(|| ImpalaError::CorruptEventFile {
            path: dir.into(),
            reason: "no column".into(),
        })?;
        assert_eq!(lines[1].split(',').nth(col), Some(""));
        assert_eq!(lines[2].split(',').nth(col), Some("9.5"));
        assert_eq!(read_result_lines(&dir.join(RESULT_FILE))?.len(), 3);

        // Resuming from a checkpoint taken at iteration 2 drops iteration 3 everywhere.
        let mut log = ResultLogger::open(dir, Some(2))?;
        log.log(&result(3))?;
        drop(log);
        assert_eq!(iterations(dir)?, vec![1, 2, 3]);
        assert_eq!(csv_iterations(dir)?, vec![1, 2, 3]);
        assert_eq!(read(&dir.join(PROGRESS_FILE))?.lines().count(), 4);
        // TensorBoard too: before, the events of iteration 3 stayed and showed twice.
        let mut tb = event_iterations(dir)?;
        tb.sort_unstable();
        assert_eq!(tb, vec![1, 2, 3]);
        Ok(())
    }

    #[test]
    fn a_later_process_widening_the_csv_keeps_the_rows_it_never_held() -> Result<()> {
        // The rows live only in the file: a logger opened on a resumed run (which holds no
        // rows) still rewrites all of them when a column appears.
        let tmp = tmp()?;
        let dir = tmp.path();
        log_run(dir, 1..=3)?;
        let mut log = ResultLogger::open(dir, Some(3))?;
        let mut r4 = result(4);
        r4.evaluation = Some(EvaluationResult { episode_return_mean: 1.0, ..Default::default() });
        log.log(&r4)?;
        log.log(&result(5))?;
        drop(log);
        assert_eq!(csv_iterations(dir)?, vec![1, 2, 3, 4, 5]);
        let header = read_csv_header(&dir.join(PROGRESS_FILE))?;
        assert_eq!(header.first().map(String::as_str), Some("training_iteration"));
        assert!(header.iter().any(|h| h == "evaluation/episode_return_mean"));
        Ok(())
    }

    #[test]
    fn a_partial_last_line_is_dropped_and_other_bad_lines_are_named() -> Result<()> {
        let tmp = tmp()?;
        let dir = tmp.path();
        log_run(dir, 1..=6)?;
        let path = dir.join(RESULT_FILE);
        let good = read(&path)?;
        // A crash while writing line 7.
        let line7 = good
            .lines()
            .last()
            .unwrap_or_default()
            .replace("\"training_iteration\":6", "\"training_iteration\":7");
        let partial = format!("{good}{}", &line7[..35]);
        fs::write(&path, &partial).map_err(|e| ImpalaError::io("write", &path, e))?;
        let lines = read_result_lines(&path)?;
        assert_eq!(lines.len(), 6);
        // Resuming drops it from the file, so the next line starts on a line of its own.
        let mut log = ResultLogger::open(dir, Some(6))?;
        log.log(&result(7))?;
        drop(log);
        assert_eq!(iterations(dir)?, (1..=7).collect::<Vec<_>>());

        // Damage anywhere but the last line is an error naming that line (not "line 1").
        let mut text: Vec<String> = read(&path)?.lines().map(str::to_string).collect();
        text[2].truncate(35);
        fs::write(&path, text.join("\n") + "\n").map_err(|e| ImpalaError::io("write", &path, e))?;
        let err = read_result_lines(&path).map(|_| ()).map_err(|e| crate::error_chain(&e));
        let err = err.err().unwrap_or_default();
        assert!(err.contains("line 3 is not valid JSON"), "{err}");
        assert!(err.contains("result.json"), "{err}");
        assert!(!err.contains("line 1 "), "{err}");
        assert!(ResultLogger::open(dir, Some(7)).is_err());
        Ok(())
    }

    #[test]
    fn cells_are_quoted_by_the_csv_crate() -> Result<()> {
        assert_eq!(csv_value(&serde_json::json!(null)), "");
        assert_eq!(csv_value(&serde_json::json!(1.5)), "1.5");
        let tmp = tmp()?;
        let path = tmp.path().join("x.csv");
        let mut out = csv_writer(create_file(&path)?);
        let header = vec!["a".to_string(), "b".to_string()];
        out.write_record(&header).map_err(|e| csv_error("write", &path, e))?;
        let row = BTreeMap::from([
            ("a".to_string(), serde_json::json!([1, 2])),
            ("b".to_string(), serde_json::json!("say \"hi\"")),
        ]);
        write_row(&mut out, &header, &row, &path)?;
        drop(out);
        assert_eq!(read(&path)?, "a,b\n\"[1,2]\",\"say \"\"hi\"\"\"\n");
        Ok(())
    }
}
