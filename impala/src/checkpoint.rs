//! Checkpoints: one folder per save (`checkpoint_000010/`) holding the config, the algorithm's
//! counters, episode window and seeds, and the learner's weights and optimizer state. A folder
//! is written under a temporary name, fsynced and renamed into place, so a crash or Ctrl-C
//! never leaves a half-written checkpoint under a real name.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{EpisodeWindow, ImpalaError, Result};

/// Version of the checkpoint layout; bumped when an older reader could not load it.
pub const CHECKPOINT_FORMAT_VERSION: u32 = 1;
/// The algorithm's state file inside a checkpoint.
pub const STATE_FILE: &str = "algorithm_state.json";
/// The config file inside a checkpoint.
pub const CONFIG_FILE: &str = "config.json";
/// The learner's folder (model weights and optimizer state) inside a checkpoint.
pub const LEARNER_DIR: &str = "learner";
const PREFIX: &str = "checkpoint_";

/// The lifetime counters of a run (RLlib's `_counters`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Counters {
    /// Env steps sampled.
    pub num_env_steps_sampled: u64,
    /// Env steps trained (per SGD pass).
    pub num_env_steps_trained: u64,
    /// Agent steps sampled.
    pub num_agent_steps_sampled: u64,
    /// Agent steps trained.
    pub num_agent_steps_trained: u64,
    /// Weight broadcasts to env runners.
    pub num_weight_broadcasts: u64,
    /// Train batches that did not fit the learner queue at first try.
    pub num_times_learner_queue_full: u64,
    /// `training_step` calls.
    pub num_training_step_calls: u64,
    /// Completed episodes.
    pub episodes_total: u64,
    /// SGD steps (the learner's weights version).
    pub num_grad_updates: u64,
}

/// Everything besides the config and the learner that a resumed run continues from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlgorithmState {
    /// [`CHECKPOINT_FORMAT_VERSION`] of the writer.
    pub format_version: u32,
    /// The impala-rs version that wrote the checkpoint.
    pub impala_rs_version: String,
    /// Iterations completed.
    pub training_iteration: u64,
    /// Seconds of training completed.
    pub time_total_s: f64,
    /// Lifetime counters.
    pub counters: Counters,
    /// The smoothing window of completed episodes.
    pub episodes: EpisodeWindow,
    /// The run's base seed; runners, envs and the learner derive theirs from it and the
    /// iteration, so a resumed run does not replay the episodes it already saw.
    pub base_seed: u64,
}

/// The folder name of the checkpoint taken after `iteration`.
pub fn checkpoint_name(iteration: u64) -> String {
    format!("{PREFIX}{iteration:06}")
}

/// Writes a checkpoint folder `parent/checkpoint_<iteration>` atomically: `fill` writes the
/// learner's files into the given folder, then the state and config are added, everything is
/// fsynced and the folder is renamed into place (replacing an older one of the same name).
pub fn save_checkpoint(
    parent: &Path,
    state: &AlgorithmState,
    config: &impala_config::ImpalaConfig,
    fill: impl FnOnce(&Path) -> Result<()>,
) -> Result<PathBuf> {
    let name = checkpoint_name(state.training_iteration);
    let target = parent.join(&name);
    let tmp = parent.join(format!(".{name}.tmp-{}", std::process::id()));
    if tmp.exists() {
        fs::remove_dir_all(&tmp).map_err(|e| ImpalaError::io("remove", &tmp, e))?;
    }
    let written = (|| {
        fs::create_dir_all(tmp.join(LEARNER_DIR))
            .map_err(|e| ImpalaError::io("create", &tmp, e))?;
        fill(&tmp.join(LEARNER_DIR))?;
        write_json(&tmp.join(STATE_FILE), state)?;
        write_json(&tmp.join(CONFIG_FILE), config)?;
        sync_tree(&tmp)
    })();
    if let Err(e) = written {
        // Leave nothing half-written behind.
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    if target.exists() {
        let old = parent.join(format!(".{name}.old-{}", std::process::id()));
        fs::rename(&target, &old).map_err(|e| ImpalaError::io("rename", &target, e))?;
        fs::rename(&tmp, &target).map_err(|e| ImpalaError::io("rename", &tmp, e))?;
        fs::remove_dir_all(&old).map_err(|e| ImpalaError::io("remove", &old, e))?;
    } else {
        fs::rename(&tmp, &target).map_err(|e| ImpalaError::io("rename", &tmp, e))?;
    }
    sync_dir(parent)?;
    Ok(target)
}

/// Resolves `--resume`/`--checkpoint`: a checkpoint folder itself, or a run folder, in which case
/// its newest checkpoint (temporary folders of interrupted saves are ignored).
pub fn find_checkpoint(path: &Path) -> Result<PathBuf> {
    if path.join(STATE_FILE).exists() || path.join(LEARNER_DIR).exists() {
        return Ok(path.to_path_buf());
    }
    let entries = match fs::read_dir(path) {
        Ok(e) => e,
        Err(_) => return Err(ImpalaError::NoCheckpoint { path: path.to_path_buf() }),
    };
    let newest = entries
        .filter_map(std::result::Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let iter = name.strip_prefix(PREFIX)?.parse::<u64>().ok()?;
            Some((iter, e.path()))
        })
        .max_by_key(|(iter, _)| *iter);
    newest.map(|(_, p)| p).ok_or_else(|| ImpalaError::NoCheckpoint { path: path.to_path_buf() })
}

