//! RLlib's `update_workers_if_necessary` bookkeeping (its `BroadcastUpdateLearnerWeights`
//! step), and the policy-lag measure.

use std::collections::BTreeSet;

use impala_core::SampleBatch;

/// RLlib's `update_workers_if_necessary` bookkeeping (old API stack): count training steps since
/// the last broadcast, remember which runners returned samples since then, and broadcast to
/// exactly those runners once `broadcast_interval` steps have passed and the learner has new
/// weights. Runners that sent nothing keep their weights until they do (they are not sampling
/// with them anyway), as in RLlib's `workers_that_need_updates` set.
///
/// The caller counts the broadcasts (RLlib's `num_weight_broadcasts`), one per `Some`.
///
/// ```
/// use impala_sampler::WeightBroadcaster;
/// let mut b = WeightBroadcaster::new(2);
/// assert_eq!(b.step(&[1, 3], true), None); // 1 step since the last broadcast < 2
/// assert_eq!(b.step(&[2], true), Some(vec![1, 2, 3]));
/// assert_eq!(b.step(&[], true), None); // nobody returned samples
/// ```
#[doc(alias = "BroadcastUpdateLearnerWeights")]
#[doc(alias = "update_workers_if_necessary")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightBroadcaster {
    broadcast_interval: usize,
    steps_since_broadcast: usize,
    need_updates: BTreeSet<usize>,
}

impl WeightBroadcaster {
    /// A broadcaster that sends every `broadcast_interval` training steps (0 acts as 1).
    pub fn new(broadcast_interval: usize) -> Self {
        WeightBroadcaster {
            broadcast_interval: broadcast_interval.max(1),
            steps_since_broadcast: 0,
            need_updates: BTreeSet::new(),
        }
    }

    /// Call once per training step with the ids of the runners that returned samples in it.
    /// Returns the runner ids to send the learner's newest weights to now (sorted), or `None`.
    /// The caller keeps the newest weights until this returns `Some`.
    pub fn step(
        &mut self,
        runners_that_returned: &[usize],
        learner_has_new_weights: bool,
    ) -> Option<Vec<usize>> {
        self.need_updates.extend(runners_that_returned);
        self.steps_since_broadcast += 1;
        if !learner_has_new_weights
            || self.steps_since_broadcast < self.broadcast_interval
            || self.need_updates.is_empty()
        {
            return None;
        }
        self.steps_since_broadcast = 0;
        Some(std::mem::take(&mut self.need_updates).into_iter().collect())
    }

    /// Whether the next [`step`](Self::step) may broadcast (enough steps will have passed):
    /// the moment to ask the learner for a weights snapshot, so it copies its weights only
    /// when they will be sent.
    pub fn due_at_next_step(&self) -> bool {
        self.steps_since_broadcast + 1 >= self.broadcast_interval
    }
}

/// Mean policy lag of a batch: `learner_version` minus the weights version that acted in each
/// row (RLlib's off-policyness measure), saturating at 0.
///
/// ```
/// use impala_core::{SampleBatch, Space};
/// let mut batch = SampleBatch::zeros(1, 2, &Space::Discrete(2), &Space::Discrete(2), 0);
/// batch.weights_version = vec![3, 5];
/// assert_eq!(impala_sampler::policy_lag(&batch, 6), 2.0);
/// ```
pub fn policy_lag(batch: &SampleBatch, learner_version: u64) -> f64 {
    if batch.weights_version.is_empty() {
        return 0.0;
    }
    let total: u64 = batch.weights_version.iter().map(|&v| learner_version.saturating_sub(v)).sum();
    total as f64 / batch.weights_version.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcaster_waits_for_new_weights_and_keeps_needers() {
        let mut b = WeightBroadcaster::new(1);
        assert_eq!(b.step(&[2], false), None);
        assert_eq!(b.step(&[1], true), Some(vec![1, 2]));
        assert_eq!(b.step(&[], true), None);
    }
}
