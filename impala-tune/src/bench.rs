//! The CartPole time-to-solve benchmark (`impala bench-cartpole`), and with a stability window
//! a stability benchmark. Each seed runs as a fresh `impala train` process, so wall-clock
//! includes process start-up and peak memory is the process's own (`VmHWM`, as `getrusage`
//! reports it).
//!
//! * Without [`BenchOptions::stability`] each seed trains to the threshold (`stop_reward`) and
//!   stops there.
//! * With it, each seed trains past the threshold: the benchmark follows the child's
//!   `result.json` and, once the window after the first iteration at the threshold is covered
//!   (`stay_s` seconds of training or `stay_steps` env steps, whichever comes first),
//!   interrupts it (SIGINT: the child saves a final checkpoint and exits). It reports the first
//!   time and step count at the threshold, the lowest `episode_return_mean` in the window,
//!   whether it stayed at or above `stay_min`, and the greedy evaluation of the final
//!   checkpoint (`impala evaluate`, also a fresh process).
//!
//! Any config works (Acrobot, Pendulum): the threshold is `stop_reward`.

use std::io::ErrorKind::InvalidData;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use impala::{ConfigSource, EvaluationResult, IterationResult, StopCriteria, RESULT_FILE};
use serde::Serialize;

use crate::supervisor::{Forward, Supervisor};
use crate::trainer::{evaluate_command, last_line, TrainCommand, TrainSummary};
use crate::{Result, TuneError};

/// The env trained when no config file is given.
const DEFAULT_ENV: &str = "CartPole-v1";

/// What to benchmark.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchOptions {
    /// Seeds 0..N, one training process each.
    pub seeds: u64,
    /// The `episode_return_mean` to reach.
    pub stop_reward: f64,
    /// Give up on a seed after this many seconds of training.
    pub stop_time: f64,
    /// The config file (`None`: the embedded CartPole-v1 example) and `key=value` overrides
    /// for every seed (its env and seed are the benchmark's).
    pub source: ConfigSource,
    /// Train every seed with a time profile (each seed's summary holds it).
    pub profile: bool,
    /// Keep each seed's run folder here (`DIR/seedS`); `None`: a temporary folder, removed at
    /// the end.
    pub runs_dir: Option<PathBuf>,
    /// The stability benchmark (`None`: stop at the threshold).
    pub stability: Option<StabilityOptions>,
}

/// The stability window and what a seed must do to pass.
#[derive(Debug, Clone, PartialEq)]
pub struct StabilityOptions {
    /// Watch `episode_return_mean` for this many seconds of training after first reaching the
    /// threshold (or `stay_steps`, whichever comes first).
    pub stay_s: Option<f64>,
    /// Watch this many env steps after first reaching the threshold.
    pub stay_steps: Option<u64>,
    /// A seed stayed when `episode_return_mean` never fell below this in the window (`None`:
    /// the threshold).
    pub stay_min: Option<f64>,
    /// Greedy evaluation episodes of each seed's final checkpoint (0: no evaluation).
    pub eval_episodes: usize,
    /// A seed passes only when its final checkpoint's evaluation reaches this too.
    pub eval_min: Option<f64>,
}

/// One seed's line: its `impala train` summary, and the benchmark's own measurements.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeedRecord {
    /// What `impala train` reported.
    #[serde(flatten)]
    pub train: TrainSummary,
    /// Seconds from starting the process to its exit.
    pub wall_s_from_process_start: f64,
    /// The stability measurements, in the stability benchmark.
    #[serde(flatten)]
    pub stability: Option<SeedStability>,
}

/// One seed's stability window and evaluation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeedStability {
    /// Seconds from the process's start to the first result at the threshold.
    pub wall_s_to_threshold: Option<f64>,
    /// `time_total_s` of the first result at the threshold.
    pub time_total_s_to_threshold: Option<f64>,
    /// Env steps of the first result at the threshold.
    pub num_env_steps_to_threshold: Option<u64>,
    /// Iterations in the window.
    pub window_iterations: usize,
    /// Whether training went on to the end of the window.
    pub window_covered: bool,
    /// The lowest `episode_return_mean` in the window.
    pub window_min_episode_return_mean: Option<f64>,
    /// Covered, and never below `stay_min`.
    pub stayed: bool,
    /// Evaluation episodes of the final checkpoint.
    pub eval_episodes: usize,
    /// Their mean return.
    pub eval_episode_return_mean: Option<f64>,
    /// Stayed, and the evaluation reached `eval_min`.
    pub passed: bool,
}

