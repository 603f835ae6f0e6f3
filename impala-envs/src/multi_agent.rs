//! Native multi-agent environments ([`MultiAgentEnv`]): RLlib's `MultiAgentCartPole` and a
//! two-agent coordination game.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use impala_core::{
    AgentSpec, CoreError, Env, MultiAgentEnv, MultiAgentSpec, MultiAgentStep, Result, Space,
};

use crate::{CartPole, CartPoleConfig, EnvConfig, EnvError};

/// RLlib's `MultiAgentCartPole` (`make_multi_agent("CartPole-v1")`): one CartPole-v1 game per
/// agent (`agent_0`, `agent_1`, ...), stepped side by side. An agent leaves the episode when its
/// pole falls (terminated) or its game reaches 500 steps (truncated); the episode ends when
/// every agent has left. Agent `i`'s game is seeded with `seed + i`.
///
/// ```
/// use impala_core::{MultiAgentEnv, MultiAgentStep};
/// use impala_envs::MultiAgentCartPole;
///
/// let mut env = MultiAgentCartPole::new(2)?;
/// let (mut obs, mut actions) = (env.spec().observation_buffers(), env.spec().action_buffers());
/// let mut out = MultiAgentStep::new(2);
/// env.reset(Some(0), &mut obs, &mut out)?;
/// assert_eq!(out.acting().count(), 2);
/// let mut steps = 0;
/// while !out.episode_done() {
///     actions[0][0] = 1.0; // agent_0 always pushes right: its pole soon falls
///     actions[1][0] = (steps % 2) as f32; // agent_1 alternates and lasts longer
///     env.step(&actions, &mut obs, &mut out)?;
///     steps += 1;
/// }
/// assert!(steps > 12);
/// # Ok::<(), impala_core::CoreError>(())
/// ```
#[derive(Debug, Clone)]
pub struct MultiAgentCartPole {
    spec: MultiAgentSpec,
    games: Vec<CartPole>,
    /// Steps of each agent's game in this episode.
    steps: Vec<usize>,
    /// Whether each agent is still in the episode.
    active: Vec<bool>,
}

impl MultiAgentCartPole {
    /// The env's id.
    pub const ID: &'static str = "MultiAgentCartPole";
    /// CartPole-v1's time limit.
    const MAX_STEPS: usize = 500;

    /// `num_agents` (1 or more) CartPole games, one per agent.
    pub fn new(num_agents: usize) -> Result<Self> {
        let games: Vec<CartPole> =
            (0..num_agents).map(|_| CartPole::new(CartPoleConfig::default())).collect();
        let agents = games
            .iter()
            .enumerate()
            .map(|(i, game)| AgentSpec {
                id: format!("agent_{i}"),
                observation_space: game.spec().observation_space.clone(),
                action_space: game.spec().action_space.clone(),
            })
            .collect();
        Ok(MultiAgentCartPole {
            spec: MultiAgentSpec::new(Self::ID, agents, Some(Self::MAX_STEPS))?,
            games,
            steps: vec![0; num_agents],
            active: vec![false; num_agents],
        })
    }
}

impl MultiAgentEnv for MultiAgentCartPole {
    fn spec(&self) -> &MultiAgentSpec {
        &self.spec
    }

    fn reset(
        &mut self,
        seed: Option<u64>,
        obs: &mut [Vec<f32>],
        out: &mut MultiAgentStep,
    ) -> Result<()> {
        out.clear();
        for (i, game) in self.games.iter_mut().enumerate() {
            game.reset(seed.map(|s| s.wrapping_add(i as u64)), &mut obs[i])?;
            out.agents[i].observed = true;
        }
        self.steps.fill(0);
        self.active.fill(true);
        Ok(())
    }

    fn step(
        &mut self,
        actions: &[Vec<f32>],
        obs: &mut [Vec<f32>],
        out: &mut MultiAgentStep,
    ) -> Result<()> {
        if !self.active.iter().any(|&a| a) {
            return Err(CoreError::NeedsReset { env: Self::ID.into() });
        }
        out.clear();
        for (i, game) in self.games.iter_mut().enumerate() {
            if !self.active[i] {
                continue;
            }
            let outcome = game.step(&actions[i], &mut obs[i])?;
            self.steps[i] += 1;
            let truncated = !outcome.terminated && self.steps[i] >= Self::MAX_STEPS;
            out.agents[i] = impala_core::AgentStep {
                observed: true,
                reward: outcome.reward,
                terminated: outcome.terminated,
                truncated,
            };
            self.active[i] = !(outcome.terminated || truncated);
        }
        if !self.active.iter().any(|&a| a) {
            // Every agent left: terminated for all unless one of them was cut short.
            let truncated = out.agents.iter().any(|a| a.truncated);
            out.all_truncated = truncated;
            out.all_terminated = !truncated;
        }
        Ok(())
    }
}

