//! The time-major sample batch that env runners produce and the learner trains on.

use std::borrow::Borrow;
use std::ops::Range;

use crate::obs::gather;
use crate::{CoreError, Observations, Result, Space};

/// Experience from `num_rows` environment rows of `fragment_len` consecutive steps each, stored
/// **time-major**: per-step fields are `[T, B, width]` row-major, so the value of row `b` at step
/// `t` starts at `(t * B + b) * width`. This is the layout V-trace works on (RLlib's
/// `make_time_major` output) and the one a vectorised runner writes naturally.
///
/// Each row is one contiguous slice of one env's trajectory (episodes may end inside a row; the
/// env was reset there). The row's bootstrap observation (the observation after its last step)
/// lets the learner compute `V(x_T)` with its current network. When an episode was truncated
/// (time limit) at step `t`, `truncation_values[t, b]` holds the behaviour network's value of
/// that episode's final observation, so the learner can fold `gamma * V(final_obs)` into the
/// reward and cut the trace there (see DESIGN.md).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SampleBatch {
    /// T: steps per row (`rollout_fragment_length`).
    pub fragment_len: usize,
    /// B: number of rows.
    pub num_rows: usize,
    /// Shape of one observation (product = obs width).
    pub obs_shape: Vec<usize>,
    /// Values per action (see [`Space::flat_dim`]).
    pub action_dim: usize,
    /// Values per action-distribution input (see [`Space::dist_inputs_dim`]).
    pub dist_inputs_dim: usize,
    /// Values per recurrent state (0 for feed-forward policies).
    pub state_dim: usize,
    /// Observations `x_t`, `[T, B, obs]` (bytes for a [`Space::Bytes`] observation space).
    pub obs: Observations,
    /// Actions `a_t`, `[T, B, action_dim]`.
    pub actions: Vec<f32>,
    /// Rewards `r_t`, `[T, B]`.
    pub rewards: Vec<f32>,
    /// Whether step t ended its episode in a terminal state, `[T, B]`.
    pub terminateds: Vec<bool>,
    /// Whether step t ended its episode by truncation, `[T, B]`.
    pub truncateds: Vec<bool>,
    /// Behaviour log-probabilities `log mu(a_t|x_t)`, `[T, B]`.
    pub action_logp: Vec<f32>,
    /// Behaviour action-distribution inputs, `[T, B, dist_inputs_dim]`.
    pub action_dist_inputs: Vec<f32>,
    /// Behaviour value predictions `V_mu(x_t)`, `[T, B]`.
    pub vf_preds: Vec<f32>,
    /// Behaviour value of the final observation where step t was truncated, else 0; `[T, B]`.
    pub truncation_values: Vec<f32>,
    /// The observation after each row's last step, `[B, obs]`.
    pub bootstrap_obs: Observations,
    /// Recurrent state at the start of each row, `[B, state_dim]`.
    pub state_in: Vec<f32>,
    /// Weights version that acted in each row, `[B]`.
    pub weights_version: Vec<u64>,
}

impl SampleBatch {
    /// The shape one observation of `observation_space` has in a batch: its space's shape, and
    /// `[1]` for a `Discrete` space (the index as one value).
    ///
    /// ```
    /// use impala_core::{SampleBatch, Space};
    /// assert_eq!(SampleBatch::obs_shape_of(&Space::Discrete(5)), vec![1]);
    /// assert_eq!(SampleBatch::obs_shape_of(&Space::MultiDiscrete(vec![2, 3])), vec![2]);
    /// ```
    pub fn obs_shape_of(observation_space: &Space) -> Vec<usize> {
        match observation_space {
            Space::Discrete(_) => vec![1],
            other => other.shape(),
        }
    }

    /// A zero-filled batch of `fragment_len` steps by `num_rows` rows for these spaces.
    pub fn zeros(
        fragment_len: usize,
        num_rows: usize,
        observation_space: &Space,
        action_space: &Space,
        state_dim: usize,
    ) -> Self {
        let n = fragment_len * num_rows;
        let obs_shape = Self::obs_shape_of(observation_space);
        let obs_dim: usize = obs_shape.iter().product();
        let action_dim = action_space.flat_dim();
        let dist_inputs_dim = action_space.dist_inputs_dim();
        SampleBatch {
            fragment_len,
            num_rows,
            obs_shape,
            action_dim,
            dist_inputs_dim,
            state_dim,
            obs: Observations::zeros(observation_space, n * obs_dim),
            actions: vec![0.0; n * action_dim],
            rewards: vec![0.0; n],
            terminateds: vec![false; n],
            truncateds: vec![false; n],
            action_logp: vec![0.0; n],
            action_dist_inputs: vec![0.0; n * dist_inputs_dim],
            vf_preds: vec![0.0; n],
            truncation_values: vec![0.0; n],
            bootstrap_obs: Observations::zeros(observation_space, num_rows * obs_dim),
            state_in: vec![0.0; num_rows * state_dim],
            weights_version: vec![0; num_rows],
        }
    }

