//! Actor-side inference: what env runners call to pick actions.

use std::sync::Arc;

use crate::{Result, Weights};

/// The inputs of one batched inference call over `num_envs` environments.
#[derive(Debug, Clone, Copy)]
pub struct PolicyInput<'a> {
    /// Observations, `[num_envs, obs_dim]` row-major.
    pub obs: &'a [f32],
    /// How many environments (rows) are in `obs`.
    pub num_envs: usize,
    /// Recurrent state per env, `[num_envs, Policy::state_dim()]`; empty for feed-forward
    /// policies. Runners zero an env's state when its episode starts.
    pub state: &'a [f32],
    /// Whether to act greedily (evaluation with `explore=False`) instead of sampling.
    pub explore: bool,
}

/// What a policy returns for a batch of observations. Buffers are reused across calls.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolicyOutput {
    /// Actions, `[num_envs, action_space.flat_dim()]` (see [`crate::Space`] for the encoding).
    pub actions: Vec<f32>,
    /// Behaviour log-probability of each chosen action, `[num_envs]` (RLlib's `ACTION_LOGP`).
    pub action_logp: Vec<f32>,
    /// Action-distribution inputs (logits, or mean and log-std), `[num_envs, dist_inputs_dim]`
    /// (RLlib's `ACTION_DIST_INPUTS`).
    pub action_dist_inputs: Vec<f32>,
    /// Value predictions, `[num_envs]` (RLlib's `VF_PREDS`).
    pub vf_preds: Vec<f32>,
    /// Recurrent state after this step, `[num_envs, state_dim]`; empty for feed-forward policies.
    pub state_out: Vec<f32>,
}

/// A policy that env runners use for inference. Each runner owns its own copy (no locks on the
/// hot path) and loads newer [`Weights`] between rollout fragments.
pub trait Policy: Send {
    /// Computes actions, log-probs, distribution inputs, values and next state for a batch.
    fn compute_actions(&mut self, input: &PolicyInput<'_>, out: &mut PolicyOutput) -> Result<()>;

    /// Value predictions for observations `[num_envs, obs_dim]` with recurrent `state`
    /// (used to bootstrap truncated episodes from their final observation).
    fn compute_values(&mut self, obs: &[f32], num_envs: usize, state: &[f32]) -> Result<Vec<f32>>;

    /// Size of the recurrent state per env (0 for feed-forward policies).
    fn state_dim(&self) -> usize {
        0
    }

    /// Loads weights published by the learner.
    fn set_weights(&mut self, weights: &Arc<Weights>) -> Result<()>;

    /// The version of the weights this policy currently acts with.
    fn weights_version(&self) -> u64;
}

impl<P: Policy + ?Sized> Policy for Box<P> {
    fn compute_actions(&mut self, input: &PolicyInput<'_>, out: &mut PolicyOutput) -> Result<()> {
        (**self).compute_actions(input, out)
    }
    fn compute_values(&mut self, obs: &[f32], num_envs: usize, state: &[f32]) -> Result<Vec<f32>> {
        (**self).compute_values(obs, num_envs, state)
    }
    fn state_dim(&self) -> usize {
        (**self).state_dim()
    }
    fn set_weights(&mut self, weights: &Arc<Weights>) -> Result<()> {
        (**self).set_weights(weights)
    }
    fn weights_version(&self) -> u64 {
        (**self).weights_version()
    }
}
