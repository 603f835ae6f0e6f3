//! Turning a time-major [`SampleBatch`] into per-tower tensors (RLlib's
//! `load_batch_into_buffer`): the part of a train batch that loader threads prepare ahead of the
//! SGD step.

use impala_core::{Observations, SampleBatch};
use impala_profile::{span, Activity};
use tch::{Device, Tensor};

use crate::{LearnerError, Result};

/// A train batch split row-wise into one shard per tower, each on its tower's device.
#[derive(Debug)]
pub struct LoadedBatch {
    pub(crate) shards: Vec<Shard>,
    /// Env steps in the whole batch.
    pub env_steps: usize,
    /// Agent steps in the whole batch.
    pub agent_steps: usize,
    /// The mean over the batch's rows of the weights version that sampled them.
    pub(crate) mean_weights_version: f64,
}

/// The rows of one tower: tensors the network reads on the device, plus the `[T, B]` inputs of
/// V-trace on the CPU (where the targets are computed).
#[derive(Debug)]
pub(crate) struct Shard {
    /// T.
    pub steps: usize,
    /// B.
    pub rows: usize,
    /// `[T * B, obs_dim]`, floats or bytes (the model scales bytes on the device).
    pub obs: Tensor,
    /// `[T * B, action_dim]`.
    pub actions: Tensor,
    /// `[B, obs_dim]`.
    pub bootstrap_obs: Tensor,
    /// `[B, state_dim]`.
    pub state_in: Tensor,
    /// `[T, B, 1]`: 0 after steps that ended an episode (recurrent models only).
    pub not_done: Option<Tensor>,
    /// Behaviour log-probs `log mu(a_t|x_t)`, `[T, B]`.
    pub behaviour_logp: Vec<f32>,
    /// Rewards with `gamma * V(final_obs)` folded in at truncated steps, `[T, B]`.
    pub rewards: Vec<f32>,
    /// `gamma * (1 - (terminated || truncated))`, `[T, B]`.
    pub discounts: Vec<f32>,
    /// Behaviour values (the A3C loss's advantage baseline), `[T, B]`.
    pub vf_preds: Vec<f32>,
}

/// What a batch must look like for a model, and where its shards go. Cheap to clone: every
/// loader thread holds one.
#[derive(Debug, Clone)]
pub struct BatchLoader {
    pub(crate) devices: Vec<Device>,
    pub(crate) gamma: f32,
    pub(crate) obs_dim: usize,
    pub(crate) action_dim: usize,
    pub(crate) state_dim: usize,
}

impl BatchLoader {
    /// Checks `batch` against the model, splits its rows across the towers and copies them to
    /// the towers' devices.
    pub fn load(&self, batch: &SampleBatch) -> Result<LoadedBatch> {
        let _loading = span(Activity::LearnerLoad);
        batch.validate()?;
        let mismatch = |what: &str, model: usize, got: usize| LearnerError::Batch {
            reason: format!("the model expects {what} {model}, the batch has {got}"),
        };
        if batch.obs_dim() != self.obs_dim {
            return Err(mismatch("observations of", self.obs_dim, batch.obs_dim()));
        }
        if batch.action_dim != self.action_dim {
            return Err(mismatch("actions of", self.action_dim, batch.action_dim));
        }
        if batch.state_dim != self.state_dim {
            return Err(mismatch("recurrent states of", self.state_dim, batch.state_dim));
        }
        let towers = self.devices.len();
        if batch.num_rows < towers || batch.fragment_len == 0 {
            return Err(LearnerError::Batch {
                reason: format!(
                    "{} rows of {} steps cannot feed {towers} tower(s)",
                    batch.num_rows, batch.fragment_len
                ),
            });
        }
        let shards = if towers == 1 {
            vec![self.shard(batch, self.devices[0])?]
        } else {
            let b = batch.num_rows;
            (0..towers)
                .map(|i| {
                    self.shard(&batch.rows(i * b / towers, (i + 1) * b / towers)?, self.devices[i])
                })
                .collect::<Result<Vec<_>>>()?
        };
        let versions = &batch.weights_version;
        let mean_weights_version = if versions.is_empty() {
            0.0
        } else {
            versions.iter().map(|&v| v as f64).sum::<f64>() / versions.len() as f64
        };
        Ok(LoadedBatch {
            shards,
            env_steps: batch.env_steps(),
            agent_steps: batch.agent_steps(),
            mean_weights_version,
        })
    }

    fn shard(&self, batch: &SampleBatch, device: Device) -> Result<Shard> {
        let (t, b) = (batch.fragment_len, batch.num_rows);
        let n = t * b;
        // Bytes travel to the device as bytes: a quarter of the copy.
        let upload_obs = |obs: &Observations, rows: usize| -> Result<Tensor> {
            let shape = [rows as i64, self.obs_dim as i64];
            match obs {
                Observations::F32(v) => upload(v, &shape, device),
                Observations::Bytes(v) => upload(v, &shape, device),
            }
        };
        let gamma = self.gamma;
        let mut rewards = batch.rewards.clone();
        let mut discounts = vec![0.0f32; n];
        for i in 0..n {
            let (term, trunc) = (batch.terminateds[i], batch.truncateds[i]);
            if trunc && !term {
                // DESIGN.md: bootstrap a time-limit truncation from the final observation's
                // value and cut the trace there.
                rewards[i] += gamma * batch.truncation_values[i];
            }
            discounts[i] = if term || trunc { 0.0 } else { gamma };
        }
        let not_done = if self.state_dim > 0 {
            let nd: Vec<f32> = (0..n)
                .map(|i| if batch.terminateds[i] || batch.truncateds[i] { 0.0 } else { 1.0 })
                .collect();
            Some(upload(&nd, &[t as i64, b as i64, 1], device)?)
        } else {
            None
        };
        Ok(Shard {
            steps: t,
            rows: b,
            obs: upload_obs(&batch.obs, n)?,
            actions: upload(&batch.actions, &[n as i64, self.action_dim as i64], device)?,
            bootstrap_obs: upload_obs(&batch.bootstrap_obs, b)?,
            state_in: upload(&batch.state_in, &[b as i64, self.state_dim as i64], device)?,
            not_done,
            behaviour_logp: batch.action_logp.clone(),
            rewards,
            discounts,
            vf_preds: batch.vf_preds.clone(),
        })
    }
}

/// `values` as a tensor of `shape` on `device`. To a GPU they are copied straight from the
/// batch's memory: a host tensor in between would be a second copy into freshly allocated
/// pages, which took longer than the copy to the GPU itself (19 ms against 4 ms for 2,000
/// 84x84x4 frames on an H200 machine, docs/GPU.md).
fn upload<T: tch::kind::Element>(values: &[T], shape: &[i64], device: Device) -> Result<Tensor> {
    let numel: i64 = shape.iter().product();
    if device == Device::Cpu || usize::try_from(numel).ok() != Some(values.len()) {
        return Ok(Tensor::f_from_slice(values)?.f_view(shape)?);
    }
    // SAFETY: the view reads `numel` (checked: `values.len()`) elements of `values`, which
    // outlive it: `to_device` without `non_blocking` returns once the copy is done, and the
    // view is dropped here.
    #[allow(unsafe_code, reason = "a borrowed view of the batch, copied to the GPU at once")]
    let view = unsafe {
        Tensor::f_from_blob(values.as_ptr().cast::<u8>(), shape, &[], T::KIND, Device::Cpu)?
    };
    Ok(view.f_to_device(device)?)
}
