//! Runs a user can trust: signals, run-folder names and locks, resuming from older checkpoints
//! (fork or --truncate), partial result lines, stale temporaries and checkpoint retention.

use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use impala::tensorboard::{read_scalars, ITERATION_TAG};
use impala::{read_result_lines, PROGRESS_FILE, RESULT_FILE};

use crate::common::{entries, impala, TestResult};

const FAST: [&str; 6] =
    ["--set", "min_time_s_per_iteration=0.2", "--set", "num_envs_per_env_runner=4", "--seed", "3"];

/// Starts `impala args...` in `cwd` with stdout and stderr piped.
pub fn spawn(cwd: &Path, args: &[&str]) -> std::io::Result<Child> {
    Command::new(env!("CARGO_BIN_EXE_impala"))
        .current_dir(cwd)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
}

/// Waits until `run_dir/result.json` has `n` lines.
pub fn wait_for_results(run_dir: &Path, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let path = run_dir.join(RESULT_FILE);
    while fs::read_to_string(&path).map_or(true, |s| s.lines().count() < n) {
        assert!(Instant::now() < deadline, "no {n} iterations in {}", run_dir.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `signal` (`INT`, `TERM`) to `child`.
pub fn signal(child: &Child, signal: &str) -> TestResult {
    let status =
        Command::new("kill").args([&format!("-{signal}"), &child.id().to_string()]).status()?;
    assert!(status.success());
    Ok(())
}

/// Train `--stop-iters N` in `cwd`/`run` with extra args; asserts success.
fn train(cwd: &Path, extra: &[&str]) -> Result<crate::common::Run, Box<dyn std::error::Error>> {
    let mut args = vec!["train"];
    args.extend(extra);
    args.extend(FAST);
    let run = impala(cwd, &args)?;
    assert!(run.success, "{}\n{}", run.stdout, run.stderr);
    Ok(run)
}

fn iterations(run_dir: &Path) -> Result<Vec<u64>, Box<dyn std::error::Error>> {
    Ok(read_result_lines(&run_dir.join(RESULT_FILE))?
        .iter()
        .filter_map(|(_, v)| v["training_iteration"].as_u64())
        .collect())
}

fn csv_rows(run_dir: &Path) -> Result<usize, Box<dyn std::error::Error>> {
    Ok(fs::read_to_string(run_dir.join(PROGRESS_FILE))?.lines().count().saturating_sub(1))
}

/// The iterations of every TensorBoard event in `run_dir`, sorted.
fn event_iterations(run_dir: &Path) -> Result<Vec<u64>, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    for name in entries(run_dir).iter().filter(|n| n.starts_with("events.out.tfevents.")) {
        for (_, tag, value) in read_scalars(&run_dir.join(name))? {
            if tag == ITERATION_TAG {
                out.push(value as u64);
            }
        }
    }
    out.sort_unstable();
    Ok(out)
}

fn checkpoints(run_dir: &Path) -> Vec<String> {
    entries(run_dir).into_iter().filter(|n| n.starts_with("checkpoint_")).collect()
}

fn no_temporaries(run_dir: &Path) {
    let names = entries(run_dir);
    assert!(names.iter().all(|n| !n.starts_with('.')), "temporary files left: {names:?}");
}

#[test]
fn sigterm_finishes_the_iteration_saves_and_exits_143() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut args = vec!["train", "--run-dir", "run"];
    args.extend(FAST);
    let child = spawn(dir.path(), &args)?;
    wait_for_results(&dir.path().join("run"), 1);
    signal(&child, "TERM")?;
    let out = child.wait_with_output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Before: SIGTERM killed the process, 143 with no checkpoint.
    assert_eq!(out.status.code(), Some(143), "{stderr}");
    assert!(stderr.contains("interrupted (SIGTERM)"), "{stderr}");
    let run_dir = dir.path().join("run");
    assert_eq!(checkpoints(&run_dir).len(), 1, "{:?}", entries(&run_dir));
    no_temporaries(&run_dir);
    // The folder resumes (before: "no checkpoint found").
    let run = train(dir.path(), &["--resume", "run", "--stop-iters", "1", "--quiet"])?;
    assert!(run.error_lines().is_empty(), "{}", run.stderr);
    Ok(())
}

#[test]
fn a_second_signal_during_the_save_still_leaves_a_complete_checkpoint() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut args = vec!["train", "--run-dir", "run", "--quiet"];
    args.extend(FAST);
    let child = spawn(dir.path(), &args)?;
    let run_dir = dir.path().join("run");
    wait_for_results(&run_dir, 1);
    signal(&child, "INT")?;
    std::thread::sleep(Duration::from_millis(5));
    signal(&child, "INT")?;
    std::thread::sleep(Duration::from_millis(5));
    signal(&child, "TERM")?;
    let out = child.wait_with_output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Before: exit 130 from inside the handler while libtorch threads ran (or 139), and no
    // checkpoint or a half-written one.
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("again: still saving the checkpoint"), "{stderr}");
    no_temporaries(&run_dir);
    let ckpts = checkpoints(&run_dir);
    assert_eq!(ckpts.len(), 1, "{ckpts:?}");
    let ckpt = run_dir.join(&ckpts[0]);
    let (state, _) = impala::checkpoint::read_checkpoint(&ckpt)?;
    assert_eq!(Some(state.training_iteration), iterations(&run_dir)?.last().copied());
    let run = impala(dir.path(), &["evaluate", "--checkpoint", "run", "--episodes", "1"])?;
    assert!(run.success, "{}", run.stderr);
    Ok(())
}