/// The summary over the seeds: the first form's keys always, the stability keys when asked for.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchReport {
    /// `<env> to episode_return_mean >= stop_reward`.
    pub benchmark: String,
    /// The threshold.
    pub stop_reward: f64,
    /// Seeds asked for.
    pub seeds: u64,
    /// Seeds that reached the threshold.
    pub seeds_solved: usize,
    /// The median (the upper one of an even count) of the seeds' process wall-clock.
    pub median_wall_s_from_process_start: Option<f64>,
    /// The median env steps sampled.
    pub median_num_env_steps_sampled: Option<f64>,
    /// The median peak resident memory, MiB.
    pub median_peak_rss_mib: Option<f64>,
    /// The largest peak resident memory, MiB.
    pub max_peak_rss_mib: f64,
    /// The stability summary, in the stability benchmark.
    #[serde(flatten)]
    pub stability: Option<StabilityReport>,
}

/// The stability benchmark's summary over the seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StabilityReport {
    /// The window in seconds of training.
    pub stay_s: Option<f64>,
    /// The window in env steps.
    pub stay_steps: Option<u64>,
    /// The return a seed had to stay at or above.
    pub stay_min: f64,
    /// Evaluation episodes per seed.
    pub eval_episodes: usize,
    /// The evaluation a seed had to reach.
    pub eval_min: Option<f64>,
    /// Median seconds from process start to the threshold.
    pub median_wall_s_to_threshold: Option<f64>,
    /// Median training seconds to the threshold.
    pub median_time_total_s_to_threshold: Option<f64>,
    /// Median env steps to the threshold.
    pub median_num_env_steps_to_threshold: Option<f64>,
    /// Seeds that stayed.
    pub seeds_stayed: usize,
    /// Median of the seeds' lowest return in the window.
    pub median_window_min_episode_return_mean: Option<f64>,
    /// The lowest of them.
    pub min_window_min_episode_return_mean: Option<f64>,
    /// Median evaluation return.
    pub median_eval_episode_return_mean: Option<f64>,
    /// The lowest of them.
    pub min_eval_episode_return_mean: Option<f64>,
    /// Seeds that passed.
    pub seeds_passed: usize,
}

impl BenchReport {
    /// Whether every seed solved (or, in the stability benchmark, passed).
    pub fn all_passed(&self) -> bool {
        let passed = self.stability.as_ref().map_or(self.seeds_solved, |s| s.seeds_passed);
        passed as u64 == self.seeds
    }
}

/// Runs the benchmark with `trainer` (an `impala` executable), one seed after the other;
/// `on_seed` sees each seed's record. When `signal` returns a signal, it is passed on to the
/// running seed, which saves and exits, and no further seed starts.
pub fn bench_cartpole(
    options: &BenchOptions,
    trainer: &Path,
    signal: &dyn Fn() -> Option<Forward>,
    mut on_seed: impl FnMut(&SeedRecord),
) -> Result<BenchReport> {
    let scratch = std::env::temp_dir().join(format!("impala-bench-{}", std::process::id()));
    let runs_root = options.runs_dir.clone().unwrap_or_else(|| scratch.clone());
    let mut runs = Vec::new();
    let mut env = None;
    for seed in 0..options.seeds {
        if signal().is_some() {
            break;
        }
        let run_dir = runs_root.join(format!("seed{seed}"));
        if run_dir.exists() {
            return Err(TuneError::RunsDirTaken { path: run_dir });
        }
        let record = Seed { options, trainer, seed, run_dir: &run_dir, signal }.run()?;
        env = env.or_else(|| impala::params_env(&run_dir));
        on_seed(&record);
        runs.push(record);
    }
    if options.runs_dir.is_none() {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    let env = env.unwrap_or_else(|| DEFAULT_ENV.into());
    Ok(report(&runs, options, &env))
}

/// One seed's run.
struct Seed<'a> {
    options: &'a BenchOptions,
    trainer: &'a Path,
    seed: u64,
    run_dir: &'a Path,
    signal: &'a dyn Fn() -> Option<Forward>,
}

