//! Properties V-trace must have: on-policy identity, trace cuts, clipping monotonicity,
//! `None` thresholds, and the `_into` form agreeing with the allocating one.

use approx::assert_relative_eq;
use impala_vtrace::{from_importance_weights, from_importance_weights_into};
use proptest::prelude::*;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// `[T, B]` data with a different value at every position.
fn grid(t_len: usize, b_len: usize, f: impl Fn(usize, usize) -> f64) -> Vec<f64> {
    (0..t_len * b_len).map(|i| f(i / b_len, i % b_len)).collect()
}

#[test]
fn on_policy_vs_is_the_bootstrapped_n_step_return() -> TestResult {
    // log_rhos = 0 (pi = mu) and no discount cut: v_s = sum_{t>=s} gamma^{t-s} r_t
    // + gamma^{T-s} V(x_T), whatever the values, with or without clipping.
    let (t_len, b_len, gamma) = (7, 3, 0.95);
    let rewards = grid(t_len, b_len, |t, b| (t as f64 * 0.7 - b as f64).sin());
    let values = grid(t_len, b_len, |t, b| (t * b) as f64 * 0.1 - 1.0);
    let bootstrap = [2.0, -1.0, 0.5];
    for (clip_rho, clip_pg) in [(Some(1.0), Some(1.0)), (None, None), (Some(0.5), Some(3.0))] {
        let ret = from_importance_weights(
            &vec![0.0; t_len * b_len],
            &vec![gamma; t_len * b_len],
            &rewards,
            &values,
            &bootstrap,
            // rho = 1 is clipped to min(1, bar): only bars >= 1 keep the identity exact.
            clip_rho.map(|x: f64| x.max(1.0)),
            clip_pg.map(|x: f64| x.max(1.0)),
        )?;
        for b in 0..b_len {
            for s in 0..t_len {
                let n_step: f64 = (s..t_len)
                    .map(|t| gamma.powi((t - s) as i32) * rewards[t * b_len + b])
                    .sum::<f64>()
                    + gamma.powi((t_len - s) as i32) * bootstrap[b];
                assert_relative_eq!(ret.vs[s * b_len + b], n_step, epsilon = 1e-12);
                // The advantage is then the one-step TD error towards the next target.
                let vs_next =
                    if s + 1 == t_len { bootstrap[b] } else { ret.vs[(s + 1) * b_len + b] };
                let td = rewards[s * b_len + b] + gamma * vs_next - values[s * b_len + b];
                assert_relative_eq!(ret.pg_advantages[s * b_len + b], td, epsilon = 1e-12);
            }
        }
    }
    Ok(())
}

#[test]
fn discount_zero_cuts_the_trace() -> TestResult {
    // Row 1 ends its episode at t = 2. Its targets up to t = 2 must not depend on anything
    // after the cut (next episode's rewards, values, bootstrap), bit for bit.
    let (t_len, b_len, cut) = (6, 2, 2);
    let log_rhos = grid(t_len, b_len, |t, b| 0.3 * (t as f64 - 2.5) + 0.1 * b as f64);
    let discounts = grid(t_len, b_len, |t, b| if b == 1 && t == cut { 0.0 } else { 0.9 });
    let rewards = grid(t_len, b_len, |t, b| (t + 2 * b) as f64);
    let values = grid(t_len, b_len, |t, b| (t as f64 - b as f64) * 0.5);
    let first = from_importance_weights(
        &log_rhos,
        &discounts,
        &rewards,
        &values,
        &[1.0, 1.0],
        Some(1.0),
        Some(1.0),
    )?;
    let after = |t: usize, b: usize| b == 1 && t > cut;
    let change = |x: &[f64]| -> Vec<f64> {
        x.iter()
            .enumerate()
            .map(|(i, v)| if after(i / b_len, i % b_len) { v + 100.0 } else { *v })
            .collect()
    };
    let second = from_importance_weights(
        &change(&log_rhos),
        &discounts,
        &change(&rewards),
        &change(&values),
        &[1.0, -50.0],
        Some(1.0),
        Some(1.0),
    )?;
    for t in 0..=cut {
        assert_eq!(first.vs[t * b_len + 1], second.vs[t * b_len + 1], "vs at t = {t}");
        assert_eq!(
            first.pg_advantages[t * b_len + 1],
            second.pg_advantages[t * b_len + 1],
            "pg_advantages at t = {t}"
        );
    }
    // At the cut itself the target is the clipped one-step return without bootstrap.
    let i = cut * b_len + 1;
    let rho = log_rhos[i].exp().min(1.0);
    assert_relative_eq!(first.vs[i], values[i] + rho * (rewards[i] - values[i]), epsilon = 1e-12);
    // Row 0 (no cut) does see the later data.
    assert_ne!(
        first.vs[0],
        from_importance_weights(
            &log_rhos,
            &discounts,
            &change_row0(&rewards, b_len),
            &values,
            &[1.0, 1.0],
            Some(1.0),
            Some(1.0),
        )?
        .vs[0]
    );
    Ok(())
}