#[test]
fn runs_started_at_once_get_their_own_folders_and_a_busy_folder_is_refused() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut args = vec!["train", "--stop-iters", "1", "--quiet"];
    args.extend(FAST);
    // Before: both got `IMPALA_CartPole-v1_<second>` and wrote one folder together.
    let (a, b) = (spawn(dir.path(), &args)?, spawn(dir.path(), &args)?);
    let (a, b) = (a.wait_with_output()?, b.wait_with_output()?);
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    let runs = entries(&dir.path().join("impala_results"));
    assert_eq!(runs.len(), 2, "{runs:?}");
    for run in &runs {
        assert!(run.starts_with("IMPALA_CartPole-v1_20"), "{run}");
        let run_dir = dir.path().join("impala_results").join(run);
        assert_eq!(iterations(&run_dir)?, vec![1]);
        no_temporaries(&run_dir);
    }

    // A second process on a folder in use is refused, naming the folder and the other PID,
    // whether it starts a new run there or resumes it.
    train(dir.path(), &["--run-dir", "busy", "--stop-iters", "1", "--quiet"])?;
    let mut args = vec!["train", "--resume", "busy", "--quiet"];
    args.extend(&FAST[..4]);
    let first = spawn(dir.path(), &args)?;
    let busy = dir.path().join("busy");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !busy.join(impala::run::LOCK_FILE).exists() {
        assert!(Instant::now() < deadline, "the resumed run never locked its folder");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut second = vec!["train", "--run-dir", "busy", "--stop-iters", "1"];
    second.extend(FAST);
    let run = impala(dir.path(), &second)?;
    let resumed = impala(dir.path(), &["train", "--resume", "busy", "--stop-iters", "9"])?;
    let pid = first.id();
    signal(&first, "INT")?;
    let out = first.wait_with_output()?;
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    for refused in [run, resumed] {
        refused.assert_one_line_error(&[
            "run folder `busy` is in use",
            &format!("(PID {pid})"),
            "--run-dir",
        ]);
    }
    assert_eq!(checkpoints(&busy).len(), 2);
    no_temporaries(&busy);
    Ok(())
}

