//! Pendulum-v1 (swing-up of a torque-limited pendulum), as Gymnasium's `PendulumEnv`.

use super::{flat_box, numpy, Episode, ResetRng, StatefulEnv};
use crate::kwargs::Kwargs;
use crate::Registration;
use impala_core::{Env, EnvSpec, Result, StepOutcome};
use std::f64::consts::PI;

const MAX_SPEED: f64 = 8.0;
const MAX_TORQUE: f32 = 2.0;
const DT: f64 = 0.05;
const M: f64 = 1.0;
const L: f64 = 1.0;

/// Keyword arguments of `gymnasium.make("Pendulum-v1", ...)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PendulumConfig {
    /// Gravitational acceleration (Gymnasium's `g`, default 10.0).
    pub g: f64,
}

impl Default for PendulumConfig {
    fn default() -> Self {
        Self { g: 10.0 }
    }
}

/// A pendulum to swing up and hold upright: a continuous torque in `[-2, 2]` (larger actions are
/// clipped, as Gymnasium does), observation `[cos theta, sin theta, theta_dot]`, reward
/// `-(angle_normalize(theta)^2 + 0.1 theta_dot^2 + 0.001 u^2)`; never terminates (Pendulum-v1 is
/// truncated at 200 steps by its time limit). Angular velocity is clipped to `[-8, 8]`. Reset draws
/// `theta ~ U(-pi, pi)`, `theta_dot ~ U(-1, 1)`.
///
/// The torque stays `f32` where Gymnasium's numpy keeps it `float32` (`3.0 * u` and
/// `0.001 * u^2` are `float32` products), and squares are numpy's `x**2` (the C library's
/// `pow`), so rewards match to the last bit.
///
/// ```
/// use impala_core::Env;
/// use impala_envs::{Pendulum, PendulumConfig};
///
/// let mut env = Pendulum::new(PendulumConfig::default());
/// let mut obs = [0.0f32; 3];
/// env.reset(Some(0), &mut obs)?;
/// assert!(env.step(&[5.0], &mut obs)?.reward <= 0.0); // torque clipped to 2
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Pendulum {
    episode: Episode,
    config: PendulumConfig,
    state: [f64; 2],
    rng: ResetRng,
}

impl Pendulum {
    /// The Gymnasium id.
    pub const ID: &'static str = "Pendulum-v1";

    /// `Pendulum-v1` as Gymnasium registers it (200 steps, no reward threshold), taking `g`.
    pub(crate) fn registration() -> Registration {
        Registration::native(Self::ID, 200, |args: &Kwargs<'_>| {
            let g = args.f64("g", PendulumConfig::default().g)?;
            Ok(Self::new(PendulumConfig { g }))
        })
        .config_keys(["g"])
    }

    /// A Pendulum that must be reset before its first step.
    pub fn new(config: PendulumConfig) -> Self {
        let high = vec![1.0, 1.0, MAX_SPEED as f32];
        let low = high.iter().map(|h| -h).collect();
        let action_space = flat_box(vec![-MAX_TORQUE], vec![MAX_TORQUE]);
        Self {
            episode: Episode::new(Self::ID, flat_box(low, high), action_space),
            config,
            state: [0.0; 2],
            rng: ResetRng::new(),
        }
    }

    fn write_obs(&self, obs: &mut [f32]) {
        let [theta, theta_dot] = self.state;
        obs[0] = theta.cos() as f32;
        obs[1] = theta.sin() as f32;
        obs[2] = theta_dot as f32;
    }
}

/// Gymnasium's `angle_normalize`: `(x + pi) % (2 pi) - pi` with numpy's floored remainder.
fn angle_normalize(x: f64) -> f64 {
    let (a, b) = (x + PI, 2.0 * PI);
    let mut rem = a % b;
    if rem == 0.0 {
        rem = 0.0f64.copysign(b);
    } else if (b < 0.0) != (rem < 0.0) {
        rem += b;
    }
    rem - PI
}

impl Env for Pendulum {
    fn spec(&self) -> &EnvSpec {
        &self.episode.spec
    }

    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> Result<()> {
        self.episode.check(obs, false)?;
        self.rng.reseed(seed);
        self.state = [self.rng.uniform(-PI, PI), self.rng.uniform(-1.0, 1.0)];
        self.episode.start();
        self.write_obs(obs);
        Ok(())
    }

    fn step(&mut self, action: &[f32], obs: &mut [f32]) -> Result<StepOutcome> {
        self.episode.check(obs, true)?;
        self.episode.spec.action_space.check_action(action)?;
        let [th, thdot] = self.state;
        let g = self.config.g;
        let u = action[0].clamp(-MAX_TORQUE, MAX_TORQUE);
        // numpy's `x**2` is `pow(x, 2.0)` (`powf` for the float32 `u`), not `x * x`.
        let costs = numpy::square(angle_normalize(th))
            + 0.1 * numpy::square(thdot)
            + f64::from(0.001f32 * numpy::square_f32(u));
        // numpy multiplies the Python float `3.0 / (m * l**2)` by the float32 `u` in float32.
        let torque_term = f64::from((3.0 / (M * L * L)) as f32 * u);
        let newthdot = thdot + (3.0 * g / (2.0 * L) * th.sin() + torque_term) * DT;
        let newthdot = newthdot.clamp(-MAX_SPEED, MAX_SPEED);
        let newth = th + newthdot * DT;
        self.state = [newth, newthdot];
        self.episode.end_if(false);
        self.write_obs(obs);
        Ok(StepOutcome { reward: -costs, terminated: false, truncated: false })
    }
}

impl StatefulEnv for Pendulum {
    fn state(&self) -> &[f64] {
        &self.state
    }

    fn reset_to_state(&mut self, state: &[f64], obs: &mut [f32]) -> Result<()> {
        self.episode.check(obs, false)?;
        self.episode.check_state(state, 2)?;
        self.state.copy_from_slice(state);
        self.episode.start();
        self.write_obs(obs);
        Ok(())
    }
}
