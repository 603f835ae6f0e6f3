//! V-trace targets from log importance weights: RLlib's / DeepMind's `from_importance_weights`.

use crate::check::{
    expect_all_finite, expect_finite, expect_len, expect_threshold, whole_rows, TIME_STEP,
};
use crate::float::{min_of, threshold_or_inf};
use crate::{Result, VTraceFloat};

/// The V-trace targets, time-major `[T, B]` and row-major (step `t` of row `b` at `t * B + b`),
/// as RLlib's `VTraceReturns` namedtuple.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct VTraceReturns<F> {
    /// `v_s`: the value targets; train the baseline on `(V(x_s) - v_s)^2`.
    pub vs: Vec<F>,
    /// `rho_s (r_s + gamma_s v_{s+1} - V(x_s))` with `rho_s` clipped at `clip_pg_rho_threshold`:
    /// the advantage that multiplies `log pi(a_s|x_s)` in the policy gradient.
    pub pg_advantages: Vec<F>,
}

/// V-trace targets from log importance weights (Espeholt et al. 2018, section 4.1), with the
/// names and argument order of RLlib's `vtrace_torch.from_importance_weights`.
///
/// Every `[T, B]` argument is a time-major, row-major slice: step `t` of batch row `b` is at
/// `t * B + b`. `B` is the length of `bootstrap_value` and `T` follows from `log_rhos` (as
/// RLlib reads them from the tensors' shapes). Slices carry no shape, so a `bootstrap_value` of
/// the wrong length that still divides the data reads as another valid `[T, B]`: build it from
/// the same `B` as the rest.
///
/// - `log_rhos`, `[T, B]`: `log pi(a_t|x_t) - log mu(a_t|x_t)`, target minus behaviour
///   log-probability of the action taken. `exp` of it is the importance weight `pi/mu`, which
///   gives the paper's `rho_t = min(rho_bar, pi/mu)` and trace coefficient
///   `c_t = min(c_bar, pi/mu)`; `c_bar` is fixed at 1.0 as in the paper and RLlib.
/// - `discounts`, `[T, B]`: `gamma_t`, the discount applied after step `t`; usually
///   `gamma * (1 - terminated_t)`, so 0 at an episode's terminal step cuts the trace there.
/// - `rewards`, `[T, B]`: `r_t`, the reward of step `t`.
/// - `values`, `[T, B]`: `V(x_t)`, the current (target) network's value of the state of step `t`.
/// - `bootstrap_value`, `[B]`: `V(x_T)`, the value of the state after each row's last step.
/// - `clip_rho_threshold`: `rho_bar`, clipping `rho_t` inside the temporal difference
///   `delta_t V = rho_t (r_t + gamma_t V(x_{t+1}) - V(x_t))`; `None` clips nothing.
///   RLlib's default is `Some(1.0)`.
/// - `clip_pg_rho_threshold`: the clip on `rho_s` in the policy-gradient advantage; `None`
///   clips nothing. RLlib's default is `Some(1.0)`.
///
/// The targets are `v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i c_i) delta_t V`,
/// computed by the backward recursion `v_s - V(x_s) = delta_s V + gamma_s c_s (v_{s+1} -
/// V(x_{s+1}))` in the same order of operations as RLlib, one time step at a time across all
/// `B` rows (the inner loop is contiguous, so it vectorises). For `f32` the importance weights
/// come from a vectorised `exp` within 2 f32 epsilons of the exact value, with `log_rhos`
/// saturating at `[-87.3, 88.3]` (f32's normal range); `f64` uses the platform `exp`.
///
/// # Errors
///
/// [`VTraceError::NotWholeRows`](crate::VTraceError::NotWholeRows) or
/// [`VTraceError::ShapeMismatch`](crate::VTraceError::ShapeMismatch) when the lengths do not
/// describe one `[T, B]` shape, [`VTraceError::NonFinite`](crate::VTraceError::NonFinite) for a
/// NaN or infinite input, [`VTraceError::InvalidThreshold`](crate::VTraceError::InvalidThreshold)
/// for a NaN or negative threshold.
///
/// ```
/// use impala_vtrace::from_importance_weights;
///
/// // T = 2 steps, B = 1 row, on-policy (log_rhos = 0): vs is the bootstrapped return.
/// let ret = from_importance_weights(
///     &[0.0_f64, 0.0], // log_rhos
///     &[0.9, 0.9],     // discounts
///     &[1.0, 2.0],     // rewards
///     &[0.5, 0.5],     // values
///     &[10.0],         // bootstrap_value
///     Some(1.0),
///     Some(1.0),
/// )?;
/// assert!((ret.vs[0] - (1.0 + 0.9 * 2.0 + 0.81 * 10.0)).abs() < 1e-12);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn from_importance_weights<F: VTraceFloat>(
    log_rhos: &[F],
    discounts: &[F],
    rewards: &[F],
    values: &[F],
    bootstrap_value: &[F],
    clip_rho_threshold: Option<F>,
    clip_pg_rho_threshold: Option<F>,
) -> Result<VTraceReturns<F>> {
    let mut ret = VTraceReturns {
        vs: vec![F::zero(); log_rhos.len()],
        pg_advantages: vec![F::zero(); log_rhos.len()],
    };
    from_importance_weights_into(
        log_rhos,
        discounts,
        rewards,
        values,
        bootstrap_value,
        clip_rho_threshold,
        clip_pg_rho_threshold,
        &mut ret.vs,
        &mut ret.pg_advantages,
    )?;
    Ok(ret)
}