impl Seed<'_> {
    /// The seed's `impala train`, without the threshold as a stop criterion.
    fn train(&self) -> TrainCommand {
        let options = self.options;
        TrainCommand {
            source: ConfigSource {
                env: options.source.file.is_none().then(|| DEFAULT_ENV.into()),
                seed: Some(self.seed),
                ..options.source.clone()
            },
            run_dir: self.run_dir.to_path_buf(),
            stop: StopCriteria { time_total_s: Some(options.stop_time), ..Default::default() },
            quiet: true,
            summary_json: true,
            profile: options.profile,
            ..TrainCommand::default()
        }
    }

    fn run(&self) -> Result<SeedRecord> {
        match &self.options.stability {
            None => self.to_threshold(),
            Some(stability) => self.stability(stability),
        }
    }

    /// The first form: train to the threshold and stop there.
    fn to_threshold(&self) -> Result<SeedRecord> {
        let mut train = self.train();
        train.stop.episode_return_mean = Some(self.options.stop_reward);
        let mut command = train.command(self.trainer);
        command.stdout(Stdio::piped()).stderr(Stdio::inherit());
        let (status, stdout, wall_s) = self.supervise(&mut command, |_, _| Ok(()))?;
        if !status.success() && !interrupted_by(status, (self.signal)()) {
            return Err(self.failed(status, String::new()));
        }
        Ok(SeedRecord {
            train: self.summary(&stdout)?,
            wall_s_from_process_start: wall_s,
            stability: None,
        })
    }

    /// The second form: train past the threshold, interrupt once the window is covered,
    /// evaluate.
    fn stability(&self, stability: &StabilityOptions) -> Result<SeedRecord> {
        // The child's stderr (warnings, its interrupt notice) goes beside its run folder.
        let log_path = self.run_dir.with_extension("stderr.log");
        if let Some(parent) = log_path.parent() {
            std::fs::create_dir_all(parent).map_err(TuneError::io("create", parent))?;
        }
        let log = std::fs::File::create(&log_path).map_err(TuneError::io("create", &log_path))?;
        let window = Window::new(self.options.stop_reward, stability);
        let mut command = self.train().command(self.trainer);
        command.stdout(Stdio::piped()).stderr(log);
        let mut follower = Follower::new(self.run_dir.join(RESULT_FILE));
        let mut wall_s_to_threshold = None;
        let mut covered = false;
        let (status, stdout, wall_s) = self.supervise(&mut command, |children, wall_s| {
            let rows = follower.poll()?;
            if wall_s_to_threshold.is_none() && window.first(rows).is_some() {
                wall_s_to_threshold = Some(wall_s);
            }
            if !covered && window.covered(rows) {
                children
                    .signal(self.seed, Forward::Interrupt)
                    .map_err(TuneError::io("interrupt", self.trainer))?;
                covered = true;
            }
            Ok(())
        })?;
        // An interrupted child exits with 128 + SIGINT after saving its checkpoint.
        let interrupted = (self.signal)();
        if !(status.success()
            || covered && status.code() == Some(130)
            || interrupted_by(status, interrupted))
        {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            return Err(self.failed(status, log));
        }
        let mut train = self.summary(&stdout)?;
        follower.poll()?;
        let stats = window.stats(follower.rows());
        train.reached_stop_reward = stats.first.is_some();
        if covered {
            train.stop_reason = "stability window covered (interrupted)".into();
        }
        let eval = if stability.eval_episodes > 0 && interrupted.is_none() {
            Some(self.evaluate(stability.eval_episodes)?)
        } else {
            None
        };
        let eval_ok = stability.eval_min.is_none_or(|min| eval.is_some_and(|e| e >= min));
        let stability = SeedStability {
            wall_s_to_threshold,
            time_total_s_to_threshold: stats.first.map(|r| r.time_total_s),
            num_env_steps_to_threshold: stats.first.map(|r| r.steps),
            window_iterations: stats.iterations,
            window_covered: stats.covered,
            window_min_episode_return_mean: stats.min,
            stayed: stats.stayed,
            eval_episodes: stability.eval_episodes,
            eval_episode_return_mean: eval,
            passed: stats.stayed && eval_ok,
        };
        Ok(SeedRecord { train, wall_s_from_process_start: wall_s, stability: Some(stability) })
    }

    /// Runs `command` as the seed's child until it exits, calling `each` about every 10 ms
    /// with the children and the seconds since the start, and passing a signal on; its exit
    /// status, standard output and wall-clock seconds.
    fn supervise(
        &self,
        command: &mut std::process::Command,
        mut each: impl FnMut(&mut Supervisor<u64>, f64) -> Result<()>,
    ) -> Result<(ExitStatus, Vec<u8>, f64)> {
        let mut children = Supervisor::default();
        children.start(self.seed, command).map_err(TuneError::io("start", self.trainer))?;
        let started = std::time::Instant::now();
        let mut forwarded = false;
        loop {
            if let (Some(signal), false) = ((self.signal)(), forwarded) {
                if let Some((_, e)) = children.forward(signal).pop() {
                    return Err(TuneError::io("signal", self.trainer)(e));
                }
                forwarded = true;
            }
            let exited = children.reap().map_err(TuneError::io("wait for", self.trainer))?;
            if let Some(mut exited) = exited.into_iter().next() {
                let mut stdout = Vec::new();
                if let Some(out) = &mut exited.stdout {
                    out.read_to_end(&mut stdout)
                        .map_err(TuneError::io("read the output of", self.trainer))?;
                }
                return Ok((exited.status, stdout, exited.wall_s));
            }
            std::thread::sleep(Duration::from_millis(10));
            each(&mut children, started.elapsed().as_secs_f64())?;
        }
    }

    fn summary(&self, stdout: &[u8]) -> Result<TrainSummary> {
        last_line(stdout).map_err(|(line, source)| TuneError::UnreadableOutput {
            seed: self.seed,
            what: "`impala train` summary",
            line,
            source,
        })
    }

    fn failed(&self, status: ExitStatus, log: String) -> TuneError {
        TuneError::SeedFailed { seed: self.seed, program: "`impala train`", status, log }
    }

    /// The greedy `episode_return_mean` of the run's final checkpoint.
    fn evaluate(&self, episodes: usize) -> Result<f64> {
        let out = evaluate_command(self.trainer, self.run_dir, episodes)
            .stderr(Stdio::inherit())
            .output()
            .map_err(TuneError::io("start", self.trainer))?;
        if !out.status.success() {
            let (seed, status) = (self.seed, out.status);
            return Err(TuneError::SeedFailed {
                seed,
                program: "`impala evaluate`",
                status,
                log: String::new(),
            });
        }
        let eval: EvaluationResult =
            last_line(&out.stdout).map_err(|(line, source)| TuneError::UnreadableOutput {
                seed: self.seed,
                what: "`impala evaluate` output",
                line,
                source,
            })?;
        Ok(eval.episode_return_mean)
    }
}

