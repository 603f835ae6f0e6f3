//! The result of one `Impala::train()` call, with RLlib's names, and its flattened form as Tune
//! writes it to `progress.csv` (`info/learner/default_policy/learner_stats/total_loss`, ...).
//! Results read back from `result.json` ([`crate::read_results`]) are the same types: keys a
//! line lacks take their defaults, and `null` numbers (non-finite ones are written so) are NaN.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use impala_core::EpisodeStats;

use crate::{Counters, EpisodeSummary, EpisodeWindow};

/// RLlib's policy id for the single policy.
pub const DEFAULT_POLICY_ID: &str = "default_policy";

/// One training iteration's result (RLlib's result dict). Non-finite numbers mean "not
/// available yet" (no episode completed, no SGD step done) and are written as JSON `null`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct IterationResult {
    /// 1-based iteration counter.
    pub training_iteration: u64,
    /// Seconds this iteration took.
    #[serde(deserialize_with = "null_is_nan::number")]
    pub time_this_iter_s: f64,
    /// Seconds of training so far, over all iterations (including before a resume).
    #[serde(deserialize_with = "null_is_nan::number")]
    pub time_total_s: f64,
    /// Unix time at the end of the iteration.
    pub timestamp: u64,
    /// Tune's name for `num_env_steps_sampled` (the key Tune's stoppers and plots use).
    pub timesteps_total: u64,
    /// Env steps sampled over the run.
    pub num_env_steps_sampled: u64,
    /// Env steps trained on over the run (counts a batch once per SGD pass, as RLlib).
    pub num_env_steps_trained: u64,
    /// Agent steps sampled over the run (= env steps, single agent).
    pub num_agent_steps_sampled: u64,
    /// Agent steps trained over the run.
    pub num_agent_steps_trained: u64,
    /// Env steps sampled in this iteration.
    pub num_env_steps_sampled_this_iter: u64,
    /// Env steps trained in this iteration.
    pub num_env_steps_trained_this_iter: u64,
    /// Agent steps sampled in this iteration.
    pub num_agent_steps_sampled_this_iter: u64,
    /// Agent steps trained in this iteration.
    pub num_agent_steps_trained_this_iter: u64,
    /// Env steps sampled per second in this iteration.
    #[serde(deserialize_with = "null_is_nan::number")]
    pub num_env_steps_sampled_throughput_per_sec: f64,
    /// Env steps trained per second in this iteration.
    #[serde(deserialize_with = "null_is_nan::number")]
    pub num_env_steps_trained_throughput_per_sec: f64,
    /// Mean return of the last `metrics_num_episodes_for_smoothing` completed episodes.
    #[serde(deserialize_with = "null_is_nan::number")]
    pub episode_return_mean: f64,
    /// Smallest return in that window.
    #[serde(deserialize_with = "null_is_nan::number")]
    pub episode_return_min: f64,
    /// Largest return in that window.
    #[serde(deserialize_with = "null_is_nan::number")]
    pub episode_return_max: f64,
    /// Mean episode length in that window.
    #[serde(deserialize_with = "null_is_nan::number")]
    pub episode_len_mean: f64,
    /// Episodes completed in this iteration.
    pub num_episodes: u64,
    /// Episodes completed over the run.
    pub episodes_total: u64,
    /// Multi-agent runs: per policy id, the mean over the smoothing window of the episodes'
    /// summed rewards of the agents mapped to it (RLlib's `policy_reward_mean/<policy id>`).
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "null_is_nan::by_name"
    )]
    pub policy_reward_mean: BTreeMap<String, f64>,
    /// RLlib's new API stack name for `num_env_steps_sampled` (the run's count so far).
    pub num_env_steps_sampled_lifetime: u64,
    /// The new stack's `num_env_steps_trained`.
    pub num_env_steps_trained_lifetime: u64,
    /// The new stack's `num_agent_steps_sampled`.
    pub num_agent_steps_sampled_lifetime: u64,
    /// The new stack's `episodes_total`.
    pub num_episodes_lifetime: u64,
    /// The new stack's learner results: per policy (RLlib's module id), its learner stats and
    /// `num_module_steps_trained_lifetime` (`learners/<policy>/policy_loss`, ...).
    #[serde(deserialize_with = "null_is_nan::by_name_nested")]
    pub learners: BTreeMap<String, BTreeMap<String, f64>>,
    /// Learner and driver-loop internals.
    pub info: ResultInfo,
    /// Env runner health (healthy runners, restarts, in-flight requests, ...), and the episode
    /// metrics under their new API stack names (`env_runners/episode_return_mean`, ...).
    #[serde(deserialize_with = "null_is_nan::by_name")]
    pub env_runners: BTreeMap<String, f64>,
    /// The latest evaluation, in iterations that evaluated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evaluation: Option<EvaluationResult>,
    /// Process resource use.
    pub perf: Perf,
}

