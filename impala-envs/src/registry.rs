//! Creating environments by their Gymnasium id, as `gymnasium.make(id, **env_config)`.

use crate::error::nearest;
use crate::{
    Acrobot, CartPole, CartPoleConfig, EnvError, MountainCar, MountainCarConfig, Pendulum,
    PendulumConfig, Result, StatefulEnv, TimeLimit,
};
use impala_core::{Env, EnvSpec};
use serde_json::Value;
use std::collections::BTreeMap;

/// An `env_config`: extra keyword arguments by name, as RLlib's `env_config` dict
/// (`ImpalaConfig::env_config` has this type).
pub type EnvConfig = BTreeMap<String, Value>;

/// The `env_config` key that overrides the registered time limit (as `gymnasium.make`'s
/// `max_episode_steps`).
pub const MAX_EPISODE_STEPS: &str = "max_episode_steps";

/// The environments this crate provides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    CartPole,
    Acrobot,
    MountainCar,
    Pendulum,
}

/// One registered id, as Gymnasium's `register(...)`.
struct Entry {
    id: &'static str,
    kind: Kind,
    max_episode_steps: usize,
    reward_threshold: Option<f64>,
    /// Keyword arguments of the env's constructor (besides `max_episode_steps`).
    kwargs: &'static [&'static str],
}

const REGISTRY: [Entry; 4] = [
    Entry {
        id: CartPole::ID,
        kind: Kind::CartPole,
        max_episode_steps: 500,
        reward_threshold: Some(475.0),
        kwargs: &["sutton_barto_reward"],
    },
    Entry {
        id: Acrobot::ID,
        kind: Kind::Acrobot,
        max_episode_steps: 500,
        reward_threshold: Some(-100.0),
        kwargs: &[],
    },
    Entry {
        id: MountainCar::ID,
        kind: Kind::MountainCar,
        max_episode_steps: 200,
        reward_threshold: Some(-110.0),
        kwargs: &["goal_velocity"],
    },
    Entry {
        id: Pendulum::ID,
        kind: Kind::Pendulum,
        max_episode_steps: 200,
        reward_threshold: None,
        kwargs: &["g"],
    },
];

/// A registered environment, as `impala envs` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvInfo {
    /// Id, spaces and default time limit.
    pub spec: EnvSpec,
    /// Return at which the env counts as solved (Gymnasium's `reward_threshold`), if any.
    pub reward_threshold: Option<f64>,
    /// The `env_config` keys it accepts.
    pub config_keys: Vec<&'static str>,
}

/// Every registered environment with its spaces and accepted `env_config` keys.
///
/// ```
/// let ids: Vec<String> = impala_envs::list()?.into_iter().map(|info| info.spec.id).collect();
/// assert_eq!(ids, ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn list() -> Result<Vec<EnvInfo>> {
    REGISTRY
        .iter()
        .map(|entry| {
            let env: Box<dyn Env> = build(entry.id, &EnvConfig::new())?;
            Ok(EnvInfo {
                spec: env.spec().clone(),
                reward_threshold: entry.reward_threshold,
                config_keys: std::iter::once(MAX_EPISODE_STEPS)
                    .chain(entry.kwargs.iter().copied())
                    .collect(),
            })
        })
        .collect()
}

/// Creates the environment registered as `id`, wrapped in its [`TimeLimit`], as
/// `gymnasium.make(id, **env_config)`. `env_config` may set `max_episode_steps` (a positive
/// integer) and the env's own keyword arguments (`sutton_barto_reward` for CartPole-v1,
/// `goal_velocity` for MountainCar-v0, `g` for Pendulum-v1); any other key is an error.
///
/// ```
/// use impala_envs::{make, EnvConfig};
///
/// let config: EnvConfig = serde_json::from_str(r#"{"g": 9.81, "max_episode_steps": 100}"#)?;
/// let env = make("Pendulum-v1", &config)?;
/// assert_eq!(env.spec().max_episode_steps, Some(100));
///
/// let err = make("CartPole-v0", &EnvConfig::new()).err().map(|e| e.to_string());
/// assert!(err.is_some_and(|e| e.contains("did you mean `CartPole-v1`?")));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn make(id: &str, env_config: &EnvConfig) -> Result<Box<dyn Env>> {
    build(id, env_config)
}

