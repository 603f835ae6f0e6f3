//! [`TorchPolicy`]: the env runners' CPU copy of the model (RLlib's rollout-worker policy).

use std::cell::Cell;
use std::sync::Arc;

use impala_core::{CoreError, EnvSpec, Policy, PolicyInput, PolicyOutput, Precision, Weights};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use tch::{Device, Tensor};

use crate::model::{ModelFactory, ModelOutput, Network, Unroll};
use crate::{ActionDistribution, LearnerError, Result};

thread_local! {
    /// Whether this thread is already set up for inference.
    static PREPARED: Cell<bool> = const { Cell::new(false) };
}

/// Runners step many policies side by side: each uses one libtorch thread (OpenMP spinning
/// across threads is very slow on small machines), with denormals flushed as the learner's
/// ([`crate::precision::flush_denormals`]). Set once per calling thread.
fn prepare_inference_thread() {
    PREPARED.with(|done| {
        if !done.get() {
            tch::set_num_threads(1);
            crate::precision::flush_denormals_once();
            done.set(true);
        }
    });
}

/// A CPU inference copy of the learner's model: no gradients, one libtorch thread, seeded
/// sampling (in Rust, from the distribution inputs libtorch computes). Loads the learner's
/// [`Weights`] by copying values into its own tensors; nothing is serialised.
///
/// ```
/// use impala_core::{EnvSpec, Policy, PolicyInput, PolicyOutput, Space};
/// use impala_learner::{ModelSettings, TorchPolicy};
///
/// let spec = EnvSpec {
///     id: "CartPole-v1".into(),
///     observation_space: Space::continuous(vec![-5.0; 4], vec![5.0; 4])?,
///     action_space: Space::Discrete(2),
///     max_episode_steps: Some(500),
/// };
/// // RLlib's default model, the initial weights of model seed 0, action sampling seeded by 7.
/// let mut policy = TorchPolicy::new(&ModelSettings::default(), &spec, 0, 7)?;
/// let mut out = PolicyOutput::default();
/// let obs = [0.0f32; 8]; // two envs
/// policy.compute_actions(&PolicyInput { obs: &obs, num_envs: 2, state: &[], explore: true }, &mut out)?;
/// assert_eq!(out.actions.len(), 2);
/// assert_eq!(out.action_dist_inputs.len(), 4);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct TorchPolicy {
    pub(crate) net: Network,
    /// Where the model runs; inputs go to it and outputs come back to the CPU.
    pub(crate) device: Device,
    rng: SmallRng,
    version: u64,
    /// The snapshot loaded last: setting the same `Arc` again copies nothing.
    loaded: Option<Arc<Weights>>,
}

impl TorchPolicy {
    /// Builds the model `model` makes for `spec` on the CPU (a [`ModelSettings`](crate::ModelSettings)
    /// is one). Its initial weights are those of a learner with the same `model_seed`
    /// ([`LearnerSettings::model_seed`](crate::LearnerSettings)), so runners can act before
    /// the first broadcast; `sample_seed` seeds action sampling.
    pub fn new(
        model: &dyn ModelFactory,
        spec: &EnvSpec,
        model_seed: u64,
        sample_seed: u64,
    ) -> Result<Self> {
        Self::on_device(model, spec, model_seed, sample_seed, Device::Cpu)
    }

    /// [`TorchPolicy::new`] with the model on `device`: inference outside the env runners
    /// (a trained policy serving actions) may run on a GPU. Observations and weights are
    /// copied to it, outputs back to the CPU; action sampling stays in Rust on the CPU.
    pub fn on_device(
        model: &dyn ModelFactory,
        spec: &EnvSpec,
        model_seed: u64,
        sample_seed: u64,
        device: Device,
    ) -> Result<Self> {
        prepare_inference_thread();
        let net = Network::build(model, spec, device, model_seed)?;
        // An inference copy: no parameter needs a gradient.
        for (_, p) in &net.params {
            let _ = p.set_requires_grad(false);
        }
        let rng = SmallRng::seed_from_u64(sample_seed);
        Ok(TorchPolicy { net, device, rng, version: 0, loaded: None })
    }

    /// Runs inference in `precision` from now on, once its device is checked for it
    /// ([`check_precision`](crate::check_precision)). In bf16-mixed the model runs under
    /// bfloat16 autocast and actions are sampled from its logits cast back to float32; the
    /// behaviour log-probabilities are recorded as computed.
    pub fn with_precision(mut self, precision: Precision) -> Result<Self> {
        self.net.set_precision(precision, self.device)?;
        Ok(self)
    }

    /// The model.
    pub fn model(&self) -> &dyn crate::Model {
        self.net.model.as_ref()
    }

