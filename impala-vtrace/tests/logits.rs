//! Log-probabilities and log-rhos from logits (DeepMind's `test_log_probs_from_logits_and_actions`
//! and `test_vtrace_from_logits`, RLlib's `multi_from_logits`).

use approx::assert_relative_eq;
use impala_vtrace::{
    from_importance_weights, from_logits, get_log_rhos, log_probs_from_logits_and_actions,
    multi_from_logits, multi_log_probs_from_logits_and_actions,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Naive `log(softmax(row)[a])`, as DeepMind's test computes its expectation.
fn naive_log_prob(row: &[f64], a: usize) -> f64 {
    let sum: f64 = row.iter().map(|x| x.exp()).sum();
    (row[a].exp() / sum).ln()
}

#[test]
fn log_probs_match_log_softmax_deepmind_inputs() -> TestResult {
    // DeepMind: policy_logits = _shaped_arange(T, B, A) + 10, actions in 0..A.
    let (t_len, b_len, n_act) = (7, 3, 5);
    let logits: Vec<f64> = (0..t_len * b_len * n_act).map(|i| i as f64 + 10.0).collect();
    let actions: Vec<i64> = (0..t_len * b_len).map(|i| (i * 3 % n_act) as i64).collect();
    let log_probs = log_probs_from_logits_and_actions(&logits, &actions, n_act)?;
    for (n, (&a, lp)) in actions.iter().zip(&log_probs).enumerate() {
        let row = &logits[n * n_act..(n + 1) * n_act];
        assert_relative_eq!(*lp, naive_log_prob(row, a as usize), epsilon = 1e-12);
    }
    Ok(())
}

#[test]
fn log_probs_are_stable_for_huge_logits() -> TestResult {
    // exp(1000) overflows; the max-shifted log_softmax does not.
    let lp = log_probs_from_logits_and_actions(&[1000.0_f32, 1000.0, 999.0], &[2.0_f32], 3)?;
    let expected = -1.0 - (2.0 + (-1.0_f64).exp()).ln();
    assert_relative_eq!(f64::from(lp[0]), expected, epsilon = 1e-6);
    // A large negative finite logit (RLlib's FLOAT_MIN masking) gives a hugely negative log-prob.
    let lp = log_probs_from_logits_and_actions(&[0.0_f32, -3.4e38], &[1_u8], 2)?;
    assert!(lp[0] < -1e38 && lp[0].is_finite());
    Ok(())
}

#[test]
fn from_logits_equals_from_importance_weights_of_log_prob_difference() -> TestResult {
    // DeepMind test_vtrace_from_logits: no clipping, and the log-probs are returned.
    let (t_len, b_len, n_act) = (5, 2, 3);
    let n = t_len * b_len;
    let behaviour: Vec<f64> = (0..n * n_act).map(|i| ((i * 7 % 11) as f64 - 5.0) * 0.3).collect();
    let target: Vec<f64> = (0..n * n_act).map(|i| ((i * 5 % 13) as f64 - 6.0) * 0.25).collect();
    let actions: Vec<f32> = (0..n).map(|i| (i % n_act) as f32).collect();
    let discounts = vec![0.9; n];
    let rewards: Vec<f64> = (0..n).map(|i| i as f64 * 0.5).collect();
    let values: Vec<f64> = (0..n).map(|i| 1.0 - i as f64 * 0.1).collect();
    let bootstrap = [0.3, -0.2];
    let ret = from_logits(
        &behaviour, &target, &actions, &discounts, &rewards, &values, &bootstrap, n_act, None, None,
    )?;
    let blp = log_probs_from_logits_and_actions(&behaviour, &actions, n_act)?;
    let tlp = log_probs_from_logits_and_actions(&target, &actions, n_act)?;
    assert_eq!(ret.behaviour_action_log_probs, blp);
    assert_eq!(ret.target_action_log_probs, tlp);
    let log_rhos: Vec<f64> = tlp.iter().zip(&blp).map(|(t, b)| t - b).collect();
    assert_eq!(ret.log_rhos, log_rhos);
    let expected =
        from_importance_weights(&log_rhos, &discounts, &rewards, &values, &bootstrap, None, None)?;
    assert_eq!(ret.vs, expected.vs);
    assert_eq!(ret.pg_advantages, expected.pg_advantages);
    Ok(())
}

#[test]
fn multi_discrete_log_rhos_sum_the_components() -> TestResult {
    // T = 2, B = 2, MultiDiscrete([3, 2]): logits [T, B, 5], actions [T, B, 2].
    let nvec = [3, 2];
    let n = 4;
    let behaviour: Vec<f64> = (0..n * 5).map(|i| (i as f64 * 0.37).sin()).collect();
    let target: Vec<f64> = (0..n * 5).map(|i| (i as f64 * 0.21).cos()).collect();
    let actions: Vec<u32> = vec![0, 1, 2, 0, 1, 1, 2, 1];
    let ret = multi_from_logits(
        &behaviour,
        &target,
        &actions,
        &[0.9; 4],
        &[1.0; 4],
        &[0.0; 4],
        &[0.5, 0.5],
        &nvec,
        // Ignored with several components, as in RLlib: recomputed from the logits.
        Some(&[123.0; 4]),
        Some(1.0),
        Some(1.0),
    )?;
    let blp = multi_log_probs_from_logits_and_actions(&behaviour, &actions, &nvec)?;
    let tlp = multi_log_probs_from_logits_and_actions(&target, &actions, &nvec)?;
    assert_eq!(ret.behaviour_action_log_probs, blp);
    assert_eq!(ret.target_action_log_probs, tlp);
    for i in 0..n {
        // Component 0 reads logits 0..3 of row i, component 1 logits 3..5.
        let (b_row, t_row) = (&behaviour[i * 5..i * 5 + 5], &target[i * 5..i * 5 + 5]);
        let (a0, a1) = (actions[2 * i] as usize, actions[2 * i + 1] as usize);
        assert_relative_eq!(blp[0][i], naive_log_prob(&b_row[..3], a0), epsilon = 1e-12);
        assert_relative_eq!(blp[1][i], naive_log_prob(&b_row[3..], a1), epsilon = 1e-12);
        let expected = (naive_log_prob(&t_row[..3], a0) - naive_log_prob(&b_row[..3], a0))
            + (naive_log_prob(&t_row[3..], a1) - naive_log_prob(&b_row[3..], a1));
        assert_relative_eq!(ret.log_rhos[i], expected, epsilon = 1e-12);
    }
    assert_eq!(ret.log_rhos, get_log_rhos(&tlp, &blp)?);
    Ok(())
}

#[test]
fn single_component_uses_recorded_behaviour_log_probs() -> TestResult {
    // RLlib passes ACTION_LOGP; with one component it is used instead of recomputing.
    let recorded = [-0.5_f64, -1.5];
    let ret = multi_from_logits(
        &[0.0; 4],
        &[0.0; 4],
        &[0_u8, 1],
        &[0.9; 2],
        &[1.0; 2],
        &[0.0; 2],
        &[0.0],
        &[2],
        Some(&recorded),
        None,
        None,
    )?;
    assert_eq!(ret.behaviour_action_log_probs, vec![recorded.to_vec()]);
    let uniform = 0.5_f64.ln();
    assert_eq!(ret.log_rhos, [uniform + 0.5, uniform + 1.5]);
    Ok(())
}
