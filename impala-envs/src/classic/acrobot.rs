//! Acrobot-v1 (Sutton & Barto's two-link underactuated arm), as Gymnasium's `AcrobotEnv`.

use super::{flat_box, numpy, Episode, ResetRng, StatefulEnv};
use crate::kwargs::Kwargs;
use crate::Registration;
use impala_core::{Env, EnvSpec, Result, Space, StepOutcome};
use std::f64::consts::PI;

const DT: f64 = 0.2;
const LINK_LENGTH_1: f64 = 1.0;
const LINK_MASS_1: f64 = 1.0;
const LINK_MASS_2: f64 = 1.0;
const LINK_COM_POS_1: f64 = 0.5;
const LINK_COM_POS_2: f64 = 0.5;
const LINK_MOI: f64 = 1.0;
const MAX_VEL_1: f64 = 4.0 * PI;
const MAX_VEL_2: f64 = 9.0 * PI;
const AVAIL_TORQUE: [f64; 3] = [-1.0, 0.0, 1.0];

/// Two links hanging from a pivot, torque on the middle joint only: actions `0, 1, 2` apply
/// torque `-1, 0, +1`; observation `[cos t1, sin t1, cos t2, sin t2, dt1, dt2]`; reward -1 per
/// step and 0 on the terminating step, when the tip rises one link length above the pivot
/// (`-cos t1 - cos(t1 + t2) > 1`). Dynamics are Gymnasium's default `book` equations integrated
/// with one RK4 step of 0.2 s, angles wrapped to `[-pi, pi]` and velocities bounded to
/// `4 pi` / `9 pi`. Reset draws `U(-0.1, 0.1)^4`, rounded to `f32` as Gymnasium does, and the
/// reset observation takes numpy's `float32` `cos`/`sin` of that state (later ones, of the
/// `float64` state after a step, the C library's `f64` ones).
///
/// ```
/// use impala_core::Env;
/// use impala_envs::Acrobot;
///
/// let mut env = Acrobot::new();
/// let mut obs = [0.0f32; 6];
/// env.reset(Some(0), &mut obs)?;
/// assert_eq!(env.step(&[2.0], &mut obs)?.reward, -1.0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Acrobot {
    episode: Episode,
    state: [f64; 4],
    rng: ResetRng,
}

impl Default for Acrobot {
    fn default() -> Self {
        Self::new()
    }
}

impl Acrobot {
    /// The Gymnasium id.
    pub const ID: &'static str = "Acrobot-v1";

    /// `Acrobot-v1` as Gymnasium registers it (500 steps, solved at -100); no keyword
    /// arguments.
    pub(crate) fn registration() -> Registration {
        Registration::native(Self::ID, 500, |_: &Kwargs<'_>| Ok(Self::new()))
            .reward_threshold(-100.0)
    }

    /// An Acrobot that must be reset before its first step.
    pub fn new() -> Self {
        let high = vec![1.0, 1.0, 1.0, 1.0, MAX_VEL_1 as f32, MAX_VEL_2 as f32];
        let low = high.iter().map(|h| -h).collect();
        Self {
            episode: Episode::new(Self::ID, flat_box(low, high), Space::Discrete(3)),
            state: [0.0; 4],
            rng: ResetRng::new(),
        }
    }

    /// The observation of a stepped (`float64`) state: `cos`/`sin` in `f64`, then rounded.
    fn write_obs(&self, obs: &mut [f32]) {
        let [t1, t2, dt1, dt2] = self.state;
        let values = [t1.cos(), t1.sin(), t2.cos(), t2.sin(), dt1, dt2];
        for (o, v) in obs.iter_mut().zip(values) {
            *o = v as f32;
        }
    }

    /// The observation of a reset state, which Gymnasium keeps in `float32`: numpy's `float32`
    /// `cos`/`sin` (its own kernel, see [`numpy`]), not the rounded `f64` ones.
    fn write_reset_obs(&self, obs: &mut [f32]) {
        let [t1, t2, dt1, dt2] = self.state.map(|s| s as f32);
        let values = [
            numpy::cos_f32(t1),
            numpy::sin_f32(t1),
            numpy::cos_f32(t2),
            numpy::sin_f32(t2),
            dt1,
            dt2,
        ];
        obs[..6].copy_from_slice(&values);
    }

    fn terminal(&self) -> bool {
        let [t1, t2, ..] = self.state;
        -t1.cos() - (t2 + t1).cos() > 1.0
    }
}

/// Gymnasium's `_dsdt` with `book_or_nips = "book"`: the time derivative of the state under
/// torque `a`, expression for expression.
fn dsdt(s: [f64; 4], a: f64) -> [f64; 4] {
    let m1 = LINK_MASS_1;
    let m2 = LINK_MASS_2;
    let l1 = LINK_LENGTH_1;
    let lc1 = LINK_COM_POS_1;
    let lc2 = LINK_COM_POS_2;
    let i1 = LINK_MOI;
    let i2 = LINK_MOI;
    let g = 9.8;
    let [theta1, theta2, dtheta1, dtheta2] = s;
    // numpy's `x**2` calls `pow`, which is not always `x * x`. The link constants' squares
    // (Python floats, `pow` too) are exact, so `lc * lc` is the same number without the call.
    let sq = numpy::square;
    let (lc1_2, l1_2, lc2_2) = (lc1 * lc1, l1 * l1, lc2 * lc2);
    let d1 = m1 * lc1_2 + m2 * (l1_2 + lc2_2 + 2.0 * l1 * lc2 * theta2.cos()) + i1 + i2;
    let d2 = m2 * (lc2_2 + l1 * lc2 * theta2.cos()) + i2;
    let phi2 = m2 * lc2 * g * (theta1 + theta2 - PI / 2.0).cos();
    let phi1 = -m2 * l1 * lc2 * sq(dtheta2) * theta2.sin()
        - 2.0 * m2 * l1 * lc2 * dtheta2 * dtheta1 * theta2.sin()
        + (m1 * lc1 + m2 * l1) * g * (theta1 - PI / 2.0).cos()
        + phi2;
    let ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * sq(dtheta1) * theta2.sin() - phi2)
        / (m2 * lc2_2 + i2 - sq(d2) / d1);
    let ddtheta1 = -(d2 * ddtheta2 + phi1) / d1;
    [dtheta1, dtheta2, ddtheta1, ddtheta2]
}

