//! Creating environments by their Gymnasium id, as `gymnasium.make(id, **env_config)`, and
//! adding your own ids, as `gymnasium.register(id, entry_point, ...)`.
//!
//! Two tables: the native envs (a `const`, so their order and keys are fixed), then the envs
//! registered at run time (a process-wide map behind a lock, sorted by id).

use crate::{
    Acrobot, CartPole, CartPoleConfig, CartPoleCrashing, CartPoleCrashingConfig, EnvError,
    MountainCar, MountainCarConfig, Pendulum, PendulumConfig, Result, StatefulEnv, TimeLimit,
};
use impala_core::suggest::did_you_mean;
use impala_core::{Env, EnvSpec, StepOutcome};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::btree_map::{self, BTreeMap};
use std::fmt;
use std::ops::{Range, RangeInclusive};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

/// An `env_config`: extra keyword arguments by name, as RLlib's `env_config` dict
/// (`ImpalaConfig::env_config` has this type).
pub type EnvConfig = BTreeMap<String, Value>;

/// The `env_config` key that overrides the registered time limit (as `gymnasium.make`'s
/// `max_episode_steps`).
pub const MAX_EPISODE_STEPS: &str = "max_episode_steps";

/// The native environments this crate provides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    CartPole,
    Acrobot,
    MountainCar,
    Pendulum,
    CartPoleCrashing,
}

/// One native id, as Gymnasium's `register(...)`.
struct Entry {
    id: &'static str,
    kind: Kind,
    max_episode_steps: usize,
    reward_threshold: Option<f64>,
    /// Keyword arguments of the env's constructor (besides `max_episode_steps`).
    kwargs: &'static [&'static str],
    /// Keys that need the env runner's index (RLlib's `env_config.worker_index`): accepted by
    /// [`make_for_worker`], refused by [`make`].
    per_worker: &'static [&'static str],
}

/// Why `CartPoleCrashing-v1` refuses RLlib's `*_on_worker_indices`.
const NO_WORKER_INDEX: &str = "an env made from its id and env_config alone (`impala_envs::make`) \
     does not know which env runner it runs on; the trainer's env runners make it with their \
     index (`impala_envs::make_for_worker`), where this key works";

const NATIVES: [Entry; 5] = [
    Entry {
        id: CartPole::ID,
        kind: Kind::CartPole,
        max_episode_steps: 500,
        reward_threshold: Some(475.0),
        kwargs: &["sutton_barto_reward"],
        per_worker: &[],
    },
    Entry {
        id: Acrobot::ID,
        kind: Kind::Acrobot,
        max_episode_steps: 500,
        reward_threshold: Some(-100.0),
        kwargs: &[],
        per_worker: &[],
    },
    Entry {
        id: MountainCar::ID,
        kind: Kind::MountainCar,
        max_episode_steps: 200,
        reward_threshold: Some(-110.0),
        kwargs: &["goal_velocity"],
        per_worker: &[],
    },
    Entry {
        id: Pendulum::ID,
        kind: Kind::Pendulum,
        max_episode_steps: 200,
        reward_threshold: None,
        kwargs: &["g"],
        per_worker: &[],
    },
    Entry {
        id: CartPoleCrashing::ID,
        kind: Kind::CartPoleCrashing,
        max_episode_steps: 500,
        reward_threshold: Some(475.0),
        kwargs: &[
            "p_crash",
            "p_crash_reset",
            "crash_after_n_steps",
            "p_stall",
            "p_stall_reset",
            "stall_after_n_steps",
            "stall_time_sec",
            "init_time_s",
        ],
        per_worker: &["crash_on_worker_indices", "stall_on_worker_indices"],
    },
];

/// Builds a registered environment from its `env_config` (Gymnasium's `entry_point`).
///
/// It returns this crate's [`Result`], not [`impala_core::Result`], so that a creator can refuse
/// its `env_config` with the errors the native envs use ([`EnvError::UnknownConfigKey`],
/// [`EnvError::InvalidConfigValue`]) and build this crate's wrappers with `?`; an
/// [`impala_core::CoreError`] still converts with `?` (into [`EnvError::Core`]). It is
/// `Send + Sync` because the registry is shared by every thread, and an [`Arc`] so that [`make`]
/// calls it after releasing the registry's lock (a creator may itself call [`make`]).
pub type EnvCreator = Arc<dyn Fn(&EnvConfig) -> Result<Box<dyn Env>> + Send + Sync>;

