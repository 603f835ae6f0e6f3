//! [`GymMultiAgentEnv`]: a Python multi-agent env (PettingZoo's parallel or AEC API, or RLlib's
//! `MultiAgentEnv`) in an env worker process, each of its agents a shared-memory slot (see
//! `python/impala_gym_worker.py`), as an [`impala_core::MultiAgentEnv`].

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use impala_core::{CoreError, MultiAgentEnv, MultiAgentSpec, MultiAgentStep};

use crate::worker::{EnvWorker, Reply};
use crate::{GymError, Result};

/// One Python multi-agent env hosted by an env worker process.
#[derive(Debug)]
pub struct GymMultiAgentEnv {
    worker: Arc<Mutex<EnvWorker>>,
    /// The env's first slot in the worker (its agent `i` is `base + i`).
    base: usize,
    spec: MultiAgentSpec,
    /// The agents that act at the next step (observed and not done).
    acting: Vec<bool>,
    /// A step was begun and its replies not yet taken.
    stepping: bool,
}

impl GymMultiAgentEnv {
    pub(crate) fn new(worker: Arc<Mutex<EnvWorker>>, index: usize, env: &str) -> Result<Self> {
        let spec = worker.lock().unwrap_or_else(PoisonError::into_inner).agents().cloned();
        let spec = spec.ok_or_else(|| GymError::WrongKind {
            env: env.to_string(),
            found: "a single-agent env",
            fix: "train it as one (`Impala`, which `impala train` picks for it)",
        })?;
        let k = spec.num_agents();
        Ok(GymMultiAgentEnv {
            worker,
            base: index * k,
            acting: vec![false; k],
            spec,
            stepping: false,
        })
    }

    /// The process id of the worker hosting this env.
    pub fn worker_pid(&self) -> u32 {
        self.worker().pid()
    }

    fn worker(&self) -> MutexGuard<'_, EnvWorker> {
        self.worker.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the replies of every agent slot into `obs` and `out`.
    fn collect(
        &mut self,
        what: &'static str,
        obs: &mut [Vec<f32>],
        out: &mut MultiAgentStep,
    ) -> Result<()> {
        out.clear();
        let mut worker = self.worker.lock().unwrap_or_else(PoisonError::into_inner);
        let mut failure = None;
        for (i, agent_obs) in obs.iter_mut().enumerate() {
            let slot = self.base + i;
            match worker.wait(slot, what)? {
                Reply::Ok {
                    reward,
                    terminated,
                    truncated,
                    observed,
                    all_terminated,
                    all_truncated,
                    infos,
                    ..
                } => {
                    if observed {
                        worker.read_obs(slot, agent_obs);
                    }
                    if !infos.info.is_empty() {
                        out.set_info(i, infos.info);
                    }
                    let agent = &mut out.agents[i];
                    (agent.observed, agent.reward) = (observed, reward);
                    (agent.terminated, agent.truncated) = (terminated, truncated);
                    out.all_terminated |= all_terminated;
                    out.all_truncated |= all_truncated;
                }
                Reply::Failed { message, .. } => failure = Some(message),
            }
        }
        drop(worker);
        if let Some(message) = failure {
            return Err(GymError::EnvFailed { env: self.spec.id.clone(), message });
        }
        for (acting, agent) in self.acting.iter_mut().zip(&out.agents) {
            *acting = agent.observed && !agent.done();
        }
        Ok(())
    }
}

impl MultiAgentEnv for GymMultiAgentEnv {
    fn spec(&self) -> &MultiAgentSpec {
        &self.spec
    }

    fn reset(
        &mut self,
        seed: Option<u64>,
        obs: &mut [Vec<f32>],
        out: &mut MultiAgentStep,
    ) -> impala_core::Result<()> {
        if std::mem::take(&mut self.stepping) {
            // A step begun before an error elsewhere: its replies are stale.
            self.collect("finish a step", obs, out)?;
        }
        let base = self.base;
        self.worker().reset(base, seed)?;
        Ok(self.collect("reset", obs, out)?)
    }

    fn step(
        &mut self,
        actions: &[Vec<f32>],
        obs: &mut [Vec<f32>],
        out: &mut MultiAgentStep,
    ) -> impala_core::Result<()> {
        self.begin_step(actions)?;
        self.finish_step(obs, out)
    }

    fn steps_elsewhere(&self) -> bool {
        true
    }

    fn begin_step(&mut self, actions: &[Vec<f32>]) -> impala_core::Result<()> {
        if !self.acting.iter().any(|&a| a) {
            return Err(CoreError::Env {
                env: self.spec.id.clone(),
                reason: "step with no agent to act: the last reset or step observed none that \
                         is still in the episode"
                    .into(),
            });
        }
        let mut worker = self.worker.lock().unwrap_or_else(PoisonError::into_inner);
        for (i, agent) in self.spec.agents.iter().enumerate().filter(|(i, _)| self.acting[*i]) {
            agent.action_space.check_action(&actions[i])?;
            worker.begin_step(self.base + i, &actions[i])?;
        }
        drop(worker);
        self.stepping = true;
        Ok(())
    }

    fn flush_steps(&mut self) -> impala_core::Result<()> {
        Ok(self.worker().flush_steps()?)
    }

    fn finish_step(
        &mut self,
        obs: &mut [Vec<f32>],
        out: &mut MultiAgentStep,
    ) -> impala_core::Result<()> {
        if !std::mem::take(&mut self.stepping) {
            return Err(CoreError::Env {
                env: self.spec.id.clone(),
                reason: "finish_step without a step begun by begin_step".into(),
            });
        }
        Ok(self.collect("step", obs, out)?)
    }
}