/// `x` with row 0's last step changed.
fn change_row0(x: &[f64], b_len: usize) -> Vec<f64> {
    let mut y = x.to_vec();
    let last = y.len() - b_len;
    y[last] += 1.0;
    y
}

#[test]
fn none_thresholds_clip_nothing() -> TestResult {
    // None equals a threshold above every rho (and +inf), and differs from RLlib's default 1.0
    // once some rho exceeds 1.
    let (t_len, b_len) = (5, 4);
    let log_rhos = grid(t_len, b_len, |t, b| 0.4 * t as f64 - 0.3 * b as f64);
    let discounts = grid(t_len, b_len, |_, b| 0.8 + 0.05 * b as f64);
    let rewards = grid(t_len, b_len, |t, b| (t as f64 + 1.0) / (b as f64 + 1.0));
    let values = grid(t_len, b_len, |t, b| 0.2 * (t + b) as f64);
    let bootstrap = [0.5, 1.0, 1.5, 2.0];
    let run = |bar: Option<f64>| {
        from_importance_weights(&log_rhos, &discounts, &rewards, &values, &bootstrap, bar, bar)
    };
    let max_rho = log_rhos.iter().fold(0.0_f64, |m, lr| m.max(lr.exp()));
    let none = run(None)?;
    assert_eq!(none, run(Some(f64::INFINITY))?);
    assert_eq!(none, run(Some(max_rho * 1.01))?);
    assert_ne!(none, run(Some(1.0))?);
    Ok(())
}

#[test]
fn into_matches_allocating_form_and_overwrites_buffers() -> TestResult {
    let (t_len, b_len) = (4, 3);
    let log_rhos = grid(t_len, b_len, |t, b| 0.2 * t as f64 - 0.1 * b as f64);
    let discounts = vec![0.99; t_len * b_len];
    let rewards = grid(t_len, b_len, |t, _| t as f64);
    let values = grid(t_len, b_len, |_, b| b as f64);
    let bootstrap = [1.0, 2.0, 3.0];
    let ret = from_importance_weights(
        &log_rhos,
        &discounts,
        &rewards,
        &values,
        &bootstrap,
        Some(1.0),
        None,
    )?;
    // Stale contents (even NaN) in the caller's buffers do not leak into the result.
    let (mut vs, mut pg) = (vec![f64::NAN; t_len * b_len], vec![7.0; t_len * b_len]);
    from_importance_weights_into(
        &log_rhos,
        &discounts,
        &rewards,
        &values,
        &bootstrap,
        Some(1.0),
        None,
        &mut vs,
        &mut pg,
    )?;
    assert_eq!(vs, ret.vs);
    assert_eq!(pg, ret.pg_advantages);
    Ok(())
}

#[test]
fn empty_batches_are_fine() -> TestResult {
    // T = 0 with B = 2, and B = 0: nothing to compute, no error.
    let ret =
        from_importance_weights::<f32>(&[], &[], &[], &[], &[1.0, 2.0], Some(1.0), Some(1.0))?;
    assert!(ret.vs.is_empty() && ret.pg_advantages.is_empty());
    let ret = from_importance_weights::<f64>(&[], &[], &[], &[], &[], None, None)?;
    assert!(ret.vs.is_empty());
    Ok(())
}

#[test]
fn extreme_log_rhos_stay_finite_when_clipped() -> TestResult {
    // rho = e^80 (f32 max is ~e^88.7) and e^-80: clipped at 1, the targets are ordinary.
    let ret = from_importance_weights(
        &[80.0_f32, -80.0],
        &[0.9, 0.9],
        &[1.0, 1.0],
        &[0.0, 0.0],
        &[0.0, 0.0],
        Some(1.0),
        Some(1.0),
    )?;
    assert_relative_eq!(ret.vs[0], 1.0);
    assert!(ret.vs[1] > 0.0 && ret.vs[1] < 1e-30);
    Ok(())
}

