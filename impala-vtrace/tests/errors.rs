//! Typed errors: which argument, which shape, which index.

use impala_vtrace::{
    from_importance_weights, from_importance_weights_into, from_logits, get_log_rhos,
    log_probs_from_logits_and_actions, multi_from_logits, multi_log_probs_from_logits_and_actions,
    VTraceError,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Valid T = 3, B = 2 inputs: (log_rhos, discounts, rewards, values, bootstrap_value).
fn valid() -> [Vec<f64>; 5] {
    [vec![0.1; 6], vec![0.9; 6], vec![1.0; 6], vec![0.5; 6], vec![0.0; 2]]
}

fn run(x: &[Vec<f64>; 5]) -> Result<(), VTraceError> {
    from_importance_weights(&x[0], &x[1], &x[2], &x[3], &x[4], Some(1.0), Some(1.0)).map(drop)
}

#[test]
fn each_time_major_argument_is_checked_by_name() {
    for (k, argument) in ["discounts", "rewards", "values"].into_iter().enumerate() {
        let mut x = valid();
        x[k + 1].pop();
        assert_eq!(
            run(&x),
            Err(VTraceError::ShapeMismatch { argument, expected: vec![3, 2], got: 5 })
        );
    }
}

#[test]
fn log_rhos_must_be_whole_time_steps() {
    let mut x = valid();
    x[0].push(0.0);
    let err = run(&x);
    assert_eq!(
        err,
        Err(VTraceError::NotWholeRows {
            argument: "log_rhos",
            got: 7,
            row_len: 2,
            row: "B values, the length of `bootstrap_value`",
        })
    );
    // A bootstrap_value of the wrong length (4 does not divide 6) shows up as log_rhos not
    // being whole time steps.
    let mut x = valid();
    x[4].extend([0.0, 0.0]);
    assert!(matches!(run(&x), Err(VTraceError::NotWholeRows { argument: "log_rhos", .. })));
    // Data but no rows at all.
    let mut x = valid();
    x[4].clear();
    assert!(matches!(
        run(&x),
        Err(VTraceError::NotWholeRows { argument: "log_rhos", got: 6, row_len: 0, .. })
    ));
}

#[test]
fn non_finite_inputs_name_argument_and_index() {
    let names = ["log_rhos", "discounts", "rewards", "values"];
    for (k, argument) in names.into_iter().enumerate() {
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let mut x = valid();
            x[k][5] = bad; // t = 2, b = 1
            let err = run(&x);
            assert!(
                matches!(&err, Err(VTraceError::NonFinite { argument: a, index, value })
                    if *a == argument && *index == [2, 1] && (value.is_nan() == bad.is_nan())),
                "{argument} = {bad}: {err:?}"
            );
        }
    }
    let mut x = valid();
    x[4][1] = f64::NAN;
    assert!(matches!(
        run(&x),
        Err(VTraceError::NonFinite { argument: "bootstrap_value", index, .. }) if index == [1]
    ));
}

#[test]
fn thresholds_must_be_non_negative_numbers() -> TestResult {
    let x = valid();
    for (bad_rho, bad_pg, argument) in [
        (Some(f64::NAN), None, "clip_rho_threshold"),
        (Some(-1.0), None, "clip_rho_threshold"),
        (None, Some(-0.5), "clip_pg_rho_threshold"),
    ] {
        let err = from_importance_weights(&x[0], &x[1], &x[2], &x[3], &x[4], bad_rho, bad_pg);
        assert!(
            matches!(&err, Err(VTraceError::InvalidThreshold { argument: a, .. }) if *a == argument),
            "{err:?}"
        );
    }
    // 0 is a legal threshold (RLlib clips at it): every rho becomes 0 and vs = values.
    let ret = from_importance_weights(&x[0], &x[1], &x[2], &x[3], &x[4], Some(0.0), Some(0.0))?;
    assert_eq!(ret.vs, x[3]);
    assert!(ret.pg_advantages.iter().all(|&a| a == 0.0));
    Ok(())
}

#[test]
fn output_buffers_are_checked_and_untouched_on_error() {
    let x = valid();
    let (mut vs, mut pg) = (vec![0.0; 5], vec![0.0; 6]);
    let err = from_importance_weights_into(
        &x[0], &x[1], &x[2], &x[3], &x[4], None, None, &mut vs, &mut pg,
    );
    assert_eq!(
        err,
        Err(VTraceError::ShapeMismatch { argument: "vs", expected: vec![3, 2], got: 5 })
    );
    let mut bad = valid();
    bad[2][0] = f64::NAN;
    let (mut vs, mut pg) = (vec![-1.0; 6], vec![-2.0; 6]);
    assert!(from_importance_weights_into(
        &bad[0], &bad[1], &bad[2], &bad[3], &bad[4], None, None, &mut vs, &mut pg,
    )
    .is_err());
    assert_eq!((vs, pg), (vec![-1.0; 6], vec![-2.0; 6]));
}

