//! The [`Learner`]: model towers, optimizers and the IMPALA loss; one SGD step per call.

use impala_profile::{span, Activity};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use impala_core::{EnvSpec, NamedTensor, SampleBatch, Weights};
use impala_core::{GradClipBy, LossReduction, OptType};
use tch::{Device, Kind, Tensor};

use crate::batch::{BatchLoader, LoadedBatch, Shard};
use crate::model::{ModelFactory, Network, Unroll};
use crate::optim::{clip_grad_by, Optimizer, OptimizerKind};
use crate::settings::{LearnerSettings, LossSettings, OptimizerSettings};
use crate::{LearnerError, Result};

/// The model file of a checkpoint directory.
pub const MODEL_FILE: &str = "model.safetensors";
/// The optimizer-state file of a checkpoint directory (also holds the version and step counters).
pub const LEARNER_STATE_FILE: &str = "learner_state.safetensors";

/// RLlib's learner stats for one SGD step, under RLlib's names (`learner_stats`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LearnerStats {
    /// `policy_loss - entropy_coeff * entropy_sum + vf_loss_coeff * vf_loss` (reduced).
    pub total_loss: f64,
    /// `-sum(log pi(a|x) * pg_advantages)` (a mean with `loss_reduction = mean`).
    pub policy_loss: f64,
    /// `0.5 * sum((V(x) - vs)^2)` (a mean with `loss_reduction = mean`).
    pub vf_loss: f64,
    /// Mean entropy per step.
    pub entropy: f64,
    /// `max(-1, 1 - var(vs - V) / var(vs))`.
    pub vf_explained_var: f64,
    /// As RLlib's `apply_grad_clipping`: the sum over optimizers of `min(norm, grad_clip)`.
    pub grad_gnorm: f64,
    /// Global norm of the weights before the step.
    pub var_gnorm: f64,
    /// Learning rate of this step (from `lr_schedule` when set).
    pub cur_lr: f64,
    /// Entropy coefficient of this step (from `entropy_coeff_schedule` when set).
    pub entropy_coeff: f64,
    /// Updates done so far, including this one (the published weights' version).
    pub num_grad_updates: u64,
    /// How stale the batch was at this step: updates between the weights that sampled its
    /// steps and the weights this step started from, averaged over the steps (Sample
    /// Factory's `version_diff`). The env runners' `policy_lag_mean` counts only up to the
    /// batch's delivery; this adds the time it waited in the learner queue.
    pub policy_lag: f64,
}

/// One model copy on one device.
#[derive(Debug)]
struct Tower {
    net: Network,
}

impl Tower {
    fn new(model: &dyn ModelFactory, spec: &EnvSpec, device: Device, seed: u64) -> Result<Self> {
        Ok(Tower { net: Network::build(model, spec, device, seed)? })
    }

    /// The trainable parameters, sorted by name.
    fn params(&self) -> &[(String, Tensor)] {
        &self.net.params
    }

    /// Copies `from`'s weights into this tower's.
    fn copy_from(&self, from: &Tower) -> Result<()> {
        let _guard = tch::no_grad_guard();
        for ((_, dst), (_, src)) in self.params().iter().zip(from.params()) {
            dst.shallow_clone().f_copy_(src)?;
        }
        Ok(())
    }
}

/// A tower's loss terms on its shard, as tensors (sums over its steps) and the CPU targets.
struct TowerLoss {
    /// `[pi_sum, vf_sum, entropy_sum]` on the tower's device.
    sums: Tensor,
    loss_wo_vf: Tensor,
    vf_loss: Tensor,
    total: Tensor,
    vs: Vec<f32>,
    values: Vec<f32>,
}

/// The learner: one model tower per device of the learner plan (one on the CPU by default),
/// the optimizer(s) and the V-trace loss of RLlib's old-stack torch policy. One
/// [`Learner::update`] is one SGD step. Exactly one thread owns it (tensors are `Send`, not
/// `Sync`).
///
/// ```
/// use impala_core::{EnvSpec, SampleBatch, Space};
/// use impala_learner::{Learner, LearnerSettings};
///
/// let spec = EnvSpec {
///     id: "Toy".into(),
///     observation_space: Space::continuous(vec![-1.0; 4], vec![1.0; 4])?,
///     action_space: Space::Discrete(2),
///     max_episode_steps: None,
/// };
/// let mut settings = LearnerSettings::default();
/// settings.model.fcnet_hiddens = vec![16];
/// let mut learner = Learner::new(&settings, &spec, tch::Device::Cpu)?;
/// let mut batch = SampleBatch::zeros(5, 2, &spec.observation_space, &spec.action_space, 0);
/// batch.action_logp = vec![(0.5f32).ln(); 10];
/// let stats = learner.update(&batch, 0)?;
/// assert!(stats.total_loss.is_finite());
/// assert_eq!(learner.weights()?.version, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Learner {
    loss: LossSettings,
    optimizer: OptimizerSettings,
    towers: Vec<Tower>,
    /// Optimizers with the indices (into the sorted parameters) of the parameters they own.
    optimizers: Vec<(Optimizer, Vec<usize>)>,
    loader: BatchLoader,
    version: u64,
    agent_steps_trained: u64,
}