#[test]
fn resuming_an_older_checkpoint_forks_and_truncate_rewinds() -> TestResult {
    let dir = tempfile::tempdir()?;
    train(dir.path(), &["--run-dir", "run", "--stop-iters", "6", "--checkpoint-every", "2"])?;
    let run_dir = dir.path().join("run");
    let before_results = fs::read_to_string(run_dir.join(RESULT_FILE))?;
    assert_eq!(
        checkpoints(&run_dir),
        ["checkpoint_000002", "checkpoint_000004", "checkpoint_000006"]
    );

    // Before: this cut iterations 3-6 from result.json, overwrote checkpoint_000004 and left
    // TensorBoard with iterations 3-4 twice.
    let run = train(dir.path(), &["--resume", "run/checkpoint_000002", "--stop-iters", "4"])?;
    let fork_line = run.stdout.lines().find(|l| l.starts_with("forked a new run folder"));
    assert!(fork_line.is_some_and(|l| l.contains("run-from-checkpoint_000002")), "{}", run.stdout);
    assert_eq!(fs::read_to_string(run_dir.join(RESULT_FILE))?, before_results);
    assert_eq!(checkpoints(&run_dir).len(), 3);
    assert_eq!(event_iterations(&run_dir)?, (1..=6).collect::<Vec<_>>());
    let fork = dir.path().join("run-from-checkpoint_000002");
    assert_eq!(iterations(&fork)?, vec![1, 2, 3, 4]);
    assert_eq!(csv_rows(&fork)?, 4);
    assert_eq!(event_iterations(&fork)?, vec![1, 2, 3, 4]);
    assert_eq!(checkpoints(&fork), ["checkpoint_000004"]);
    let first = |d: &Path| -> Result<serde_json::Value, Box<dyn std::error::Error>> {
        Ok(read_result_lines(&d.join(RESULT_FILE))?[0].1.clone())
    };
    assert_eq!(first(&fork)?, first(&run_dir)?, "the history is copied as it was");

    // Resuming the newest checkpoint continues in place.
    let all = ["--num-to-keep", "all"];
    train(dir.path(), &[&["--resume", "run", "--stop-iters", "7", "--quiet"][..], &all].concat())?;
    assert_eq!(iterations(&run_dir)?, (1..=7).collect::<Vec<_>>());

    // --truncate rewinds the folder: results, events and later checkpoints alike.
    let run = train(
        dir.path(),
        &[&["--resume", "run/checkpoint_000004", "--truncate", "--stop-iters", "5"][..], &all]
            .concat(),
    )?;
    assert!(run.stdout.contains("rewound run to iteration 4"), "{}", run.stdout);
    assert!(run.stdout.contains("checkpoint_000006, checkpoint_000007"), "{}", run.stdout);
    assert_eq!(iterations(&run_dir)?, vec![1, 2, 3, 4, 5]);
    assert_eq!(csv_rows(&run_dir)?, 5);
    assert_eq!(event_iterations(&run_dir)?, vec![1, 2, 3, 4, 5]);
    assert_eq!(
        checkpoints(&run_dir),
        ["checkpoint_000002", "checkpoint_000004", "checkpoint_000005"]
    );
    no_temporaries(&run_dir);
    Ok(())
}

#[test]
fn a_partial_last_line_and_stale_temporaries_do_not_block_resume() -> TestResult {
    let dir = tempfile::tempdir()?;
    train(dir.path(), &["--run-dir", "run", "--stop-iters", "2", "--quiet"])?;
    let run_dir = dir.path().join("run");
    // A crash while writing iteration 3's line, and while saving checkpoint 3, in a process
    // that is gone (PIDs are below 2^22 on Linux).
    let path = run_dir.join(RESULT_FILE);
    let text = fs::read_to_string(&path)?;
    let partial = text.lines().last().unwrap_or_default().replace(":2,", ":3,");
    fs::write(&path, format!("{text}{}", &partial[..40]))?;
    let dead = i32::MAX;
    fs::create_dir_all(run_dir.join(format!(".checkpoint_000003.tmp-{dead}/learner")))?;
    fs::write(run_dir.join(format!(".progress.csv.tmp-{dead}")), "x")?;
    let run = train(dir.path(), &["--resume", "run", "--stop-iters", "3", "--quiet"])?;
    // Before: "could not read JSON `run/result.json`: ... at line 1 column 40".
    let warning = run.stderr.lines().find(|l| l.contains("partial last line"));
    assert!(
        warning.is_some_and(
            |w| w.starts_with("warning: ") && w.contains("line 3 of `run/result.json`")
        ),
        "{}",
        run.stderr
    );
    assert_eq!(iterations(&run_dir)?, vec![1, 2, 3]);
    no_temporaries(&run_dir);

    // Damage before the last line is an error naming the right line.
    let mut lines: Vec<String> = fs::read_to_string(&path)?.lines().map(str::to_string).collect();
    lines[1].truncate(30);
    fs::write(&path, lines.join("\n") + "\n")?;
    let mut args = vec!["train", "--resume", "run", "--stop-iters", "4"];
    args.extend(FAST);
    let run = impala(dir.path(), &args)?;
    run.assert_one_line_error(&["run/result.json", "line 2 is not valid json"]);
    Ok(())
}

