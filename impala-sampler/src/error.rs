//! The sampler's error type.

use impala_core::CoreError;

/// Everything that can go wrong while sampling.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SamplerError {
    /// An environment or policy failed (building it, stepping it, inference).
    #[error(transparent)]
    Core(#[from] CoreError),
    /// Building or stepping the vectorised envs failed.
    #[error(transparent)]
    Env(#[from] impala_envs::EnvError),
    /// A config value the sampler cannot work with.
    #[error("invalid sampler config: `{field}` {reason}")]
    InvalidConfig {
        /// The `ImpalaConfig` field.
        field: &'static str,
        /// Why it is rejected.
        reason: String,
    },
    /// A policy returned buffers of the wrong size.
    #[error("policy output `{what}` has {got} values, expected {expected}")]
    PolicyOutput {
        /// Which output buffer.
        what: &'static str,
        /// Expected number of values.
        expected: usize,
        /// Number of values received.
        got: usize,
    },
    /// An env runner failed (env or policy error, or a panic) and restarting it is disabled
    /// (`restart_failed_env_runners = false`).
    #[error("env runner {runner_id} failed: {reason}")]
    EnvRunnerFailed {
        /// The runner's id (1-based; 0 is the local runner).
        runner_id: usize,
        /// The error or panic message.
        reason: String,
    },
    /// An env runner failed after the group used up `max_num_env_runner_restarts`.
    #[error(
        "env runner {runner_id} failed and the {max_restarts} allowed restarts \
         (max_num_env_runner_restarts) are used up; last failure: {reason}"
    )]
    TooManyRestarts {
        /// The runner's id.
        runner_id: usize,
        /// The configured limit.
        max_restarts: usize,
        /// The last error or panic message.
        reason: String,
    },
    /// A runner slot failed `failures` times in a row before it ever delivered a fragment:
    /// its env fails on every reset or step, and restarting it would train nothing.
    #[error(
        "env runner {runner_id} failed {failures} times in a row without delivering a single \
         sample, so the env is broken rather than failing now and then (restarts go on only \
         for runners that sampled before); fix the env; its first error: {first_error}"
    )]
    BrokenEnv {
        /// The runner's id.
        runner_id: usize,
        /// Failures in a row.
        failures: usize,
        /// The first failure's message (the env's own error).
        first_error: String,
    },
    /// A multi-agent runner's agents, policies and spaces do not fit together.
    #[error("policy mapping: {reason}")]
    PolicyMapping {
        /// What does not fit, naming the agent and the policy.
        reason: String,
    },

    /// A multi-agent env returned NaN or an infinity for an agent: a failure of that env (its
    /// runner fails and is restarted per `restart_failed_env_runners`), caught where the value
    /// enters rather than later in the learner's loss.
    #[error(
        "env `{env}` (env {index} of its runner) returned a non-finite {field} for agent \
         `{agent}` ({value} at value {position}) at step {episode_step} of its episode; envs \
         must return finite numbers"
    )]
    NonFinite {
        /// The environment id.
        env: String,
        /// The env's index in its runner.
        index: usize,
        /// The agent's id.
        agent: String,
        /// `observation`, `reset observation` or `reward`.
        field: &'static str,
        /// The offending value's index in the agent's flat observation (0 for a reward).
        position: usize,
        /// The value.
        value: f64,
        /// Steps into the episode (0: the reset).
        episode_step: u64,
    },

    /// A runner was asked to build no envs.
    #[error("an env runner needs at least one env")]
    NoEnvs,

    /// An aggregation worker failed (a panic in its mix-in replay).
    #[error("aggregation worker {worker_index} failed: {reason}")]
    AggregationWorkerFailed {
        /// The worker's index.
        worker_index: usize,
        /// What happened.
        reason: String,
    },
    /// The mix-in replay buffer rejected its settings or failed to concatenate.
    #[error("mix-in replay: {reason}")]
    Replay {
        /// The replay buffer's error, as text.
        reason: String,
    },
    /// A sampler thread panicked outside the code that catches panics.
    #[error("thread `{thread}` panicked: {reason}")]
    ThreadPanicked {
        /// The thread's name.
        thread: String,
        /// The panic message.
        reason: String,
    },
    /// The OS refused to start a thread.
    #[error("could not spawn thread `{thread}`: {reason}")]
    Spawn {
        /// The thread's name.
        thread: String,
        /// The OS error.
        reason: String,
    },
}

impl From<impala_replay::ReplayError> for SamplerError {
    fn from(e: impala_replay::ReplayError) -> Self {
        SamplerError::Replay { reason: e.to_string() }
    }
}

/// The crate's result alias.
pub type Result<T, E = SamplerError> = std::result::Result<T, E>;

/// The message of a caught panic payload, for errors that report a panic.
///
/// ```
/// let payload = std::panic::catch_unwind(|| panic!("boom")).err().ok_or("no panic")?;
/// assert_eq!(impala_sampler::panic_message(payload.as_ref()), "panic: boom");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        format!("panic: {s}")
    } else if let Some(s) = payload.downcast_ref::<String>() {
        format!("panic: {s}")
    } else {
        "panic with a non-string payload".into()
    }
}