impl Learner {
    /// A learner with one tower on `device`.
    pub fn new(settings: &LearnerSettings, spec: &EnvSpec, device: Device) -> Result<Self> {
        Self::with_devices(settings, spec, &[device])
    }

    /// A learner with one tower per device (see [`learner_devices`](crate::learner_devices));
    /// the first device holds the optimizer state. Every tower starts from the same weights,
    /// seeded by `settings.model_seed`.
    pub fn with_devices(
        settings: &LearnerSettings,
        spec: &EnvSpec,
        devices: &[Device],
    ) -> Result<Self> {
        Self::with_model(settings, &settings.model, spec, devices)
    }

    /// [`Learner::with_devices`] training the models `model` builds instead of
    /// `settings.model`'s.
    pub fn with_model(
        settings: &LearnerSettings,
        model: &dyn ModelFactory,
        spec: &EnvSpec,
        devices: &[Device],
    ) -> Result<Self> {
        if devices.is_empty() {
            return Err(LearnerError::Config {
                reason: "a learner needs at least one device".into(),
            });
        }
        let towers = devices
            .iter()
            .map(|&d| {
                let mut tower = Tower::new(model, spec, d, settings.model_seed)?;
                tower.net.set_precision(settings.precision, d)?;
                Ok(tower)
            })
            .collect::<Result<Vec<_>>>()?;
        let o = &settings.optimizer;
        let kind = match o.opt_type {
            OptType::Adam => OptimizerKind::Adam,
            OptType::Rmsprop => {
                OptimizerKind::RmsProp { eps: o.epsilon, alpha: o.decay, momentum: o.momentum }
            }
        };
        let net = &towers[0].net;
        let params = &net.params;
        let group = |vf: bool| -> Vec<usize> {
            (0..params.len()).filter(|&i| net.is_value_parameter(&params[i].0) == vf).collect()
        };
        let groups = if o.separate_vf_optimizer {
            let (pi, vf) = (group(false), group(true));
            if pi.is_empty() || vf.is_empty() {
                return Err(LearnerError::Config {
                    reason: format!(
                        "_separate_vf_optimizer needs policy and value-function parameters; \
                         the model marks {} of its {} parameters as the value function's \
                         (a TorchScript module names them with value_function_prefixes(), or \
                         with the prefixes {:?}); unset _separate_vf_optimizer or name them",
                        vf.len(),
                        params.len(),
                        crate::TORCHSCRIPT_VF_PREFIXES
                    ),
                });
            }
            vec![pi, vf]
        } else {
            vec![(0..params.len()).collect()]
        };
        let optimizers = groups
            .into_iter()
            .map(|idx| {
                let named = idx
                    .iter()
                    .map(|&i| (params[i].0.clone(), params[i].1.shallow_clone()))
                    .collect();
                Ok((Optimizer::new(kind, named)?, idx))
            })
            .collect::<Result<Vec<_>>>()?;
        let net = &towers[0].net;
        let loader = BatchLoader {
            devices: devices.to_vec(),
            gamma: settings.loss.gamma as f32,
            obs_dim: net.obs_dim,
            action_dim: net.dist.action_dim(),
            state_dim: net.state_dim,
        };
        Ok(Learner {
            loss: settings.loss.clone(),
            optimizer: settings.optimizer.clone(),
            towers,
            optimizers,
            loader,
            version: 0,
            agent_steps_trained: 0,
        })
    }

    /// What loader threads need to prepare batches for this learner.
    pub fn loader(&self) -> BatchLoader {
        self.loader.clone()
    }

    /// Number of trainable parameters of the model (one tower's).
    pub fn num_parameters(&self) -> u64 {
        self.towers[0].params().iter().map(|(_, p)| p.numel() as u64).sum()
    }

    /// Number of towers (devices).
    pub fn num_towers(&self) -> usize {
        self.towers.len()
    }

    /// Updates done so far (the version of [`Learner::weights`]).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Agent steps trained on so far (every pass counts, as RLlib's `NUM_AGENT_STEPS_TRAINED`).
    pub fn agent_steps_trained(&self) -> u64 {
        self.agent_steps_trained
    }

    /// The first tower's model (the one the optimizers update).
    pub fn model(&self) -> &dyn crate::Model {
        self.towers[0].net.model.as_ref()
    }

    /// One gradient step on a train batch; `timestep` (agent steps trained so far) drives the
    /// `lr` and `entropy_coeff` schedules.
    pub fn update(&mut self, batch: &SampleBatch, timestep: u64) -> Result<LearnerStats> {
        let loaded = self.loader.load(batch)?;
        self.update_loaded(&loaded, timestep)
    }

