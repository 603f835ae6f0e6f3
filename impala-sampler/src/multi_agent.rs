//! A multi-agent env runner: `num_envs` [`MultiAgentEnv`]s stepped together, each agent acting
//! with the policy it maps to, experience cut into per-policy rows (RLlib's old-stack
//! `MultiAgentBatch`, one [`SampleBatch`] per policy).
//!
//! Each (env, agent) pair is a *lane*: its transitions, in its own time, form rows of
//! `rollout_fragment_length` agent steps, as one env's steps form a row of a single-agent batch.
//! A transition opens when the agent is observed and acts, collects the rewards the agent gets
//! until it is next observed (or leaves), and closes then; a row is complete when it holds
//! `rollout_fragment_length` closed transitions and either its last one ended the agent's
//! episode or the agent's next observation (the row's bootstrap observation) has come. Agents
//! that join mid-episode simply open their lane's next transition; agents that leave close it
//! as terminated or truncated (with the behaviour value of their final observation, as a
//! single-agent truncation). A lane's recurrent state restarts from zero after it leaves.

use std::sync::Arc;

use impala_core::{
    AgentRecord, CoreError, EnvActions, EnvSpec, EpisodeRecord, EpisodeStats, MultiAgentEnv,
    MultiAgentSpec, MultiAgentStep, Policy, PolicyInput, PolicyOutput, SampleBatch, Space, Weights,
};

use crate::{Fragment, Result, SamplerError};

/// Builds one multi-agent env per call, for env index `i` of a runner.
pub type MultiAgentEnvFactory =
    Arc<dyn Fn(usize) -> std::result::Result<Box<dyn MultiAgentEnv>, CoreError> + Send + Sync>;

/// Builds the policies of runner `runner_id`'s incarnation `incarnation` (one per policy
/// index, acting with the given weights).
pub type MultiAgentPolicyFactory = Arc<
    dyn Fn(usize, u64, &[Arc<Weights>]) -> std::result::Result<Vec<Box<dyn Policy>>, CoreError>
        + Send
        + Sync,
>;

/// One sample result of a [`MultiAgentEnvRunner`]: per policy, the rows that were completed.
#[derive(Debug, Clone, PartialEq)]
pub struct MultiAgentFragment {
    /// The runner that sampled it.
    pub runner_id: usize,
    /// One batch per policy, in the runner's policy order; a policy with no complete row has a
    /// batch of 0 rows.
    pub batches: Vec<SampleBatch>,
    /// Env steps taken (RLlib's `MultiAgentBatch.count`).
    pub env_steps: usize,
    /// Agent steps taken: one per agent that acted per env step (`agent_steps()`).
    pub agent_steps: usize,
    /// Episodes that ended: the sum over agents of their rewards, the env steps.
    pub episodes: Vec<EpisodeStats>,
    /// Per ended episode, per policy, the sum of the rewards of the agents mapped to it
    /// (RLlib's `policy_reward_mean/<policy id>` averages these).
    pub policy_returns: Vec<Vec<f64>>,
    /// The ended episodes step by step, in the same order, when the runner records them
    /// ([`MultiAgentSettings::record_episodes`]); empty otherwise.
    pub episode_records: Vec<EpisodeRecord>,
}

