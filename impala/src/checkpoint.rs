//! Checkpoints: one folder per save (`checkpoint_000010/`) holding the config, the algorithm's
//! counters, episode window and seeds, the learner's weights and optimizer state, and a
//! manifest (`manifest.json`) with the size and SHA-256 of every other file. A folder is
//! written under a temporary name, fsynced and renamed into place, so a crash or Ctrl-C never
//! leaves a half-written checkpoint under a real name.
//!
//! A run whose `model.custom_model` is a TorchScript file keeps a copy of the module in the
//! checkpoint ([`CUSTOM_MODEL_FILE`] in the learner's folder, checked against the manifest like
//! every file), and the saved config names that copy, relative to the checkpoint; reading the
//! checkpoint points the config at the copy's absolute path. So a checkpoint is evaluated or
//! resumed with the module it was trained with, from any folder, wherever it was moved and
//! whatever became of the original file.
//!
//! Reading one ([`read_checkpoint`]) verifies every file against the manifest before it reads
//! any, so flipped or missing bytes anywhere (weights, optimizer state, config, state) are
//! refused as a corrupt checkpoint naming the file; the learner then refuses weights that are
//! NaN or infinite, naming the tensor.
//!
//! Formats ([`CHECKPOINT_FORMAT_VERSION`]):
//! - 2: this layout, with `manifest.json`, verified on every read.
//! - 1: impala-rs 0.1 before the manifest. Still read, without verification and with a
//!   warning; restoring it and saving again (e.g. resuming it for one iteration) writes a
//!   verified format-2 checkpoint. Its JSON files are still checked: a truncated or damaged
//!   one is called corrupt, one that parses but does not fit is called incompatible.
//! - newer: refused, naming the impala-rs version that wrote it.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Component, Path, PathBuf};

use impala_envs::{MeanStdFilter, SharedMeanStdFilter};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{EpisodeWindow, ImpalaError, Result};

/// Version of the checkpoint layout; bumped when an older reader could not load it. Format 2
/// added `manifest.json`; format 1 checkpoints are still read, unverified (see the module docs).
pub const CHECKPOINT_FORMAT_VERSION: u32 = 2;
/// The oldest format this version reads (without verification: it has no manifest).
const UNVERIFIED_FORMAT_VERSION: u32 = 1;
/// The algorithm's state file inside a checkpoint.
pub const STATE_FILE: &str = "algorithm_state.json";
/// The config file inside a checkpoint.
pub const CONFIG_FILE: &str = "config.json";
/// The learner's folder (model weights and optimizer state) inside a checkpoint.
pub const LEARNER_DIR: &str = "learner";
/// The manifest inside a checkpoint: the size and SHA-256 of every other file.
pub const MANIFEST_FILE: &str = "manifest.json";
/// The copy of a run's TorchScript module (`model.custom_model`) inside the learner's folder.
pub const CUSTOM_MODEL_FILE: &str = "custom_model.pt";
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
    /// The run's base seed. The model's initial weights come from it; the env runners' env
    /// seeds (from the config's `seed`), their action-sampling seeds and the replay seed are
    /// derived from it and [`num_restores`](Self::num_restores), so a resumed run draws new
    /// random streams instead of replaying the episodes the original run already saw.
    pub base_seed: u64,
    /// How many times the run was restored from a checkpoint before this one was saved (0 for
    /// a run that never was; format-1 checkpoints read as 0). Restoring makes it one more.
    #[serde(default)]
    pub num_restores: u64,
    /// The run's observation filter (RLlib's `MeanStdFilter` state) when the config normalises
    /// observations: a restored run and an evaluated checkpoint normalise as the run did.
    /// Checkpoints written before it was kept read as `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observation_filter: Option<MeanStdFilter>,
    /// Multi-agent runs: per policy id, the smoothing window of its agents' summed episode
    /// rewards (`policy_reward_mean`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub policy_episodes: BTreeMap<String, EpisodeWindow>,
}