    /// [`Learner::update`] on a batch already split and placed by [`BatchLoader::load`].
    ///
    /// Every tower computes the loss on its rows and its gradients; the gradients are added up
    /// on the first device, clipped, applied by one optimizer step, and the new weights are
    /// copied to the other towers. The loss is a sum over the whole batch (or a mean over the
    /// whole batch's steps), so N towers make exactly the update one tower makes on the whole
    /// batch. (RLlib averages the towers' per-shard sums instead, which scales the gradient by
    /// `1 / num_towers`.)
    pub fn update_loaded(&mut self, loaded: &LoadedBatch, timestep: u64) -> Result<LearnerStats> {
        crate::precision::flush_denormals_once();
        if loaded.shards.len() != self.towers.len() {
            return Err(LearnerError::Batch {
                reason: format!(
                    "batch loaded for {} towers, learner has {}",
                    loaded.shards.len(),
                    self.towers.len()
                ),
            });
        }
        let grad_span = span(Activity::LearnerGrad);
        let (s, o) = (&self.loss, &self.optimizer);
        let cur_lr = o.lr_at(timestep);
        let entropy_coeff = s.entropy_coeff_at(timestep);
        let used_steps =
            |sh: &Shard| if s.vtrace_drop_last_ts { sh.steps.saturating_sub(1) } else { sh.steps };
        let total_steps: usize = loaded.shards.iter().map(|sh| used_steps(sh) * sh.rows).sum();
        if total_steps == 0 {
            return Err(LearnerError::Batch {
                reason: "no steps to train on (vtrace_drop_last_ts needs T >= 2)".into(),
            });
        }
        let scale = match s.loss_reduction {
            LossReduction::Sum => 1.0,
            LossReduction::Mean => 1.0 / total_steps as f64,
        };
        let device0 = self.loader.devices[0];
        let num_params = self.towers[0].params().len();
        let mut grads: Vec<Option<Tensor>> = (0..num_params).map(|_| None).collect();
        let mut sums: Option<Tensor> = None;
        let (mut all_vs, mut all_values) =
            (Vec::with_capacity(total_steps), Vec::with_capacity(total_steps));
        for (tower, shard) in self.towers.iter().zip(&loaded.shards) {
            let loss = tower_loss(tower, shard, s, scale, entropy_coeff)?;
            let tower_grads = if o.separate_vf_optimizer {
                // RLlib: the policy optimizer minimises loss_wo_vf, the vf one minimises vf_loss.
                let (pi_idx, vf_idx) = (&self.optimizers[0].1, &self.optimizers[1].1);
                let pick = |idx: &[usize]| {
                    idx.iter().map(|&i| tower.params()[i].1.shallow_clone()).collect::<Vec<_>>()
                };
                let g_pi = Tensor::f_run_backward(&[&loss.loss_wo_vf], &pick(pi_idx), true, false)?;
                let g_vf = Tensor::f_run_backward(&[&loss.vf_loss], &pick(vf_idx), false, false)?;
                let mut all: Vec<Option<Tensor>> = (0..num_params).map(|_| None).collect();
                for (&i, g) in pi_idx.iter().chain(vf_idx).zip(g_pi.into_iter().chain(g_vf)) {
                    all[i] = Some(g);
                }
                all.into_iter().collect::<Option<Vec<_>>>().ok_or_else(|| LearnerError::Config {
                    reason: "parameter groups do not cover the model".into(),
                })?
            } else {
                let params: Vec<&Tensor> = tower.params().iter().map(|(_, p)| p).collect();
                Tensor::f_run_backward(&[&loss.total], &params, false, false)?
            };
            for (acc, g) in grads.iter_mut().zip(tower_grads) {
                let g = if g.device() == device0 { g } else { g.f_to_device(device0)? };
                *acc = Some(match acc.take() {
                    Some(a) => a.f_add(&g)?,
                    None => g,
                });
            }
            let tower_sums = loss.sums.f_to_device(device0)?;
            sums = Some(match sums.take() {
                Some(a) => a.f_add(&tower_sums)?,
                None => tower_sums,
            });
            all_vs.extend(loss.vs);
            all_values.extend(loss.values);
        }
        let mut grads = grads.into_iter().collect::<Option<Vec<_>>>().ok_or_else(|| {
            LearnerError::Config { reason: "a tower produced no gradients".into() }
        })?;
        let sums = sums.ok_or_else(|| LearnerError::Config { reason: "no towers".into() })?;

        // Each optimizer's gradients and weights, flat, and their global norms (RLlib clips
        // per optimizer).
        let _guard = tch::no_grad_guard();
        let mut flat_grads = Vec::with_capacity(self.optimizers.len());
        let mut readback = vec![sums];
        for (opt, idx) in &mut self.optimizers {
            let g: Vec<Tensor> =
                idx.iter().map(|&i| std::mem::replace(&mut grads[i], Tensor::new())).collect();
            let g = opt.gather_grads(&g)?;
            readback.push(g.f_norm()?.f_unsqueeze(0)?);
            readback.push(opt.params_norm()?);
            flat_grads.push(g);
        }
        // One host sync for every statistic.
        let values = Vec::<f64>::try_from(
            Tensor::f_cat(&readback, 0)?.f_to_kind(Kind::Double)?.f_to_device(Device::Cpu)?,
        )?;
        let (pi_sum, vf_sum, ent_sum) = (values[0], values[1], values[2]);
        let group_norms: Vec<f64> = values[3..].iter().step_by(2).copied().collect();
        let var_gnorm = values[4..].iter().step_by(2).map(|n| n * n).sum::<f64>().sqrt();
        let policy_loss = pi_sum * scale;
        let vf_loss = vf_sum * scale;
        let total_loss = policy_loss - entropy_coeff * ent_sum * scale + s.vf_loss_coeff * vf_loss;
        // RLlib's `grad_gnorm`: the global norms after global-norm clipping; the norms as
        // computed when clipping is by parameter or by value.
        let clip = match o.grad_clip_by {
            GradClipBy::GlobalNorm => o.grad_clip.unwrap_or(f64::INFINITY),
            GradClipBy::Norm | GradClipBy::Value => f64::INFINITY,
        };
        let grad_gnorm: f64 = group_norms.iter().map(|&n| n.min(clip)).sum();
        let entropy = ent_sum / total_steps as f64;
        if !total_loss.is_finite() || group_norms.iter().any(|n| !n.is_finite()) {
            return Err(LearnerError::NonFiniteLoss {
                total_loss,
                policy_loss,
                vf_loss,
                entropy,
                grad_gnorm: group_norms.iter().sum(),
            });
        }
        drop(grad_span);
        let _optimizer_span = span(Activity::LearnerOptimizer);
        // A finite gradient can still make the weights or the optimizer state overflow (a huge
        // learning rate without clipping): every group's step is worked out first and applied
        // only if everything it would write is finite, so the learner always holds its last
        // good weights.
        let lrs = if o.separate_vf_optimizer { vec![cur_lr, o.lr_vf] } else { vec![cur_lr] };
        let mut flags = Vec::with_capacity(self.optimizers.len());
        for (((opt, _), mut g), (&norm, lr)) in
            self.optimizers.iter_mut().zip(flat_grads).zip(group_norms.iter().zip(lrs))
        {
            clip_grad_by(&mut g, norm, &opt.segments(), o.grad_clip_by, o.grad_clip)?;
            opt.propose(lr)?;
            flags.push(opt.proposal_finite()?);
        }
        if !bool::try_from(Tensor::f_cat(&flags, 0)?.f_all()?)? {
            for (i, (opt, _)) in self.optimizers.iter().enumerate() {
                if let Some(tensor) = opt.first_non_finite(&format!("optimizer{i}"))? {
                    return Err(LearnerError::NonFiniteWeights { tensor });
                }
            }
        }
        for (opt, _) in &mut self.optimizers {
            opt.commit()?;
        }
        for tower in &self.towers[1..] {
            tower.copy_from(&self.towers[0])?;
        }
        let policy_lag = (self.version as f64 - loaded.mean_weights_version).max(0.0);
        self.version += 1;
        self.agent_steps_trained += loaded.agent_steps as u64;
        Ok(LearnerStats {
            total_loss,
            policy_loss,
            vf_loss,
            entropy,
            vf_explained_var: explained_variance(&all_vs, &all_values),
            grad_gnorm,
            var_gnorm,
            cur_lr,
            entropy_coeff,
            num_grad_updates: self.version,
            policy_lag,
        })
    }

