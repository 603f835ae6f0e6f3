//! The run folder's result files, laid out as Ray Tune writes them so existing tooling reads
//! them: `params.json` (the config), `result.json` (one JSON object per iteration, one per
//! line), `progress.csv` (one flattened row per iteration) and the names of the TensorBoard
//! event files; reading them back as a stream, and the CSV helpers the logger writes with.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::checkpoint::write_file_atomically;
use crate::result::flatten;
use crate::{ImpalaError, IterationResult, Result};

/// Name of the per-iteration JSON lines file.
pub const RESULT_FILE: &str = "result.json";
/// Name of the per-iteration CSV file.
pub const PROGRESS_FILE: &str = "progress.csv";
/// Name of the config file written at the start of a run.
pub const PARAMS_FILE: &str = "params.json";
/// The prefix of TensorBoard event file names.
pub(crate) const EVENTS_PREFIX: &str = "events.out.tfevents.";

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

pub(crate) fn open_append(path: &Path) -> Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| ImpalaError::io("open", path, e))
}

pub(crate) fn csv_writer(file: File) -> csv::Writer<File> {
    csv::WriterBuilder::new().has_headers(false).from_writer(file)
}

pub(crate) fn csv_reader(path: &Path) -> Result<csv::Reader<File>> {
    // Flexible: a partial last row (a crash mid-write) is padded, not an error.
    csv::ReaderBuilder::new().flexible(true).from_path(path).map_err(|e| csv_error("read", path, e))
}

pub(crate) fn csv_error(action: &'static str, path: &Path, e: csv::Error) -> ImpalaError {
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

pub(crate) fn write_row(
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
pub(crate) fn union_header(
    old: &[String],
    row: &BTreeMap<String, serde_json::Value>,
) -> Vec<String> {
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
pub(crate) fn csv_value(v: &serde_json::Value) -> String {
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
    use crate::run::tensorboard::read_scalars;
    use crate::ResultLogger;

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
                if tag == crate::run::tensorboard::ITERATION_TAG {
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