    /// Values per observation.
    pub fn obs_dim(&self) -> usize {
        self.obs_shape.iter().product()
    }

    /// Env steps in the batch (`T * B`), RLlib's `batch.count`.
    pub fn env_steps(&self) -> usize {
        self.fragment_len * self.num_rows
    }

    /// Agent steps; equal to env steps for single-agent envs.
    pub fn agent_steps(&self) -> usize {
        self.env_steps()
    }

    /// Index of step `t` of row `b` in the `[T, B]` fields.
    pub fn index(&self, t: usize, b: usize) -> usize {
        t * self.num_rows + b
    }

    /// Checks that every field has the length its dimensions promise.
    pub fn validate(&self) -> Result<()> {
        let n = self.env_steps();
        let b = self.num_rows;
        let checks: [(&str, usize, usize); 12] = [
            ("obs", n * self.obs_dim(), self.obs.len()),
            ("actions", n * self.action_dim, self.actions.len()),
            ("rewards", n, self.rewards.len()),
            ("terminateds", n, self.terminateds.len()),
            ("truncateds", n, self.truncateds.len()),
            ("action_logp", n, self.action_logp.len()),
            ("action_dist_inputs", n * self.dist_inputs_dim, self.action_dist_inputs.len()),
            ("vf_preds", n, self.vf_preds.len()),
            ("truncation_values", n, self.truncation_values.len()),
            ("bootstrap_obs", b * self.obs_dim(), self.bootstrap_obs.len()),
            ("state_in", b * self.state_dim, self.state_in.len()),
            ("weights_version", b, self.weights_version.len()),
        ];
        for (what, expected, got) in checks {
            if expected != got {
                return Err(CoreError::ShapeMismatch { what: what.into(), expected, got });
            }
        }
        if self.obs.kind() != self.bootstrap_obs.kind() {
            return Err(CoreError::IncompatibleBatches {
                reason: format!(
                    "obs are {} but bootstrap_obs are {}",
                    self.obs.kind(),
                    self.bootstrap_obs.kind()
                ),
            });
        }
        Ok(())
    }

