//! The trials of a search: each validated before any runs (key checks, the overrides,
//! validation, the env check; every problem of every trial reported at once), then run as a
//! child `impala train` in its own folder, and what its folder says when it ended.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use impala::checkpoint::find_checkpoint;
use impala::config::{ImpalaConfig, ValidatedConfig};
use impala::run::CheckpointPolicy;
use impala::{one_line, ConfigSource, ImpalaError, RESULT_FILE};
use serde_json::{json, Value};

use crate::search::{affects_environment, assign, trial_name, TrialSpec, ValuePath};
use crate::{Result, TuneError};

/// How many lines of a failed trial's `stderr.log` are kept.
const STDERR_TAIL_LINES: usize = 10;

/// How a trial ended.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Status {
    /// Not started yet.
    Pending,
    /// Its process runs.
    Running,
    /// `impala train` exited 0.
    Ok,
    /// It exited 130 / 143 after SIGINT / SIGTERM, with its final checkpoint saved.
    Interrupted {
        /// The exit code.
        code: i32,
    },
    /// It exited otherwise, or could not be started.
    Failed {
        /// The exit code, if it exited.
        code: Option<i32>,
        /// `exit code 1`, `killed by signal 9`, or why it could not start.
        reason: String,
        /// The last lines of its `stderr.log`.
        stderr_tail: Vec<String>,
    },
    /// The search was interrupted before it started.
    NotStarted,
}

impl Status {
    /// `pending`, `running`, `ok`, `interrupted`, `failed` or `not started`.
    pub fn word(&self) -> &'static str {
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
    pub fn describe(&self) -> String {
        match self {
            Status::Interrupted { code } => format!("interrupted (exit code {code})"),
            Status::Failed { reason, .. } => format!("failed ({reason})"),
            other => other.word().into(),
        }
    }

    /// Its exit code, once it exited.
    pub fn exit_code(&self) -> Option<i32> {
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
pub struct Outcome {
    /// Its last result's `training_iteration`.
    pub iterations: Option<u64>,
    /// Its last result's `timesteps_total`.
    pub timesteps: Option<u64>,
    /// Its last result's metric (finite).
    pub metric: Option<f64>,
    /// The newest checkpoint.
    pub checkpoint: Option<PathBuf>,
    /// The best checkpoint by the metric (its `best_checkpoint` pointer).
    pub best_checkpoint: Option<PathBuf>,
    /// Seconds its process ran.
    pub wall_s: Option<f64>,
}

/// A validated trial.
#[derive(Debug)]
pub struct Trial {
    pub(crate) index: usize,
    pub(crate) name: String,
    pub(crate) params: Vec<(ValuePath, Value)>,
    pub(crate) config: ValidatedConfig,
    pub(crate) cpus: f64,
    pub(crate) dir: PathBuf,
    pub(crate) status: Status,
    pub(crate) outcome: Outcome,
}

impl Trial {
    /// `trial_<NNN>_<key=value,...>`: its folder's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The searched values it got, by path (`lr`, `model.fcnet_hiddens`).
    pub fn params(&self) -> &[(ValuePath, Value)] {
        &self.params
    }

    /// Its resolved config.
    pub fn config(&self) -> &ValidatedConfig {
        &self.config
    }

    /// The CPUs it needs: its config's resource request.
    pub fn cpus(&self) -> f64 {
        self.cpus
    }

    /// How it ended (or that it is pending or running).
    pub fn status(&self) -> &Status {
        &self.status
    }

    /// What its run folder says, once it ended.
    pub fn outcome(&self) -> &Outcome {
        &self.outcome
    }

    /// `name  lr=0.001 model.fcnet_hiddens=[16]  (2 CPUs)`: the trial as a dry run lists it.
    pub fn describe(&self) -> String {
        let params: Vec<String> =
            self.params.iter().map(|(p, v)| format!("{p}={}", compact(v))).collect();
        format!("{}  {}  ({} CPUs)", self.name, params.join(" "), self.cpus)
    }

    pub(crate) fn params_json(&self) -> Value {
        Value::Object(self.params.iter().map(|(p, v)| (p.to_string(), v.clone())).collect())
    }

    /// Its best checkpoint by the metric, else its newest.
    pub fn checkpoint(&self) -> Option<&PathBuf> {
        self.outcome.best_checkpoint.as_ref().or(self.outcome.checkpoint.as_ref())
    }

    pub(crate) fn to_json(&self, metric: &str) -> Value {
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

/// Validates every trial (key checks, the overrides, validation, the env check) and names it;
/// every problem of every trial is collected before returning.
pub(crate) fn validate_trials(
    specs: Vec<TrialSpec>,
    source: &ConfigSource,
    file: &Path,
) -> Result<(Vec<Trial>, BTreeSet<String>)> {
    let total = specs.len();
    let mut warnings = BTreeSet::new();
    let mut problems = Problems::default();
    let mut trials = Vec::new();
    let mut checked: BTreeMap<String, std::result::Result<Vec<String>, String>> = BTreeMap::new();
    for (index, spec) in specs.into_iter().enumerate() {
        let name = trial_name(index, total, &spec.params);
        let Value::Object(map) = spec.tree else {
            return Err(TuneError::NotATable { file: file.to_path_buf() });
        };
        let dict: BTreeMap<String, Value> = map.into_iter().collect();
        // `from_dict` names its origin `set()`; here the origin is the trial of the file.
        let loaded = ImpalaConfig::from_dict(dict)
            .map_err(|e| e.to_string().replace("set(): ", "").replace("set()", "the config"));
        let validated = loaded.and_then(|loaded| {
            let found = loaded.warnings.iter().map(ToString::to_string).collect();
            source.apply(loaded.config, found).map_err(|e| one_line(&e))
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
        let cpus = config.config().default_resource_request().total_cpus();
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
        });
    }
    Ok((trials, warnings))
}

/// What the trial's run folder holds after the trial: its last result, scored by `metric`, and
/// its checkpoints.
pub(crate) fn read_outcome(
    dir: &Path,
    metric: &CheckpointPolicy,
) -> std::result::Result<Outcome, ImpalaError> {
    let results = impala::read_results(&dir.join(RESULT_FILE))?;
    let mut outcome = Outcome::default();
    if let Some(last) = results.last() {
        outcome.iterations = Some(last.training_iteration);
        outcome.timesteps = Some(last.timesteps_total);
        outcome.metric = metric.score(last);
    }
    outcome.checkpoint = find_checkpoint(dir).ok();
    outcome.best_checkpoint = metric.best_in(dir).map(|best| best.path);
    Ok(outcome)
}

/// The last non-empty lines of a trial's stderr.log.
fn tail(path: &Path, n: usize) -> Vec<String> {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].iter().map(|l| (*l).to_string()).collect()
}

/// The status of a trial whose process exited.
pub(crate) fn exit_status(status: ExitStatus, stderr: &Path) -> Status {
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

/// A value as compact JSON (strings unquoted).
pub(crate) fn compact(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
