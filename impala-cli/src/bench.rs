//! `impala bench-cartpole`: the time-to-solve benchmark, and with `--stay-s`/`--stay-steps` a
//! stability benchmark. Each seed runs as a fresh `impala train` process, so wall-clock includes
//! process start-up and peak memory is the process's own (`VmHWM`, as `getrusage` reports it).
//!
//! * Without the stability options each seed is `impala train --stop-reward R --seed S
//!   --summary-json`, stopping at the threshold (the benchmark's first form; its output keys are
//!   unchanged).
//! * With them, each seed trains past the threshold: the benchmark follows the child's
//!   `result.json` and, once the window after the first iteration at the threshold is covered
//!   (`--stay-s` seconds of training or `--stay-steps` env steps, whichever comes first),
//!   interrupts it (SIGINT: the child saves a final checkpoint and exits). It reports the first
//!   time and step count at the threshold, the lowest `episode_return_mean` in the window,
//!   whether it stayed at or above `--stay-min`, and the greedy evaluation of the final
//!   checkpoint (`impala evaluate --checkpoint RUN --episodes N`, also a fresh process).
//!
//! Any config works (Acrobot, Pendulum): the threshold is `--stop-reward`.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde_json::{json, Value};

use crate::cli::BenchArgs;

/// The stability part of `bench-cartpole` (flattened into [`BenchArgs`]). Off unless
/// `--stay-s` or `--stay-steps` is given.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct StabilityArgs {
    /// Train on after first reaching --stop-reward: watch episode_return_mean for this many
    /// seconds of training (or --stay-steps env steps, whichever comes first).
    #[arg(long, value_name = "SECONDS", value_parser = positive)]
    pub stay_s: Option<f64>,
    /// Watch this many env steps after first reaching --stop-reward (or --stay-s seconds,
    /// whichever comes first).
    #[arg(long, value_name = "STEPS", value_parser = clap::value_parser!(u64).range(1..))]
    pub stay_steps: Option<u64>,
    /// A seed stayed solved when episode_return_mean never fell below this in the window
    /// (default: --stop-reward).
    #[arg(long, value_name = "RETURN", allow_negative_numbers = true)]
    pub stay_min: Option<f64>,
    /// Greedy evaluation episodes of each seed's final checkpoint (0: no evaluation).
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub eval_episodes: usize,
    /// A seed passes only when its final checkpoint's evaluation reaches this too.
    #[arg(long, value_name = "RETURN", allow_negative_numbers = true)]
    pub eval_min: Option<f64>,
    /// Keep each seed's run folder here (`DIR/seedS`), e.g. for `impala plot`; by default they
    /// go to a temporary folder that is removed at the end.
    #[arg(long, value_name = "DIR")]
    pub runs_dir: Option<PathBuf>,
}

impl Default for StabilityArgs {
    fn default() -> Self {
        StabilityArgs {
            stay_s: None,
            stay_steps: None,
            stay_min: None,
            eval_episodes: 20,
            eval_min: None,
            runs_dir: None,
        }
    }
}

impl StabilityArgs {
    /// Whether the stability benchmark is asked for.
    fn enabled(&self) -> bool {
        self.stay_s.is_some() || self.stay_steps.is_some()
    }
}

fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("`{s}` is not a positive number of seconds")),
    }
}

/// Runs the benchmark and prints one JSON line per seed, then a JSON summary with medians.
pub fn bench_cartpole(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    bench(args, &args.stability)
}

