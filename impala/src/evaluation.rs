//! RLlib's evaluation env runners: `evaluation_num_env_runners` runners (or the calling thread)
//! that run `evaluation_duration` episodes or env steps with given weights. Every round builds
//! its runners afresh, so an evaluation's episodes all start in it, under its weights.

use std::sync::Arc;
use std::time::Duration;

use impala_config::{DurationUnit, ValidatedConfig};
use impala_core::{EpisodeStats, Weights};
use impala_sampler::{EnvFactory, EnvRunnerGroup, EnvRunnerGroupSettings, PolicyFactory};

use crate::{EpisodeWindow, EvaluationResult, ImpalaError, Result};

/// Evaluation env seeds start this far from the sampling runners' (whose envs are seeded
/// `seed + 1000 * runner + env`), and each round this much further, so evaluation episodes
/// differ from training's and from round to round, reproducibly.
const SEED_OFFSET: u64 = 1_000_000;
const SEED_OFFSET_PER_ROUND: u64 = 100_000;

/// One evaluation under way.
struct Round {
    group: EnvRunnerGroup,
    episodes: Vec<EpisodeStats>,
    steps: u64,
}

/// Runs evaluation rounds (RLlib's evaluation `EnvRunnerGroup`).
pub(crate) struct Evaluator {
    config: ValidatedConfig,
    env_factory: EnvFactory,
    policy_factory: PolicyFactory,
    rounds: u64,
    running: Option<Round>,
}

impl Evaluator {
    pub(crate) fn new(
        config: ValidatedConfig,
        env_factory: EnvFactory,
        policy_factory: PolicyFactory,
    ) -> Self {
        Evaluator { config, env_factory, policy_factory, rounds: 0, running: None }
    }

    /// Starts a round with `weights` on fresh runners (an unfinished round is dropped).
    pub(crate) fn start(&mut self, weights: Arc<Weights>) -> Result<()> {
        self.running = None;
        let offset = SEED_OFFSET + self.rounds * SEED_OFFSET_PER_ROUND;
        self.rounds += 1;
        let mut settings = EnvRunnerGroupSettings::evaluation_from_config(&self.config, offset);
        // In parallel with training, collect only what is ready; alone, wait for fragments.
        settings.sample_timeout =
            if self.config.evaluation_parallel_to_training { Some(Duration::ZERO) } else { None };
        let mut group = EnvRunnerGroup::new(
            &settings,
            Arc::clone(&self.env_factory),
            Arc::clone(&self.policy_factory),
        )?;
        let ids = group.healthy_runner_ids();
        group.sync_weights(weights, &ids);
        self.running = Some(Round { group, episodes: Vec::new(), steps: 0 });
        Ok(())
    }

    /// Collects what the round's runners have ready; the result once the round is complete
    /// (its runners are then stopped).
    pub(crate) fn poll(&mut self) -> Result<Option<EvaluationResult>> {
        let round = self.running.as_mut().ok_or(ImpalaError::Stopped)?;
        for fragment in round.group.sample()? {
            round.steps += fragment.batch.env_steps() as u64;
            round.episodes.extend(fragment.episodes);
        }
        let duration = self.config.evaluation_duration.max(1);
        let done = match self.config.evaluation_duration_unit {
            DurationUnit::Episodes => round.episodes.len() >= duration,
            DurationUnit::Timesteps => round.steps >= duration as u64,
        };
        if !done {
            return Ok(None);
        }
        let Some(mut round) = self.running.take() else { return Ok(None) };
        round.group.shutdown()?;
        if self.config.evaluation_duration_unit == DurationUnit::Episodes {
            round.episodes.truncate(duration);
        }
        let mut window = EpisodeWindow::new(round.episodes.len().max(1));
        window.extend(&round.episodes);
        let s = window.summary();
        Ok(Some(EvaluationResult {
            episode_return_mean: s.episode_return_mean,
            episode_return_min: s.episode_return_min,
            episode_return_max: s.episode_return_max,
            episode_len_mean: s.episode_len_mean,
            num_episodes: round.episodes.len() as u64,
            num_env_steps_sampled: round.steps,
        }))
    }

    /// Runs the round under way to its end.
    pub(crate) fn finish(&mut self) -> Result<EvaluationResult> {
        loop {
            if let Some(result) = self.poll()? {
                return Ok(result);
            }
            if self.config.evaluation_parallel_to_training {
                // Runners are sampling on their threads; do not spin the driver's core.
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}