/// [`from_importance_weights`] writing `vs` and `pg_advantages` (both `[T, B]`) into caller
/// buffers, allocating nothing: for a learner that reuses its buffers every step.
///
/// On error the buffers are left untouched (every check runs before any write).
///
/// # Errors
///
/// As [`from_importance_weights`], plus a
/// [`VTraceError::ShapeMismatch`](crate::VTraceError::ShapeMismatch) for an output buffer that
/// is not `[T, B]`.
///
/// ```
/// use impala_vtrace::from_importance_weights_into;
///
/// let (mut vs, mut pg) = (vec![0.0_f32; 2], vec![0.0_f32; 2]);
/// // T = 1 step, B = 2 rows; the second row ends its episode (discount 0).
/// from_importance_weights_into(
///     &[0.0, 0.0], &[0.9, 0.0], &[1.0, 1.0], &[0.0, 0.0], &[2.0, 2.0],
///     Some(1.0), Some(1.0), &mut vs, &mut pg,
/// )?;
/// assert_eq!(vs, [1.0 + 0.9 * 2.0, 1.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[allow(
    clippy::too_many_arguments,
    reason = "RLlib's from_importance_weights arguments, in its order, then the two outputs"
)]
pub fn from_importance_weights_into<F: VTraceFloat>(
    log_rhos: &[F],
    discounts: &[F],
    rewards: &[F],
    values: &[F],
    bootstrap_value: &[F],
    clip_rho_threshold: Option<F>,
    clip_pg_rho_threshold: Option<F>,
    vs: &mut [F],
    pg_advantages: &mut [F],
) -> Result<()> {
    let batch = bootstrap_value.len();
    let steps = whole_rows("log_rhos", log_rhos.len(), batch, TIME_STEP)?;
    let shape = [steps, batch];
    expect_len("discounts", discounts.len(), &shape)?;
    expect_len("rewards", rewards.len(), &shape)?;
    expect_len("values", values.len(), &shape)?;
    expect_len("vs", vs.len(), &shape)?;
    expect_len("pg_advantages", pg_advantages.len(), &shape)?;
    expect_finite("bootstrap_value", bootstrap_value, &[batch], 0)?;
    expect_threshold("clip_rho_threshold", clip_rho_threshold)?;
    expect_threshold("clip_pg_rho_threshold", clip_pg_rho_threshold)?;
    vtrace_kernel(
        Inputs { log_rhos, discounts, rewards, values, bootstrap_value },
        threshold_or_inf(clip_rho_threshold),
        threshold_or_inf(clip_pg_rho_threshold),
        vs,
        pg_advantages,
    )
}

/// The validated `[T, B]` inputs (and `[B]` bootstrap value) of the kernel.
struct Inputs<'a, F> {
    log_rhos: &'a [F],
    discounts: &'a [F],
    rewards: &'a [F],
    values: &'a [F],
    bootstrap_value: &'a [F],
}

/// Checks the `[T, B]` inputs are finite and runs [`vtrace_recursion`], compiled for AVX2 when
/// the CPU has it (8 f32 lanes instead of SSE2's 4), else for the x86-64 baseline. The binary
/// stays portable: the wider code only runs where the CPU reports the feature.
fn vtrace_kernel<F: VTraceFloat>(
    x: Inputs<'_, F>,
    rho_bar: F,
    pg_rho_bar: F,
    vs: &mut [F],
    pg_advantages: &mut [F],
) -> Result<()> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        #[allow(unsafe_code, reason = "calling a target_feature function")]
        // SAFETY: `checked_recursion_avx2` only needs AVX2, which the CPU reported just above.
        return unsafe { checked_recursion_avx2(x, rho_bar, pg_rho_bar, vs, pg_advantages) };
    }
    checked_recursion(x, rho_bar, pg_rho_bar, vs, pg_advantages)
}