/// A single-agent fragment as a multi-agent one of one policy, so a group of multi-agent
/// fragments can drive single-agent runners too (RLlib runs a single-agent env as a multi-agent
/// one with one module): every agent step is an env step, every episode's return is its
/// policy's.
///
/// ```
/// use impala_core::{EpisodeStats, SampleBatch, Space};
/// use impala_sampler::{Fragment, MultiAgentFragment};
/// let batch = SampleBatch::zeros(5, 2, &Space::Discrete(2), &Space::Discrete(2), 0);
/// let episode = EpisodeStats { episode_return: 3.0, episode_len: 3, truncated: false };
/// let fragment = Fragment { runner_id: 1, batch, episodes: vec![episode], episode_records: vec![] };
/// let multi = MultiAgentFragment::from(fragment.clone());
/// assert_eq!((multi.runner_id, multi.env_steps, multi.agent_steps), (1, 10, 10));
/// assert_eq!(multi.batches, vec![fragment.batch]);
/// assert_eq!(multi.policy_returns, vec![vec![3.0]]);
/// ```
impl From<Fragment> for MultiAgentFragment {
    fn from(fragment: Fragment) -> Self {
        let Fragment { runner_id, batch, episodes, episode_records } = fragment;
        MultiAgentFragment {
            runner_id,
            env_steps: batch.env_steps(),
            agent_steps: batch.agent_steps(),
            policy_returns: episodes.iter().map(|e| vec![e.episode_return]).collect(),
            episodes,
            batches: vec![batch],
            episode_records,
        }
    }
}

/// How the runner samples: which policy acts for each agent and the fragment's length.
#[derive(Debug, Clone, PartialEq)]
pub struct MultiAgentSettings {
    /// Per agent of the env's spec, the index of the policy it maps to.
    pub policy_of_agent: Vec<usize>,
    /// Env steps per `sample()` call and agent steps per row (`rollout_fragment_length`).
    pub rollout_fragment_length: usize,
    /// Seed of the envs' first resets (env `i` gets `seed + i`), or `None`.
    pub seed: Option<u64>,
    /// Sample actions (`true`) or act greedily.
    pub explore: bool,
    /// Policies act in `[-1, 1]` for bounded `Box` action spaces, mapped onto the bounds
    /// before the env steps ([`EnvActions`]).
    pub normalize_actions: bool,
    /// Record every episode step by step into the fragments
    /// ([`MultiAgentFragment::episode_records`]), for callbacks that replay them.
    pub record_episodes: bool,
}

impl MultiAgentSettings {
    /// The settings of runner `runner_id`'s incarnation `incarnation` in a group whose base
    /// settings these are: its envs seeded from `seed + 1000 * runner_id` (RLlib's per-worker
    /// env seeds), a new stream per incarnation. Runner threads and remote runners alike.
    ///
    /// ```
    /// use impala_sampler::MultiAgentSettings;
    /// let base = MultiAgentSettings {
    ///     policy_of_agent: vec![0, 0],
    ///     rollout_fragment_length: 10,
    ///     seed: Some(7),
    ///     explore: true,
    ///     normalize_actions: true,
    ///     record_episodes: false,
    /// };
    /// let (first, restarted) = (base.for_runner(1, 0), base.for_runner(1, 1));
    /// assert!(first.seed.is_some() && first.seed != restarted.seed);
    /// assert_ne!(first.seed, base.for_runner(2, 0).seed);
    /// ```
    pub fn for_runner(&self, runner_id: usize, incarnation: u64) -> MultiAgentSettings {
        let seed = self
            .seed
            .map(|s| crate::stream_seed(s.wrapping_add(1000 * runner_id as u64), incarnation));
        MultiAgentSettings { seed, ..self.clone() }
    }
}

