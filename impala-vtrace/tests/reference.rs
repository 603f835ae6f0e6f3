//! Property tests against the paper's sum formula (`common::vtrace_by_sum`).

use approx::relative_eq;
use impala_vtrace::from_importance_weights;
use proptest::prelude::*;

use crate::common::{to_f32, vtrace_by_sum};

/// One V-trace problem: `[T, B]` inputs and thresholds, all exactly representable in f32.
#[derive(Debug, Clone)]
struct Problem {
    log_rhos: Vec<f64>,
    discounts: Vec<f64>,
    rewards: Vec<f64>,
    values: Vec<f64>,
    bootstrap_value: Vec<f64>,
    clip_rho_threshold: Option<f64>,
    clip_pg_rho_threshold: Option<f64>,
}

fn f32_valued(range: std::ops::Range<f32>) -> impl Strategy<Value = f64> {
    range.prop_map(f64::from)
}

/// A clipping threshold, or none (no clipping).
fn threshold() -> impl Strategy<Value = Option<f64>> {
    prop::option::of(f32_valued(0.05..4.0))
}

fn problem() -> impl Strategy<Value = Problem> {
    (1_usize..=12, 1_usize..=6).prop_flat_map(|(t, b)| {
        let n = t * b;
        // A discount of exactly 0 (episode end) about one step in six.
        let discount = prop_oneof![1 => Just(0.0), 5 => f32_valued(0.0..1.0)];
        (
            prop::collection::vec(f32_valued(-2.5..2.5), n),
            prop::collection::vec(discount, n),
            prop::collection::vec(f32_valued(-5.0..5.0), n),
            prop::collection::vec(f32_valued(-5.0..5.0), n),
            prop::collection::vec(f32_valued(-5.0..5.0), b),
            threshold(),
            threshold(),
        )
            .prop_map(
                |(log_rhos, discounts, rewards, values, bootstrap_value, rho, pg)| Problem {
                    log_rhos,
                    discounts,
                    rewards,
                    values,
                    bootstrap_value,
                    clip_rho_threshold: rho,
                    clip_pg_rho_threshold: pg,
                },
            )
    })
}

/// An upper bound on `sum_t |rho_t| (|r_t| + |gamma_t V(x_{t+1})| + |V(x_t)|)` over any row and
/// suffix: how large the terms V-trace adds up can get.
fn term_scale(p: &Problem) -> f64 {
    let b = p.bootstrap_value.len();
    let max_abs = |x: &[f64]| x.iter().fold(0.0_f64, |m, v| m.max(v.abs()));
    let rho = p.log_rhos.iter().fold(0.0_f64, |m, lr| m.max(lr.exp()));
    let td = max_abs(&p.rewards) + 2.0 * max_abs(&p.values).max(max_abs(&p.bootstrap_value));
    (p.log_rhos.len() / b) as f64 * rho * td
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn f64_matches_sum_formula(p in problem()) {
        let ret = from_importance_weights(
            &p.log_rhos, &p.discounts, &p.rewards, &p.values, &p.bootstrap_value,
            p.clip_rho_threshold, p.clip_pg_rho_threshold,
        )?;
        let (vs, pg) = vtrace_by_sum(
            &p.log_rhos, &p.discounts, &p.rewards, &p.values, &p.bootstrap_value,
            p.clip_rho_threshold, p.clip_pg_rho_threshold,
        );
        for i in 0..vs.len() {
            prop_assert!(relative_eq!(ret.vs[i], vs[i], epsilon = 1e-10, max_relative = 1e-10),
                "vs[{}]: {} vs sum formula {}", i, ret.vs[i], vs[i]);
            prop_assert!(relative_eq!(ret.pg_advantages[i], pg[i], epsilon = 1e-10, max_relative = 1e-10),
                "pg_advantages[{}]: {} vs sum formula {}", i, ret.pg_advantages[i], pg[i]);
        }
    }

    #[test]
    fn f32_matches_f64(p in problem()) {
        let ret = from_importance_weights(
            &p.log_rhos, &p.discounts, &p.rewards, &p.values, &p.bootstrap_value,
            p.clip_rho_threshold, p.clip_pg_rho_threshold,
        )?;
        let ret32 = from_importance_weights(
            &to_f32(&p.log_rhos), &to_f32(&p.discounts), &to_f32(&p.rewards), &to_f32(&p.values),
            &to_f32(&p.bootstrap_value),
            p.clip_rho_threshold.map(|x| x as f32), p.clip_pg_rho_threshold.map(|x| x as f32),
        )?;
        // f32 agrees to 1e-5 relative; where the result cancels towards 0, rounding is bounded
        // by the magnitude of the terms summed instead, about T * 6e-8 * that magnitude.
        let eps = 1e-6 * term_scale(&p);
        for i in 0..ret.vs.len() {
            prop_assert!(relative_eq!(f64::from(ret32.vs[i]), ret.vs[i], epsilon = eps, max_relative = 1e-5),
                "vs[{}]: f32 {} vs f64 {}", i, ret32.vs[i], ret.vs[i]);
            prop_assert!(relative_eq!(f64::from(ret32.pg_advantages[i]), ret.pg_advantages[i], epsilon = eps, max_relative = 1e-5),
                "pg_advantages[{}]: f32 {} vs f64 {}", i, ret32.pg_advantages[i], ret.pg_advantages[i]);
        }
    }
}
