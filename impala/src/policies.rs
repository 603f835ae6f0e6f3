//! A run's policies: each one's model, config, learner (on the learner thread while it trains),
//! batching stage and statistics ([`PolicySlot`]); the CPU policies runners act with; the seeds
//! of the run's random streams. A single-agent run has one policy, `default_policy`.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::Arc;

use impala_config::ValidatedConfig;
use impala_core::{CoreError, EnvSpec, Policy, SampleBatch, Weights};
use impala_learner::{
    learner_devices, Learner, LearnerHandle, LearnerStats, ModelFactory, TorchPolicy,
};
use impala_sampler::{EnvContext, MultiAgentPolicyFactory, TrainBatchBuilder};

use crate::settings;
use crate::{EpisodeWindow, ImpalaError, Result};

/// A policy's learner: on the learner thread while it trains, held here when it does not (a
/// policy not to train, a learner between two threads, or the last good state of a learner
/// whose thread died).
pub(crate) enum PolicyLearner {
    Training(LearnerHandle),
    Held(Learner),
    /// Lost to a panic of its thread, or after `stop()`.
    Gone,
}

/// One policy of a run.
pub(crate) struct PolicySlot {
    pub(crate) id: String,
    /// The config it learns with (the run's, with its `policy_config` entries).
    pub(crate) config: ValidatedConfig,
    /// Its model and the spaces of its agents.
    pub(crate) source: PolicySource,
    /// The TorchScript module its model is, if one (read when the run started; checkpoints
    /// and remote env runners get its bytes).
    pub(crate) script: Option<crate::torchscript::SharedModule>,
    /// Whether it is one of `policies_to_train`.
    pub(crate) trains: bool,
    pub(crate) learner: PolicyLearner,
    /// Mix-in replay and concatenation into train batches (trained policies only; none with
    /// `_env_runners_only`).
    pub(crate) batching: Option<TrainBatchBuilder>,
    /// RLlib's `batches_to_place_on_learner`: train batches its learner queue had no room for,
    /// oldest first; retried every step, never dropped.
    pub(crate) to_place: VecDeque<SampleBatch>,
    /// This iteration's learner stats so far.
    pub(crate) stats: StatsMean,
    /// The learner stats of the last iteration that trained.
    pub(crate) last_stats: BTreeMap<String, f64>,
    pub(crate) agent_steps_trained: u64,
    pub(crate) num_grad_updates: u64,
    /// Its agents' summed rewards per episode (`policy_reward_mean`).
    pub(crate) episodes: EpisodeWindow,
}

impl PolicySlot {
    /// Its learner's current weights (the last good ones of a learner whose thread died).
    pub(crate) fn weights(&self) -> Result<Arc<Weights>> {
        Ok(match &self.learner {
            PolicyLearner::Training(handle) => handle.current_weights()?,
            PolicyLearner::Held(learner) => learner.weights()?,
            PolicyLearner::Gone => return Err(ImpalaError::Stopped),
        })
    }

    /// Saves its learner's weights and optimizer state into `dir`.
    pub(crate) fn save(&self, dir: &Path) -> Result<()> {
        let cause = |e| ImpalaError::LearnerCheckpoint { path: dir.to_path_buf(), cause: e };
        match &self.learner {
            PolicyLearner::Training(handle) => handle.save(dir).map_err(cause),
            PolicyLearner::Held(learner) => learner.save(dir).map_err(cause),
            PolicyLearner::Gone => Err(ImpalaError::Stopped),
        }
    }

    /// Takes its learner off the thread (what it had queued is dropped) and holds it; a
    /// learner lost to a panic of its thread leaves it `Gone`.
    pub(crate) fn take_off_thread(&mut self) {
        if let PolicyLearner::Training(handle) =
            std::mem::replace(&mut self.learner, PolicyLearner::Gone)
        {
            if let Some(learner) = handle.finish().0 {
                self.learner = PolicyLearner::Held(learner);
            }
        }
    }

    /// Holds its learner off the thread ([`PolicySlot::take_off_thread`]); a learner lost to a
    /// panic is rebuilt, for a checkpoint to replace its state.
    pub(crate) fn hold(&mut self, base_seed: u64) -> Result<()> {
        self.take_off_thread();
        if let PolicyLearner::Gone = self.learner {
            let source = &self.source;
            let learner =
                new_learner(&self.config, source.model.as_ref(), &source.spec, base_seed)?;
            self.learner = PolicyLearner::Held(learner);
        }
        Ok(())
    }
}