/// A two-agent coordination game: each of `left` and `right` sees one random bit of the state
/// (a `Discrete(2)` observation) and both get +1 when the parity of their two actions equals the
/// parity of the two bits. Alone an agent scores 0.5 a step at best; together they score 1 by
/// sharing a convention (both play their bit, or both flip it), which each learns only from the
/// reward the other's choices produce. Episodes last 10 steps (return 10 at the optimum, 5 by
/// chance).
///
/// ```
/// use impala_core::{MultiAgentEnv, MultiAgentStep};
/// use impala_envs::HalfObserved;
///
/// let mut env = HalfObserved::new();
/// let (mut obs, mut actions) = (env.spec().observation_buffers(), env.spec().action_buffers());
/// let mut out = MultiAgentStep::new(2);
/// env.reset(Some(3), &mut obs, &mut out)?;
/// let mut total = 0.0;
/// while !out.episode_done() {
///     // Both agents play the bit they see: the convention that always pays.
///     actions[0][0] = obs[0][0];
///     actions[1][0] = obs[1][0];
///     env.step(&actions, &mut obs, &mut out)?;
///     total += out.agents[0].reward;
/// }
/// assert_eq!(total, 10.0);
/// # Ok::<(), impala_core::CoreError>(())
/// ```
#[derive(Debug, Clone)]
pub struct HalfObserved {
    spec: MultiAgentSpec,
    bits: [u8; 2],
    rounds: Rounds,
}

impl Default for HalfObserved {
    fn default() -> Self {
        Self::new()
    }
}

impl HalfObserved {
    /// The env's id.
    pub const ID: &'static str = "HalfObserved";
    /// Steps per episode.
    pub const LENGTH: usize = 10;

    /// A game that must be reset before its first step.
    pub fn new() -> Self {
        let agent = |id: &str| AgentSpec {
            id: id.into(),
            observation_space: Space::Discrete(2),
            action_space: Space::Discrete(2),
        };
        let spec = MultiAgentSpec {
            id: Self::ID.into(),
            agents: vec![agent("left"), agent("right")],
            max_episode_steps: Some(Self::LENGTH),
        };
        HalfObserved { spec, bits: [0, 0], rounds: Rounds::new(Self::LENGTH) }
    }

    fn draw(&mut self, obs: &mut [Vec<f32>], out: &mut MultiAgentStep) {
        for (i, bit) in self.bits.iter_mut().enumerate() {
            *bit = self.rounds.rng.random_range(0..2);
            obs[i][0] = f32::from(*bit);
            out.agents[i].observed = true;
        }
    }
}

impl MultiAgentEnv for HalfObserved {
    fn spec(&self) -> &MultiAgentSpec {
        &self.spec
    }

    fn reset(
        &mut self,
        seed: Option<u64>,
        obs: &mut [Vec<f32>],
        out: &mut MultiAgentStep,
    ) -> Result<()> {
        out.clear();
        self.rounds.reset(seed);
        self.draw(obs, out);
        Ok(())
    }

    fn step(
        &mut self,
        actions: &[Vec<f32>],
        obs: &mut [Vec<f32>],
        out: &mut MultiAgentStep,
    ) -> Result<()> {
        self.rounds.check(Self::ID)?;
        let parity =
            binary_action(&self.spec, actions, 0)? ^ binary_action(&self.spec, actions, 1)?;
        let reward = if parity == self.bits[0] ^ self.bits[1] { 1.0 } else { 0.0 };
        out.clear();
        self.draw(obs, out);
        for agent in &mut out.agents {
            agent.reward = reward;
        }
        self.rounds.count(out);
        Ok(())
    }
}

/// Agent `i`'s action from `actions`, where its action space is `Discrete(2)`.
fn binary_action(spec: &MultiAgentSpec, actions: &[Vec<f32>], i: usize) -> Result<u8> {
    match actions[i].first() {
        Some(&a) if a == 0.0 || a == 1.0 => Ok(a as u8),
        other => Err(CoreError::InvalidAction {
            action: other.map(|&a| vec![a]).unwrap_or_default(),
            space: format!("Discrete(2) of agent `{}`", spec.agents[i].id),
            reason: "expected 0 or 1".into(),
        }),
    }
}

/// The clock and dice of a game of a fixed number of steps that ends (terminates) for every
/// agent at once, as [`HalfObserved`] and [`SignalingGame`] are.
#[derive(Debug, Clone)]
struct Rounds {
    length: usize,
    step: usize,
    rng: SmallRng,
    needs_reset: bool,
}

