//! The run folder's result files, laid out as Ray Tune writes them so existing tooling reads them:
//! `params.json` (the config), `result.json` (one JSON object per iteration, one per line),
//! `progress.csv` (one flattened row per iteration) and TensorBoard event files.
//!
//! Memory stays flat however long a run is: the logger keeps only the CSV header, and every
//! file is read and rewritten as a stream (a new column rewrites `progress.csv` from the old
//! file). Cutting a history at an iteration is [`crate::run::history`]'s.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::checkpoint::write_file_atomically;
use crate::result::flatten;
use crate::run::history::rewind_history;
use crate::{EventWriter, ImpalaError, IterationResult, Result};

/// Name of the per-iteration JSON lines file.
pub const RESULT_FILE: &str = "result.json";
/// Name of the per-iteration CSV file.
pub const PROGRESS_FILE: &str = "progress.csv";
/// Name of the config file written at the start of a run.
pub const PARAMS_FILE: &str = "params.json";
/// The prefix of TensorBoard event file names.
pub(crate) const EVENTS_PREFIX: &str = "events.out.tfevents.";

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

/// Writes the run's config as `params.json` (pretty JSON, as Tune does).
pub fn write_params(dir: &Path, config: &impala_config::ImpalaConfig) -> Result<()> {
    let path = dir.join(PARAMS_FILE);
    let text = serde_json::to_string_pretty(config).map_err(|source| ImpalaError::Json {
        action: "write",
        path: path.clone(),
        source,
    })?;
    write_file_atomically(&path, text.as_bytes())
}

/// The env a run folder trains, as its `params.json` says (`None` without one).
///
/// ```
/// let run = tempfile::tempdir()?;
/// assert_eq!(impala::params_env(run.path()), None);
/// impala::write_params(run.path(), &impala::config::ImpalaConfig::default())?;
/// assert_eq!(impala::params_env(run.path()).as_deref(), Some("CartPole-v1"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn params_env(dir: &Path) -> Option<String> {
    let text = fs::read_to_string(dir.join(PARAMS_FILE)).ok()?;
    let params: serde_json::Value = serde_json::from_str(&text).ok()?;
    params.get("env")?.as_str().map(str::to_string)
}

/// Reads `result.json` as `(line, parsed object)` pairs; a missing file has no lines. A partial
/// last line (a crash mid-write) is dropped with a warning; any other line that is not JSON is
/// an error naming its line number.
pub fn read_result_lines(path: &Path) -> Result<Vec<(String, serde_json::Value)>> {
    let mut out = Vec::new();
    for_each_result(path, |_, line, value: serde_json::Value| {
        out.push((String::from_utf8_lossy(line).into_owned(), value));
        Ok(())
    })?;
    Ok(out)
}

/// Reads `result.json` as the results it holds, typed as they were written (see
/// [`read_result_lines`] for a missing file and a partial last line).
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join(impala::RESULT_FILE);
/// std::fs::write(&path, "{\"training_iteration\": 1, \"episode_return_mean\": null}\n")?;
/// let results = impala::read_results(&path)?;
/// assert_eq!(results[0].training_iteration, 1);
/// assert!(results[0].episode_return_mean.is_nan(), "no episode finished yet");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn read_results(path: &Path) -> Result<Vec<IterationResult>> {
    let mut out = Vec::new();
    for_each_result(path, |_, _, result: IterationResult| {
        out.push(result);
        Ok(())
    })?;
    Ok(out)
}

/// What a scan of `result.json` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Scan {
    /// Lines read (and parsed).
    pub lines: u64,
    /// The 1-based number of a partial last line that was skipped.
    pub partial_line: Option<u64>,
}

