//! Adam and RMSprop with torch's update rules, written with tensor ops so their state can be
//! checkpointed (tch's `nn::Optimizer` hides it), and torch's global-norm gradient clipping.

use tch::Tensor;

use crate::{LearnerError, Result};

/// torch's Adam defaults (RLlib passes only `lr`).
const ADAM_BETAS: (f64, f64) = (0.9, 0.999);
const ADAM_EPS: f64 = 1e-8;

/// Which update rule, with its hyper-parameters (the learning rate comes per step).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum OptimizerKind {
    /// `torch.optim.Adam(lr)`.
    Adam,
    /// `torch.optim.RMSprop(lr, alpha=decay, eps=epsilon, momentum)`.
    ///
    /// RLlib's `decay` is the RMSProp decay (its docs; TF's `RMSPropOptimizer(decay=...)`;
    /// DeepMind's reference uses 0.99). RLlib's old torch policy passes it as `weight_decay`
    /// instead, which shrinks every weight by `lr * 0.99` per step; we do not port that bug.
    RmsProp {
        /// `eps` (RLlib's `epsilon`).
        eps: f64,
        /// torch's `alpha`, the squared-gradient moving-average decay (RLlib's `decay`).
        alpha: f64,
        /// `momentum`.
        momentum: f64,
    },
}

/// An optimizer's step count and slot tensors, read from a checkpoint.
#[derive(Debug)]
pub(crate) struct OptimizerState {
    step: u64,
    state: Vec<[Tensor; 2]>,
}

/// One optimizer over a group of parameters.
#[derive(Debug)]
pub(crate) struct Optimizer {
    kind: OptimizerKind,
    /// Steps taken (torch's per-parameter `step`, equal for every parameter here).
    step: u64,
    names: Vec<String>,
    params: Vec<Tensor>,
    /// Per parameter: Adam `[exp_avg, exp_avg_sq]`; RMSprop `[square_avg, momentum_buffer]`.
    state: Vec<[Tensor; 2]>,
}

impl Optimizer {
    pub(crate) fn new(kind: OptimizerKind, named: Vec<(String, Tensor)>) -> Result<Self> {
        let mut names = Vec::with_capacity(named.len());
        let mut params = Vec::with_capacity(named.len());
        let mut state = Vec::with_capacity(named.len());
        for (name, p) in named {
            state.push([p.f_zeros_like()?, p.f_zeros_like()?]);
            names.push(name);
            params.push(p);
        }
        Ok(Optimizer { kind, step: 0, names, params, state })
    }