/// Per policy of `policy_names`, the single-agent spec its agents act in: `policy_of_agent`
/// maps each agent of `spec` (in its order) to a policy index. Refused (naming the agent and
/// the policy): a mapping of another length than the env's agents, an index past the policies,
/// agents of different spaces under one policy, a policy no agent maps to.
///
/// ```
/// use impala_core::MultiAgentEnv;
/// use impala_envs::MultiAgentCartPole;
/// use impala_sampler::policy_specs;
///
/// let env = MultiAgentCartPole::new(3)?;
/// let names = ["first".to_string(), "rest".to_string()];
/// let specs = policy_specs(env.spec(), &[0, 1, 1], &names)?;
/// assert_eq!(specs[1].observation_space, env.spec().agents[2].observation_space);
/// let refused = policy_specs(env.spec(), &[0, 0, 0], &names).err().map(|e| e.to_string());
/// assert!(refused.is_some_and(|e| e.contains("no agent maps to policy rest")));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn policy_specs(
    spec: &MultiAgentSpec,
    policy_of_agent: &[usize],
    policy_names: &[String],
) -> Result<Vec<EnvSpec>> {
    let num_agents = spec.num_agents();
    if policy_of_agent.len() != num_agents {
        return Err(SamplerError::PolicyMapping {
            reason: format!(
                "maps {} agents, but env `{}` has {num_agents}",
                policy_of_agent.len(),
                spec.id
            ),
        });
    }
    let mut policy_specs: Vec<Option<EnvSpec>> = vec![None; policy_names.len()];
    for (agent, &p) in spec.agents.iter().zip(policy_of_agent) {
        let slot = policy_specs.get_mut(p).ok_or_else(|| SamplerError::PolicyMapping {
            reason: format!(
                "maps agent `{}` to policy {p}, but there are {} policies",
                agent.id,
                policy_names.len()
            ),
        })?;
        let agent_spec = spec.agent_env_spec(agent);
        match slot {
            Some(first)
                if first.observation_space != agent_spec.observation_space
                    || first.action_space != agent_spec.action_space =>
            {
                return Err(SamplerError::PolicyMapping {
                    reason: format!(
                        "agent `{}` maps to policy {} with spaces {:?} / {:?}, but another \
                         agent of that policy has {:?} / {:?}",
                        agent.id,
                        policy_names[p],
                        agent_spec.observation_space,
                        agent_spec.action_space,
                        first.observation_space,
                        first.action_space
                    ),
                })
            }
            Some(_) => {}
            None => *slot = Some(agent_spec),
        }
    }
    policy_specs
        .into_iter()
        .enumerate()
        .map(|(p, s)| {
            s.ok_or_else(|| SamplerError::PolicyMapping {
                reason: format!("no agent maps to policy {}", policy_names[p]),
            })
        })
        .collect()
}

/// A transition of one lane: opened when its agent acted, closed when it is observed again or
/// leaves.
#[derive(Debug, Clone, Default)]
struct Step {
    obs: Vec<f32>,
    action: Vec<f32>,
    action_logp: f32,
    dist_inputs: Vec<f32>,
    vf_pred: f32,
    reward: f32,
    terminated: bool,
    truncated: bool,
    truncation_value: f32,
}

/// One (env, agent) pair's open transition, closed ones of its current row, and state.
#[derive(Debug, Default)]
struct Lane {
    policy: usize,
    /// The observation it acts on next, when it is observed and in the episode.
    next_obs: Option<Vec<f32>>,
    /// The transition it acted, waiting for its reward and next observation.
    open: Option<Step>,
    /// Closed transitions of the row being built.
    row: Vec<Step>,
    /// Recurrent state at the row's first transition, and the weights version that acted there.
    row_state: Vec<f32>,
    row_version: u64,
    /// Its recurrent state now.
    state: Vec<f32>,
}

/// A complete row, waiting for the fragment's batch.
struct Row {
    steps: Vec<Step>,
    bootstrap_obs: Vec<f32>,
    state_in: Vec<f32>,
    weights_version: u64,
}

