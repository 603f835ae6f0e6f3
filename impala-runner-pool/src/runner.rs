//! The runner's side: the slot a runner was given and the env runner it builds for it. Serving
//! it is the sampler's [`serve_on_thread`](impala_sampler::serve_on_thread), its replies going
//! to the transport through a [`ReplySender::forwarding`](impala_sampler::ReplySender::forwarding).

use std::sync::Arc;

use impala_core::{EnvSpec, MultiAgentSpec, Weights};
use impala_sampler::{EnvRunner, MultiAgentEnvRunner, RunnerReply, ServedRunner};

/// The env a run trains, as its runners must build it.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEnv {
    /// One agent: the env's spec.
    Single(EnvSpec),
    /// Several agents (a multi-agent run): the env's spec, and each policy's spec (the spaces
    /// of the agents mapped to it) in the run's policy order.
    Multi {
        /// The env's agents and spaces.
        spec: MultiAgentSpec,
        /// Per policy, its observation and action spaces.
        policies: Vec<EnvSpec>,
    },
}

impl RunEnv {
    /// The env's id.
    pub fn id(&self) -> &str {
        match self {
            RunEnv::Single(spec) => &spec.id,
            RunEnv::Multi { spec, .. } => &spec.id,
        }
    }

    /// The policies its runners act with: 1 for a single-agent run.
    pub fn num_policies(&self) -> usize {
        match self {
            RunEnv::Single(_) => 1,
            RunEnv::Multi { policies, .. } => policies.len(),
        }
    }
}

/// The slot a runner was given: what it builds its env runner from.
#[derive(Debug, Clone)]
pub struct Assignment {
    /// The runner id (1-based) it serves.
    pub runner_id: usize,
    /// Which incarnation of that runner (bumped on every restart).
    pub incarnation: u64,
    /// The driver's env; the built runner's envs must match it.
    pub env: RunEnv,
    /// The driver's session data ([`RunSession::session`](crate::RunSession::session)).
    pub session: Vec<u8>,
}

/// The env runner a runner built for its slot: a single-agent one, or a multi-agent one for a
/// multi-agent run.
#[derive(Debug)]
pub enum BuiltRunner {
    /// Steps a single-agent env.
    Single(Box<EnvRunner>),
    /// Steps a multi-agent env, a policy per agent group.
    Multi(Box<MultiAgentEnvRunner>),
}

impl ServedRunner for BuiltRunner {
    fn set_weights(&mut self, policy: usize, weights: &Arc<Weights>) -> impala_sampler::Result<()> {
        match self {
            BuiltRunner::Single(runner) => {
                ServedRunner::set_weights(runner.as_mut(), policy, weights)
            }
            BuiltRunner::Multi(runner) => {
                ServedRunner::set_weights(runner.as_mut(), policy, weights)
            }
        }
    }

    fn sample_reply(&mut self) -> impala_sampler::Result<RunnerReply> {
        match self {
            BuiltRunner::Single(runner) => runner.sample_reply(),
            BuiltRunner::Multi(runner) => runner.sample_reply(),
        }
    }
}

/// Builds the env runner for a slot, acting with the driver's weights (one per policy, in
/// policy order) from its first step:
/// `Arc<dyn Fn(&Assignment, Vec<Arc<Weights>>) -> Result<BuiltRunner, String> + Send + Sync>`.
/// An error is final: the runner rejects the run.
pub type BuildRunner =
    Arc<dyn Fn(&Assignment, Vec<Arc<Weights>>) -> Result<BuiltRunner, String> + Send + Sync>;

impl Assignment {
    /// Builds this slot's env runner with `build`, acting with `weights` (one per policy), and
    /// checks that its env is the driver's. An error says why the runner cannot serve the run.
    pub fn build(
        &self,
        build: &BuildRunner,
        weights: Vec<Arc<Weights>>,
    ) -> Result<BuiltRunner, String> {
        let runner = build(self, weights)?;
        let difference = match (&self.env, &runner) {
            (RunEnv::Single(driver), BuiltRunner::Single(built)) => {
                spec_difference(driver, built.spec())
            }
            (RunEnv::Multi { spec, .. }, BuiltRunner::Multi(built)) => {
                multi_agent_difference(spec, built.spec())
            }
            (RunEnv::Single(_), BuiltRunner::Multi(_)) => Some(format!(
                "the driver trains `{}` with one agent, the runner built a multi-agent env",
                self.env.id()
            )),
            (RunEnv::Multi { .. }, BuiltRunner::Single(_)) => Some(format!(
                "the driver trains `{}` with several agents, the runner built a single-agent env",
                self.env.id()
            )),
        };
        match difference {
            Some(difference) => Err(difference),
            None => Ok(runner),
        }
    }
}

/// Why two multi-agent specs differ, in words; `None` when they agree.
fn multi_agent_difference(driver: &MultiAgentSpec, runner: &MultiAgentSpec) -> Option<String> {
    if driver.id != runner.id {
        return Some(format!(
            "the driver trains `{}`, the runner built `{}`",
            driver.id, runner.id
        ));
    }
    let ids = |spec: &MultiAgentSpec| spec.agents.iter().map(|a| a.id.clone()).collect::<Vec<_>>();
    if ids(driver) != ids(runner) {
        return Some(format!(
            "agents differ: the driver's {:?} vs the runner's {:?}",
            ids(driver),
            ids(runner)
        ));
    }
    for (d, r) in driver.agents.iter().zip(&runner.agents) {
        if d != r {
            return Some(format!(
                "agent `{}`'s spaces differ: the driver's {} -> {} vs the runner's {} -> {}",
                d.id, d.observation_space, d.action_space, r.observation_space, r.action_space
            ));
        }
    }
    if driver.max_episode_steps != runner.max_episode_steps {
        return Some(format!(
            "time limits differ: the driver's {:?} vs the runner's {:?} steps",
            driver.max_episode_steps, runner.max_episode_steps
        ));
    }
    None
}

/// Why two specs differ, in words; `None` when they agree.
fn spec_difference(driver: &EnvSpec, runner: &EnvSpec) -> Option<String> {
    if driver.id != runner.id {
        return Some(format!(
            "the driver trains `{}`, the runner built `{}`",
            driver.id, runner.id
        ));
    }
    if driver.observation_space != runner.observation_space {
        return Some(format!(
            "observation spaces differ: the driver's {} vs the runner's {}",
            driver.observation_space, runner.observation_space
        ));
    }
    if driver.action_space != runner.action_space {
        return Some(format!(
            "action spaces differ: the driver's {} vs the runner's {}",
            driver.action_space, runner.action_space
        ));
    }
    if driver.max_episode_steps != runner.max_episode_steps {
        return Some(format!(
            "time limits differ: the driver's {:?} vs the runner's {:?} steps",
            driver.max_episode_steps, runner.max_episode_steps
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use impala_core::Space;

    #[test]
    fn specs_that_differ_say_how() -> Result<(), impala_core::CoreError> {
        let s = EnvSpec {
            id: "X".into(),
            observation_space: Space::boxed(vec![-1.0; 4], vec![1.0; 4], vec![2, 2])?,
            action_space: Space::MultiDiscrete(vec![2, 3]),
            max_episode_steps: None,
        };
        let mut other = s.clone();
        other.action_space = Space::Discrete(6);
        assert!(spec_difference(&s, &other).is_some_and(|d| d.contains("action spaces differ")));
        assert_eq!(spec_difference(&s, &s), None);
        Ok(())
    }
}
