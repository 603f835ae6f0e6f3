//! `impala tune`: a hyperparameter search for users without Ray, with Ray Tune's dict-form
//! search spaces in an ordinary config file.
//!
//! The config file may hold, in place of any value (top level, inside `model`, inside
//! `env_config`, inside a list), `{grid_search = [a, b]}` (every value; the cartesian product
//! over all grid keys) or `{choice = [a, b, c]}` (one value drawn per trial). The raw file is
//! expanded into one plain config per trial, in Ray Tune's order (`BasicVariantGenerator`):
//! grid keys sorted by their path, the first one varying fastest, the whole grid repeated
//! `--num-samples` times with the choices drawn anew for every trial. Every trial goes through
//! the normal config path (key checks, `--env`/`--seed`/`--set`, validation, the env check)
//! and every invalid one is reported before anything runs.
//!
//! Each trial is a child `impala train` process (this same binary) in its own run folder
//! `<output-dir>/<name>/trial_<NNN>_<params>/`, which holds `trial.json` (the trial's resolved
//! config, the child's config file), `stdout.log`, `stderr.log` and everything `impala train`
//! writes. Trials start in order while their CPUs (`default_resource_request().total_cpus()`)
//! fit in `--cpus`. SIGINT and SIGTERM are forwarded to every running trial, which saves a
//! checkpoint and exits as `impala train` does; trials not started yet are skipped. At the end a
//! table sorted by `--metric` names the best trial and its checkpoint, and
//! `<name>/summary.json` holds the same. See docs/TUNING.md.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::fs::{self, File};
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use impala::checkpoint::{find_checkpoint, write_file_atomically};
use impala::config::{ConfigFormat, ImpalaConfig, ValidatedConfig};
use impala::run::{utc_stamp, CheckpointPolicy, ScoreOrder, BEST_CHECKPOINT_FILE};
use impala::{flatten, read_result_lines, RESULT_FILE};
use serde_json::{json, Value};

use crate::cli::{apply_source, ConfigSource, StopArgs};
use crate::signals::Interrupts;
use impala::one_line;

/// The two search spaces, as Ray Tune writes them in dict form (`{"grid_search": [...]}`;
/// `choice` is `tune.choice` spelled the same way).
const GRID_SEARCH: &str = "grid_search";
const CHOICE: &str = "choice";

/// Ray Tune's other sampling functions: a one-key table with one of these names is almost
/// certainly meant as a search space, so it is refused instead of being passed on as a value.
const UNSUPPORTED_DOMAINS: [&str; 11] = [
    "uniform",
    "quniform",
    "loguniform",
    "qloguniform",
    "randn",
    "qrandn",
    "randint",
    "qrandint",
    "lograndint",
    "qlograndint",
    "sample_from",
];

/// More trials than this is almost certainly a typo in a grid (and would create as many
/// folders); split such a sweep into several experiments.
const MAX_TRIALS: u64 = 10_000;

/// The longest parameter part of a trial folder's name (file systems allow 255 bytes).
const MAX_TAG_CHARS: usize = 80;

/// The resolved config of a trial, in its run folder (the child's config file).
pub(crate) const TRIAL_CONFIG_FILE: &str = impala::run::TRIAL_FILES[0];
/// The experiment's summary: every trial, sorted by the metric, and the best.
pub(crate) const SUMMARY_FILE: &str = "summary.json";
/// How many lines of a failed trial's `stderr.log` are shown.
const STDERR_TAIL_LINES: usize = 10;

/// `impala tune`.
#[derive(Debug, Clone, Args)]
#[command(mut_arg("config", |a| a.required(true).help(
    "Config file (.toml, .yaml, .yml or .json) with RLlib's option names, where any value may be \
     a search space: {grid_search = [a, b]} (every value) or {choice = [a, b]} (one drawn per \
     trial); see docs/TUNING.md"
)))]
pub struct TuneArgs {
    /// The config file with `grid_search`/`choice` values (required), plus --env, --seed and
    /// --set, which apply to every trial after the expansion.
    #[command(flatten)]
    pub source: ConfigSource,
    /// When every trial stops (passed on to each trial's `impala train`).
    #[command(flatten)]
    pub stop: StopArgs,
    /// Repeat the grid this many times, drawing every `choice` anew for each trial (Tune's
    /// `TuneConfig(num_samples=N)`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub num_samples: u64,
    /// The seed of the `choice` draws: the same file, --num-samples and seed give the same
    /// trials.
    #[arg(long, default_value_t = 0)]
    pub search_seed: u64,
    /// The result key that ranks the trials (result.json's names, nested keys joined with `/`,
    /// e.g. `evaluation/episode_return_mean`), read from each trial's last result. Each trial
    /// also keeps its best checkpoint by it.
    #[arg(long, default_value = "episode_return_mean", value_name = "KEY")]
    pub metric: String,
    /// Whether a higher (`max`) or lower (`min`) --metric is better.
    #[arg(long, default_value = "max", value_parser = ["max", "min"])]
    pub mode: String,
    /// The CPUs trials may use at once: a trial needs its config's resource request
    /// (`num_cpus_for_main_process` + aggregation workers + env runners x
    /// `num_cpus_per_env_runner`), and trials start while they fit (default: the cores of this
    /// machine). A trial that alone needs more runs by itself.
    #[arg(long, value_parser = positive_cpus)]
    pub cpus: Option<f64>,
    /// At most this many trials at once, whatever --cpus allows (Tune's
    /// `max_concurrent_trials`).
    #[arg(long, value_name = "N")]
    pub max_concurrent: Option<NonZeroUsize>,
    /// The folder that holds experiment folders.
    #[arg(long, default_value = "impala_results", value_name = "DIR")]
    pub output_dir: PathBuf,
    /// The experiment folder's name (default: `tune_IMPALA_<env>_<UTC date and time>`); it
    /// must be new or empty.
    #[arg(long)]
    pub name: Option<String>,
    /// Print the trials (name, parameters, CPUs) and stop: nothing is run or written.
    #[arg(long)]
    pub dry_run: bool,
}

fn positive_cpus(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("`{s}` is not a positive number of CPUs")),
    }
}

