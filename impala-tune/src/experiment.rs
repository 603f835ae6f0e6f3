//! A search: its trials, its folder `<output_dir>/<name>/` with `summary.json` and one
//! `trial_<NNN>_<params>/` run folder per trial, and the run of its trials.
//!
//! Each trial's folder holds `trial.json` (its resolved config, the child's config file),
//! `stdout.log`, `stderr.log` and everything `impala train` writes. Trials start in order while
//! their CPUs fit the [`Budget`]; a signal is passed on to every running trial (which saves a
//! checkpoint and exits as `impala train` does) and the trials not started yet are skipped. At
//! the end [`Experiment::table`] ranks the trials by the metric and `summary.json` holds the same.

use std::collections::{BTreeSet, VecDeque};
use std::fmt;
use std::fs::{self, File};
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use impala::checkpoint::write_file_atomically;
use impala::config::ImpalaConfig;
use impala::run::{folder_safe, utc_stamp, CheckpointPolicy, ScoreOrder, TRIAL_FILES};
use impala::{ConfigSource, StopCriteria};
use serde_json::{json, Value};

use crate::search::{expand, find_variables, override_key, read_tree};
use crate::supervisor::{Budget, Exited, Forward, Supervisor};
use crate::trainer::{stop_arguments, TrainCommand};
use crate::trials::{compact, exit_status, read_outcome, validate_trials, Status, Trial};
use crate::{Result, TuneError};

/// The resolved config of a trial, in its run folder (the child's config file).
pub const TRIAL_CONFIG_FILE: &str = TRIAL_FILES[0];
/// The experiment's summary: every trial, sorted by the metric, and the best.
pub const SUMMARY_FILE: &str = "summary.json";

/// What to search, and how (Tune's `Tuner(param_space, tune_config, run_config)`).
#[derive(Debug, Clone, PartialEq)]
pub struct SearchOptions {
    /// The config file with `grid_search` / `choice` values, and the changes applied to every
    /// trial after the expansion.
    pub source: ConfigSource,
    /// When every trial stops.
    pub stop: StopCriteria,
    /// Repeat the grid this many times, drawing every `choice` anew for each trial.
    pub num_samples: u64,
    /// The seed of the `choice` draws.
    pub search_seed: u64,
    /// The result key that ranks the trials (nested keys joined with `/`); each trial also
    /// keeps its best checkpoint by it.
    pub metric: String,
    /// Whether a higher or a lower metric is better.
    pub mode: ScoreOrder,
    /// The CPUs trials may use at once (`None`: this machine's cores).
    pub cpus: Option<f64>,
    /// At most this many trials at once.
    pub max_concurrent: Option<NonZeroUsize>,
    /// The folder that holds experiment folders.
    pub output_dir: PathBuf,
    /// The experiment folder's name (`None`: `tune_IMPALA_<env>_<UTC date and time>`); it must
    /// be new or empty.
    pub name: Option<String>,
}

/// Something the run of a search reports as it goes, for the caller to print (a warning when
/// [`Event::is_warning`]).
#[derive(Debug)]
#[non_exhaustive]
pub enum Event<'a> {
    /// A signal was passed on to the running trials.
    Forwarded {
        /// How many run.
        running: usize,
    },
    /// A running trial could not be signalled.
    SignalFailed {
        /// The trial.
        trial: &'a Trial,
        /// Why.
        error: std::io::Error,
    },
    /// A trial started.
    Started {
        /// The trial.
        trial: &'a Trial,
        /// How many trials there are.
        total: usize,
        /// How many run now.
        running: usize,
    },
    /// A trial could not start (it counts as failed).
    NotStarted {
        /// The trial.
        trial: &'a Trial,
        /// How many trials there are.
        total: usize,
    },
    /// A trial ended.
    Ended {
        /// The trial.
        trial: &'a Trial,
        /// How many trials ended so far.
        done: usize,
        /// How many trials there are.
        total: usize,
        /// The metric.
        metric: &'a str,
    },
    /// An ended trial's results could not be read.
    ResultsUnreadable {
        /// The trial.
        trial: &'a Trial,
        /// Why.
        error: impala::ImpalaError,
    },
}

impl Event<'_> {
    /// Whether this is a warning rather than progress.
    pub fn is_warning(&self) -> bool {
        matches!(self, Event::SignalFailed { .. } | Event::ResultsUnreadable { .. })
    }
}

