//! The env runners of a run, whatever its env: one [`EnvRunnerGroup`] delivering a batch per
//! policy ([`PolicyFragment`], RLlib's `MultiAgentBatch`; a single-agent run's has one), with
//! runner threads here (or the calling thread), for sampling or for evaluation.

use std::sync::Arc;

use impala_core::Weights;
use impala_sampler::{EnvRunnerGroupSettings, MultiAgentFragment, MultiAgentSettings};

use crate::policies::{acting_policies, PolicySource};
use crate::run_envs::RunEnvs;
use crate::Result;

/// What a run's runners deliver: per policy, the rows sampled.
pub type PolicyFragment = MultiAgentFragment;

/// The env runner group of a run.
pub type EnvRunnerGroup = impala_sampler::EnvRunnerGroup<PolicyFragment>;

/// Runner threads of `settings` on `envs` (the evaluation envs with `evaluation`), their
/// policies built from `sources` and acting with `weights` (one per policy) from their first
/// step, each runner incarnation sampling actions from its own stream of `sample_seed`.
pub(crate) fn local_runners(
    envs: &RunEnvs,
    evaluation: bool,
    settings: &EnvRunnerGroupSettings,
    sources: &[PolicySource],
    weights: Vec<Arc<Weights>>,
    sample_seed: u64,
) -> Result<EnvRunnerGroup> {
    match envs {
        RunEnvs::Single(single) => {
            let (Some(source), Some(first)) = (sources.first(), weights.first()) else {
                return Err(crate::ImpalaError::Stopped);
            };
            let factory = if evaluation { &single.evaluation } else { &single.sampling };
            let policies = source.with_weights(Arc::clone(first), sample_seed);
            let mut group =
                EnvRunnerGroup::with_context_policies(settings, Arc::clone(factory), policies)?;
            group.set_latest_weights(0, Arc::clone(first));
            Ok(group)
        }
        RunEnvs::Multi(multi) => {
            let runner = MultiAgentSettings {
                policy_of_agent: multi.map.policy_of_agent.clone(),
                rollout_fragment_length: settings.runner.rollout_fragment_length.get(),
                seed: settings.runner.seed,
                explore: settings.runner.explore,
                normalize_actions: settings.runner.normalize_actions,
                record_episodes: settings.runner.record_episodes,
            };
            let policies = acting_policies(sources.to_vec(), sample_seed);
            Ok(EnvRunnerGroup::multi_agent(
                settings,
                Arc::clone(&multi.factory),
                runner,
                policies,
                weights,
            )?)
        }
    }
}