    /// Concatenates batches along the row (B) axis, as RLlib's `concat_samples` builds a train
    /// batch from fragments. All parts must share T and the per-step layouts. Parts may be owned,
    /// borrowed or shared (`&[SampleBatch]`, `&[&SampleBatch]`, `&[Arc<SampleBatch>]`), so
    /// callers holding replayed batches copy the data once.
    ///
    /// ```
    /// use impala_core::{SampleBatch, Space};
    /// let (o, a) = (Space::Discrete(3), Space::Discrete(2));
    /// let mut x = SampleBatch::zeros(2, 1, &o, &a, 0);
    /// x.rewards = vec![1.0, 2.0];
    /// let mut y = SampleBatch::zeros(2, 2, &o, &a, 0);
    /// y.rewards = vec![3.0, 4.0, 5.0, 6.0];
    /// let xy = SampleBatch::concat(&[x, y])?;
    /// // time-major: step 0 of rows (x0, y0, y1), then step 1.
    /// assert_eq!(xy.rewards, vec![1.0, 3.0, 4.0, 2.0, 5.0, 6.0]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn concat<B: Borrow<SampleBatch>>(parts: &[B]) -> Result<SampleBatch> {
        let parts: Vec<&SampleBatch> = parts.iter().map(Borrow::borrow).collect();
        let parts = parts.as_slice();
        let Some(&first) = parts.first() else {
            return Err(CoreError::IncompatibleBatches { reason: "no batches given".into() });
        };
        for (i, p) in parts.iter().enumerate() {
            p.validate()?;
            let same = p.fragment_len == first.fragment_len
                && p.obs_shape == first.obs_shape
                && p.obs.kind() == first.obs.kind()
                && p.action_dim == first.action_dim
                && p.dist_inputs_dim == first.dist_inputs_dim
                && p.state_dim == first.state_dim;
            if !same {
                return Err(CoreError::IncompatibleBatches {
                    reason: format!(
                        "batch {i} has T={} obs={:?} {} action_dim={} dist_inputs_dim={} \
                         state_dim={}, batch 0 has T={} obs={:?} {} action_dim={} \
                         dist_inputs_dim={} state_dim={}",
                        p.fragment_len,
                        p.obs_shape,
                        p.obs.kind(),
                        p.action_dim,
                        p.dist_inputs_dim,
                        p.state_dim,
                        first.fragment_len,
                        first.obs_shape,
                        first.obs.kind(),
                        first.action_dim,
                        first.dist_inputs_dim,
                        first.state_dim
                    ),
                });
            }
        }
        let t = first.fragment_len;
        let rows: Vec<usize> = parts.iter().map(|p| p.num_rows).collect();
        let (od, sd) = (first.obs_dim(), first.state_dim);
        // Per-step fields interleave the parts step by step; per-row fields follow each other.
        let steps = |w: usize| interleaved(&rows, t, w);
        let per_row = |w: usize| interleaved(&rows, 1, w);
        let obs =
            |f: fn(&SampleBatch) -> &Observations| parts.iter().map(|p| f(p)).collect::<Vec<_>>();
        Ok(SampleBatch {
            fragment_len: t,
            num_rows: rows.iter().sum(),
            obs_shape: first.obs_shape.clone(),
            action_dim: first.action_dim,
            dist_inputs_dim: first.dist_inputs_dim,
            state_dim: first.state_dim,
            obs: Observations::gather(&obs(|p| &p.obs), steps(od))?,
            actions: gather_field(parts, |p| &p.actions, steps(first.action_dim)),
            rewards: gather_field(parts, |p| &p.rewards, steps(1)),
            terminateds: gather_field(parts, |p| &p.terminateds, steps(1)),
            truncateds: gather_field(parts, |p| &p.truncateds, steps(1)),
            action_logp: gather_field(parts, |p| &p.action_logp, steps(1)),
            action_dist_inputs: gather_field(
                parts,
                |p| &p.action_dist_inputs,
                steps(first.dist_inputs_dim),
            ),
            vf_preds: gather_field(parts, |p| &p.vf_preds, steps(1)),
            truncation_values: gather_field(parts, |p| &p.truncation_values, steps(1)),
            bootstrap_obs: Observations::gather(&obs(|p| &p.bootstrap_obs), per_row(od))?,
            state_in: gather_field(parts, |p| &p.state_in, per_row(sd)),
            weights_version: gather_field(parts, |p| &p.weights_version, per_row(1)),
        })
    }

    /// The rows `start..end` as a new batch (used to shard a train batch across towers).
    pub fn rows(&self, start: usize, end: usize) -> Result<SampleBatch> {
        if start > end || end > self.num_rows {
            return Err(CoreError::ShapeMismatch {
                what: format!("rows {start}..{end}"),
                expected: self.num_rows,
                got: end,
            });
        }
        self.validate()?;
        let nb = end - start;
        let (t, b, od) = (self.fragment_len, self.num_rows, self.obs_dim());
        let (sd, me) = (self.state_dim, [self]);
        let steps = |w: usize| selected(t, b, start, end, w);
        let per_row = |w: usize| selected(1, b, start, end, w);
        Ok(SampleBatch {
            fragment_len: t,
            num_rows: nb,
            obs_shape: self.obs_shape.clone(),
            action_dim: self.action_dim,
            dist_inputs_dim: self.dist_inputs_dim,
            state_dim: sd,
            obs: Observations::gather(&[&self.obs], steps(od))?,
            actions: gather_field(&me, |p| &p.actions, steps(self.action_dim)),
            rewards: gather_field(&me, |p| &p.rewards, steps(1)),
            terminateds: gather_field(&me, |p| &p.terminateds, steps(1)),
            truncateds: gather_field(&me, |p| &p.truncateds, steps(1)),
            action_logp: gather_field(&me, |p| &p.action_logp, steps(1)),
            action_dist_inputs: gather_field(
                &me,
                |p| &p.action_dist_inputs,
                steps(self.dist_inputs_dim),
            ),
            vf_preds: gather_field(&me, |p| &p.vf_preds, steps(1)),
            truncation_values: gather_field(&me, |p| &p.truncation_values, steps(1)),
            bootstrap_obs: Observations::gather(&[&self.bootstrap_obs], per_row(od))?,
            state_in: gather_field(&me, |p| &p.state_in, per_row(sd)),
            weights_version: gather_field(&me, |p| &p.weights_version, per_row(1)),
        })
    }
}