/// Streams `path` (`result.json`) line by line, parsing each non-empty line as a `T` and
/// calling `f(line number, line, value)`. A line that does not parse is an error naming it,
/// unless it is the last non-empty line: then it is a partial write (a crash mid-line), skipped
/// with a warning. A missing file has no lines.
pub(crate) fn for_each_result<T: DeserializeOwned>(
    path: &Path,
    mut f: impl FnMut(u64, &[u8], T) -> Result<()>,
) -> Result<Scan> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Scan::default()),
        Err(e) => return Err(ImpalaError::io("read", path, e)),
    };
    let mut input = BufReader::new(file);
    let mut buf = Vec::new();
    let mut scan = Scan::default();
    let mut failed: Option<(u64, serde_json::Error)> = None;
    let mut number = 0u64;
    loop {
        buf.clear();
        let n = input.read_until(b'\n', &mut buf).map_err(|e| ImpalaError::io("read", path, e))?;
        if n == 0 {
            break;
        }
        number += 1;
        let line = buf.trim_ascii();
        if line.is_empty() {
            continue;
        }
        if let Some((bad, e)) = failed.take() {
            return Err(bad_line(path, bad, &e));
        }
        match serde_json::from_slice::<T>(line) {
            Ok(value) => {
                scan.lines += 1;
                f(number, line, value)?;
            }
            Err(e) => failed = Some((number, e)),
        }
    }
    if let Some((bad, e)) = failed {
        tracing::warn!(
            "dropped the partial last line {bad} of `{}` (the run stopped while writing it: {})",
            path.display(),
            serde_message(&e)
        );
        scan.partial_line = Some(bad);
    }
    Ok(scan)
}

fn bad_line(path: &Path, number: u64, e: &serde_json::Error) -> ImpalaError {
    let reason = format!(
        "line {number} is not valid JSON ({} at column {}); repair or delete that line",
        serde_message(e),
        e.column()
    );
    ImpalaError::io("read", path, std::io::Error::new(std::io::ErrorKind::InvalidData, reason))
}

/// serde_json's message without its ` at line L column C` (the line is always 1 here).
fn serde_message(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rsplit_once(" at line ") {
        Some((message, _)) => message.to_string(),
        None => text,
    }
}

/// Just the iteration of a `result.json` line (the rest is skipped without allocating).
#[derive(Deserialize)]
pub(crate) struct IterationOnly {
    pub training_iteration: Option<u64>,
}

/// Rebuilds `dir/progress.csv` from `dir/result.json` in two streaming passes (the header,
/// then the rows), so it matches what [`ResultLogger`] would have written.
pub(crate) fn write_progress_from_results(dir: &Path) -> Result<()> {
    let result_path = dir.join(RESULT_FILE);
    let path = dir.join(PROGRESS_FILE);
    let mut header = Vec::new();
    for_each_result(&result_path, |_, _, value: serde_json::Value| {
        header = union_header(&header, &flatten(&value));
        Ok(())
    })?;
    let tmp = tmp_sibling(&path);
    let written = (|| -> Result<()> {
        let mut out = csv_writer(create_file(&tmp)?);
        if !header.is_empty() {
            out.write_record(&header).map_err(|e| csv_error("write", &tmp, e))?;
        }
        for_each_result(&result_path, |_, _, value: serde_json::Value| {
            write_row(&mut out, &header, &flatten(&value), &tmp)
        })?;
        let file = out.into_inner().map_err(|e| ImpalaError::io("write", &tmp, e.into_error()))?;
        file.sync_all().map_err(|e| ImpalaError::io("sync", &tmp, e))?;
        fs::rename(&tmp, &path).map_err(|e| ImpalaError::io("rename", &tmp, e))
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

/// The TensorBoard event files of `dir`, in name (= creation) order.
pub(crate) fn event_files(dir: &Path) -> Result<Vec<String>> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map_err(|e| ImpalaError::io("read", dir, e))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(EVENTS_PREFIX))
        .collect();
    names.sort();
    Ok(names)
}

/// `.NAME.tmp-PID` next to `path` (the pattern stale-temporary clean-up looks for).
pub(crate) fn tmp_sibling(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

pub(crate) fn create_file(path: &Path) -> Result<File> {
    File::create(path).map_err(|e| ImpalaError::io("create", path, e))
}

fn open_append(path: &Path) -> Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| ImpalaError::io("open", path, e))
}

fn csv_writer(file: File) -> csv::Writer<File> {
    csv::WriterBuilder::new().has_headers(false).from_writer(file)
}

fn csv_reader(path: &Path) -> Result<csv::Reader<File>> {
    // Flexible: a partial last row (a crash mid-write) is padded, not an error.
    csv::ReaderBuilder::new().flexible(true).from_path(path).map_err(|e| csv_error("read", path, e))
}

fn csv_error(action: &'static str, path: &Path, e: csv::Error) -> ImpalaError {
    ImpalaError::io(action, path, e.into())
}

