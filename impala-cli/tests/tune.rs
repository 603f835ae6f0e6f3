//! `impala tune`: a 2x2 grid end to end, reproducible `choice` draws, clear errors for bad
//! search spaces, a failing trial beside good ones, and SIGTERM reaching every trial.

use std::fs;
use std::path::Path;

use serde_json::Value;

use crate::common::{entries, impala, TestResult};
use crate::runs::{signal, spawn, wait_for_results};

/// A CartPole-v1 config whose trials take about a second each: one env runner (2 CPUs per
/// trial with the driver), 0.1 s iterations, a small network.
const BASE: &str = r#"
env = "CartPole-v1"
num_env_runners = 1
num_envs_per_env_runner = 4
rollout_fragment_length = 10
train_batch_size = 80
min_time_s_per_iteration = 0.1
seed = 1
"#;

fn write(dir: &Path, name: &str, text: &str) -> Result<(), std::io::Error> {
    fs::write(dir.join(name), text)
}

fn summary(experiment: &Path) -> Result<Value, Box<dyn std::error::Error>> {
    Ok(serde_json::from_str(&fs::read_to_string(experiment.join("summary.json"))?)?)
}

fn trials(summary: &Value) -> Vec<Value> {
    summary["trials"].as_array().cloned().unwrap_or_default()
}

#[test]
fn a_2x2_grid_runs_four_trials_and_names_the_best() -> TestResult {
    let dir = tempfile::tempdir()?;
    let config = format!(
        "{BASE}lr = {{grid_search = [0.001, 0.0005]}}\n\
         [model]\nfcnet_hiddens = {{grid_search = [[16], [32]]}}\n"
    );
    write(dir.path(), "grid.toml", &config)?;
    let args = [
        "tune",
        "grid.toml",
        "--stop-iters",
        "1",
        "--output-dir",
        "out",
        "--name",
        "grid",
        "--cpus",
        "4",
    ];
    let run = impala(dir.path(), &args)?;
    assert!(run.success, "{}\n{}", run.stdout, run.stderr);
    let experiment = dir.path().join("out/grid");
    // Tune's order: grid keys sorted by path (`lr` < `model.fcnet_hiddens`), the first fastest.
    let names = [
        "trial_000_lr=0.001,fcnet_hiddens=16",
        "trial_001_lr=0.0005,fcnet_hiddens=16",
        "trial_002_lr=0.001,fcnet_hiddens=32",
        "trial_003_lr=0.0005,fcnet_hiddens=32",
    ];
    let mut want: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    want.insert(0, "summary.json".into());
    assert_eq!(entries(&experiment), want);
    for name in names {
        let trial = experiment.join(name);
        for file in ["trial.json", "params.json", "result.json", "stdout.log", "stderr.log"] {
            assert!(trial.join(file).is_file(), "no {file} in {}", trial.display());
        }
        assert!(trial.join("checkpoint_000001").is_dir(), "{:?}", entries(&trial));
    }
    // Each trial's config holds its values.
    let params: Value =
        serde_json::from_str(&fs::read_to_string(experiment.join(names[3]).join("params.json"))?)?;
    assert_eq!(
        (params["lr"].as_f64(), &params["model"]["fcnet_hiddens"]),
        (Some(0.0005), &serde_json::json!([32]))
    );

    let summary = summary(&experiment)?;
    let trials = trials(&summary);
    assert_eq!(trials.len(), 4);
    let scores: Vec<f64> = trials.iter().filter_map(|t| t["metric"].as_f64()).collect();
    assert_eq!(scores.len(), 4, "{summary}");
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "not sorted best first: {scores:?}");
    assert!(trials.iter().all(|t| t["status"] == "ok" && t["iterations"] == 1), "{summary}");
    let best = &summary["best"];
    assert_eq!(best["name"], trials[0]["name"]);
    let checkpoint = best["checkpoint"].as_str().ok_or("no best checkpoint")?;
    assert!(dir.path().join(checkpoint).is_dir(), "best checkpoint {checkpoint} is missing");
    let best_name = best["name"].as_str().ok_or("no best name")?;
    assert!(run.stdout.contains(&format!("best trial: {best_name}")), "{}", run.stdout);
    assert!(run.stdout.contains(checkpoint), "{}", run.stdout);
    // The table lists every trial with its varied params.
    let table: Vec<&str> = run.stdout.lines().filter(|l| l.starts_with("trial_")).collect();
    assert_eq!(table.len(), 4, "{}", run.stdout);
    assert!(run.stdout.contains("model.fcnet_hiddens"), "{}", run.stdout);
    Ok(())
}

/// The `trial_...` lines of a dry run.
fn dry_run_trials(dir: &Path, args: &[&str]) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let run = impala(dir, args)?;
    assert!(run.success, "{}\n{}", run.stdout, run.stderr);
    Ok(run.stdout.lines().filter(|l| l.starts_with("trial_")).map(String::from).collect())
}