/// Whether the child exited as `impala train` does after the signal passed on to it.
fn interrupted_by(status: ExitStatus, signal: Option<Forward>) -> bool {
    match signal {
        Some(Forward::Interrupt) => status.code() == Some(130),
        Some(Forward::Terminate) => status.code() == Some(143),
        None => false,
    }
}

/// What the stability benchmark reads of one `result.json` line.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Row {
    time_total_s: f64,
    steps: u64,
    /// `None` until an episode finished.
    episode_return_mean: Option<f64>,
}

impl From<&IterationResult> for Row {
    fn from(result: &IterationResult) -> Row {
        Row {
            time_total_s: result.time_total_s,
            steps: result.num_env_steps_sampled,
            episode_return_mean: Some(result.episode_return_mean).filter(|r| r.is_finite()),
        }
    }
}

/// Reads the complete lines a running child has appended to its `result.json`.
struct Follower {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
    rows: Vec<Row>,
}

impl Follower {
    fn new(path: PathBuf) -> Follower {
        Follower { path, offset: 0, partial: Vec::new(), rows: Vec::new() }
    }

    fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// Reads what was appended since the last call; every row so far.
    fn poll(&mut self) -> Result<&[Row]> {
        let mut file = match std::fs::File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(&self.rows),
            Err(e) => return Err(TuneError::io("read", &self.path)(e)),
        };
        let mut new = Vec::new();
        file.seek(SeekFrom::Start(self.offset))
            .and_then(|_| file.read_to_end(&mut new))
            .map_err(TuneError::io("read", &self.path))?;
        self.offset += new.len() as u64;
        self.partial.extend_from_slice(&new);
        while let Some(end) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            if line.trim().is_empty() {
                continue;
            }
            let result: IterationResult = serde_json::from_str(&line).map_err(|e| {
                let reason = format!("a line is not a result ({e})");
                TuneError::io("read", &self.path)(std::io::Error::new(InvalidData, reason))
            })?;
            self.rows.push(Row::from(&result));
        }
        Ok(&self.rows)
    }
}

