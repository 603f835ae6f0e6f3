//! The crate's error type.

/// Errors raised by the shared types of impala-core.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CoreError {
    /// A space was described inconsistently (bounds of different lengths, low > high, ...).
    #[error("invalid space: {reason}")]
    InvalidSpace {
        /// What is wrong with it.
        reason: String,
    },
    /// An action does not belong to the action space it was given to.
    #[error("invalid action {action:?} for {space}: {reason}")]
    InvalidAction {
        /// The action as the env received it.
        action: Vec<f32>,
        /// The action space, described.
        space: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A buffer or batch had the wrong size.
    #[error("shape mismatch for `{what}`: expected {expected} values, got {got}")]
    ShapeMismatch {
        /// Which buffer or field.
        what: String,
        /// Expected number of values.
        expected: usize,
        /// Number of values received.
        got: usize,
    },
    /// Batches that cannot be concatenated (different fragment lengths or layouts).
    #[error("cannot concatenate sample batches: {reason}")]
    IncompatibleBatches {
        /// What differs.
        reason: String,
    },
    /// An environment failed for a reason of its own.
    #[error("environment `{env}` failed: {reason}")]
    Env {
        /// The environment id.
        env: String,
        /// What happened.
        reason: String,
    },
    /// A policy failed (inference error, weights that do not fit the model, ...).
    #[error("policy failed: {reason}")]
    Policy {
        /// What happened.
        reason: String,
    },
    /// `step` was called on an environment that has not been reset or whose episode ended.
    #[error(
        "environment `{env}` must be reset before stepping (episode not started or already ended)"
    )]
    NeedsReset {
        /// The environment id.
        env: String,
    },
}

/// The crate's result alias.
pub type Result<T, E = CoreError> = std::result::Result<T, E>;