/// What `impala tune` refuses, each saying what is wrong, where, and how to fix it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TuneError {
    /// No config file was given.
    #[error(
        "impala tune needs a config file with `grid_search` or `choice` values, e.g. \
         `impala tune examples/cartpole-tune.toml` (see docs/TUNING.md)"
    )]
    NoConfigFile,
    /// A search space that cannot be expanded.
    #[error("{file}: `{path}` {problem}")]
    BadSearchSpace {
        /// The config file.
        file: PathBuf,
        /// Where the search space is (`lr`, `model.fcnet_hiddens`).
        path: String,
        /// What is wrong with it and how to write it.
        problem: String,
    },
    /// The grid has more trials than [`MAX_TRIALS`].
    #[error(
        "{file}: the search has {count} trials (grid x --num-samples), more than {MAX_TRIALS}; \
         shorten the grid lists or split the search into several experiments"
    )]
    TooManyTrials {
        /// The config file.
        file: PathBuf,
        /// How many trials it would be (saturating).
        count: u64,
    },
    /// Some trials' configs are invalid; nothing was run.
    #[error(
        "{invalid} of {total} trial(s) of {file} are invalid, nothing was run; fix the file \
         (or --set) and run again:\n{}",
        problems.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n")
    )]
    InvalidTrials {
        /// The config file.
        file: PathBuf,
        /// Invalid trials.
        invalid: usize,
        /// All trials.
        total: usize,
        /// `trial names: problem`, one per distinct problem.
        problems: Vec<String>,
    },
    /// `--metric` is no result key.
    #[error("--metric: {reason}")]
    BadMetric {
        /// The run library's explanation (with the nearest key).
        reason: String,
    },
    /// `--name` is not one folder name.
    #[error("--name `{name}`: {reason}")]
    BadName {
        /// The name given.
        name: String,
        /// Why it cannot be a folder name.
        reason: &'static str,
    },
    /// The experiment folder already holds something.
    #[error(
        "the experiment folder {} already exists and is not empty; choose another --name (or \
         --output-dir), or remove it",
        path.display()
    )]
    ExperimentExists {
        /// The folder.
        path: PathBuf,
    },
    /// A file or folder could not be read or written.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// No trial finished.
    #[error(
        "all {total} trial(s) failed; their last stderr lines are above, each trial's \
         stderr.log is in {}",
        experiment.display()
    )]
    AllTrialsFailed {
        /// How many trials ran.
        total: usize,
        /// The experiment folder.
        experiment: PathBuf,
    },
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> TuneError {
    let path = path.to_path_buf();
    move |source| TuneError::Io { action, path, source }
}

// ---------------------------------------------------------------------------------------------
// Search spaces
// ---------------------------------------------------------------------------------------------

/// One step of the path to a value in the config tree.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Segment {
    Key(String),
    Index(usize),
}

/// Where a value is: `model.fcnet_hiddens`, `lr_schedule[1][1]`. Ordered as Tune orders its
/// grid variables (tuples of keys, compared element by element).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default)]
struct ValuePath(Vec<Segment>);

impl ValuePath {
    fn child(&self, segment: Segment) -> ValuePath {
        let mut segments = self.0.clone();
        segments.push(segment);
        ValuePath(segments)
    }

    /// The last key (for short trial names).
    fn last_key(&self) -> String {
        let keys: Vec<String> = self
            .0
            .iter()
            .rev()
            .take_while(|s| matches!(s, Segment::Index(_)))
            .map(|s| match s {
                Segment::Index(i) => format!("{i}"),
                Segment::Key(k) => k.clone(),
            })
            .collect();
        let key = self.0.iter().rev().find_map(|s| match s {
            Segment::Key(k) => Some(k.clone()),
            Segment::Index(_) => None,
        });
        let mut out = key.unwrap_or_default();
        for index in keys.iter().rev() {
            out.push('_');
            out.push_str(index);
        }
        out
    }
}

impl fmt::Display for ValuePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("(the top level of the file)");
        }
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                Segment::Key(k) if i == 0 => f.write_str(k)?,
                Segment::Key(k) => write!(f, ".{k}")?,
                Segment::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// How a search variable is resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Every value, in the cartesian product.
    Grid,
    /// One value drawn per trial.
    Choice,
}

/// A search space found in the file.
#[derive(Debug, Clone, PartialEq)]
struct Variable {
    path: ValuePath,
    kind: Kind,
    values: Vec<Value>,
}

/// One trial before validation: its config tree and the values it got.
#[derive(Debug, Clone, PartialEq)]
struct TrialSpec {
    tree: Value,
    /// The searched values, by path (grid and choice together, in path order).
    params: Vec<(ValuePath, Value)>,
}

/// Reads a config file as a plain tree (JSON values), the way `ImpalaConfig::load` parses it,
/// but without its key and type checks (search spaces are not config values). A file that
/// does not parse, or has no keys, gets `ImpalaConfig::load`'s error, which says where.
fn read_tree(path: &Path) -> anyhow::Result<Value> {
    let format = ConfigFormat::from_path(path)?;
    let text = fs::read(path).ok().and_then(|bytes| String::from_utf8(bytes).ok());
    let parsed: Option<Value> = text.and_then(|text| match format {
        ConfigFormat::Toml => toml::from_str(&text).ok(),
        ConfigFormat::Yaml => serde_norway::from_str(&text).ok(),
        ConfigFormat::Json => serde_json::from_str(&text).ok(),
    });
    match parsed {
        Some(Value::Object(map)) if !map.is_empty() => Ok(Value::Object(map)),
        // Missing, not text, not the format, empty, or not a table: the loader's error says
        // which and where, worded as `impala train` words it.
        _ => match ImpalaConfig::load(path) {
            Err(e) => Err(e.into()),
            Ok(_) => anyhow::bail!("{}: not a table of config keys", path.display()),
        },
    }
}

/// Whether `value` holds a search space anywhere.
fn contains_search_space(value: &Value) -> bool {
    match value {
        Value::Object(map) => {
            map.contains_key(GRID_SEARCH)
                || map.contains_key(CHOICE)
                || map.values().any(contains_search_space)
        }
        Value::Array(items) => items.iter().any(contains_search_space),
        _ => false,
    }
}

