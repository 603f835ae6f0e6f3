//! Which checkpoints a run keeps, as Tune's `CheckpointConfig(num_to_keep,
//! checkpoint_score_attribute, checkpoint_score_order)` users expect, and the run folder's
//! `best_checkpoint` pointer.

use std::collections::BTreeSet;
use std::fs;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

use impala_core::suggest::did_you_mean;

use super::dir::{checkpoint_iterations, remove_checkpoint};
use super::RunError;
use crate::checkpoint::{checkpoint_name, write_file_atomically};
use crate::result::flatten;
use crate::run::files::for_each_result;
use crate::{EvaluationResult, ImpalaError, IterationResult, RESULT_FILE};

/// The run folder's pointer to its best checkpoint: the folder name on the first line, then
/// `<attribute> <score> <max|min>`.
pub const BEST_CHECKPOINT_FILE: &str = "best_checkpoint";

/// Whether a higher or a lower score is better (Tune's `checkpoint_score_order`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScoreOrder {
    /// Higher is better (returns).
    #[default]
    Max,
    /// Lower is better (losses).
    Min,
}

impl ScoreOrder {
    /// Whether score `a` beats `b`.
    pub fn better(self, a: f64, b: f64) -> bool {
        match self {
            ScoreOrder::Max => a > b,
            ScoreOrder::Min => a < b,
        }
    }
}

impl std::fmt::Display for ScoreOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ScoreOrder::Max => "max",
            ScoreOrder::Min => "min",
        })
    }
}

impl std::str::FromStr for ScoreOrder {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "max" => Ok(ScoreOrder::Max),
            "min" => Ok(ScoreOrder::Min),
            other => Err(format!("`{other}` is neither `max` nor `min`")),
        }
    }
}

/// Which checkpoints a run keeps: the `num_to_keep` newest, plus the best by
/// `score_attribute` (a `result.json` key, flattened with `/`), plus always the final one.
/// Tune keeps the `num_to_keep` best instead; keeping the newest as well means a resume
/// always finds where the run stopped, and the best is never lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointPolicy {
    /// The result key that scores a checkpoint (`episode_return_mean`).
    pub score_attribute: String,
    /// Whether higher or lower scores are better.
    pub score_order: ScoreOrder,
    /// How many of the newest checkpoints to keep besides the best (`None`: all).
    pub num_to_keep: Option<NonZeroUsize>,
}

impl Default for CheckpointPolicy {
    /// The newest 3 and the best by `episode_return_mean` (higher is better).
    fn default() -> Self {
        CheckpointPolicy {
            score_attribute: "episode_return_mean".into(),
            score_order: ScoreOrder::Max,
            num_to_keep: NonZeroUsize::new(3),
        }
    }
}

impl CheckpointPolicy {
    /// Refuses a score attribute that no result has (with the nearest key as a suggestion).
    /// Keys under `env_runners/` and `info/learner/` depend on the run and are not checked.
    pub fn check(&self) -> Result<(), RunError> {
        let attribute = &self.score_attribute;
        if ["env_runners/", "info/learner/"].iter().any(|p| attribute.starts_with(p)) {
            return Ok(());
        }
        let example =
            IterationResult { evaluation: Some(EvaluationResult::default()), ..Default::default() };
        let keys: Vec<String> = flatten(&example.to_json()).into_keys().collect();
        if keys.contains(attribute) {
            return Ok(());
        }
        let nearest = did_you_mean(attribute, keys.iter().map(String::as_str)).map(String::from);
        Err(RunError::UnknownScoreAttribute { attribute: attribute.clone(), nearest })
    }

    /// The best checkpoint of the run folder `dir` under this policy, as its
    /// [`BEST_CHECKPOINT_FILE`] names it (`None` without one, or when it names another
    /// attribute or order, or a checkpoint that is gone).
    ///
    /// ```
    /// use impala::run::{CheckpointPolicy, BEST_CHECKPOINT_FILE};
    /// let run = tempfile::tempdir()?;
    /// let policy = CheckpointPolicy::default();
    /// assert!(policy.best_in(run.path()).is_none());
    /// std::fs::create_dir(run.path().join("checkpoint_000004"))?;
    /// let pointer = "checkpoint_000004\nepisode_return_mean 30.25 max\n";
    /// std::fs::write(run.path().join(BEST_CHECKPOINT_FILE), pointer)?;
    /// let best = policy.best_in(run.path()).ok_or("no best checkpoint")?;
    /// assert_eq!((best.iteration, best.score), (4, 30.25));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn best_in(&self, dir: &Path) -> Option<BestCheckpoint> {
        let (iteration, score) = read_pointer(dir, self)?;
        let path = dir.join(checkpoint_name(iteration));
        path.is_dir().then(|| BestCheckpoint {
            path,
            iteration,
            attribute: self.score_attribute.clone(),
            score,
        })
    }

    /// The score of `result` (`None` when the key is missing or not a finite number, e.g. no
    /// episode finished yet).
    pub fn score(&self, result: &IterationResult) -> Option<f64> {
        flatten(&result.to_json())
            .get(&self.score_attribute)
            .and_then(serde_json::Value::as_f64)
            .filter(|s| s.is_finite())
    }
}

