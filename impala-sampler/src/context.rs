//! How env runners build their environments and policies.

use std::collections::BTreeMap;
use std::sync::Arc;

use impala_core::{CoreError, Env, Policy};

/// What an env factory gets (RLlib's `EnvContext`): which runner, which incarnation of it and
/// which of its envs is being built, the env's seed and the user's `env_config`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EnvContext {
    /// The runner's id: 0 for the local (driver) runner, 1.. for runner threads.
    pub runner_index: usize,
    /// The env's index inside its runner (RLlib's `vector_index`).
    pub env_index: usize,
    /// How many times the runner was restarted before this build: 0 at its first start, then
    /// 1, 2, ... (RLlib's `recreated_worker`, as a count).
    pub incarnation: u64,
    /// Seed for the env's first reset: `seed + 1000 * runner_index + env_index` at incarnation
    /// 0, as RLlib seeds vectorised workers, so every env in the process draws a different
    /// stream; a restarted runner's envs draw new streams (see [`EnvContext::for_incarnation`]).
    pub seed: Option<u64>,
    /// The config's `env_config`, passed through unchanged.
    pub env_config: BTreeMap<String, serde_json::Value>,
}

impl EnvContext {
    /// The context of env `env_index` of runner `runner_index` under a base `seed`, at the
    /// runner's first start (incarnation 0).
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
        Self::for_incarnation(runner_index, 0, env_index, seed, env_config)
    }

    /// The context of env `env_index` of incarnation `incarnation` of runner `runner_index`.
    /// Incarnation 0 is [`EnvContext::new`]; a restarted runner (incarnation `k >= 1`) seeds
    /// its envs `mix(seed, k) + 1000 * runner_index + env_index`, where `mix` is a SplitMix64
    /// hash, so it does not replay the episodes its earlier incarnations saw, and a run stays
    /// reproducible.
    ///
    /// ```
    /// use impala_sampler::EnvContext;
    /// let first = EnvContext::for_incarnation(2, 0, 3, Some(7), Default::default());
    /// assert_eq!(first, EnvContext::new(2, 3, Some(7), Default::default()));
    /// let restarted = EnvContext::for_incarnation(2, 1, 3, Some(7), Default::default());
    /// assert_eq!(restarted.incarnation, 1);
    /// assert_ne!(restarted.seed, first.seed);
    /// ```
    pub fn for_incarnation(
        runner_index: usize,
        incarnation: u64,
        env_index: usize,
        seed: Option<u64>,
        env_config: BTreeMap<String, serde_json::Value>,
    ) -> Self {
        let seed = seed.map(|s| {
            stream_seed(s, incarnation).wrapping_add(1000 * runner_index as u64 + env_index as u64)
        });
        EnvContext { runner_index, env_index, incarnation, seed, env_config }
    }
}

/// The seed of stream `stream` of `seed`: `seed` itself for stream 0, else a SplitMix64 hash of
/// both, so nearby streams (runner incarnations, restores) draw unrelated numbers.
///
/// ```
/// use impala_sampler::stream_seed;
/// assert_eq!(stream_seed(7, 0), 7);
/// assert_ne!(stream_seed(7, 1), stream_seed(7, 2));
/// ```
pub fn stream_seed(seed: u64, stream: u64) -> u64 {
    if stream == 0 {
        return seed;
    }
    splitmix64(seed ^ splitmix64(stream))
}

/// SplitMix64's finaliser: a bijective hash that spreads nearby inputs far apart.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Builds one environment for a runner (RLlib's env creator).
pub type EnvFactory = Arc<dyn Fn(&EnvContext) -> Result<Box<dyn Env>, CoreError> + Send + Sync>;

/// Builds one policy copy per runner (the argument is the runner's id; 0 = local/driver runner).
/// A factory that should seed each restart of a runner differently takes the runner's
/// [`EnvContext`] instead (see [`EnvRunnerGroup::with_context_policies`](crate::EnvRunnerGroup::with_context_policies)).
pub type PolicyFactory = Arc<dyn Fn(usize) -> Result<Box<dyn Policy>, CoreError> + Send + Sync>;

/// A policy factory that gets the runner's context: its env 0's [`EnvContext`] (runner index,
/// incarnation, seed, `env_config`), so it can seed action sampling per incarnation. (Spelled
/// out in the public signatures that take one: `Arc<dyn Fn(&EnvContext) -> Result<Box<dyn
/// Policy>, CoreError> + Send + Sync>`.)
pub(crate) type ContextPolicyFactory =
    Arc<dyn Fn(&EnvContext) -> Result<Box<dyn Policy>, CoreError> + Send + Sync>;

/// A [`PolicyFactory`] as a [`ContextPolicyFactory`] (it sees only the runner's id).
pub(crate) fn by_runner_id(factory: PolicyFactory) -> ContextPolicyFactory {
    Arc::new(move |ctx: &EnvContext| factory(ctx.runner_index))
}