#[test]
fn choice_with_num_samples_is_reproducible_by_its_seed() -> TestResult {
    let dir = tempfile::tempdir()?;
    let config = "env: CartPole-v1\n\
                  num_env_runners: 1\n\
                  lr:\n  grid_search: [0.001, 0.0005]\n\
                  entropy_coeff:\n  choice: [0.0, 0.001, 0.01, 0.02, 0.05]\n";
    write(dir.path(), "choice.yaml", config)?;
    let args = ["tune", "choice.yaml", "--num-samples", "3", "--search-seed", "7", "--dry-run"];
    let first = dry_run_trials(dir.path(), &args)?;
    assert_eq!(first.len(), 6, "{first:?}");
    assert_eq!(first, dry_run_trials(dir.path(), &args)?);
    // The grid is repeated per sample: lr alternates.
    for (i, line) in first.iter().enumerate() {
        let lr = if i % 2 == 0 { "lr=0.001 " } else { "lr=0.0005 " };
        assert!(line.contains(lr), "{line}");
    }
    let other = ["tune", "choice.yaml", "--num-samples", "3", "--search-seed", "8", "--dry-run"];
    assert_ne!(first, dry_run_trials(dir.path(), &other)?);
    assert!(entries(dir.path()) == ["choice.yaml"], "a dry run wrote {:?}", entries(dir.path()));
    Ok(())
}

#[test]
fn bad_search_spaces_are_clear_errors_and_run_nothing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let cases: [(&str, &[&str]); 5] = [
        ("lr = {grid_search = []}\n", &["`lr`", "empty `grid_search`"]),
        (
            "lr = {grid_search = [0.1], choice = [0.2]}\n",
            &["`lr`", "mixes a search space", "exactly one key"],
        ),
        (
            "[model]\nfcnet_hidens = {grid_search = [[16], [32]]}\n",
            &["all 2 trials", "unknown key `model.fcnet_hidens`", "model.fcnet_hiddens"],
        ),
        ("lr = {grid_search = [0.001, -1.0]}\n", &["1 of 2 trial", "trial_001_lr=-1.0", "`lr`"]),
        ("lr = {uniform = [0.0001, 0.01]}\n", &["`lr`", "`uniform`", "grid_search"]),
    ];
    for (i, (search, needles)) in cases.iter().enumerate() {
        let file = format!("bad{i}.toml");
        write(dir.path(), &file, &format!("{BASE}{search}"))?;
        let run = impala(dir.path(), &["tune", &file, "--output-dir", "out", "--stop-iters", "1"])?;
        run.assert_one_line_error(needles);
    }
    let run = impala(dir.path(), &["tune", "--stop-iters", "1"])?;
    assert!(!run.success && run.stderr.contains("<CONFIG>"), "{}", run.stderr);
    write(dir.path(), "ok.toml", &format!("{BASE}lr = {{grid_search = [0.001]}}\n"))?;
    let run = impala(dir.path(), &["tune", "ok.toml", "--metric", "episode_reward_mean"])?;
    run.assert_one_line_error(&["--metric", "episode_return_mean"]);
    assert!(
        !dir.path().join("out").exists(),
        "an invalid search created {:?}",
        entries(&dir.path().join("out"))
    );
    Ok(())
}

