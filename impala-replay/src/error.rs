//! The crate's error type.

/// Errors raised by the mix-in replay buffer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// `replay_ratio` must lie in `[0, 1]` (the fraction of replayed batches in the output).
    #[error("replay_ratio must be in [0, 1], got {replay_ratio}")]
    InvalidReplayRatio {
        /// The ratio given.
        replay_ratio: f64,
    },
    /// `replay_proportion` must be finite and `>= 0` (replayed batches per new batch).
    #[error("replay_proportion must be finite and >= 0, got {replay_proportion}")]
    InvalidReplayProportion {
        /// The proportion given.
        replay_proportion: f64,
    },
    /// A buffer of zero slots can neither store nor replay anything.
    #[error("replay buffer capacity must be at least 1 slot, got 0")]
    ZeroCapacity,
    /// Lockstep mode keeps one store for all policies under [`ALL_POLICIES`](crate::ALL_POLICIES);
    /// asking for one policy's store there is RLlib's `ValueError`.
    #[error(
        "policy `{policy_id}` requested in lockstep mode: all policies share one store, \
         addressed as `{all}`",
        all = crate::ALL_POLICIES
    )]
    LockstepPolicyId {
        /// The policy id asked for.
        policy_id: String,
    },
    /// The batch type failed to concatenate the replayed parts (its error is part of the
    /// message, not a `source`).
    #[error("cannot concatenate replayed batches: {cause}")]
    Concat {
        /// The batch type's own error.
        cause: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// The crate's result alias.
pub type Result<T, E = ReplayError> = std::result::Result<T, E>;
