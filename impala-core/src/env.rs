//! The environment trait, shaped like Gymnasium's `Env` (`reset(seed)`, `step(action)`).

use crate::{CoreError, Result, Space};

/// What an environment is: its Gymnasium id, spaces and time limit.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvSpec {
    /// The Gymnasium id, e.g. `CartPole-v1`.
    pub id: String,
    /// The observation space (observations are flattened `f32`).
    pub observation_space: Space,
    /// The action space.
    pub action_space: Space,
    /// Steps after which an episode is truncated (Gymnasium's `TimeLimit`), if any.
    pub max_episode_steps: Option<usize>,
}

/// The result of one `step`, without the observation (written into the caller's buffer).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StepOutcome {
    /// The reward of this transition.
    pub reward: f64,
    /// The episode reached a terminal state (no bootstrapping past it).
    pub terminated: bool,
    /// The episode was cut short, e.g. by a time limit (bootstrap from the final observation).
    pub truncated: bool,
}

impl StepOutcome {
    /// Whether the episode ended, one way or the other.
    #[inline]
    pub fn done(&self) -> bool {
        self.terminated || self.truncated
    }
}

/// A Gymnasium-compatible environment that writes observations into caller-owned buffers, so
/// stepping never allocates.
///
/// After `terminated` or `truncated`, the caller must call [`Env::reset`] before stepping again.
pub trait Env: Send {
    /// The spaces and id of this environment.
    fn spec(&self) -> &EnvSpec;

    /// Starts a new episode and writes its first observation into `obs`
    /// (`observation_space.flat_dim()` values). A `Some(seed)` reseeds the env's RNG, as
    /// Gymnasium's `reset(seed=...)`.
    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> Result<()>;

    /// Applies `action` (`action_space.flat_dim()` values, see [`Space`]) and writes the next
    /// observation into `obs`.
    fn step(&mut self, action: &[f32], obs: &mut [f32]) -> Result<StepOutcome>;

    /// Whether this env steps elsewhere (a worker process). Such an env's step can be started
    /// with [`Env::begin_step`] and finished later with [`Env::finish_step`], so that a vector
    /// env starts every env's step before it waits for any, and a runner infers for some envs
    /// while others step. The default, `false`: the env steps only in [`Env::step`].
    fn steps_elsewhere(&self) -> bool {
        false
    }

    /// Starts `step(action)` without waiting for it (envs that [`Env::steps_elsewhere`] only);
    /// the caller finishes it with [`Env::finish_step`] before anything else.
    fn begin_step(&mut self, action: &[f32]) -> Result<()> {
        let _ = action;
        Err(CoreError::Env {
            env: self.spec().id.clone(),
            reason: "begin_step on an env that steps only in step".into(),
        })
    }

    /// Sends the steps begun so far on their way, for envs that gather them (a worker process
    /// gets one command for all of its envs' steps): a vector env calls it on every env once
    /// it has begun them all. The default does nothing.
    fn flush_steps(&mut self) -> Result<()> {
        Ok(())
    }

    /// Finishes the step [`Env::begin_step`] started, writing the next observation into `obs`.
    fn finish_step(&mut self, obs: &mut [f32]) -> Result<StepOutcome> {
        let _ = obs;
        Err(CoreError::Env {
            env: self.spec().id.clone(),
            reason: "finish_step without a step begun by begin_step".into(),
        })
    }

    /// Whether the episode the last step `terminated` goes on being reported: the step ended
    /// an episode for learning (no bootstrapping past it, recurrent state reset) but not the
    /// game, whose return and length keep adding up until it ends (an Atari life lost with
    /// `episodic_life`: RLlib's `EpisodicLifeEnv`, reported through its `MonitorEnv`). The
    /// reset that follows continues the same game. The default, `false`.
    fn episode_continues(&self) -> bool {
        false
    }

    /// The info of the reset or step that gave the current observation, serialised by the
    /// env's host (a Python env's `info` dict, pickled, when its runner records episodes for
    /// the callbacks' `get_infos()`); empty for an empty info. The default: always empty.
    fn info(&self) -> &[u8] {
        &[]
    }
}

impl<E: Env + ?Sized> Env for Box<E> {
    fn spec(&self) -> &EnvSpec {
        (**self).spec()
    }
    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> Result<()> {
        (**self).reset(seed, obs)
    }
    fn step(&mut self, action: &[f32], obs: &mut [f32]) -> Result<StepOutcome> {
        (**self).step(action, obs)
    }
    fn steps_elsewhere(&self) -> bool {
        (**self).steps_elsewhere()
    }
    fn begin_step(&mut self, action: &[f32]) -> Result<()> {
        (**self).begin_step(action)
    }
    fn flush_steps(&mut self) -> Result<()> {
        (**self).flush_steps()
    }
    fn finish_step(&mut self, obs: &mut [f32]) -> Result<StepOutcome> {
        (**self).finish_step(obs)
    }
    fn episode_continues(&self) -> bool {
        (**self).episode_continues()
    }
    fn info(&self) -> &[u8] {
        (**self).info()
    }
}
