//! Evaluating a checkpoint's policies without training state (`impala evaluate`).

use std::path::Path;
use std::sync::Arc;

use impala_config::DurationUnit;
use impala_sampler::{EnvContext, EnvFactory};

use crate::evaluation::{
    load_checkpoint_policy, reading_fix, weights_do_not_fit, CheckpointPolicy, EnvSource, Evaluator,
};
use crate::policies::Streams;
use crate::run_envs::{RunEnvs, SingleAgentEnvs};
use crate::{EvaluationResult, Impala, ImpalaError, Result};

/// Runs `episodes` episodes with the policy of a checkpoint (a `checkpoint_NNNNNN` folder, or
/// a run folder for its newest checkpoint) on its config's registered env, greedily unless
/// `explore`: what `impala evaluate` does. Only what evaluation needs is built: the env (with
/// the config's wrappers) and CPU copies of the model holding the checkpoint's weights; no
/// learner thread, optimizer state or training runners. The runners are the config's
/// evaluation runners (`evaluation_num_env_runners`, one env each; 0 = the calling thread),
/// seeded as the algorithm's first evaluation round is.
///
/// The checkpoint's files are verified against its manifest first, and weights that are NaN or
/// infinite are refused (both as [`ImpalaError::CorruptCheckpoint`], naming the file or the
/// tensor). A checkpoint error's fix is about evaluating: another checkpoint of the run, or
/// the version that wrote it.
///
/// ```no_run
/// let eval = impala::evaluate_checkpoint(
///     std::path::Path::new("impala_results/IMPALA_CartPole-v1_2026-01-01_00-00-00"),
///     10,
///     false,
/// )?;
/// println!("mean return {} over {} episodes", eval.episode_return_mean, eval.num_episodes);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn evaluate_checkpoint(
    path: &Path,
    episodes: usize,
    explore: bool,
) -> Result<EvaluationResult> {
    evaluate(path, episodes, explore, None).map_err(evaluation_fix)
}

/// [`evaluate_checkpoint`] on the envs `env_factory` builds (an env of the caller's, as given
/// to [`ImpalaBuilder::env_factory`](crate::ImpalaBuilder::env_factory) for training); the
/// config's wrappers still apply.
pub fn evaluate_checkpoint_with_env(
    path: &Path,
    episodes: usize,
    explore: bool,
    env_factory: EnvFactory,
) -> Result<EvaluationResult> {
    evaluate(path, episodes, explore, Some(env_factory)).map_err(evaluation_fix)
}

/// A checkpoint error of an evaluation, with the fix that fits it (see [`reading_fix`]).
fn evaluation_fix(error: ImpalaError) -> ImpalaError {
    reading_fix(error, "evaluate")
}

fn evaluate(
    path: &Path,
    episodes: usize,
    explore: bool,
    env_factory: Option<EnvFactory>,
) -> Result<EvaluationResult> {
    if env_factory.is_none() {
        let dir = crate::checkpoint::find_checkpoint(path)?;
        let (state, saved) = crate::checkpoint::read_checkpoint(&dir)?;
        if state.is_multi_agent() {
            return evaluate_multi_agent(&dir, saved, episodes, explore);
        }
    }
    let loaded = load_checkpoint_policy(path, EnvSource::factory(env_factory), |config| {
        config.evaluation_duration = episodes.max(1);
        config.evaluation_duration_unit = DurationUnit::Episodes;
        config.evaluation_explore = explore;
        config.evaluation_parallel_to_training = false;
    })?;
    let CheckpointPolicy { dir, config, env_factory, policies, weights, .. } = loaded;
    // The weights must fit the model its config describes (the policy checks names, shapes).
    policies.with_weights(Arc::clone(&weights), 0)(&EnvContext::default())
        .map_err(|e| weights_do_not_fit(&dir, &e))?;
    let streams = Streams::new(&config, policies.base_seed, 0);
    let envs = RunEnvs::Single(SingleAgentEnvs {
        sampling: Arc::clone(&env_factory),
        evaluation: env_factory,
        filter: None,
        python: None,
    });
    let ids = vec![crate::DEFAULT_POLICY_ID.to_string()];
    let mut evaluator = Evaluator::new(config, vec![policies], ids, &streams);
    evaluator.start(&envs, vec![weights])?;
    evaluator.finish()
}

/// Plays `episodes` episodes of a multi-agent checkpoint in `dir` (whose config is `config`),
/// every policy with its saved weights, greedily unless `explore`: the run restored, with one
/// runner of one env meanwhile, evaluated.
fn evaluate_multi_agent(
    dir: &Path,
    mut config: impala_config::ImpalaConfig,
    episodes: usize,
    explore: bool,
) -> Result<EvaluationResult> {
    config.evaluation_duration = episodes.max(1);
    config.evaluation_duration_unit = DurationUnit::Episodes;
    config.evaluation_explore = explore;
    (config.num_env_runners, config.num_envs_per_env_runner) = (1, 1);
    let mut algo = Impala::builder(config.validate()?).restore_from(dir).build()?;
    let result = algo.evaluate();
    algo.stop()?;
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::LEARNER_DIR;

    #[test]
    fn checkpoint_errors_say_to_evaluate_another() -> std::io::Result<()> {
        let run = tempfile::tempdir()?;
        let checkpoint = run.path().join("checkpoint_000003");
        std::fs::create_dir_all(checkpoint.join(LEARNER_DIR))?;
        std::fs::write(checkpoint.join("algorithm_state.json"), "{truncated")?;
        let message = evaluate_checkpoint(run.path(), 1, false).err().map(|e| e.to_string());
        let message = message.unwrap_or_default();
        assert!(message.contains("unreadable, so evaluate another checkpoint_NNNNNN"), "{message}");
        assert!(!message.contains("new run") && !message.contains("resume"), "{message}");
        Ok(())
    }
}