/// [`bench_cartpole`] with the stability options.
pub(crate) fn bench(args: &BenchArgs, stability: &StabilityArgs) -> anyhow::Result<ExitCode> {
    let exe =
        std::env::current_exe().context("cannot find the impala executable to run the seeds")?;
    let scratch = std::env::temp_dir().join(format!("impala-bench-{}", std::process::id()));
    let runs_root = stability.runs_dir.clone().unwrap_or_else(|| scratch.clone());
    let mut runs = Vec::new();
    let mut env = None;
    for seed in 0..args.seeds {
        let run_dir = runs_root.join(format!("seed{seed}"));
        if run_dir.exists() {
            bail!("{} already exists; choose another --runs-dir", run_dir.display());
        }
        let summary = if stability.enabled() {
            stability_seed(&exe, args, stability, seed, &run_dir)?
        } else {
            threshold_seed(&exe, args, seed, &run_dir)?
        };
        env = env.or_else(|| run_env(&run_dir));
        println!("{summary}");
        runs.push(summary);
    }
    if stability.runs_dir.is_none() {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    let env = env.unwrap_or_else(|| "CartPole-v1".into());
    let report = report(&runs, args.seeds, args.stop_reward, stability, &env);
    println!("{report}");
    let passed = if stability.enabled() {
        report["seeds_passed"].as_u64()
    } else {
        report["seeds_solved"].as_u64()
    };
    Ok(if passed == Some(args.seeds) { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The `impala train` command for one seed, without stop criteria.
fn train_command(exe: &Path, args: &BenchArgs, seed: u64, run_dir: &Path) -> Command {
    let mut cmd = Command::new(exe);
    cmd.arg("train");
    if let Some(config) = &args.config {
        cmd.arg(config);
    } else {
        cmd.args(["--env", "CartPole-v1"]);
    }
    cmd.args(["--seed", &seed.to_string()])
        .args(["--stop-time", &args.stop_time.to_string()])
        .arg("--run-dir")
        .arg(run_dir)
        .args(["--quiet", "--summary-json"]);
    if args.profile {
        cmd.arg("--profile");
    }
    for o in &args.overrides {
        cmd.args(["--set", o]);
    }
    cmd
}

/// The first form: train to the threshold and stop there.
fn threshold_seed(
    exe: &Path,
    args: &BenchArgs,
    seed: u64,
    run_dir: &Path,
) -> anyhow::Result<Value> {
    let mut cmd = train_command(exe, args, seed, run_dir);
    cmd.arg(format!("--stop-reward={}", args.stop_reward));
    let started = Instant::now();
    let out = cmd.stderr(Stdio::inherit()).output().context("cannot start `impala train`")?;
    let wall_s = started.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!("seed {seed}: `impala train` failed ({})", out.status);
    }
    let mut summary = last_json_line(&out.stdout)
        .with_context(|| format!("seed {seed}: unreadable `impala train` summary"))?;
    summary["wall_s_from_process_start"] = wall_s.into();
    Ok(summary)
}

/// The second form: train past the threshold, interrupt once the window is covered, evaluate.
fn stability_seed(
    exe: &Path,
    args: &BenchArgs,
    stability: &StabilityArgs,
    seed: u64,
    run_dir: &Path,
) -> anyhow::Result<Value> {
    // The child's stderr (warnings, its interrupt notice) goes beside its run folder.
    let log_path = run_dir.with_extension("stderr.log");
    if let Some(parent) = log_path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("cannot create {}", log_path.display()))?;
    let window = Window::new(args.stop_reward, stability);
    let started = Instant::now();
    let mut child = train_command(exe, args, seed, run_dir)
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .context("cannot start `impala train`")?;
    let mut follower = Follower::new(run_dir.join("result.json"));
    let mut wall_s_to_threshold = None;
    let mut interrupted = false;
    let status = loop {
        if let Some(status) = child.try_wait().context("cannot wait for `impala train`")? {
            break status;
        }
        std::thread::sleep(Duration::from_millis(50));
        let rows = follower.poll()?;
        if wall_s_to_threshold.is_none() && window.first(rows).is_some() {
            wall_s_to_threshold = Some(started.elapsed().as_secs_f64());
        }
        if !interrupted && window.covered(rows) {
            interrupt(&mut child)?;
            interrupted = true;
        }
    };
    let wall_s = started.elapsed().as_secs_f64();
    let mut stdout = Vec::new();
    if let Some(mut out) = child.stdout.take() {
        out.read_to_end(&mut stdout).context("cannot read `impala train`'s summary")?;
    }
    // An interrupted child exits with 128 + SIGINT after saving its checkpoint.
    if !(status.success() || interrupted && status.code() == Some(130)) {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        bail!("seed {seed}: `impala train` failed ({status}): {}", log.trim());
    }
    let mut summary = last_json_line(&stdout)
        .with_context(|| format!("seed {seed}: unreadable `impala train` summary"))?;
    follower.poll()?;
    let stats = window.stats(follower.rows());
    summary["wall_s_from_process_start"] = wall_s.into();
    summary["wall_s_to_threshold"] = wall_s_to_threshold.into();
    summary["reached_stop_reward"] = stats.first.is_some().into();
    if interrupted {
        summary["stop_reason"] = "stability window covered (interrupted)".into();
    }
    for (key, value) in stats.to_json() {
        summary[key] = value;
    }
    let eval = if stability.eval_episodes > 0 && summary["checkpoint"].is_string() {
        Some(evaluate(exe, run_dir, stability.eval_episodes, seed)?)
    } else {
        None
    };
    summary["eval_episodes"] = stability.eval_episodes.into();
    summary["eval_episode_return_mean"] = eval.into();
    let eval_ok = stability.eval_min.is_none_or(|min| eval.is_some_and(|e| e >= min));
    summary["passed"] = (stats.stayed && eval_ok).into();
    Ok(summary)
}

/// Asks the child to save a checkpoint and exit, as Ctrl-C does.
fn interrupt(child: &mut Child) -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        let pid = i32::try_from(child.id())
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .context("the child's process id is out of range")?;
        rustix::process::kill_process(pid, rustix::process::Signal::INT)
            .context("cannot interrupt `impala train`")?;
    }
    #[cfg(not(unix))]
    child.kill().context("cannot stop `impala train`")?;
    Ok(())
}

