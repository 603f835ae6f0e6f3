//! Adam and RMSprop with torch's update rules, written with tensor ops so their state can be
//! checkpointed (tch's `nn::Optimizer` hides it), and torch's global-norm gradient clipping.

use impala_core::GradClipBy;
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

/// An optimizer's step count and slot tensors (flat, as [`Optimizer`] keeps them), read from
/// a checkpoint.
#[derive(Debug)]
pub(crate) struct OptimizerState {
    step: u64,
    state: [Tensor; 2],
}

/// Where one parameter lives in an [`Optimizer`]'s flat tensors.
#[derive(Debug)]
struct Segment {
    name: String,
    offset: i64,
    numel: i64,
    shape: Vec<i64>,
}

/// One optimizer over a group of parameters. Its slots are two flat tensors over every
/// parameter of the group, so a step is a handful of kernels over one buffer (torch's
/// `foreach` idea) instead of several per parameter. A step is worked out into a second set of
/// buffers ([`Optimizer::propose`]) and applied only once it is known to be finite
/// ([`Optimizer::commit`] swaps the buffers), so nothing is allocated or undone per step.
#[derive(Debug)]
pub(crate) struct Optimizer {
    kind: OptimizerKind,
    /// Steps taken (torch's per-parameter `step`, equal for every parameter here).
    step: u64,
    segments: Vec<Segment>,
    params: Vec<Tensor>,
    /// Adam `[exp_avg, exp_avg_sq]`; RMSprop `[square_avg, momentum_buffer]`; flat.
    state: [Tensor; 2],
    next: Next,
}

/// The buffers a step is worked out in.
#[derive(Debug)]
struct Next {
    /// The slots after the step.
    state: [Tensor; 2],
    /// The weights: a copy before the step ([`Optimizer::gather_params`]), after it once
    /// proposed.
    params: Tensor,
    /// The flat gradient ([`Optimizer::gather_grads`]).
    grad: Tensor,
    /// Adam's squared gradient, then its denominator.
    scratch: Tensor,
}

impl Optimizer {
    pub(crate) fn new(kind: OptimizerKind, named: Vec<(String, Tensor)>) -> Result<Self> {
        let mut segments = Vec::with_capacity(named.len());
        let mut params = Vec::with_capacity(named.len());
        let mut offset = 0;
        for (name, p) in named {
            let numel = p.numel() as i64;
            segments.push(Segment { name, offset, numel, shape: p.size() });
            offset += numel;
            params.push(p);
        }
        let first = params.first().ok_or_else(|| LearnerError::Config {
            reason: "an optimizer needs at least one parameter".into(),
        })?;
        let zeros = || first.f_new_zeros([offset], (first.kind(), first.device()));
        let state = [zeros()?, zeros()?];
        let next = Next {
            state: [zeros()?, zeros()?],
            params: zeros()?,
            grad: zeros()?,
            scratch: zeros()?,
        };
        Ok(Optimizer { kind, step: 0, segments, params, state, next })
    }

    /// Where each parameter lives in the flat buffers: `(offset, numel)`.
    pub(crate) fn segments(&self) -> Vec<(i64, i64)> {
        self.segments.iter().map(|s| (s.offset, s.numel)).collect()
    }

    /// Copies `grads` (one per parameter) into the flat gradient buffer and returns it (a
    /// handle: clip it in place before [`Optimizer::propose`]).
    pub(crate) fn gather_grads(&mut self, grads: &[Tensor]) -> Result<Tensor> {
        gather_into(&self.next.grad, grads, &self.segments)?;
        Ok(self.next.grad.shallow_clone())
    }

    /// Copies the group's weights into the flat weights buffer and returns it (a handle).
    pub(crate) fn gather_params(&mut self) -> Result<Tensor> {
        gather_into(&self.next.params, &self.params, &self.segments)?;
        Ok(self.next.params.shallow_clone())
    }

