//! The crate's error type.

use impala_core::CoreError;

/// Errors raised while building environments, wrappers and vectorised envs.
///
/// Stepping errors are [`CoreError`]s (the [`impala_core::Env`] trait's error), wrapped here as
/// [`EnvError::Core`] when they pass through a [`crate::VectorEnv`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvError {
    /// No environment, native or registered, has this id.
    #[error("unknown environment `{id}`{}; known ids: {}", did_you_mean(.suggestion), .known.join(", "))]
    UnknownEnv {
        /// The id asked for.
        id: String,
        /// The nearest known id, if one is close.
        suggestion: Option<String>,
        /// Every known id: the natives, then the registered ones sorted.
        known: Vec<String>,
    },
    /// An `env_config` key that this environment does not take.
    #[error("unknown env_config key `{key}` for `{env}`{}; accepted keys: {}", did_you_mean(.suggestion), .accepted.join(", "))]
    UnknownConfigKey {
        /// The environment id.
        env: String,
        /// The offending key.
        key: String,
        /// The nearest accepted key, if one is close.
        suggestion: Option<String>,
        /// Every key this environment accepts.
        accepted: Vec<String>,
    },
    /// An `env_config` key that the original env takes but this one cannot support.
    #[error("env_config `{key}` is not supported by `{env}`: {reason}")]
    UnsupportedConfigKey {
        /// The environment id.
        env: String,
        /// The key.
        key: String,
        /// Why it is not supported.
        reason: String,
    },
    /// An `env_config` value of the wrong type or out of range.
    #[error("env_config `{key}` for `{env}` must be {expected}, got {got}")]
    InvalidConfigValue {
        /// The environment id.
        env: String,
        /// The key.
        key: String,
        /// What the value must be.
        expected: String,
        /// The value given, as JSON.
        got: String,
    },
    /// [`crate::register`] was given an id that a native or registered env already has.
    #[error("environment id `{id}` is already registered, and registrations cannot be replaced; register yours under another id (e.g. with your own prefix, `my-project/{id}`, or a new `-vN` version)")]
    AlreadyRegistered {
        /// The id asked for.
        id: String,
    },
    /// [`crate::register`] was given a registration it cannot use (an empty id, a zero time limit, ...).
    #[error("cannot register environment `{id}`: {reason}")]
    InvalidRegistration {
        /// The id asked for.
        id: String,
        /// What is wrong with the registration.
        reason: String,
    },
    /// The creator of a registered env failed while [`crate::list`] built it to read its spec.
    #[error("the creator registered for `{id}` failed to build it with an empty env_config")]
    CreatorFailed {
        /// The registered id.
        id: String,
        /// The creator's error.
        source: Box<EnvError>,
    },
    /// [`crate::make_stateful`] was asked for a registered env (it builds only the native envs).
    #[error("`{id}` is a registered environment and make_stateful builds only the native ones; use make")]
    NotStateful {
        /// The registered id.
        id: String,
    },
    /// A wrapper or vectorised env that cannot be built from what it was given.
    #[error("cannot build {what}: {reason}")]
    InvalidSetup {
        /// Which wrapper or helper.
        what: String,
        /// Why.
        reason: String,
    },
    /// An env returned NaN or an infinity: a failure of that env (its runner fails and is
    /// restarted per `restart_failed_env_runners`), caught where the value enters rather than
    /// later in the learner's loss.
    #[error(
        "env `{env}` (env {index} of its vector) returned a non-finite {field} ({value} at \
         value {position}) at step {episode_step} of its episode; envs must return finite numbers"
    )]
    NonFinite {
        /// The environment id.
        env: String,
        /// The env's index in its vector env.
        index: usize,
        /// `observation`, `reset observation` or `reward`.
        field: &'static str,
        /// The offending value's index in the flat observation (0 for a reward).
        position: usize,
        /// The value.
        value: f64,
        /// Steps into the episode (0: the reset).
        episode_step: u64,
    },
    /// An error from an environment (see [`CoreError`]).
    #[error(transparent)]
    Core(#[from] CoreError),
}

fn did_you_mean(suggestion: &Option<String>) -> String {
    suggestion.as_ref().map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default()
}

/// The crate's result alias.
pub type Result<T, E = EnvError> = std::result::Result<T, E>;
