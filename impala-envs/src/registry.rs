//! Creating environments by their Gymnasium id, as `gymnasium.make(id, **env_config)`, and
//! adding your own ids, as `gymnasium.register(id, entry_point, ...)`.
//!
//! One registry of [`Registration`]s: the native envs (each registered by its own module, in a
//! fixed order), then the envs registered at run time (sorted by id), behind one process-wide
//! lock.

use crate::kwargs::Kwargs;
use crate::{
    Acrobot, CartPole, CartPoleCrashing, EnvError, MountainCar, Pendulum, Result, StatefulEnv,
    TimeLimit,
};
use impala_core::suggest::did_you_mean;
use impala_core::{Env, EnvSpec, StepOutcome};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, LazyLock, PoisonError, RwLock};

/// An `env_config`: extra keyword arguments by name, as RLlib's `env_config` dict
/// (`ImpalaConfig::env_config` has this type).
pub type EnvConfig = BTreeMap<String, Value>;

/// The `env_config` key that overrides the registered time limit (as `gymnasium.make`'s
/// `max_episode_steps`).
pub const MAX_EPISODE_STEPS: &str = "max_episode_steps";

/// A registered creator: Gymnasium's `entry_point` (see [`Registration::new`]). An [`Arc`], so
/// that [`make`] calls it after releasing the registry's lock (a creator may itself call
/// [`make`]).
type EnvCreator = Arc<dyn Fn(&EnvConfig) -> Result<Box<dyn Env>> + Send + Sync>;

/// How a registration builds its env.
#[derive(Clone)]
enum Creator {
    /// Given to [`Registration::new`]: gets `env_config` as it is (without
    /// `max_episode_steps`) and checks it itself.
    Config(EnvCreator),
    /// A native env: its keys checked against the registration, told its env runner's index
    /// when known, and built as its own type (so [`make_stateful`] can reach its state).
    Native(Arc<dyn NativeCreator>),
}

/// A native env's constructor behind one type whatever the env's: it boxes the env as
/// [`make`] or [`make_stateful`] needs.
trait NativeCreator: Send + Sync {
    fn make(&self, args: &Kwargs<'_>) -> Result<Box<dyn Env>>;
    fn make_stateful(&self, args: &Kwargs<'_>) -> Result<Box<dyn StatefulEnv>>;
}

/// A native env's constructor: reads its keyword arguments, returns the bare env.
struct Native<E>(fn(&Kwargs<'_>) -> Result<E>);

impl<E: StatefulEnv + 'static> Native<E> {
    /// The env behind its time limit, if one applies, in the box `B` (the limit wraps the env's
    /// own type, so a step costs one indirection).
    fn build<B: FromStateful>(&self, args: &Kwargs<'_>) -> Result<B> {
        let env = (self.0)(args)?;
        Ok(match args.max_episode_steps() {
            Some(n) => B::from_stateful(TimeLimit::new(env, n)?),
            None => B::from_stateful(env),
        })
    }
}

impl<E: StatefulEnv + 'static> NativeCreator for Native<E> {
    fn make(&self, args: &Kwargs<'_>) -> Result<Box<dyn Env>> {
        self.build(args)
    }

    fn make_stateful(&self, args: &Kwargs<'_>) -> Result<Box<dyn StatefulEnv>> {
        self.build(args)
    }
}

/// The two boxes a native env is built into.
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

/// An environment to add with [`register`]: the arguments of Gymnasium's
/// `register(id, entry_point, max_episode_steps, reward_threshold)`. The native envs are
/// registered the same way.
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
    /// The time limit [`make`] wraps the env in ([`TimeLimit`]), unless `env_config` overrides
    /// it; `None`: no limit unless `env_config` sets one.
    pub max_episode_steps: Option<usize>,
    /// Return at which the env counts as solved (Gymnasium's `reward_threshold`), if any.
    pub reward_threshold: Option<f64>,
    /// The `env_config` keys the env takes, for [`list`] and `impala envs`. [`make`] refuses
    /// other keys for a native env; a creator given to [`Registration::new`] checks its own
    /// `env_config`.
    pub config_keys: Vec<String>,
    creator: Creator,
    /// Keys that need the env runner's index (RLlib's `env_config.worker_index`): accepted by
    /// [`make_for_worker`], refused by [`make`] (native envs only).
    pub(crate) per_worker_keys: Vec<&'static str>,
}

impl Registration {
    /// A registration of `creator` under `id`, with no time limit, no reward threshold and no
    /// `env_config` keys.
    ///
    /// `creator` builds the env from its `env_config` (without `max_episode_steps`, which
    /// [`make`] handles). It returns this crate's [`Result`], not [`impala_core::Result`], so
    /// that it can refuse its `env_config` with the errors the native envs use
    /// ([`EnvError::UnknownConfigKey`], [`EnvError::InvalidConfigValue`]) and build this
    /// crate's wrappers with `?`; an [`impala_core::CoreError`] still converts with `?` (into
    /// [`EnvError::Core`]). It is `Send + Sync` because the registry is shared by every thread.
    pub fn new<F>(id: impl Into<String>, creator: F) -> Self
    where
        F: Fn(&EnvConfig) -> Result<Box<dyn Env>> + Send + Sync + 'static,
    {
        Self::with_creator(id.into(), Creator::Config(Arc::new(creator)))
    }