/// RLlib's `result["info"]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct ResultInfo {
    /// Learner results per policy id (`default_policy`).
    pub learner: BTreeMap<String, PolicyLearnerInfo>,
    /// Weight broadcasts to env runners over the run.
    pub num_weight_broadcasts: u64,
    /// Times a train batch did not fit the learner queue (kept and retried, never dropped).
    pub num_times_learner_queue_full: u64,
    /// `training_step` calls over the run.
    pub num_training_step_calls: u64,
    /// CPU weight snapshots the learner took (only when a broadcast, evaluation or checkpoint
    /// needed one).
    pub num_weight_snapshots: u64,
    /// Learner input-queue statistics.
    pub learner_queue: LearnerQueueInfo,
    /// Learner timings in ms (`learner_grad_time_ms`, `learner_load_time_ms`, ...).
    #[serde(deserialize_with = "null_is_nan::by_name")]
    pub timing_breakdown: BTreeMap<String, f64>,
}

/// RLlib's `result["info"]["learner_queue"]`: the learner inqueue's size over its last 50
/// steps, plus stalls and the train batches waiting on the driver for room in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct LearnerQueueInfo {
    /// Sizes in the window.
    pub size_count: u64,
    /// Mean size.
    #[serde(deserialize_with = "null_is_nan::number")]
    pub size_mean: f64,
    /// Standard deviation of the size.
    #[serde(deserialize_with = "null_is_nan::number")]
    pub size_std: f64,
    /// Min, 25%, median, 75% and max size.
    #[serde(deserialize_with = "null_is_nan::numbers")]
    pub size_quantiles: Vec<f64>,
    /// Times the learner waited `learner_queue_timeout` without data (stalls, not failures).
    pub num_learner_queue_timeouts: u64,
    /// Train batches kept on the driver because the queue was full.
    pub num_train_batches_waiting_on_driver: u64,
}

/// RLlib's `result["info"]["learner"][policy_id]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct PolicyLearnerInfo {
    /// The loss statistics (`total_loss`, `policy_loss`, `vf_loss`, `entropy`, ...), averaged
    /// over the SGD steps of the iteration.
    #[serde(deserialize_with = "null_is_nan::by_name")]
    pub learner_stats: BTreeMap<String, f64>,
    /// Agent steps trained over the run.
    pub num_agent_steps_trained: u64,
    /// SGD steps over the run (the weights version).
    pub num_grad_updates_lifetime: u64,
}

/// RLlib's `result["evaluation"]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct EvaluationResult {
    /// Mean return of the evaluation episodes.
    #[serde(deserialize_with = "null_is_nan::number")]
    pub episode_return_mean: f64,
    /// Smallest evaluation return.
    #[serde(deserialize_with = "null_is_nan::number")]
    pub episode_return_min: f64,
    /// Largest evaluation return.
    #[serde(deserialize_with = "null_is_nan::number")]
    pub episode_return_max: f64,
    /// Mean evaluation episode length.
    #[serde(deserialize_with = "null_is_nan::number")]
    pub episode_len_mean: f64,
    /// Evaluation episodes run.
    pub num_episodes: u64,
    /// Multi-agent runs: per policy id, the mean summed reward of its agents per episode.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "null_is_nan::by_name"
    )]
    pub policy_reward_mean: BTreeMap<String, f64>,
    /// Env steps the evaluation took.
    pub num_env_steps_sampled: u64,
}