/// Reads and checks a checkpoint's state and config (the learner's files are checked when the
/// learner loads them).
pub fn read_checkpoint(dir: &Path) -> Result<(AlgorithmState, impala_config::ImpalaConfig)> {
    let corrupt =
        |reason: String| ImpalaError::CorruptCheckpoint { path: dir.to_path_buf(), reason };
    let read = |file: &str| {
        fs::read_to_string(dir.join(file)).map_err(|e| corrupt(format!("cannot read {file} ({e})")))
    };
    let state_text = read(STATE_FILE)?;
    let version: serde_json::Value = serde_json::from_str(&state_text)
        .map_err(|e| corrupt(format!("{STATE_FILE} is not valid JSON ({e})")))?;
    let format = version.get("format_version").and_then(serde_json::Value::as_u64);
    if format != Some(u64::from(CHECKPOINT_FORMAT_VERSION)) {
        let writer = version
            .get("impala_rs_version")
            .and_then(|v| v.as_str())
            .unwrap_or("an unknown version");
        return Err(ImpalaError::IncompatibleCheckpoint {
            path: dir.to_path_buf(),
            reason: format!(
                "it has checkpoint format {} (written by impala-rs {writer}), this impala-rs {} reads format {}",
                format.map_or("<missing>".to_string(), |f| f.to_string()),
                env!("CARGO_PKG_VERSION"),
                CHECKPOINT_FORMAT_VERSION
            ),
            fix: format!("resume it with impala-rs {writer}, or start a new run"),
        });
    }
    let state: AlgorithmState = serde_json::from_value(version)
        .map_err(|e| corrupt(format!("{STATE_FILE} is incomplete ({e})")))?;
    let config_text = read(CONFIG_FILE)?;
    let config =
        serde_json::from_str(&config_text).map_err(|e| ImpalaError::IncompatibleCheckpoint {
            path: dir.to_path_buf(),
            reason: format!("its {CONFIG_FILE} does not fit this version's config ({e})"),
            fix: "resume it with the impala-rs version that wrote it, or start a new run".into(),
        })?;
    if !dir.join(LEARNER_DIR).is_dir() {
        return Err(corrupt(format!("the `{LEARNER_DIR}` folder with the weights is missing")));
    }
    Ok((state, config))
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(|source| ImpalaError::Json {
        action: "write",
        path: path.to_path_buf(),
        source,
    })?;
    fs::write(path, text).map_err(|e| ImpalaError::io("write", path, e))
}

/// Replaces `path` with `bytes` atomically (temporary sibling, fsync, rename).
pub fn write_file_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{file_name}.tmp-{}", std::process::id()));
    let written = (|| {
        fs::write(&tmp, bytes)?;
        fs::File::open(&tmp)?.sync_all()?;
        fs::rename(&tmp, path)
    })();
    written.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        ImpalaError::io("write", path, e)
    })
}

