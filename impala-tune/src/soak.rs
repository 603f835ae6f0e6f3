//! The memory soak (`impala bench-memory`): trains with very short iterations
//! ([`ITERATION_OVERRIDE`], about 100 results a second, so a long run's worth of per-iteration
//! bookkeeping happens in minutes) for a given time and measures the growth of resident memory.
//! Memory must stay flat: the target is under 5 MiB of growth over 30 minutes after the first
//! minute's warm-up. Not a CI test: run it by hand, e.g. `impala bench-memory --minutes 30`.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use impala::config::ValidatedConfig;
use impala::run::{RunDir, RunEvent, RunOptions, RunTarget};
use impala::{peak_rss_mib, ConfigSource, Impala, StopCriteria};
use serde::Serialize;

use crate::Result;

/// The override the soak's config gets first (a later one may change it).
pub const ITERATION_OVERRIDE: &str = "min_time_s_per_iteration=0.01";

/// The soak's config: `source` with [`ITERATION_OVERRIDE`] applied before its own overrides
/// (which may change it), validated, and its warnings.
///
/// ```
/// let (config, _warnings) = impala_tune::soak::soak_config(impala::ConfigSource::default())?;
/// assert_eq!(config.config().min_time_s_per_iteration, 0.01);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn soak_config(mut source: ConfigSource) -> Result<(ValidatedConfig, Vec<String>)> {
    source.set.insert(0, ITERATION_OVERRIDE.into());
    Ok(source.load()?)
}

/// How long to soak, and how to measure.
#[derive(Debug, Clone, PartialEq)]
pub struct SoakOptions {
    /// How long to train, in minutes.
    pub minutes: f64,
    /// Growth is measured from this many seconds in (allocator and libtorch warm-up).
    pub warmup_s: f64,
    /// Seconds between resident-memory samples.
    pub sample_every_s: f64,
    /// Save (and prune) checkpoints every N iterations.
    pub checkpoint_every: u64,
    /// The run folder (`None`: a temporary folder, removed at the end unless `keep_run_dir`).
    pub run_dir: Option<PathBuf>,
    /// Keep the temporary run folder.
    pub keep_run_dir: bool,
}

/// What the soak measured (printed as one JSON object).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemorySoak {
    /// What was measured.
    pub benchmark: &'static str,
    /// Minutes trained.
    pub minutes: f64,
    /// Iterations trained.
    pub iterations: u64,
    /// Iterations a second.
    pub iterations_per_s: f64,
    /// Why training stopped.
    pub stop_reason: String,
    /// The warm-up, seconds.
    pub warmup_s: f64,
    /// Resident memory after the first iteration, MiB.
    pub rss_mib_after_first_iteration: f64,
    /// Resident memory at the end of the warm-up, MiB.
    pub rss_mib_after_warmup: f64,
    /// Resident memory at the end, MiB.
    pub rss_mib_at_end: f64,
    /// Growth since the warm-up, MiB.
    pub growth_mib_after_warmup: f64,
    /// Growth since the first iteration, MiB.
    pub growth_mib_since_first_iteration: f64,
    /// The least-squares slope after the warm-up, MiB an hour.
    pub slope_mib_per_hour_after_warmup: f64,
    /// What memory must do.
    pub target: &'static str,
    /// The process's peak resident memory, MiB.
    pub peak_rss_mib: f64,
    /// The size of `result.json`, MiB.
    pub result_json_mib: f64,
    /// The size of `progress.csv`, MiB.
    pub progress_csv_mib: f64,
    /// `[seconds, MiB]` samples.
    pub samples_s_mib: Vec<[f64; 2]>,
}

/// Resident memory of this process now, MiB (`VmRSS`); `NaN` where `/proc` is unavailable.
fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

/// Least-squares slope of `(t, y)` points, per unit of `t`.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if points.len() < 2 {
        return f64::NAN;
    }
    let (mt, my) = points.iter().fold((0.0, 0.0), |(a, b), (t, y)| (a + t / n, b + y / n));
    let (mut num, mut den) = (0.0, 0.0);
    for (t, y) in points {
        num += (t - mt) * (y - my);
        den += (t - mt) * (t - mt);
    }
    if den > 0.0 {
        num / den
    } else {
        f64::NAN
    }
}

