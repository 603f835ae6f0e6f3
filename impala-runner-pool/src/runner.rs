//! The runner's side: the slot a runner was given and the env runner it builds for it. Serving
//! it is the sampler's [`serve_on_thread`](impala_sampler::serve_on_thread), its replies going
//! to the transport through a [`ReplySender::forwarding`](impala_sampler::ReplySender::forwarding).

use std::sync::Arc;

use impala_core::{EnvSpec, Weights};
use impala_sampler::EnvRunner;

/// The slot a runner was given: what it builds its env runner from.
#[derive(Debug, Clone)]
pub struct Assignment {
    /// The runner id (1-based) it serves.
    pub runner_id: usize,
    /// Which incarnation of that runner (bumped on every restart).
    pub incarnation: u64,
    /// The driver's env spec; the built runner's envs must match it.
    pub spec: EnvSpec,
    /// The driver's session data ([`RunSession::session`](crate::RunSession::session)).
    pub session: Vec<u8>,
}

/// Builds the env runner for a slot, acting with the driver's weights from its first step:
/// `Arc<dyn Fn(&Assignment, Arc<Weights>) -> Result<EnvRunner, String> + Send + Sync>`. An
/// error is final: the runner rejects the run.
pub type BuildRunner =
    Arc<dyn Fn(&Assignment, Arc<Weights>) -> Result<EnvRunner, String> + Send + Sync>;

impl Assignment {
    /// Builds this slot's env runner with `build`, acting with `weights`, and checks that its
    /// env is the driver's. An error says why the runner cannot serve the run.
    pub fn build(&self, build: &BuildRunner, weights: Arc<Weights>) -> Result<EnvRunner, String> {
        let runner = build(self, weights)?;
        match spec_difference(&self.spec, runner.spec()) {
            Some(difference) => Err(difference),
            None => Ok(runner),
        }
    }
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