/// fsyncs every file and folder under `dir` (and `dir` itself).
fn sync_tree(dir: &Path) -> Result<()> {
    for entry in fs::read_dir(dir).map_err(|e| ImpalaError::io("read", dir, e))? {
        let path = entry.map_err(|e| ImpalaError::io("read", dir, e))?.path();
        if path.is_dir() {
            sync_tree(&path)?;
        } else {
            fs::File::open(&path)
                .and_then(|f| f.sync_all())
                .map_err(|e| ImpalaError::io("sync", &path, e))?;
        }
    }
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> Result<()> {
    fs::File::open(dir).and_then(|f| f.sync_all()).map_err(|e| ImpalaError::io("sync", dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(iter: u64) -> AlgorithmState {
        AlgorithmState {
            format_version: CHECKPOINT_FORMAT_VERSION,
            impala_rs_version: env!("CARGO_PKG_VERSION").into(),
            training_iteration: iter,
            time_total_s: 1.5,
            counters: Counters { num_env_steps_sampled: 1000, ..Default::default() },
            episodes: EpisodeWindow::new(100),
            base_seed: 7,
        }
    }

    fn tmp() -> Result<tempfile::TempDir> {
        tempfile::tempdir().map_err(|e| ImpalaError::io("create", Path::new("tmp"), e))
    }

    #[test]
    fn save_then_read_round_trips_and_finds_the_newest() -> Result<()> {
        let dir = tmp()?;
        let config = impala_config::ImpalaConfig::default();
        for iter in [2, 10, 4] {
            save_checkpoint(dir.path(), &state(iter), &config, |d| {
                fs::write(d.join("model.bin"), b"w").map_err(|e| ImpalaError::io("write", d, e))
            })?;
        }
        // Saving the same iteration again replaces it.
        save_checkpoint(dir.path(), &state(10), &config, |_| Ok(()))?;
        let newest = find_checkpoint(dir.path())?;
        assert!(newest.ends_with("checkpoint_000010"));
        let (s, c) = read_checkpoint(&newest)?;
        assert_eq!((s, c), (state(10), config));
        let names: Vec<String> = fs::read_dir(dir.path())
            .map_err(|e| ImpalaError::io("read", dir.path(), e))?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        assert!(names.iter().all(|n| n.starts_with("checkpoint_")), "{names:?}");
        Ok(())
    }

    #[test]
    fn a_failing_save_leaves_nothing() -> Result<()> {
        let dir = tmp()?;
        let err = save_checkpoint(dir.path(), &state(1), &Default::default(), |d| {
            Err(ImpalaError::CorruptCheckpoint { path: d.into(), reason: "boom".into() })
        });
        assert!(err.is_err());
        let left =
            fs::read_dir(dir.path()).map_err(|e| ImpalaError::io("read", dir.path(), e))?.count();
        assert_eq!(left, 0);
        assert!(matches!(find_checkpoint(dir.path()), Err(ImpalaError::NoCheckpoint { .. })));
        Ok(())
    }

    #[test]
    fn damaged_and_foreign_checkpoints_are_named() -> Result<()> {
        let dir = tmp()?;
        let ckpt = save_checkpoint(dir.path(), &state(3), &Default::default(), |_| Ok(()))?;
        let state_path = ckpt.join(STATE_FILE);
        fs::write(&state_path, "{not json")
            .map_err(|e| ImpalaError::io("write", &state_path, e))?;
        assert!(matches!(read_checkpoint(&ckpt), Err(ImpalaError::CorruptCheckpoint { .. })));
        let mut future = serde_json::to_value(state(3)).map_err(|source| ImpalaError::Json {
            action: "write",
            path: state_path.clone(),
            source,
        })?;
        future["format_version"] = 99.into();
        fs::write(&state_path, future.to_string())
            .map_err(|e| ImpalaError::io("write", &state_path, e))?;
        let err = read_checkpoint(&ckpt).map_err(|e| e.to_string());
        assert!(err.is_err_and(|e| e.contains("format 99")));
        Ok(())
    }
}