/// The stability window: from the first iteration at the threshold, `stay_s` seconds of
/// training or `stay_steps` env steps, whichever ends first.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Window {
    threshold: f64,
    stay_s: Option<f64>,
    stay_steps: Option<u64>,
    stay_min: f64,
}

/// What one seed's `result.json` says about its window.
#[derive(Debug, Clone, Copy, PartialEq)]
struct WindowStats {
    /// The first row at the threshold.
    first: Option<Row>,
    /// The lowest episode_return_mean from there to the end of the window.
    min: Option<f64>,
    /// Iterations in the window.
    iterations: usize,
    /// Whether training went on to the end of the window.
    covered: bool,
    /// Covered, and never below `stay_min`.
    stayed: bool,
}

impl Window {
    fn new(threshold: f64, stability: &StabilityOptions) -> Window {
        Window {
            threshold,
            stay_s: stability.stay_s,
            stay_steps: stability.stay_steps,
            stay_min: stability.stay_min.unwrap_or(threshold),
        }
    }

    fn first(&self, rows: &[Row]) -> Option<usize> {
        rows.iter().position(|r| r.episode_return_mean.is_some_and(|m| m >= self.threshold))
    }

    /// Whether `row` is past the end of the window that starts at `first`.
    fn past_end(&self, first: &Row, row: &Row) -> bool {
        let by_time = self.stay_s.is_some_and(|s| row.time_total_s - first.time_total_s >= s);
        let by_steps = self.stay_steps.is_some_and(|n| row.steps.saturating_sub(first.steps) >= n);
        by_time || by_steps
    }

    fn covered(&self, rows: &[Row]) -> bool {
        match (self.first(rows), rows.last()) {
            (Some(i), Some(last)) => self.past_end(&rows[i], last),
            _ => false,
        }
    }

    fn stats(&self, rows: &[Row]) -> WindowStats {
        let Some(i) = self.first(rows) else {
            return WindowStats {
                first: None,
                min: None,
                iterations: 0,
                covered: false,
                stayed: false,
            };
        };
        let first = rows[i];
        // The rows up to and including the first at (or past) the window's end.
        let mut window = Vec::new();
        for row in &rows[i..] {
            window.push(*row);
            if self.past_end(&first, row) {
                break;
            }
        }
        let covered = window.last().is_some_and(|last| self.past_end(&first, last));
        let min = window
            .iter()
            .filter_map(|r| r.episode_return_mean)
            .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.min(r))));
        let stayed = covered && min.is_some_and(|m| m >= self.stay_min);
        WindowStats { first: Some(first), min, iterations: window.len(), covered, stayed }
    }
}