/// An environment to add with [`register`]: the arguments of Gymnasium's
/// `register(id, entry_point, max_episode_steps, reward_threshold)`.
///
/// Build it with [`Registration::new`] and the builder methods; the fields are public to read.
///
/// ```
/// use impala_envs::{make, EnvConfig, Registration};
///
/// // A CartPole that only says it is solved at 195 (CartPole-v0's threshold).
/// let registration = Registration::new("docs/CartPole195-v0", |config: &EnvConfig| {
///     make("CartPole-v1", config)
/// })
/// .reward_threshold(195.0)
/// .config_keys(["sutton_barto_reward"]);
/// assert_eq!(registration.max_episode_steps, None); // CartPole-v1's own limit still applies
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct Registration {
    /// The id [`make`] takes; process-wide, so it must not be taken.
    pub id: String,
    /// Builds the env from its `env_config` (without `max_episode_steps`, which [`make`] handles).
    pub creator: EnvCreator,
    /// The time limit [`make`] wraps the env in ([`TimeLimit`]), unless `env_config` overrides
    /// it; `None`: no limit unless `env_config` sets one.
    pub max_episode_steps: Option<usize>,
    /// Return at which the env counts as solved (Gymnasium's `reward_threshold`), if any.
    pub reward_threshold: Option<f64>,
    /// The `env_config` keys the creator takes, for [`list`] and `impala envs`. [`make`] does not
    /// check keys against it: the creator checks its own `env_config`.
    pub config_keys: Vec<String>,
}

impl Registration {
    /// A registration of `creator` under `id`, with no time limit, no reward threshold and no
    /// `env_config` keys.
    pub fn new<F>(id: impl Into<String>, creator: F) -> Self
    where
        F: Fn(&EnvConfig) -> Result<Box<dyn Env>> + Send + Sync + 'static,
    {
        Self {
            id: id.into(),
            creator: Arc::new(creator),
            max_episode_steps: None,
            reward_threshold: None,
            config_keys: Vec::new(),
        }
    }

    /// Truncates episodes after `n` steps by default (must be at least 1).
    #[must_use]
    pub fn max_episode_steps(mut self, n: usize) -> Self {
        self.max_episode_steps = Some(n);
        self
    }

    /// The return at which the env counts as solved (must be finite).
    #[must_use]
    pub fn reward_threshold(mut self, threshold: f64) -> Self {
        self.reward_threshold = Some(threshold);
        self
    }

    /// The `env_config` keys the creator takes (`max_episode_steps` is always accepted).
    #[must_use]
    pub fn config_keys<I, S>(mut self, keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.config_keys = keys.into_iter().map(Into::into).collect();
        self
    }

    /// Builds the env, as [`make`] does: the time limit from `env_config` or the registration,
    /// the rest of `env_config` to the creator.
    fn make(&self, env_config: &EnvConfig) -> Result<Box<dyn Env>> {
        let limit = max_episode_steps(&self.id, env_config)?.or(self.max_episode_steps);
        let kwargs = if env_config.contains_key(MAX_EPISODE_STEPS) {
            let mut kwargs = env_config.clone();
            kwargs.remove(MAX_EPISODE_STEPS);
            Cow::Owned(kwargs)
        } else {
            Cow::Borrowed(env_config)
        };
        let mut env = (self.creator)(&kwargs)?;
        if env.spec().id != self.id {
            env = Box::new(Renamed::new(env, &self.id));
        }
        Ok(match limit {
            Some(n) => Box::new(TimeLimit::new(env, n)?),
            None => env,
        })
    }
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("id", &self.id)
            .field("max_episode_steps", &self.max_episode_steps)
            .field("reward_threshold", &self.reward_threshold)
            .field("config_keys", &self.config_keys)
            .finish_non_exhaustive()
    }
}

/// The envs added with [`register`], by id (so [`list`] reports them sorted). Only [`register`]
/// writes, and it calls no user code under the lock, so a poisoned lock still holds a consistent
/// map and is used as is.
static REGISTERED: RwLock<BTreeMap<String, Registration>> = RwLock::new(BTreeMap::new());

