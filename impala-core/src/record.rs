//! Episodes recorded step by step by env runners that are asked to (off by default): what
//! RLlib's episode callbacks (`on_episode_start`, `on_episode_step`, `on_episode_end`) look
//! at. The env runners here never call into user code while they sample; the driver replays
//! these records to the callbacks after the iteration instead.

use crate::{EpisodeStats, Observations, Space};

/// One agent's part of a recorded episode: what its policy received and did.
///
/// ```
/// use impala_core::{AgentRecord, Space};
/// let mut agent = AgentRecord::new(0, &Space::Bytes { shape: vec![2] });
/// agent.observe(&[1.0, 2.0], &[]);
/// agent.act(&[1.0]);
/// agent.reward(0.5);
/// agent.observe(&[3.0, 4.0], b"info");
/// assert_eq!((agent.observations.len(), agent.actions.len(), agent.rewards), (4, 1, vec![0.5]));
/// assert_eq!(agent.infos, vec![(1, b"info".to_vec())]);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct AgentRecord {
    /// The agent's index in its env's `MultiAgentSpec::agents`; 0 in a single-agent episode.
    pub agent: usize,
    /// Every observation as the agent's policy received it (after the run's wrappers, e.g.
    /// observation normalisation), flattened and in order: the first after the reset, one
    /// after each of its steps, and the one that ended its episode where it was observed then.
    /// Bytes observations stay bytes.
    pub observations: Observations,
    /// The env step each observation came at (0: the reset). Filled for the agents of
    /// multi-agent episodes, which need not be observed at every env step; empty for a single
    /// agent, whose observation `i` came at step `i`.
    pub observed_at: Vec<u64>,
    /// The actions as the policy sampled them (before any clipping to the action space),
    /// flattened.
    pub actions: Vec<f32>,
    /// Per action, the env's reward for it, unclipped: for an agent of a multi-agent episode,
    /// the sum of its rewards until it was next observed or left.
    pub rewards: Vec<f32>,
    /// `(observation index, info)` of each observation that came with a non-empty info
    /// ([`Env::info`](crate::Env::info): serialised by the env's host), in order; the
    /// others' infos are empty.
    pub infos: Vec<(usize, Vec<u8>)>,
}

impl AgentRecord {
    /// An empty record of agent `agent`, whose observations are of `observation_space`.
    pub fn new(agent: usize, observation_space: &Space) -> Self {
        AgentRecord {
            agent,
            observations: Observations::zeros(observation_space, 0),
            observed_at: Vec::new(),
            actions: Vec::new(),
            rewards: Vec::new(),
            infos: Vec::new(),
        }
    }

    /// An empty record of the same agent with room for as many steps as this one holds: an
    /// env's episodes tend to last alike, so a runner that starts each episode's record this
    /// way seldom grows one step by step.
    pub fn sized_like(&self) -> Self {
        let mut observations = match &self.observations {
            Observations::F32(_) => Observations::F32(Vec::new()),
            Observations::Bytes(_) => Observations::Bytes(Vec::new()),
        };
        observations.reserve(self.observations.len());
        AgentRecord {
            agent: self.agent,
            observations,
            observed_at: Vec::with_capacity(self.observed_at.len()),
            actions: Vec::with_capacity(self.actions.len()),
            rewards: Vec::with_capacity(self.rewards.len()),
            infos: Vec::new(),
        }
    }

    /// Appends an observation of a single-agent episode (one before each action and the last
    /// one), with its info (empty: none).
    pub fn observe(&mut self, obs: &[f32], info: &[u8]) {
        self.keep_info(self.rewards.len(), info);
        self.observations.extend(obs);
    }

    /// Appends an observation of a multi-agent episode's agent that came at env step
    /// `env_step`, with its info (empty: none).
    pub fn observe_at(&mut self, obs: &[f32], env_step: u64, info: &[u8]) {
        self.keep_info(self.observed_at.len(), info);
        self.observations.extend(obs);
        self.observed_at.push(env_step);
    }

    fn keep_info(&mut self, index: usize, info: &[u8]) {
        if !info.is_empty() {
            self.infos.push((index, info.to_vec()));
        }
    }

    /// Appends an action, with a reward of 0 that [`AgentRecord::reward`] adds to.
    pub fn act(&mut self, action: &[f32]) {
        self.actions.extend_from_slice(action);
        self.rewards.push(0.0);
    }

    /// Adds `reward` to the last action's reward (none yet: nothing to add it to).
    pub fn reward(&mut self, reward: f64) {
        if let Some(last) = self.rewards.last_mut() {
            *last += reward as f32;
        }
    }

    /// Whether the agent took part at all (was observed or acted).
    pub fn took_part(&self) -> bool {
        !self.observations.is_empty() || !self.rewards.is_empty()
    }
}

/// One complete episode as an env runner played it (see the module docs): its agents'
/// observations, actions and rewards, where it was played, and how it ended.
#[derive(Debug, Clone, PartialEq)]
pub struct EpisodeRecord {
    /// The runner that played it (0 = the local runner).
    pub runner_id: usize,
    /// The env's index among its runner's envs.
    pub env_index: usize,
    /// A single-agent episode: its one agent. A multi-agent episode: each agent that took
    /// part, in the spec's order.
    pub agents: Vec<AgentRecord>,
    /// Its return (every agent's rewards, also those no action of theirs was open for), its
    /// length in env steps and whether it was truncated rather than terminated.
    pub stats: EpisodeStats,
}

impl EpisodeRecord {
    /// Whether it ended in a terminal state (not truncated).
    pub fn terminated(&self) -> bool {
        !self.stats.truncated
    }
}