impl AlgorithmState {
    /// The state of a run after `training_iteration` iterations, as this version writes it
    /// (no observation filter, no per-policy windows: set those where the run has them).
    pub fn new(
        training_iteration: u64,
        time_total_s: f64,
        counters: Counters,
        episodes: EpisodeWindow,
        base_seed: u64,
        num_restores: u64,
    ) -> Self {
        AlgorithmState {
            format_version: CHECKPOINT_FORMAT_VERSION,
            impala_rs_version: env!("CARGO_PKG_VERSION").to_string(),
            training_iteration,
            time_total_s,
            counters,
            episodes,
            base_seed,
            num_restores,
            observation_filter: None,
            policy_episodes: BTreeMap::new(),
        }
    }

    /// Whether this is a multi-agent run's state (its checkpoint holds a learner per policy,
    /// under [`policy_learner_dir`]).
    pub fn is_multi_agent(&self) -> bool {
        !self.policy_episodes.is_empty()
    }
}

/// Puts the observation filter a checkpoint in `dir` saved in place of the run's filter `run`
/// (a restore, or an evaluation of the checkpoint); returns the run's filter as it was, to put
/// back if the rest of a restore fails. A checkpoint without one (or a run that does not
/// normalise) is warned about, not refused.
pub(crate) fn put_saved_filter(
    run: Option<&SharedMeanStdFilter>,
    saved: Option<MeanStdFilter>,
    dir: &Path,
) -> Result<Option<MeanStdFilter>> {
    match (run, saved) {
        (Some(run), Some(saved)) => {
            let before = run.snapshot()?;
            run.replace(saved).map_err(|e| {
                let reason = format!("its observation filter does not fit the env ({e})");
                ImpalaError::corrupt_checkpoint(dir, reason)
            })?;
            Ok(before)
        }
        (Some(_), None) => {
            tracing::warn!(
                checkpoint = %dir.display(),
                "the checkpoint keeps no observation filter (it was written before impala-rs kept one, \
                 or by a run without normalize_observations): observations are normalised from fresh statistics"
            );
            Ok(None)
        }
        (None, Some(_)) => {
            tracing::warn!(
                checkpoint = %dir.display(),
                "the checkpoint's run normalised observations (normalize_observations) and this one does not: \
                 its policy sees unnormalised observations"
            );
            Ok(None)
        }
        (None, None) => Ok(None),
    }
}

/// The folder name of the checkpoint taken after `iteration`.
pub fn checkpoint_name(iteration: u64) -> String {
    format!("{PREFIX}{iteration:06}")
}

/// The `/`-separated path inside a checkpoint of the copy of the run's module (`policy`
/// `None`, named by the saved config's `model.custom_model`) or of a policy's own (in its
/// learner's folder, named by `policy_config.<policy>.model.custom_model`).
pub fn custom_model_copy(policy: Option<&str>) -> String {
    match policy {
        None => format!("{LEARNER_DIR}/{CUSTOM_MODEL_FILE}"),
        Some(policy) => format!("{}/{CUSTOM_MODEL_FILE}", policy_learner_dir(policy)),
    }
}

