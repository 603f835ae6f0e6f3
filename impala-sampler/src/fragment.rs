//! The fragment kinds an [`EnvRunnerGroup`](crate::EnvRunnerGroup) delivers: what the group needs
//! of a fragment to count it, drop it and measure its lag, whatever runner sampled it.

use crate::{policy_lag, Fragment, MultiAgentFragment, RunnerReply};

/// A fragment kind a group can deliver: [`Fragment`] for single-agent runs,
/// [`MultiAgentFragment`] for multi-agent ones (which also takes single-agent runners' fragments,
/// as a batch of one policy).
pub trait RunnerFragment: Sized + Send + 'static {
    /// The fragment a reply carries, or the reply back when it carries none of this kind.
    fn from_reply(reply: RunnerReply) -> std::result::Result<Self, RunnerReply>;

    /// The runner that sampled it (0 = the local runner).
    fn runner_id(&self) -> usize;

    /// Env steps it holds, for the dropped-steps count.
    fn env_steps(&self) -> usize;

    /// Mean policy lag of its rows against `latest[p]` (the newest weights version of policy
    /// p; None = unknown, lag 0).
    fn policy_lag(&self, latest: &[Option<u64>]) -> f64;
}

/// The newest version of policy `p`, if known.
fn latest_of(latest: &[Option<u64>], p: usize) -> Option<u64> {
    latest.get(p).copied().flatten()
}

impl RunnerFragment for Fragment {
    fn from_reply(reply: RunnerReply) -> std::result::Result<Self, RunnerReply> {
        match reply {
            RunnerReply::Fragment(fragment) => Ok(*fragment),
            other => Err(other),
        }
    }

    fn runner_id(&self) -> usize {
        self.runner_id
    }

    fn env_steps(&self) -> usize {
        self.batch.env_steps()
    }

    fn policy_lag(&self, latest: &[Option<u64>]) -> f64 {
        latest_of(latest, 0).map_or(0.0, |version| policy_lag(&self.batch, version))
    }
}

impl RunnerFragment for MultiAgentFragment {
    fn from_reply(reply: RunnerReply) -> std::result::Result<Self, RunnerReply> {
        match reply {
            RunnerReply::MultiAgentFragment(fragment) => Ok(*fragment),
            RunnerReply::Fragment(fragment) => Ok(MultiAgentFragment::from(*fragment)),
            other => Err(other),
        }
    }

    fn runner_id(&self) -> usize {
        self.runner_id
    }

    fn env_steps(&self) -> usize {
        self.env_steps
    }

    /// Weighted by rows, so a policy with few rows weighs little.
    fn policy_lag(&self, latest: &[Option<u64>]) -> f64 {
        let (mut total, mut rows) = (0.0, 0);
        for (p, batch) in self.batches.iter().enumerate() {
            let n = batch.weights_version.len();
            if let Some(version) = latest_of(latest, p) {
                total += policy_lag(batch, version) * n as f64;
            }
            rows += n;
        }
        if rows == 0 {
            0.0
        } else {
            total / rows as f64
        }
    }
}