#[test]
fn checkpoints_keep_the_newest_and_the_best_and_point_at_the_best() -> TestResult {
    let dir = tempfile::tempdir()?;
    // Scored by iteration, lowest best: the first checkpoint is the best, deterministically.
    let run = train(
        dir.path(),
        &[
            "--run-dir",
            "run",
            "--stop-iters",
            "5",
            "--checkpoint-every",
            "1",
            "--num-to-keep",
            "2",
            "--checkpoint-score-attribute",
            "training_iteration",
            "--checkpoint-score-order",
            "min",
        ],
    )?;
    let run_dir = dir.path().join("run");
    // Before: every checkpoint was kept and nothing named the best.
    assert_eq!(
        checkpoints(&run_dir),
        ["checkpoint_000001", "checkpoint_000004", "checkpoint_000005"]
    );
    let best = fs::read_to_string(run_dir.join("best_checkpoint"))?;
    assert_eq!(best, "checkpoint_000001\ntraining_iteration 1 min\n");
    assert!(
        run.stdout.contains("best checkpoint run/checkpoint_000001 (training_iteration 1)"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("best checkpoint_000001 at 1"), "{}", run.stdout);

    // Default: the newest 3 plus the best by episode_return_mean; the final one always stays.
    let run =
        train(dir.path(), &["--run-dir", "run2", "--stop-iters", "6", "--checkpoint-every", "1"])?;
    let run2 = dir.path().join("run2");
    let kept = checkpoints(&run2);
    assert!((3..=4).contains(&kept.len()), "{kept:?}");
    assert!(kept.iter().any(|c| c == "checkpoint_000006"));
    let best = fs::read_to_string(run2.join("best_checkpoint"))?;
    let name = best.lines().next().unwrap_or_default();
    assert!(kept.iter().any(|c| c == name), "{best} not in {kept:?}");
    assert!(best.lines().nth(1).is_some_and(|l| l.starts_with("episode_return_mean ")), "{best}");
    assert!(run.stdout.contains("best checkpoint run2/checkpoint_"), "{}", run.stdout);

    // An attribute no result has is refused before training, with the nearest key.
    let mut args =
        vec!["train", "--run-dir", "run3", "--checkpoint-score-attribute", "episode_reward_mean"];
    args.extend(FAST);
    let run = impala(dir.path(), &args)?;
    run.assert_one_line_error(&["episode_reward_mean", "did you mean `episode_return_mean`"]);
    assert!(!dir.path().join("run3").exists());
    Ok(())
}

#[test]
fn a_checkpoint_of_another_env_in_a_run_folder_is_refused() -> TestResult {
    let dir = tempfile::tempdir()?;
    for (env, run) in [("CartPole-v1", "cartpole"), ("Acrobot-v1", "acrobot")] {
        let mut args = vec!["train", "--env", env, "--stop-iters", "1", "--run-dir", run];
        args.extend(FAST);
        let out = impala(dir.path(), &args)?;
        assert!(out.success, "{}", out.stderr);
    }
    // CartPole's checkpoint copied into the Acrobot run as its newest.
    let (from, to) = (dir.path().join("cartpole"), dir.path().join("acrobot/checkpoint_000009"));
    fs::create_dir_all(&to)?;
    for entry in fs::read_dir(from.join("checkpoint_000001"))? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            fs::create_dir_all(to.join(entry.file_name()))?;
            for inner in fs::read_dir(entry.path())? {
                let inner = inner?;
                fs::copy(inner.path(), to.join(entry.file_name()).join(inner.file_name()))?;
            }
        } else {
            fs::copy(entry.path(), to.join(entry.file_name()))?;
        }
    }
    let before = fs::read_to_string(dir.path().join("acrobot/params.json"))?;
    let run = impala(dir.path(), &["train", "--resume", "acrobot", "--stop-iters", "2"])?;
    run.assert_one_line_error(&["trains `CartPole-v1`", "trains `Acrobot-v1`", "mix"]);
    assert_eq!(fs::read_to_string(dir.path().join("acrobot/params.json"))?, before);
    Ok(())
}