/// Writes a checkpoint folder `parent/checkpoint_<iteration>` atomically: `fill` writes the
/// learner's files into the given folder, then the bytes of the TorchScript `modules` are
/// copied in (each `(policy, bytes)`: the run's `model.custom_model` for `None`, a policy's own
/// `policy_config.<policy>.model.custom_model` otherwise; see [`custom_model_copy`]), the
/// state, the config (naming those copies) and the manifest of every file's size and SHA-256
/// are added, everything is fsynced and the folder is renamed into place (replacing an older
/// one of the same name).
pub fn save_checkpoint(
    parent: &Path,
    state: &AlgorithmState,
    config: &impala_config::ImpalaConfig,
    modules: &[(Option<&str>, &[u8])],
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
        let mut config = config.clone();
        for &(policy, bytes) in modules {
            let name = custom_model_copy(policy);
            let copy = tmp.join(&name);
            if let Some(folder) = copy.parent() {
                fs::create_dir_all(folder).map_err(|e| ImpalaError::io("create", folder, e))?;
            }
            fs::write(&copy, bytes).map_err(|e| ImpalaError::io("write", &copy, e))?;
            crate::module_owner::set_custom_model(&mut config, policy, name);
        }
        write_json(&tmp.join(CONFIG_FILE), &config)?;
        write_manifest(&tmp, state)?;
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
    if [STATE_FILE, LEARNER_DIR, MANIFEST_FILE].iter().any(|f| path.join(f).exists()) {
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

/// Reads and checks a checkpoint's state and config: first every file against the manifest
/// (size and SHA-256; a mismatch is a corrupt checkpoint naming the file), then the format
/// version (a newer one is refused with the version that wrote it), then the JSON. Format 1
/// checkpoints, which have no manifest, are read unverified with a warning (see the module
/// docs). The learner's tensors are checked when the learner loads them. A config naming the
/// checkpoint's copy of a TorchScript module comes back naming the copy's absolute path, and
/// one naming a `python_executable` comes back without it: what runs is the loader's choice.
pub fn read_checkpoint(dir: &Path) -> Result<(AlgorithmState, impala_config::ImpalaConfig)> {
    let corrupt = |reason: String| corrupt(dir, reason);
    let manifest =
        if dir.join(MANIFEST_FILE).exists() { Some(verify_manifest(dir)?) } else { None };
    let verified_format = manifest.as_ref().map(|m| m.format_version);
    let read = |file: &str| {
        fs::read_to_string(dir.join(file)).map_err(|e| corrupt(format!("cannot read {file} ({e})")))
    };
    let state_text = read(STATE_FILE)?;
    let version: serde_json::Value = serde_json::from_str(&state_text)
        .map_err(|e| corrupt(format!("{STATE_FILE} is not valid JSON ({e})")))?;
    let format = version.get("format_version").and_then(serde_json::Value::as_u64);
    let writer = version.get("impala_rs_version").and_then(|v| v.as_str());
    check_format(dir, format, writer)?;
    match (format, verified_format) {
        (Some(f), Some(m)) if f != u64::from(m) => {
            return Err(corrupt(format!(
                "{STATE_FILE} says checkpoint format {f}, {MANIFEST_FILE} says {m}"
            )))
        }
        (Some(f), None) if f > u64::from(UNVERIFIED_FORMAT_VERSION) => {
            return Err(corrupt(format!("{MANIFEST_FILE}, the checksums of its files, is missing")))
        }
        (_, None) => tracing::warn!(
            checkpoint = %dir.display(),
            "checkpoint format {UNVERIFIED_FORMAT_VERSION} has no {MANIFEST_FILE}: its files are \
             read without checksums; restore it and save again (e.g. resume it for one \
             iteration) to get a verified format-{CHECKPOINT_FORMAT_VERSION} checkpoint"
        ),
        _ => {}
    }
    let state: AlgorithmState = serde_json::from_value(version)
        .map_err(|e| corrupt(format!("{STATE_FILE} is incomplete ({e})")))?;
    let config_text = read(CONFIG_FILE)?;
    let mut config: impala_config::ImpalaConfig =
        serde_json::from_str(&config_text).map_err(|e| match e.classify() {
            serde_json::error::Category::Data => ImpalaError::IncompatibleCheckpoint {
                path: dir.to_path_buf(),
                reason: format!("its {CONFIG_FILE} does not fit this version's config ({e})"),
                fix: "use the impala-rs version that wrote it, or start a new run".into(),
            },
            _ => corrupt(format!("{CONFIG_FILE} is not valid JSON, truncated or damaged ({e})")),
        })?;
    if !dir.join(LEARNER_DIR).is_dir() {
        return Err(corrupt(format!("the `{LEARNER_DIR}` folder with the weights is missing")));
    }
    if let Some(manifest) = &manifest {
        let required = learner_files(&config, state.is_multi_agent());
        if let Some(missing) = required.into_iter().find(|f| !manifest.files.contains_key(f)) {
            return Err(corrupt(format!("{MANIFEST_FILE} does not list `{missing}`")));
        }
    }
    let owners: Vec<Option<String>> =
        std::iter::once(None).chain(config.policy_config.keys().cloned().map(Some)).collect();
    for owner in owners {
        let copy = custom_model_copy(owner.as_deref());
        if crate::module_owner::custom_model_of(&config, owner.as_deref()) != Some(copy.as_str()) {
            continue;
        }
        if manifest.as_ref().is_some_and(|m| !m.files.contains_key(&copy)) {
            return Err(corrupt(format!(
                "{MANIFEST_FILE} does not list `{copy}`, the TorchScript module that \
                 {CONFIG_FILE} names"
            )));
        }
        let path = dir.join(&copy);
        let path = std::path::absolute(&path).map_err(|e| ImpalaError::io("resolve", &path, e))?;
        let path = path.to_string_lossy().into_owned();
        crate::module_owner::set_custom_model(&mut config, owner.as_deref(), path);
    }
    // A checkpoint never chooses which program runs: the interpreter of Python envs comes from
    // whoever loads it (their `python_executable`, `--set` on a resume, or `$IMPALA_PYTHON`).
    if let Some(python) = config.python_executable.take() {
        tracing::warn!(
            checkpoint = %dir.display(),
            python,
            "the checkpoint's python_executable is not used (a checkpoint never chooses which \
             program runs); set python_executable or IMPALA_PYTHON when loading it"
        );
    }
    Ok((state, config))
}

fn corrupt(dir: &Path, reason: String) -> ImpalaError {
    ImpalaError::corrupt_checkpoint(dir, reason)
}

/// Refuses a format this version cannot read: a newer one (naming its writer), or none.
fn check_format(dir: &Path, format: Option<u64>, writer: Option<&str>) -> Result<()> {
    let readable = u64::from(UNVERIFIED_FORMAT_VERSION)..=u64::from(CHECKPOINT_FORMAT_VERSION);
    if format.is_some_and(|f| readable.contains(&f)) {
        return Ok(());
    }
    let writer = writer.unwrap_or("an unknown version");
    let newer = format.is_some_and(|f| f > u64::from(CHECKPOINT_FORMAT_VERSION));
    Err(ImpalaError::IncompatibleCheckpoint {
        path: dir.to_path_buf(),
        reason: format!(
            "it has checkpoint format {} (written by impala-rs {writer}), this impala-rs {} reads formats {UNVERIFIED_FORMAT_VERSION} to {CHECKPOINT_FORMAT_VERSION}",
            format.map_or("<missing>".to_string(), |f| f.to_string()),
            env!("CARGO_PKG_VERSION"),
        ),
        fix: if newer {
            format!("use impala-rs {writer} or newer to read it, or start a new run")
        } else {
            "pass a checkpoint_NNNNNN folder written by impala-rs, or start a new run".into()
        },
    })
}

/// `manifest.json`: the size and SHA-256 of every other file of a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Manifest {
    /// The checkpoint's format ([`CHECKPOINT_FORMAT_VERSION`] of the writer).
    format_version: u32,
    /// The impala-rs version that wrote it.
    impala_rs_version: String,
    /// Every other file, by its `/`-separated path inside the checkpoint folder.
    files: BTreeMap<String, FileDigest>,
    /// SHA-256 of the listing (a `path bytes sha256` line per file), so a damaged manifest is
    /// told apart from a damaged file.
    listing_sha256: String,
}

/// One file's size and content hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct FileDigest {
    bytes: u64,
    sha256: String,
}