/// RLlib's multi-agent `RolloutWorker`: `num_envs` multi-agent envs and one policy copy per
/// policy id, every agent acting with the policy [`MultiAgentSettings::policy_of_agent`] maps it
/// to, and per-policy rows out (see the module docs).
///
/// With [`MultiAgentSettings::record_episodes`] it also keeps every episode, per agent, and
/// hands each complete one over in the fragment where it ends
/// ([`MultiAgentFragment::episode_records`]), as [`EnvRunner`](crate::EnvRunner) does: an
/// agent's observations, with the env step each came at, its actions, and per action its
/// rewards until it was next observed or left (a reward it got with no action open, before
/// it first acted, counts in the episode's return only, as in its rows).
///
/// ```
/// use std::sync::Arc;
/// use impala_core::{EnvSpec, MultiAgentEnv, Policy};
/// use impala_envs::MultiAgentCartPole;
/// use impala_sampler::{MultiAgentEnvRunner, MultiAgentSettings, RandomPolicy};
///
/// // Two CartPole agents sharing one policy.
/// let envs: impala_sampler::MultiAgentEnvFactory =
///     Arc::new(|_| Ok(Box::new(MultiAgentCartPole::new(2)?) as Box<dyn MultiAgentEnv>));
/// let spec = MultiAgentCartPole::new(2)?.spec().agents[0].clone();
/// let shared = EnvSpec {
///     id: "shared".into(),
///     observation_space: spec.observation_space,
///     action_space: spec.action_space,
///     max_episode_steps: None,
/// };
/// let policies: Vec<Box<dyn Policy>> = vec![Box::new(RandomPolicy::new(&shared, 0))];
/// let settings = MultiAgentSettings {
///     policy_of_agent: vec![0, 0],
///     rollout_fragment_length: 5,
///     seed: Some(1),
///     explore: true,
///     normalize_actions: true,
///     record_episodes: false,
/// };
/// let mut runner = MultiAgentEnvRunner::new(0, 3, &envs, policies, &settings)?;
/// let fragment = runner.sample()?;
/// assert_eq!(fragment.env_steps, 15); // 3 envs x 5 steps
/// // Both agents of every env acted in each step (no pole falls in 5 steps): 6 rows of 5.
/// assert_eq!(fragment.batches[0].num_rows, 6);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct MultiAgentEnvRunner {
    runner_id: usize,
    envs: Vec<Box<dyn MultiAgentEnv>>,
    policies: Vec<Box<dyn Policy>>,
    policy_specs: Vec<EnvSpec>,
    /// Per policy, what its actions become in the env.
    env_actions: Vec<EnvActions>,
    settings: MultiAgentSettings,
    num_agents: usize,
    /// `[env][agent]` flattened: lane `e * num_agents + a`.
    lanes: Vec<Lane>,
    obs: Vec<Vec<Vec<f32>>>,
    actions: Vec<Vec<Vec<f32>>>,
    outs: Vec<MultiAgentStep>,
    /// Per env: its episode's summed reward, its per-policy rewards and its env steps.
    episode_return: Vec<f64>,
    episode_policy_returns: Vec<Vec<f64>>,
    episode_len: Vec<u64>,
    started: bool,
    /// Complete rows per policy, waiting for the fragment.
    rows: Vec<Vec<Row>>,
    out: PolicyOutput,
    /// Per agent, whether its observations can hold non-finite values (not bytes).
    check_obs: Vec<bool>,
    /// With [`MultiAgentSettings::record_episodes`], per env, each agent's part of the
    /// episode so far.
    records: Option<Vec<Vec<AgentRecord>>>,
}

impl std::fmt::Debug for MultiAgentEnvRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiAgentEnvRunner")
            .field("runner_id", &self.runner_id)
            .field("num_envs", &self.envs.len())
            .field("num_agents", &self.num_agents)
            .field("num_policies", &self.policies.len())
            .finish_non_exhaustive()
    }
}