impl Rounds {
    /// A clock of `length` steps that must be reset before the first.
    fn new(length: usize) -> Self {
        Rounds { length, step: 0, rng: SmallRng::from_os_rng(), needs_reset: true }
    }

    /// Starts an episode, reseeding the dice when `seed` is given.
    fn reset(&mut self, seed: Option<u64>) {
        if let Some(seed) = seed {
            self.rng = SmallRng::seed_from_u64(seed);
        }
        self.step = 0;
        self.needs_reset = false;
    }

    /// Refuses a step of env `env` after its episode ended.
    fn check(&self, env: &str) -> Result<()> {
        if self.needs_reset {
            return Err(CoreError::NeedsReset { env: env.into() });
        }
        Ok(())
    }

    /// Counts a step; after the last, every agent and the episode terminate in `out`.
    fn count(&mut self, out: &mut MultiAgentStep) {
        self.step += 1;
        let over = self.step >= self.length;
        for agent in &mut out.agents {
            agent.terminated = over;
        }
        out.all_terminated = over;
        self.needs_reset = over;
    }
}

/// What [`SignalingGame`] pays its agents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalingReward {
    /// Both agents get +1 for each round the listener names the bit the speaker saw.
    Signal,
    /// Each agent gets an independent fair coin (0 or 1) every step, whatever anyone does: a
    /// game with nothing to learn, where a policy with an entropy bonus must stay near uniform.
    Coin,
}

/// A Lewis signalling game between two agents with different observation spaces. At each of
/// 10 steps the `speaker` sees a random bit (`Discrete(2)`) and emits a symbol (`Discrete(2)`);
/// the `listener` sees only the symbol the speaker emitted the step before (`Discrete(3)`: 0
/// before the first symbol, then `1 + symbol`) and names a bit (`Discrete(2)`). With
/// [`SignalingReward::Signal`] both get +1 when the listener names the bit behind the symbol it
/// sees: 9 rounds an episode, 9 at the optimum, 4.5 at random. Neither can score alone: the
/// speaker's symbols mean something only once the listener reads them, and the other way round,
/// so two independent learners must settle on a convention from each other's noise.
///
/// ```
/// use impala_core::{MultiAgentEnv, MultiAgentStep};
/// use impala_envs::{SignalingGame, SignalingReward};
///
/// let mut env = SignalingGame::new(SignalingReward::Signal);
/// let (mut obs, mut actions) = (env.spec().observation_buffers(), env.spec().action_buffers());
/// let mut out = MultiAgentStep::new(2);
/// env.reset(Some(3), &mut obs, &mut out)?;
/// let mut total = 0.0;
/// while !out.episode_done() {
///     actions[0][0] = obs[0][0]; // the speaker emits the bit it sees
///     actions[1][0] = (obs[1][0] - 1.0).max(0.0); // the listener repeats the symbol
///     env.step(&actions, &mut obs, &mut out)?;
///     total += out.agents[1].reward;
/// }
/// assert_eq!(total, 9.0);
/// # Ok::<(), impala_core::CoreError>(())
/// ```
#[derive(Debug, Clone)]
pub struct SignalingGame {
    spec: MultiAgentSpec,
    reward: SignalingReward,
    /// The bit the speaker sees now.
    bit: u8,
    /// The bit behind the symbol the listener sees now, once there is one.
    signalled_bit: Option<u8>,
    rounds: Rounds,
}

impl SignalingGame {
    /// The env's id.
    pub const ID: &'static str = "SignalingGame";
    /// Steps per episode.
    pub const LENGTH: usize = 10;

    /// A game paying `reward`, which must be reset before its first step.
    pub fn new(reward: SignalingReward) -> Self {
        let agent = |id: &str, observations| AgentSpec {
            id: id.into(),
            observation_space: Space::Discrete(observations),
            action_space: Space::Discrete(2),
        };
        SignalingGame {
            spec: MultiAgentSpec {
                id: Self::ID.into(),
                agents: vec![agent("speaker", 2), agent("listener", 3)],
                max_episode_steps: Some(Self::LENGTH),
            },
            reward,
            bit: 0,
            signalled_bit: None,
            rounds: Rounds::new(Self::LENGTH),
        }
    }

    /// Draws the speaker's next bit and writes both observations (`symbol` is what the
    /// listener sees: `None` before the first).
    fn observe(&mut self, symbol: Option<u8>, obs: &mut [Vec<f32>], out: &mut MultiAgentStep) {
        self.bit = self.rounds.rng.random_range(0..2);
        obs[0][0] = f32::from(self.bit);
        obs[1][0] = symbol.map_or(0.0, |s| f32::from(1 + s));
        out.agents[0].observed = true;
        out.agents[1].observed = true;
    }
}

