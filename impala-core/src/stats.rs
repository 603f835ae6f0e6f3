//! Per-episode statistics reported by env runners.

/// One completed episode, as RLlib's episode metrics (`episode_return`, `episode_len`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EpisodeStats {
    /// Undiscounted sum of rewards.
    pub episode_return: f64,
    /// Number of env steps in the episode.
    pub episode_len: u64,
    /// Whether it ended by truncation (time limit) rather than termination.
    pub truncated: bool,
}