impl MultiAgentEnvRunner {
    /// Builds runner `runner_id`: `num_envs` envs from `env_factory` and `policies` (one per
    /// policy index of `settings.policy_of_agent`). Every agent's spaces must be its policy's:
    /// agents sharing a policy must have the same spaces.
    pub fn new(
        runner_id: usize,
        num_envs: usize,
        env_factory: &MultiAgentEnvFactory,
        policies: Vec<Box<dyn Policy>>,
        settings: &MultiAgentSettings,
    ) -> Result<Self> {
        let mut envs = Vec::with_capacity(num_envs);
        for i in 0..num_envs {
            envs.push(env_factory(i)?);
        }
        let spec = envs.first().map(|e| e.spec().clone()).ok_or(SamplerError::NoEnvs)?;
        let names: Vec<String> = (0..policies.len()).map(|p| p.to_string()).collect();
        let num_agents = spec.num_agents();
        let policy_specs = policy_specs(&spec, &settings.policy_of_agent, &names)?;
        let mut lanes = Vec::with_capacity(num_envs * num_agents);
        for _ in 0..num_envs {
            for &p in &settings.policy_of_agent {
                let state = vec![0.0; policies[p].state_dim()];
                lanes.push(Lane { policy: p, state, ..Lane::default() });
            }
        }
        Ok(MultiAgentEnvRunner {
            runner_id,
            obs: envs.iter().map(|e| e.spec().observation_buffers()).collect(),
            actions: envs.iter().map(|e| e.spec().action_buffers()).collect(),
            outs: vec![MultiAgentStep::new(num_agents); num_envs],
            episode_return: vec![0.0; num_envs],
            episode_policy_returns: vec![vec![0.0; policies.len()]; num_envs],
            episode_len: vec![0; num_envs],
            rows: (0..policies.len()).map(|_| Vec::new()).collect(),
            envs,
            policies,
            env_actions: policy_specs
                .iter()
                .map(|s| EnvActions::new(&s.action_space, settings.normalize_actions, false))
                .collect(),
            policy_specs,
            settings: settings.clone(),
            num_agents,
            lanes,
            started: false,
            out: PolicyOutput::default(),
            check_obs: spec
                .agents
                .iter()
                .map(|a| !matches!(a.observation_space, Space::Bytes { .. }))
                .collect(),
            records: settings.record_episodes.then(|| vec![Vec::new(); num_envs]),
        })
    }

    /// The spec of its envs (every env a runner builds has the first one's).
    pub fn spec(&self) -> &MultiAgentSpec {
        self.envs[0].spec()
    }

    /// Acts with `weights` for policy `policy` from the next step on.
    pub fn set_weights(&mut self, policy: usize, weights: &Arc<Weights>) -> Result<()> {
        let p = self.policies.get_mut(policy).ok_or_else(|| SamplerError::PolicyMapping {
            reason: format!("no policy {policy} to set weights of"),
        })?;
        Ok(p.set_weights(weights)?)
    }

    /// Steps every env `rollout_fragment_length` times; returns the rows completed so far.
    pub fn sample(&mut self) -> Result<MultiAgentFragment> {
        let mut episodes = Vec::new();
        let mut policy_returns = Vec::new();
        let mut episode_records = Vec::new();
        if !self.started {
            for e in 0..self.envs.len() {
                let seed = self.settings.seed.map(|s| s.wrapping_add(e as u64));
                self.reset_env(e, seed)?;
            }
            self.started = true;
        }
        let mut agent_steps = 0;
        for _ in 0..self.settings.rollout_fragment_length {
            agent_steps += self.act()?;
            // Envs in worker processes step together: every step begun before any is awaited.
            let elsewhere = self.envs.first().is_some_and(|env| env.steps_elsewhere());
            if elsewhere {
                for (env, actions) in self.envs.iter_mut().zip(&self.actions) {
                    env.begin_step(actions)?;
                }
                for env in &mut self.envs {
                    env.flush_steps()?;
                }
            }
            for e in 0..self.envs.len() {
                if elsewhere {
                    self.envs[e].finish_step(&mut self.obs[e], &mut self.outs[e])?;
                } else {
                    self.envs[e].step(&self.actions[e], &mut self.obs[e], &mut self.outs[e])?;
                }
                self.episode_len[e] += 1;
                self.check_finite(e, "observation")?;
                self.record(e)?;
                if self.outs[e].episode_done() {
                    let stats = EpisodeStats {
                        episode_return: self.episode_return[e],
                        episode_len: self.episode_len[e],
                        truncated: self.outs[e].all_truncated,
                    };
                    episodes.push(stats);
                    policy_returns.push(self.episode_policy_returns[e].clone());
                    if let Some(records) = self.records.as_mut() {
                        let mut agents = std::mem::take(&mut records[e]);
                        agents.retain(AgentRecord::took_part);
                        episode_records.push(EpisodeRecord {
                            runner_id: self.runner_id,
                            env_index: e,
                            agents,
                            stats,
                        });
                    }
                    self.reset_env(e, None)?;
                }
            }
        }
        let batches =
            (0..self.policies.len()).map(|p| self.take_batch(p)).collect::<Result<Vec<_>>>()?;
        Ok(MultiAgentFragment {
            runner_id: self.runner_id,
            batches,
            env_steps: self.envs.len() * self.settings.rollout_fragment_length,
            agent_steps,
            episodes,
            policy_returns,
            episode_records,
        })
    }

