//! Stepping N environments together with automatic resets.

use crate::{EnvError, Result};
use impala_core::{Env, EpisodeStats, Space};

/// What one [`VectorEnv::step`] produced, one entry per env (`[N]`, or `[N, obs_dim]` row-major).
///
/// `obs` is the **next observation** each env's policy acts on: for an env whose episode just
/// ended, it is already the first observation of the next episode (auto-reset in the same step,
/// as Gymnasium's `AutoresetMode.SAME_STEP` and RLlib's env runners). The observation that ended
/// the episode lives in `final_obs` (Gymnasium's `final_obs`), which is what a truncated episode
/// bootstraps from.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct VectorStep {
    /// Next observations, `[N, obs_dim]` (reset observations where an episode ended).
    pub obs: Vec<f32>,
    /// Rewards of this step, `[N]`.
    pub rewards: Vec<f64>,
    /// Whether each env's episode reached a terminal state this step, `[N]`.
    pub terminateds: Vec<bool>,
    /// Whether each env's episode was truncated (time limit) this step, `[N]`.
    pub truncateds: Vec<bool>,
    /// The last observation of each episode that ended this step, `[N, obs_dim]`; rows of envs
    /// whose episode goes on are zero. Use [`VectorStep::final_obs`].
    pub final_obs: Vec<f32>,
    /// The info ([`Env::info`](impala_core::Env::info)) of the step that ended each env's
    /// episode this step, `[N]`; empty for envs whose episode goes on. The current
    /// observations' infos are [`VectorEnv::info`]'s.
    pub final_infos: Vec<Vec<u8>>,
    /// `(env index, stats)` of every episode that ended this step (not those that end only for
    /// learning while the game goes on: [`Env::episode_continues`](impala_core::Env)).
    pub episodes: Vec<(usize, EpisodeStats)>,
    obs_dim: usize,
}

impl VectorStep {
    /// Whether env `i`'s episode ended this step.
    pub fn done(&self, i: usize) -> bool {
        self.terminateds[i] || self.truncateds[i]
    }

    /// The final observation of env `i`'s episode if it ended this step.
    pub fn final_obs(&self, i: usize) -> Option<&[f32]> {
        let dim = self.obs_dim;
        self.done(i).then(|| &self.final_obs[i * dim..(i + 1) * dim])
    }
}

/// N environments stepped in lock-step by one thread, resetting each one as its episode ends and
/// tracking per-env episode returns and lengths (RLlib's env runner vectorisation,
/// `num_envs_per_env_runner`).
///
/// Seeding follows Gymnasium's vector envs: `VectorEnv::new(envs, Some(seed))` resets env `i`
/// with seed `seed + i` on the first [`VectorEnv::reset`]; later resets (automatic or not)
/// continue each env's own RNG.
///
/// ```
/// use impala_envs::{make, VectorEnv};
///
/// let config = Default::default();
/// let envs = (0..4).map(|_| make("CartPole-v1", &config)).collect::<Result<Vec<_>, _>>()?;
/// let mut vec_env = VectorEnv::new(envs, Some(0))?;
/// let obs = vec_env.reset()?;
/// assert_eq!(obs.len(), 4 * 4);
/// let mut finished = 0;
/// for _ in 0..100 {
///     let step = vec_env.step(&[1.0; 4])?; // always push right: episodes end quickly
///     for (i, stats) in &step.episodes {
///         assert!(step.final_obs(*i).is_some());
///         assert!(stats.episode_len > 0);
///         finished += 1;
///     }
/// }
/// assert!(finished > 4);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct VectorEnv {
    envs: Vec<Box<dyn Env>>,
    obs_dim: usize,
    action_dim: usize,
    seed: Option<u64>,
    started: bool,
    step: VectorStep,
    returns: Vec<f64>,
    lengths: Vec<u64>,
    /// Which envs step elsewhere ([`Env::steps_elsewhere`]): their steps start in
    /// [`VectorEnv::begin_step`], before any is waited for.
    elsewhere: Vec<bool>,
    /// The actions of the step begun and not yet finished, `[N, action_dim]`.
    actions: Vec<f32>,
    in_flight: bool,
    /// Whether observations can hold non-finite values (not bytes).
    check_obs: bool,
}

impl std::fmt::Debug for VectorEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VectorEnv")
            .field("env", &self.envs[0].spec().id)
            .field("num_envs", &self.envs.len())
            .finish_non_exhaustive()
    }
}