/// Puts the held learners of the policies to train on one learner thread (RLlib's: one thread
/// trains each policy's batches in turn); the others stay held, never changing.
pub(crate) fn start_learners(policies: &mut [PolicySlot]) -> Result<()> {
    let mut trained = Vec::new();
    let mut learners = Vec::new();
    for (p, policy) in policies.iter_mut().enumerate() {
        if !policy.trains {
            continue;
        }
        if let PolicyLearner::Held(learner) =
            std::mem::replace(&mut policy.learner, PolicyLearner::Gone)
        {
            trained.push(p);
            learners.push((settings::learner_thread(&policy.config), learner));
        }
    }
    if learners.is_empty() {
        return Ok(());
    }
    let handles = LearnerHandle::spawn_shared(learners)?;
    for (p, handle) in trained.into_iter().zip(handles) {
        policies[p].learner = PolicyLearner::Training(handle);
    }
    Ok(())
}

/// Running sums of the learner stats of one iteration (RLlib's `LearnerInfoBuilder` mean).
#[derive(Default)]
pub(crate) struct StatsMean {
    sums: BTreeMap<&'static str, f64>,
    pub(crate) count: usize,
}

impl StatsMean {
    pub(crate) fn add(&mut self, s: &LearnerStats) {
        for (k, v) in stats_fields(s) {
            *self.sums.entry(k).or_insert(0.0) += v;
        }
        self.count += 1;
    }

    pub(crate) fn mean(&self) -> BTreeMap<String, f64> {
        self.sums.iter().map(|(k, v)| ((*k).to_string(), v / self.count as f64)).collect()
    }
}

fn stats_fields(s: &LearnerStats) -> [(&'static str, f64); 10] {
    [
        ("total_loss", s.total_loss),
        ("policy_loss", s.policy_loss),
        ("vf_loss", s.vf_loss),
        ("entropy", s.entropy),
        ("vf_explained_var", s.vf_explained_var),
        ("grad_gnorm", s.grad_gnorm),
        ("var_gnorm", s.var_gnorm),
        ("cur_lr", s.cur_lr),
        ("entropy_coeff", s.entropy_coeff),
        ("policy_lag", s.policy_lag),
    ]
}

/// The CPU policies of a multi-agent runner's incarnation: one per policy of `sources` (in
/// policy order) acting with the weights given, each drawing actions from its own stream of
/// `sample_seed`.
pub(crate) fn acting_policies(
    sources: Vec<PolicySource>,
    sample_seed: u64,
) -> MultiAgentPolicyFactory {
    Arc::new(move |runner, incarnation, weights: &[Arc<Weights>]| {
        let seed = runner_sample_seed(sample_seed, runner, incarnation);
        sources
            .iter()
            .zip(weights)
            .enumerate()
            .map(|(p, (source, w))| {
                let mut policy = TorchPolicy::new(
                    source.model.as_ref(),
                    &source.spec,
                    source.base_seed,
                    impala_sampler::stream_seed(seed, p as u64),
                )
                .map_err(CoreError::from)?;
                policy.set_weights(w)?;
                Ok(Box::new(policy) as Box<dyn Policy>)
            })
            .collect()
    })
}

/// A learner for `config` training `model`, its initial weights from `base_seed`.
pub(crate) fn new_learner(
    config: &ValidatedConfig,
    model: &dyn ModelFactory,
    spec: &EnvSpec,
    base_seed: u64,
) -> Result<Learner> {
    let mut learner_settings = settings::learner(config);
    learner_settings.model_seed = base_seed;
    let plan = config.config().learner_plan();
    let devices = learner_devices(plan.kind, plan.num_devices)?;
    Ok(Learner::with_model(&learner_settings, model, spec, &devices)?)
}

/// The batching stage of `config`, its replay drawing from `streams`; none with
/// `_env_runners_only`.
pub(crate) fn batching_stage(
    config: &ValidatedConfig,
    streams: &Streams,
) -> Result<Option<TrainBatchBuilder>> {
    if config.config().env_runners_only {
        return Ok(None);
    }
    let mut settings = settings::batching(config);
    settings.seed = streams.env_seed;
    Ok(Some(TrainBatchBuilder::new(&settings)?))
}

/// The random streams of a run: where its env seeds and its action-sampling seeds come from.
/// A fresh run (no restores) uses the seeds themselves: env seeds from the config's `seed`
/// (RLlib's `seed + 1000 * runner + env`), sampling seeds from the base seed; each restore
/// moves both to streams of their own, so a resumed run does not replay the original run's
/// episodes and actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Streams {
    /// The base seed of the envs (`None`: unseeded envs, as the config asks).
    pub(crate) env_seed: Option<u64>,
    /// The base seed of the runners' action sampling.
    pub(crate) sample_seed: u64,
}