/// [`checked_recursion`] inlined into a function compiled with AVX2 enabled.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn checked_recursion_avx2<F: VTraceFloat>(
    x: Inputs<'_, F>,
    rho_bar: F,
    pg_rho_bar: F,
    vs: &mut [F],
    pg_advantages: &mut [F],
) -> Result<()> {
    checked_recursion(x, rho_bar, pg_rho_bar, vs, pg_advantages)
}

/// The finiteness check of the `[T, B]` inputs, then the recursion (nothing is written on error).
#[inline(always)]
fn checked_recursion<F: VTraceFloat>(
    x: Inputs<'_, F>,
    rho_bar: F,
    pg_rho_bar: F,
    vs: &mut [F],
    pg_advantages: &mut [F],
) -> Result<()> {
    let shape = [x.log_rhos.len() / x.bootstrap_value.len().max(1), x.bootstrap_value.len()];
    expect_all_finite(
        [
            ("log_rhos", x.log_rhos),
            ("discounts", x.discounts),
            ("rewards", x.rewards),
            ("values", x.values),
        ],
        &shape,
    )?;
    vtrace_recursion(x, rho_bar, pg_rho_bar, vs, pg_advantages);
    Ok(())
}

/// The backward recursion over time, vectorised across the batch.
///
/// While step `t` is computed, `vs` row `t + 1` still holds `v_{t+1} - V(x_{t+1})` (RLlib's
/// `vs_minus_v_xs`): the recursion reads it, then turns it into `v_{t+1}` for the advantage, so
/// `vs` is RLlib's `vs_minus_v + values`, same operations in the same order, without a scratch
/// buffer. Each
/// `pg_advantages` row first holds `rho_t` (the `exp` pass, vectorised for f32, a libm call
/// for f64), then its advantage (a pass that vectorises for both).
#[inline(always)]
fn vtrace_recursion<F: VTraceFloat>(
    x: Inputs<'_, F>,
    rho_bar: F,
    pg_rho_bar: F,
    vs: &mut [F],
    pg_advantages: &mut [F],
) {
    let b = x.bootstrap_value.len();
    let steps = x.log_rhos.len().checked_div(b).unwrap_or(0);
    if steps == 0 {
        return;
    }
    let one = F::one();
    let rows = |t: usize| t * b..(t + 1) * b;

    // Last step: the next state's value is the bootstrap value and the trace behind it is empty.
    let last = rows(steps - 1);
    let (d, r, v) = (&x.discounts[last.clone()], &x.rewards[last.clone()], &x.values[last.clone()]);
    let boot = &x.bootstrap_value[..b];
    let (vs_t, pg_t) = (&mut vs[last.clone()], &mut pg_advantages[last.clone()]);
    exp_into(&x.log_rhos[last], pg_t);
    for i in 0..b {
        let rho = pg_t[i];
        let td = r[i] + d[i] * boot[i] - v[i];
        vs_t[i] = min_of(rho, rho_bar) * td;
        pg_t[i] = min_of(rho, pg_rho_bar) * td;
    }

    for t in (0..steps - 1).rev() {
        let now = rows(t);
        let (d, r, v) =
            (&x.discounts[now.clone()], &x.rewards[now.clone()], &x.values[now.clone()]);
        let v_next = &x.values[rows(t + 1)];
        let (head, tail) = vs.split_at_mut((t + 1) * b);
        let (vs_t, vs_next) = (&mut head[now.clone()], &mut tail[..b]);
        let pg_t = &mut pg_advantages[now.clone()];
        exp_into(&x.log_rhos[now], pg_t);
        for i in 0..b {
            let rho = pg_t[i];
            let vs_minus_v_next = vs_next[i];
            let vs_next_i = vs_minus_v_next + v_next[i];
            vs_next[i] = vs_next_i;
            let delta = min_of(rho, rho_bar) * (r[i] + d[i] * v_next[i] - v[i]);
            vs_t[i] = delta + d[i] * min_of(rho, one) * vs_minus_v_next;
            pg_t[i] = min_of(rho, pg_rho_bar) * (r[i] + d[i] * vs_next_i - v[i]);
        }
    }

    // Row 0 still holds v_0 - V(x_0).
    for (vs_0, v_0) in vs[..b].iter_mut().zip(&x.values[..b]) {
        *vs_0 = *vs_0 + *v_0;
    }
}

/// `out[i] = exp(log_rhos[i])`, the importance weights `pi/mu` of one time step.
#[inline(always)]
fn exp_into<F: VTraceFloat>(log_rhos: &[F], out: &mut [F]) {
    for (o, lr) in out.iter_mut().zip(log_rhos) {
        *o = lr.exp_vectorisable();
    }
}