/// One classic Runge-Kutta step of `DT`, as Gymnasium's `rk4(derivs, y0, [0, dt])` (the torque,
/// the augmented state's last entry, has derivative 0 and stays constant).
fn rk4(y0: [f64; 4], a: f64) -> [f64; 4] {
    let dt2 = DT / 2.0;
    let axpy = |k: [f64; 4], h: f64| std::array::from_fn(|i| y0[i] + h * k[i]);
    let k1 = dsdt(y0, a);
    let k2 = dsdt(axpy(k1, dt2), a);
    let k3 = dsdt(axpy(k2, dt2), a);
    let k4 = dsdt(axpy(k3, DT), a);
    std::array::from_fn(|i| y0[i] + DT / 6.0 * (k1[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i]))
}

/// Gymnasium's `wrap`: shifts `x` by whole periods into `[m, big_m]`.
fn wrap(mut x: f64, m: f64, big_m: f64) -> f64 {
    let diff = big_m - m;
    while x > big_m {
        x -= diff;
    }
    while x < m {
        x += diff;
    }
    x
}

/// Gymnasium's `bound`: `min(max(x, m), big_m)`.
fn bound(x: f64, m: f64, big_m: f64) -> f64 {
    let x = if m > x { m } else { x };
    if big_m < x {
        big_m
    } else {
        x
    }
}

impl Env for Acrobot {
    fn spec(&self) -> &EnvSpec {
        &self.episode.spec
    }

    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> Result<()> {
        self.episode.check(obs, false)?;
        self.rng.reseed(seed);
        for s in &mut self.state {
            *s = f64::from(self.rng.uniform(-0.1, 0.1) as f32);
        }
        self.episode.start();
        self.write_reset_obs(obs);
        Ok(())
    }

    fn step(&mut self, action: &[f32], obs: &mut [f32]) -> Result<StepOutcome> {
        self.episode.check(obs, true)?;
        let torque = AVAIL_TORQUE[self.episode.discrete_action(action)?];
        let ns = rk4(self.state, torque);
        self.state = [
            wrap(ns[0], -PI, PI),
            wrap(ns[1], -PI, PI),
            bound(ns[2], -MAX_VEL_1, MAX_VEL_1),
            bound(ns[3], -MAX_VEL_2, MAX_VEL_2),
        ];
        let terminated = self.terminal();
        self.episode.end_if(terminated);
        self.write_obs(obs);
        Ok(StepOutcome {
            reward: if terminated { 0.0 } else { -1.0 },
            terminated,
            truncated: false,
        })
    }
}

impl StatefulEnv for Acrobot {
    fn state(&self) -> &[f64] {
        &self.state
    }

    fn reset_to_state(&mut self, state: &[f64], obs: &mut [f32]) -> Result<()> {
        self.episode.check(obs, false)?;
        self.episode.check_state(state, 4)?;
        // Gymnasium's reset state is `float32`.
        for (s, &v) in self.state.iter_mut().zip(state) {
            *s = f64::from(v as f32);
        }
        self.episode.start();
        self.write_reset_obs(obs);
        Ok(())
    }
}