    /// Resets env `e` and makes its observed agents' lanes ready to act.
    fn reset_env(&mut self, e: usize, seed: Option<u64>) -> Result<()> {
        self.envs[e].reset(seed, &mut self.obs[e], &mut self.outs[e])?;
        self.episode_len[e] = 0;
        self.check_finite(e, "reset observation")?;
        self.episode_return[e] = 0.0;
        self.episode_policy_returns[e].fill(0.0);
        for a in 0..self.num_agents {
            let lane = &mut self.lanes[e * self.num_agents + a];
            lane.next_obs = self.outs[e].agents[a].observed.then(|| self.obs[e][a].clone());
        }
        if let Some(records) = self.records.as_mut() {
            let spec = self.envs[e].spec();
            records[e] = spec
                .agents
                .iter()
                .enumerate()
                .map(|(a, agent)| {
                    let mut record = AgentRecord::new(a, &agent.observation_space);
                    if self.outs[e].agents[a].observed {
                        record.observe_at(&self.obs[e][a], 0, self.outs[e].info(a));
                    }
                    record
                })
                .collect();
        }
        Ok(())
    }

    /// Fails at env `e`'s first NaN or infinity: an observed agent's `field`, or any agent's
    /// reward.
    fn check_finite(&self, e: usize, field: &'static str) -> Result<()> {
        let out = &self.outs[e];
        let non_finite = |v: f64| !v.is_finite();
        let found = (0..self.num_agents).find_map(|a| {
            let agent = out.agents[a];
            if non_finite(agent.reward) {
                return Some((a, "reward", 0, agent.reward));
            }
            let obs = &self.obs[e][a];
            let check = agent.observed && self.check_obs[a];
            let bad = check.then(|| obs.iter().position(|&v| non_finite(f64::from(v)))).flatten();
            bad.map(|position| (a, field, position, f64::from(obs[position])))
        });
        match found {
            None => Ok(()),
            Some((a, field, position, value)) => {
                let spec = self.envs[e].spec();
                Err(SamplerError::NonFinite {
                    env: spec.id.clone(),
                    index: e,
                    agent: spec.agents[a].id.clone(),
                    field,
                    position,
                    value,
                    episode_step: self.episode_len[e],
                })
            }
        }
    }