/// `impala evaluate --checkpoint RUN --episodes N`: the greedy episode_return_mean.
fn evaluate(exe: &Path, run_dir: &Path, episodes: usize, seed: u64) -> anyhow::Result<f64> {
    let out = Command::new(exe)
        .arg("evaluate")
        .arg("--checkpoint")
        .arg(run_dir)
        .args(["--episodes", &episodes.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .context("cannot start `impala evaluate`")?;
    if !out.status.success() {
        bail!("seed {seed}: `impala evaluate` failed ({})", out.status);
    }
    let eval = last_json_line(&out.stdout)
        .with_context(|| format!("seed {seed}: unreadable `impala evaluate` output"))?;
    eval["episode_return_mean"]
        .as_f64()
        .with_context(|| format!("seed {seed}: `impala evaluate` printed no episode_return_mean"))
}

fn last_json_line(stdout: &[u8]) -> anyhow::Result<Value> {
    let stdout = String::from_utf8_lossy(stdout);
    let line = stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
    serde_json::from_str(line).with_context(|| format!("not JSON: `{line}`"))
}

/// The env of a run folder (its `params.json`).
fn run_env(run_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(run_dir.join("params.json")).ok()?;
    let params: Value = serde_json::from_str(&text).ok()?;
    params["env"].as_str().map(str::to_string)
}

/// What the stability benchmark reads of one `result.json` line.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Row {
    time_total_s: f64,
    steps: u64,
    /// `None` until an episode finished.
    episode_return_mean: Option<f64>,
}

impl Row {
    fn from_json(row: &Value) -> Option<Row> {
        let steps =
            row["num_env_steps_sampled"].as_u64().or_else(|| row["timesteps_total"].as_u64());
        Some(Row {
            time_total_s: row["time_total_s"].as_f64()?,
            steps: steps?,
            episode_return_mean: row["episode_return_mean"].as_f64().filter(|r| r.is_finite()),
        })
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
    fn poll(&mut self) -> anyhow::Result<&[Row]> {
        let mut file = match std::fs::File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(&self.rows),
            Err(e) => {
                return Err(e).with_context(|| format!("cannot read {}", self.path.display()))
            }
        };
        file.seek(SeekFrom::Start(self.offset))?;
        let mut new = Vec::new();
        file.read_to_end(&mut new)
            .with_context(|| format!("cannot read {}", self.path.display()))?;
        self.offset += new.len() as u64;
        self.partial.extend_from_slice(&new);
        while let Some(end) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            if line.trim().is_empty() {
                continue;
            }
            let value: Value = serde_json::from_str(&line)
                .with_context(|| format!("{}: a line is not JSON", self.path.display()))?;
            self.rows.extend(Row::from_json(&value));
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
    fn new(threshold: f64, stability: &StabilityArgs) -> Window {
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

impl WindowStats {
    fn to_json(self) -> [(&'static str, Value); 6] {
        [
            ("time_total_s_to_threshold", self.first.map(|r| r.time_total_s).into()),
            ("num_env_steps_to_threshold", self.first.map(|r| r.steps).into()),
            ("window_iterations", self.iterations.into()),
            ("window_covered", self.covered.into()),
            ("window_min_episode_return_mean", self.min.into()),
            ("stayed", self.stayed.into()),
        ]
    }
}

/// The median of the numbers under `key` (the upper one of an even count).
fn median(runs: &[Value], key: &str) -> Option<f64> {
    let mut v: Vec<f64> = runs.iter().filter_map(|r| r[key].as_f64()).collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

fn min_of(runs: &[Value], key: &str) -> Option<f64> {
    runs.iter().filter_map(|r| r[key].as_f64()).reduce(f64::min)
}

/// The summary line: the first form's keys always, the stability keys when asked for.
fn report(
    runs: &[Value],
    seeds: u64,
    stop_reward: f64,
    stability: &StabilityArgs,
    env: &str,
) -> Value {
    let count = |key: &str| runs.iter().filter(|r| r[key].as_bool() == Some(true)).count();
    let mut report = json!({
        "benchmark": format!("{env} to episode_return_mean >= stop_reward"),
        "stop_reward": stop_reward,
        "seeds": seeds,
        "seeds_solved": count("reached_stop_reward"),
        "median_wall_s_from_process_start": median(runs, "wall_s_from_process_start"),
        "median_num_env_steps_sampled": median(runs, "num_env_steps_sampled"),
        "median_peak_rss_mib": median(runs, "peak_rss_mib"),
        "max_peak_rss_mib": runs.iter().filter_map(|r| r["peak_rss_mib"].as_f64()).fold(f64::NAN, f64::max),
    });
    if stability.enabled() {
        let window = Window::new(stop_reward, stability);
        let extra = json!({
            "stay_s": stability.stay_s,
            "stay_steps": stability.stay_steps,
            "stay_min": window.stay_min,
            "eval_episodes": stability.eval_episodes,
            "eval_min": stability.eval_min,
            "median_wall_s_to_threshold": median(runs, "wall_s_to_threshold"),
            "median_time_total_s_to_threshold": median(runs, "time_total_s_to_threshold"),
            "median_num_env_steps_to_threshold": median(runs, "num_env_steps_to_threshold"),
            "seeds_stayed": count("stayed"),
            "median_window_min_episode_return_mean": median(runs, "window_min_episode_return_mean"),
            "min_window_min_episode_return_mean": min_of(runs, "window_min_episode_return_mean"),
            "median_eval_episode_return_mean": median(runs, "eval_episode_return_mean"),
            "min_eval_episode_return_mean": min_of(runs, "eval_episode_return_mean"),
            "seeds_passed": count("passed"),
        });
        if let (Value::Object(report), Value::Object(extra)) = (&mut report, extra) {
            report.extend(extra);
        }
    }
    report
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
    fn the_follower_reads_only_complete_lines() -> anyhow::Result<()> {
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

    #[test]
    fn the_summary_keeps_the_first_forms_keys() {
        let runs = [
            json!({"reached_stop_reward": true, "wall_s_from_process_start": 3.0, "num_env_steps_sampled": 100, "peak_rss_mib": 130.0}),
            json!({"reached_stop_reward": true, "wall_s_from_process_start": 5.0, "num_env_steps_sampled": 300, "peak_rss_mib": 140.0}),
        ];
        let first = report(&runs, 2, 450.0, &StabilityArgs::default(), "CartPole-v1");
        let keys: Vec<&str> =
            first.as_object().map(|o| o.keys().map(String::as_str).collect()).unwrap_or_default();
        assert_eq!(keys.len(), 8, "{first}");
        assert_eq!(first["benchmark"], "CartPole-v1 to episode_return_mean >= stop_reward");
        assert_eq!(first["seeds_solved"], 2);
        let stability = StabilityArgs { stay_s: Some(60.0), ..StabilityArgs::default() };
        let second = report(&runs, 2, 450.0, &stability, "CartPole-v1");
        for key in keys {
            assert_eq!(second[key], first[key], "{key}");
        }
        assert_eq!(second["stay_min"], 450.0);
        assert_eq!(second["seeds_stayed"], 0);
    }
}
