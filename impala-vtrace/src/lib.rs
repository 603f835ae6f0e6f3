//! V-trace off-policy actor-critic targets (Espeholt et al. 2018, "IMPALA", section 4), in
//! pure Rust for `f32` and `f64`, with the names and argument order of RLlib's `vtrace_torch`.
//!
//! All `[T, B]` data is **time-major and row-major**: step `t` of batch row `b` is at
//! `t * B + b`, the layout of `impala_core::SampleBatch` and of RLlib's `make_time_major`.
//! `B` is the length of `bootstrap_value` and `T` follows from the other lengths.
//!
//! In the paper's notation, with `pi` the target policy, `mu` the behaviour policy,
//! `rho_t = min(rho_bar, pi(a_t|x_t) / mu(a_t|x_t))`, `c_t = min(1, pi/mu)` and
//! `delta_t V = rho_t (r_t + gamma_t V(x_{t+1}) - V(x_t))`:
//!
//! ```text
//! v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i c_i) delta_t V      (V(x_T) = bootstrap)
//! pg_advantage_s = min(pg_rho_bar, pi/mu) (r_s + gamma_s v_{s+1} - V(x_s))    (v_T = V(x_T))
//! ```
//!
//! - [`from_importance_weights`] / [`from_importance_weights_into`]: the targets from
//!   `log_rhos = log pi - log mu`; the `_into` form writes into caller buffers.
//! - [`from_logits`] (Discrete) and [`multi_from_logits`] (MultiDiscrete): the same from
//!   behaviour and target logits, also returning the log-probabilities and `log_rhos`.
//! - [`log_probs_from_logits_and_actions`], [`multi_log_probs_from_logits_and_actions`],
//!   [`get_log_rhos`]: the pieces.
//!
//! Every input is checked (shapes, finiteness, thresholds) and a failure is a [`VTraceError`]
//! naming the argument. The outputs carry no gradient (this crate has no autograd): a learner
//! uses them as constants, as RLlib's `detach()`.
//!
//! ```
//! use impala_vtrace::from_importance_weights;
//!
//! // T = 3 steps, B = 2 rows, time-major: [t0b0, t0b1, t1b0, t1b1, t2b0, t2b1].
//! let log_rhos = [0.1_f32, -0.2, 0.0, 0.3, -0.1, 0.0];
//! let discounts = [0.99, 0.99, 0.99, 0.0, 0.99, 0.99]; // row 1 terminates at t = 1
//! let rewards = [1.0, 0.0, 1.0, 1.0, 1.0, 0.0];
//! let values = [0.5, 0.2, 0.4, 0.3, 0.6, 0.1];
//! let bootstrap_value = [0.7, 0.0];
//! let ret = from_importance_weights(
//!     &log_rhos, &discounts, &rewards, &values, &bootstrap_value, Some(1.0), Some(1.0),
//! )?;
//! assert_eq!(ret.vs.len(), 6);
//! // The terminal step's target is its reward: discount 0 cuts the trace.
//! assert!((ret.vs[3] - 1.0).abs() < 1e-6);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod check;
mod error;
mod float;
mod logits;
mod vtrace;

pub use error::{Result, VTraceError};
pub use float::VTraceFloat;
pub use logits::{
    from_logits, get_log_rhos, log_probs_from_logits_and_actions, multi_from_logits,
    multi_log_probs_from_logits_and_actions, VTraceFromLogitsReturns,
};
pub use vtrace::{from_importance_weights, from_importance_weights_into, VTraceReturns};

/// The README's example runs as a doctest, so it cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