#[test]
fn a_failing_trial_is_reported_and_the_others_complete() -> TestResult {
    let dir = tempfile::tempdir()?;
    // lr = 1e38 makes the first optimizer step overflow: `impala train` exits 1 with the cause.
    let config = format!("{BASE}grad_clip = \"none\"\nlr = {{grid_search = [0.001, 1e38]}}\n");
    write(dir.path(), "fail.toml", &config)?;
    let args = ["tune", "fail.toml", "--stop-iters", "1", "--output-dir", "out", "--name", "f"];
    let run = impala(dir.path(), &args)?;
    assert!(
        run.success,
        "one trial finished, so the search succeeds: {}\n{}",
        run.stdout, run.stderr
    );
    assert!(run.stdout.contains("failed (exit code 1)"), "{}", run.stdout);
    assert!(run.stdout.contains("| error: "), "no stderr tail: {}", run.stdout);
    let summary = summary(&dir.path().join("out/f"))?;
    let trials = trials(&summary);
    let status: Vec<(&str, &str)> = trials
        .iter()
        .map(|t| (t["name"].as_str().unwrap_or(""), t["status"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(status, [("trial_000_lr=0.001", "ok"), ("trial_001_lr=1e+38", "failed")]);
    assert_eq!(trials[1]["exit_code"], 1);
    assert!(trials[1]["stderr_tail"].to_string().contains("non-finite"), "{summary}");
    assert_eq!(summary["best"]["name"], "trial_000_lr=0.001");

    // When every trial fails, the search fails.
    write(
        dir.path(),
        "all.toml",
        &format!("{BASE}grad_clip = \"none\"\nlr = {{grid_search = [1e38]}}\n"),
    )?;
    let run =
        impala(dir.path(), &["tune", "all.toml", "--stop-iters", "1", "--output-dir", "out"])?;
    assert!(!run.success);
    assert!(run.stderr.contains("all 1 trial(s) failed"), "{}", run.stderr);
    Ok(())
}

#[test]
fn sigterm_reaches_every_running_trial_and_they_save() -> TestResult {
    let dir = tempfile::tempdir()?;
    write(
        dir.path(),
        "grid.toml",
        &format!("{BASE}lr = {{grid_search = [0.001, 0.0005, 0.0002]}}\n"),
    )?;
    // Two trials of 2 CPUs fit in 4; the third waits and never starts.
    let args = [
        "tune",
        "grid.toml",
        "--stop-time",
        "60",
        "--output-dir",
        "out",
        "--name",
        "s",
        "--cpus",
        "4",
    ];
    let child = spawn(dir.path(), &args)?;
    let experiment = dir.path().join("out/s");
    wait_for_results(&experiment.join("trial_000_lr=0.001"), 1);
    wait_for_results(&experiment.join("trial_001_lr=0.0005"), 1);
    signal(&child, "TERM")?;
    let out = child.wait_with_output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(143), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let summary = summary(&experiment)?;
    let mut status: Vec<(String, String)> = trials(&summary)
        .iter()
        .map(|t| {
            (t["name"].as_str().unwrap_or("").into(), t["status"].as_str().unwrap_or("").into())
        })
        .collect();
    status.sort();
    let want = [
        ("trial_000_lr=0.001", "interrupted"),
        ("trial_001_lr=0.0005", "interrupted"),
        ("trial_002_lr=0.0002", "not started"),
    ];
    assert_eq!(status, want.map(|(a, b)| (a.to_string(), b.to_string())));
    for name in [want[0].0, want[1].0] {
        let checkpoints: Vec<String> = entries(&experiment.join(name))
            .into_iter()
            .filter(|n| n.starts_with("checkpoint_"))
            .collect();
        assert!(!checkpoints.is_empty(), "{name} saved no checkpoint");
    }
    assert!(!experiment.join(want[2].0).exists());
    assert!(summary["best"]["checkpoint"].is_string(), "{summary}");
    Ok(())
}

/// An RLlib experiment file (`rllib train file X.yaml`'s), with RLlib's old stop key names.
const EXPERIMENT: &str = "cartpole-impala:\n\
                          \x20 env: CartPole-v1\n\
                          \x20 run: IMPALA\n\
                          \x20 stop:\n\
                          \x20   training_iteration: 1\n\
                          \x20   episode_reward_mean: 1000\n\
                          \x20 config:\n\
                          \x20   num_env_runners: 1\n\
                          \x20   num_envs_per_env_runner: 4\n\
                          \x20   rollout_fragment_length: 10\n\
                          \x20   train_batch_size: 80\n\
                          \x20   min_time_s_per_iteration: 0.1\n\
                          \x20   lr:\n\
                          \x20     grid_search: [0.001, 0.0005]\n";

#[test]
fn an_rllib_experiment_file_is_searched_and_stopped_by_its_own_criteria() -> TestResult {
    let dir = tempfile::tempdir()?;
    write(dir.path(), "experiment.yaml", EXPERIMENT)?;
    let args = ["tune", "experiment.yaml", "--output-dir", "out", "--name", "rllib", "--cpus", "4"];
    let run = impala(dir.path(), &args)?;
    assert!(run.success, "{}\n{}", run.stdout, run.stderr);
    let trials = trials(&summary(&dir.path().join("out/rllib"))?);
    assert_eq!(trials.len(), 2, "{trials:?}");
    assert!(trials.iter().all(|t| t["status"] == "ok" && t["iterations"] == 1), "{trials:?}");

    // `impala train` reads the same file; a grid is a search, so one value to train.
    let single = EXPERIMENT.replace("lr:\n      grid_search: [0.001, 0.0005]\n", "lr: 0.001\n");
    write(dir.path(), "train.yaml", &single)?;
    let run = impala(dir.path(), &["train", "train.yaml", "--run-dir", "run"])?;
    assert!(run.success, "{}\n{}", run.stdout, run.stderr);
    let lines = fs::read_to_string(dir.path().join("run/result.json"))?;
    assert_eq!(lines.lines().count(), 1, "stopped after training_iteration 1");

    // Another algorithm's experiment is refused, naming it.
    write(dir.path(), "ppo.yaml", &EXPERIMENT.replace("run: IMPALA", "run: PPO"))?;
    let run = impala(dir.path(), &["train", "ppo.yaml"])?;
    assert!(
        !run.success && run.stderr.contains("runs `PPO`; impala-rs runs IMPALA"),
        "{}",
        run.stderr
    );
    Ok(())
}