    /// A snapshot of the weights (sorted by name, flattened `f32`) with the current version,
    /// for env runners' [`impala_core::Policy::set_weights`].
    pub fn weights(&self) -> Result<Arc<Weights>> {
        let _guard = tch::no_grad_guard();
        let tensors = self.towers[0]
            .params()
            .iter()
            .map(|(name, p)| {
                let flat = p
                    .f_to_device(Device::Cpu)?
                    .f_to_kind(Kind::Float)?
                    .f_contiguous()?
                    .f_view([-1])?;
                Ok(NamedTensor {
                    name: name.clone(),
                    shape: p.size().iter().map(|&d| d as usize).collect(),
                    data: Vec::<f32>::try_from(&flat)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Arc::new(Weights::new(self.version, tensors)))
    }

    /// Replaces the model's weights in every tower with `weights` (RLlib's `set_weights`:
    /// one tensor per parameter, sorted by name as [`Learner::weights`] gives them), keeping
    /// the optimizer state and the version. Everything is checked before anything changes, so
    /// refused weights leave the learner as it was.
    pub fn set_weights(&mut self, weights: &Weights) -> Result<()> {
        let params = self.towers[0].params();
        let fail = |reason: String| LearnerError::Model { reason };
        if weights.tensors.len() != params.len() {
            return Err(fail(format!(
                "{} weights given, the model has {} parameters",
                weights.tensors.len(),
                params.len()
            )));
        }
        let _guard = tch::no_grad_guard();
        let sources = params
            .iter()
            .zip(&weights.tensors)
            .map(|((name, p), w)| {
                let shape: Vec<usize> = p.size().iter().map(|&d| d as usize).collect();
                if *name != w.name || shape != w.shape || w.data.len() != p.numel() {
                    return Err(fail(format!(
                        "weight `{}` {:?} does not fit model parameter `{name}` {shape:?}",
                        w.name, w.shape
                    )));
                }
                Ok(Tensor::f_from_slice(&w.data)?
                    .f_view(p.size().as_slice())?
                    .f_to_device(p.device())?
                    .f_to_kind(p.kind())?)
            })
            .collect::<Result<Vec<_>>>()?;
        for ((_, p), src) in params.iter().zip(&sources) {
            p.shallow_clone().f_copy_(src)?;
        }
        for tower in &self.towers[1..] {
            tower.copy_from(&self.towers[0])?;
        }
        Ok(())
    }

    /// Writes `dir/model.safetensors` (the weights) and `dir/learner_state.safetensors`
    /// (optimizer state, version, agent steps trained), creating `dir`.
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| LearnerError::Checkpoint {
            path: dir.to_path_buf(),
            reason: e.to_string(),
        })?;
        let model: Vec<(String, Tensor)> = self.towers[0]
            .params()
            .iter()
            .map(|(n, p)| Ok((n.clone(), p.f_to_device(Device::Cpu)?)))
            .collect::<Result<_>>()?;
        Tensor::write_safetensors(&model, dir.join(MODEL_FILE))?;
        let mut state = vec![
            ("meta.version".to_string(), Tensor::f_from_slice(&[self.version as i64])?),
            (
                "meta.agent_steps_trained".to_string(),
                Tensor::f_from_slice(&[self.agent_steps_trained as i64])?,
            ),
        ];
        for (i, (opt, _)) in self.optimizers.iter().enumerate() {
            for (name, t) in opt.state_tensors(&format!("optimizer{i}"))? {
                state.push((name, t.f_to_device(Device::Cpu)?));
            }
        }
        Tensor::write_safetensors(&state, dir.join(LEARNER_STATE_FILE))?;
        Ok(())
    }

    /// Restores a [`Learner::save`] checkpoint; every tensor must match this model by name and
    /// shape, and every floating-point tensor must be finite (a checkpoint holding NaN or inf is
    /// refused, naming the tensor). Everything is read and checked before anything changes, so
    /// a refused checkpoint leaves the learner as it was.
    pub fn load(&mut self, dir: &Path) -> Result<()> {
        let mut model = read_checkpoint(&dir.join(MODEL_FILE))?;
        let weights = self.towers[0]
            .params()
            .iter()
            .map(|(name, p)| model.take(name, p))
            .collect::<Result<Vec<_>>>()?;
        let mut state = read_checkpoint(&dir.join(LEARNER_STATE_FILE))?;
        let scalar = |state: &mut Checkpoint, name: &str| -> Result<u64> {
            let t = state.take(name, &Tensor::f_from_slice(&[0i64])?)?;
            Ok(Vec::<i64>::try_from(&t)?.first().map_or(0, |&v| v.max(0) as u64))
        };
        let version = scalar(&mut state, "meta.version")?;
        let agent_steps_trained = scalar(&mut state, "meta.agent_steps_trained")?;
        let optimizer_states = self
            .optimizers
            .iter()
            .enumerate()
            .map(|(i, (opt, _))| {
                opt.read_state(&format!("optimizer{i}"), &mut |name, like| state.take(name, like))
            })
            .collect::<Result<Vec<_>>>()?;
        {
            let _guard = tch::no_grad_guard();
            for ((_, p), w) in self.towers[0].params().iter().zip(&weights) {
                p.shallow_clone().f_copy_(w)?;
            }
        }
        for tower in &self.towers[1..] {
            tower.copy_from(&self.towers[0])?;
        }
        self.version = version;
        self.agent_steps_trained = agent_steps_trained;
        for ((opt, _), loaded) in self.optimizers.iter_mut().zip(optimizer_states) {
            opt.restore(loaded);
        }
        Ok(())
    }
}

/// Reads the weights of a [`Learner::save`] checkpoint folder (`dir/model.safetensors`) as a
/// [`Weights`] snapshot of `version`, without a learner or its optimizer state: what an
/// evaluation needs for [`TorchPolicy::set_weights`](impala_core::Policy::set_weights), which
/// checks the names and shapes against its model. Non-finite weights are refused, naming the
/// tensor.
pub fn read_model_weights(dir: &Path, version: u64) -> Result<Arc<Weights>> {
    let model = read_checkpoint(&dir.join(MODEL_FILE))?;
    let mut named: Vec<(&String, &Tensor)> = model.tensors.iter().collect();
    named.sort_by(|a, b| a.0.cmp(b.0));
    let tensors = named
        .into_iter()
        .map(|(name, t)| {
            let flat = t.f_to_kind(Kind::Float)?.f_contiguous()?.f_view([-1])?;
            Ok(NamedTensor {
                name: name.clone(),
                shape: t.size().iter().map(|&d| d as usize).collect(),
                data: Vec::<f32>::try_from(&flat)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Arc::new(Weights::new(version, tensors)))
}

/// The tensors of one checkpoint file, checked against what they are loaded into.
struct Checkpoint {
    path: std::path::PathBuf,
    tensors: HashMap<String, Tensor>,
}

/// Reads a safetensors file of a checkpoint, refusing one whose floating-point tensors hold NaN
/// or inf (named, the first by name).
fn read_checkpoint(path: &Path) -> Result<Checkpoint> {
    let fail = |reason: String| LearnerError::Checkpoint { path: path.to_path_buf(), reason };
    let mut tensors = Tensor::read_safetensors(path).map_err(|e| fail(e.to_string()))?;
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    let _guard = tch::no_grad_guard();
    for (name, t) in &tensors {
        if t.is_floating_point() && !bool::try_from(t.f_isfinite()?.f_all()?)? {
            return Err(fail(format!(
                "tensor `{name}` holds non-finite values (NaN or inf); the run that wrote it \
                 had diverged"
            )));
        }
    }
    Ok(Checkpoint { path: path.to_path_buf(), tensors: tensors.into_iter().collect() })
}

impl Checkpoint {
    /// The tensor `name`, which must have the shape of `like`; moved to `like`'s device.
    fn take(&mut self, name: &str, like: &Tensor) -> Result<Tensor> {
        let fail = |reason: String| LearnerError::Checkpoint { path: self.path.clone(), reason };
        let t =
            self.tensors.remove(name).ok_or_else(|| fail(format!("missing tensor `{name}`")))?;
        if t.size() != like.size() {
            return Err(fail(format!(
                "tensor `{name}` has shape {:?}, the model has {:?}",
                t.size(),
                like.size()
            )));
        }
        Ok(t.f_to_device(like.device())?.f_to_kind(like.kind())?)
    }
}

/// The loss terms of one tower on its shard (RLlib's `VTraceLoss`, or the A3C loss).
fn tower_loss(
    tower: &Tower,
    shard: &Shard,
    s: &LossSettings,
    scale: f64,
    entropy_coeff: f64,
) -> Result<TowerLoss> {
    let (t, b) = (shard.steps, shard.rows);
    let model = &tower.net;
    let unroll = |steps, state, not_done| {
        (model.state_dim > 0).then_some(Unroll { steps, rows: b, state, not_done })
    };
    let out = model.forward(&shard.obs, unroll(t, &shard.state_in, shard.not_done.as_ref()))?;
    let dist = &model.dist;
    let target_logp = dist.logp(&out.dist_inputs, &shard.actions)?;
    let entropy = dist.entropy(&out.dist_inputs)?;
    let used = if s.vtrace_drop_last_ts { t - 1 } else { t };
    let n = used * b;
    // V(x_T) per row from the current network; with vtrace_drop_last_ts the dropped step's value.
    let bootstrap = if s.vtrace_drop_last_ts {
        out.values.f_narrow(0, (n) as i64, b as i64)?.f_detach()?
    } else {
        let _guard = tch::no_grad_guard();
        let final_state = match &out.state {
            Some(state) => state.shallow_clone(),
            None => shard.state_in.shallow_clone(),
        };
        model.forward(&shard.bootstrap_obs, unroll(1, &final_state, None))?.values
    };
    let host = Tensor::f_cat(
        &[
            out.values.f_narrow(0, 0, n as i64)?.f_detach()?,
            target_logp.f_narrow(0, 0, n as i64)?.f_detach()?,
            bootstrap,
        ],
        0,
    )?
    .f_to_device(Device::Cpu)?;
    let host = Vec::<f32>::try_from(&host)?;
    let (values, rest) = host.split_at(n);
    let (logp, bootstrap) = rest.split_at(n);
    let (discounts, rewards) = (&shard.discounts[..n], &shard.rewards[..n]);
    let (vs, pg_advantages) = if s.vtrace {
        let log_rhos: Vec<f32> =
            logp.iter().zip(&shard.behaviour_logp[..n]).map(|(a, b)| a - b).collect();
        let ret = impala_vtrace::from_importance_weights(
            &log_rhos,
            discounts,
            rewards,
            values,
            bootstrap,
            s.vtrace_clip_rho_threshold.map(|x| x as f32),
            s.vtrace_clip_pg_rho_threshold.map(|x| x as f32),
        )?;
        (ret.vs, ret.pg_advantages)
    } else {
        // A3C: GAE with lambda = 1, i.e. bootstrapped discounted returns, advantages against
        // the behaviour values (RLlib's postprocessing uses VF_PREDS).
        let returns = discounted_returns(rewards, discounts, bootstrap)?;
        let adv = returns.iter().zip(&shard.vf_preds[..n]).map(|(r, v)| r - v).collect();
        (returns, adv)
    };
    let device = shard.obs.device();
    let vs_t = Tensor::f_from_slice(&vs)?.f_to_device(device)?;
    let adv_t = Tensor::f_from_slice(&pg_advantages)?.f_to_device(device)?;
    let pi_sum =
        target_logp.f_narrow(0, 0, n as i64)?.f_mul(&adv_t)?.f_sum(Kind::Float)?.f_neg()?;
    let vf_sum = out
        .values
        .f_narrow(0, 0, n as i64)?
        .f_sub(&vs_t)?
        .f_square()?
        .f_sum(Kind::Float)?
        .f_mul_scalar(0.5)?;
    let ent_sum = entropy.f_narrow(0, 0, n as i64)?.f_sum(Kind::Float)?;
    let loss_wo_vf = pi_sum.f_sub(&ent_sum.f_mul_scalar(entropy_coeff)?)?.f_mul_scalar(scale)?;
    let vf_loss = vf_sum.f_mul_scalar(scale)?;
    let total = loss_wo_vf.f_add(&vf_loss.f_mul_scalar(s.vf_loss_coeff)?)?;
    let sums = Tensor::f_stack(&[pi_sum.f_detach()?, vf_sum.f_detach()?, ent_sum.f_detach()?], 0)?;
    Ok(TowerLoss { sums, loss_wo_vf, vf_loss, total, vs, values: values.to_vec() })
}

/// `R_t = r_t + discount_t * R_{t+1}`, `R_T = bootstrap`, over `[T, B]` time-major slices.
fn discounted_returns(rewards: &[f32], discounts: &[f32], bootstrap: &[f32]) -> Result<Vec<f32>> {
    let b = bootstrap.len();
    if b == 0 || rewards.len() % b != 0 || discounts.len() != rewards.len() {
        return Err(LearnerError::Batch {
            reason: format!("{} rewards do not make rows of {b}", rewards.len()),
        });
    }
    let mut out = vec![0.0; rewards.len()];
    let mut acc = bootstrap.to_vec();
    for t in (0..rewards.len() / b).rev() {
        for (j, a) in acc.iter_mut().enumerate() {
            let i = t * b + j;
            *a = rewards[i] + discounts[i] * *a;
            out[i] = *a;
        }
    }
    Ok(out)
}

/// RLlib's `explained_variance(vs, values)`: `max(-1, 1 - var(vs - values) / var(vs))` with
/// torch's unbiased variance; -1 when `vs` has no variance to explain.
fn explained_variance(y: &[f32], pred: &[f32]) -> f64 {
    let var = |v: &mut dyn Iterator<Item = f64>| {
        let xs: Vec<f64> = v.collect();
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0)
    };
    let y_var = var(&mut y.iter().map(|&x| x as f64));
    let diff_var = var(&mut y.iter().zip(pred).map(|(&a, &b)| a as f64 - b as f64));
    let ev = 1.0 - diff_var / y_var;
    if ev.is_nan() {
        -1.0
    } else {
        ev.max(-1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TorchPolicy;
    use impala_core::{Observations, Policy, PolicyInput, PolicyOutput, Space};
    use rand::{Rng, SeedableRng};

    /// A toy env of `dims` observations in [-1, 1] and 2 actions.
    fn toy_spec(dims: usize) -> std::result::Result<EnvSpec, impala_core::CoreError> {
        Ok(EnvSpec {
            id: "Toy".into(),
            observation_space: Space::continuous(vec![-1.0; dims], vec![1.0; dims])?,
            action_space: Space::Discrete(2),
            max_episode_steps: None,
        })
    }

    /// The learner's unroll over a batch (state reset after episode ends, truncated BPTT every
    /// `max_seq_len` steps) gives the values and log-probs the runner's step-by-step inference
    /// gave, and the bootstrap value of the state after the last step.
    #[test]
    fn lstm_unroll_matches_step_by_step_inference(
    ) -> std::result::Result<(), Box<dyn std::error::Error>> {
        let spec = toy_spec(3)?;
        let mut settings = LearnerSettings { model_seed: 1, ..LearnerSettings::default() };
        settings.model.fcnet_hiddens = vec![8];
        settings.model.use_lstm = true;
        settings.model.lstm_cell_size = std::num::NonZeroUsize::new(4).ok_or("4 > 0")?;
        settings.model.max_seq_len = std::num::NonZeroUsize::new(2).ok_or("2 > 0")?;
        let learner = Learner::new(&settings, &spec, Device::Cpu)?;
        let mut policy = TorchPolicy::new(&settings.model, &spec, settings.model_seed, 0)?;
        let (t, b, sd) = (6, 2, 8);
        let mut rng = rand::rngs::SmallRng::seed_from_u64(4);
        let mut batch = SampleBatch::zeros(t, b, &spec.observation_space, &spec.action_space, sd);
        let mut state: Vec<f32> = (0..b * sd).map(|_| rng.random_range(-0.5..0.5)).collect();
        batch.state_in = state.clone();
        let mut out = PolicyOutput::default();
        for step in 0..t {
            let obs: Vec<f32> = (0..b * 3).map(|_| rng.random_range(-1.0..1.0)).collect();
            policy.compute_actions(
                &PolicyInput { obs: &obs, num_envs: b, state: &state, explore: true },
                &mut out,
            )?;
            let i = step * b;
            batch.obs.write(i * 3, &obs);
            batch.actions[i..i + b].copy_from_slice(&out.actions);
            batch.action_logp[i..i + b].copy_from_slice(&out.action_logp);
            batch.vf_preds[i..i + b].copy_from_slice(&out.vf_preds);
            state.clone_from(&out.state_out);
            // Row 0 terminates after step 1, row 1 is truncated after step 3: runners reset.
            for (row, done) in [(0, step == 1), (1, step == 3)] {
                batch.terminateds[i + row] = done && row == 0;
                batch.truncateds[i + row] = done && row == 1;
                if done {
                    state[row * sd..(row + 1) * sd].fill(0.0);
                }
            }
        }
        let bootstrap: Vec<f32> = (0..b * 3).map(|_| rng.random_range(-1.0..1.0)).collect();
        batch.bootstrap_obs = Observations::F32(bootstrap.clone());
        let want_bootstrap = policy.compute_values(&bootstrap, b, &state)?;
        let loaded = learner.loader().load(&batch)?;
        let shard = &loaded.shards[0];
        let model = &learner.towers[0].net;
        let unroll =
            Unroll { steps: t, rows: b, state: &shard.state_in, not_done: shard.not_done.as_ref() };
        let fwd = model.forward(&shard.obs, Some(unroll))?;
        let values = Vec::<f32>::try_from(&fwd.values.f_detach()?)?;
        let logp =
            Vec::<f32>::try_from(&model.dist.logp(&fwd.dist_inputs, &shard.actions)?.f_detach()?)?;
        let close = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5);
        assert!(close(&values, &batch.vf_preds), "{values:?} vs {:?}", batch.vf_preds);
        assert!(close(&logp, &batch.action_logp));
        let final_state = fwd.state.ok_or(LearnerError::Batch { reason: "no state".into() })?;
        let boot = model.forward(
            &shard.bootstrap_obs,
            Some(Unroll { steps: 1, rows: b, state: &final_state, not_done: None }),
        )?;
        assert!(close(&Vec::<f32>::try_from(&boot.values.f_detach()?)?, &want_bootstrap));
        Ok(())
    }

    #[test]
    fn policy_lag_counts_updates_since_the_batch_was_sampled(
    ) -> std::result::Result<(), Box<dyn std::error::Error>> {
        let spec = toy_spec(2)?;
        let mut settings = LearnerSettings::default();
        settings.model.fcnet_hiddens = vec![4];
        let mut learner = Learner::new(&settings, &spec, Device::Cpu)?;
        let mut batch = SampleBatch::zeros(2, 2, &spec.observation_space, &spec.action_space, 0);
        batch.action_logp = vec![(0.5f32).ln(); 4];
        assert_eq!(learner.update(&batch, 0)?.policy_lag, 0.0);
        learner.update(&batch, 0)?;
        // One row sampled by version 0, one by version 1, trained from version 2.
        batch.weights_version = vec![0, 1];
        assert_eq!(learner.update(&batch, 0)?.policy_lag, 1.5);
        // Weights newer than the learner's (a restored learner) count as no lag.
        batch.weights_version = vec![9; 2];
        assert_eq!(learner.update(&batch, 0)?.policy_lag, 0.0);
        Ok(())
    }

    #[test]
    fn returns_bootstrap_and_cut_at_zero_discounts() -> Result<()> {
        // T = 3, B = 1: 1 + 0.5 * (2 + 0 * ...) ; the last step bootstraps from 10.
        let r = discounted_returns(&[1.0, 2.0, 3.0], &[0.5, 0.0, 0.5], &[10.0])?;
        assert_eq!(r, vec![2.0, 2.0, 8.0]);
        Ok(())
    }

    #[test]
    fn explained_variance_matches_rllib() {
        assert_eq!(explained_variance(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0]), 1.0);
        assert_eq!(explained_variance(&[1.0, 1.0], &[0.0, 2.0]), -1.0);
        // var(y) = 1, var(y - pred) = var([0, 1, 2]) = 1 -> 0.
        assert!((explained_variance(&[1.0, 2.0, 3.0], &[1.0, 1.0, 1.0]) - 0.0).abs() < 1e-12);
    }
}