impl MultiAgentEnv for SignalingGame {
    fn spec(&self) -> &MultiAgentSpec {
        &self.spec
    }

    fn reset(
        &mut self,
        seed: Option<u64>,
        obs: &mut [Vec<f32>],
        out: &mut MultiAgentStep,
    ) -> Result<()> {
        out.clear();
        self.rounds.reset(seed);
        self.signalled_bit = None;
        self.observe(None, obs, out);
        Ok(())
    }

    fn step(
        &mut self,
        actions: &[Vec<f32>],
        obs: &mut [Vec<f32>],
        out: &mut MultiAgentStep,
    ) -> Result<()> {
        self.rounds.check(Self::ID)?;
        let (symbol, guess) =
            (binary_action(&self.spec, actions, 0)?, binary_action(&self.spec, actions, 1)?);
        out.clear();
        match self.reward {
            SignalingReward::Signal => {
                let right = self.signalled_bit == Some(guess);
                for agent in &mut out.agents {
                    agent.reward = if right { 1.0 } else { 0.0 };
                }
            }
            SignalingReward::Coin => {
                for agent in &mut out.agents {
                    agent.reward = f64::from(self.rounds.rng.random_range(0..2u8));
                }
            }
        }
        self.signalled_bit = Some(self.bit);
        self.observe(Some(symbol), obs, out);
        self.rounds.count(out);
        Ok(())
    }
}

/// The native multi-agent envs, by id: what [`make_multi_agent`] builds.
pub const MULTI_AGENT_ENVS: [&str; 3] =
    [MultiAgentCartPole::ID, HalfObserved::ID, SignalingGame::ID];

/// Whether `id` names a native multi-agent env.
pub fn is_multi_agent(id: &str) -> bool {
    MULTI_AGENT_ENVS.contains(&id)
}

/// Builds the native multi-agent env `id` with `env_config` (`MultiAgentCartPole` takes
/// `num_agents`, 2 by default; `SignalingGame` takes `reward`, `"signal"` by default or
/// `"coin"`; `HalfObserved` takes nothing).
///
/// ```
/// use impala_envs::{make_multi_agent, EnvConfig};
/// let mut config = EnvConfig::new();
/// config.insert("num_agents".into(), 3.into());
/// let env = make_multi_agent("MultiAgentCartPole", &config)?;
/// assert_eq!(env.spec().num_agents(), 3);
/// assert!(make_multi_agent("HalfObserved", &config).is_err()); // it takes no num_agents
/// # Ok::<(), impala_envs::EnvError>(())
/// ```
pub fn make_multi_agent(id: &str, env_config: &EnvConfig) -> crate::Result<Box<dyn MultiAgentEnv>> {
    let accepted: &[&str] = match id {
        MultiAgentCartPole::ID => &["num_agents"],
        HalfObserved::ID => &[],
        SignalingGame::ID => &["reward"],
        _ => {
            return Err(EnvError::UnknownEnv {
                id: id.to_string(),
                suggestion: impala_core::suggest::nearest(id, MULTI_AGENT_ENVS).map(String::from),
                known: MULTI_AGENT_ENVS.iter().map(|s| s.to_string()).collect(),
            })
        }
    };
    if let Some(key) = env_config.keys().find(|k| !accepted.contains(&k.as_str())) {
        return Err(EnvError::UnknownConfigKey {
            env: id.to_string(),
            key: key.clone(),
            suggestion: impala_core::suggest::nearest(key, accepted.iter().copied())
                .map(String::from),
            accepted: accepted.iter().map(|s| s.to_string()).collect(),
        });
    }
    if id == HalfObserved::ID {
        return Ok(Box::new(HalfObserved::new()));
    }
    if id == SignalingGame::ID {
        let reward = match env_config.get("reward") {
            None => SignalingReward::Signal,
            Some(v) => match v.as_str() {
                Some("signal") => SignalingReward::Signal,
                Some("coin") => SignalingReward::Coin,
                _ => {
                    return Err(EnvError::InvalidConfigValue {
                        env: id.to_string(),
                        key: "reward".into(),
                        expected: "\"signal\" or \"coin\"".into(),
                        got: v.to_string(),
                    })
                }
            },
        };
        return Ok(Box::new(SignalingGame::new(reward)));
    }
    let num_agents = match env_config.get("num_agents") {
        None => 2,
        Some(v) => match v.as_u64() {
            Some(n) if n >= 1 => n as usize,
            _ => {
                return Err(EnvError::InvalidConfigValue {
                    env: id.to_string(),
                    key: "num_agents".into(),
                    expected: "an integer of at least 1".into(),
                    got: v.to_string(),
                })
            }
        },
    };
    Ok(Box::new(MultiAgentCartPole::new(num_agents)?))
}
