//! Stop criteria, as Tune's `stop={...}` dict: the run ends after the first iteration whose
//! result meets any of them.

use crate::IterationResult;

/// When to stop training. `None` fields are not checked.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StopCriteria {
    /// Stop once `episode_return_mean` (smoothed over the last 100 episodes) reaches this.
    pub episode_return_mean: Option<f64>,
    /// Stop once this many env steps were sampled (Tune's `timesteps_total`).
    pub timesteps_total: Option<u64>,
    /// Stop after this many iterations.
    pub training_iteration: Option<u64>,
    /// Stop once training took this many seconds (`time_total_s`).
    pub time_total_s: Option<f64>,
}

/// `episode_return_mean >= 450 or time_total_s >= 60`, or `never` without a criterion.
///
/// ```
/// use impala::StopCriteria;
/// let stop = StopCriteria { episode_return_mean: Some(450.0), time_total_s: Some(60.0), ..Default::default() };
/// assert_eq!(stop.to_string(), "episode_return_mean >= 450 or time_total_s >= 60");
/// assert_eq!(StopCriteria::default().to_string(), "never");
/// ```
impl std::fmt::Display for StopCriteria {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(r) = self.episode_return_mean {
            parts.push(format!("episode_return_mean >= {r}"));
        }
        if let Some(t) = self.timesteps_total {
            parts.push(format!("timesteps_total >= {t}"));
        }
        if let Some(i) = self.training_iteration {
            parts.push(format!("training_iteration >= {i}"));
        }
        if let Some(s) = self.time_total_s {
            parts.push(format!("time_total_s >= {s}"));
        }
        if parts.is_empty() {
            f.write_str("never")
        } else {
            f.write_str(&parts.join(" or "))
        }
    }
}

impl StopCriteria {
    /// The criteria an RLlib experiment file gives (`stop: {...}`, by any of RLlib's names for
    /// them; see [`impala_config::StopKey`]).
    ///
    /// ```
    /// use impala::config::StopKey;
    /// use impala::StopCriteria;
    /// let stop = StopCriteria::of_experiment(&[(StopKey::EpisodeReturnMean, 150.0)]);
    /// assert_eq!(stop.episode_return_mean, Some(150.0));
    /// ```
    pub fn of_experiment(stop: &[(impala_config::StopKey, f64)]) -> Self {
        use impala_config::StopKey;
        let mut criteria = StopCriteria::default();
        for &(key, value) in stop {
            match key {
                StopKey::EpisodeReturnMean => criteria.episode_return_mean = Some(value),
                StopKey::TimestepsTotal => criteria.timesteps_total = Some(value.max(0.0) as u64),
                StopKey::TrainingIteration => {
                    criteria.training_iteration = Some(value.max(0.0) as u64)
                }
                StopKey::TimeTotalS => criteria.time_total_s = Some(value),
            }
        }
        criteria
    }

    /// The first criterion `result` meets, described (e.g. `episode_return_mean 452.1 >= 450`).
    ///
    /// ```
    /// use impala::{IterationResult, StopCriteria};
    /// let stop = StopCriteria { episode_return_mean: Some(450.0), ..Default::default() };
    /// let r = IterationResult { episode_return_mean: 455.0, ..Default::default() };
    /// assert!(stop.met_by(&r).is_some());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn met_by(&self, result: &IterationResult) -> Option<String> {
        if let Some(target) = self.episode_return_mean {
            // NaN (no episode finished yet) never meets it.
            if result.episode_return_mean >= target {
                return Some(format!(
                    "episode_return_mean {:.2} >= {target}",
                    result.episode_return_mean
                ));
            }
        }
        if let Some(target) = self.timesteps_total {
            if result.timesteps_total >= target {
                return Some(format!("timesteps_total {} >= {target}", result.timesteps_total));
            }
        }
        if let Some(target) = self.training_iteration {
            if result.training_iteration >= target {
                return Some(format!(
                    "training_iteration {} >= {target}",
                    result.training_iteration
                ));
            }
        }
        if let Some(target) = self.time_total_s {
            if result.time_total_s >= target {
                return Some(format!("time_total_s {:.1} >= {target}", result.time_total_s));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_criterion_stops_and_nan_does_not() {
        let r = IterationResult {
            training_iteration: 5,
            timesteps_total: 1000,
            time_total_s: 12.0,
            episode_return_mean: f64::NAN,
            ..Default::default()
        };
        let none = StopCriteria::default();
        assert_eq!(none.met_by(&r), None);
        let reward = StopCriteria { episode_return_mean: Some(0.0), ..none };
        assert_eq!(reward.met_by(&r), None);
        assert!(StopCriteria { timesteps_total: Some(1000), ..none }.met_by(&r).is_some());
        assert!(StopCriteria { training_iteration: Some(5), ..none }.met_by(&r).is_some());
        assert!(StopCriteria { time_total_s: Some(12.0), ..none }.met_by(&r).is_some());
        assert_eq!(StopCriteria { time_total_s: Some(12.5), ..none }.met_by(&r), None);
    }
}
