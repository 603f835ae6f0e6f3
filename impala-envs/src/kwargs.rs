//! A native env's `env_config`: its keys checked against the env's registration, its values
//! read as typed keyword arguments (each env's module reads its own).

use crate::registry::Registration;
use crate::{EnvConfig, EnvError, Result};
use impala_core::suggest::did_you_mean;
use serde_json::Value;
use std::ops::{Range, RangeInclusive};
use std::time::Duration;

/// Why a native env refuses a per-runner key (as `CartPoleCrashing-v1`'s
/// `*_on_worker_indices`) when made without its runner's index.
const NO_WORKER_INDEX: &str = "an env made from its id and env_config alone (`impala_envs::make`) \
     does not know which env runner it runs on; the trainer's env runners make it with their \
     index (`impala_envs::make_for_worker`), where this key works";

/// Typed access to one native env's `env_config`, after checking that every key is accepted.
pub(crate) struct Kwargs<'a> {
    id: &'a str,
    config: &'a EnvConfig,
    /// The env runner the env is made for, when known ([`crate::make_for_worker`]).
    worker_index: Option<usize>,
    /// The time limit: `env_config`'s `max_episode_steps`, else the registration's.
    max_episode_steps: Option<usize>,
}

impl<'a> Kwargs<'a> {
    /// Checks `config` against `registration`'s keys: per-runner keys need `worker_index`,
    /// other keys must be `max_episode_steps` or one of its `config_keys`.
    pub(crate) fn new(
        registration: &'a Registration,
        config: &'a EnvConfig,
        worker_index: Option<usize>,
    ) -> Result<Self> {
        let id = registration.id.as_str();
        let per_worker = &registration.per_worker_keys;
        if worker_index.is_none() {
            if let Some(key) = per_worker.iter().find(|k| config.contains_key(**k)) {
                return Err(EnvError::UnsupportedConfigKey {
                    env: id.to_string(),
                    key: key.to_string(),
                    reason: NO_WORKER_INDEX.to_string(),
                });
            }
        }
        let accepted = || {
            std::iter::once(crate::MAX_EPISODE_STEPS)
                .chain(registration.config_keys.iter().map(String::as_str))
                .chain(per_worker.iter().copied())
        };
        if let Some(key) = config.keys().find(|k| !accepted().any(|a| a == k.as_str())) {
            return Err(EnvError::UnknownConfigKey {
                env: id.to_string(),
                key: key.clone(),
                suggestion: did_you_mean(key, accepted()).map(String::from),
                accepted: accepted().map(String::from).collect(),
            });
        }
        let max_episode_steps = registration.time_limit(config)?;
        Ok(Self { id, config, worker_index, max_episode_steps })
    }

    /// The time limit to wrap the env in, if any.
    pub(crate) fn max_episode_steps(&self) -> Option<usize> {
        self.max_episode_steps
    }

    /// Whether the env's runner is among the list of runner indices under `key` (RLlib's
    /// `crash_on_worker_indices`); true when the key is absent or its list is empty.
    pub(crate) fn on_listed_worker(&self, key: &str) -> Result<bool> {
        let Some(value) = self.config.get(key) else { return Ok(true) };
        let expected = "a list of env runner indices (non-negative integers), e.g. [1, 2]";
        let indices = value
            .as_array()
            .and_then(|items| items.iter().map(Value::as_u64).collect::<Option<Vec<u64>>>())
            .ok_or_else(|| self.invalid(key, expected, value))?;
        let Some(worker) = self.worker_index else { return Ok(true) };
        Ok(indices.is_empty() || u64::try_from(worker).is_ok_and(|w| indices.contains(&w)))
    }

    /// [`EnvError::InvalidConfigValue`] for this env's `key`.
    pub(crate) fn invalid(&self, key: &str, expected: &str, got: &impl ToString) -> EnvError {
        EnvError::InvalidConfigValue {
            env: self.id.to_string(),
            key: key.to_string(),
            expected: expected.to_string(),
            got: got.to_string(),
        }
    }

    pub(crate) fn bool(&self, key: &str, default: bool) -> Result<bool> {
        match self.config.get(key) {
            None => Ok(default),
            Some(v) => v.as_bool().ok_or_else(|| self.invalid(key, "a boolean", v)),
        }
    }

    pub(crate) fn f64(&self, key: &str, default: f64) -> Result<f64> {
        match self.config.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_f64()
                .filter(|x| x.is_finite())
                .ok_or_else(|| self.invalid(key, "a finite number", v)),
        }
    }

    pub(crate) fn probability(&self, key: &str, default: f64) -> Result<f64> {
        match self.config.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_f64()
                .filter(|p| (0.0..=1.0).contains(p))
                .ok_or_else(|| self.invalid(key, "a probability (a number in [0, 1])", v)),
        }
    }

    /// A step count `n >= 1` (as `n..n + 1`) or `[low, high]` with `1 <= low < high` (RLlib's
    /// 2-tuple, drawn from `low..high`).
    pub(crate) fn step_range(&self, key: &str) -> Result<Option<Range<u64>>> {
        let Some(v) = self.config.get(key) else { return Ok(None) };
        let count = |v: &Value| v.as_u64().filter(|&n| n >= 1);
        let range = match v {
            Value::Array(pair) => match pair.as_slice() {
                [low, high] => {
                    count(low).zip(count(high)).filter(|(l, h)| l < h).map(|(l, h)| l..h)
                }
                _ => None,
            },
            _ => count(v).map(|n| n..n + 1),
        };
        range.map(Some).ok_or_else(|| {
            self.invalid(key, "a positive integer, or [low, high] with 1 <= low < high", v)
        })
    }

    /// Seconds `t >= 0` (as `t..=t`) or `[low, high]` with `0 <= low <= high`.
    pub(crate) fn seconds(&self, key: &str) -> Result<Option<RangeInclusive<Duration>>> {
        let Some(v) = self.config.get(key) else { return Ok(None) };
        let secs = |v: &Value| {
            v.as_f64().filter(|t| t.is_finite() && *t >= 0.0).map(Duration::from_secs_f64)
        };
        let range = match v {
            Value::Array(pair) => match pair.as_slice() {
                [low, high] => secs(low).zip(secs(high)).filter(|(l, h)| l <= h),
                _ => None,
            },
            _ => secs(v).map(|t| (t, t)),
        };
        range.map(|(low, high)| Some(low..=high)).ok_or_else(|| {
            self.invalid(key, "seconds (a number >= 0), or [low, high] with 0 <= low <= high", v)
        })
    }
}
