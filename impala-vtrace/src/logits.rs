//! Log importance weights from softmax (categorical) policies: RLlib's `from_logits`,
//! `multi_from_logits` and their log-probability helpers, for Discrete and MultiDiscrete actions.

use num_traits::ToPrimitive;

use crate::check::{expect_all_finite, expect_len, unravel, whole_rows, TIME_STEP};
use crate::{from_importance_weights, Result, VTraceError, VTraceFloat};

/// V-trace targets plus the log-probabilities they came from, as RLlib's
/// `VTraceFromLogitsReturns`. `[T, B]` fields are time-major and row-major.
///
/// `L` is how action log-probabilities are held: one `[T, B]` vector for [`from_logits`], one
/// per action component (`Vec<Vec<F>>`, RLlib's list) for [`multi_from_logits`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct VTraceFromLogitsReturns<F, L = Vec<F>> {
    /// `v_s`, `[T, B]`: the value targets.
    pub vs: Vec<F>,
    /// The clipped-rho policy-gradient advantages, `[T, B]`.
    pub pg_advantages: Vec<F>,
    /// `log pi(a_t|x_t) - log mu(a_t|x_t)`, `[T, B]`, summed over action components.
    pub log_rhos: Vec<F>,
    /// `log mu(a_t|x_t)`: the behaviour policy's log-probabilities of the actions taken.
    pub behaviour_action_log_probs: L,
    /// `log pi(a_t|x_t)`: the target policy's log-probabilities of the actions taken.
    pub target_action_log_probs: L,
}

/// Log-probabilities of `actions` under categorical policies with these unnormalised logits,
/// as RLlib's `log_probs_from_logits_and_actions` (with `TorchCategorical`): a numerically
/// stable `log_softmax(policy_logits)[action]`.
///
/// - `policy_logits`, `[N, num_actions]` row-major (any leading shape flattened, e.g. `[T, B]`).
/// - `actions`, `[N]`: action indices, as any primitive number holding an integer (a
///   `SampleBatch`'s `f32` actions work as they are).
///
/// Returns `[N]` log-probabilities.
///
/// # Errors
///
/// A [`VTraceError::ShapeMismatch`] for logits that are not `[N, num_actions]`,
/// [`VTraceError::NonFinite`] for a NaN or infinite logit (mask actions with a large negative
/// finite logit, as RLlib's `FLOAT_MIN`), [`VTraceError::InvalidAction`] for an action that is
/// not an integer in `0..num_actions`, [`VTraceError::InvalidActionSpace`] if `num_actions` is 0.
///
/// ```
/// use impala_vtrace::log_probs_from_logits_and_actions;
///
/// // Two steps over three actions; uniform logits give log(1/3) whatever the action.
/// let logp = log_probs_from_logits_and_actions(&[0.0_f64; 6], &[2_u32, 0], 3)?;
/// assert!(logp.iter().all(|lp| (lp - (1.0_f64 / 3.0).ln()).abs() < 1e-12));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn log_probs_from_logits_and_actions<F: VTraceFloat, A: ToPrimitive + Copy>(
    policy_logits: &[F],
    actions: &[A],
    num_actions: usize,
) -> Result<Vec<F>> {
    let lead = [actions.len()];
    let mut log_probs = component_log_probs(
        Logits { argument: "policy_logits", logits: policy_logits },
        Actions { actions, shape: &lead },
        &[num_actions],
        &lead,
    )?;
    Ok(log_probs.swap_remove(0))
}

/// Per-component log-probabilities for a MultiDiscrete action space, as RLlib's
/// `multi_log_probs_from_logits_and_actions` with `TorchCategorical` per component.
///
/// - `policy_logits`, `[N, sum(nvec)]`: the components' logits side by side in each row, as a
///   policy outputs them (RLlib splits them with `torch.split(logits, nvec, dim=1)`).
/// - `actions`, `[N, K]`: one action index per component (`K = nvec.len()`).
/// - `nvec`: the number of actions of each component.
///
/// Returns `K` vectors of `N` log-probabilities, one per component (RLlib's list).
///
/// # Errors
///
/// As [`log_probs_from_logits_and_actions`], plus [`VTraceError::NotWholeRows`] for `actions`
/// that are not `[N, K]` and [`VTraceError::InvalidActionSpace`] for an empty `nvec` or a
/// component of no actions.
///
/// ```
/// use impala_vtrace::multi_log_probs_from_logits_and_actions;
///
/// // One step, MultiDiscrete([2, 3]): logits of both components side by side.
/// let logits = [0.0_f32, 0.0, 1.0, 1.0, 1.0];
/// let logp = multi_log_probs_from_logits_and_actions(&logits, &[1.0_f32, 2.0], &[2, 3])?;
/// assert!((logp[0][0] - 0.5_f32.ln()).abs() < 1e-6);
/// assert!((logp[1][0] - (1.0_f32 / 3.0).ln()).abs() < 1e-6);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn multi_log_probs_from_logits_and_actions<F: VTraceFloat, A: ToPrimitive + Copy>(
    policy_logits: &[F],
    actions: &[A],
    nvec: &[usize],
) -> Result<Vec<Vec<F>>> {
    check_nvec(nvec)?;
    let n = whole_rows("actions", actions.len(), nvec.len(), "one action per component of `nvec`")?;
    component_log_probs(
        Logits { argument: "policy_logits", logits: policy_logits },
        Actions { actions, shape: &[n, nvec.len()] },
        nvec,
        &[n],
    )
}