#[test]
fn f32_importance_weights_are_exp_within_two_epsilon() -> TestResult {
    // With one step, zero values and discount, unit rewards and no clipping, pg_advantages =
    // rho = exp(log_rho): checks the crate's f32 exp against f64 exp over its unsaturated
    // range [-87.3, 88.3], to a relative error of 2 f32::EPSILON.
    let log_rhos: Vec<f32> = (0..=20_000).map(|i| -87.3 + 175.6 * i as f32 / 20_000.0).collect();
    let n = log_rhos.len();
    let ret = from_importance_weights(
        &log_rhos,
        &vec![0.0; n],
        &vec![1.0; n],
        &vec![0.0; n],
        &vec![0.0; n],
        None,
        None,
    )?;
    for (lr, rho) in log_rhos.iter().zip(&ret.pg_advantages) {
        let exact = f64::from(*lr).exp();
        let eps = f64::from(f32::EPSILON) * exact;
        assert!((f64::from(*rho) - exact).abs() <= 2.0 * eps, "exp({lr}) = {rho}, exact {exact}");
    }
    // Beyond f32's normal range the weights saturate at e^88.3 and e^-87.3 (documented):
    // finite, so clipped targets stay ordinary.
    let ret = from_importance_weights(
        &[89.0_f32, 1000.0, -95.0, -1000.0],
        &[0.0; 4],
        &[1.0; 4],
        &[0.0; 4],
        &[0.0; 4],
        None,
        None,
    )?;
    let (high, low) = (f64::from(88.3_f32).exp(), f64::from(-87.3_f32).exp());
    for (rho, saturated) in ret.pg_advantages.iter().zip([high, high, low, low]) {
        let eps = f64::from(f32::EPSILON);
        assert_relative_eq!(f64::from(*rho), saturated, max_relative = 2.0 * eps);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Raising `clip_pg_rho_threshold` never shrinks an advantage's magnitude (it scales the
    /// same TD error by min(rho, bar)), and leaves vs alone.
    #[test]
    fn pg_clipping_is_monotone(
        log_rhos in prop::collection::vec(-2.5..2.5_f64, 12),
        rewards in prop::collection::vec(-5.0..5.0_f64, 12),
        values in prop::collection::vec(-5.0..5.0_f64, 12),
        low in 0.05..2.0_f64,
        extra in 0.0..2.0_f64,
    ) {
        let run = |bar: Option<f64>| from_importance_weights(
            &log_rhos, &[0.9; 12], &rewards, &values, &[0.5, -0.5, 1.0], Some(1.0), bar,
        );
        let (lo, hi, none) = (run(Some(low))?, run(Some(low + extra))?, run(None)?);
        prop_assert_eq!(&lo.vs, &hi.vs);
        for i in 0..12 {
            prop_assert!(lo.pg_advantages[i].abs() <= hi.pg_advantages[i].abs());
            prop_assert!(hi.pg_advantages[i].abs() <= none.pg_advantages[i].abs());
        }
    }

    /// With every TD error non-negative (zero values, non-negative rewards and bootstrap),
    /// raising `clip_rho_threshold` never lowers a target: each delta_t V grows with rho_bar
    /// and the trace coefficients c_t do not depend on it.
    #[test]
    fn rho_clipping_is_monotone(
        log_rhos in prop::collection::vec(-2.5..2.5_f64, 12),
        rewards in prop::collection::vec(0.0..5.0_f64, 12),
        discounts in prop::collection::vec(0.0..1.0_f64, 12),
        low in 0.05..2.0_f64,
        extra in 0.0..2.0_f64,
    ) {
        let run = |bar: Option<f64>| from_importance_weights(
            &log_rhos, &discounts, &rewards, &[0.0; 12], &[1.0, 0.0, 2.0], bar, Some(1.0),
        );
        let (lo, hi, none) = (run(Some(low))?, run(Some(low + extra))?, run(None)?);
        for i in 0..12 {
            prop_assert!(lo.vs[i] <= hi.vs[i], "vs[{}]: {} > {}", i, lo.vs[i], hi.vs[i]);
            prop_assert!(hi.vs[i] <= none.vs[i]);
        }
    }
}