/// Adds an environment that [`make`] and [`list`] then know, for the rest of the process, as
/// `gymnasium.register(...)`.
///
/// Errors: [`EnvError::AlreadyRegistered`] if the id is a native env's or was registered before
/// (registrations are never replaced, so an id means one env for the whole run), and
/// [`EnvError::InvalidRegistration`] for an empty id or one with whitespace, a zero
/// `max_episode_steps` or a non-finite `reward_threshold`.
///
/// ```
/// use impala_core::{CoreError, Env, EnvSpec, Space, StepOutcome};
/// use impala_envs::{make, register, EnvConfig, EnvError, Registration};
///
/// /// A coin flip: one step, reward 1 for guessing heads.
/// struct Coin(EnvSpec);
///
/// impl Env for Coin {
///     fn spec(&self) -> &EnvSpec {
///         &self.0
///     }
///     fn reset(&mut self, _seed: Option<u64>, obs: &mut [f32]) -> Result<(), CoreError> {
///         obs[0] = 0.0;
///         Ok(())
///     }
///     fn step(&mut self, action: &[f32], obs: &mut [f32]) -> Result<StepOutcome, CoreError> {
///         obs[0] = 1.0;
///         Ok(StepOutcome { reward: f64::from(action[0]), terminated: true, truncated: false })
///     }
/// }
///
/// register(Registration::new("docs/Coin-v0", |_config: &EnvConfig| {
///     let spec = EnvSpec {
///         id: "docs/Coin-v0".into(),
///         observation_space: Space::Box { low: vec![0.0], high: vec![1.0], shape: vec![1] },
///         action_space: Space::Discrete(2),
///         max_episode_steps: None,
///     };
///     Ok(Box::new(Coin(spec)) as Box<dyn Env>)
/// }))?;
/// let mut env = make("docs/Coin-v0", &EnvConfig::new())?;
/// let mut obs = [0.0f32];
/// env.reset(Some(0), &mut obs)?;
/// assert_eq!(env.step(&[1.0], &mut obs)?.reward, 1.0);
///
/// let again = register(Registration::new("CartPole-v1", |config: &EnvConfig| make("CartPole-v1", config)));
/// assert!(matches!(again, Err(EnvError::AlreadyRegistered { .. })));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn register(registration: Registration) -> Result<()> {
    let invalid = |reason: &str| EnvError::InvalidRegistration {
        id: registration.id.clone(),
        reason: reason.to_string(),
    };
    if registration.id.is_empty() {
        return Err(invalid("the id is empty"));
    }
    if registration.id.chars().any(char::is_whitespace) {
        return Err(invalid("the id contains whitespace"));
    }
    if registration.max_episode_steps == Some(0) {
        return Err(invalid("max_episode_steps must be at least 1"));
    }
    if registration.reward_threshold.is_some_and(|r| !r.is_finite()) {
        return Err(invalid("reward_threshold must be finite"));
    }
    if native(&registration.id).is_some() {
        return Err(EnvError::AlreadyRegistered { id: registration.id });
    }
    // Checked and inserted under one write lock, so two threads cannot both take an id.
    let mut registered = REGISTERED.write().unwrap_or_else(PoisonError::into_inner);
    match registered.entry(registration.id.clone()) {
        btree_map::Entry::Occupied(_) => Err(EnvError::AlreadyRegistered { id: registration.id }),
        btree_map::Entry::Vacant(slot) => {
            slot.insert(registration);
            Ok(())
        }
    }
}

/// The native env registered as `id`, if any.
fn native(id: &str) -> Option<&'static Entry> {
    NATIVES.iter().find(|e| e.id == id)
}

/// The env registered at run time as `id`, if any: a copy, so the lock is released before its
/// creator runs.
fn registered(id: &str) -> Option<Registration> {
    REGISTERED.read().unwrap_or_else(PoisonError::into_inner).get(id).cloned()
}

/// Every known id: the natives in their order, then the registered ones sorted.
fn known_ids() -> Vec<String> {
    let registered = REGISTERED.read().unwrap_or_else(PoisonError::into_inner);
    NATIVES.iter().map(|e| e.id.to_string()).chain(registered.keys().cloned()).collect()
}

fn unknown(id: &str) -> EnvError {
    let known = known_ids();
    EnvError::UnknownEnv {
        id: id.to_string(),
        suggestion: did_you_mean(id, known.iter().map(String::as_str)).map(String::from),
        known,
    }
}

/// A known environment, as `impala envs` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvInfo {
    /// Id, spaces and default time limit.
    pub spec: EnvSpec,
    /// Return at which the env counts as solved (Gymnasium's `reward_threshold`), if any.
    pub reward_threshold: Option<f64>,
    /// The `env_config` keys it accepts, `max_episode_steps` first.
    pub config_keys: Vec<String>,
}

