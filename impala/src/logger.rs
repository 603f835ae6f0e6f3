//! The run folder's result files, laid out as Ray Tune writes them so existing tooling reads them:
//! `params.json` (the config), `result.json` (one JSON object per iteration, one per line),
//! `progress.csv` (one flattened row per iteration) and TensorBoard event files.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use crate::checkpoint::write_file_atomically;
use crate::result::flatten;
use crate::{EventWriter, ImpalaError, IterationResult, Result};

/// Name of the per-iteration JSON lines file.
pub const RESULT_FILE: &str = "result.json";
/// Name of the per-iteration CSV file.
pub const PROGRESS_FILE: &str = "progress.csv";
/// Name of the config file written at the start of a run.
pub const PARAMS_FILE: &str = "params.json";

/// Appends iteration results to the run folder's files.
#[derive(Debug)]
pub struct ResultLogger {
    dir: PathBuf,
    result_json: File,
    header: Vec<String>,
    rows: Vec<BTreeMap<String, serde_json::Value>>,
    events: EventWriter,
}

impl ResultLogger {
    /// Opens the result files in `dir` (which must exist). When resuming at iteration
    /// `resume_at`, earlier results are kept and any logged after `resume_at` are dropped, so
    /// the files continue exactly where the checkpoint stopped; otherwise they start empty.
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
        let mut rows = Vec::new();
        let mut kept = String::new();
        if let Some(last) = resume_at {
            for (line, value) in read_result_lines(&result_path)? {
                let iter = value.get("training_iteration").and_then(serde_json::Value::as_u64);
                if iter.is_some_and(|i| i <= last) {
                    rows.push(flatten(&value));
                    kept.push_str(&line);
                    kept.push('\n');
                }
            }
        }
        write_file_atomically(&result_path, kept.as_bytes())?;
        let result_json = OpenOptions::new()
            .append(true)
            .open(&result_path)
            .map_err(|e| ImpalaError::io("open", &result_path, e))?;
        let events = EventWriter::create(dir)?;
        let mut logger =
            ResultLogger { dir: dir.to_path_buf(), result_json, header: Vec::new(), rows, events };
        logger.header = union_header(&[], &logger.rows);
        logger.rewrite_progress()?;
        Ok(logger)
    }

    /// The run folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends one iteration to `result.json`, `progress.csv` and the event file, and flushes.
    pub fn log(&mut self, result: &IterationResult) -> Result<()> {
        let json = result.to_json();
        let result_path = self.dir.join(RESULT_FILE);
        let line = serde_json::to_string(&json).map_err(|source| ImpalaError::Json {
            action: "write",
            path: result_path.clone(),
            source,
        })?;
        writeln!(self.result_json, "{line}")
            .map_err(|e| ImpalaError::io("write", &result_path, e))?;
        self.result_json.flush().map_err(|e| ImpalaError::io("write", &result_path, e))?;

        let row = flatten(&json);
        let scalars: Vec<(String, f64)> = row
            .iter()
            .filter_map(|(k, v)| v.as_f64().map(|x| (format!("ray/tune/{k}"), x)))
            .collect();
        self.rows.push(row);
        let header = union_header(&self.header, &self.rows[self.rows.len() - 1..]);
        if header.len() != self.header.len() {
            // A new column (e.g. the first evaluation): rewrite the file with the wider header,
            // as Tune users expect one consistent table.
            self.header = header;
            self.rewrite_progress()?;
        } else {
            self.append_progress_row()?;
        }
        let step = i64::try_from(result.timesteps_total).unwrap_or(i64::MAX);
        self.events.add_scalars(step, &scalars)?;
        self.events.flush()
    }

    fn rewrite_progress(&self) -> Result<()> {
        let mut text = String::new();
        if !self.header.is_empty() {
            text.push_str(&csv_line(self.header.iter().map(|h| csv_field(h))));
            for row in &self.rows {
                text.push_str(&self.csv_row(row));
            }
        }
        write_file_atomically(&self.dir.join(PROGRESS_FILE), text.as_bytes())
    }

    fn append_progress_row(&self) -> Result<()> {
        let path = self.dir.join(PROGRESS_FILE);
        let Some(row) = self.rows.last() else { return Ok(()) };
        let mut f = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| ImpalaError::io("open", &path, e))?;
        f.write_all(self.csv_row(row).as_bytes()).map_err(|e| ImpalaError::io("write", &path, e))
    }

    fn csv_row(&self, row: &BTreeMap<String, serde_json::Value>) -> String {
        csv_line(self.header.iter().map(|k| row.get(k).map_or(String::new(), csv_value)))
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

/// Reads `result.json` as `(line, parsed object)` pairs; a missing file has no lines.
pub fn read_result_lines(path: &Path) -> Result<Vec<(String, serde_json::Value)>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(ImpalaError::io("read", path, e)),
    };
    let mut out = Vec::new();
    for line in BufReader::new(file).lines() {
        let line = line.map_err(|e| ImpalaError::io("read", path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        let value = serde_json::from_str(&line).map_err(|source| ImpalaError::Json {
            action: "read",
            path: path.to_path_buf(),
            source,
        })?;
        out.push((line, value));
    }
    Ok(out)
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

/// `old` followed by any keys of `rows` it lacks ([`FIRST_COLUMNS`] first, then in key order).
fn union_header(old: &[String], rows: &[BTreeMap<String, serde_json::Value>]) -> Vec<String> {
    let mut header = old.to_vec();
    if header.is_empty() {
        let present = |k: &&&str| rows.iter().any(|r| r.contains_key(**k));
        header.extend(FIRST_COLUMNS.iter().filter(present).map(|k| (*k).to_string()));
    }
    for row in rows {
        for k in row.keys() {
            if !header.contains(k) {
                header.push(k.clone());
            }
        }
    }
    header
}

fn csv_value(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => String::new(),
        serde_json::Value::String(s) => csv_field(s),
        other => csv_field(&other.to_string()),
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn csv_line(fields: impl Iterator<Item = String>) -> String {
    let mut line = fields.collect::<Vec<_>>().join(",");
    line.push('\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EvaluationResult;

    fn result(i: u64) -> IterationResult {
        IterationResult { training_iteration: i, timesteps_total: 100 * i, ..Default::default() }
    }

    #[test]
    fn new_columns_rewrite_the_csv_and_resume_truncates() -> Result<()> {
        let tmp =
            tempfile::tempdir().map_err(|e| ImpalaError::io("create", Path::new("tmp"), e))?;
        let dir = tmp.path();
        let mut log = ResultLogger::open(dir, None)?;
        log.log(&result(1))?;
        let mut r2 = result(2);
        r2.evaluation = Some(EvaluationResult { episode_return_mean: 9.5, ..Default::default() });
        log.log(&r2)?;
        log.log(&result(3))?;
        drop(log);
        let csv = std::fs::read_to_string(dir.join(PROGRESS_FILE))
            .map_err(|e| ImpalaError::io("read", dir, e))?;
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
        let iters: Vec<u64> = read_result_lines(&dir.join(RESULT_FILE))?
            .iter()
            .filter_map(|(_, v)| v["training_iteration"].as_u64())
            .collect();
        assert_eq!(iters, vec![1, 2, 3]);
        let csv = std::fs::read_to_string(dir.join(PROGRESS_FILE))
            .map_err(|e| ImpalaError::io("read", dir, e))?;
        assert_eq!(csv.lines().count(), 4);
        Ok(())
    }

    #[test]
    fn csv_quotes_only_when_needed() {
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_value(&serde_json::json!([1, 2])), "\"[1,2]\"");
        assert_eq!(csv_value(&serde_json::json!(1.5)), "1.5");
    }
}