/// Process resource use.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Perf {
    /// Peak resident memory of the process so far, MiB.
    #[serde(deserialize_with = "null_is_nan::number")]
    pub peak_rss_mib: f64,
}

impl EvaluationResult {
    /// The result of evaluation `episodes`, which took `env_steps` (no per-policy returns).
    pub(crate) fn of_episodes(episodes: &[EpisodeStats], env_steps: u64) -> Self {
        let mut window = EpisodeWindow::new(episodes.len());
        window.extend(episodes);
        let s = window.summary();
        EvaluationResult {
            episode_return_mean: s.episode_return_mean,
            episode_return_min: s.episode_return_min,
            episode_return_max: s.episode_return_max,
            episode_len_mean: s.episode_len_mean,
            num_episodes: episodes.len() as u64,
            num_env_steps_sampled: env_steps,
            policy_reward_mean: BTreeMap::new(),
        }
    }
}

impl IterationResult {
    /// The counts, rates and episode metrics of iteration `iteration`, which took
    /// `time_this_iter_s` of `time_total_s`, from the lifetime counters `now` and `before` it;
    /// the learner, runner and evaluation parts are the caller's.
    pub(crate) fn counted(
        iteration: u64,
        (time_this_iter_s, time_total_s): (f64, f64),
        (now, before): (&Counters, &Counters),
        summary: &EpisodeSummary,
        num_episodes: u64,
    ) -> Self {
        let per_sec = |now: u64, then: u64| {
            if time_this_iter_s > 0.0 {
                (now - then) as f64 / time_this_iter_s
            } else {
                0.0
            }
        };
        let c = now;
        IterationResult {
            training_iteration: iteration,
            time_this_iter_s,
            time_total_s,
            timestamp: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            timesteps_total: c.num_env_steps_sampled,
            num_env_steps_sampled: c.num_env_steps_sampled,
            num_env_steps_trained: c.num_env_steps_trained,
            num_agent_steps_sampled: c.num_agent_steps_sampled,
            num_agent_steps_trained: c.num_agent_steps_trained,
            num_env_steps_sampled_this_iter: c.num_env_steps_sampled - before.num_env_steps_sampled,
            num_env_steps_trained_this_iter: c.num_env_steps_trained - before.num_env_steps_trained,
            num_agent_steps_sampled_this_iter: c.num_agent_steps_sampled
                - before.num_agent_steps_sampled,
            num_agent_steps_trained_this_iter: c.num_agent_steps_trained
                - before.num_agent_steps_trained,
            num_env_steps_sampled_throughput_per_sec: per_sec(
                c.num_env_steps_sampled,
                before.num_env_steps_sampled,
            ),
            num_env_steps_trained_throughput_per_sec: per_sec(
                c.num_env_steps_trained,
                before.num_env_steps_trained,
            ),
            episode_return_mean: summary.episode_return_mean,
            episode_return_min: summary.episode_return_min,
            episode_return_max: summary.episode_return_max,
            episode_len_mean: summary.episode_len_mean,
            num_episodes,
            episodes_total: c.episodes_total,
            perf: Perf { peak_rss_mib: crate::peak_rss_mib() },
            ..IterationResult::default()
        }
    }