/// Every known environment with its spaces and accepted `env_config` keys: the native envs first
/// (in a fixed order), then the ones added with [`register`], sorted by id.
///
/// It builds each env once with an empty `env_config` to read its spec, so a registered creator
/// that fails then is an error ([`EnvError::CreatorFailed`], naming the id).
///
/// ```
/// let ids: Vec<String> = impala_envs::list()?.into_iter().map(|info| info.spec.id).collect();
/// assert_eq!(
///     ids,
///     ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1", "CartPoleCrashing-v1"]
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn list() -> Result<Vec<EnvInfo>> {
    let mut infos = NATIVES
        .iter()
        .map(|entry| {
            let env: Box<dyn Env> = build(entry, &EnvConfig::new(), None)?;
            Ok(EnvInfo {
                spec: env.spec().clone(),
                reward_threshold: entry.reward_threshold,
                config_keys: std::iter::once(MAX_EPISODE_STEPS)
                    .chain(entry.kwargs.iter().copied())
                    .map(String::from)
                    .collect(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    // A snapshot, so no creator runs under the lock.
    let registered: Vec<Registration> =
        REGISTERED.read().unwrap_or_else(PoisonError::into_inner).values().cloned().collect();
    for registration in registered {
        let env = registration.make(&EnvConfig::new()).map_err(|source| {
            EnvError::CreatorFailed { id: registration.id.clone(), source: Box::new(source) }
        })?;
        infos.push(EnvInfo {
            spec: env.spec().clone(),
            reward_threshold: registration.reward_threshold,
            config_keys: std::iter::once(MAX_EPISODE_STEPS.to_string())
                .chain(registration.config_keys.into_iter().filter(|k| k != MAX_EPISODE_STEPS))
                .collect(),
        });
    }
    Ok(infos)
}

/// The return at which `id` counts as solved (Gymnasium's `reward_threshold`), without
/// building the env; `None` for an env without one or an unknown id.
///
/// ```
/// assert_eq!(impala_envs::reward_threshold("CartPole-v1"), Some(475.0));
/// assert_eq!(impala_envs::reward_threshold("Pendulum-v1"), None);
/// ```
pub fn reward_threshold(id: &str) -> Option<f64> {
    if let Some(entry) = NATIVES.iter().find(|e| e.id == id) {
        return entry.reward_threshold;
    }
    REGISTERED.read().unwrap_or_else(PoisonError::into_inner).get(id)?.reward_threshold
}

/// Whether `id` is a native env or one added with [`register`].
///
/// ```
/// assert!(impala_envs::contains("CartPole-v1"));
/// assert!(!impala_envs::contains("LunarLander-v3"));
/// ```
pub fn contains(id: &str) -> bool {
    native(id).is_some() || registered(id).is_some()
}

/// Creates the environment known as `id`, as `gymnasium.make(id, **env_config)`: a native env,
/// else one added with [`register`].
///
/// `env_config` may set `max_episode_steps` (a positive integer), which overrides the registered
/// time limit; the env is wrapped in a [`TimeLimit`] whenever a limit applies. Native envs take
/// their own keyword arguments (`sutton_barto_reward` for CartPole-v1, `goal_velocity` for
/// MountainCar-v0, `g` for Pendulum-v1, RLlib's crash and stall keys for CartPoleCrashing-v1,
/// see [`CartPoleCrashingConfig`]) and refuse any other key. A registered env's creator gets
/// the other keys unchanged (without `max_episode_steps`), checks them itself, and its errors are
/// returned as they are; its env reports `id` in its spec, as Gymnasium's `make` sets `env.spec`.
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
    make_on(id, env_config, None)
}

/// As [`make`], for the env runner `worker_index` (RLlib's `env_config.worker_index`: 0 for
/// the local runner, 1, 2, ... for the others), which the per-runner keys need:
/// `CartPoleCrashing-v1`'s `crash_on_worker_indices` and `stall_on_worker_indices` limit its
/// crashes and stalls to those runners. A creator given to [`register`] gets `env_config` as
/// with [`make`].
///
/// ```
/// use impala_envs::{make_for_worker, EnvConfig};
///
/// let config: EnvConfig = serde_json::from_str(r#"{"crash_after_n_steps": 1, "crash_on_worker_indices": [2]}"#)?;
/// let mut obs = [0.0f32; 4];
/// let mut spared = make_for_worker("CartPoleCrashing-v1", &config, 1)?;
/// spared.reset(Some(0), &mut obs)?;
/// assert!(spared.step(&[0.0], &mut obs).is_ok());
/// let mut crashing = make_for_worker("CartPoleCrashing-v1", &config, 2)?;
/// crashing.reset(Some(0), &mut obs)?;
/// assert!(crashing.step(&[0.0], &mut obs).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn make_for_worker(
    id: &str,
    env_config: &EnvConfig,
    worker_index: usize,
) -> Result<Box<dyn Env>> {
    make_on(id, env_config, Some(worker_index))
}

/// [`make`] and [`make_for_worker`]: a native env knows its runner when `worker_index` is given;
/// a registered creator gets `env_config` either way.
fn make_on(id: &str, env_config: &EnvConfig, worker_index: Option<usize>) -> Result<Box<dyn Env>> {
    if let Some(entry) = native(id) {
        return build(entry, env_config, worker_index);
    }
    registered(id).ok_or_else(|| unknown(id))?.make(env_config)
}

/// As [`make`], keeping access to the physical state (see [`StatefulEnv`]), e.g. to replay a
/// trajectory from a recorded start state.
///
/// Native envs only: a creator given to [`register`] returns a plain [`Env`], so a registered id
/// is [`EnvError::NotStateful`].
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
    match native(id) {
        Some(entry) => build(entry, env_config, None),
        None if registered(id).is_some() => Err(EnvError::NotStateful { id: id.to_string() }),
        None => Err(unknown(id)),
    }
}

/// `env_config`'s `max_episode_steps` for env `id`, if set (a positive integer).
fn max_episode_steps(id: &str, env_config: &EnvConfig) -> Result<Option<usize>> {
    let Some(v) = env_config.get(MAX_EPISODE_STEPS) else {
        return Ok(None);
    };
    v.as_u64().filter(|&n| n > 0).and_then(|n| usize::try_from(n).ok()).map(Some).ok_or_else(|| {
        EnvError::InvalidConfigValue {
            env: id.to_string(),
            key: MAX_EPISODE_STEPS.to_string(),
            expected: "a positive integer".to_string(),
            got: v.to_string(),
        }
    })
}

/// A registered env under the id it was made with: Gymnasium's `make` sets `env.spec` from the
/// registration, and one creator may serve several ids (e.g. different sizes of one env).
struct Renamed {
    env: Box<dyn Env>,
    spec: EnvSpec,
}

impl Renamed {
    fn new(env: Box<dyn Env>, id: &str) -> Self {
        let spec = EnvSpec { id: id.to_string(), ..env.spec().clone() };
        Self { env, spec }
    }
}

impl Env for Renamed {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> impala_core::Result<()> {
        self.env.reset(seed, obs)
    }

    #[inline]
    fn step(&mut self, action: &[f32], obs: &mut [f32]) -> impala_core::Result<StepOutcome> {
        self.env.step(action, obs)
    }
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

fn build<B: FromStateful>(
    entry: &Entry,
    env_config: &EnvConfig,
    worker_index: Option<usize>,
) -> Result<B> {
    let args = Kwargs::new(entry, env_config, worker_index)?;
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
        Kind::CartPoleCrashing => {
            let config = crashing_config(&args)?;
            B::from_stateful(TimeLimit::new(CartPoleCrashing::new(config), steps)?)
        }
    })
}

/// `CartPoleCrashing-v1`'s keys, checked; a stall needs `stall_time_sec`.
fn crashing_config(args: &Kwargs<'_>) -> Result<CartPoleCrashingConfig> {
    let defaults = CartPoleCrashingConfig::default();
    let config = CartPoleCrashingConfig {
        p_crash: args.probability("p_crash", defaults.p_crash)?,
        p_crash_reset: args.probability("p_crash_reset", defaults.p_crash_reset)?,
        crash_after_n_steps: args.step_range("crash_after_n_steps")?,
        p_stall: args.probability("p_stall", defaults.p_stall)?,
        p_stall_reset: args.probability("p_stall_reset", defaults.p_stall_reset)?,
        stall_after_n_steps: args.step_range("stall_after_n_steps")?,
        stall_time: args.seconds("stall_time_sec")?,
        init_time: args.seconds("init_time_s")?,
    };
    // RLlib: a non-empty list of runner indices spares every other runner.
    let mut config = config;
    if !args.on_listed_worker("crash_on_worker_indices")? {
        (config.p_crash, config.p_crash_reset, config.crash_after_n_steps) = (0.0, 0.0, None);
    }
    if !args.on_listed_worker("stall_on_worker_indices")? {
        (config.p_stall, config.p_stall_reset, config.stall_after_n_steps) = (0.0, 0.0, None);
    }
    let stalls =
        config.p_stall > 0.0 || config.p_stall_reset > 0.0 || config.stall_after_n_steps.is_some();
    if stalls && config.stall_time.is_none() {
        return Err(EnvError::InvalidConfigValue {
            env: args.entry.id.to_string(),
            key: "stall_time_sec".to_string(),
            expected: "set (seconds >= 0, or [low, high]) when p_stall, p_stall_reset or \
                 stall_after_n_steps is"
                .to_string(),
            got: "nothing".to_string(),
        });
    }
    Ok(config)
}

/// Typed access to one env's `env_config`, after checking that every key is accepted.
struct Kwargs<'a> {
    entry: &'a Entry,
    config: &'a EnvConfig,
    /// The env runner the env is made for, when known ([`make_for_worker`]).
    worker_index: Option<usize>,
}