impl fmt::Display for Event<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Forwarded { running } => {
                write!(f, "waiting for {running} running trial(s) to save their checkpoints")
            }
            Event::SignalFailed { trial, error } => {
                write!(f, "{}: cannot signal it: {error}", trial.name)
            }
            Event::Started { trial, total, running } => write!(
                f,
                "[{}/{total}] {} started ({} CPUs; {running} running)",
                trial.index + 1,
                trial.name,
                trial.cpus
            ),
            Event::NotStarted { trial, total } => {
                let reason = match &trial.status {
                    Status::Failed { reason, .. } => reason.as_str(),
                    _ => "",
                };
                write!(f, "[{}/{total}] {} could not start: {reason}", trial.index + 1, trial.name)
            }
            Event::Ended { trial, done, total, metric } => {
                let outcome = &trial.outcome;
                let results = match (outcome.iterations, outcome.metric) {
                    (Some(i), Some(m)) => format!("{i} iteration(s), {metric} {m:.2}"),
                    (Some(i), None) => format!("{i} iteration(s), no {metric}"),
                    (None, _) => "no results".into(),
                };
                write!(
                    f,
                    "[{done}/{total} done] {} {} after {:.1}s: {results}",
                    trial.name,
                    trial.status.describe(),
                    outcome.wall_s.unwrap_or(0.0)
                )?;
                if let Status::Failed { stderr_tail, .. } = &trial.status {
                    write!(f, "\n  the last lines of {}:", trial.dir.join("stderr.log").display())?;
                    for line in stderr_tail {
                        write!(f, "\n  | {line}")?;
                    }
                }
                Ok(())
            }
            Event::ResultsUnreadable { trial, error } => {
                write!(f, "{}: cannot read its results: {}", trial.name, impala::one_line(error))
            }
        }
    }
}

/// A search: its validated trials, its folder once claimed, and how its trials went.
///
/// ```
/// use impala_tune::{Experiment, SearchOptions};
///
/// let dir = tempfile::tempdir()?;
/// let file = dir.path().join("sweep.toml");
/// let text = "env = \"CartPole-v1\"\nnum_env_runners = 1\nlr = {grid_search = [0.001, 0.0005]}\n";
/// std::fs::write(&file, text)?;
/// let experiment = Experiment::new(SearchOptions {
///     source: impala::ConfigSource { file: Some(file), ..Default::default() },
///     stop: Default::default(),
///     num_samples: 1,
///     search_seed: 0,
///     metric: "episode_return_mean".into(),
///     mode: Default::default(),
///     cpus: Some(4.0),
///     max_concurrent: None,
///     output_dir: dir.path().join("out"),
///     name: None,
/// })?;
/// let names: Vec<&str> = experiment.trials().iter().map(|t| t.name()).collect();
/// assert_eq!(names, ["trial_000_lr=0.001", "trial_001_lr=0.0005"]);
/// // Each needs 2 CPUs (the driver and one env runner): both fit in 4.
/// assert_eq!(experiment.at_once(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Experiment {
    options: SearchOptions,
    trials: Vec<Trial>,
    warnings: BTreeSet<String>,
    budget: Budget,
    dir: Option<PathBuf>,
    started: Instant,
}