/// Every search space in `tree`, sorted by path (Tune's order).
fn find_variables(tree: &Value, file: &Path) -> Result<Vec<Variable>, TuneError> {
    let mut out = Vec::new();
    collect(tree, &ValuePath::default(), file, &mut out)?;
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

fn collect(
    value: &Value,
    path: &ValuePath,
    file: &Path,
    out: &mut Vec<Variable>,
) -> Result<(), TuneError> {
    let bad = |problem: String| TuneError::BadSearchSpace {
        file: file.to_path_buf(),
        path: path.to_string(),
        problem,
    };
    match value {
        Value::Object(map) => {
            let spaces: Vec<&str> =
                [GRID_SEARCH, CHOICE].into_iter().filter(|k| map.contains_key(*k)).collect();
            if let Some(&kind_key) = spaces.first() {
                if map.len() > 1 {
                    let others: Vec<String> = map.keys().map(|k| format!("`{k}`")).collect();
                    return Err(bad(format!(
                        "mixes a search space with other keys ({}): a search space is a table \
                         with exactly one key, `grid_search` or `choice`, e.g. \
                         {{grid_search = [0.001, 0.0005]}}",
                        others.join(", ")
                    )));
                }
                let Some(Value::Array(values)) = map.get(kind_key) else {
                    return Err(bad(format!(
                        "has a `{kind_key}` that is not a list; write the values in a list, \
                         e.g. {{{kind_key} = [0.001, 0.0005]}}"
                    )));
                };
                if values.is_empty() {
                    return Err(bad(format!(
                        "has an empty `{kind_key}` list: it gives no trial; list at least one \
                         value, e.g. {{{kind_key} = [0.001, 0.0005]}}"
                    )));
                }
                if values.iter().any(contains_search_space) {
                    return Err(bad(format!(
                        "has a search space inside its `{kind_key}` values, which impala tune \
                         does not expand; write the combinations out, or search the inner key \
                         on its own"
                    )));
                }
                if path.0.is_empty() {
                    return Err(bad(
                        "is a search space: the file must be a table of config keys, with \
                         search spaces as their values"
                            .into(),
                    ));
                }
                let kind = if kind_key == GRID_SEARCH { Kind::Grid } else { Kind::Choice };
                out.push(Variable { path: path.clone(), kind, values: values.clone() });
                return Ok(());
            }
            if let (1, Some(only)) = (map.len(), map.keys().next()) {
                if UNSUPPORTED_DOMAINS.contains(&only.as_str()) {
                    return Err(bad(format!(
                        "is Ray Tune's `{only}`, which impala tune does not sample; list the \
                         values to try as {{grid_search = [...]}} or {{choice = [...]}}"
                    )));
                }
            }
            for (key, child) in map {
                collect(child, &path.child(Segment::Key(key.clone())), file, out)?;
            }
            Ok(())
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                collect(child, &path.child(Segment::Index(i)), file, out)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Replaces the value at `path` (which [`collect`] found in the same tree).
fn assign(tree: &mut Value, path: &ValuePath, value: Value) -> bool {
    let mut at = tree;
    for segment in &path.0 {
        let next = match (segment, at) {
            (Segment::Key(k), Value::Object(map)) => map.get_mut(k),
            (Segment::Index(i), Value::Array(items)) => items.get_mut(*i),
            _ => None,
        };
        match next {
            Some(v) => at = v,
            None => return false,
        }
    }
    *at = value;
    true
}

/// SplitMix64 (Steele, Lea and Flood 2014): tiny, seedable and the same on every platform and
/// dependency version, so a `--search-seed` gives the same trials for as long as this code
/// does. (Tune's numpy draws cannot be reproduced outside Python anyway.)
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform index below `n` (Lemire's multiply-shift; the bias is below 2^-50 for the
    /// list lengths a config holds).
    fn below(&mut self, n: usize) -> usize {
        let wide = u128::from(self.next_u64()) * n as u128;
        usize::try_from(wide >> 64).unwrap_or(0)
    }
}

/// The trials of `tree`: for each of `num_samples` samples, every grid point (the first grid
/// variable by path varying fastest, as Tune's `_grid_search_generator`), with every choice
/// drawn from one seeded stream in trial order and path order.
fn expand(
    tree: &Value,
    variables: &[Variable],
    num_samples: u64,
    seed: u64,
    file: &Path,
) -> Result<Vec<TrialSpec>, TuneError> {
    let grid: Vec<&Variable> = variables.iter().filter(|v| v.kind == Kind::Grid).collect();
    let choices: Vec<&Variable> = variables.iter().filter(|v| v.kind == Kind::Choice).collect();
    let points = grid.iter().try_fold(1u64, |n, v| n.checked_mul(v.values.len() as u64));
    let count = points.and_then(|p| p.checked_mul(num_samples)).unwrap_or(u64::MAX);
    if count > MAX_TRIALS {
        return Err(TuneError::TooManyTrials { file: file.to_path_buf(), count });
    }
    let points = points.unwrap_or(1);
    let mut rng = SplitMix64(seed);
    let mut trials = Vec::new();
    for _sample in 0..num_samples {
        for point in 0..points {
            let mut trial = tree.clone();
            let mut params = Vec::new();
            let mut rest = point;
            for var in &grid {
                let len = var.values.len() as u64;
                let value = var.values[usize::try_from(rest % len).unwrap_or(0)].clone();
                rest /= len;
                params.push((var.path.clone(), value));
            }
            for var in &choices {
                let value = var.values[rng.below(var.values.len())].clone();
                params.push((var.path.clone(), value));
            }
            params.sort_by(|a, b| a.0.cmp(&b.0));
            for (path, value) in &params {
                if !assign(&mut trial, path, value.clone()) {
                    return Err(TuneError::BadSearchSpace {
                        file: file.to_path_buf(),
                        path: path.to_string(),
                        problem: "could not be replaced by its value (a bug in impala tune; \
                                  please report it with the file)"
                            .into(),
                    });
                }
            }
            trials.push(TrialSpec { tree: trial, params });
        }
    }
    Ok(trials)
}

// ---------------------------------------------------------------------------------------------
// Trial names
// ---------------------------------------------------------------------------------------------

/// A value as a short text: numbers and strings as written, lists joined by `_`.
fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "none".into(),
        Value::Array(items) => items.iter().map(value_text).collect::<Vec<_>>().join("_"),
        other => other.to_string(),
    }
}

/// `trial_<NNN>_<key=value,...>`, as Tune names trials by their parameters (last key of each
/// path, the whole path where two would read the same), reduced to characters every file
/// system and shell takes. The number keeps the names unique and in trial order.
fn trial_name(index: usize, total: usize, params: &[(ValuePath, Value)]) -> String {
    let width = total.saturating_sub(1).to_string().len().max(3);
    let short: Vec<String> = params.iter().map(|(p, _)| p.last_key()).collect();
    let parts: Vec<String> = params
        .iter()
        .zip(&short)
        .map(|((path, value), key)| {
            let key = if short.iter().filter(|k| *k == key).count() > 1 {
                path.to_string()
            } else {
                key.clone()
            };
            format!("{key}={}", value_text(value))
        })
        .collect();
    let mut tag: String = parts
        .join(",")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || "._=,+-".contains(c) { c } else { '_' })
        .collect();
    if tag.len() > MAX_TAG_CHARS {
        tag.truncate(MAX_TAG_CHARS);
    }
    if tag.is_empty() {
        format!("trial_{index:0width$}")
    } else {
        format!("trial_{index:0width$}_{tag}")
    }
}

// ---------------------------------------------------------------------------------------------
// Trials
// ---------------------------------------------------------------------------------------------

/// How a trial ended.
#[derive(Debug, Clone, PartialEq)]
enum Status {
    /// Not started yet.
    Pending,
    /// Its process runs.
    Running,
    /// `impala train` exited 0.
    Ok,
    /// It exited 130 / 143 after SIGINT / SIGTERM, with its final checkpoint saved.
    Interrupted { code: i32 },
    /// It exited otherwise, or could not be started.
    Failed { code: Option<i32>, reason: String, stderr_tail: Vec<String> },
    /// The search was interrupted before it started.
    NotStarted,
}

impl Status {
    fn word(&self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Running => "running",
            Status::Ok => "ok",
            Status::Interrupted { .. } => "interrupted",
            Status::Failed { .. } => "failed",
            Status::NotStarted => "not started",
        }
    }

    /// `ok`, `failed (exit code 1)`, ...
    fn describe(&self) -> String {
        match self {
            Status::Interrupted { code } => format!("interrupted (exit code {code})"),
            Status::Failed { reason, .. } => format!("failed ({reason})"),
            other => other.word().into(),
        }
    }

    fn exit_code(&self) -> Option<i32> {
        match self {
            Status::Ok => Some(0),
            Status::Interrupted { code } => Some(*code),
            Status::Failed { code, .. } => *code,
            _ => None,
        }
    }
}