    /// Every policy infers for the lanes ready to act; opens their transitions and writes the
    /// actions into the envs' action buffers. Returns the agent steps taken.
    fn act(&mut self) -> Result<usize> {
        let mut acted = 0;
        for p in 0..self.policies.len() {
            let ready: Vec<usize> = (0..self.lanes.len())
                .filter(|&l| self.lanes[l].policy == p && self.lanes[l].next_obs.is_some())
                .collect();
            if ready.is_empty() {
                continue;
            }
            let spec = &self.policy_specs[p];
            let (od, sd) = (spec.observation_space.flat_dim(), self.policies[p].state_dim());
            let (ad, dd) = (spec.action_space.flat_dim(), spec.action_space.dist_inputs_dim());
            let mut obs = Vec::with_capacity(ready.len() * od);
            let mut state = Vec::with_capacity(ready.len() * sd);
            for &l in &ready {
                obs.extend_from_slice(self.lanes[l].next_obs.as_deref().unwrap_or_default());
                state.extend_from_slice(&self.lanes[l].state);
            }
            let input = PolicyInput {
                obs: &obs,
                num_envs: ready.len(),
                state: &state,
                explore: self.settings.explore,
            };
            self.policies[p].compute_actions(&input, &mut self.out)?;
            let n = ready.len();
            for (what, expected, got) in [
                ("actions", n * ad, self.out.actions.len()),
                ("action_dist_inputs", n * dd, self.out.action_dist_inputs.len()),
                ("action_logp", n, self.out.action_logp.len()),
                ("vf_preds", n, self.out.vf_preds.len()),
                ("state_out", n * sd, self.out.state_out.len()),
            ] {
                if expected != got {
                    return Err(SamplerError::PolicyOutput { what, expected, got });
                }
            }
            let version = self.policies[p].weights_version();
            for (k, &l) in ready.iter().enumerate() {
                let (e, a) = (l / self.num_agents, l % self.num_agents);
                let action = &self.out.actions[k * ad..(k + 1) * ad];
                self.actions[e][a].copy_from_slice(action);
                self.env_actions[p].apply(&mut self.actions[e][a]);
                if let Some(records) = self.records.as_mut() {
                    records[e][a].act(action);
                }
                let lane = &mut self.lanes[l];
                if lane.row.is_empty() {
                    lane.row_state.clone_from(&lane.state);
                    lane.row_version = version;
                }
                lane.state.copy_from_slice(&self.out.state_out[k * sd..(k + 1) * sd]);
                lane.open = Some(Step {
                    obs: lane.next_obs.take().unwrap_or_default(),
                    action: action.to_vec(),
                    action_logp: self.out.action_logp[k],
                    dist_inputs: self.out.action_dist_inputs[k * dd..(k + 1) * dd].to_vec(),
                    vf_pred: self.out.vf_preds[k],
                    ..Step::default()
                });
            }
            acted += n;
        }
        Ok(acted)
    }

    /// Takes env `e`'s step into its lanes: rewards, closed transitions, next observations,
    /// truncation values and complete rows.
    fn record(&mut self, e: usize) -> Result<()> {
        let out = &self.outs[e];
        let episode_over = out.episode_done();
        let mut truncated_lanes = Vec::new();
        for a in 0..self.num_agents {
            let l = e * self.num_agents + a;
            let agent = out.agents[a];
            let lane = &mut self.lanes[l];
            self.episode_return[e] += agent.reward;
            self.episode_policy_returns[e][lane.policy] += agent.reward;
            if let Some(record) = self.records.as_mut().map(|records| &mut records[e][a]) {
                if agent.observed {
                    record.observe_at(&self.obs[e][a], self.episode_len[e], out.info(a));
                }
                // Rewards with no action of the agent's open count in the episode's return
                // only, as in its rows.
                if lane.open.is_some() {
                    record.reward(agent.reward);
                }
            }
            let Some(open) = lane.open.as_mut() else { continue };
            open.reward += agent.reward as f32;
            // The agent leaves: by its own flags, or with the episode.
            let terminated = agent.terminated || (episode_over && out.all_terminated);
            let truncated = !terminated && (agent.truncated || episode_over);
            if terminated || truncated {
                open.terminated = terminated;
                open.truncated = truncated;
                if truncated {
                    // Bootstrapped from the final observation when the env gave one, else
                    // from the value the agent last acted on.
                    open.truncation_value = open.vf_pred;
                    if agent.observed {
                        truncated_lanes.push((l, self.obs[e][a].clone()));
                    }
                }
                let step = lane.open.take().unwrap_or_default();
                lane.row.push(step);
                lane.state.fill(0.0);
                lane.next_obs = None;
            } else if agent.observed {
                let step = lane.open.take().unwrap_or_default();
                lane.row.push(step);
                lane.next_obs = Some(self.obs[e][a].clone());
            }
        }
        // Agents observed with no transition open (joining mid-episode, or back after a full
        // row waited for them) act at the next step; after the episode, `reset_env` decides.
        if !episode_over {
            for a in 0..self.num_agents {
                let agent = self.outs[e].agents[a];
                let lane = &mut self.lanes[e * self.num_agents + a];
                if agent.observed && !agent.done() && lane.next_obs.is_none() {
                    lane.next_obs = Some(self.obs[e][a].clone());
                }
            }
        }
        self.truncation_values(&truncated_lanes)?;
        for a in 0..self.num_agents {
            self.complete_row(e * self.num_agents + a);
        }
        Ok(())
    }