/// Trains `config` (from [`soak_config`]) in this process for
/// `options.minutes`, or until `interrupt` is set, sampling resident memory.
pub fn memory_soak(
    config: ValidatedConfig,
    options: &SoakOptions,
    interrupt: Arc<AtomicBool>,
) -> Result<MemorySoak> {
    let (run_dir, scratch) = match &options.run_dir {
        Some(dir) => (dir.clone(), false),
        None => {
            (std::env::temp_dir().join(format!("impala-memory-soak-{}", std::process::id())), true)
        }
    };
    let duration_s = options.minutes * 60.0;
    let warmup_s = options.warmup_s.min(duration_s / 2.0);
    let mut algo = Impala::new(config)?;
    algo.set_interrupt_flag(Arc::clone(&interrupt));
    let dir = RunDir::open(&RunTarget::New(run_dir.clone()))?;
    let run_options = RunOptions {
        stop: StopCriteria { time_total_s: Some(duration_s), ..Default::default() },
        checkpoint_every: options.checkpoint_every,
        ..Default::default()
    };
    let started = Instant::now();
    let mut samples: Vec<(f64, f64)> = Vec::new();
    let mut next_sample = 0.0;
    let mut iterations = 0u64;
    let summary = impala::run::run(&mut algo, &dir, &run_options, &interrupt, |event| {
        if let RunEvent::Result(result) = event {
            iterations = result.training_iteration;
            let t = started.elapsed().as_secs_f64();
            if t >= next_sample {
                samples.push((t, rss_mib()));
                next_sample = t + options.sample_every_s;
            }
        }
    });
    let end = (started.elapsed().as_secs_f64(), rss_mib());
    samples.push(end);
    let summary = summary?;
    algo.stop()?;
    let size_mib = |name: &str| {
        std::fs::metadata(run_dir.join(name)).map_or(f64::NAN, |m| m.len() as f64 / 1048576.0)
    };
    let after_warmup: Vec<(f64, f64)> =
        samples.iter().copied().filter(|(t, _)| *t >= warmup_s).collect();
    let at_warmup = after_warmup.first().copied().unwrap_or(end);
    let first = samples.first().copied().unwrap_or(end);
    let report = MemorySoak {
        benchmark: "resident memory while training with min_time_s_per_iteration=0.01",
        minutes: end.0 / 60.0,
        iterations,
        iterations_per_s: iterations as f64 / end.0.max(1e-9),
        stop_reason: summary.stop_reason,
        warmup_s,
        rss_mib_after_first_iteration: first.1,
        rss_mib_after_warmup: at_warmup.1,
        rss_mib_at_end: end.1,
        growth_mib_after_warmup: end.1 - at_warmup.1,
        growth_mib_since_first_iteration: end.1 - first.1,
        slope_mib_per_hour_after_warmup: slope(&after_warmup) * 3600.0,
        target: "growth_mib_after_warmup < 5 over 30 minutes",
        peak_rss_mib: peak_rss_mib(),
        result_json_mib: size_mib(impala::RESULT_FILE),
        progress_csv_mib: size_mib(impala::PROGRESS_FILE),
        samples_s_mib: samples
            .iter()
            .map(|(t, m)| [(t * 10.0).round() / 10.0, (m * 100.0).round() / 100.0])
            .collect(),
    };
    drop(dir);
    if scratch && !options.keep_run_dir {
        let _ = std::fs::remove_dir_all(&run_dir);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_of_a_line_and_of_too_few_points() {
        let pts: Vec<(f64, f64)> =
            (0..10).map(|i| (f64::from(i), 2.0 * f64::from(i) + 1.0)).collect();
        assert!((slope(&pts) - 2.0).abs() < 1e-12);
        assert!(slope(&pts[..1]).is_nan());
        assert!(rss_mib() > 0.0);
    }
}