impl VectorEnv {
    /// Vectorises `envs` (at least one, all with the same observation and action spaces).
    pub fn new(envs: Vec<Box<dyn Env>>, seed: Option<u64>) -> Result<Self> {
        let invalid = |reason: String| EnvError::InvalidSetup { what: "VectorEnv".into(), reason };
        let first = envs.first().ok_or_else(|| invalid("needs at least one env".into()))?.spec();
        let (obs_space, act_space) = (&first.observation_space, &first.action_space);
        if let Some(i) = envs.iter().position(|e| {
            e.spec().observation_space != *obs_space || e.spec().action_space != *act_space
        }) {
            return Err(invalid(format!(
                "env {i} ({}) has spaces {} / {}, env 0 ({}) has {obs_space} / {act_space}",
                envs[i].spec().id,
                envs[i].spec().observation_space,
                envs[i].spec().action_space,
                first.id
            )));
        }
        let (n, obs_dim, action_dim) = (envs.len(), obs_space.flat_dim(), act_space.flat_dim());
        let envs_elsewhere = envs.iter().map(|e| e.steps_elsewhere()).collect();
        let check_obs = !matches!(obs_space, Space::Bytes { .. });
        Ok(Self {
            envs,
            obs_dim,
            action_dim,
            seed,
            started: false,
            step: VectorStep {
                obs: vec![0.0; n * obs_dim],
                rewards: vec![0.0; n],
                terminateds: vec![false; n],
                truncateds: vec![false; n],
                final_obs: vec![0.0; n * obs_dim],
                final_infos: vec![Vec::new(); n],
                episodes: Vec::new(),
                obs_dim,
            },
            returns: vec![0.0; n],
            lengths: vec![0; n],
            elsewhere: envs_elsewhere,
            actions: vec![0.0; n * action_dim],
            in_flight: false,
            check_obs,
        })
    }

    /// The number of envs.
    pub fn num_envs(&self) -> usize {
        self.envs.len()
    }

    /// The (shared) observation space of one env.
    pub fn observation_space(&self) -> &Space {
        &self.envs[0].spec().observation_space
    }

    /// The (shared) action space of one env.
    pub fn action_space(&self) -> &Space {
        &self.envs[0].spec().action_space
    }

    /// The envs, e.g. to read their specs.
    pub fn envs(&self) -> &[Box<dyn Env>] {
        &self.envs
    }

    /// The current observations, `[N, obs_dim]` (what the last reset or step returned).
    pub fn obs(&self) -> &[f32] {
        &self.step.obs
    }

    /// Env `i`'s info of its current observation ([`Env::info`]): empty but for envs that
    /// send infos.
    pub fn info(&self, i: usize) -> &[u8] {
        self.envs[i].info()
    }

    /// Resets every env and returns the first observations, `[N, obs_dim]`. Episodes in progress
    /// are dropped without being reported.
    pub fn reset(&mut self) -> Result<&[f32]> {
        self.in_flight = false;
        let seed = if self.started { None } else { self.seed };
        for (i, (env, obs)) in
            self.envs.iter_mut().zip(self.step.obs.chunks_exact_mut(self.obs_dim)).enumerate()
        {
            env.reset(seed.map(|s| s.wrapping_add(i as u64)), obs)?;
            if self.check_obs {
                finite(env.as_ref(), i, "reset observation", obs, 0)?;
            }
        }
        self.started = true;
        self.returns.fill(0.0);
        self.lengths.fill(0);
        let step = &mut self.step;
        step.rewards.fill(0.0);
        step.terminateds.fill(false);
        step.truncateds.fill(false);
        step.final_obs.fill(0.0);
        step.final_infos.iter_mut().for_each(Vec::clear);
        step.episodes.clear();
        Ok(&self.step.obs)
    }

    /// Steps every env with its action (`actions` is `[N, action_dim]`), resets the envs whose
    /// episode ended, and returns the step (see [`VectorStep`] for which observation is which).
    /// Calls [`VectorEnv::reset`] first if it never ran. After an error (an invalid action, a
    /// failing env) some envs have stepped and others not: call [`VectorEnv::reset`].
    pub fn step(&mut self, actions: &[f32]) -> Result<&VectorStep> {
        self.begin_step(actions)?;
        self.finish_step()
    }