/// The best checkpoint of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct BestCheckpoint {
    /// The checkpoint folder.
    pub path: PathBuf,
    /// Its iteration.
    pub iteration: u64,
    /// The score attribute.
    pub attribute: String,
    /// Its score.
    pub score: f64,
}

/// Applies a [`CheckpointPolicy`] to one run folder as checkpoints are saved.
#[derive(Debug)]
pub(crate) struct Keeper {
    dir: PathBuf,
    policy: CheckpointPolicy,
    best: Option<(u64, f64)>,
}

impl Keeper {
    /// Finds the best of the checkpoints already in `dir`: from its `best_checkpoint` file when
    /// that was written under the same attribute and order, else from their results.
    pub(crate) fn open(dir: &Path, policy: &CheckpointPolicy) -> Result<Self, ImpalaError> {
        let existing: BTreeSet<u64> = checkpoint_iterations(dir)?.into_iter().collect();
        let mut keeper = Keeper { dir: dir.to_path_buf(), policy: policy.clone(), best: None };
        keeper.best = read_pointer(dir, policy).filter(|(i, _)| existing.contains(i));
        if keeper.best.is_none() && !existing.is_empty() {
            for_each_result(&dir.join(RESULT_FILE), |_, _, value: serde_json::Value| {
                let iteration = value.get("training_iteration").and_then(|v| v.as_u64());
                let Some(iteration) = iteration.filter(|i| existing.contains(i)) else {
                    return Ok(());
                };
                let score = flatten(&value)
                    .get(&policy.score_attribute)
                    .and_then(serde_json::Value::as_f64)
                    .filter(|s| s.is_finite());
                if let Some(score) = score {
                    keeper.offer(iteration, score);
                }
                Ok(())
            })?;
        }
        keeper.write_pointer()?;
        Ok(keeper)
    }

    fn offer(&mut self, iteration: u64, score: f64) {
        match self.best {
            Some((i, _)) if i == iteration => self.best = Some((iteration, score)),
            Some((_, best)) if !self.policy.score_order.better(score, best) => {}
            _ => self.best = Some((iteration, score)),
        }
    }

    /// Records the checkpoint just saved for `iteration` with `score`, updates the pointer and
    /// deletes the checkpoints the policy no longer keeps. Returns the best checkpoint.
    pub(crate) fn saved(
        &mut self,
        iteration: u64,
        score: Option<f64>,
    ) -> Result<Option<BestCheckpoint>, ImpalaError> {
        match score {
            Some(score) => self.offer(iteration, score),
            // Replaced by a checkpoint without a score: it cannot stay the best.
            None if self.best.is_some_and(|(i, _)| i == iteration) => self.best = None,
            None => {}
        }
        self.write_pointer()?;
        if let Some(keep) = self.policy.num_to_keep {
            let all = checkpoint_iterations(&self.dir)?;
            let newest: BTreeSet<u64> = all.iter().rev().take(keep.get()).copied().collect();
            for i in all {
                let kept = newest.contains(&i)
                    || i >= iteration
                    || self.best.is_some_and(|(best, _)| best == i);
                if !kept {
                    remove_checkpoint(&self.dir.join(checkpoint_name(i)))?;
                }
            }
        }
        Ok(self.best())
    }

    pub(crate) fn best(&self) -> Option<BestCheckpoint> {
        self.best.map(|(iteration, score)| BestCheckpoint {
            path: self.dir.join(checkpoint_name(iteration)),
            iteration,
            attribute: self.policy.score_attribute.clone(),
            score,
        })
    }

    fn write_pointer(&self) -> Result<(), ImpalaError> {
        let path = self.dir.join(BEST_CHECKPOINT_FILE);
        match self.best {
            Some((iteration, score)) => {
                let text = format!(
                    "{}\n{} {score} {}\n",
                    checkpoint_name(iteration),
                    self.policy.score_attribute,
                    self.policy.score_order
                );
                write_file_atomically(&path, text.as_bytes())
            }
            None => match fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(ImpalaError::io("remove", &path, e))
                }
                _ => Ok(()),
            },
        }
    }
}