    /// The behaviour values of truncated agents' final observations, per policy.
    fn truncation_values(&mut self, truncated: &[(usize, Vec<f32>)]) -> Result<()> {
        for p in 0..self.policies.len() {
            let of_p: Vec<&(usize, Vec<f32>)> =
                truncated.iter().filter(|(l, _)| self.lanes[*l].policy == p).collect();
            if of_p.is_empty() {
                continue;
            }
            let obs: Vec<f32> = of_p.iter().flat_map(|(_, o)| o.iter().copied()).collect();
            // The state the agent acted its last step with is gone (zeroed as it left); a
            // recurrent policy's value restarts from zero state here.
            let state = vec![0.0; of_p.len() * self.policies[p].state_dim()];
            let values = self.policies[p].compute_values(&obs, of_p.len(), &state)?;
            if values.len() != of_p.len() {
                return Err(SamplerError::PolicyOutput {
                    what: "compute_values",
                    expected: of_p.len(),
                    got: values.len(),
                });
            }
            for ((l, _), v) in of_p.into_iter().zip(values) {
                if let Some(last) = self.lanes[*l].row.last_mut() {
                    last.truncation_value = v;
                }
            }
        }
        Ok(())
    }

    /// Moves lane `l`'s row to its policy's complete rows once it is full and its bootstrap
    /// observation is known (or not needed: its last transition ended the agent's episode).
    fn complete_row(&mut self, l: usize) {
        let t = self.settings.rollout_fragment_length;
        let lane = &mut self.lanes[l];
        if lane.row.len() < t {
            return;
        }
        let last_done = lane.row.last().is_some_and(|s| s.terminated || s.truncated);
        let bootstrap_obs = match (&lane.next_obs, last_done) {
            (Some(obs), _) => obs.clone(),
            (None, true) => vec![0.0; lane.row[0].obs.len()],
            (None, false) => return,
        };
        let steps = std::mem::take(&mut lane.row);
        let row = Row {
            steps,
            bootstrap_obs,
            state_in: std::mem::take(&mut lane.row_state),
            weights_version: lane.row_version,
        };
        self.rows[lane.policy].push(row);
    }

    /// Policy `p`'s complete rows as one time-major batch.
    fn take_batch(&mut self, p: usize) -> Result<SampleBatch> {
        let rows = std::mem::take(&mut self.rows[p]);
        let spec = &self.policy_specs[p];
        let t = self.settings.rollout_fragment_length;
        let b = rows.len();
        let sd = self.policies[p].state_dim();
        let mut batch = SampleBatch::zeros(t, b, &spec.observation_space, &spec.action_space, sd);
        let (od, ad, dd) = (batch.obs_dim(), batch.action_dim, batch.dist_inputs_dim);
        for (r, row) in rows.iter().enumerate() {
            for (s, step) in row.steps.iter().enumerate() {
                let i = s * b + r;
                batch.obs.write(i * od, &step.obs);
                batch.actions[i * ad..(i + 1) * ad].copy_from_slice(&step.action);
                batch.action_dist_inputs[i * dd..(i + 1) * dd].copy_from_slice(&step.dist_inputs);
                batch.rewards[i] = step.reward;
                batch.terminateds[i] = step.terminated;
                batch.truncateds[i] = step.truncated;
                batch.action_logp[i] = step.action_logp;
                batch.vf_preds[i] = step.vf_pred;
                batch.truncation_values[i] = step.truncation_value;
            }
            batch.bootstrap_obs.write(r * od, &row.bootstrap_obs);
            batch.state_in[r * sd..(r + 1) * sd].copy_from_slice(&row.state_in);
            batch.weights_version[r] = row.weights_version;
        }
        batch.validate()?;
        Ok(batch)
    }
}