/// `log_rhos = sum over components of (target - behaviour)`, as RLlib's `get_log_rhos`: the
/// log of the product of the per-component importance ratios `pi_k / mu_k`.
///
/// Each argument holds one `[N]` vector per action component (one for a Discrete space).
///
/// # Errors
///
/// [`VTraceError::ComponentMismatch`] if the two lists differ in length or are empty,
/// [`VTraceError::ShapeMismatch`] if a component's length differs from the first target one.
///
/// ```
/// use impala_vtrace::get_log_rhos;
///
/// let log_rhos = get_log_rhos(&[vec![-1.0_f64], vec![-2.0]], &[vec![-1.5], vec![-1.0]])?;
/// assert_eq!(log_rhos, [0.5 - 1.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn get_log_rhos<F: VTraceFloat, L: AsRef<[F]>>(
    target_action_log_probs: &[L],
    behaviour_action_log_probs: &[L],
) -> Result<Vec<F>> {
    let (Some(first), k) = (target_action_log_probs.first(), target_action_log_probs.len()) else {
        return Err(VTraceError::ComponentMismatch {
            argument: "target_action_log_probs",
            expected: 1,
            got: 0,
        });
    };
    if behaviour_action_log_probs.len() != k {
        return Err(VTraceError::ComponentMismatch {
            argument: "behaviour_action_log_probs",
            expected: k,
            got: behaviour_action_log_probs.len(),
        });
    }
    let n = first.as_ref().len();
    let mut log_rhos = vec![F::zero(); n];
    for (target, behaviour) in target_action_log_probs.iter().zip(behaviour_action_log_probs) {
        let (target, behaviour) = (target.as_ref(), behaviour.as_ref());
        expect_len("target_action_log_probs", target.len(), &[n])?;
        expect_len("behaviour_action_log_probs", behaviour.len(), &[n])?;
        for ((lr, t), b) in log_rhos.iter_mut().zip(target).zip(behaviour) {
            *lr = *lr + (*t - *b);
        }
    }
    Ok(log_rhos)
}

/// V-trace for a categorical (Discrete) policy from behaviour and target logits, as RLlib's
/// `from_logits` with `TorchCategorical` (`num_actions` stands where RLlib takes `dist_class`).
///
/// - `behaviour_policy_logits`, `target_policy_logits`, `[T, B, num_actions]`: the logits of
///   `mu` (the policy that acted) and `pi` (the policy being trained).
/// - `actions`, `[T, B]`: the actions `a_t` taken, as any primitive number holding an integer.
/// - `discounts`, `rewards`, `values`, `bootstrap_value`, `clip_rho_threshold`,
///   `clip_pg_rho_threshold`: as in [`from_importance_weights`].
///
/// # Errors
///
/// The shape, finiteness, action and threshold errors of [`log_probs_from_logits_and_actions`]
/// and [`from_importance_weights`], naming the argument at fault.
///
/// ```
/// use impala_vtrace::from_logits;
///
/// // T = 1, B = 1, two actions; the target prefers the action taken more than the behaviour did.
/// let ret = from_logits(
///     &[0.0_f64, 0.0], &[1.0, 0.0], &[0_u8],
///     &[0.9], &[1.0], &[0.0], &[0.0], 2, None, None,
/// )?;
/// let expected = ret.target_action_log_probs[0] - ret.behaviour_action_log_probs[0];
/// assert!((ret.log_rhos[0] - expected).abs() < 1e-12);
/// assert!((ret.vs[0] - expected.exp()).abs() < 1e-12); // rho * r, unclipped
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[allow(clippy::too_many_arguments, reason = "RLlib's from_logits arguments, in its order")]
pub fn from_logits<F: VTraceFloat, A: ToPrimitive + Copy>(
    behaviour_policy_logits: &[F],
    target_policy_logits: &[F],
    actions: &[A],
    discounts: &[F],
    rewards: &[F],
    values: &[F],
    bootstrap_value: &[F],
    num_actions: usize,
    clip_rho_threshold: Option<F>,
    clip_pg_rho_threshold: Option<F>,
) -> Result<VTraceFromLogitsReturns<F>> {
    let ret = vtrace_from_logits(
        PolicyLogits {
            behaviour_policy_logits,
            target_policy_logits,
            actions,
            nvec: &[num_actions],
            component_dim: false,
            behaviour_action_log_probs: None,
        },
        discounts,
        rewards,
        values,
        bootstrap_value,
        clip_rho_threshold,
        clip_pg_rho_threshold,
    )?;
    let single = |mut components: Vec<Vec<F>>| components.swap_remove(0);
    Ok(VTraceFromLogitsReturns {
        vs: ret.vs,
        pg_advantages: ret.pg_advantages,
        log_rhos: ret.log_rhos,
        behaviour_action_log_probs: single(ret.behaviour_action_log_probs),
        target_action_log_probs: single(ret.target_action_log_probs),
    })
}