/// The best `(iteration, score)` the pointer file of `dir` names, if it was written under
/// `policy`'s attribute and order.
fn read_pointer(dir: &Path, policy: &CheckpointPolicy) -> Option<(u64, f64)> {
    let text = fs::read_to_string(dir.join(BEST_CHECKPOINT_FILE)).ok()?;
    let mut lines = text.lines();
    let iteration = lines.next()?.trim().strip_prefix("checkpoint_")?.parse().ok()?;
    let mut words = lines.next()?.split_whitespace();
    let (attribute, score, order) = (words.next()?, words.next()?, words.next()?);
    let same = attribute == policy.score_attribute && order == policy.score_order.to_string();
    Some((iteration, score.parse::<f64>().ok().filter(|s| s.is_finite())?)).filter(|_| same)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(keep: usize, order: ScoreOrder) -> CheckpointPolicy {
        CheckpointPolicy {
            score_attribute: "episode_return_mean".into(),
            score_order: order,
            num_to_keep: NonZeroUsize::new(keep),
        }
    }

    fn save(dir: &Path, i: u64) -> Result<(), ImpalaError> {
        let p = dir.join(checkpoint_name(i)).join("learner");
        fs::create_dir_all(&p).map_err(|e| ImpalaError::io("create", &p, e))
    }

    #[test]
    fn keeps_the_newest_and_the_best_and_points_at_the_best() -> Result<(), ImpalaError> {
        let tmp = tempfile::tempdir().map_err(|e| ImpalaError::io("create", Path::new("t"), e))?;
        let dir = tmp.path();
        let mut keeper = Keeper::open(dir, &policy(2, ScoreOrder::Max))?;
        let scores = [Some(5.0), Some(50.0), None, Some(20.0), Some(10.0), Some(30.0)];
        for (i, score) in (1..).zip(scores) {
            save(dir, i)?;
            keeper.saved(i, score)?;
        }
        assert_eq!(checkpoint_iterations(dir)?, vec![2, 5, 6]);
        let best = keeper.best();
        assert_eq!(best.as_ref().map(|b| (b.iteration, b.score)), Some((2, 50.0)));
        let text = fs::read_to_string(dir.join(BEST_CHECKPOINT_FILE))
            .map_err(|e| ImpalaError::io("read", dir, e))?;
        assert_eq!(text, "checkpoint_000002\nepisode_return_mean 50 max\n");
        // A new keeper (a resumed run) finds the same best from the pointer.
        let again = Keeper::open(dir, &policy(2, ScoreOrder::Max))?;
        assert_eq!(again.best, Some((2, 50.0)));
        // Under another order the pointer does not apply, and without results nothing scores.
        let min = Keeper::open(dir, &policy(2, ScoreOrder::Min))?;
        assert_eq!(min.best, None);
        assert!(!dir.join(BEST_CHECKPOINT_FILE).exists());
        Ok(())
    }

    #[test]
    fn unknown_score_attributes_are_refused_with_the_nearest_key() {
        let mut policy = CheckpointPolicy::default();
        assert!(policy.check().is_ok());
        for ok in
            ["evaluation/episode_return_mean", "info/learner/default_policy/x", "time_total_s"]
        {
            policy.score_attribute = ok.into();
            assert!(policy.check().is_ok(), "{ok}");
        }
        policy.score_attribute = "episode_reward_mean".into();
        let err = policy.check().map_err(|e| e.to_string()).err().unwrap_or_default();
        assert!(err.contains("did you mean `episode_return_mean`"), "{err}");
    }

    #[test]
    fn min_order_and_keep_all() -> Result<(), ImpalaError> {
        let tmp = tempfile::tempdir().map_err(|e| ImpalaError::io("create", Path::new("t"), e))?;
        let dir = tmp.path();
        let mut all = policy(1, ScoreOrder::Min);
        all.num_to_keep = None;
        let mut keeper = Keeper::open(dir, &all)?;
        for (i, score) in (1..).zip([3.0, 1.0, 2.0]) {
            save(dir, i)?;
            keeper.saved(i, Some(score))?;
        }
        assert_eq!(checkpoint_iterations(dir)?, vec![1, 2, 3]);
        assert_eq!(keeper.best, Some((2, 1.0)));
        Ok(())
    }
}
