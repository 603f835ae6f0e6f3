//! `impala bench-cartpole`: the time-to-solve benchmark. Each seed runs as a fresh
//! `impala train --stop-reward R --seed S --summary-json` process, so wall-clock includes process
//! start-up and peak memory is the process's own (`VmHWM`, as `getrusage` reports it).

use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::Context as _;

use crate::cli::BenchArgs;

/// Runs the benchmark and prints one JSON line per seed, then a JSON summary with medians.
pub fn bench_cartpole(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    let exe =
        std::env::current_exe().context("cannot find the impala executable to run the seeds")?;
    let scratch = std::env::temp_dir().join(format!("impala-bench-{}", std::process::id()));
    let mut runs = Vec::new();
    for seed in 0..args.seeds {
        let run_dir = scratch.join(format!("seed{seed}"));
        let mut cmd = Command::new(&exe);
        cmd.arg("train");
        if let Some(config) = &args.config {
            cmd.arg(config);
        } else {
            cmd.args(["--env", "CartPole-v1"]);
        }
        cmd.args(["--seed", &seed.to_string()])
            .args(["--stop-reward", &args.stop_reward.to_string()])
            .args(["--stop-time", &args.stop_time.to_string()])
            .arg("--run-dir")
            .arg(&run_dir)
            .args(["--quiet", "--summary-json"]);
        for o in &args.overrides {
            cmd.args(["--set", o]);
        }
        let started = Instant::now();
        let out = cmd.stderr(Stdio::inherit()).output().context("cannot start `impala train`")?;
        let wall_s = started.elapsed().as_secs_f64();
        if !out.status.success() {
            anyhow::bail!("seed {seed}: `impala train` failed ({})", out.status);
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout.lines().last().unwrap_or_default();
        let mut summary: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("seed {seed}: unreadable summary `{line}`"))?;
        summary["wall_s_from_process_start"] = wall_s.into();
        println!("{summary}");
        runs.push(summary);
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let median = |key: &str| {
        let mut v: Vec<f64> = runs.iter().filter_map(|r| r[key].as_f64()).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    let solved = runs.iter().filter(|r| r["reached_stop_reward"].as_bool() == Some(true)).count();
    let report = serde_json::json!({
        "benchmark": "CartPole-v1 to episode_return_mean >= stop_reward",
        "stop_reward": args.stop_reward,
        "seeds": args.seeds,
        "seeds_solved": solved,
        "median_wall_s_from_process_start": median("wall_s_from_process_start"),
        "median_num_env_steps_sampled": median("num_env_steps_sampled"),
        "median_peak_rss_mib": median("peak_rss_mib"),
        "max_peak_rss_mib": runs.iter().filter_map(|r| r["peak_rss_mib"].as_f64()).fold(f64::NAN, f64::max),
    });
    println!("{report}");
    Ok(if solved == runs.len() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