/// V-trace for a MultiDiscrete policy (a categorical per component), as RLlib's
/// `multi_from_logits`: `log_rhos` is the sum of the per-component log-ratios, so `rho` is the
/// product of the per-component ratios.
///
/// - `behaviour_policy_logits`, `target_policy_logits`, `[T, B, sum(nvec)]`: each step's
///   component logits side by side, as a policy outputs them.
/// - `actions`, `[T, B, K]`: one action index per component (`K = nvec.len()`).
/// - `discounts`, `rewards`, `values`, `bootstrap_value`: as in [`from_importance_weights`].
/// - `nvec`: the number of actions of each component (where RLlib takes `dist_class`).
/// - `behaviour_action_log_probs`, `[T, B]`: the log-probabilities recorded when acting
///   (RLlib's `ACTION_LOGP`). As in RLlib, they are used only with one component; with several
///   (or with `None`) the behaviour log-probabilities are recomputed from the behaviour logits.
/// - `clip_rho_threshold`, `clip_pg_rho_threshold`: as in [`from_importance_weights`].
///
/// The returned log-probabilities hold one `[T, B]` vector per component.
///
/// # Errors
///
/// As [`from_logits`], plus [`VTraceError::InvalidActionSpace`] for an empty `nvec` or a
/// component of no actions.
///
/// ```
/// use impala_vtrace::multi_from_logits;
///
/// // T = 1, B = 1, MultiDiscrete([2, 2]); both policies uniform, so rho = 1.
/// let ret = multi_from_logits(
///     &[0.0_f32; 4], &[0.0; 4], &[1_i64, 0],
///     &[0.9], &[1.0], &[0.0], &[2.0], &[2, 2], None, Some(1.0), Some(1.0),
/// )?;
/// assert_eq!(ret.target_action_log_probs.len(), 2);
/// assert!(ret.log_rhos[0].abs() < 1e-7);
/// assert!((ret.vs[0] - (1.0 + 0.9 * 2.0)).abs() < 1e-6);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[allow(clippy::too_many_arguments, reason = "RLlib's multi_from_logits arguments, in its order")]
pub fn multi_from_logits<F: VTraceFloat, A: ToPrimitive + Copy>(
    behaviour_policy_logits: &[F],
    target_policy_logits: &[F],
    actions: &[A],
    discounts: &[F],
    rewards: &[F],
    values: &[F],
    bootstrap_value: &[F],
    nvec: &[usize],
    behaviour_action_log_probs: Option<&[F]>,
    clip_rho_threshold: Option<F>,
    clip_pg_rho_threshold: Option<F>,
) -> Result<VTraceFromLogitsReturns<F, Vec<Vec<F>>>> {
    vtrace_from_logits(
        PolicyLogits {
            behaviour_policy_logits,
            target_policy_logits,
            actions,
            nvec,
            component_dim: true,
            behaviour_action_log_probs,
        },
        discounts,
        rewards,
        values,
        bootstrap_value,
        clip_rho_threshold,
        clip_pg_rho_threshold,
    )
}

/// The policy side of [`from_logits`] / [`multi_from_logits`].
struct PolicyLogits<'a, F, A> {
    behaviour_policy_logits: &'a [F],
    target_policy_logits: &'a [F],
    actions: &'a [A],
    nvec: &'a [usize],
    /// Whether `actions` is `[T, B, K]` (MultiDiscrete) rather than `[T, B]` (error messages).
    component_dim: bool,
    behaviour_action_log_probs: Option<&'a [F]>,
}

