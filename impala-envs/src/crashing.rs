//! `CartPoleCrashing-v1`: RLlib's `CartPoleCrashing` test env, a CartPole that fails or stalls
//! now and then, to exercise env runner fault tolerance.

use crate::kwargs::Kwargs;
use crate::{CartPole, CartPoleConfig, Registration, StatefulEnv};
use impala_core::{CoreError, Env, EnvSpec, Result, StepOutcome};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::ops::{Range, RangeInclusive};
use std::time::Duration;

/// Keyword arguments of `CartPoleCrashing-v1` (its `env_config` keys, RLlib's names).
///
/// [`crate::make`] checks them (probabilities in `[0, 1]`, positive step counts, non-negative
/// times) and names the key of a bad value; [`CartPoleCrashing::new`] takes them as they are.
#[derive(Debug, Clone, PartialEq)]
pub struct CartPoleCrashingConfig {
    /// Probability that a `step` fails (`p_crash`, default 0.005 as in RLlib).
    pub p_crash: f64,
    /// Probability that a `reset` fails (`p_crash_reset`, default 0).
    pub p_crash_reset: f64,
    /// The `step` call of the env's life (counted over all its episodes, from 1) that fails,
    /// once (`crash_after_n_steps`: `n` is `n..n + 1`; `[low, high]` draws it uniformly from
    /// `low..high` at the first step). Default: none.
    pub crash_after_n_steps: Option<Range<u64>>,
    /// Probability that a `step` stalls for [`stall_time`](Self::stall_time) (`p_stall`).
    pub p_stall: f64,
    /// Probability that a `reset` stalls (`p_stall_reset`).
    pub p_stall_reset: f64,
    /// The `step` call of the env's life that stalls, once (`stall_after_n_steps`, as
    /// `crash_after_n_steps`).
    pub stall_after_n_steps: Option<Range<u64>>,
    /// How long a stall sleeps (`stall_time_sec`: seconds, or `[low, high]` drawn uniformly per
    /// stall). Required by [`crate::make`] when a stall can happen.
    pub stall_time: Option<RangeInclusive<Duration>>,
    /// How long [`CartPoleCrashing::new`] sleeps, as a slow env start-up (`init_time_s`, as
    /// `stall_time_sec`; default none).
    pub init_time: Option<RangeInclusive<Duration>>,
}

impl Default for CartPoleCrashingConfig {
    /// RLlib's defaults: `p_crash = 0.005`, nothing else.
    fn default() -> Self {
        Self {
            p_crash: 0.005,
            p_crash_reset: 0.0,
            crash_after_n_steps: None,
            p_stall: 0.0,
            p_stall_reset: 0.0,
            stall_after_n_steps: None,
            stall_time: None,
            init_time: None,
        }
    }
}

impl CartPoleCrashingConfig {
    /// No crashes and no stalls: the env then behaves exactly as `CartPole-v1`.
    pub fn never() -> Self {
        Self { p_crash: 0.0, ..Self::default() }
    }