    /// Adds the names RLlib's new API stack reports beside the old stack's (the same numbers):
    /// `num_env_steps_sampled_lifetime` and the other lifetime counts, the episode metrics under
    /// `env_runners/` (each policy's mean return as `module_episode_returns_mean/<policy>`), and
    /// the learner stats under `learners/<policy>/`. So a Tune stop dict or a
    /// `checkpoint_score_attribute` written for either stack finds its key.
    pub(crate) fn with_new_stack_names(mut self) -> Self {
        self.num_env_steps_sampled_lifetime = self.num_env_steps_sampled;
        self.num_env_steps_trained_lifetime = self.num_env_steps_trained;
        self.num_agent_steps_sampled_lifetime = self.num_agent_steps_sampled;
        self.num_episodes_lifetime = self.episodes_total;
        let episodes = [
            ("episode_return_mean", self.episode_return_mean),
            ("episode_return_min", self.episode_return_min),
            ("episode_return_max", self.episode_return_max),
            ("episode_len_mean", self.episode_len_mean),
            ("num_episodes", self.num_episodes as f64),
            ("num_env_steps_sampled", self.num_env_steps_sampled_this_iter as f64),
            ("num_env_steps_sampled_lifetime", self.num_env_steps_sampled as f64),
        ];
        for (key, value) in episodes {
            self.env_runners.insert(key.to_string(), value);
        }
        if self.policy_reward_mean.is_empty() {
            let key = format!("module_episode_returns_mean/{DEFAULT_POLICY_ID}");
            self.env_runners.insert(key, self.episode_return_mean);
        }
        self.learners = self
            .info
            .learner
            .iter()
            .map(|(policy, info)| {
                let mut stats = info.learner_stats.clone();
                let steps = info.num_agent_steps_trained as f64;
                stats.insert("num_module_steps_trained_lifetime".to_string(), steps);
                (policy.clone(), stats)
            })
            .collect();
        self
    }

    /// The result as RLlib's nested result dict.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// The learner stats of the default policy (empty before the first SGD step).
    pub fn learner_stats(&self) -> Option<&BTreeMap<String, f64>> {
        self.info.learner.get(DEFAULT_POLICY_ID).map(|p| &p.learner_stats)
    }

    /// The one-line progress report the `impala` command prints per iteration.
    ///
    /// ```
    /// let r = impala::IterationResult {
    ///     training_iteration: 3, time_total_s: 4.5, num_env_steps_sampled: 30_000,
    ///     num_env_steps_trained: 29_500, episode_return_mean: 187.25, episode_len_mean: 187.25,
    ///     num_env_steps_sampled_throughput_per_sec: 6_800.0, ..Default::default()
    /// };
    /// assert!(r.progress_line().starts_with("iter     3 |    4.5s | sampled     30000"));
    /// ```
    pub fn progress_line(&self) -> String {
        let mut line = format!(
            "iter {:>5} | {:>6.1}s | sampled {:>9} | trained {:>9} | return {:>8.2} | len {:>7.1} \
             | eps {:>4} | {:>7.0} steps/s",
            self.training_iteration,
            self.time_total_s,
            self.num_env_steps_sampled,
            self.num_env_steps_trained,
            self.episode_return_mean,
            self.episode_len_mean,
            self.num_episodes,
            self.num_env_steps_sampled_throughput_per_sec,
        );
        if let Some(loss) = self.learner_stats().and_then(|s| s.get("total_loss")) {
            line.push_str(&format!(" | loss {loss:>9.3}"));
        }
        for (policy, mean) in &self.policy_reward_mean {
            line.push_str(&format!(" | {policy} {mean:.2}"));
        }
        if let Some(e) = &self.evaluation {
            line.push_str(&format!(" | eval {:>8.2}", e.episode_return_mean));
        }
        line
    }
}

/// Reading a result back: serialisation writes non-finite numbers as `null`, so `null` reads as
/// NaN ("not available yet").
mod null_is_nan {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer};

    pub(super) fn number<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
    }

    pub(super) fn numbers<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
        let numbers = Vec::<Option<f64>>::deserialize(d)?;
        Ok(numbers.into_iter().map(|x| x.unwrap_or(f64::NAN)).collect())
    }

    pub(super) fn by_name<'de, D>(d: D) -> Result<BTreeMap<String, f64>, D::Error>
    where
        D: Deserializer<'de>,
    {
        let numbers = BTreeMap::<String, Option<f64>>::deserialize(d)?;
        Ok(numbers.into_iter().map(|(k, x)| (k, x.unwrap_or(f64::NAN))).collect())
    }

    pub(super) fn by_name_nested<'de, D>(
        d: D,
    ) -> Result<BTreeMap<String, BTreeMap<String, f64>>, D::Error>
    where
        D: Deserializer<'de>,
    {
        let nested = BTreeMap::<String, BTreeMap<String, Option<f64>>>::deserialize(d)?;
        Ok(nested
            .into_iter()
            .map(|(k, numbers)| {
                (k, numbers.into_iter().map(|(k, x)| (k, x.unwrap_or(f64::NAN))).collect())
            })
            .collect())
    }
}

