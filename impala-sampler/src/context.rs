//! How env runners build their environments and policies.

use std::collections::BTreeMap;
use std::sync::Arc;

use impala_core::{CoreError, Env, Policy};

/// What an env factory gets (RLlib's `EnvContext`): which runner and which of its envs is being
/// built, the env's seed and the user's `env_config`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EnvContext {
    /// The runner's id: 0 for the local (driver) runner, 1.. for runner threads.
    pub runner_index: usize,
    /// The env's index inside its runner (RLlib's `vector_index`).
    pub env_index: usize,
    /// Seed for the env's first reset: `seed + 1000 * runner_index + env_index`, as RLlib seeds
    /// vectorised workers, so every env in the process draws a different stream.
    pub seed: Option<u64>,
    /// The config's `env_config`, passed through unchanged.
    pub env_config: BTreeMap<String, serde_json::Value>,
}

impl EnvContext {
    /// The context of env `env_index` of runner `runner_index` under a base `seed`.
    ///
    /// ```
    /// use impala_sampler::EnvContext;
    /// let ctx = EnvContext::new(2, 3, Some(7), Default::default());
    /// assert_eq!(ctx.seed, Some(7 + 2 * 1000 + 3));
    /// ```
    pub fn new(
        runner_index: usize,
        env_index: usize,
        seed: Option<u64>,
        env_config: BTreeMap<String, serde_json::Value>,
    ) -> Self {
        let seed = seed.map(|s| s.wrapping_add(1000 * runner_index as u64 + env_index as u64));
        EnvContext { runner_index, env_index, seed, env_config }
    }
}

/// Builds one environment for a runner (RLlib's env creator).
pub type EnvFactory = Arc<dyn Fn(&EnvContext) -> Result<Box<dyn Env>, CoreError> + Send + Sync>;

/// Builds one policy copy per runner (the argument is the runner's id; 0 = local/driver runner).
pub type PolicyFactory = Arc<dyn Fn(usize) -> Result<Box<dyn Policy>, CoreError> + Send + Sync>;