impl<'a> Kwargs<'a> {
    fn new(entry: &'a Entry, config: &'a EnvConfig, worker_index: Option<usize>) -> Result<Self> {
        if worker_index.is_none() {
            if let Some(key) = entry.per_worker.iter().find(|k| config.contains_key(**k)) {
                return Err(EnvError::UnsupportedConfigKey {
                    env: entry.id.to_string(),
                    key: key.to_string(),
                    reason: NO_WORKER_INDEX.to_string(),
                });
            }
        }
        let accepted = || {
            std::iter::once(MAX_EPISODE_STEPS)
                .chain(entry.kwargs.iter().copied())
                .chain(entry.per_worker.iter().copied())
        };
        if let Some(key) = config.keys().find(|k| !accepted().any(|a| a == k.as_str())) {
            return Err(EnvError::UnknownConfigKey {
                env: entry.id.to_string(),
                key: key.clone(),
                suggestion: did_you_mean(key, accepted()).map(String::from),
                accepted: accepted().map(String::from).collect(),
            });
        }
        Ok(Self { entry, config, worker_index })
    }

    /// Whether the env's runner is among the list of runner indices under `key` (RLlib's
    /// `crash_on_worker_indices`); true when the key is absent or its list is empty.
    fn on_listed_worker(&self, key: &str) -> Result<bool> {
        let Some(value) = self.config.get(key) else { return Ok(true) };
        let expected = "a list of env runner indices (non-negative integers), e.g. [1, 2]";
        let indices = value
            .as_array()
            .and_then(|items| items.iter().map(Value::as_u64).collect::<Option<Vec<u64>>>())
            .ok_or_else(|| self.invalid(key, expected, value))?;
        let Some(worker) = self.worker_index else { return Ok(true) };
        Ok(indices.is_empty() || u64::try_from(worker).is_ok_and(|w| indices.contains(&w)))
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
        Ok(max_episode_steps(self.entry.id, self.config)?.unwrap_or(self.entry.max_episode_steps))
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

    fn probability(&self, key: &str, default: f64) -> Result<f64> {
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
    fn step_range(&self, key: &str) -> Result<Option<Range<u64>>> {
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
    fn seconds(&self, key: &str) -> Result<Option<RangeInclusive<Duration>>> {
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

// In the library's own test binary, not tests/: a creator that always fails makes `list` fail
// for the whole process, which would break the integration tests that list envs in parallel.
#[cfg(test)]
mod tests {
    use super::*;
    use impala_core::CoreError;

    #[test]
    fn list_names_a_registered_creator_that_fails() -> Result<()> {
        register(Registration::new("test/Broken-v0", |_config: &EnvConfig| {
            Err(EnvError::Core(CoreError::InvalidSpace { reason: "no cells".into() }))
        }))?;
        let err = list().err();
        let Some(EnvError::CreatorFailed { id, source }) = &err else {
            panic!("expected CreatorFailed, got {err:?}");
        };
        assert_eq!(id, "test/Broken-v0");
        assert!(matches!(**source, EnvError::Core(CoreError::InvalidSpace { .. })), "{source:?}");
        let msg = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("`test/Broken-v0`"), "{msg}");
        // make returns the creator's error as it is: the caller knows which id it asked for.
        let made = make("test/Broken-v0", &EnvConfig::new()).err();
        assert!(matches!(made, Some(EnvError::Core(_))), "{made:?}");
        Ok(())
    }
}