fn vtrace_from_logits<F: VTraceFloat, A: ToPrimitive + Copy>(
    p: PolicyLogits<'_, F, A>,
    discounts: &[F],
    rewards: &[F],
    values: &[F],
    bootstrap_value: &[F],
    clip_rho_threshold: Option<F>,
    clip_pg_rho_threshold: Option<F>,
) -> Result<VTraceFromLogitsReturns<F, Vec<Vec<F>>>> {
    check_nvec(p.nvec)?;
    // T and B come from the value side, so a logits tensor of the wrong size is reported as
    // such (not as a log_rhos problem further down).
    let batch = bootstrap_value.len();
    let steps = whole_rows("discounts", discounts.len(), batch, TIME_STEP)?;
    let lead = [steps, batch];
    let action_shape =
        if p.component_dim { vec![steps, batch, p.nvec.len()] } else { lead.to_vec() };
    let actions = Actions { actions: p.actions, shape: &action_shape };
    let target_action_log_probs = component_log_probs(
        Logits { argument: "target_policy_logits", logits: p.target_policy_logits },
        actions,
        p.nvec,
        &lead,
    )?;
    let behaviour_action_log_probs = match p.behaviour_action_log_probs {
        Some(recorded) if p.nvec.len() == 1 => {
            expect_len("behaviour_action_log_probs", recorded.len(), &lead)?;
            vec![recorded.to_vec()]
        }
        _ => component_log_probs(
            Logits { argument: "behaviour_policy_logits", logits: p.behaviour_policy_logits },
            actions,
            p.nvec,
            &lead,
        )?,
    };
    let log_rhos = get_log_rhos(&target_action_log_probs, &behaviour_action_log_probs)?;
    let ret = from_importance_weights(
        &log_rhos,
        discounts,
        rewards,
        values,
        bootstrap_value,
        clip_rho_threshold,
        clip_pg_rho_threshold,
    )?;
    Ok(VTraceFromLogitsReturns {
        vs: ret.vs,
        pg_advantages: ret.pg_advantages,
        log_rhos,
        behaviour_action_log_probs,
        target_action_log_probs,
    })
}

/// A logits argument and its name for errors.
#[derive(Clone, Copy)]
struct Logits<'a, F> {
    argument: &'static str,
    logits: &'a [F],
}

/// The actions argument and its shape for errors (`[.., K]` or, for one component, `[..]`).
#[derive(Clone, Copy)]
struct Actions<'a, A> {
    actions: &'a [A],
    shape: &'a [usize],
}

fn check_nvec(nvec: &[usize]) -> Result<()> {
    if nvec.is_empty() || nvec.contains(&0) {
        Err(VTraceError::InvalidActionSpace { nvec: nvec.to_vec() })
    } else {
        Ok(())
    }
}

/// `log_softmax` of each component's logits at its action: `K` vectors of `prod(lead)` values.
fn component_log_probs<F: VTraceFloat, A: ToPrimitive + Copy>(
    logits: Logits<'_, F>,
    actions: Actions<'_, A>,
    nvec: &[usize],
    lead: &[usize],
) -> Result<Vec<Vec<F>>> {
    check_nvec(nvec)?;
    let n: usize = lead.iter().product();
    let k = nvec.len();
    let width: usize = nvec.iter().sum();
    let logits_shape: Vec<usize> = lead.iter().copied().chain([width]).collect();
    expect_len(logits.argument, logits.logits.len(), &logits_shape)?;
    expect_len("actions", actions.actions.len(), actions.shape)?;
    expect_all_finite([(logits.argument, logits.logits)], &logits_shape)?;

    let mut log_probs = vec![Vec::with_capacity(n); k];
    for (row, (row_logits, row_actions)) in
        logits.logits.chunks_exact(width).zip(actions.actions.chunks_exact(k)).enumerate()
    {
        let mut offset = 0;
        for (c, (&num_actions, &action)) in nvec.iter().zip(row_actions).enumerate() {
            let component = &row_logits[offset..offset + num_actions];
            offset += num_actions;
            let a =
                action_index(action, num_actions).ok_or_else(|| VTraceError::InvalidAction {
                    argument: "actions",
                    index: unravel(row * k + c, actions.shape),
                    action: action.to_f64().unwrap_or(f64::NAN),
                    num_actions,
                })?;
            log_probs[c].push(log_softmax_at(component, a));
        }
    }
    Ok(log_probs)
}

/// `action` as an index into `0..num_actions`, if it is an integer there.
fn action_index<A: ToPrimitive>(action: A, num_actions: usize) -> Option<usize> {
    let x = action.to_f64()?;
    // Every usize below num_actions (a logits width) is exact in f64.
    let in_range = x >= 0.0 && x.fract() == 0.0 && x < num_actions as f64;
    in_range.then_some(x as usize)
}

/// `log_softmax(logits)[a]`, shifted by the maximum so `exp` cannot overflow (as torch's
/// `log_softmax`): `(x_a - max) - ln(sum_i exp(x_i - max))`.
fn log_softmax_at<F: VTraceFloat>(logits: &[F], a: usize) -> F {
    let max = logits.iter().fold(F::neg_infinity(), |m, &x| m.max(x));
    let sum = logits.iter().fold(F::zero(), |s, &x| s + (x - max).exp());
    (logits[a] - max) - sum.ln()
}