#[test]
fn messages_say_argument_shape_and_index() {
    let mut x = valid();
    x[2].pop();
    let msg = run(&x).map_err(|e| e.to_string());
    assert_eq!(msg, Err("`rewards` must have shape [3, 2] (6 values), got 5 values".to_string()));
    let mut x = valid();
    x[3][3] = f64::INFINITY;
    let msg = run(&x).map_err(|e| e.to_string());
    assert_eq!(msg, Err("`values`[1, 1] is inf; V-trace inputs must be finite".to_string()));
}

#[test]
fn logits_errors() {
    // Logits of the wrong size.
    let err = log_probs_from_logits_and_actions(&[0.0_f64; 5], &[0_u8, 1], 3);
    assert_eq!(
        err,
        Err(VTraceError::ShapeMismatch { argument: "policy_logits", expected: vec![2, 3], got: 5 })
    );
    // Actions that are not indices in range: negative, fractional, too large.
    for bad in [-1.0_f32, 0.5, 3.0, f32::NAN] {
        let err = log_probs_from_logits_and_actions(&[0.0_f32; 6], &[0.0, bad], 3);
        assert!(
            matches!(&err, Err(VTraceError::InvalidAction { argument: "actions", index, num_actions: 3, .. }) if *index == [1]),
            "{bad}: {err:?}"
        );
    }
    // A MultiDiscrete action of the second component out of its own range (2 actions).
    let err = multi_log_probs_from_logits_and_actions(&[0.0_f64; 10], &[0_i32, 1, 2, 2], &[3, 2]);
    assert!(matches!(
        &err,
        Err(VTraceError::InvalidAction { index, num_actions: 2, .. }) if *index == [1, 1]
    ));
    // Actions that are not [N, K].
    let err = multi_log_probs_from_logits_and_actions(&[0.0_f64; 5], &[0_i32, 1, 2], &[3, 2]);
    assert!(matches!(
        err,
        Err(VTraceError::NotWholeRows { argument: "actions", got: 3, row_len: 2, .. })
    ));
    // Empty action spaces.
    for nvec in [&[][..], &[2, 0][..]] {
        let err = multi_log_probs_from_logits_and_actions(&[0.0_f64; 2], &[0_u8], nvec);
        assert_eq!(err, Err(VTraceError::InvalidActionSpace { nvec: nvec.to_vec() }));
    }
    // A non-finite logit, by index [n, logit].
    let err = log_probs_from_logits_and_actions(&[0.0, 0.0, f64::NAN, 0.0], &[0_u8, 1], 2);
    assert!(matches!(
        &err,
        Err(VTraceError::NonFinite { argument: "policy_logits", index, .. }) if *index == [1, 0]
    ));
}

#[test]
fn from_logits_names_the_logits_at_fault() {
    // T = 2, B = 1, 3 actions; the behaviour logits are one short.
    let value_side = [vec![0.9; 2], vec![1.0; 2], vec![0.0; 2], vec![0.0; 1]];
    let err = from_logits(
        &[0.0_f64; 5],
        &[0.0; 6],
        &[0_u8, 2],
        &value_side[0],
        &value_side[1],
        &value_side[2],
        &value_side[3],
        3,
        None,
        None,
    );
    assert_eq!(
        err,
        Err(VTraceError::ShapeMismatch {
            argument: "behaviour_policy_logits",
            expected: vec![2, 1, 3],
            got: 5
        })
    );
    // MultiDiscrete actions are [T, B, K].
    let err = multi_from_logits(
        &[0.0_f64; 10],
        &[0.0; 10],
        &[0_u8, 1, 2],
        &value_side[0],
        &value_side[1],
        &value_side[2],
        &value_side[3],
        &[3, 2],
        None,
        None,
        None,
    );
    assert_eq!(
        err,
        Err(VTraceError::ShapeMismatch { argument: "actions", expected: vec![2, 1, 2], got: 3 })
    );
}

#[test]
fn get_log_rhos_checks_components() {
    let err = get_log_rhos(&[vec![0.0_f64; 2], vec![0.0; 2]], &[vec![0.0; 2]]);
    assert_eq!(
        err,
        Err(VTraceError::ComponentMismatch {
            argument: "behaviour_action_log_probs",
            expected: 2,
            got: 1
        })
    );
    let err = get_log_rhos(&[vec![0.0_f64; 2]], &[vec![0.0; 3]]);
    assert!(matches!(
        err,
        Err(VTraceError::ShapeMismatch { argument: "behaviour_action_log_probs", .. })
    ));
    let none: [Vec<f64>; 0] = [];
    assert!(matches!(get_log_rhos(&none, &none), Err(VTraceError::ComponentMismatch { .. })));
}