/// What a trial's run folder says after it ended.
#[derive(Debug, Clone, Default, PartialEq)]
struct Outcome {
    iterations: Option<u64>,
    timesteps: Option<u64>,
    metric: Option<f64>,
    /// The newest checkpoint.
    checkpoint: Option<PathBuf>,
    /// The best checkpoint by the metric (its `best_checkpoint` pointer).
    best_checkpoint: Option<PathBuf>,
    wall_s: Option<f64>,
}

/// A validated trial.
#[derive(Debug)]
struct Trial {
    index: usize,
    name: String,
    params: Vec<(ValuePath, Value)>,
    config: ValidatedConfig,
    cpus: f64,
    dir: PathBuf,
    status: Status,
    outcome: Outcome,
}

impl Trial {
    fn params_json(&self) -> Value {
        Value::Object(self.params.iter().map(|(p, v)| (p.to_string(), v.clone())).collect())
    }

    fn checkpoint(&self) -> Option<&PathBuf> {
        self.outcome.best_checkpoint.as_ref().or(self.outcome.checkpoint.as_ref())
    }

    fn to_json(&self, metric: &str) -> Value {
        let tail = match &self.status {
            Status::Failed { stderr_tail, .. } => json!(stderr_tail),
            _ => Value::Null,
        };
        let mut out = json!({
            "name": self.name,
            "index": self.index,
            // No folder until the trial starts.
            "dir": (!self.dir.as_os_str().is_empty()).then_some(&self.dir),
            "params": self.params_json(),
            "cpus": self.cpus,
            "status": self.status.word(),
            "exit_code": self.status.exit_code(),
            "iterations": self.outcome.iterations,
            "timesteps": self.outcome.timesteps,
            "metric": self.outcome.metric,
            "wall_s": self.outcome.wall_s,
            "checkpoint": self.outcome.checkpoint,
            "best_checkpoint": self.outcome.best_checkpoint,
            "stderr_tail": tail,
        });
        // Also under the metric's own name, as Tune's result tables show it.
        if let Value::Object(map) = &mut out {
            map.entry(metric.to_string()).or_insert(json!(self.outcome.metric));
        }
        out
    }
}

/// Problems of several trials, grouped by message so that a mistake shared by every trial is
/// reported once.
#[derive(Debug, Default)]
struct Problems(BTreeMap<String, Vec<String>>);

impl Problems {
    fn add(&mut self, trial: &str, message: String) {
        self.0.entry(message).or_default().push(trial.to_string());
    }

    fn count(&self) -> usize {
        self.0.values().map(Vec::len).sum()
    }

    fn into_lines(self, total: usize) -> Vec<String> {
        self.0
            .into_iter()
            .map(|(message, trials)| {
                let who = if trials.len() == total && total > 1 {
                    format!("all {total} trials")
                } else if trials.len() > 3 {
                    format!("{} and {} more", trials[..3].join(", "), trials.len() - 3)
                } else {
                    trials.join(", ")
                };
                format!("{who}: {message}")
            })
            .collect()
    }
}

/// The key an override (`--set KEY=VALUE`, or `--env`) sets, as a search path would read.
fn override_key(text: &str) -> String {
    let lhs = text.split_once('=').map_or(text, |(l, _)| l).trim();
    match lhs.split_once('.') {
        Some((head, rest)) if impala::config::Group::from_name(head).is_some() => rest.into(),
        _ => lhs.into(),
    }
}

/// The searched values that can change what `check_environment` sees: the env, its config,
/// its backend and devices. Trials that differ only in other values share one check, so a
/// grid over `lr` with a Python env starts one env worker for the check, not one per trial.
fn affects_environment(path: &ValuePath) -> bool {
    match path.0.first() {
        Some(Segment::Key(k)) => k.starts_with("env") || k.contains("gpu") || k.contains("learner"),
        _ => true,
    }
}

/// Validates every trial (key checks, `--env`/`--seed`/`--set`, validation, the env check)
/// and names it; every problem of every trial is collected before returning.
fn validate_trials(
    specs: Vec<TrialSpec>,
    source: &ConfigSource,
    file: &Path,
) -> anyhow::Result<(Vec<Trial>, BTreeSet<String>)> {
    let total = specs.len();
    let mut warnings = BTreeSet::new();
    let mut problems = Problems::default();
    let mut trials = Vec::new();
    let mut checked: BTreeMap<String, Result<Vec<String>, String>> = BTreeMap::new();
    for (index, spec) in specs.into_iter().enumerate() {
        let name = trial_name(index, total, &spec.params);
        let Value::Object(map) = spec.tree else {
            anyhow::bail!("{}: not a table of config keys", file.display());
        };
        let dict: BTreeMap<String, Value> = map.into_iter().collect();
        // `from_dict` names its origin `set()`; here the origin is the trial of the file.
        let loaded = ImpalaConfig::from_dict(dict)
            .map_err(|e| e.to_string().replace("set(): ", "").replace("set()", "the config"));
        let validated = loaded.and_then(|loaded| {
            let found = loaded.warnings.iter().map(ToString::to_string).collect();
            apply_source(loaded.config, source, found).map_err(|e| one_line(e.as_ref()))
        });
        let (config, found) = match validated {
            Ok(ok) => ok,
            Err(message) => {
                problems.add(&name, message);
                continue;
            }
        };
        warnings.extend(found);
        let mut key_tree = serde_json::to_value(config.config()).unwrap_or(Value::Null);
        for (path, _) in spec.params.iter().filter(|(p, _)| !affects_environment(p)) {
            assign(&mut key_tree, path, Value::Null);
        }
        let check = checked
            .entry(key_tree.to_string())
            .or_insert_with(|| impala::check_environment(&config).map_err(|e| one_line(&e)));
        match check {
            Ok(found) => warnings.extend(found.iter().cloned()),
            Err(message) => {
                problems.add(&name, message.clone());
                continue;
            }
        }
        let cpus = config.default_resource_request().total_cpus();
        trials.push(Trial {
            index,
            name,
            params: spec.params,
            config,
            cpus,
            dir: PathBuf::new(),
            status: Status::Pending,
            outcome: Outcome::default(),
        });
    }
    if problems.count() > 0 {
        return Err(TuneError::InvalidTrials {
            file: file.to_path_buf(),
            invalid: problems.count(),
            total,
            problems: problems.into_lines(total),
        }
        .into());
    }
    Ok((trials, warnings))
}

