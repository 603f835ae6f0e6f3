//! Adam and RMSprop with torch's update rules, written with tensor ops so their state can be
//! checkpointed (tch's `nn::Optimizer` hides it), and torch's global-norm gradient clipping.

use impala_core::GradClipBy;
use tch::{Device, Kind, Tensor};

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
/// `foreach` idea) instead of several per parameter; in host memory it is one loop over every
/// buffer (torch's `fused` idea), which also tells whether the step is finite. A step is worked
/// out into a second set of buffers ([`Optimizer::propose`]) and applied only once it is known
/// to be finite ([`Optimizer::commit`] swaps the buffers), so nothing is allocated or undone per
/// step.
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
    /// Whether the last proposal was finite, when the fused host loop worked it out (it checks
    /// as it writes); `None` after a proposal of tensor ops, which are checked on the device.
    next_finite: Option<bool>,
}

/// The buffers a step is worked out in.
#[derive(Debug)]
struct Next {
    /// The slots after the step.
    state: [Tensor; 2],
    /// The weights after the proposed step.
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
        Ok(Optimizer { kind, step: 0, segments, params, state, next, next_finite: None })
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

    /// The global norm of the group's weights, as a one-element tensor on their device (no
    /// host sync, no copy).
    pub(crate) fn params_norm(&self) -> Result<Tensor> {
        let _guard = tch::no_grad_guard();
        let norms = self.params.iter().map(|p| Ok(p.f_norm()?)).collect::<Result<Vec<_>>>()?;
        Ok(Tensor::f_stack(&norms, 0)?.f_norm()?.f_unsqueeze(0)?)
    }

