//! Environments with several agents, shaped like RLlib's `MultiAgentEnv` (and PettingZoo's
//! parallel API): each step takes the actions of the agents that were asked to act and answers
//! per agent (observation, reward, terminated, truncated) plus RLlib's `"__all__"` flags.
//!
//! Agents are addressed by their index in [`MultiAgentSpec::agents`] (PettingZoo's
//! `possible_agents`), so stepping never allocates or hashes names: observation buffers, actions
//! and [`AgentStep`]s are slices in that order.

use crate::{CoreError, EnvSpec, Result, Space};

/// What a multi-agent environment is: its id, every agent that may take part with its spaces,
/// and its time limit.
#[derive(Debug, Clone, PartialEq)]
pub struct MultiAgentSpec {
    /// The env's id, e.g. `HalfObserved`.
    pub id: String,
    /// Every agent that may take part, in a fixed order (PettingZoo's `possible_agents`);
    /// per-agent slices follow it.
    pub agents: Vec<AgentSpec>,
    /// Env steps after which an episode is truncated for every agent, if any.
    pub max_episode_steps: Option<usize>,
}

/// One agent of a [`MultiAgentSpec`].
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSpec {
    /// Its id (RLlib's `AgentID`), unique within the env.
    pub id: String,
    /// Its observation space (observations are flattened `f32`, as for [`crate::Env`]).
    pub observation_space: Space,
    /// Its action space.
    pub action_space: Space,
}

impl MultiAgentSpec {
    /// A spec for `agents`, refusing none, an empty id or an id given twice.
    ///
    /// ```
    /// use impala_core::{AgentSpec, MultiAgentSpec, Space};
    /// let agent = |id: &str| AgentSpec {
    ///     id: id.into(),
    ///     observation_space: Space::Discrete(2),
    ///     action_space: Space::Discrete(2),
    /// };
    /// let spec = MultiAgentSpec::new("Pair", vec![agent("left"), agent("right")], Some(10))?;
    /// assert_eq!(spec.index_of("right"), Some(1));
    /// let twice = MultiAgentSpec::new("Pair", vec![agent("left"), agent("left")], None);
    /// assert!(twice.is_err());
    /// # Ok::<(), impala_core::CoreError>(())
    /// ```
    pub fn new(
        id: impl Into<String>,
        agents: Vec<AgentSpec>,
        max_episode_steps: Option<usize>,
    ) -> Result<Self> {
        let id = id.into();
        let invalid = |reason: String| CoreError::Env { env: id.clone(), reason };
        if agents.is_empty() {
            return Err(invalid("has no agents".into()));
        }
        for (i, agent) in agents.iter().enumerate() {
            if agent.id.is_empty() {
                return Err(invalid(format!("agent {i} has an empty id")));
            }
            if agents[..i].iter().any(|a| a.id == agent.id) {
                return Err(invalid(format!("names agent `{}` twice", agent.id)));
            }
        }
        Ok(MultiAgentSpec { id, agents, max_episode_steps })
    }

    /// The agents' ids in order (what a policy mapping maps).
    ///
    /// ```
    /// use impala_core::{AgentSpec, MultiAgentSpec, Space};
    /// let agent = |id: &str| AgentSpec {
    ///     id: id.into(),
    ///     observation_space: Space::Discrete(2),
    ///     action_space: Space::Discrete(2),
    /// };
    /// let spec = MultiAgentSpec::new("Pair", vec![agent("left"), agent("right")], None)?;
    /// assert_eq!(spec.agent_ids(), ["left", "right"]);
    /// # Ok::<(), impala_core::CoreError>(())
    /// ```
    pub fn agent_ids(&self) -> Vec<String> {
        self.agents.iter().map(|a| a.id.clone()).collect()
    }

    /// How many agents may take part.
    pub fn num_agents(&self) -> usize {
        self.agents.len()
    }

    /// The single-agent spec `agent` acts in: its spaces, this env's id and time limit (what
    /// the policy acting for it is built for).
    pub fn agent_env_spec(&self, agent: &AgentSpec) -> EnvSpec {
        EnvSpec {
            id: self.id.clone(),
            observation_space: agent.observation_space.clone(),
            action_space: agent.action_space.clone(),
            max_episode_steps: self.max_episode_steps,
        }
    }

    /// The index of the agent named `id`.
    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.agents.iter().position(|a| a.id == id)
    }

    /// Observation buffers for every agent, each as long as its flattened observation.
    pub fn observation_buffers(&self) -> Vec<Vec<f32>> {
        self.agents.iter().map(|a| vec![0.0; a.observation_space.flat_dim()]).collect()
    }

    /// Action buffers for every agent, each as long as its flattened action.
    pub fn action_buffers(&self) -> Vec<Vec<f32>> {
        self.agents.iter().map(|a| vec![0.0; a.action_space.flat_dim()]).collect()
    }
}