// ---------------------------------------------------------------------------------------------
// The experiment folder and the trials' files
// ---------------------------------------------------------------------------------------------

/// Creates the experiment folder: `--name` (new or empty), else a new
/// `tune_IMPALA_<env>_<stamp>` (`_2`, ... when two start in the same microsecond).
fn claim_experiment(args: &TuneArgs, trials: &[Trial]) -> Result<PathBuf, TuneError> {
    fs::create_dir_all(&args.output_dir)
        .map_err(io_error("create the output folder", &args.output_dir))?;
    if let Some(name) = &args.name {
        check_name(name)?;
        let path = args.output_dir.join(name);
        return match fs::create_dir(&path) {
            Ok(()) => Ok(path),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let empty = fs::read_dir(&path)
                    .map_err(io_error("read the experiment folder", &path))?
                    .next()
                    .is_none();
                if empty {
                    Ok(path)
                } else {
                    Err(TuneError::ExperimentExists { path })
                }
            }
            Err(e) => Err(TuneError::Io { action: "create", path, source: e }),
        };
    }
    let envs: BTreeSet<&str> = trials.iter().map(|t| t.config.env.as_str()).collect();
    let env = match (envs.len(), envs.first()) {
        (1, Some(env)) => format!("_{env}"),
        _ => String::new(),
    };
    let env: String = env.chars().map(|c| if matches!(c, '/' | '\\') { '_' } else { c }).collect();
    let base = format!("tune_IMPALA{env}_{}", utc_stamp(std::time::SystemTime::now()));
    let mut n = 1u32;
    loop {
        let name = if n == 1 { base.clone() } else { format!("{base}_{n}") };
        let path = args.output_dir.join(name);
        match fs::create_dir(&path) {
            Ok(()) => return Ok(path),
            // Another search started in the same microsecond: the next suffix.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(TuneError::ExperimentExists { path })
            }
            Err(e) => return Err(TuneError::Io { action: "create", path, source: e }),
        }
    }
}

fn check_name(name: &str) -> Result<(), TuneError> {
    let bad = |reason| TuneError::BadName { name: name.into(), reason };
    if name.is_empty() || name == "." || name == ".." {
        return Err(bad("give a folder name, e.g. --name lr-sweep"));
    }
    if name.contains(['/', '\\']) {
        return Err(bad("it must be one folder name; put parent folders in --output-dir"));
    }
    Ok(())
}

/// Writes the trial's resolved config as JSON, and reads it back: a value JSON cannot hold
/// (a non-finite number) would change the trial, so the file must load to the same config.
fn write_trial_config(config: &ImpalaConfig, dir: &Path) -> anyhow::Result<PathBuf> {
    let path = dir.join(TRIAL_CONFIG_FILE);
    config.save(&path)?;
    let back = ImpalaConfig::load(&path)?;
    if back.config != *config {
        anyhow::bail!(
            "{}: the trial's config does not survive being written as JSON (a non-finite \
             number?); write such values as \"none\" or a finite number",
            path.display()
        );
    }
    Ok(path)
}

/// The `--stop-*` options as `impala train` arguments.
fn stop_arguments(stop: &StopArgs) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(r) = stop.stop_reward {
        out.push(format!("--stop-reward={r}"));
    }
    if let Some(t) = stop.stop_timesteps {
        out.push(format!("--stop-timesteps={t}"));
    }
    if let Some(i) = stop.stop_iters {
        out.push(format!("--stop-iters={i}"));
    }
    if let Some(s) = stop.stop_time {
        out.push(format!("--stop-time={s}"));
    }
    out
}

/// What the trial's run folder holds after the trial: its last result and checkpoints.
fn read_outcome(dir: &Path, metric: &str) -> Result<Outcome, String> {
    let lines = read_result_lines(&dir.join(RESULT_FILE)).map_err(|e| e.to_string())?;
    let mut outcome = Outcome::default();
    if let Some((_, last)) = lines.last() {
        let flat = flatten(last);
        let number = |key: &str| flat.get(key).and_then(Value::as_u64);
        outcome.iterations = number("training_iteration");
        outcome.timesteps = number("timesteps_total").or_else(|| number("num_env_steps_sampled"));
        outcome.metric = flat.get(metric).and_then(Value::as_f64).filter(|m| m.is_finite());
    }
    outcome.checkpoint = find_checkpoint(dir).ok();
    outcome.best_checkpoint = fs::read_to_string(dir.join(BEST_CHECKPOINT_FILE))
        .ok()
        .and_then(|text| text.lines().next().map(|l| dir.join(l.trim())))
        .filter(|p| p.is_dir());
    Ok(outcome)
}

/// The last non-empty lines of a trial's stderr.log.
fn tail(path: &Path, n: usize) -> Vec<String> {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].iter().map(|l| (*l).to_string()).collect()
}

// ---------------------------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------------------------

/// A trial's process.
#[derive(Debug)]
struct Running {
    trial: usize,
    child: Child,
    started: Instant,
}

/// The running trials. Dropped with trials still running (an error in this process), it stops
/// them as a signal would (SIGTERM: they save and exit) and waits, so no trial outlives the
/// search unnoticed.
#[derive(Debug, Default)]
struct Children(Vec<Running>);

impl Drop for Children {
    fn drop(&mut self) {
        for running in &mut self.0 {
            let _ = send_signal(&mut running.child, Forward::Terminate);
        }
        for running in &mut self.0 {
            let _ = running.child.wait();
        }
    }
}

/// The signal passed on to the trials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Forward {
    Interrupt,
    Terminate,
}

/// Sends SIGINT / SIGTERM to a trial (`impala train` then finishes its iteration, saves a
/// checkpoint and exits 130 / 143).
fn send_signal(child: &mut Child, signal: Forward) -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use rustix::process::{kill_process, Pid, Signal};
        let pid = i32::try_from(child.id())
            .ok()
            .and_then(Pid::from_raw)
            .context("a trial's process id is out of range")?;
        let signal = match signal {
            Forward::Interrupt => Signal::INT,
            Forward::Terminate => Signal::TERM,
        };
        kill_process(pid, signal).context("cannot signal a trial")?;
    }
    #[cfg(not(unix))]
    {
        let _ = signal;
        child.kill().context("cannot stop a trial")?;
    }
    Ok(())
}