    /// The first half of [`VectorEnv::step`]: starts the steps of the envs that step elsewhere
    /// and returns at once; [`VectorEnv::finish_step`] steps the others and waits for all.
    pub fn begin_step(&mut self, actions: &[f32]) -> Result<()> {
        let n = self.envs.len();
        if actions.len() != n * self.action_dim {
            return Err(EnvError::Core(impala_core::CoreError::ShapeMismatch {
                what: "VectorEnv actions".into(),
                expected: n * self.action_dim,
                got: actions.len(),
            }));
        }
        if self.in_flight {
            return Err(EnvError::InvalidSetup {
                what: "VectorEnv::begin_step".into(),
                reason: "the previous step was not finished".into(),
            });
        }
        if !self.started {
            self.reset()?;
        }
        // Envs that step elsewhere (worker processes) all start before any is waited for.
        let adim = self.action_dim;
        for ((env, action), &elsewhere) in
            self.envs.iter_mut().zip(actions.chunks_exact(adim)).zip(&self.elsewhere)
        {
            if elsewhere {
                env.begin_step(action)?;
            }
        }
        for (env, &elsewhere) in self.envs.iter_mut().zip(&self.elsewhere) {
            if elsewhere {
                env.flush_steps()?;
            }
        }
        self.actions.copy_from_slice(actions);
        self.in_flight = true;
        Ok(())
    }

    /// Finishes the step [`VectorEnv::begin_step`] started and returns it, as
    /// [`VectorEnv::step`] does.
    pub fn finish_step(&mut self) -> Result<&VectorStep> {
        if !std::mem::take(&mut self.in_flight) {
            return Err(EnvError::InvalidSetup {
                what: "VectorEnv::finish_step".into(),
                reason: "no step was begun".into(),
            });
        }
        let (dim, adim) = (self.obs_dim, self.action_dim);
        let step = &mut self.step;
        step.episodes.clear();
        let rows = self
            .envs
            .iter_mut()
            .zip(step.obs.chunks_exact_mut(dim))
            .zip(step.final_obs.chunks_exact_mut(dim))
            .zip(self.actions.chunks_exact(adim))
            .zip(self.returns.iter_mut().zip(&mut self.lengths));
        for (i, ((((env, obs), final_obs), action), (episode_return, episode_len))) in
            rows.enumerate()
        {
            if step.terminateds[i] || step.truncateds[i] {
                final_obs.fill(0.0); // the row held the previous step's final observation
                step.final_infos[i].clear();
            }
            let outcome =
                if self.elsewhere[i] { env.finish_step(obs)? } else { env.step(action, obs)? };
            step.rewards[i] = outcome.reward;
            step.terminateds[i] = outcome.terminated;
            step.truncateds[i] = outcome.truncated;
            *episode_return += outcome.reward;
            *episode_len += 1;
            finite(env.as_ref(), i, "reward", &[outcome.reward], *episode_len)?;
            if self.check_obs {
                finite(env.as_ref(), i, "observation", obs, *episode_len)?;
            }
            if outcome.terminated || outcome.truncated {
                final_obs.copy_from_slice(obs);
                step.final_infos[i].extend_from_slice(env.info());
                if !(outcome.terminated && env.episode_continues()) {
                    let stats = EpisodeStats {
                        episode_return: *episode_return,
                        episode_len: *episode_len,
                        truncated: outcome.truncated && !outcome.terminated,
                    };
                    step.episodes.push((i, stats));
                    *episode_return = 0.0;
                    *episode_len = 0;
                }
                env.reset(None, obs)?;
                if self.check_obs {
                    finite(env.as_ref(), i, "reset observation", obs, 0)?;
                }
            }
        }
        Ok(&self.step)
    }
}

/// Fails with [`EnvError::NonFinite`] at the first NaN or infinity of `values`.
fn finite<T: Copy + Into<f64>>(
    env: &dyn Env,
    index: usize,
    field: &'static str,
    values: &[T],
    episode_step: u64,
) -> Result<()> {
    match values.iter().map(|&v| v.into()).enumerate().find(|(_, v)| !v.is_finite()) {
        None => Ok(()),
        Some((position, value)) => Err(EnvError::NonFinite {
            env: env.spec().id.clone(),
            index,
            field,
            position,
            value,
            episode_step,
        }),
    }
}