/// The columns of `progress.csv` (empty if it is missing or empty).
pub(crate) fn read_csv_header(path: &Path) -> Result<Vec<String>> {
    match fs::metadata(path) {
        Ok(m) if m.len() > 0 => {}
        _ => return Ok(Vec::new()),
    }
    let mut reader = csv_reader(path)?;
    let header = reader.headers().map_err(|e| csv_error("read", path, e))?;
    Ok(header.iter().map(str::to_string).collect())
}

fn write_row(
    out: &mut csv::Writer<File>,
    header: &[String],
    row: &BTreeMap<String, serde_json::Value>,
    path: &Path,
) -> Result<()> {
    if header.is_empty() {
        return Ok(());
    }
    let cells = header.iter().map(|k| row.get(k).map_or(String::new(), csv_value));
    out.write_record(cells).map_err(|e| csv_error("write", path, e))
}

/// Columns that open `progress.csv`, so the numbers people look at first come first.
const FIRST_COLUMNS: [&str; 8] = [
    "training_iteration",
    "time_total_s",
    "timesteps_total",
    "episode_return_mean",
    "episode_return_min",
    "episode_return_max",
    "episode_len_mean",
    "num_env_steps_trained",
];

/// `old` followed by any keys of `row` it lacks ([`FIRST_COLUMNS`] first, then in key order).
fn union_header(old: &[String], row: &BTreeMap<String, serde_json::Value>) -> Vec<String> {
    let mut header = old.to_vec();
    if header.is_empty() {
        header.extend(
            FIRST_COLUMNS.iter().filter(|k| row.contains_key(**k)).map(|k| (*k).to_string()),
        );
    }
    let new: Vec<String> = {
        let known: std::collections::HashSet<&str> = header.iter().map(String::as_str).collect();
        row.keys().filter(|k| !known.contains(k.as_str())).cloned().collect()
    };
    header.extend(new);
    header
}

/// A JSON value as a CSV cell: `null` is empty, strings are themselves, anything else its JSON
/// text (the `csv` crate quotes what needs quoting).
fn csv_value(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => String::new(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Run folders written and read back, for the tests of the logger and of
/// [`crate::run::history`].
#[cfg(test)]
pub(crate) mod test_runs {
    use super::*;
    use crate::tensorboard::read_scalars;

    pub(crate) fn result(i: u64) -> IterationResult {
        IterationResult { training_iteration: i, timesteps_total: 100 * i, ..Default::default() }
    }

    pub(crate) fn tmp() -> Result<tempfile::TempDir> {
        tempfile::tempdir().map_err(|e| ImpalaError::io("create", Path::new("tmp"), e))
    }

    pub(crate) fn read(path: &Path) -> Result<String> {
        fs::read_to_string(path).map_err(|e| ImpalaError::io("read", path, e))
    }

    pub(crate) fn iterations(dir: &Path) -> Result<Vec<u64>> {
        Ok(read_result_lines(&dir.join(RESULT_FILE))?
            .iter()
            .filter_map(|(_, v)| v["training_iteration"].as_u64())
            .collect())
    }

    /// The `training_iteration` column of `progress.csv`, read with the csv crate.
    pub(crate) fn csv_iterations(dir: &Path) -> Result<Vec<u64>> {
        let path = dir.join(PROGRESS_FILE);
        let mut reader = csv_reader(&path)?;
        let col = reader
            .headers()
            .map_err(|e| csv_error("read", &path, e))?
            .iter()
            .position(|h| h == "training_iteration");
        let mut out = Vec::new();
        for record in reader.records() {
            let record = record.map_err(|e| csv_error("read", &path, e))?;
            out.extend(col.and_then(|c| record.get(c)?.parse::<u64>().ok()));
        }
        Ok(out)
    }

    pub(crate) fn event_iterations(dir: &Path) -> Result<Vec<u64>> {
        let mut out = Vec::new();
        for name in event_files(dir)? {
            for (_, tag, v) in read_scalars(&dir.join(name))? {
                if tag == crate::tensorboard::ITERATION_TAG {
                    out.push(v as u64);
                }
            }
        }
        Ok(out)
    }

    pub(crate) fn log_run(dir: &Path, iters: std::ops::RangeInclusive<u64>) -> Result<()> {
        let mut log = ResultLogger::open(dir, None)?;
        for i in iters {
            log.log(&result(i))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::test_runs::*;
    use super::*;
    use crate::EvaluationResult;

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