    /// Works out one update at learning rate `lr` from the gathered weights and gradient into
    /// the second buffers, changing neither the weights nor the slots.
    pub(crate) fn propose(&mut self, lr: f64) -> Result<()> {
        let _guard = tch::no_grad_guard();
        let [s0, s1] = &self.state;
        let Next { state: [m, v], params, grad, scratch } = &mut self.next;
        match self.kind {
            OptimizerKind::Adam => {
                // exp_avg.lerp_(g, 1 - b1); exp_avg_sq = b2 * exp_avg_sq + (1 - b2) * g^2;
                // p -= lr / bias1 * exp_avg / (sqrt(exp_avg_sq) / sqrt(bias2) + eps).
                let (b1, b2) = ADAM_BETAS;
                let step = (self.step + 1) as i32;
                let _ = s0.f_lerp_scalar_out(m, grad, 1.0 - b1)?;
                let _ = grad.f_square_out(scratch)?;
                let _ = s1.f_lerp_scalar_out(v, scratch, 1.0 - b2)?;
                let bias1 = 1.0 - b1.powi(step);
                let bias2_sqrt = (1.0 - b2.powi(step)).sqrt();
                let _ = v.f_sqrt_out(scratch)?;
                let _ = scratch.f_div_scalar_(bias2_sqrt)?;
                let _ = scratch.f_add_scalar_(ADAM_EPS)?;
                // Folding -step_size into the denominator saves a temporary.
                let _ = scratch.f_mul_scalar_(-bias1 / lr)?;
                let _ = params.f_addcdiv_(m, scratch)?;
            }
            OptimizerKind::RmsProp { eps, alpha, momentum } => {
                m.f_copy_(s0)?;
                let _ = m.f_mul_scalar_(alpha)?;
                let _ = m.f_addcmul_(&grad.f_mul_scalar(1.0 - alpha)?, grad)?;
                let avg = m.f_sqrt()?.f_add_scalar(eps)?;
                v.f_copy_(s1)?;
                if momentum > 0.0 {
                    let _ = v.f_mul_scalar_(momentum)?;
                    let _ = v.f_addcdiv_(grad, &avg)?;
                    let _ = params.f_add_(&v.f_mul_scalar(-lr)?)?;
                } else {
                    let _ = params.f_addcdiv_(&grad.f_mul_scalar(-lr)?, &avg)?;
                }
            }
        }
        Ok(())
    }

    /// Whether the proposed weights and slots are all finite, as three booleans on the
    /// device (no host sync).
    pub(crate) fn proposal_finite(&self) -> Result<Tensor> {
        let n = &self.next;
        let flags = [&n.params, &n.state[0], &n.state[1]]
            .iter()
            .map(|t| Ok(t.f_isfinite()?.f_all()?))
            .collect::<Result<Vec<_>>>()?;
        Ok(Tensor::f_stack(&flags, 0)?)
    }

    /// Applies the [`Optimizer::propose`]d step.
    pub(crate) fn commit(&mut self) -> Result<()> {
        let _guard = tch::no_grad_guard();
        for (p, seg) in self.params.iter_mut().zip(&self.segments) {
            let new = self.next.params.f_narrow(0, seg.offset, seg.numel)?;
            p.f_copy_(&new.f_view(seg.shape.as_slice())?)?;
        }
        std::mem::swap(&mut self.state, &mut self.next.state);
        self.step += 1;
        Ok(())
    }

    /// The name of the first proposed weight or slot holding NaN or inf (the checkpoint
    /// names: the weight's own, or `{prefix}.<slot>.<param>`), if any.
    pub(crate) fn first_non_finite(&self, prefix: &str) -> Result<Option<String>> {
        let slots = self.slot_names();
        let n = &self.next;
        let flat =
            [(None, &n.params), (Some(slots[0]), &n.state[0]), (Some(slots[1]), &n.state[1])];
        for (slot, t) in flat {
            for seg in &self.segments {
                if !bool::try_from(t.f_narrow(0, seg.offset, seg.numel)?.f_isfinite()?.f_all()?)? {
                    return Ok(Some(match slot {
                        None => seg.name.clone(),
                        Some(slot) => format!("{prefix}.{slot}.{}", seg.name),
                    }));
                }
            }
        }
        Ok(None)
    }