/// The median of `values` (the upper one of an even count).
fn median(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

fn min_of(values: impl Iterator<Item = f64>) -> Option<f64> {
    values.reduce(f64::min)
}

/// The summary over the seeds that ran.
fn report(runs: &[SeedRecord], options: &BenchOptions, env: &str) -> BenchReport {
    let trains = || runs.iter().map(|r| &r.train);
    let stability = options.stability.as_ref().map(|stability| {
        let seeds = || runs.iter().filter_map(|r| r.stability.as_ref());
        let count = |f: fn(&SeedStability) -> bool| seeds().filter(|s| f(s)).count();
        let window = Window::new(options.stop_reward, stability);
        StabilityReport {
            stay_s: stability.stay_s,
            stay_steps: stability.stay_steps,
            stay_min: window.stay_min,
            eval_episodes: stability.eval_episodes,
            eval_min: stability.eval_min,
            median_wall_s_to_threshold: median(seeds().filter_map(|s| s.wall_s_to_threshold)),
            median_time_total_s_to_threshold: median(
                seeds().filter_map(|s| s.time_total_s_to_threshold),
            ),
            median_num_env_steps_to_threshold: median(
                seeds().filter_map(|s| s.num_env_steps_to_threshold.map(|n| n as f64)),
            ),
            seeds_stayed: count(|s| s.stayed),
            median_window_min_episode_return_mean: median(
                seeds().filter_map(|s| s.window_min_episode_return_mean),
            ),
            min_window_min_episode_return_mean: min_of(
                seeds().filter_map(|s| s.window_min_episode_return_mean),
            ),
            median_eval_episode_return_mean: median(
                seeds().filter_map(|s| s.eval_episode_return_mean),
            ),
            min_eval_episode_return_mean: min_of(
                seeds().filter_map(|s| s.eval_episode_return_mean),
            ),
            seeds_passed: count(|s| s.passed),
        }
    });
    BenchReport {
        benchmark: format!("{env} to episode_return_mean >= stop_reward"),
        stop_reward: options.stop_reward,
        seeds: options.seeds,
        seeds_solved: trains().filter(|t| t.reached_stop_reward).count(),
        median_wall_s_from_process_start: median(runs.iter().map(|r| r.wall_s_from_process_start)),
        median_num_env_steps_sampled: median(trains().map(|t| t.num_env_steps_sampled as f64)),
        median_peak_rss_mib: median(trains().filter_map(|t| t.peak_rss_mib)),
        max_peak_rss_mib: trains().filter_map(|t| t.peak_rss_mib).fold(f64::NAN, f64::max),
        stability,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(time_total_s: f64, steps: u64, ret: f64) -> Row {
        Row { time_total_s, steps, episode_return_mean: Some(ret) }
    }

    fn window(stay_s: Option<f64>, stay_steps: Option<u64>) -> Window {
        Window { threshold: 450.0, stay_s, stay_steps, stay_min: 400.0 }
    }

    #[test]
    fn the_window_starts_at_the_first_row_at_the_threshold_and_ends_whichever_comes_first() {
        let rows = [
            Row { time_total_s: 0.5, steps: 1_000, episode_return_mean: None },
            row(1.0, 10_000, 200.0),
            row(2.0, 20_000, 460.0),
            row(3.0, 30_000, 410.0),
            row(4.0, 40_000, 390.0),
            row(5.0, 50_000, 500.0),
        ];
        // By steps: 20k steps after the first row at 450 end at row 4 (40k), so 390 counts.
        let stats = window(Some(60.0), Some(20_000)).stats(&rows);
        assert_eq!(stats.first, Some(rows[2]));
        assert_eq!(
            (stats.min, stats.iterations, stats.covered, stats.stayed),
            (Some(390.0), 3, true, false)
        );
        // By time: 1 s after it ends at row 3, before the dip.
        let stats = window(Some(1.0), Some(1_000_000)).stats(&rows);
        assert_eq!(
            (stats.min, stats.iterations, stats.covered, stats.stayed),
            (Some(410.0), 2, true, true)
        );
        // A window longer than the run is not covered, so the seed did not stay.
        let stats = window(Some(60.0), None).stats(&rows);
        assert_eq!((stats.min, stats.covered, stats.stayed), (Some(390.0), false, false));
        assert!(!window(Some(60.0), None).covered(&rows));
        assert!(window(None, Some(30_000)).covered(&rows));
    }

    #[test]
    fn a_run_that_never_reaches_the_threshold_has_no_window() {
        let rows = [row(1.0, 10_000, 100.0), row(2.0, 20_000, 449.9)];
        let stats = window(Some(1.0), None).stats(&rows);
        assert_eq!((stats.first, stats.min, stats.stayed), (None, None, false));
        assert!(!window(Some(1.0), None).covered(&rows));
    }

    #[test]
    fn negative_thresholds_work_as_for_acrobot() {
        let w = Window { threshold: -100.0, stay_s: Some(2.0), stay_steps: None, stay_min: -120.0 };
        let rows =
            [row(1.0, 1, -300.0), row(2.0, 2, -95.0), row(3.0, 3, -110.0), row(4.0, 4, -90.0)];
        let stats = w.stats(&rows);
        assert_eq!((stats.min, stats.stayed), (Some(-110.0), true));
    }

    #[test]
    fn the_follower_reads_only_complete_lines(
    ) -> std::result::Result<(), Box<dyn std::error::Error>> {
        use std::io::Write as _;
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("result.json");
        let mut follower = Follower::new(path.clone());
        assert!(follower.poll()?.is_empty(), "no file yet");
        let mut file = std::fs::File::create(&path)?;
        write!(file, "{{\"time_total_s\": 1.0, \"num_env_steps_sampled\": 10, \"episode_return_mean\": null}}\n{{\"time_total_s\": 2.0, ")?;
        file.flush()?;
        assert_eq!(follower.poll()?.len(), 1);
        writeln!(file, "\"num_env_steps_sampled\": 20, \"episode_return_mean\": 12.5}}")?;
        file.flush()?;
        assert_eq!(
            follower.poll()?,
            &[Row { time_total_s: 1.0, steps: 10, episode_return_mean: None }, row(2.0, 20, 12.5)]
        );
        Ok(())
    }

    /// A seed that reached the threshold, as `impala train --summary-json` reports it.
    fn solved(wall_s: f64, steps: u64, peak_rss_mib: f64) -> SeedRecord {
        let train = TrainSummary {
            seed: Some(0),
            stop_reason: "episode_return_mean 451.00 >= 450".into(),
            reached_stop_reward: true,
            wall_s,
            time_total_s: wall_s,
            training_iteration: 10,
            num_env_steps_sampled: steps,
            num_env_steps_trained: steps,
            episode_return_mean: Some(451.0),
            peak_rss_mib: Some(peak_rss_mib),
            checkpoint: "run/checkpoint_000010".into(),
            best_checkpoint: None,
            best_checkpoint_score: None,
            profile: None,
        };
        SeedRecord { train, wall_s_from_process_start: wall_s, stability: None }
    }

    fn options(stability: Option<StabilityOptions>) -> BenchOptions {
        BenchOptions {
            seeds: 2,
            stop_reward: 450.0,
            stop_time: 300.0,
            source: ConfigSource::default(),
            profile: false,
            runs_dir: None,
            stability,
        }
    }

    #[test]
    fn the_summary_keeps_the_first_forms_keys() -> std::result::Result<(), serde_json::Error> {
        let runs = [solved(3.0, 100, 130.0), solved(5.0, 300, 140.0)];
        let first = serde_json::to_value(report(&runs, &options(None), "CartPole-v1"))?;
        let keys: Vec<&str> =
            first.as_object().map(|o| o.keys().map(String::as_str).collect()).unwrap_or_default();
        assert_eq!(keys.len(), 8, "{first}");
        assert_eq!(first["benchmark"], "CartPole-v1 to episode_return_mean >= stop_reward");
        assert_eq!(first["seeds_solved"], 2);
        let stability = StabilityOptions {
            stay_s: Some(60.0),
            stay_steps: None,
            stay_min: None,
            eval_episodes: 20,
            eval_min: None,
        };
        let second = serde_json::to_value(report(&runs, &options(Some(stability)), "CartPole-v1"))?;
        for key in keys {
            assert_eq!(second[key], first[key], "{key}");
        }
        assert_eq!(second["stay_min"], 450.0);
        assert_eq!(second["seeds_stayed"], 0);
        Ok(())
    }
}