    /// Applies one update with `grads` (one per parameter, same order) at learning rate `lr`.
    pub(crate) fn step(&mut self, grads: &[Tensor], lr: f64) -> Result<()> {
        if grads.len() != self.params.len() {
            return Err(LearnerError::Batch {
                reason: format!("{} gradients for {} parameters", grads.len(), self.params.len()),
            });
        }
        let _guard = tch::no_grad_guard();
        self.step += 1;
        let step = self.step as i32;
        for ((p, g), [s0, s1]) in self.params.iter_mut().zip(grads).zip(self.state.iter_mut()) {
            match self.kind {
                OptimizerKind::Adam => {
                    // exp_avg.lerp_(g, 1 - b1); exp_avg_sq = b2 * exp_avg_sq + (1 - b2) * g^2;
                    // p -= lr / bias1 * exp_avg / (sqrt(exp_avg_sq) / sqrt(bias2) + eps).
                    let (b1, b2) = ADAM_BETAS;
                    let _ = s0.f_lerp_(g, 1.0 - b1)?;
                    let _ = s1.f_lerp_(&g.f_square()?, 1.0 - b2)?;
                    let bias1 = 1.0 - b1.powi(step);
                    let bias2_sqrt = (1.0 - b2.powi(step)).sqrt();
                    let mut denom = s1.f_sqrt()?;
                    let _ = denom.f_div_scalar_(bias2_sqrt)?;
                    let _ = denom.f_add_scalar_(ADAM_EPS)?;
                    // Folding -step_size into the denominator saves a temporary.
                    let _ = denom.f_mul_scalar_(-bias1 / lr)?;
                    let _ = p.f_addcdiv_(s0, &denom)?;
                }
                OptimizerKind::RmsProp { eps, alpha, momentum } => {
                    let _ = s0.f_mul_scalar_(alpha)?;
                    let _ = s0.f_addcmul_(&g.f_mul_scalar(1.0 - alpha)?, g)?;
                    let avg = s0.f_sqrt()?.f_add_scalar(eps)?;
                    if momentum > 0.0 {
                        let _ = s1.f_mul_scalar_(momentum)?;
                        let _ = s1.f_addcdiv_(g, &avg)?;
                        let _ = p.f_add_(&s1.f_mul_scalar(-lr)?)?;
                    } else {
                        let _ = p.f_addcdiv_(&g.f_mul_scalar(-lr)?, &avg)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Steps taken (the bias corrections depend on it).
    pub(crate) fn step_count(&self) -> u64 {
        self.step
    }

    /// Sets the steps taken (undoing a step).
    pub(crate) fn set_step_count(&mut self, step: u64) {
        self.step = step;
    }

    /// Puts back a state from [`Optimizer::read_state`]. The slots are the optimizer's own
    /// tensors (nothing else holds them), so they are swapped in.
    pub(crate) fn restore(&mut self, state: OptimizerState) {
        self.step = state.step;
        self.state = state.state;
    }

    /// The slot tensors with their checkpoint names (`{prefix}.<slot>.<param>`).
    pub(crate) fn named_slots(&self, prefix: &str) -> Vec<(String, &Tensor)> {
        let slots = self.slot_names();
        let mut out = Vec::with_capacity(2 * self.names.len());
        for (name, state) in self.names.iter().zip(&self.state) {
            for (slot, t) in slots.iter().zip(state) {
                out.push((format!("{prefix}.{slot}.{name}"), t));
            }
        }
        out
    }

    /// The state as named tensors for a checkpoint (`{prefix}.step`, `{prefix}.<slot>.<param>`).
    pub(crate) fn state_tensors(&self, prefix: &str) -> Result<Vec<(String, Tensor)>> {
        let slots = self.slot_names();
        let mut out = vec![(format!("{prefix}.step"), Tensor::f_from_slice(&[self.step as i64])?)];
        for (name, state) in self.names.iter().zip(&self.state) {
            for (slot, t) in slots.iter().zip(state) {
                out.push((format!("{prefix}.{slot}.{name}"), t.shallow_clone()));
            }
        }
        Ok(out)
    }

    /// Reads [`Optimizer::state_tensors`] from `lookup` (which checks names and shapes)
    /// without changing the optimizer; [`Optimizer::restore`] applies it.
    pub(crate) fn read_state(
        &self,
        prefix: &str,
        lookup: &mut dyn FnMut(&str, &Tensor) -> Result<Tensor>,
    ) -> Result<OptimizerState> {
        let slots = self.slot_names();
        let step = lookup(&format!("{prefix}.step"), &Tensor::f_from_slice(&[0i64])?)?;
        let steps = Vec::<i64>::try_from(&step)?;
        let step = steps.first().map_or(0, |&s| s.max(0) as u64);
        let mut state = Vec::with_capacity(self.state.len());
        for (name, [a, b]) in self.names.iter().zip(&self.state) {
            let a = lookup(&format!("{prefix}.{}.{name}", slots[0]), a)?;
            let b = lookup(&format!("{prefix}.{}.{name}", slots[1]), b)?;
            state.push([a, b]);
        }
        Ok(OptimizerState { step, state })
    }

    fn slot_names(&self) -> [&'static str; 2] {
        match self.kind {
            OptimizerKind::Adam => ["exp_avg", "exp_avg_sq"],
            OptimizerKind::RmsProp { .. } => ["square_avg", "momentum_buffer"],
        }
    }
}

/// The global L2 norm of `tensors` as a scalar tensor (no host sync).
pub(crate) fn global_norm(tensors: &[Tensor]) -> Result<Tensor> {
    // Per-tensor norms (no temporaries), then the norm of the norms, as clip_grad_norm_.
    let norms = tensors.iter().map(|t| Ok(t.f_norm()?)).collect::<Result<Vec<_>>>()?;
    if norms.is_empty() {
        return Ok(Tensor::f_from_slice(&[0.0f32])?.f_squeeze()?);
    }
    Ok(Tensor::f_stack(&norms, 0)?.f_norm()?)
}

/// torch's `clip_grad_norm_(grads, max_norm)` once the global `norm` is known (the learner
/// reads it back with its other statistics): scales every gradient in place by
/// `max_norm / (norm + 1e-6)` when that is below 1.
pub(crate) fn clip_grads(grads: &mut [Tensor], norm: f64, max_norm: Option<f64>) -> Result<()> {
    let Some(max) = max_norm else { return Ok(()) };
    let coef = max / (norm + 1e-6);
    if coef < 1.0 {
        for g in grads.iter_mut() {
            let _ = g.f_mul_scalar_(coef)?;
        }
    }
    Ok(())
}
