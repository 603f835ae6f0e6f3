//! The `impala train` child process: what a parent asks of it, written as its flags in one
//! place ([`TrainCommand`]), and what it answers ([`TrainSummary`], its `--summary-json` line).
//! A trial is a child process so that its libtorch threads, signals and memory are its own.

use std::path::{Path, PathBuf};
use std::process::Command;

use impala::run::{RunSummary, ScoreOrder};
use impala::{ConfigSource, StopCriteria};
use serde::{Deserialize, Serialize};

/// One `impala train` run, as typed values.
///
/// ```
/// use impala::StopCriteria;
/// use impala_tune::TrainCommand;
///
/// let train = TrainCommand {
///     run_dir: "runs/seed0".into(),
///     stop: StopCriteria { training_iteration: Some(3), ..Default::default() },
///     summary_json: true,
///     ..Default::default()
/// };
/// let command = train.command("impala".as_ref());
/// let args: Vec<_> = command.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
/// assert_eq!(args, ["train", "--run-dir", "runs/seed0", "--stop-iters=3", "--summary-json"]);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TrainCommand {
    /// The config file (`None`: the embedded example of the env) and the changes on top of it.
    pub source: ConfigSource,
    /// The run folder.
    pub run_dir: PathBuf,
    /// When to stop (all `None`: at the env's reward threshold).
    pub stop: StopCriteria,
    /// The result key and order that rank the run's checkpoints (`None`: the default).
    pub checkpoint_score: Option<(String, ScoreOrder)>,
    /// Print no per-iteration progress lines.
    pub quiet: bool,
    /// Print the [`TrainSummary`] line at the end.
    pub summary_json: bool,
    /// Account the threads' time (`profile.json`, and the summary's `profile`).
    pub profile: bool,
}

impl TrainCommand {
    /// The command that runs it with `trainer` (an `impala` executable).
    pub fn command(&self, trainer: &Path) -> Command {
        let mut command = Command::new(trainer);
        command.arg("train");
        if let Some(file) = &self.source.file {
            command.arg(file);
        }
        if let Some(env) = &self.source.env {
            command.args(["--env", env]);
        }
        if let Some(seed) = self.source.seed {
            command.args(["--seed", &seed.to_string()]);
        }
        for text in &self.source.set {
            command.args(["--set", text]);
        }
        command.arg("--run-dir").arg(&self.run_dir);
        if let Some((attribute, order)) = &self.checkpoint_score {
            command.arg(format!("--checkpoint-score-attribute={attribute}"));
            command.arg(format!("--checkpoint-score-order={order}"));
        }
        command.args(stop_arguments(&self.stop));
        let flags = [
            (self.quiet, "--quiet"),
            (self.summary_json, "--summary-json"),
            (self.profile, "--profile"),
        ];
        for (on, flag) in flags {
            if on {
                command.arg(flag);
            }
        }
        command
    }
}

/// The stop criteria as `impala train` arguments (also how `summary.json` records them).
pub fn stop_arguments(stop: &StopCriteria) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(r) = stop.episode_return_mean {
        out.push(format!("--stop-reward={r}"));
    }
    if let Some(t) = stop.timesteps_total {
        out.push(format!("--stop-timesteps={t}"));
    }
    if let Some(i) = stop.training_iteration {
        out.push(format!("--stop-iters={i}"));
    }
    if let Some(s) = stop.time_total_s {
        out.push(format!("--stop-time={s}"));
    }
    out
}

/// `impala evaluate --checkpoint RUN --episodes N`: greedy episodes of a run's newest
/// checkpoint, answered by one [`EvaluationResult`](impala::EvaluationResult) line.
pub fn evaluate_command(trainer: &Path, run_dir: &Path, episodes: usize) -> Command {
    let mut command = Command::new(trainer);
    command.arg("evaluate").arg("--checkpoint").arg(run_dir);
    command.args(["--episodes", &episodes.to_string()]);
    command
}

/// The line `impala train --summary-json` prints when its run ends (what a benchmark reads of
/// each seed), written through a `serde_json::Value` so that its keys are sorted. Numbers that
/// are not available (no episode finished) are `null`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainSummary {
    /// The config's seed.
    pub seed: Option<u64>,
    /// Why the run stopped (`interrupted (SIGINT)` when a signal ended it).
    pub stop_reason: String,
    /// Whether the last result reached the `episode_return_mean` stop criterion.
    pub reached_stop_reward: bool,
    /// Seconds from the process's start of training to its end.
    pub wall_s: f64,
    /// The last result's `time_total_s`.
    pub time_total_s: f64,
    /// The last result's `training_iteration`.
    pub training_iteration: u64,
    /// The last result's `num_env_steps_sampled`.
    pub num_env_steps_sampled: u64,
    /// The last result's `num_env_steps_trained`.
    pub num_env_steps_trained: u64,
    /// The last result's `episode_return_mean`.
    pub episode_return_mean: Option<f64>,
    /// The process's peak resident memory, MiB.
    pub peak_rss_mib: Option<f64>,
    /// The final checkpoint.
    pub checkpoint: PathBuf,
    /// The best checkpoint by the run's score attribute.
    pub best_checkpoint: Option<PathBuf>,
    /// Its score.
    pub best_checkpoint_score: Option<f64>,
    /// The `--profile` report (`impala::profile::Report`), as written.
    pub profile: Option<serde_json::Value>,
}

impl TrainSummary {
    /// The summary of `run`, which took `wall_s` seconds and trained with `seed` toward
    /// `stop`.
    pub fn new(
        run: &RunSummary,
        stop: &StopCriteria,
        seed: Option<u64>,
        wall_s: f64,
        profile: Option<serde_json::Value>,
    ) -> Self {
        let finite = |x: f64| Some(x).filter(|x| x.is_finite());
        let last = &run.last;
        TrainSummary {
            seed,
            stop_reason: run.stop_reason.clone(),
            reached_stop_reward: stop
                .episode_return_mean
                .is_some_and(|r| last.episode_return_mean >= r),
            wall_s,
            time_total_s: last.time_total_s,
            training_iteration: last.training_iteration,
            num_env_steps_sampled: last.num_env_steps_sampled,
            num_env_steps_trained: last.num_env_steps_trained,
            episode_return_mean: finite(last.episode_return_mean),
            peak_rss_mib: finite(impala::peak_rss_mib()),
            checkpoint: run.checkpoint.clone(),
            best_checkpoint: run.best.as_ref().map(|b| b.path.clone()),
            best_checkpoint_score: run.best.as_ref().map(|b| b.score),
            profile,
        }
    }
}

/// Reads the last non-empty line of a child's standard output as a `T` (a [`TrainSummary`],
/// an [`EvaluationResult`](impala::EvaluationResult)); the line, with why, when it is not one.
pub(crate) fn last_line<T: for<'de> Deserialize<'de>>(
    stdout: &[u8],
) -> Result<T, (String, serde_json::Error)> {
    let stdout = String::from_utf8_lossy(stdout);
    let line = stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
    serde_json::from_str(line).map_err(|e| (line.to_string(), e))
}