/// Starts `impala train trial.json --run-dir DIR ...` for `trial`, its output in the folder.
fn spawn_trial(
    exe: &Path,
    trial: &Trial,
    config_file: &Path,
    args: &TuneArgs,
) -> anyhow::Result<Child> {
    let file = |name: &str| {
        let path = trial.dir.join(name);
        File::create(&path).map_err(io_error("create", &path))
    };
    let mut command = Command::new(exe);
    command
        .arg("train")
        .arg(config_file)
        .arg("--run-dir")
        .arg(&trial.dir)
        .arg(format!("--checkpoint-score-attribute={}", args.metric))
        .arg(format!("--checkpoint-score-order={}", args.mode))
        .args(stop_arguments(&args.stop))
        .stdin(Stdio::null())
        .stdout(file(impala::run::TRIAL_FILES[1])?)
        .stderr(file(impala::run::TRIAL_FILES[2])?);
    // Its own process group: a Ctrl-C in the terminal reaches this process only, which
    // passes it on exactly once (a second SIGINT would tell a trial to hurry its save).
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    command.spawn().with_context(|| format!("cannot start {} for {}", exe.display(), trial.name))
}

/// The status of a trial whose process exited.
fn exit_status(status: ExitStatus, stderr: &Path) -> Status {
    match status.code() {
        Some(0) => Status::Ok,
        Some(code @ (130 | 143)) => Status::Interrupted { code },
        code => {
            #[cfg(unix)]
            let signal = std::os::unix::process::ExitStatusExt::signal(&status);
            #[cfg(not(unix))]
            let signal: Option<i32> = None;
            let reason = match (code, signal) {
                (Some(c), _) => format!("exit code {c}"),
                (None, Some(s)) => format!("killed by signal {s}"),
                (None, None) => "no exit code".into(),
            };
            Status::Failed { code, reason, stderr_tail: tail(stderr, STDERR_TAIL_LINES) }
        }
    }
}

/// The search's settings and trials, with where it writes.
struct Experiment<'a> {
    args: &'a TuneArgs,
    file: PathBuf,
    dir: PathBuf,
    budget: f64,
    trials: Vec<Trial>,
    order: ScoreOrder,
    started: Instant,
}