impl Streams {
    /// The streams of a run of `config` with `base_seed`, restored `num_restores` times.
    pub(crate) fn new(config: &ValidatedConfig, base_seed: u64, num_restores: u64) -> Self {
        Streams {
            env_seed: config.config().seed.map(|s| stream_seed(s, num_restores)),
            sample_seed: stream_seed(base_seed, num_restores),
        }
    }
}

pub(crate) use impala_sampler::stream_seed;

/// The action-sampling seed of incarnation `incarnation` of runner `runner` under
/// `sample_seed`: one per runner at first (`sample_seed * golden + runner + 1`), a new one for
/// every restart of the runner.
pub(crate) fn runner_sample_seed(sample_seed: u64, runner: usize, incarnation: u64) -> u64 {
    let first = sample_seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(runner as u64 + 1);
    stream_seed(first, incarnation)
}

/// Builds runners' policies: CPU copies of the model. They infer in float32 whatever the
/// run's `precision`: CPU autocast casts every weight to bfloat16 on every call, which made
/// the runners' small batches 1.2-1.8x as slow as in float32 on an AMX Xeon
/// (docs/PERFORMANCE.md); V-trace corrects for the difference from the learner's bf16 logits.
#[derive(Debug, Clone)]
pub(crate) struct PolicySource {
    pub(crate) model: Arc<dyn ModelFactory>,
    pub(crate) spec: EnvSpec,
    /// Seeds the model's initial weights (overwritten by the weights a policy is given).
    pub(crate) base_seed: u64,
}

/// What [`PolicySource::with_weights`] gives the runner group: a policy per runner context.
pub(crate) type RunnerPolicies =
    Arc<dyn Fn(&EnvContext) -> std::result::Result<Box<dyn Policy>, CoreError> + Send + Sync>;

impl PolicySource {
    /// Policies that act with `weights` from their first step (so no fragment is sampled
    /// with other weights), each runner incarnation sampling actions from its own stream of
    /// `sample_seed`.
    pub(crate) fn with_weights(&self, weights: Arc<Weights>, sample_seed: u64) -> RunnerPolicies {
        let source = self.clone();
        Arc::new(move |ctx: &EnvContext| {
            let seed = runner_sample_seed(sample_seed, ctx.runner_index, ctx.incarnation);
            let mut policy =
                TorchPolicy::new(source.model.as_ref(), &source.spec, source.base_seed, seed)
                    .map_err(CoreError::from)?;
            policy.set_weights(&weights)?;
            Ok(Box::new(policy) as Box<dyn Policy>)
        })
    }
}

/// A seed for runs without one (`seed = None`), recorded in checkpoints.
pub(crate) fn random_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ (u64::from(std::process::id()) << 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_keep_the_first_seeds_and_move_on_per_restore_and_restart() {
        // A fresh run's first runner incarnations sample as before: one seed per runner.
        let base = 11;
        assert_eq!(stream_seed(base, 0), base);
        assert_eq!(
            runner_sample_seed(base, 2, 0),
            base.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(3)
        );
        // Restores and restarts each draw seeds of their own.
        let mut seen = std::collections::BTreeSet::new();
        for restores in 0..4 {
            for runner in 0..4 {
                for incarnation in 0..4 {
                    let seed = runner_sample_seed(stream_seed(base, restores), runner, incarnation);
                    assert!(seen.insert(seed), "{restores} {runner} {incarnation}");
                }
            }
        }
    }
}
