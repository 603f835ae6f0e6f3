//! RLlib's evaluation env runners: `evaluation_num_env_runners` runners (or the calling thread)
//! that run `evaluation_duration` episodes or env steps with given weights. Every round builds
//! its runners afresh, so an evaluation's episodes all start in it, under its weights; and the
//! reading of a checkpoint's policy without its training state.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use impala_config::{DurationUnit, ImpalaConfig, ValidatedConfig};
use impala_core::{EpisodeStats, Weights};
use impala_envs::MeanStdFilter;
use impala_sampler::EnvFactory;

use crate::checkpoint::{find_checkpoint, put_saved_filter, read_checkpoint, LEARNER_DIR};
use crate::policies::{stream_seed, PolicySource, Streams};
use crate::run_envs::{
    env_spec, python_envs, python_single_agent_envs, single_agent_envs, RunEnvs,
};
use crate::runners::{local_runners, EnvRunnerGroup};
use crate::settings;
use crate::{EvaluationResult, ImpalaError, Result};

/// Evaluation env seeds start this far from the sampling runners' (whose envs are seeded
/// `seed + 1000 * runner + env`), and each round this much further, so evaluation episodes
/// differ from training's and from round to round, reproducibly.
const SEED_OFFSET: u64 = 1_000_000;
const SEED_OFFSET_PER_ROUND: u64 = 100_000;
/// Evaluation policies sample actions from streams apart from the training runners'.
const SAMPLE_STREAM: u64 = 0xE7A1;

/// One evaluation under way.
struct Round {
    group: EnvRunnerGroup,
    episodes: Vec<EpisodeStats>,
    /// Per episode, per policy, its agents' summed rewards.
    returns: Vec<Vec<f64>>,
    steps: u64,
    /// Whether the env is a multi-agent one (its result has `policy_reward_mean`).
    multi_agent: bool,
}

/// Runs evaluation rounds (RLlib's evaluation `EnvRunnerGroup`) of a run's policies.
pub(crate) struct Evaluator {
    config: ValidatedConfig,
    sources: Vec<PolicySource>,
    policy_ids: Vec<String>,
    streams: Streams,
    rounds: u64,
    running: Option<Round>,
}

impl Evaluator {
    /// Rounds of the policies `policy_ids` built from `sources` (in the same order).
    pub(crate) fn new(
        config: ValidatedConfig,
        sources: Vec<PolicySource>,
        policy_ids: Vec<String>,
        streams: &Streams,
    ) -> Self {
        Evaluator { config, sources, policy_ids, streams: *streams, rounds: 0, running: None }
    }

    /// Draws from `streams` from the next round on (a restored run's).
    pub(crate) fn set_streams(&mut self, streams: &Streams) {
        self.streams = *streams;
    }

    /// Starts a round on fresh runners of `envs` acting with `weights` (one per policy); an
    /// unfinished round is dropped.
    pub(crate) fn start(&mut self, envs: &RunEnvs, weights: Vec<Arc<Weights>>) -> Result<()> {
        self.running = None;
        let offset = SEED_OFFSET + self.rounds * SEED_OFFSET_PER_ROUND;
        let sample_seed = stream_seed(self.streams.sample_seed ^ SAMPLE_STREAM, self.rounds + 1);
        self.rounds += 1;
        let mut settings = settings::evaluation_runner_group(&self.config, offset);
        settings.runner.seed = self.streams.env_seed.map(|s| s.wrapping_add(offset));
        // In parallel with training, collect only what is ready; alone, wait for fragments.
        settings.sample_timeout = if self.config.config().evaluation_parallel_to_training {
            Some(Duration::ZERO)
        } else {
            None
        };
        let group = local_runners(envs, true, &settings, &self.sources, weights, sample_seed)?;
        self.running = Some(Round {
            group,
            episodes: Vec::new(),
            returns: Vec::new(),
            steps: 0,
            multi_agent: envs.is_multi_agent(),
        });
        Ok(())
    }

    /// Collects what the round's runners have ready; the result once the round is complete
    /// (its runners are then stopped).
    pub(crate) fn poll(&mut self) -> Result<Option<EvaluationResult>> {
        let round = self.running.as_mut().ok_or(ImpalaError::Stopped)?;
        for fragment in round.group.sample()? {
            round.steps += fragment.env_steps as u64;
            round.episodes.extend(fragment.episodes);
            round.returns.extend(fragment.policy_returns);
        }
        let duration = self.config.config().evaluation_duration.max(1);
        let done = match self.config.config().evaluation_duration_unit {
            DurationUnit::Episodes => round.episodes.len() >= duration,
            DurationUnit::Timesteps => round.steps >= duration as u64,
        };
        if !done {
            return Ok(None);
        }
        let Some(mut round) = self.running.take() else { return Ok(None) };
        round.group.shutdown()?;
        if self.config.config().evaluation_duration_unit == DurationUnit::Episodes {
            round.episodes.truncate(duration);
            round.returns.truncate(duration);
        }
        let mut result = EvaluationResult::of_episodes(&round.episodes, round.steps);
        if round.multi_agent {
            let count = round.returns.len().max(1) as f64;
            result.policy_reward_mean = self
                .policy_ids
                .iter()
                .enumerate()
                .map(|(p, id)| {
                    (id.clone(), round.returns.iter().map(|r| r[p]).sum::<f64>() / count)
                })
                .collect();
        }
        Ok(Some(result))
    }