    /// `CartPoleCrashing-v1`'s keys, checked; a stall needs `stall_time_sec`. On an env runner
    /// not listed in `crash_on_worker_indices` (`stall_on_worker_indices`), nothing crashes
    /// (stalls).
    fn from_kwargs(args: &Kwargs<'_>) -> crate::Result<Self> {
        let defaults = Self::default();
        let mut config = Self {
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
        if !args.on_listed_worker("crash_on_worker_indices")? {
            (config.p_crash, config.p_crash_reset, config.crash_after_n_steps) = (0.0, 0.0, None);
        }
        if !args.on_listed_worker("stall_on_worker_indices")? {
            (config.p_stall, config.p_stall_reset, config.stall_after_n_steps) = (0.0, 0.0, None);
        }
        let stalls = config.p_stall > 0.0
            || config.p_stall_reset > 0.0
            || config.stall_after_n_steps.is_some();
        if stalls && config.stall_time.is_none() {
            return Err(args.invalid(
                "stall_time_sec",
                "set (seconds >= 0, or [low, high]) when p_stall, p_stall_reset or \
                 stall_after_n_steps is",
                &"nothing",
            ));
        }
        Ok(config)
    }
}

/// Decorrelates the crash RNG from CartPole's reset RNG, which the same seed seeds.
const CRASH_STREAM: u64 = 0x9e37_79b9_7f4a_7c15;

/// `CartPole-v1` that fails and stalls at random, as RLlib's `CartPoleCrashing`
/// (`rllib/examples/envs/classes/cartpole_crashing.py`): a failure is
/// `Err(CoreError::Env { reason: "simulated crash ..." })` from `step` or `reset` (RLlib
/// raises, and the env runner fails); the env must then be reset (stepping is
/// [`CoreError::NeedsReset`]). A stall sleeps in `step` or `reset`, then goes on.
///
/// Each `step` first counts the step of the env's life, then draws the crash (`p_crash`, then
/// `crash_after_n_steps`), then the stall (`p_stall`, then `stall_after_n_steps`), then steps
/// the CartPole; each `reset` draws a crash (`p_crash_reset`) and a stall (`p_stall_reset`),
/// then resets the CartPole with the seed. The draws come from the env's own RNG, seeded by
/// `reset(Some(seed))` (from OS entropy until then), so a seeded run crashes at the same steps
/// every time; with every probability 0 and no `*_after_n_steps`, the env is exactly
/// `CartPole-v1` (same seed, same trajectory).
///
/// Differences from RLlib: RLlib counts `crash_after_n_steps` within each episode (so it fails
/// at that step of every episode that gets there); here it counts the env's life and fails
/// once, as a process that dies once. RLlib's crash RNG is unseeded and its reset ignores the
/// seed. `crash_on_worker_indices` / `stall_on_worker_indices` need the env runner's index: the
/// trainer's runners pass it ([`crate::make_for_worker`]), plain [`crate::make`] refuses them.
///
/// ```
/// use impala_core::{CoreError, Env};
/// use impala_envs::{CartPoleCrashing, CartPoleCrashingConfig};
///
/// let config = CartPoleCrashingConfig { crash_after_n_steps: Some(3..4), ..CartPoleCrashingConfig::never() };
/// let mut env = CartPoleCrashing::new(config);
/// let mut obs = [0.0f32; 4];
/// env.reset(Some(0), &mut obs)?;
/// env.step(&[0.0], &mut obs)?;
/// env.step(&[1.0], &mut obs)?;
/// let crash = env.step(&[0.0], &mut obs);
/// assert!(matches!(&crash, Err(CoreError::Env { reason, .. }) if reason.contains("simulated crash")));
/// assert!(matches!(env.step(&[0.0], &mut obs), Err(CoreError::NeedsReset { .. })));
/// env.reset(None, &mut obs)?; // and it behaves from then on
/// assert_eq!(env.step(&[0.0], &mut obs)?.reward, 1.0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct CartPoleCrashing {
    cartpole: CartPole,
    spec: EnvSpec,
    config: CartPoleCrashingConfig,
    rng: SmallRng,
    /// `step` calls that reached the crash draw, over the env's life.
    life_steps: u64,
    /// The life step `crash_after_n_steps` fails at, once drawn.
    crash_at: Option<u64>,
    stall_at: Option<u64>,
    /// Whether the last `step` or `reset` failed (a reset must come next).
    crashed: bool,
}

impl CartPoleCrashing {
    /// The id (RLlib's class name, versioned as its CartPole).
    pub const ID: &'static str = "CartPoleCrashing-v1";