    /// Works out one update at learning rate `lr` from the weights and the gathered gradient
    /// into the second buffers, changing neither the weights nor the slots.
    pub(crate) fn propose(&mut self, lr: f64) -> Result<()> {
        let n = &self.next;
        let on_host =
            [&n.grad, &n.params, &n.state[0], &n.state[1], &self.state[0], &self.state[1]]
                .into_iter()
                .chain(&self.params)
                .all(|t| t.device() == Device::Cpu && t.kind() == Kind::Float && t.is_contiguous());
        self.next_finite = None;
        if on_host {
            self.next_finite = Some(self.propose_on_host(lr));
            return Ok(());
        }
        let _guard = tch::no_grad_guard();
        gather_into(&self.next.params, &self.params, &self.segments)?;
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

    /// [`Optimizer::propose`] as one loop over host memory: reads each weight, its gradient and
    /// slots once, writes the new ones, and returns whether everything written is finite.
    #[allow(unsafe_code, reason = "reads and writes the tensors' host buffers in place")]
    fn propose_on_host(&mut self, lr: f64) -> bool {
        let Next { state: [m1, v1], params: p1, grad, .. } = &mut self.next;
        let [m0, v0] = &self.state;
        // SAFETY: `propose` checked that every one of these is a contiguous float32 tensor in
        // host memory; each holds `numel` elements, and the written ones (the second buffers)
        // share no storage with the read ones (allocated apart in `new` and `read_state`).
        let read = |t: &Tensor| -> &[f32] {
            match t.numel() {
                0 => &[],
                n => unsafe { std::slice::from_raw_parts(t.data_ptr() as *const f32, n) },
            }
        };
        let write = |t: &mut Tensor| -> &mut [f32] {
            match t.numel() {
                0 => &mut [],
                n => unsafe { std::slice::from_raw_parts_mut(t.data_ptr() as *mut f32, n) },
            }
        };
        let (grad, m0, v0) = (read(grad), read(m0), read(v0));
        let (m1, v1, p1) = (write(m1), write(v1), write(p1));
        let rule = HostRule::new(self.kind, self.step + 1, lr);
        let mut finite = true;
        for (p, seg) in self.params.iter().zip(&self.segments) {
            let r = seg.offset as usize..(seg.offset + seg.numel) as usize;
            let (g, m0, v0) = (&grad[r.clone()], &m0[r.clone()], &v0[r.clone()]);
            let (m1, v1, p1) = (&mut m1[r.clone()], &mut v1[r.clone()], &mut p1[r]);
            finite &= rule.apply(read(p), g, [m0, v0], [m1, v1], p1);
        }
        finite
    }

    /// Whether the proposed weights and slots are all finite, as booleans on the device (no
    /// host sync).
    pub(crate) fn proposal_finite(&self) -> Result<Tensor> {
        if let Some(finite) = self.next_finite {
            return Ok(Tensor::f_from_slice(&[finite])?);
        }
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

/// An update rule's constants for one step, in float32 as torch's kernels use them.
#[derive(Debug, Clone, Copy)]
enum HostRule {
    Adam { w1: f32, w2: f32, bias2_sqrt: f32, step_size: f32, eps: f32 },
    RmsProp { alpha: f32, eps: f32, momentum: f32, lr: f32 },
}

impl HostRule {
    fn new(kind: OptimizerKind, step: u64, lr: f64) -> Self {
        match kind {
            OptimizerKind::Adam => {
                let (b1, b2) = ADAM_BETAS;
                let step = step as i32;
                HostRule::Adam {
                    w1: (1.0 - b1) as f32,
                    w2: (1.0 - b2) as f32,
                    bias2_sqrt: (1.0 - b2.powi(step)).sqrt() as f32,
                    step_size: (lr / (1.0 - b1.powi(step))) as f32,
                    eps: ADAM_EPS as f32,
                }
            }
            OptimizerKind::RmsProp { eps, alpha, momentum } => HostRule::RmsProp {
                alpha: alpha as f32,
                eps: eps as f32,
                momentum: momentum as f32,
                lr: lr as f32,
            },
        }
    }

    /// Steps weights `p` with gradient `g` and slots `s` into `p1` and `s1` (torch's Adam and
    /// RMSprop element by element); whether every value written is finite.
    fn apply(
        self,
        p: &[f32],
        g: &[f32],
        s: [&[f32]; 2],
        s1: [&mut [f32]; 2],
        p1: &mut [f32],
    ) -> bool {
        let n = p.len();
        // Equal lengths up front let the loop run without bounds checks (and vectorise).
        let (g, a0, b0) = (&g[..n], &s[0][..n], &s[1][..n]);
        let [a1, b1] = s1;
        let (a1, b1, p1) = (&mut a1[..n], &mut b1[..n], &mut p1[..n]);
        let mut finite = true;
        match self {
            HostRule::Adam { w1, w2, bias2_sqrt, step_size, eps } => {
                for i in 0..n {
                    // exp_avg.lerp_(g, 1 - b1); exp_avg_sq.lerp_(g^2, 1 - b2);
                    // p -= lr / bias1 * exp_avg / (sqrt(exp_avg_sq) / sqrt(bias2) + eps).
                    let m = a0[i] + w1 * (g[i] - a0[i]);
                    let v = b0[i] + w2 * (g[i] * g[i] - b0[i]);
                    let new = p[i] - step_size * (m / (v.sqrt() / bias2_sqrt + eps));
                    (a1[i], b1[i], p1[i]) = (m, v, new);
                    finite &= (m.abs() < f32::INFINITY)
                        & (v < f32::INFINITY)
                        & (new.abs() < f32::INFINITY);
                }
            }
            HostRule::RmsProp { alpha, eps, momentum, lr } => {
                for i in 0..n {
                    // square_avg = alpha * square_avg + (1 - alpha) * g^2; with momentum,
                    // buf = momentum * buf + g / (sqrt(square_avg) + eps) and p -= lr * buf;
                    // without, p -= lr * g / (sqrt(square_avg) + eps).
                    let sq = alpha * a0[i] + (1.0 - alpha) * g[i] * g[i];
                    let scaled = g[i] / (sq.sqrt() + eps);
                    let buf = if momentum > 0.0 { momentum * b0[i] + scaled } else { b0[i] };
                    let new = p[i] - lr * if momentum > 0.0 { buf } else { scaled };
                    (a1[i], b1[i], p1[i]) = (sq, buf, new);
                    finite &= (sq < f32::INFINITY)
                        & (buf.abs() < f32::INFINITY)
                        & (new.abs() < f32::INFINITY);
                }
            }
        }
        finite
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

    /// Five steps of `kind` on two parameters with random gradients, from `kind`'s own
    /// buffers (`dtype`: float32 takes the fused host loop, float64 the tensor ops) and from
    /// libtorch's own optimizer (`reference`); the largest difference of the weights.
    fn difference_from_libtorch(
        kind: OptimizerKind,
        dtype: Kind,
        reference: impl tch::nn::OptimizerConfig,
    ) -> Result<f64> {
        tch::manual_seed(7);
        let shapes: [&[i64]; 2] = [&[3, 5], &[40]];
        let init: Vec<Tensor> =
            shapes.iter().map(|s| Tensor::randn(*s, (Kind::Float, Device::Cpu))).collect();
        let named =
            init.iter().enumerate().map(|(i, t)| (format!("p{i}"), t.to_kind(dtype))).collect();
        let mut ours = Optimizer::new(kind, named)?;
        let vs = tch::nn::VarStore::new(Device::Cpu);
        let theirs: Vec<Tensor> =
            init.iter().enumerate().map(|(i, t)| vs.root().var_copy(&format!("p{i}"), t)).collect();
        let mut opt = reference.build(&vs, 0.01)?;
        for _ in 0..5 {
            let grads: Vec<Tensor> =
                shapes.iter().map(|s| Tensor::randn(*s, (Kind::Float, Device::Cpu))).collect();
            let ours_grads: Vec<Tensor> = grads.iter().map(|g| g.to_kind(dtype)).collect();
            let _ = ours.gather_grads(&ours_grads)?;
            ours.propose(0.01)?;
            assert!(bool::try_from(ours.proposal_finite()?.f_all()?)?);
            ours.commit()?;
            // d/dp sum(p * g) = g.
            let loss =
                theirs.iter().zip(&grads).map(|(p, g)| (p * g).sum(Kind::Float)).sum::<Tensor>();
            opt.backward_step(&loss);
        }
        let mut worst = 0.0f64;
        for (p, t) in ours.params.iter().zip(&theirs) {
            let d = (p.to_kind(Kind::Double) - t.to_kind(Kind::Double)).abs().max();
            worst = worst.max(f64::try_from(d)?);
        }
        Ok(worst)
    }

    #[test]
    fn steps_match_libtorchs_adam_and_rmsprop_on_the_host_and_in_tensor_ops() -> Result<()> {
        for dtype in [Kind::Float, Kind::Double] {
            let adam =
                difference_from_libtorch(OptimizerKind::Adam, dtype, tch::nn::Adam::default())?;
            assert!(adam < 1e-6, "Adam ({dtype:?}) differs from libtorch's by {adam}");
            for momentum in [0.0, 0.9] {
                let kind = OptimizerKind::RmsProp { eps: 0.1, alpha: 0.99, momentum };
                let reference =
                    tch::nn::RmsProp { alpha: 0.99, eps: 0.1, momentum, ..Default::default() };
                let rms = difference_from_libtorch(kind, dtype, reference)?;
                assert!(rms < 1e-6, "RMSprop, momentum {momentum} ({dtype:?}) differs by {rms}");
            }
        }
        Ok(())
    }

    /// A step that would overflow is reported by the fused host loop, the weights unchanged.
    #[test]
    fn the_host_loop_reports_a_non_finite_step() -> Result<()> {
        let p = Tensor::f_from_slice(&[1.0f32, 2.0])?;
        let mut opt = Optimizer::new(OptimizerKind::Adam, vec![("w".into(), p.shallow_clone())])?;
        let _ = opt.gather_grads(&[Tensor::f_from_slice(&[1.0f32, 1.0])?])?;
        opt.propose(f64::MAX)?;
        assert!(!bool::try_from(opt.proposal_finite()?.f_all()?)?);
        assert_eq!(opt.first_non_finite("optimizer0")?.as_deref(), Some("w"));
        assert_eq!(Vec::<f32>::try_from(&p)?, [1.0, 2.0]);
        Ok(())
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