/// One agent's part of a reset or step: RLlib's entries for it in the observation, reward,
/// terminated and truncated dicts.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct AgentStep {
    /// The env wrote this agent's observation: it acts at the next step, or, when it is done,
    /// that was its final observation.
    pub observed: bool,
    /// Its reward from this step (rewards may come to agents that did not act).
    pub reward: f64,
    /// It reached a terminal state and leaves the episode (no bootstrapping past it).
    pub terminated: bool,
    /// It was cut short and leaves the episode (bootstrap from its final observation).
    pub truncated: bool,
}

impl AgentStep {
    /// Whether the agent left the episode, one way or the other.
    #[inline]
    pub fn done(&self) -> bool {
        self.terminated || self.truncated
    }
}

/// What a reset or step returns besides the observations: one [`AgentStep`] per agent of the
/// spec and RLlib's `"__all__"` flags. Reused from step to step.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MultiAgentStep {
    /// Per agent, in [`MultiAgentSpec::agents`] order.
    pub agents: Vec<AgentStep>,
    /// RLlib's `terminateds["__all__"]`: the episode ended for every agent.
    pub all_terminated: bool,
    /// RLlib's `truncateds["__all__"]`: the episode was cut short for every agent.
    pub all_truncated: bool,
    /// Per agent, its info from this reset or step, serialised by the env's host (see
    /// [`Env::info`](crate::Env::info)); read with [`MultiAgentStep::info`].
    pub infos: Vec<Vec<u8>>,
}

impl MultiAgentStep {
    /// A cleared step for `num_agents` agents.
    pub fn new(num_agents: usize) -> Self {
        MultiAgentStep { agents: vec![AgentStep::default(); num_agents], ..Default::default() }
    }

    /// Clears every entry (envs start each reset and step from this).
    pub fn clear(&mut self) {
        self.agents.fill(AgentStep::default());
        self.all_terminated = false;
        self.all_truncated = false;
        self.infos.iter_mut().for_each(Vec::clear);
    }

    /// Agent `i`'s info from this reset or step: empty for an empty one, and for envs that
    /// send none.
    pub fn info(&self, i: usize) -> &[u8] {
        self.infos.get(i).map_or(&[], Vec::as_slice)
    }

    /// Sets agent `i`'s info.
    pub fn set_info(&mut self, i: usize, info: Vec<u8>) {
        if self.infos.len() <= i {
            self.infos.resize(i + 1, Vec::new());
        }
        self.infos[i] = info;
    }

    /// Whether the episode is over (`"__all__"` terminated or truncated).
    #[inline]
    pub fn episode_done(&self) -> bool {
        self.all_terminated || self.all_truncated
    }

    /// The agents asked to act next: observed and not done.
    pub fn acting(&self) -> impl Iterator<Item = usize> + '_ {
        self.agents.iter().enumerate().filter(|(_, a)| a.observed && !a.done()).map(|(i, _)| i)
    }
}

/// An environment with several agents (RLlib's `MultiAgentEnv`), writing observations into
/// caller-owned per-agent buffers ([`MultiAgentSpec::observation_buffers`]) so stepping never
/// allocates.
///
/// Agents may join mid-episode (first observed at some step) and leave it (terminated or
/// truncated alone); the episode ends when `all_terminated` or `all_truncated` is set, after
/// which the caller resets before stepping again. Only agents observed at the previous reset or
/// step act; their actions are in `actions` at their index, the other entries are left as they
/// were and must be ignored.
///
/// ```
/// use impala_core::{AgentSpec, CoreError, MultiAgentEnv, MultiAgentSpec, MultiAgentStep, Space};
///
/// /// Two agents guess a coin only the first one sees; both get +1 when the second's guess,
/// /// made after the first has acted, is right. The episode is one round.
/// struct Relay { spec: MultiAgentSpec, coin: f32, turn: usize }
/// impl MultiAgentEnv for Relay {
///     fn spec(&self) -> &MultiAgentSpec { &self.spec }
///     fn reset(&mut self, _seed: Option<u64>, obs: &mut [Vec<f32>], out: &mut MultiAgentStep)
///         -> Result<(), CoreError> {
///         out.clear();
///         (self.coin, self.turn) = (1.0, 0);
///         obs[0][0] = self.coin;
///         out.agents[0].observed = true; // only the first agent acts first
///         Ok(())
///     }
///     fn step(&mut self, actions: &[Vec<f32>], obs: &mut [Vec<f32>], out: &mut MultiAgentStep)
///         -> Result<(), CoreError> {
///         out.clear();
///         if self.turn == 0 {
///             self.turn = 1;
///             obs[1][0] = actions[0][0]; // the second agent sees the first one's action
///             out.agents[1].observed = true;
///         } else {
///             let reward = if actions[1][0] == self.coin { 1.0 } else { 0.0 };
///             for agent in &mut out.agents {
///                 agent.reward = reward;
///             }
///             out.all_terminated = true;
///         }
///         Ok(())
///     }
/// }
///
/// let coin = Space::continuous(vec![0.0], vec![1.0])?;
/// let agent = |id: &str| AgentSpec {
///     id: id.into(),
///     observation_space: coin.clone(),
///     action_space: Space::Discrete(2),
/// };
/// let spec = MultiAgentSpec::new("Relay", vec![agent("speaker"), agent("listener")], None)?;
/// let mut env = Relay { spec, coin: 0.0, turn: 0 };
/// let (mut obs, mut actions) = (env.spec().observation_buffers(), env.spec().action_buffers());
/// let mut out = MultiAgentStep::new(env.spec().num_agents());
/// env.reset(Some(0), &mut obs, &mut out)?;
/// assert_eq!(out.acting().collect::<Vec<_>>(), [0]);
/// actions[0][0] = 1.0;
/// env.step(&actions, &mut obs, &mut out)?;
/// assert_eq!(out.acting().collect::<Vec<_>>(), [1]);
/// actions[1][0] = obs[1][0];
/// env.step(&actions, &mut obs, &mut out)?;
/// assert!(out.episode_done() && out.agents[0].reward == 1.0);
/// # Ok::<(), CoreError>(())
/// ```
pub trait MultiAgentEnv: Send {
    /// The agents, their spaces and the env's id.
    fn spec(&self) -> &MultiAgentSpec;

