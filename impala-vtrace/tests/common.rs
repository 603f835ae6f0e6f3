//! Helpers shared by the test modules.

/// A slow V-trace written from the paper's sum formula (Espeholt et al. 2018, eq. 1), in f64,
/// deliberately not the recursion the crate uses:
/// `v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i c_i) rho_t (r_t + gamma_t V(x_{t+1}) - V(x_t))`,
/// `pg_s = min(pg_rho_bar, pi/mu) (r_s + gamma_s v_{s+1} - V(x_s))`, with `V(x_T) = v_T = bootstrap`.
/// Returns `(vs, pg_advantages)`, `[T, B]` time-major.
pub fn vtrace_by_sum(
    log_rhos: &[f64],
    discounts: &[f64],
    rewards: &[f64],
    values: &[f64],
    bootstrap_value: &[f64],
    clip_rho_threshold: Option<f64>,
    clip_pg_rho_threshold: Option<f64>,
) -> (Vec<f64>, Vec<f64>) {
    let b_len = bootstrap_value.len();
    let t_len = log_rhos.len() / b_len;
    let at = |x: &[f64], t: usize, b: usize| x[t * b_len + b];
    let rho = |t: usize, b: usize| at(log_rhos, t, b).exp();
    let clip = |x: f64, bar: Option<f64>| bar.map_or(x, |bar| x.min(bar));
    let value = |t: usize, b: usize| {
        if t == t_len {
            bootstrap_value[b]
        } else {
            at(values, t, b)
        }
    };
    let mut vs = vec![0.0; t_len * b_len];
    for b in 0..b_len {
        for s in 0..t_len {
            let mut v_s = value(s, b);
            for t in s..t_len {
                let trace: f64 = (s..t).map(|i| at(discounts, i, b) * rho(i, b).min(1.0)).product();
                let delta = clip(rho(t, b), clip_rho_threshold)
                    * (at(rewards, t, b) + at(discounts, t, b) * value(t + 1, b) - value(t, b));
                v_s += trace * delta;
            }
            vs[s * b_len + b] = v_s;
        }
    }
    let mut pg = vec![0.0; t_len * b_len];
    for t in 0..t_len {
        for b in 0..b_len {
            let vs_next = if t + 1 == t_len { bootstrap_value[b] } else { vs[(t + 1) * b_len + b] };
            pg[t * b_len + b] = clip(rho(t, b), clip_pg_rho_threshold)
                * (at(rewards, t, b) + at(discounts, t, b) * vs_next - value(t, b));
        }
    }
    (vs, pg)
}

/// DeepMind scalable_agent `vtrace_test.test_vtrace` inputs for `T` steps and `B` rows:
/// `(log_rhos, discounts, rewards, values, bootstrap_value)`.
pub fn deepmind_inputs(t_len: usize, b_len: usize) -> [Vec<f64>; 5] {
    let n = t_len * b_len;
    let arange = |k: usize| k as f64;
    let log_rhos = (0..n).map(|i| 5.0 * (arange(i) / n as f64 - 0.5)).collect();
    let discounts = (0..n).map(|i| 0.9 / (arange(i % b_len) + 1.0)).collect();
    let rewards = (0..n).map(arange).collect();
    let values = (0..n).map(|i| arange(i) / b_len as f64).collect();
    let bootstrap = (0..b_len).map(|b| arange(b) + 1.0).collect();
    [log_rhos, discounts, rewards, values, bootstrap]
}

/// Narrows f64 data to f32.
pub fn to_f32(x: &[f64]) -> Vec<f32> {
    x.iter().map(|&v| v as f32).collect()
}