    /// The action distribution of the model's outputs.
    pub fn distribution(&self) -> &ActionDistribution {
        &self.net.dist
    }

    fn run(&self, obs: &[f32], num_envs: usize, state: &[f32]) -> Result<ModelOutput> {
        prepare_inference_thread();
        let (obs_dim, state_dim) = (self.net.obs_dim, self.net.state_dim);
        for (what, expected, got) in
            [("obs", num_envs * obs_dim, obs.len()), ("state", num_envs * state_dim, state.len())]
        {
            if expected != got {
                return Err(CoreError::ShapeMismatch { what: what.into(), expected, got }.into());
            }
        }
        let _guard = tch::no_grad_guard();
        let obs = Tensor::f_from_slice(obs)?
            .f_view([num_envs as i64, obs_dim as i64])?
            .f_to_device(self.device)?;
        let state_t;
        let unroll = if state_dim > 0 {
            state_t = Tensor::f_from_slice(state)?
                .f_view([num_envs as i64, state_dim as i64])?
                .f_to_device(self.device)?;
            Some(Unroll { steps: 1, rows: num_envs, state: &state_t, not_done: None })
        } else {
            None
        };
        self.net.forward(&obs, unroll)
    }
}

/// Copies a `[N, ...]` f32 tensor (on any device) into `dst`, resizing it.
fn copy_out(t: &Tensor, dst: &mut Vec<f32>) -> Result<()> {
    let n = t.numel();
    dst.resize(n, 0.0);
    t.f_to_device(Device::Cpu)?.f_contiguous()?.f_copy_data(dst, n)?;
    Ok(())
}

impl Policy for TorchPolicy {
    fn compute_actions(
        &mut self,
        input: &PolicyInput<'_>,
        out: &mut PolicyOutput,
    ) -> impala_core::Result<()> {
        let n = input.num_envs;
        let result = self.run(input.obs, n, input.state)?;
        copy_out(&result.dist_inputs, &mut out.action_dist_inputs)?;
        copy_out(&result.values, &mut out.vf_preds)?;
        match &result.state {
            Some(state) => copy_out(state, &mut out.state_out)?,
            None => out.state_out.clear(),
        }
        let dist = &self.net.dist;
        let (d_in, d_act) = (dist.inputs_dim(), dist.action_dim());
        out.actions.resize(n * d_act, 0.0);
        out.action_logp.resize(n, 0.0);
        for ((inputs, action), logp) in out
            .action_dist_inputs
            .chunks_exact(d_in)
            .zip(out.actions.chunks_exact_mut(d_act))
            .zip(out.action_logp.iter_mut())
        {
            *logp = dist.sample_row(inputs, input.explore, &mut self.rng, action);
        }
        Ok(())
    }

    fn compute_values(
        &mut self,
        obs: &[f32],
        num_envs: usize,
        state: &[f32],
    ) -> impala_core::Result<Vec<f32>> {
        let mut values = Vec::with_capacity(num_envs);
        copy_out(&self.run(obs, num_envs, state)?.values, &mut values)?;
        Ok(values)
    }

    fn state_dim(&self) -> usize {
        self.net.state_dim
    }

    fn set_weights(&mut self, weights: &Arc<Weights>) -> impala_core::Result<()> {
        if self.loaded.as_ref().is_some_and(|w| Arc::ptr_eq(w, weights)) {
            return Ok(());
        }
        if weights.tensors.len() != self.net.params.len() {
            return Err(CoreError::Policy {
                reason: format!(
                    "weights hold {} tensors, the model has {}",
                    weights.tensors.len(),
                    self.net.params.len()
                ),
            });
        }
        // Check every tensor before copying any, so a bad snapshot leaves the policy as it was.
        for ((name, p), w) in self.net.params.iter().zip(&weights.tensors) {
            let shape: Vec<usize> = p.size().iter().map(|&d| d as usize).collect();
            if *name != w.name || shape != w.shape || w.data.len() != p.numel() {
                return Err(CoreError::Policy {
                    reason: format!(
                        "weight `{}` {:?} does not fit model parameter `{name}` {shape:?}",
                        w.name, w.shape
                    ),
                });
            }
        }
        let _guard = tch::no_grad_guard();
        for ((_, p), w) in self.net.params.iter_mut().zip(&weights.tensors) {
            let src = Tensor::f_from_slice(&w.data).and_then(|t| t.f_view(p.size().as_slice()));
            src.and_then(|src| p.f_copy_(&src)).map_err(LearnerError::from)?;
        }
        self.version = weights.version;
        self.loaded = Some(Arc::clone(weights));
        Ok(())
    }

    fn weights_version(&self) -> u64 {
        self.version
    }
}