/// `impala train ARGS` in `disk/run` on a tmpfs of `size` in a mount namespace of its own (root
/// needed, as for the netns tests; the mount ends with the process), the run folder then copied
/// to `out/run` since the tmpfs goes with the namespace.
fn train_on_a_small_disk(
    out: &Path,
    size: &str,
    args: &str,
) -> Result<crate::common::Run, Box<dyn std::error::Error>> {
    let disk = out.join("disk");
    fs::create_dir_all(&disk)?;
    let (disk, out_dir, bin) = (disk.display(), out.display(), env!("CARGO_BIN_EXE_impala"));
    let script = format!(
        "mount -t tmpfs -o size={size} impala-small-disk {disk} || exit 99; cd {disk}; \
         {bin} train --run-dir run --stop-time 60 --set min_time_s_per_iteration=0.02 {args}; \
         rc=$?; cp -r run {out_dir}/run; exit $rc"
    );
    let done = Command::new("unshare").args(["-m", "sh", "-c", &script]).output()?;
    let run = crate::common::Run {
        success: done.status.success(),
        stdout: String::from_utf8_lossy(&done.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&done.stderr).into_owned(),
    };
    assert_ne!(done.status.code(), Some(99), "cannot mount a tmpfs (root needed): {}", run.stderr);
    Ok(run)
}

/// A disk that fills up mid-run ends it with one line that names the file, the space needed and
/// left, and the checkpoint to resume from (one is saved if there is room, else the newest one
/// is named), never an exit that leaves the user to guess what was kept.
#[test]
fn a_full_disk_ends_the_run_naming_the_file_and_the_checkpoint_to_resume() -> TestResult {
    // The logs fill 64 KiB before any checkpoint: no room for one either.
    let out = tempfile::tempdir()?;
    let run = train_on_a_small_disk(out.path(), "64k", "")?;
    run.assert_one_line_error(&[
        "could not write `run/",
        "the disk is full (",
        "bytes free there, about ",
        "needed)",
        "the run could not be saved",
        "no checkpoint to resume from",
    ]);
    // Checkpoints every iteration fill 1 MiB (with the logs): whichever write finds the disk
    // full, the line names a complete checkpoint to resume from.
    let out = tempfile::tempdir()?;
    let run = train_on_a_small_disk(out.path(), "1m", "--checkpoint-every 1")?;
    run.assert_one_line_error(&["resume"]);
    let line = run.error_lines()[0];
    assert!(
        line.contains("No space left on device") || line.contains("the disk is full"),
        "{line}"
    );
    let (_, named) = line.rsplit_once("`run/checkpoint_").ok_or("no checkpoint named")?;
    let named = format!("run/checkpoint_{}", named.split('`').next().unwrap_or_default());
    let (state, _) = impala::checkpoint::read_checkpoint(&out.path().join(named))?;
    assert!(state.training_iteration >= 1, "{line}");
    Ok(())
}