    /// `CartPoleCrashing-v1` with `CartPole-v1`'s limit and threshold, taking RLlib's crash and
    /// stall keys (and, from [`crate::make_for_worker`], its per-runner ones).
    pub(crate) fn registration() -> Registration {
        Registration::native(Self::ID, 500, |args: &Kwargs<'_>| {
            Ok(Self::new(CartPoleCrashingConfig::from_kwargs(args)?))
        })
        .reward_threshold(475.0)
        .config_keys([
            "p_crash",
            "p_crash_reset",
            "crash_after_n_steps",
            "p_stall",
            "p_stall_reset",
            "stall_after_n_steps",
            "stall_time_sec",
            "init_time_s",
        ])
        .per_worker_keys(&["crash_on_worker_indices", "stall_on_worker_indices"])
    }

    /// A crashing CartPole that must be reset before its first step; sleeps for
    /// `config.init_time` first, if set.
    pub fn new(config: CartPoleCrashingConfig) -> Self {
        let cartpole = CartPole::new(CartPoleConfig::default());
        let spec = EnvSpec { id: Self::ID.to_string(), ..cartpole.spec().clone() };
        let mut env = Self {
            cartpole,
            spec,
            config,
            rng: SmallRng::from_os_rng(),
            life_steps: 0,
            crash_at: None,
            stall_at: None,
            crashed: false,
        };
        if let Some(init) = env.config.init_time.clone() {
            std::thread::sleep(env.draw_duration(&init));
        }
        env
    }

    /// The configuration.
    pub fn config(&self) -> &CartPoleCrashingConfig {
        &self.config
    }

    /// `step` calls over the env's life (failed ones included).
    pub fn life_steps(&self) -> u64 {
        self.life_steps
    }

    fn draw_duration(&mut self, range: &RangeInclusive<Duration>) -> Duration {
        let (low, high) = (range.start().as_secs_f64(), range.end().as_secs_f64());
        if high > low {
            Duration::from_secs_f64(low + (high - low) * self.rng.random::<f64>())
        } else {
            *range.start()
        }
    }

    /// Whether life step `n` is the one `range` picks (drawn at the first call).
    fn at_step(
        rng: &mut SmallRng,
        at: &mut Option<u64>,
        range: &Option<Range<u64>>,
        n: u64,
    ) -> bool {
        let Some(range) = range else { return false };
        let at = *at.get_or_insert_with(|| {
            if range.end > range.start + 1 {
                rng.random_range(range.clone())
            } else {
                range.start
            }
        });
        at == n
    }

    fn crash(&mut self, reason: String) -> CoreError {
        self.crashed = true;
        CoreError::Env { env: Self::ID.to_string(), reason }
    }

    fn stall(&mut self) {
        if let Some(range) = self.config.stall_time.clone() {
            std::thread::sleep(self.draw_duration(&range));
        }
    }

    /// The crash and stall draws of a reset, after reseeding.
    fn before_reset(&mut self, seed: Option<u64>) -> Result<()> {
        if let Some(seed) = seed {
            self.rng = SmallRng::seed_from_u64(seed ^ CRASH_STREAM);
        }
        self.crashed = false;
        if self.rng.random::<f64>() < self.config.p_crash_reset {
            let p = self.config.p_crash_reset;
            return Err(self.crash(format!("simulated crash in reset (p_crash_reset = {p})")));
        }
        if self.rng.random::<f64>() < self.config.p_stall_reset {
            self.stall();
        }
        Ok(())
    }
}

impl Env for CartPoleCrashing {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> Result<()> {
        self.before_reset(seed)?;
        self.cartpole.reset(seed, obs)
    }

    fn step(&mut self, action: &[f32], obs: &mut [f32]) -> Result<StepOutcome> {
        if self.crashed {
            return Err(CoreError::NeedsReset { env: Self::ID.to_string() });
        }
        self.life_steps += 1;
        let n = self.life_steps;
        if self.rng.random::<f64>() < self.config.p_crash {
            let p = self.config.p_crash;
            return Err(self
                .crash(format!("simulated crash in step {n} of the env's life (p_crash = {p})")));
        }
        if Self::at_step(&mut self.rng, &mut self.crash_at, &self.config.crash_after_n_steps, n) {
            return Err(self.crash(format!(
                "simulated crash in step {n} of the env's life (crash_after_n_steps)"
            )));
        }
        let stall_draw = self.rng.random::<f64>() < self.config.p_stall;
        if stall_draw
            || Self::at_step(&mut self.rng, &mut self.stall_at, &self.config.stall_after_n_steps, n)
        {
            self.stall();
        }
        self.cartpole.step(action, obs)
    }
}

impl StatefulEnv for CartPoleCrashing {
    fn state(&self) -> &[f64] {
        self.cartpole.state()
    }

    /// A reset (with its crash and stall draws) to `state`.
    fn reset_to_state(&mut self, state: &[f64], obs: &mut [f32]) -> Result<()> {
        self.before_reset(None)?;
        self.cartpole.reset_to_state(state, obs)
    }
}
