//! impala-gym's integration tests: Python envs through worker processes.

mod atari;
mod bridge;
mod faults;
mod multi_agent;
mod spaces;

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use impala_gym::GymSettings;

/// Settings for `env` with the test envs' folder on `sys.path`.
pub fn settings(env: &str) -> GymSettings {
    let mut s = GymSettings::new(env);
    s.sys_path = vec![PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/envs")];
    s.timeout = Duration::from_secs(30);
    s
}

/// `settings` with `n` envs per runner, `k` per worker.
pub fn settings_n(env: &str, n: usize, k: usize) -> GymSettings {
    let mut s = settings(env);
    s.num_envs = NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN);
    s.envs_per_worker = NonZeroUsize::new(k).unwrap_or(NonZeroUsize::MIN);
    s
}

/// A `serde_json` object from `(key, value)` pairs.
pub fn config(
    pairs: &[(&str, serde_json::Value)],
) -> std::collections::BTreeMap<String, serde_json::Value> {
    pairs.iter().map(|(k, v)| ((*k).to_string(), v.clone())).collect()
}

/// What the tests return.
pub type TestResult = Result<(), Box<dyn std::error::Error>>;