    /// The state as named tensors for a checkpoint (`{prefix}.step`, `{prefix}.<slot>.<param>`,
    /// each slot shaped as its parameter).
    pub(crate) fn state_tensors(&self, prefix: &str) -> Result<Vec<(String, Tensor)>> {
        let slots = self.slot_names();
        let mut out = vec![(format!("{prefix}.step"), Tensor::f_from_slice(&[self.step as i64])?)];
        for seg in &self.segments {
            for (slot, t) in slots.iter().zip(&self.state) {
                let view = t.f_narrow(0, seg.offset, seg.numel)?.f_view(seg.shape.as_slice())?;
                out.push((format!("{prefix}.{slot}.{}", seg.name), view));
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
        let step = lookup(&format!("{prefix}.step"), &Tensor::f_from_slice(&[0i64])?)?;
        let steps = Vec::<i64>::try_from(&step)?;
        let step = steps.first().map_or(0, |&s| s.max(0) as u64);
        let like = self.state_tensors(prefix)?;
        let mut read: [Vec<Tensor>; 2] = [Vec::new(), Vec::new()];
        for (i, (name, t)) in like.iter().skip(1).enumerate() {
            read[i % 2].push(lookup(name, t)?.f_to(t.device())?);
        }
        let flat = |tensors: &[Tensor]| -> Result<Tensor> {
            let dst = self.state[0].f_zeros_like()?;
            gather_into(&dst, tensors, &self.segments)?;
            Ok(dst)
        };
        Ok(OptimizerState { step, state: [flat(&read[0])?, flat(&read[1])?] })
    }

    /// Puts back a state from [`Optimizer::read_state`].
    pub(crate) fn restore(&mut self, state: OptimizerState) {
        self.step = state.step;
        self.state = state.state;
    }

    fn slot_names(&self) -> [&'static str; 2] {
        match self.kind {
            OptimizerKind::Adam => ["exp_avg", "exp_avg_sq"],
            OptimizerKind::RmsProp { .. } => ["square_avg", "momentum_buffer"],
        }
    }
}

/// Copies `tensors` (one per segment) into the flat `dst`.
fn gather_into(dst: &Tensor, tensors: &[Tensor], segments: &[Segment]) -> Result<()> {
    if tensors.len() != segments.len() {
        return Err(LearnerError::Batch {
            reason: format!("{} tensors for {} parameters", tensors.len(), segments.len()),
        });
    }
    let _guard = tch::no_grad_guard();
    for (t, seg) in tensors.iter().zip(segments) {
        dst.f_narrow(0, seg.offset, seg.numel)?.f_copy_(&t.f_reshape([-1])?)?;
    }
    Ok(())
}

/// torch's `clip_grad_norm_` on a flat gradient once its global `norm` is known (the learner
/// reads it back with its other statistics): scales it in place by `max_norm / (norm + 1e-6)`
/// when that is below 1.
fn clip_grad(grad: &mut Tensor, norm: f64, max_norm: Option<f64>) -> Result<()> {
    let Some(max) = max_norm else { return Ok(()) };
    let coef = max / (norm + 1e-6);
    if coef < 1.0 {
        let _ = grad.f_mul_scalar_(coef)?;
    }
    Ok(())
}

/// Clips an optimizer's flat gradient `grad` (global norm `norm`, its parameters at
/// `(offset, numel)` of `segments`) to `max` as `by` says (RLlib's `grad_clip_by`), in place and
/// on the gradient's device: the global norm, each parameter's norm, or each element.
pub(crate) fn clip_grad_by(
    grad: &mut Tensor,
    norm: f64,
    segments: &[(i64, i64)],
    by: GradClipBy,
    max: Option<f64>,
) -> Result<()> {
    let Some(max) = max else { return Ok(()) };
    match by {
        GradClipBy::GlobalNorm => clip_grad(grad, norm, Some(max)),
        GradClipBy::Value => {
            let _ = grad.f_clamp_(-max, max)?;
            Ok(())
        }
        GradClipBy::Norm => {
            for &(offset, numel) in segments {
                let mut part = grad.f_narrow(0, offset, numel)?;
                // min(1, max / (norm + 1e-6)), without a host sync per parameter.
                let coef = part.f_norm()?.f_add_scalar(1e-6)?.f_reciprocal()?.f_mul_scalar(max)?;
                let _ = part.f_mul_(&coef.f_clamp_max(1.0)?)?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two parameters: `[3, 4]` (norm 5) and `[0.1, -0.1]`.
    fn clipped(by: GradClipBy, max: f64) -> Result<Vec<f64>> {
        let mut grad = Tensor::f_from_slice(&[3.0f64, 4.0, 0.1, -0.1])?;
        let norm = f64::try_from(grad.f_norm()?)?;
        clip_grad_by(&mut grad, norm, &[(0, 2), (2, 2)], by, Some(max))?;
        Ok(Vec::<f64>::try_from(&grad)?)
    }

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5)
    }

    #[test]
    fn gradients_clip_by_global_norm_by_each_parameters_norm_or_by_value() -> Result<()> {
        // Global norm sqrt(25.02): every element scaled by 1 / that.
        let scale = 1.0 / (25.02f64.sqrt() + 1e-6);
        let global = clipped(GradClipBy::GlobalNorm, 1.0)?;
        assert!(
            close(&global, &[3.0 * scale, 4.0 * scale, 0.1 * scale, -0.1 * scale]),
            "{global:?}"
        );
        // Each parameter: the first to norm 1, the second (norm 0.14) unchanged.
        let norm = clipped(GradClipBy::Norm, 1.0)?;
        assert!(close(&norm, &[0.6, 0.8, 0.1, -0.1]), "{norm:?}");
        // Each element into [-0.5, 0.5].
        let value = clipped(GradClipBy::Value, 0.5)?;
        assert!(close(&value, &[0.5, 0.5, 0.1, -0.1]), "{value:?}");
        Ok(())
    }
}