/// Flattens a nested JSON object into `a/b/c` keys (Tune's `flatten_dict` with `/`), keeping
/// scalars; arrays are kept as their JSON text.
pub fn flatten(value: &serde_json::Value) -> BTreeMap<String, serde_json::Value> {
    fn walk(prefix: &str, v: &serde_json::Value, out: &mut BTreeMap<String, serde_json::Value>) {
        match v {
            serde_json::Value::Object(map) => {
                for (k, child) in map {
                    let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}/{k}") };
                    walk(&key, child, out);
                }
            }
            other => {
                out.insert(prefix.to_string(), other.clone());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk("", value, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flattened_keys_follow_rllib() {
        let mut r = IterationResult {
            training_iteration: 2,
            episode_return_mean: f64::NAN,
            ..Default::default()
        };
        let stats = BTreeMap::from([("total_loss".to_string(), 1.5)]);
        r.info.learner.insert(
            DEFAULT_POLICY_ID.into(),
            PolicyLearnerInfo { learner_stats: stats, ..Default::default() },
        );
        let flat = flatten(&r.to_json());
        assert_eq!(flat["info/learner/default_policy/learner_stats/total_loss"], 1.5);
        assert_eq!(flat["training_iteration"], 2);
        // NaN (no episode yet) is written as null, never as invalid JSON.
        assert!(flat["episode_return_mean"].is_null());
        assert!(!flat.contains_key("evaluation/episode_return_mean"));
        assert!(flat.contains_key("perf/peak_rss_mib"));
    }

    #[test]
    fn the_new_api_stack_names_carry_the_same_numbers() {
        let mut r = IterationResult {
            num_env_steps_sampled: 1000,
            num_env_steps_sampled_this_iter: 200,
            episodes_total: 12,
            episode_return_mean: 31.5,
            ..Default::default()
        };
        let stats = BTreeMap::from([("policy_loss".to_string(), -0.25)]);
        r.info.learner.insert(
            DEFAULT_POLICY_ID.into(),
            PolicyLearnerInfo {
                learner_stats: stats,
                num_agent_steps_trained: 640,
                ..Default::default()
            },
        );
        let flat = flatten(&r.with_new_stack_names().to_json());
        assert_eq!(flat["env_runners/episode_return_mean"], 31.5);
        assert_eq!(flat["env_runners/module_episode_returns_mean/default_policy"], 31.5);
        assert_eq!(flat["env_runners/num_env_steps_sampled"], 200.0);
        assert_eq!(
            (flat["num_env_steps_sampled_lifetime"].clone(), flat["num_episodes_lifetime"].clone()),
            (1000.into(), 12.into())
        );
        assert_eq!(flat["learners/default_policy/policy_loss"], -0.25);
        assert_eq!(flat["learners/default_policy/num_module_steps_trained_lifetime"], 640.0);
    }

    #[test]
    fn results_read_back_as_written_with_null_as_nan() -> Result<(), serde_json::Error> {
        let mut r = IterationResult {
            training_iteration: 7,
            time_total_s: 1.5,
            episode_return_mean: f64::NAN,
            evaluation: Some(EvaluationResult { episode_return_mean: 20.0, ..Default::default() }),
            ..Default::default()
        };
        r.env_runners.insert("num_healthy_env_runners".into(), f64::NAN);
        r.info.learner_queue.size_quantiles = vec![1.0, f64::NAN];
        let line = serde_json::to_string(&r)?;
        let back: IterationResult = serde_json::from_str(&line)?;
        assert_eq!(back.to_json(), r.to_json());
        assert!(
            back.episode_return_mean.is_nan()
                && back.env_runners["num_healthy_env_runners"].is_nan()
        );
        // A line with only some keys (an older writer, a hand-made file) reads with defaults.
        let short: IterationResult = serde_json::from_str(r#"{"time_total_s": 2.0}"#)?;
        assert_eq!((short.time_total_s, short.training_iteration), (2.0, 0));
        Ok(())
    }
}