impl Experiment<'_> {
    /// Runs every trial, as many at once as fit in the budget, until all ended or a signal
    /// came (then the running ones get it and are waited for; the rest do not start).
    fn run(&mut self, interrupts: &Interrupts) -> anyhow::Result<()> {
        let exe = std::env::current_exe().context("cannot find the impala binary to run trials")?;
        let mut pending: VecDeque<usize> = (0..self.trials.len()).collect();
        let mut children = Children::default();
        let mut forwarded = false;
        let total = self.trials.len();
        let mut done = 0usize;
        loop {
            if let (Some(signal), false) = (interrupts.received(), forwarded) {
                let forward = if signal == signal_hook::consts::SIGTERM {
                    Forward::Terminate
                } else {
                    Forward::Interrupt
                };
                for running in &mut children.0 {
                    if let Err(e) = send_signal(&mut running.child, forward) {
                        eprintln!(
                            "warning: {}: {}",
                            self.trials[running.trial].name,
                            one_line(e.as_ref())
                        );
                    }
                }
                for i in pending.drain(..) {
                    self.trials[i].status = Status::NotStarted;
                }
                forwarded = true;
                println!(
                    "waiting for {} running trial(s) to save their checkpoints",
                    children.0.len()
                );
            }
            // Reap the trials that ended.
            let mut i = 0;
            while i < children.0.len() {
                let ended = children.0[i].child.try_wait().context("cannot wait for a trial")?;
                let Some(status) = ended else {
                    i += 1;
                    continue;
                };
                let running = children.0.swap_remove(i);
                done += 1;
                self.finish(running, status, done, total)?;
            }
            // Start the next trials while they fit.
            while let Some(&next) = pending.front() {
                let used: f64 = children.0.iter().map(|r| self.trials[r.trial].cpus).sum();
                let cap = self.args.max_concurrent.map_or(usize::MAX, NonZeroUsize::get);
                let fits = used + self.trials[next].cpus <= self.budget + 1e-9;
                if !children.0.is_empty() && (!fits || children.0.len() >= cap) {
                    break;
                }
                pending.pop_front();
                match self.start(&exe, next) {
                    Ok(child) => {
                        self.trials[next].status = Status::Running;
                        children.0.push(Running { trial: next, child, started: Instant::now() });
                        let trial = &self.trials[next];
                        println!(
                            "[{}/{total}] {} started ({} CPUs; {} running)",
                            next + 1,
                            trial.name,
                            trial.cpus,
                            children.0.len()
                        );
                    }
                    Err(e) => {
                        done += 1;
                        let message = one_line(e.as_ref());
                        let name = &self.trials[next].name;
                        println!("[{}/{total}] {name} could not start: {message}", next + 1);
                        self.trials[next].status =
                            Status::Failed { code: None, reason: message, stderr_tail: Vec::new() };
                    }
                }
                self.write_summary()?;
            }
            if children.0.is_empty() && pending.is_empty() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Creates the trial's folder with its config and starts it.
    fn start(&mut self, exe: &Path, index: usize) -> anyhow::Result<Child> {
        let trial = &mut self.trials[index];
        trial.dir = self.dir.join(&trial.name);
        fs::create_dir(&trial.dir).map_err(io_error("create the trial folder", &trial.dir))?;
        let config_file = write_trial_config(trial.config.config(), &trial.dir)?;
        spawn_trial(exe, trial, &config_file, self.args)
    }

    /// Records how a trial ended and prints it (with the end of its stderr when it failed).
    fn finish(
        &mut self,
        running: Running,
        status: ExitStatus,
        done: usize,
        total: usize,
    ) -> anyhow::Result<()> {
        let metric = &self.args.metric;
        let trial = &mut self.trials[running.trial];
        trial.status = exit_status(status, &trial.dir.join("stderr.log"));
        match read_outcome(&trial.dir, metric) {
            Ok(outcome) => trial.outcome = outcome,
            Err(e) => eprintln!("warning: {}: cannot read its results: {e}", trial.name),
        }
        trial.outcome.wall_s = Some(running.started.elapsed().as_secs_f64());
        let results = match (trial.outcome.iterations, trial.outcome.metric) {
            (Some(i), Some(m)) => format!("{i} iteration(s), {metric} {m:.2}"),
            (Some(i), None) => format!("{i} iteration(s), no {metric}"),
            (None, _) => "no results".into(),
        };
        println!(
            "[{done}/{total} done] {} {} after {:.1}s: {results}",
            trial.name,
            trial.status.describe(),
            running.started.elapsed().as_secs_f64(),
        );
        if let Status::Failed { stderr_tail, .. } = &trial.status {
            println!("  the last lines of {}:", trial.dir.join("stderr.log").display());
            for line in stderr_tail {
                println!("  | {line}");
            }
        }
        self.write_summary()
    }

    /// The trials sorted by the metric (better first; trials without it last, in trial order).
    fn ranked(&self) -> Vec<&Trial> {
        let mut ranked: Vec<&Trial> = self.trials.iter().collect();
        ranked.sort_by(|a, b| match (a.outcome.metric, b.outcome.metric) {
            (Some(x), Some(y)) => {
                let by = match self.order {
                    ScoreOrder::Max => y.total_cmp(&x),
                    ScoreOrder::Min => x.total_cmp(&y),
                };
                by.then(a.index.cmp(&b.index))
            }
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => a.index.cmp(&b.index),
        });
        ranked
    }

    /// The best trial: the first by the metric that did not fail.
    fn best(&self) -> Option<&Trial> {
        self.ranked().into_iter().find(|t| {
            t.outcome.metric.is_some()
                && matches!(t.status, Status::Ok | Status::Interrupted { .. })
        })
    }

    fn summary_json(&self) -> Value {
        let metric = &self.args.metric;
        let best = self.best().map(|t| {
            json!({
                "name": t.name,
                "dir": t.dir,
                "metric": t.outcome.metric,
                "checkpoint": t.checkpoint(),
                "params": t.params_json(),
            })
        });
        json!({
            "experiment": self.dir,
            "config": self.file,
            "metric": metric,
            "mode": self.args.mode,
            "num_samples": self.args.num_samples,
            "search_seed": self.args.search_seed,
            "cpus": self.budget,
            "stop": stop_arguments(&self.args.stop),
            "num_trials": self.trials.len(),
            "wall_s": self.started.elapsed().as_secs_f64(),
            "trials": self.ranked().iter().map(|t| t.to_json(metric)).collect::<Vec<_>>(),
            "best": best,
        })
    }

    /// Rewrites summary.json (atomically: a reader never sees half of it), after every change,
    /// so a search that is killed still leaves a record of its trials.
    fn write_summary(&self) -> anyhow::Result<()> {
        let path = self.dir.join(SUMMARY_FILE);
        let text = serde_json::to_string_pretty(&self.summary_json())?;
        write_file_atomically(&path, text.as_bytes())?;
        Ok(())
    }

    /// The table of every trial, best first.
    fn table(&self) -> String {
        let metric = &self.args.metric;
        let params: Vec<String> = self
            .trials
            .first()
            .map(|t| t.params.iter().map(|(p, _)| p.to_string()).collect())
            .unwrap_or_default();
        let mut rows = vec![{
            let mut head = vec!["trial".to_string()];
            head.extend(params.iter().cloned());
            head.extend(["iter", "timesteps", metric.as_str(), "status"].map(String::from));
            head
        }];
        for t in self.ranked() {
            let mut row = vec![t.name.clone()];
            row.extend(t.params.iter().map(|(_, v)| compact(v)));
            row.push(t.outcome.iterations.map_or_else(|| "-".into(), |i| i.to_string()));
            row.push(t.outcome.timesteps.map_or_else(|| "-".into(), |s| s.to_string()));
            row.push(t.outcome.metric.map_or_else(|| "-".into(), |m| format!("{m:.3}")));
            row.push(t.status.describe());
            rows.push(row);
        }
        let columns = rows[0].len();
        let widths: Vec<usize> = (0..columns)
            .map(|c| rows.iter().map(|r| r.get(c).map_or(0, |s| s.chars().count())).max())
            .map(|w| w.unwrap_or(0))
            .collect();
        let mut out = String::new();
        for row in &rows {
            let cells: Vec<String> =
                row.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
            out.push_str(cells.join("  ").trim_end());
            out.push('\n');
        }
        out
    }
}

/// A value as compact JSON (strings unquoted).
fn compact(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `impala tune`.
pub(crate) fn tune(args: &TuneArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let file = args.source.config.clone().ok_or(TuneError::NoConfigFile)?;
    let order: ScoreOrder = args.mode.parse().map_err(|reason| TuneError::BadMetric { reason })?;
    let policy = CheckpointPolicy {
        score_attribute: args.metric.clone(),
        score_order: order,
        ..CheckpointPolicy::default()
    };
    policy.check().map_err(|e| TuneError::BadMetric { reason: e.to_string() })?;
    if let Some(name) = &args.name {
        check_name(name)?;
    }

    // The search: raw tree -> search spaces -> one tree per trial -> validated configs.
    let tree = read_tree(&file)?;
    let variables = find_variables(&tree, &file)?;
    let specs = expand(&tree, &variables, args.num_samples, args.search_seed, &file)?;
    let (trials, mut warnings) = validate_trials(specs, &args.source, &file)?;
    if variables.is_empty() {
        warnings.insert(format!(
            "{} has no `grid_search` or `choice` value: every trial has the same config",
            file.display()
        ));
    }
    let searched: BTreeSet<String> = variables.iter().map(|v| v.path.to_string()).collect();
    let overridden = args.source.overrides.iter().map(|o| override_key(o));
    let overridden = overridden.chain(args.source.env.as_ref().map(|_| "env".to_string()));
    for key in overridden.filter(|k| searched.contains(k)) {
        warnings.insert(format!(
            "`{key}` is searched in {} but set on the command line too: the command line wins, \
             so every trial has the same `{key}`",
            file.display()
        ));
    }
    let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get) as f64;
    let budget = args.cpus.unwrap_or(cores);
    if budget > cores {
        warnings.insert(format!(
            "--cpus {budget} is more than this machine's {cores} cores: trials will share cores"
        ));
    }
    let too_big: Vec<&Trial> = trials.iter().filter(|t| t.cpus > budget + 1e-9).collect();
    if let Some(first) = too_big.first() {
        let most = too_big.iter().map(|t| t.cpus).fold(0.0, f64::max);
        let who = match too_big.len() {
            1 => first.name.clone(),
            n => format!("{n} trials (e.g. {})", first.name),
        };
        warnings.insert(format!(
            "{who} need(s) up to {most} CPUs (the config's resource request), more than --cpus \
             {budget}: each such trial runs on its own, with no other trial beside it; raise \
             --cpus or lower num_env_runners to run trials side by side"
        ));
    }
    for w in &warnings {
        eprintln!("warning: {w}");
    }

    let mut experiment = Experiment {
        args,
        file: file.clone(),
        dir: PathBuf::new(),
        budget,
        trials,
        order,
        started,
    };
    let at_once = at_once(&experiment.trials, budget, args.max_concurrent);
    if args.dry_run {
        println!(
            "{} trial(s) of {} (dry run: nothing is run or written); at most {at_once} at once \
             in {budget} CPUs",
            experiment.trials.len(),
            file.display()
        );
        for t in &experiment.trials {
            let params: Vec<String> =
                t.params.iter().map(|(p, v)| format!("{p}={}", compact(v))).collect();
            println!("{}  {}  ({} CPUs)", t.name, params.join(" "), t.cpus);
        }
        return Ok(ExitCode::SUCCESS);
    }

    // From here on SIGINT/SIGTERM go to the trials instead of ending this process.
    let interrupts = Interrupts::install().context("cannot listen for SIGINT and SIGTERM")?;
    experiment.dir = claim_experiment(args, &experiment.trials)?;
    println!(
        "tune: {} trial(s) of {} in {}, at most {at_once} at once in {budget} CPUs; ranked by \
         {} ({})",
        experiment.trials.len(),
        file.display(),
        experiment.dir.display(),
        args.metric,
        args.mode
    );
    experiment.write_summary()?;
    experiment.run(&interrupts)?;
    experiment.write_summary()?;

    print!("\n{}", experiment.table());
    match experiment.best() {
        Some(best) => println!(
            "best trial: {} ({} {}); checkpoint: {}",
            best.name,
            args.metric,
            best.outcome.metric.map_or_else(|| "-".into(), |m| m.to_string()),
            best.checkpoint().map_or_else(|| "none".into(), |c| c.display().to_string())
        ),
        None => println!("best trial: none (no trial finished with a {} result)", args.metric),
    }
    println!("summary: {}", experiment.dir.join(SUMMARY_FILE).display());
    if let Some(code) = interrupts.exit_code() {
        return Ok(code);
    }
    let finished = experiment.trials.iter().any(|t| !matches!(t.status, Status::Failed { .. }));
    if !finished {
        return Err(TuneError::AllTrialsFailed {
            total: experiment.trials.len(),
            experiment: experiment.dir.clone(),
        }
        .into());
    }
    Ok(ExitCode::SUCCESS)
}

/// How many of the first trials run at once (for the header line): trials start in order
/// while their CPUs fit.
fn at_once(trials: &[Trial], budget: f64, cap: Option<NonZeroUsize>) -> usize {
    let cap = cap.map_or(usize::MAX, NonZeroUsize::get);
    let mut used = 0.0;
    let mut n = 0;
    for t in trials {
        if n > 0 && (used + t.cpus > budget + 1e-9 || n >= cap) {
            break;
        }
        used += t.cpus;
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn variables(tree: &Value) -> Result<Vec<Variable>, TuneError> {
        find_variables(tree, Path::new("c.toml"))
    }

    fn names(specs: &[TrialSpec]) -> Vec<String> {
        specs.iter().enumerate().map(|(i, s)| trial_name(i, specs.len(), &s.params)).collect()
    }

    #[test]
    fn the_first_grid_key_by_path_varies_fastest_as_in_tune() -> anyhow::Result<()> {
        // Tune sorts grid variables by path and increments the first one first
        // (ray/tune/search/variant_generator.py, _grid_search_generator).
        let tree = json!({
            "lr": {"grid_search": [0.1, 0.2]},
            "entropy_coeff": {"grid_search": [0, 1, 2]},
            "model": {"fcnet_hiddens": [32]},
        });
        let vars = variables(&tree)?;
        let specs = expand(&tree, &vars, 1, 0, Path::new("c.toml"))?;
        let got: Vec<(Value, Value)> =
            specs.iter().map(|s| (s.tree["entropy_coeff"].clone(), s.tree["lr"].clone())).collect();
        let want: Vec<(Value, Value)> =
            [(0, 0.1), (1, 0.1), (2, 0.1), (0, 0.2), (1, 0.2), (2, 0.2)]
                .iter()
                .map(|(e, l)| (json!(e), json!(l)))
                .collect();
        assert_eq!(got, want);
        assert_eq!(names(&specs)[4], "trial_004_entropy_coeff=1,lr=0.2");
        Ok(())
    }

    #[test]
    fn num_samples_repeats_the_grid_and_redraws_choices_reproducibly() -> anyhow::Result<()> {
        let tree = json!({
            "lr": {"grid_search": [0.1, 0.2]},
            "model": {"fcnet_hiddens": {"choice": [[16], [32], [64], [128]]}},
        });
        let vars = variables(&tree)?;
        let a = expand(&tree, &vars, 3, 7, Path::new("c.toml"))?;
        let b = expand(&tree, &vars, 3, 7, Path::new("c.toml"))?;
        let c = expand(&tree, &vars, 3, 8, Path::new("c.toml"))?;
        assert_eq!(a.len(), 6);
        assert_eq!(a, b);
        assert_ne!(a, c);
        let lrs: Vec<&Value> = a.iter().map(|s| &s.tree["lr"]).collect();
        assert_eq!(
            lrs,
            [&json!(0.1), &json!(0.2), &json!(0.1), &json!(0.2), &json!(0.1), &json!(0.2)]
        );
        assert!(a.iter().all(|s| s.params.len() == 2));
        Ok(())
    }

    #[test]
    fn search_spaces_inside_lists_and_env_config_are_found() -> anyhow::Result<()> {
        let tree = json!({
            "lr_schedule": [[0, {"grid_search": [1, 2]}]],
            "env_config": {"size": {"choice": [3]}},
        });
        let vars = variables(&tree)?;
        let paths: Vec<String> = vars.iter().map(|v| v.path.to_string()).collect();
        assert_eq!(paths, ["env_config.size", "lr_schedule[0][1]"]);
        let specs = expand(&tree, &vars, 1, 0, Path::new("c.toml"))?;
        assert_eq!(specs[1].tree["lr_schedule"], json!([[0, 2]]));
        assert_eq!(names(&specs)[1], "trial_001_size=3,lr_schedule_0_1=2");
        Ok(())
    }

    #[test]
    fn bad_search_spaces_name_their_key() -> Result<(), String> {
        let cases = [
            (json!({"lr": {"grid_search": []}}), "`lr` has an empty `grid_search`"),
            (json!({"lr": {"grid_search": [1], "x": 2}}), "`lr` mixes a search space"),
            (json!({"lr": {"choice": 3}}), "`lr` has a `choice` that is not a list"),
            (json!({"model": {"a": {"uniform": [0, 1]}}}), "`model.a` is Ray Tune's `uniform`"),
            (json!({"lr": {"grid_search": [{"choice": [1]}]}}), "search space inside"),
        ];
        for (tree, want) in cases {
            match variables(&tree) {
                Err(e) => assert!(e.to_string().contains(want), "`{e}` lacks `{want}`"),
                Ok(v) => return Err(format!("{tree} gave {v:?} instead of an error")),
            }
        }
        Ok(())
    }

    #[test]
    fn trial_names_are_safe_folder_names() {
        let params = vec![
            (ValuePath(vec![Segment::Key("env".into())]), json!("ALE/Pong v5")),
            (
                ValuePath(vec![Segment::Key("model".into()), Segment::Key("fcnet_hiddens".into())]),
                json!([64, 64]),
            ),
        ];
        assert_eq!(trial_name(7, 1200, &params), "trial_0007_env=ALE_Pong_v5,fcnet_hiddens=64_64");
        assert_eq!(trial_name(0, 1, &[]), "trial_000");
    }

    #[test]
    fn the_seeded_stream_is_fixed() {
        // SplitMix64's published first output for seed 0 (Vigna's splitmix64.c).
        assert_eq!(SplitMix64(0).next_u64(), 0xE220_A839_7B1D_CDAF);
        let mut rng = SplitMix64(1);
        assert!((0..1000).all(|_| rng.below(3) < 3));
    }
}