    /// A native env under `id` with its default time limit: `creator` reads the env's keyword
    /// arguments (each env's module, its own) and returns the bare env.
    pub(crate) fn native<E: StatefulEnv + 'static>(
        id: &str,
        max_episode_steps: usize,
        creator: fn(&Kwargs<'_>) -> Result<E>,
    ) -> Self {
        Self::with_creator(id.to_string(), Creator::Native(Arc::new(Native(creator))))
            .max_episode_steps(max_episode_steps)
    }

    fn with_creator(id: String, creator: Creator) -> Self {
        Self {
            id,
            max_episode_steps: None,
            reward_threshold: None,
            config_keys: Vec::new(),
            creator,
            per_worker_keys: Vec::new(),
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

    /// Keys a native env takes only from [`make_for_worker`] (not listed by [`list`]).
    #[must_use]
    pub(crate) fn per_worker_keys(mut self, keys: &[&'static str]) -> Self {
        self.per_worker_keys = keys.to_vec();
        self
    }

    /// Builds the env, as [`make`] does; a native env learns its env runner's index when
    /// `worker_index` is given.
    fn make(&self, env_config: &EnvConfig, worker_index: Option<usize>) -> Result<Box<dyn Env>> {
        match &self.creator {
            Creator::Native(native) => native.make(&Kwargs::new(self, env_config, worker_index)?),
            Creator::Config(creator) => self.make_with(creator, env_config),
        }
    }

    /// Builds the env with a creator given to [`Registration::new`]: the time limit from
    /// `env_config` or the registration, the rest of `env_config` to the creator.
    fn make_with(&self, creator: &EnvCreator, env_config: &EnvConfig) -> Result<Box<dyn Env>> {
        let limit = self.time_limit(env_config)?;
        let kwargs = if env_config.contains_key(MAX_EPISODE_STEPS) {
            let mut kwargs = env_config.clone();
            kwargs.remove(MAX_EPISODE_STEPS);
            Cow::Owned(kwargs)
        } else {
            Cow::Borrowed(env_config)
        };
        let mut env = creator(&kwargs)?;
        if env.spec().id != self.id {
            env = Box::new(Renamed::new(env, &self.id));
        }
        Ok(match limit {
            Some(n) => Box::new(TimeLimit::new(env, n)?),
            None => env,
        })
    }

    /// The time limit for `env_config`: its `max_episode_steps` (a positive integer), else the
    /// registration's.
    pub(crate) fn time_limit(&self, env_config: &EnvConfig) -> Result<Option<usize>> {
        let Some(v) = env_config.get(MAX_EPISODE_STEPS) else {
            return Ok(self.max_episode_steps);
        };
        let n = v.as_u64().filter(|&n| n > 0).and_then(|n| usize::try_from(n).ok());
        n.map(Some).ok_or_else(|| EnvError::InvalidConfigValue {
            env: self.id.clone(),
            key: MAX_EPISODE_STEPS.to_string(),
            expected: "a positive integer".to_string(),
            got: v.to_string(),
        })
    }

    /// Builds a native env as [`make_stateful`] does.
    fn make_stateful(&self, env_config: &EnvConfig) -> Result<Box<dyn StatefulEnv>> {
        match &self.creator {
            Creator::Native(native) => native.make_stateful(&Kwargs::new(self, env_config, None)?),
            Creator::Config(_) => Err(EnvError::NotStateful { id: self.id.clone() }),
        }
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

/// Every env [`make`] knows: the native envs first, in a fixed order, then those added with
/// [`register`], sorted by id (as [`list`] reports them).
struct Registry {
    envs: Vec<Registration>,
    /// How many of `envs` are native.
    natives: usize,
}

impl Registry {
    /// The native envs, each registered by its own module.
    fn with_natives() -> Self {
        let envs = vec![
            CartPole::registration(),
            Acrobot::registration(),
            MountainCar::registration(),
            Pendulum::registration(),
            CartPoleCrashing::registration(),
        ];
        Self { natives: envs.len(), envs }
    }

    fn get(&self, id: &str) -> Option<&Registration> {
        self.envs.iter().find(|r| r.id == id)
    }

    /// Adds `registration` in its sorted place, unless its id is taken.
    fn insert(&mut self, registration: Registration) -> Result<()> {
        if self.get(&registration.id).is_some() {
            return Err(EnvError::AlreadyRegistered { id: registration.id });
        }
        let added = &self.envs[self.natives..];
        let at = self.natives + added.partition_point(|r| r.id < registration.id);
        self.envs.insert(at, registration);
        Ok(())
    }
}

/// The registry. Only [`register`] writes, and it calls no user code under the lock, so a
/// poisoned lock still holds a consistent registry and is used as is.
static REGISTRY: LazyLock<RwLock<Registry>> =
    LazyLock::new(|| RwLock::new(Registry::with_natives()));

fn registry() -> std::sync::RwLockReadGuard<'static, Registry> {
    REGISTRY.read().unwrap_or_else(PoisonError::into_inner)
}

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
    // Checked and inserted under one write lock, so two threads cannot both take an id.
    REGISTRY.write().unwrap_or_else(PoisonError::into_inner).insert(registration)
}

/// The env registered as `id`, if any: a copy, so the lock is released before its creator
/// runs.
fn registered(id: &str) -> Option<Registration> {
    registry().get(id).cloned()
}

fn unknown(id: &str) -> EnvError {
    let known: Vec<String> = registry().envs.iter().map(|r| r.id.clone()).collect();
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

/// The env's row in `impala envs`: id, observation shape, action space, time limit, solved
/// threshold and `env_config` keys, in aligned columns (`-` for what it lacks).
///
/// ```
/// let cartpole = impala_envs::list()?.into_iter().next().ok_or("no env")?;
/// let row = cartpole.to_string();
/// assert!(row.starts_with("CartPole-v1      obs [4]   "), "{row}");
/// assert!(row.contains("reward_threshold 475    env_config keys: max_episode_steps"), "{row}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
impl fmt::Display for EnvInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let spec = &self.spec;
        let or_dash = |n: Option<String>| n.unwrap_or_else(|| "-".to_string());
        write!(
            f,
            "{:<16} obs {:<28} actions {:<18} max_episode_steps {:<5} reward_threshold {:<6} \
             env_config keys: {}",
            spec.id,
            format!("{:?}", spec.observation_space.shape()),
            spec.action_space.to_string(),
            or_dash(spec.max_episode_steps.map(|n| n.to_string())),
            or_dash(self.reward_threshold.map(|t| t.to_string())),
            self.config_keys.join(", ")
        )
    }
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
    // A snapshot, so no creator runs under the lock.
    let registrations = registry().envs.clone();
    registrations
        .into_iter()
        .map(|registration| {
            let env = registration.make(&EnvConfig::new(), None).map_err(|source| {
                EnvError::CreatorFailed { id: registration.id.clone(), source: Box::new(source) }
            })?;
            Ok(EnvInfo {
                spec: env.spec().clone(),
                reward_threshold: registration.reward_threshold,
                config_keys: std::iter::once(MAX_EPISODE_STEPS.to_string())
                    .chain(registration.config_keys.into_iter().filter(|k| k != MAX_EPISODE_STEPS))
                    .collect(),
            })
        })
        .collect()
}

/// The return at which `id` counts as solved (Gymnasium's `reward_threshold`), without
/// building the env; `None` for an env without one or an unknown id.
///
/// ```
/// assert_eq!(impala_envs::reward_threshold("CartPole-v1"), Some(475.0));
/// assert_eq!(impala_envs::reward_threshold("Pendulum-v1"), None);
/// ```
pub fn reward_threshold(id: &str) -> Option<f64> {
    registry().get(id)?.reward_threshold
}

/// Whether `id` is a native env or one added with [`register`].
///
/// ```
/// assert!(impala_envs::contains("CartPole-v1"));
/// assert!(!impala_envs::contains("LunarLander-v3"));
/// ```
pub fn contains(id: &str) -> bool {
    registry().get(id).is_some()
}

/// Creates the environment known as `id`, as `gymnasium.make(id, **env_config)`: a native env,
/// else one added with [`register`].
///
/// `env_config` may set `max_episode_steps` (a positive integer), which overrides the registered
/// time limit; the env is wrapped in a [`TimeLimit`] whenever a limit applies. Native envs take
/// their own keyword arguments (`sutton_barto_reward` for CartPole-v1, `goal_velocity` for
/// MountainCar-v0, `g` for Pendulum-v1, RLlib's crash and stall keys for CartPoleCrashing-v1,
/// see [`crate::CartPoleCrashingConfig`]) and refuse any other key. A registered env's creator gets
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
    registered(id).ok_or_else(|| unknown(id))?.make(env_config, worker_index)
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
    registered(id).ok_or_else(|| unknown(id))?.make_stateful(env_config)
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

    fn info(&self) -> &[u8] {
        self.env.info()
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
