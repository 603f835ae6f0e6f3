//! The crate's error type. Every message names the problem and, where the user can act, the fix,
//! in terms of options and values (never a command's flags, which a caller maps to its own). A
//! message is the error's own: its cause is its [`source`](std::error::Error::source), and
//! [`error_chain`] / [`one_line`] join the two.

use std::error::Error;
use std::path::{Path, PathBuf};

/// Errors of the algorithm, its run folder and its checkpoints.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImpalaError {
    /// Code on the driver's thread panicked (a bug, or a caller's callback).
    #[error("code on the driver's thread failed: {message}")]
    DriverPanicked {
        /// The panic's message.
        message: String,
    },
    /// The settings would make the run hold more memory than the machine has.
    #[error(
        "the run would hold about {needed_gib:.1} GiB, more than this machine's \
         {memory_gib:.1} GiB: {detail}; make the largest of these smaller"
    )]
    MemoryBudget {
        /// The estimate.
        needed_gib: f64,
        /// The machine's memory.
        memory_gib: f64,
        /// The arithmetic, by the options that set each part.
        detail: String,
    },
    /// A file or folder operation failed.
    #[error("could not {action} `{path}`")]
    Io {
        /// What was attempted (`create`, `write`, `read`, `rename`, ...).
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The disk holding a file filled up while it was written.
    #[error(
        "could not {action} `{path}`: the disk is full ({available} bytes free there, about \
         {needed} needed); free some space, or give the run a folder on another disk"
    )]
    DiskFull {
        /// What was attempted (`write`, ...).
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// About how many bytes the write needed.
        needed: u64,
        /// Bytes free on the disk after the failure.
        available: u64,
    },
    /// The run folder cannot be created or written.
    #[error("run folder `{path}` is not writable")]
    RunDirNotWritable {
        /// The run folder.
        path: PathBuf,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// A new run was pointed at a folder that already holds another run's results.
    #[error(
        "run folder `{path}` already holds a run's results; resume it, or choose another run_dir"
    )]
    RunDirInUse {
        /// The run folder.
        path: PathBuf,
    },
    /// A new run was pointed at a folder holding files that are not a run's: its results
    /// would be written among them.
    #[error(
        "run_dir `{path}` holds files that are not a run's (`{example}`{}); choose a new or \
         empty folder for the run",
        if *others > 0 { format!(" and {others} more") } else { String::new() }
    )]
    RunDirNotARun {
        /// The folder.
        path: PathBuf,
        /// The first foreign entry by name.
        example: String,
        /// How many more there are.
        others: usize,
    },
    /// A TensorBoard event file failed its checks.
    #[error("event file `{path}` is corrupt: {reason}")]
    CorruptEventFile {
        /// The event file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A checkpoint cannot be read: missing or damaged files (a file that does not match its
    /// checksum in the manifest), or weights that are NaN or infinite.
    #[error("corrupt checkpoint `{path}`: {reason}; it is unreadable, so {fix}")]
    CorruptCheckpoint {
        /// The checkpoint folder.
        path: PathBuf,
        /// What is missing or damaged.
        reason: String,
        /// What to use instead.
        fix: String,
    },
    /// A checkpoint was written by an incompatible version or for a different setup.
    #[error("checkpoint `{path}` cannot be used here: {reason}; {fix}")]
    IncompatibleCheckpoint {
        /// The checkpoint folder.
        path: PathBuf,
        /// What does not match.
        reason: String,
        /// How to proceed.
        fix: String,
    },
    /// A checkpoint path (to resume or evaluate) points at nothing that holds a checkpoint.
    #[error(
        "no checkpoint found at `{path}`; give a checkpoint_NNNNNN folder or a run folder that \
         holds one (runs save them every `checkpoint_every` iterations and at the end)"
    )]
    NoCheckpoint {
        /// Where we looked.
        path: PathBuf,
    },
    /// A trained policy ([`crate::TrainedPolicy`]) was given observations, recurrent state or
    /// weights that do not fit its model.
    #[error("{what} {problem}; {fix}")]
    PolicyInput {
        /// What was given (`observations`, `state`, `weight \`policy.fc0.weight\``).
        what: String,
        /// How it does not fit.
        problem: String,
        /// What to give instead.
        fix: String,
    },
    /// The configuration asks for resources this machine does not have.
    #[error("impossible resource request: {reason}; {fix}")]
    ImpossibleResources {
        /// What was asked and what exists.
        reason: String,
        /// How to change the config.
        fix: String,
    },
    /// The learner thread failed; RLlib's message, with the real cause (in the message, not
    /// as the source: RLlib's words end in it).
    #[error("The learner thread died while training! cause: {}", error_chain(cause))]
    LearnerDied {
        /// Why it died.
        cause: impala_learner::LearnerError,
    },
    /// The learner could not write its part of a checkpoint.
    #[error("could not save the learner to `{path}`")]
    LearnerCheckpoint {
        /// The learner's checkpoint folder.
        path: PathBuf,
        /// The learner's error.
        #[source]
        cause: impala_learner::LearnerError,
    },
    /// The learner thread died earlier (its cause was reported then by
    /// [`crate::Impala::train`]); its last good weights can still be saved and evaluated.
    #[error(
        "the learner died earlier ({cause}); save its last good weights with save(), \
         or restore a checkpoint to continue"
    )]
    LearnerDiedEarlier {
        /// The cause reported when it died.
        cause: String,
    },
    /// The algorithm was used after [`crate::Impala::stop`].
    #[error("the algorithm was stopped; build a new one (or restore a checkpoint) to continue")]
    Stopped,
    /// The config is invalid or cannot be loaded.
    #[error(transparent)]
    Config(#[from] impala_config::ConfigError),
    /// [`ImpalaBuilder::model`](crate::ImpalaBuilder::model) with remote env runners, which
    /// build their model from the config.
    #[error(
        "a model factory (ImpalaBuilder::model) cannot reach remote env runners, which build \
         the model from the config; set `model.custom_model` to a TorchScript file (sent to \
         them) instead"
    )]
    ModelFactoryWithRemoteRunners,
    /// [`ImpalaBuilder::record_episodes`](crate::ImpalaBuilder::record_episodes) with remote
    /// env runners, whose fragments carry no episode records.
    #[error(
        "episode callbacks (on_episode_start, on_episode_step, on_episode_end, ...) need local \
         env runners: the episodes they replay are recorded by the runner threads of this \
         process, and remote env runners (impala train --listen, env_runner_backend = \"ray\") \
         send none; use local env runners, or leave the episode callbacks out"
    )]
    EpisodeRecordingWithRemoteRunners,
    /// The run's TorchScript module does not fit the message that welcomes a remote env
    /// runner (it travels in the run's session data).
    #[error(
        "the TorchScript module `{path}` (model.custom_model, {module_bytes} bytes) makes the \
         message that welcomes a remote env runner {message_bytes} bytes, above the \
         {limit}-byte message limit of the runners' transport; use a smaller module, or raise \
         the limit on the driver and on every runner (max_message_bytes of \
         impala::remote::ServerSettings and ClientSettings)"
    )]
    ModuleTooLarge {
        /// The module's file.
        path: PathBuf,
        /// Its size.
        module_bytes: usize,
        /// The welcome message's size with it.
        message_bytes: usize,
        /// The transport's largest message.
        limit: usize,
    },
    /// The TorchScript module a remote env runner got in its session is not the one the
    /// driver sent (it does not decode, or its SHA-256 is not the one sent with it).
    #[error(
        "the TorchScript module (model.custom_model) that this env runner got from the driver \
         {problem}: it was damaged on the way and is not loaded; connect the runner again (TLS \
         between the driver and its runners refuses damaged messages)"
    )]
    SessionModule {
        /// What does not match.
        problem: String,
    },
    /// The environment cannot be built.
    #[error(transparent)]
    Env(#[from] impala_envs::EnvError),
    /// An environment or policy of the caller's failed.
    #[error(transparent)]
    Core(#[from] impala_core::CoreError),
    /// A Python env could not be started.
    #[error(transparent)]
    Gym(#[from] impala_gym::GymError),
    /// An option that does not apply to this env.
    #[error("`{key}` {problem}; {fix}")]
    EnvOption {
        /// The config key.
        key: &'static str,
        /// Why it does not apply.
        problem: String,
        /// What to do.
        fix: String,
    },
    /// An option a multi-agent run does not support.
    #[error("`{key}` does not apply to a multi-agent env: {reason}")]
    MultiAgentOption {
        /// The config key (or flag).
        key: &'static str,
        /// Why, and what to do instead.
        reason: String,
    },
    /// The `multi_agent()` options do not fit the env's agents.
    #[error(transparent)]
    PolicyMapping(#[from] impala_config::MappingError),
    /// Serving or reaching remote env runners failed.
    #[error(transparent)]
    Remote(#[from] impala_remote::RemoteError),
    /// The transport of the run's remote env runners failed (none came in time).
    #[error(transparent)]
    RunnerTransport(Box<dyn std::error::Error + Send + Sync>),
    /// Sampling failed (env runners beyond their restarts, batch building).
    #[error(transparent)]
    Sampler(#[from] impala_sampler::SamplerError),
    /// The learner could not be built or used.
    #[error(transparent)]
    Learner(#[from] impala_learner::LearnerError),
    /// A result or state file could not be (de)serialised.
    #[error("could not {action} JSON `{path}`")]
    Json {
        /// `read` or `write`.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
}

impl ImpalaError {
    /// [`ImpalaError::CorruptCheckpoint`] of a checkpoint to train from: the fix is another
    /// checkpoint of the run, or a new run.
    pub fn corrupt_checkpoint(path: &Path, reason: String) -> Self {
        let fix = "use another checkpoint_NNNNNN folder of the run, or start a new run".into();
        ImpalaError::CorruptCheckpoint { path: path.to_path_buf(), reason, fix }
    }

    /// Shorthand for [`ImpalaError::Io`].
    pub fn io(action: &'static str, path: &Path, source: std::io::Error) -> Self {
        ImpalaError::Io { action, path: path.to_path_buf(), source }
    }

    /// This error as [`ImpalaError::DiskFull`] when it is a write that found the disk full,
    /// with the `needed` bytes and the space left; any other error as it is.
    pub(crate) fn disk_full_needing(self, needed: u64) -> Self {
        match self {
            ImpalaError::Io { action, path, source }
                if source.kind() == std::io::ErrorKind::StorageFull =>
            {
                let folder = path.parent().filter(|p| !p.as_os_str().is_empty());
                match fs4::available_space(folder.unwrap_or(Path::new("."))) {
                    Ok(available) => ImpalaError::DiskFull { action, path, needed, available },
                    Err(_) => ImpalaError::Io { action, path, source },
                }
            }
            other => other,
        }
    }
}

/// The crate's result alias.
pub type Result<T, E = ImpalaError> = std::result::Result<T, E>;

/// An error and its causes (its [`source`](Error::source) chain), joined by `: `: what a
/// message means in full, since each error's own message leaves its cause out.
///
/// ```
/// use std::path::Path;
/// let not_found = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
/// let err = impala::ImpalaError::io("read", Path::new("run/result.json"), not_found);
/// assert_eq!(err.to_string(), "could not read `run/result.json`");
/// assert_eq!(impala::error_chain(&err), "could not read `run/result.json`: no such file");
/// ```
pub fn error_chain(error: &(dyn Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(err) = cause {
        text.push_str(": ");
        text.push_str(&err.to_string());
        cause = err.source();
    }
    text
}

/// [`error_chain`] on one line, as a terminal prints an error: the lines of a message that
/// lists several problems are joined by `; `.
///
/// ```
/// use impala::config::{ConfigFormat, ImpalaConfig};
///
/// let text = "gamma = 1.5\nentropy_coeff = -1.0\n";
/// let err = ImpalaConfig::from_str_as(text, ConfigFormat::Toml)
///     .and_then(|loaded| loaded.config.validate())
///     .err()
///     .ok_or("the config was accepted")?;
/// let line = impala::one_line(&err);
/// assert!(line.starts_with("2 problem(s) in the config: - `gamma`"), "{line}");
/// assert!(line.contains("; - `entropy_coeff`") && !line.contains('\n'), "{line}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn one_line(error: &(dyn Error + 'static)) -> String {
    let chain = error_chain(error);
    let lines: Vec<&str> = chain.lines().map(str::trim).filter(|line| !line.is_empty()).collect();
    lines.join("; ").replace(":;", ":")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error whose cause is its source, as a caller's would wrap the library's.
    #[derive(Debug, thiserror::Error)]
    #[error("saving failed")]
    struct Saving(#[source] ImpalaError);

    #[test]
    fn one_line_joins_causes_and_the_lines_of_a_message() {
        let disk_full = std::io::Error::other("disk full");
        let err = Saving(ImpalaError::io("write", Path::new("x"), disk_full));
        assert_eq!(one_line(&err), "saving failed: could not write `x`: disk full");
        let multi = std::io::Error::other("2 problem(s) in the config:\n  - a\n  - b");
        assert_eq!(one_line(&multi), "2 problem(s) in the config: - a; - b");
    }
}