    /// Starts a new episode: writes the first observation of each agent that acts first into
    /// `obs[i]` and marks it `observed` in `out` (cleared first). A `Some(seed)` reseeds the
    /// env's RNG, as Gymnasium's `reset(seed=...)`.
    fn reset(
        &mut self,
        seed: Option<u64>,
        obs: &mut [Vec<f32>],
        out: &mut MultiAgentStep,
    ) -> Result<()>;

    /// Applies the actions of the agents asked to act and writes, per agent, what RLlib's five
    /// dicts hold for it into `obs` and `out` (cleared first): the observation of each agent
    /// that acts next (or leaves, its final one), rewards, and terminated / truncated flags,
    /// per agent and for all.
    fn step(
        &mut self,
        actions: &[Vec<f32>],
        obs: &mut [Vec<f32>],
        out: &mut MultiAgentStep,
    ) -> Result<()>;

    /// Whether this env steps elsewhere (a worker process), so that its step can be begun with
    /// [`MultiAgentEnv::begin_step`] and finished with [`MultiAgentEnv::finish_step`]: a runner
    /// then starts every env's step before it waits for any. The default, `false`.
    fn steps_elsewhere(&self) -> bool {
        false
    }

    /// Starts `step(actions)` without waiting for it (envs that [`MultiAgentEnv::steps_elsewhere`]
    /// only); the caller finishes it with [`MultiAgentEnv::finish_step`] before anything else.
    fn begin_step(&mut self, actions: &[Vec<f32>]) -> Result<()> {
        let _ = actions;
        Err(CoreError::Env {
            env: self.spec().id.clone(),
            reason: "begin_step on an env that steps only in step".into(),
        })
    }

    /// Sends the steps begun so far on their way (a worker process gets one command for all of
    /// its envs' steps). The default does nothing.
    fn flush_steps(&mut self) -> Result<()> {
        Ok(())
    }

    /// Finishes the step [`MultiAgentEnv::begin_step`] started, as [`MultiAgentEnv::step`]
    /// would have.
    fn finish_step(&mut self, obs: &mut [Vec<f32>], out: &mut MultiAgentStep) -> Result<()> {
        let _ = (obs, out);
        Err(CoreError::Env {
            env: self.spec().id.clone(),
            reason: "finish_step without a step begun by begin_step".into(),
        })
    }
}

impl<E: MultiAgentEnv + ?Sized> MultiAgentEnv for Box<E> {
    fn spec(&self) -> &MultiAgentSpec {
        (**self).spec()
    }
    fn reset(
        &mut self,
        seed: Option<u64>,
        obs: &mut [Vec<f32>],
        out: &mut MultiAgentStep,
    ) -> Result<()> {
        (**self).reset(seed, obs, out)
    }
    fn step(
        &mut self,
        actions: &[Vec<f32>],
        obs: &mut [Vec<f32>],
        out: &mut MultiAgentStep,
    ) -> Result<()> {
        (**self).step(actions, obs, out)
    }
    fn steps_elsewhere(&self) -> bool {
        (**self).steps_elsewhere()
    }
    fn begin_step(&mut self, actions: &[Vec<f32>]) -> Result<()> {
        (**self).begin_step(actions)
    }
    fn flush_steps(&mut self) -> Result<()> {
        (**self).flush_steps()
    }
    fn finish_step(&mut self, obs: &mut [Vec<f32>], out: &mut MultiAgentStep) -> Result<()> {
        (**self).finish_step(obs, out)
    }
}