/// The SHA-256 of `bytes` in lowercase hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn listing_sha256(files: &BTreeMap<String, FileDigest>) -> String {
    let listing: String =
        files.iter().map(|(path, d)| format!("{path} {} {}\n", d.bytes, d.sha256)).collect();
    sha256_hex(listing.as_bytes())
}

/// The learner's files a checkpoint of `config` must list: what restoring or evaluating
/// reads (a multi-agent run's, per policy, under [`policy_learner_dir`]).
fn learner_files(config: &impala_config::ImpalaConfig, multi_agent: bool) -> Vec<String> {
    let dirs = if multi_agent {
        config.policy_ids().iter().map(|id| policy_learner_dir(id)).collect()
    } else {
        vec![LEARNER_DIR.to_string()]
    };
    dirs.iter()
        .flat_map(|dir| {
            [impala_learner::MODEL_FILE, impala_learner::LEARNER_STATE_FILE]
                .map(|file| format!("{dir}/{file}"))
        })
        .collect()
}

/// The `/`-separated folder of policy `policy_id`'s learner in a multi-agent checkpoint.
pub fn policy_learner_dir(policy_id: &str) -> String {
    format!("{LEARNER_DIR}/{policy_id}")
}

/// Lists every file under `dir` but the manifest, by `/`-separated relative path.
fn list_files(dir: &Path, prefix: &str, out: &mut Vec<(String, PathBuf)>) -> Result<()> {
    for entry in fs::read_dir(dir).map_err(|e| ImpalaError::io("read", dir, e))? {
        let entry = entry.map_err(|e| ImpalaError::io("read", dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
        let path = entry.path();
        if path.is_dir() {
            list_files(&path, &rel, out)?;
        } else if rel != MANIFEST_FILE {
            out.push((rel, path));
        }
    }
    Ok(())
}

/// Writes `dir/manifest.json` for the files in `dir`.
fn write_manifest(dir: &Path, state: &AlgorithmState) -> Result<()> {
    let mut paths = Vec::new();
    list_files(dir, "", &mut paths)?;
    let mut files = BTreeMap::new();
    for (rel, path) in paths {
        let bytes = fs::read(&path).map_err(|e| ImpalaError::io("read", &path, e))?;
        files.insert(rel, FileDigest { bytes: bytes.len() as u64, sha256: sha256_hex(&bytes) });
    }
    let manifest = Manifest {
        format_version: state.format_version,
        impala_rs_version: state.impala_rs_version.clone(),
        listing_sha256: listing_sha256(&files),
        files,
    };
    write_json(&dir.join(MANIFEST_FILE), &manifest)
}

/// Checks every file of `dir` against its manifest; returns the manifest.
fn verify_manifest(dir: &Path) -> Result<Manifest> {
    let corrupt = |reason: String| corrupt(dir, reason);
    let text = fs::read_to_string(dir.join(MANIFEST_FILE))
        .map_err(|e| corrupt(format!("cannot read {MANIFEST_FILE} ({e})")))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| corrupt(format!("{MANIFEST_FILE} is not valid JSON ({e})")))?;
    let format = value.get("format_version").and_then(serde_json::Value::as_u64);
    let writer = value.get("impala_rs_version").and_then(|v| v.as_str());
    check_format(dir, format, writer)?;
    let manifest: Manifest = serde_json::from_value(value)
        .map_err(|e| corrupt(format!("{MANIFEST_FILE} is incomplete ({e})")))?;
    if listing_sha256(&manifest.files) != manifest.listing_sha256 {
        return Err(corrupt(format!(
            "{MANIFEST_FILE} is damaged (its file list does not match its own checksum)"
        )));
    }
    for required in [STATE_FILE, CONFIG_FILE] {
        if !manifest.files.contains_key(required) {
            return Err(corrupt(format!("{MANIFEST_FILE} does not list `{required}`")));
        }
    }
    for (rel, digest) in &manifest.files {
        if !Path::new(rel).components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(corrupt(format!("{MANIFEST_FILE} lists `{rel}`, outside the checkpoint")));
        }
        let bytes = match fs::read(dir.join(rel)) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(corrupt(format!("`{rel}` is missing")))
            }
            Err(e) => return Err(corrupt(format!("cannot read `{rel}` ({e})"))),
        };
        if bytes.len() as u64 != digest.bytes {
            return Err(corrupt(format!(
                "`{rel}` has {} bytes, {MANIFEST_FILE} lists {} (truncated or overwritten)",
                bytes.len(),
                digest.bytes
            )));
        }
        if sha256_hex(&bytes) != digest.sha256 {
            return Err(corrupt(format!(
                "`{rel}` does not match its SHA-256 in {MANIFEST_FILE} (damaged bytes)"
            )));
        }
    }
    Ok(manifest)
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
        let counters = Counters { num_env_steps_sampled: 1000, ..Default::default() };
        AlgorithmState::new(iter, 1.5, counters, EpisodeWindow::new(100), 7, 2)
    }

    fn tmp() -> Result<tempfile::TempDir> {
        tempfile::tempdir().map_err(|e| ImpalaError::io("create", Path::new("tmp"), e))
    }

    /// Stand-ins for the learner's files.
    fn learner_files(d: &Path) -> Result<()> {
        for file in [impala_learner::MODEL_FILE, impala_learner::LEARNER_STATE_FILE] {
            fs::write(d.join(file), b"weights").map_err(|e| ImpalaError::io("write", d, e))?;
        }
        Ok(())
    }

    fn write(path: &Path, bytes: impl AsRef<[u8]>) -> Result<()> {
        fs::write(path, bytes).map_err(|e| ImpalaError::io("write", path, e))
    }

    fn read_err(dir: &Path) -> Result<String> {
        match read_checkpoint(dir) {
            Ok(_) => Err(corrupt(dir, "read a checkpoint that should be refused".into())),
            Err(e) => Ok(e.to_string()),
        }
    }

    #[test]
    fn save_then_read_round_trips_and_finds_the_newest() -> Result<()> {
        let dir = tmp()?;
        let config = impala_config::ImpalaConfig::default();
        for iter in [2, 10, 4] {
            save_checkpoint(dir.path(), &state(iter), &config, &[], learner_files)?;
        }
        // Saving the same iteration again replaces it.
        save_checkpoint(dir.path(), &state(10), &config, &[], learner_files)?;
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
        let err = save_checkpoint(dir.path(), &state(1), &Default::default(), &[], |d| {
            Err(ImpalaError::corrupt_checkpoint(d, "boom".into()))
        });
        assert!(err.is_err());
        let left =
            fs::read_dir(dir.path()).map_err(|e| ImpalaError::io("read", dir.path(), e))?.count();
        assert_eq!(left, 0);
        assert!(matches!(find_checkpoint(dir.path()), Err(ImpalaError::NoCheckpoint { .. })));
        Ok(())
    }

    #[test]
    fn a_checkpoint_never_chooses_which_interpreter_runs() -> Result<()> {
        // As a forged checkpoint would, with its manifest recomputed: the save writes one.
        let dir = tmp()?;
        let config = impala_config::ImpalaConfig {
            python_executable: Some("/tmp/not-an-interpreter.sh".into()),
            ..Default::default()
        };
        let ckpt = save_checkpoint(dir.path(), &state(1), &config, &[], learner_files)?;
        let (_, loaded) = read_checkpoint(&ckpt)?;
        assert_eq!(loaded.python_executable, None);
        Ok(())
    }

    /// A config whose `model.custom_model` is a TorchScript file.
    fn scripted_config() -> impala_config::ImpalaConfig {
        let mut config = impala_config::ImpalaConfig::default();
        config.model.custom_model = Some("/elsewhere/residual_mlp.pt".into());
        config
    }

    const MODULE: &[u8] = b"a TorchScript module";

    #[test]
    fn a_flipped_byte_in_any_file_is_a_corrupt_checkpoint_naming_it() -> Result<()> {
        let dir = tmp()?;
        let ckpt = save_checkpoint(
            dir.path(),
            &state(3),
            &scripted_config(),
            &[(None, MODULE)],
            learner_files,
        )?;
        // The module's copy is checked as every file is.
        let required = [STATE_FILE, CONFIG_FILE].map(String::from);
        let learner = super::learner_files(&scripted_config(), false);
        for file in required.into_iter().chain(learner).chain([custom_model_copy(None)]) {
            let path = ckpt.join(&file);
            let original = fs::read(&path).map_err(|e| ImpalaError::io("read", &path, e))?;
            let mut flipped = original.clone();
            let last = flipped.len() - 1;
            flipped[last] ^= 0x01;
            write(&path, &flipped)?;
            let err = read_err(&ckpt)?;
            assert!(err.starts_with("corrupt checkpoint"), "{err}");
            assert!(err.contains(&format!("`{file}`")) && err.contains("SHA-256"), "{err}");
            assert!(!err.contains("--resume"), "{err}");
            write(&path, &original[..last])?;
            let err = read_err(&ckpt)?;
            assert!(err.contains(&format!("`{file}`")) && err.contains("truncated"), "{err}");
            fs::remove_file(&path).map_err(|e| ImpalaError::io("remove", &path, e))?;
            assert!(read_err(&ckpt)?.contains(&format!("`{file}` is missing")));
            write(&path, &original)?;
            read_checkpoint(&ckpt)?;
        }
        // A damaged manifest is named as such.
        let manifest = ckpt.join(MANIFEST_FILE);
        let text =
            fs::read_to_string(&manifest).map_err(|e| ImpalaError::io("read", &manifest, e))?;
        let digest_at = text.find("\"sha256\": \"").map_or(0, |i| i + 11);
        let mut damaged = text.clone().into_bytes();
        damaged[digest_at] = if damaged[digest_at] == b'0' { b'1' } else { b'0' };
        write(&manifest, &damaged)?;
        let err = read_err(&ckpt)?;
        assert!(err.contains("manifest.json is damaged"), "{err}");
        write(&manifest, &text[..text.len() / 2])?;
        assert!(read_err(&ckpt)?.contains("manifest.json is not valid JSON"));
        // A format-2 checkpoint without its manifest is corrupt, not silently unverified.
        fs::remove_file(&manifest).map_err(|e| ImpalaError::io("remove", &manifest, e))?;
        let err = read_err(&ckpt)?;
        assert!(err.starts_with("corrupt checkpoint") && err.contains("manifest.json"), "{err}");
        Ok(())
    }

    #[test]
    fn format_1_is_read_unverified_and_its_damaged_json_is_corrupt() -> Result<()> {
        let dir = tmp()?;
        let config = impala_config::ImpalaConfig::default();
        let ckpt = save_checkpoint(dir.path(), &state(3), &config, &[], learner_files)?;
        // What impala-rs wrote before the manifest: format 1, no num_restores.
        let mut old = serde_json::to_value(state(3)).map_err(|source| ImpalaError::Json {
            action: "write",
            path: ckpt.clone(),
            source,
        })?;
        old["format_version"] = 1.into();
        old.as_object_mut().map(|o| o.remove("num_restores"));
        write(&ckpt.join(STATE_FILE), old.to_string())?;
        let manifest = ckpt.join(MANIFEST_FILE);
        fs::remove_file(&manifest).map_err(|e| ImpalaError::io("remove", &manifest, e))?;
        let (read, c) = read_checkpoint(&ckpt)?;
        assert_eq!((read.format_version, read.num_restores, c), (1, 0, config));
        // A truncated config.json is damage, not a version mismatch.
        let config_path = ckpt.join(CONFIG_FILE);
        let text = fs::read_to_string(&config_path)
            .map_err(|e| ImpalaError::io("read", &config_path, e))?;
        write(&config_path, &text[..text.len() / 2])?;
        let err = read_err(&ckpt)?;
        assert!(err.starts_with("corrupt checkpoint") && err.contains("config.json"), "{err}");
        // One that parses but does not fit this version's config is incompatible.
        write(&config_path, r#"{"lr": "fast"}"#)?;
        assert!(read_err(&ckpt)?.contains("does not fit this version's config"));
        Ok(())
    }

    #[test]
    fn damaged_and_foreign_checkpoints_are_named() -> Result<()> {
        let dir = tmp()?;
        let ckpt = save_checkpoint(dir.path(), &state(3), &Default::default(), &[], learner_files)?;
        let state_path = ckpt.join(STATE_FILE);
        let manifest = ckpt.join(MANIFEST_FILE);
        fs::remove_file(&manifest).map_err(|e| ImpalaError::io("remove", &manifest, e))?;
        write(&state_path, "{not json")?;
        assert!(matches!(read_checkpoint(&ckpt), Err(ImpalaError::CorruptCheckpoint { .. })));
        let mut future = serde_json::to_value(state(3)).map_err(|source| ImpalaError::Json {
            action: "write",
            path: state_path.clone(),
            source,
        })?;
        future["format_version"] = 99.into();
        write(&state_path, future.to_string())?;
        let err = read_err(&ckpt)?;
        assert!(err.contains("format 99") && err.contains("or newer"), "{err}");
        // A newer manifest is refused as newer, before its files are checked.
        write(&manifest, r#"{"format_version": 3, "impala_rs_version": "0.9.0"}"#)?;
        let err = read_err(&ckpt)?;
        assert!(err.contains("format 3 (written by impala-rs 0.9.0)"), "{err}");
        Ok(())
    }

    #[test]
    fn the_config_names_the_modules_copy_wherever_the_checkpoint_is() -> Result<()> {
        let dir = tmp()?;
        let runs = dir.path().join("runs");
        let ckpt = save_checkpoint(
            &runs,
            &state(3),
            &scripted_config(),
            &[(None, MODULE)],
            learner_files,
        )?;
        let saved = fs::read_to_string(ckpt.join(CONFIG_FILE))
            .map_err(|e| ImpalaError::io("read", &ckpt, e))?;
        assert!(saved.contains("\"custom_model\": \"learner/custom_model.pt\""), "{saved}");
        // Moved elsewhere, the checkpoint still names its own copy, by an absolute path.
        let moved = dir.path().join("moved");
        fs::rename(&runs, &moved).map_err(|e| ImpalaError::io("rename", &runs, e))?;
        let ckpt = moved.join(checkpoint_name(3));
        let (_, config) = read_checkpoint(&ckpt)?;
        let copy = ckpt.join(LEARNER_DIR).join(CUSTOM_MODEL_FILE);
        assert_eq!(config.model.custom_model, Some(copy.to_string_lossy().into_owned()));
        assert_eq!(fs::read(&copy).map_err(|e| ImpalaError::io("read", &copy, e))?, MODULE);
        let mut expected = scripted_config();
        expected.model.custom_model.clone_from(&config.model.custom_model);
        assert_eq!(config, expected);
        // A manifest rewritten without the copy (consistent, but missing it) is refused.
        fs::remove_file(&copy).map_err(|e| ImpalaError::io("remove", &copy, e))?;
        write_manifest(&ckpt, &state(3))?;
        let err = read_err(&ckpt)?;
        assert!(err.starts_with("corrupt checkpoint"), "{err}");
        assert!(
            err.contains("does not list `learner/custom_model.pt`, the TorchScript module"),
            "{err}"
        );
        Ok(())
    }

    #[test]
    fn a_policy_s_own_module_is_copied_into_its_learner_folder() -> Result<()> {
        let dir = tmp()?;
        let mut config = impala_config::ImpalaConfig {
            policies: vec!["left".into(), "right".into()],
            ..Default::default()
        };
        config.policy_config.insert(
            "left".into(),
            serde_json::from_str(
                r#"{"lr": 0.001, "model": {"custom_model": "/elsewhere/left.pt"}}"#,
            )
            .map_err(|e| corrupt(dir.path(), e.to_string()))?,
        );
        config.model.custom_model = Some("/elsewhere/shared.pt".into());
        let modules = [(Some("left"), &b"left module"[..]), (None, MODULE)];
        let ckpt = save_checkpoint(dir.path(), &state(3), &config, &modules, learner_files)?;
        let (_, loaded) = read_checkpoint(&ckpt)?;
        let left = ckpt.join(LEARNER_DIR).join("left").join(CUSTOM_MODEL_FILE);
        let shared = ckpt.join(LEARNER_DIR).join(CUSTOM_MODEL_FILE);
        let path = |p: &Path| p.to_string_lossy().into_owned();
        assert_eq!(
            loaded.for_policy("left").map(|c| c.model.custom_model).ok(),
            Some(Some(path(&left)))
        );
        assert_eq!(
            loaded.for_policy("right").map(|c| c.model.custom_model).ok(),
            Some(Some(path(&shared)))
        );
        assert_eq!(loaded.policy_config["left"]["lr"], 0.001);
        assert_eq!(fs::read(&left).map_err(|e| ImpalaError::io("read", &left, e))?, b"left module");
        Ok(())
    }

    #[test]
    fn impala_resnet_needs_no_file_its_config_says_it_all() -> Result<()> {
        let dir = tmp()?;
        let mut config = impala_config::ImpalaConfig::default();
        config.model.custom_model = Some("impala_resnet".into());
        config.model.custom_model_config =
            [("channels".to_string(), serde_json::json!([8, 16])), ("hidden".into(), 64.into())]
                .into();
        let ckpt = save_checkpoint(dir.path(), &state(3), &config, &[], learner_files)?;
        let (_, read) = read_checkpoint(&ckpt)?;
        assert_eq!(read, config);
        assert!(!ckpt.join(LEARNER_DIR).join(CUSTOM_MODEL_FILE).exists());
        Ok(())
    }
}