impl Experiment {
    /// Reads the file, expands its search spaces and validates every trial; nothing is run or
    /// written.
    pub fn new(mut options: SearchOptions) -> Result<Self> {
        let started = Instant::now();
        checkpoint_policy(&options)
            .check()
            .map_err(|e| TuneError::BadMetric { reason: e.to_string() })?;
        if let Some(name) = &options.name {
            check_name(name)?;
        }
        let file = options.source.file.as_deref().ok_or(TuneError::NoConfigFile)?;
        let (tree, file_stop) = read_tree(file)?;
        if options.stop == StopCriteria::default() {
            // An RLlib experiment file's own criteria, when the command gave none.
            options.stop = StopCriteria::of_experiment(&file_stop);
        }
        let variables = find_variables(&tree, file)?;
        let specs = expand(&tree, &variables, options.num_samples, options.search_seed, file)?;
        let (trials, mut warnings) = validate_trials(specs, &options.source, file)?;
        if variables.is_empty() {
            warnings.insert(format!(
                "{} has no `grid_search` or `choice` value: every trial has the same config",
                file.display()
            ));
        }
        let searched: BTreeSet<String> = variables.iter().map(|v| v.path.to_string()).collect();
        let overridden = options.source.set.iter().map(|o| override_key(o));
        let overridden = overridden.chain(options.source.env.as_ref().map(|_| "env".into()));
        for key in overridden.filter(|k| searched.contains(k)) {
            warnings.insert(format!(
                "`{key}` is searched in {} but overridden too: the override wins, so every \
                 trial has the same `{key}`",
                file.display()
            ));
        }
        let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get) as f64;
        let budget =
            Budget { cpus: options.cpus.unwrap_or(cores), max_concurrent: options.max_concurrent };
        if budget.cpus > cores {
            warnings.insert(format!(
                "a budget of {} CPUs is more than this machine's {cores} cores: trials will \
                 share cores",
                budget.cpus
            ));
        }
        let too_big: Vec<&Trial> = trials.iter().filter(|t| !budget.fits(t.cpus)).collect();
        if let Some(first) = too_big.first() {
            let most = too_big.iter().map(|t| t.cpus).fold(0.0, f64::max);
            let who = match too_big.len() {
                1 => first.name.clone(),
                n => format!("{n} trials (e.g. {})", first.name),
            };
            warnings.insert(format!(
                "{who} need(s) up to {most} CPUs (the config's resource request), more than the \
                 budget of {}: each such trial runs on its own, with no other trial beside it; \
                 raise the budget or lower num_env_runners to run trials side by side",
                budget.cpus
            ));
        }
        Ok(Experiment { options, trials, warnings, budget, dir: None, started })
    }

    /// The trials, in Ray Tune's order.
    pub fn trials(&self) -> &[Trial] {
        &self.trials
    }

    /// What the caller should know before the search runs (sorted, each once).
    pub fn warnings(&self) -> impl Iterator<Item = &str> {
        self.warnings.iter().map(String::as_str)
    }

    /// The CPU budget.
    pub fn budget(&self) -> Budget {
        self.budget
    }

    /// How many of the first trials run at once.
    pub fn at_once(&self) -> usize {
        self.budget.at_once(self.trials.iter().map(|t| t.cpus))
    }

    /// The config file searched.
    pub fn file(&self) -> &Path {
        self.options.source.file.as_deref().unwrap_or(Path::new(""))
    }

    /// The experiment folder, once claimed.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Creates the experiment folder (the name given, new or empty, else a new
    /// `tune_IMPALA_<env>_<stamp>`, with `_2`, ... when two start in the same microsecond) and
    /// writes its first `summary.json`.
    pub fn claim(&mut self) -> Result<PathBuf> {
        let output_dir = &self.options.output_dir;
        fs::create_dir_all(output_dir)
            .map_err(TuneError::io("create the output folder", output_dir))?;
        let dir = match &self.options.name {
            Some(name) => claim_named(&output_dir.join(name))?,
            None => {
                let envs: BTreeSet<&str> =
                    self.trials.iter().map(|t| t.config.config().env.as_str()).collect();
                let env = match (envs.len(), envs.first()) {
                    (1, Some(env)) => format!("_{}", folder_safe(env)),
                    _ => String::new(),
                };
                let base = format!("tune_IMPALA{env}_{}", utc_stamp(std::time::SystemTime::now()));
                claim_new(output_dir, &base)?
            }
        };
        self.dir = Some(dir.clone());
        self.write_summary()?;
        Ok(dir)
    }

    /// Runs every trial with `trainer` (an `impala` executable), as many at once as the budget
    /// admits, until all ended or `signal` returns a signal to pass on (then the running ones
    /// get it and are waited for; the rest do not start). `on_event` sees the progress.
    pub fn run(
        &mut self,
        trainer: &Path,
        signal: &dyn Fn() -> Option<Forward>,
        mut on_event: impl FnMut(Event<'_>),
    ) -> Result<()> {
        let mut pending: VecDeque<usize> = (0..self.trials.len()).collect();
        let mut children = Supervisor::default();
        let mut forwarded = false;
        let total = self.trials.len();
        let mut done = 0usize;
        loop {
            if let (Some(signal), false) = (signal(), forwarded) {
                for (i, error) in children.forward(signal) {
                    on_event(Event::SignalFailed { trial: &self.trials[i], error });
                }
                for i in pending.drain(..) {
                    self.trials[i].status = Status::NotStarted;
                }
                forwarded = true;
                on_event(Event::Forwarded { running: children.len() });
            }
            let exited = children.reap().map_err(TuneError::io("wait for", trainer))?;
            for exited in exited {
                done += 1;
                self.finish(exited, done, total, &mut on_event)?;
            }
            while let Some(&next) = pending.front() {
                let used: f64 = children.keys().map(|i| self.trials[i].cpus).sum();
                if !self.budget.admits(used, children.len(), self.trials[next].cpus) {
                    break;
                }
                pending.pop_front();
                match self.start(trainer, next, &mut children) {
                    Ok(()) => {
                        self.trials[next].status = Status::Running;
                        let running = children.len();
                        on_event(Event::Started { trial: &self.trials[next], total, running });
                    }
                    Err(e) => {
                        done += 1;
                        let reason = impala::one_line(&e);
                        self.trials[next].status =
                            Status::Failed { code: None, reason, stderr_tail: Vec::new() };
                        on_event(Event::NotStarted { trial: &self.trials[next], total });
                    }
                }
                self.write_summary()?;
            }
            if children.is_empty() && pending.is_empty() {
                return self.write_summary();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Creates the trial's folder with its config and starts it.
    fn start(
        &mut self,
        trainer: &Path,
        index: usize,
        children: &mut Supervisor<usize>,
    ) -> Result<()> {
        let dir = self.dir.clone().unwrap_or_default();
        let trial = &mut self.trials[index];
        trial.dir = dir.join(&trial.name);
        fs::create_dir(&trial.dir).map_err(TuneError::io("create the trial folder", &trial.dir))?;
        let config = write_trial_config(trial.config.config(), &trial.dir)?;
        let log = |name: &str| {
            let path = trial.dir.join(name);
            File::create(&path).map_err(TuneError::io("create", &path))
        };
        let train = TrainCommand {
            source: ConfigSource { file: Some(config), ..ConfigSource::default() },
            run_dir: trial.dir.clone(),
            stop: self.options.stop,
            checkpoint_score: Some((self.options.metric.clone(), self.options.mode)),
            ..TrainCommand::default()
        };
        let mut command = train.command(trainer);
        command.stdin(Stdio::null()).stdout(log(TRIAL_FILES[1])?).stderr(log(TRIAL_FILES[2])?);
        children.start(index, &mut command).map_err(TuneError::io("start", trainer))
    }

    /// Records how a trial ended and reports it.
    fn finish(
        &mut self,
        exited: Exited<usize>,
        done: usize,
        total: usize,
        on_event: &mut impl FnMut(Event<'_>),
    ) -> Result<()> {
        let policy = checkpoint_policy(&self.options);
        let trial = &mut self.trials[exited.key];
        trial.status = exit_status(exited.status, &trial.dir.join(TRIAL_FILES[2]));
        match read_outcome(&trial.dir, &policy) {
            Ok(outcome) => trial.outcome = outcome,
            Err(error) => on_event(Event::ResultsUnreadable { trial, error }),
        }
        trial.outcome.wall_s = Some(exited.wall_s);
        on_event(Event::Ended { trial, done, total, metric: &self.options.metric });
        self.write_summary()
    }

    /// The trials sorted by the metric (better first; trials without it last, in trial order).
    pub fn ranked(&self) -> Vec<&Trial> {
        let mut ranked: Vec<&Trial> = self.trials.iter().collect();
        ranked.sort_by(|a, b| match (a.outcome.metric, b.outcome.metric) {
            (Some(x), Some(y)) => {
                let by = match self.options.mode {
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
    pub fn best(&self) -> Option<&Trial> {
        self.ranked().into_iter().find(|t| {
            t.outcome.metric.is_some()
                && matches!(t.status, Status::Ok | Status::Interrupted { .. })
        })
    }

    /// Errors with [`TuneError::AllTrialsFailed`] when every trial failed: the search has no
    /// result (each trial's `stderr.log` says why).
    pub fn check_finished(&self) -> Result<()> {
        if self.trials.iter().all(|t| matches!(t.status, Status::Failed { .. })) {
            let (total, experiment) = (self.trials.len(), self.dir.clone().unwrap_or_default());
            return Err(TuneError::AllTrialsFailed { total, experiment });
        }
        Ok(())
    }

    fn summary_json(&self) -> Value {
        let options = &self.options;
        let metric = &options.metric;
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
            "config": options.source.file,
            "metric": metric,
            "mode": options.mode.to_string(),
            "num_samples": options.num_samples,
            "search_seed": options.search_seed,
            "cpus": self.budget.cpus,
            "stop": stop_arguments(&options.stop),
            "num_trials": self.trials.len(),
            "wall_s": self.started.elapsed().as_secs_f64(),
            "trials": self.ranked().iter().map(|t| t.to_json(metric)).collect::<Vec<_>>(),
            "best": best,
        })
    }

    /// Rewrites summary.json (atomically: a reader never sees half of it), after every change,
    /// so a search that is killed still leaves a record of its trials.
    fn write_summary(&self) -> Result<()> {
        let Some(dir) = &self.dir else { return Ok(()) };
        let text = serde_json::to_string_pretty(&self.summary_json()).unwrap_or_default();
        write_file_atomically(&dir.join(SUMMARY_FILE), text.as_bytes())?;
        Ok(())
    }

    /// What a dry run prints: how many trials run how, then each trial (name, searched values,
    /// CPUs).
    pub fn dry_run(&self) -> String {
        let mut out = format!(
            "{} trial(s) of {} (dry run: nothing is run or written); at most {} at once in {} \
             CPUs\n",
            self.trials.len(),
            self.file().display(),
            self.at_once(),
            self.budget.cpus
        );
        for trial in &self.trials {
            out += &format!("{}\n", trial.describe());
        }
        out
    }

    /// `tune: 4 trial(s) of FILE in DIR, at most 2 at once in 4 CPUs; ranked by METRIC (max)`.
    pub fn headline(&self) -> String {
        format!(
            "tune: {} trial(s) of {} in {}, at most {} at once in {} CPUs; ranked by {} ({})",
            self.trials.len(),
            self.file().display(),
            self.dir.as_deref().unwrap_or(Path::new("")).display(),
            self.at_once(),
            self.budget.cpus,
            self.options.metric,
            self.options.mode
        )
    }

    /// What the search found: the table of every trial, best first, the best trial with its
    /// checkpoint, and where `summary.json` is.
    pub fn report(&self) -> String {
        let metric = &self.options.metric;
        let best = match self.best() {
            Some(best) => format!(
                "best trial: {} ({metric} {}); checkpoint: {}",
                best.name,
                best.outcome.metric.map_or_else(|| "-".into(), |m| m.to_string()),
                best.checkpoint().map_or_else(|| "none".into(), |c| c.display().to_string())
            ),
            None => format!("best trial: none (no trial finished with a {metric} result)"),
        };
        let dir = self.dir.as_deref().unwrap_or(Path::new(""));
        format!("\n{}{best}\nsummary: {}\n", self.table(), dir.join(SUMMARY_FILE).display())
    }

    /// The table of every trial, best first: its name, searched values, iterations,
    /// timesteps, metric and status.
    fn table(&self) -> String {
        let metric = &self.options.metric;
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

/// The policy that ranks the trials and each trial's checkpoints.
fn checkpoint_policy(options: &SearchOptions) -> CheckpointPolicy {
    CheckpointPolicy {
        score_attribute: options.metric.clone(),
        score_order: options.mode,
        ..CheckpointPolicy::default()
    }
}

fn check_name(name: &str) -> Result<()> {
    let bad = |reason| TuneError::BadName { name: name.into(), reason };
    if name.is_empty() || name == "." || name == ".." {
        return Err(bad("give a folder name, e.g. lr-sweep"));
    }
    if name.contains(['/', '\\']) {
        return Err(bad("it must be one folder name; put parent folders in output_dir"));
    }
    Ok(())
}

/// Creates `path`, or takes it when it exists and is empty.
fn claim_named(path: &Path) -> Result<PathBuf> {
    match fs::create_dir(path) {
        Ok(()) => Ok(path.to_path_buf()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let mut entries =
                fs::read_dir(path).map_err(TuneError::io("read the experiment folder", path))?;
            if entries.next().is_none() {
                Ok(path.to_path_buf())
            } else {
                Err(TuneError::ExperimentExists { path: path.to_path_buf() })
            }
        }
        Err(source) => Err(TuneError::Io { action: "create", path: path.to_path_buf(), source }),
    }
}

/// Creates a new `parent/base` (`base_2`, ... when it is taken).
fn claim_new(parent: &Path, base: &str) -> Result<PathBuf> {
    let mut n = 1u32;
    loop {
        let name = if n == 1 { base.to_string() } else { format!("{base}_{n}") };
        let path = parent.join(name);
        match fs::create_dir(&path) {
            Ok(()) => return Ok(path),
            // Another search started in the same microsecond: the next suffix.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(TuneError::ExperimentExists { path })
            }
            Err(source) => return Err(TuneError::Io { action: "create", path, source }),
        }
    }
}

/// Writes the trial's resolved config as JSON, and reads it back: a value JSON cannot hold
/// (a non-finite number) would change the trial, so the file must load to the same config.
fn write_trial_config(config: &ImpalaConfig, dir: &Path) -> Result<PathBuf> {
    let path = dir.join(TRIAL_CONFIG_FILE);
    config.save(&path)?;
    let back = ImpalaConfig::load(&path)?;
    if back.config != *config {
        return Err(TuneError::UnwritableConfig { path });
    }
    Ok(path)
}