/// As [`make`], keeping access to the physical state (see [`StatefulEnv`]), e.g. to replay a
/// trajectory from a recorded start state.
///
/// ```
/// use impala_envs::{make_stateful, EnvConfig};
///
/// let mut env = make_stateful("CartPole-v1", &EnvConfig::new())?;
/// let mut obs = [0.0f32; 4];
/// env.reset_to_state(&[0.0, 0.0, 0.1, 0.0], &mut obs)?; // pole leaning right
/// env.step(&[0.0], &mut obs)?;
/// assert!(env.state()[3] > 0.0); // and falling further right
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn make_stateful(id: &str, env_config: &EnvConfig) -> Result<Box<dyn StatefulEnv>> {
    build(id, env_config)
}

/// The two boxed forms [`build`] can return.
trait FromStateful {
    fn from_stateful<E: StatefulEnv + 'static>(env: E) -> Self;
}

impl FromStateful for Box<dyn Env> {
    fn from_stateful<E: StatefulEnv + 'static>(env: E) -> Self {
        Box::new(env)
    }
}

impl FromStateful for Box<dyn StatefulEnv> {
    fn from_stateful<E: StatefulEnv + 'static>(env: E) -> Self {
        Box::new(env)
    }
}

fn build<B: FromStateful>(id: &str, env_config: &EnvConfig) -> Result<B> {
    let entry = REGISTRY.iter().find(|e| e.id == id).ok_or_else(|| EnvError::UnknownEnv {
        id: id.to_string(),
        suggestion: nearest(id, REGISTRY.iter().map(|e| e.id)),
        known: REGISTRY.iter().map(|e| e.id.to_string()).collect(),
    })?;
    let args = Kwargs::new(entry, env_config)?;
    let steps = args.max_episode_steps()?;
    Ok(match entry.kind {
        Kind::CartPole => {
            let sutton_barto_reward = args.bool("sutton_barto_reward", false)?;
            B::from_stateful(TimeLimit::new(
                CartPole::new(CartPoleConfig { sutton_barto_reward }),
                steps,
            )?)
        }
        Kind::Acrobot => B::from_stateful(TimeLimit::new(Acrobot::new(), steps)?),
        Kind::MountainCar => {
            let goal_velocity = args.f64("goal_velocity", 0.0)?;
            B::from_stateful(TimeLimit::new(
                MountainCar::new(MountainCarConfig { goal_velocity }),
                steps,
            )?)
        }
        Kind::Pendulum => {
            let g = args.f64("g", PendulumConfig::default().g)?;
            B::from_stateful(TimeLimit::new(Pendulum::new(PendulumConfig { g }), steps)?)
        }
    })
}

/// Typed access to one env's `env_config`, after checking that every key is accepted.
struct Kwargs<'a> {
    entry: &'a Entry,
    config: &'a EnvConfig,
}

impl<'a> Kwargs<'a> {
    fn new(entry: &'a Entry, config: &'a EnvConfig) -> Result<Self> {
        let accepted = || std::iter::once(MAX_EPISODE_STEPS).chain(entry.kwargs.iter().copied());
        if let Some(key) = config.keys().find(|k| !accepted().any(|a| a == k.as_str())) {
            return Err(EnvError::UnknownConfigKey {
                env: entry.id.to_string(),
                key: key.clone(),
                suggestion: nearest(key, accepted()),
                accepted: accepted().map(String::from).collect(),
            });
        }
        Ok(Self { entry, config })
    }

    fn invalid(&self, key: &str, expected: &str, got: &Value) -> EnvError {
        EnvError::InvalidConfigValue {
            env: self.entry.id.to_string(),
            key: key.to_string(),
            expected: expected.to_string(),
            got: got.to_string(),
        }
    }

    fn max_episode_steps(&self) -> Result<usize> {
        match self.config.get(MAX_EPISODE_STEPS) {
            None => Ok(self.entry.max_episode_steps),
            Some(v) => v
                .as_u64()
                .filter(|&n| n > 0)
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| self.invalid(MAX_EPISODE_STEPS, "a positive integer", v)),
        }
    }

    fn bool(&self, key: &str, default: bool) -> Result<bool> {
        match self.config.get(key) {
            None => Ok(default),
            Some(v) => v.as_bool().ok_or_else(|| self.invalid(key, "a boolean", v)),
        }
    }

    fn f64(&self, key: &str, default: f64) -> Result<f64> {
        match self.config.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_f64()
                .filter(|x| x.is_finite())
                .ok_or_else(|| self.invalid(key, "a finite number", v)),
        }
    }
}