    /// Runs the round under way to its end.
    pub(crate) fn finish(&mut self) -> Result<EvaluationResult> {
        loop {
            if let Some(result) = self.poll()? {
                return Ok(result);
            }
            if self.config.config().evaluation_parallel_to_training {
                // Runners are sampling on their threads; do not spin the driver's core.
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// A checkpoint error of a caller that only reads the checkpoint (to `action` it: evaluate it,
/// load its policy), with the fix that fits: another checkpoint, or the version that wrote it
/// (neither resuming nor a new run).
pub(crate) fn reading_fix(error: ImpalaError, action: &str) -> ImpalaError {
    match error {
        ImpalaError::CorruptCheckpoint { path, reason, .. } => {
            let fix = format!("{action} another checkpoint_NNNNNN folder of the run");
            ImpalaError::CorruptCheckpoint { path, reason, fix }
        }
        ImpalaError::IncompatibleCheckpoint { path, reason, .. } => {
            let fix = format!("{action} it with the impala-rs version that wrote it");
            ImpalaError::IncompatibleCheckpoint { path, reason, fix }
        }
        other => other,
    }
}

/// A checkpoint's policy as read from its folder, without training state: what evaluating it
/// and [`TrainedPolicy`](crate::TrainedPolicy) need.
pub(crate) struct CheckpointPolicy {
    /// The checkpoint folder.
    pub(crate) dir: PathBuf,
    /// Its config (as adjusted by the caller), validated.
    pub(crate) config: ValidatedConfig,
    /// Its envs as evaluation builds them: normalising with the checkpoint's saved filter
    /// (never updating it), with the config's wrappers.
    pub(crate) env_factory: EnvFactory,
    /// The saved observation filter those envs normalise with (`None` without
    /// `normalize_observations`).
    pub(crate) filter: Option<MeanStdFilter>,
    /// Its model, the spec of those envs and the run's base seed.
    pub(crate) policies: PolicySource,
    /// Its weights (finite; not yet checked against the model).
    pub(crate) weights: Arc<Weights>,
}

/// Where the envs of a checkpoint's policy come from.
pub(crate) enum EnvSource {
    /// Its config's `env` (the registry, or Gymnasium).
    Config,
    /// The caller's envs (as given to [`ImpalaBuilder::env_factory`](crate::ImpalaBuilder::env_factory)).
    Factory(EnvFactory),
    /// A pickled Python env creator (as given to
    /// [`ImpalaBuilder::python_env_creator`](crate::ImpalaBuilder::python_env_creator)).
    PythonCreator(PathBuf),
}

impl EnvSource {
    /// The caller's envs if any, else the config's.
    pub(crate) fn factory(env_factory: Option<EnvFactory>) -> Self {
        env_factory.map_or(EnvSource::Config, EnvSource::Factory)
    }
}

/// Reads the checkpoint at `path` (a `checkpoint_NNNNNN` folder, or a run folder for its
/// newest): its files verified against the manifest, its config (`adjust`ed, then validated),
/// the envs of that config (or of `envs`) normalising with the saved observation filter, and
/// its weights.
pub(crate) fn load_checkpoint_policy(
    path: &Path,
    envs: EnvSource,
    adjust: impl FnOnce(&mut ImpalaConfig),
) -> Result<CheckpointPolicy> {
    let dir = find_checkpoint(path)?;
    let (state, mut config) = read_checkpoint(&dir)?;
    if state.is_multi_agent() {
        return Err(ImpalaError::MultiAgentOption {
            key: "policies",
            reason: format!(
                "`{}` is a multi-agent checkpoint with a policy per id ({}); restore it with \
                 `Impala::builder(config).restore_from(..)` and take one with \
                 `get_policy_by_id(policy_id)`",
                dir.display(),
                config.policy_ids().join(", ")
            ),
        });
    }
    adjust(&mut config);
    let config = config.validate()?;
    let envs = match envs {
        EnvSource::Config => single_agent_envs(&config, None)?,
        EnvSource::Factory(factory) => single_agent_envs(&config, Some(factory))?,
        EnvSource::PythonCreator(creator) => {
            python_single_agent_envs(&config, python_envs(&config, Some(creator))?.1)
        }
    };
    // The policy sees observations normalised as in training: with the run's saved filter.
    put_saved_filter(envs.filter.as_ref(), state.observation_filter, &dir)?;
    let env_factory = envs.evaluation;
    let spec = env_spec(&config, &env_factory)?;
    let filter = match &envs.filter {
        Some(filter) => filter.snapshot()?,
        None => None,
    };
    let weights =
        impala_learner::read_model_weights(&dir.join(LEARNER_DIR), state.counters.num_grad_updates)
            .map_err(|e| {
                ImpalaError::corrupt_checkpoint(&dir, format!("its weights do not load ({e})"))
            })?;
    let policies = PolicySource {
        model: Arc::new(settings::model(&config)),
        spec,
        base_seed: state.base_seed,
    };
    Ok(CheckpointPolicy { dir, config, env_factory, filter, policies, weights })
}

/// The error of a checkpoint whose weights do not fit the model its config describes.
pub(crate) fn weights_do_not_fit(dir: &Path, error: &dyn std::fmt::Display) -> ImpalaError {
    ImpalaError::corrupt_checkpoint(
        dir,
        format!("its weights do not fit its config's model ({error})"),
    )
}