/// `field` of every part, concatenated by `pieces` (part, range of values).
fn gather_field<V: Copy>(
    parts: &[&SampleBatch],
    field: fn(&SampleBatch) -> &[V],
    pieces: impl Iterator<Item = (usize, Range<usize>)>,
) -> Vec<V> {
    gather(&parts.iter().map(|p| field(p)).collect::<Vec<_>>(), pieces)
}

/// The pieces (part, range of values) that interleave `[T, B_i, w]` fields of parts with
/// `rows[i]` rows into one `[T, sum B_i, w]` field (with `t = 1`: per-row fields one after
/// the other).
fn interleaved(
    rows: &[usize],
    t: usize,
    w: usize,
) -> impl Iterator<Item = (usize, Range<usize>)> + '_ {
    (0..t).flat_map(move |step| {
        rows.iter().enumerate().map(move |(i, &b)| (i, step * b * w..(step + 1) * b * w))
    })
}

/// The pieces of rows `start..end` of one `[T, B, w]` field.
fn selected(
    t: usize,
    b: usize,
    start: usize,
    end: usize,
    w: usize,
) -> impl Iterator<Item = (usize, Range<usize>)> {
    (0..t).map(move |step| (0, (step * b + start) * w..(step * b + end) * w))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbered(t: usize, b: usize, offset: f32) -> SampleBatch {
        let mut s = SampleBatch::zeros(t, b, &Space::Discrete(4), &Space::Discrete(2), 1);
        for (i, r) in s.rewards.iter_mut().enumerate() {
            *r = offset + i as f32;
        }
        let bootstrap: Vec<f32> = (0..s.bootstrap_obs.len()).map(|i| offset + i as f32).collect();
        s.bootstrap_obs.write(0, &bootstrap);
        s.weights_version = (0..b as u64).collect();
        s
    }

    #[test]
    fn concat_then_rows_round_trips() -> Result<()> {
        let (x, y) = (numbered(3, 2, 0.0), numbered(3, 3, 100.0));
        let xy = SampleBatch::concat(&[x.clone(), y.clone()])?;
        assert_eq!(xy.num_rows, 5);
        xy.validate()?;
        assert_eq!(xy.rows(0, 2)?, x);
        assert_eq!(xy.rows(2, 5)?, y);
        Ok(())
    }

    #[test]
    fn concat_rejects_mismatched_fragments() {
        let err = SampleBatch::concat(&[numbered(3, 1, 0.0), numbered(4, 1, 0.0)]);
        assert!(matches!(err, Err(CoreError::IncompatibleBatches { .. })));
        assert!(SampleBatch::concat::<SampleBatch>(&[]).is_err());
    }

    #[test]
    fn validate_names_the_field() {
        let mut s = numbered(2, 2, 0.0);
        s.vf_preds.pop();
        let err = s.validate().map_err(|e| e.to_string());
        assert!(err.is_err_and(|e| e.contains("vf_preds")));
    }

    #[test]
    fn bytes_stay_bytes_through_concat_and_rows() -> Result<()> {
        let frames = Space::Bytes { shape: vec![2, 2] };
        let part = |b: usize, first: u8| {
            let mut s = SampleBatch::zeros(3, b, &frames, &Space::Discrete(2), 0);
            let values: Vec<f32> = (0..s.obs.len()).map(|i| f32::from(first) + i as f32).collect();
            s.obs.write(0, &values);
            s.bootstrap_obs.write(0, &values[..s.bootstrap_obs.len()]);
            s
        };
        let (x, y) = (part(1, 0), part(2, 200));
        let xy = SampleBatch::concat(&[&x, &y])?;
        assert_eq!(xy.obs.kind(), "bytes");
        assert_eq!(xy.rows(0, 1)?, x);
        assert_eq!(xy.rows(1, 3)?, y);
        assert_eq!(y.obs.as_bytes().map(|v| v[v.len() - 1]), Some(223));
        let floats = numbered(3, 1, 0.0);
        let mixed = SampleBatch::concat(&[&x, &floats]).map_err(|e| e.to_string());
        assert!(mixed.is_err_and(|e| e.contains("bytes")));
        Ok(())
    }

    #[test]
    fn rows_out_of_range_is_an_error() {
        assert!(numbered(2, 2, 0.0).rows(1, 3).is_err());
    }
}
