//! The bridge is exact: Gymnasium's CartPole through workers matches the native one step for
//! step from the same start states and actions.

use impala_core::{Env, EnvSpec, StepOutcome};
use impala_envs::{StatefulEnv, VectorEnv};
use impala_gym::GymEnvPool;

use crate::{config, settings_n, TestResult};

/// A deterministic action for an observation (pushes against the pole's lean).
fn act(obs: &[f32]) -> f32 {
    if obs[2] + 0.1 * obs[3] > 0.0 {
        1.0
    } else {
        0.0
    }
}

/// Start states in Gymnasium's reset range (uniform in [-0.05, 0.05]), from a fixed LCG.
fn start_states(n: usize) -> Vec<[f64; 4]> {
    let mut x: u64 = 12345;
    let mut next = move || {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((x >> 11) as f64 / (1u64 << 53) as f64) * 0.1 - 0.05
    };
    (0..n).map(|_| [next(), next(), next(), next()]).collect()
}

/// The native CartPole whose k-th reset starts from `states[k]`, as the Python `CartPoleFrom`.
struct NativeFrom {
    env: Box<dyn StatefulEnv>,
    states: Vec<[f64; 4]>,
    k: usize,
}

impl NativeFrom {
    fn new(states: Vec<[f64; 4]>) -> Result<Self, impala_envs::EnvError> {
        Ok(NativeFrom {
            env: impala_envs::make_stateful("CartPole-v1", &Default::default())?,
            states,
            k: 0,
        })
    }
}

impl Env for NativeFrom {
    fn spec(&self) -> &EnvSpec {
        self.env.spec()
    }
    fn reset(&mut self, _seed: Option<u64>, obs: &mut [f32]) -> impala_core::Result<()> {
        let state = self.states[self.k % self.states.len()];
        self.k += 1;
        self.env.reset_to_state(&state, obs)
    }
    fn step(&mut self, action: &[f32], obs: &mut [f32]) -> impala_core::Result<StepOutcome> {
        self.env.step(action, obs)
    }
}

fn python_from(states: &[[f64; 4]], n: usize, k: usize) -> GymEnvPool {
    let mut s = settings_n("impala_test_envs:CartPoleFrom", n, k);
    s.env_config = config(&[("states", serde_json::to_value(states).unwrap_or_default())]);
    GymEnvPool::new(s)
}

#[test]
fn cartpole_matches_native_step_for_step() -> TestResult {
    let states = start_states(40);
    let mut python = python_from(&states, 1, 1).make(0, 0, 0)?;
    let mut native = NativeFrom::new(states)?;
    let (mut a, mut b) = ([0.0f32; 4], [0.0f32; 4]);
    python.reset(Some(0), &mut a)?;
    native.reset(Some(0), &mut b)?;
    assert_eq!(a, b, "start observation");
    let mut episodes = 0;
    for t in 0..6000 {
        // Mostly the balancing action, sometimes the other one, so episodes vary in length.
        let action = if t % 3 == 0 { 1.0 - act(&a) } else { act(&a) };
        let x = python.step(&[action], &mut a)?;
        let y = native.step(&[action], &mut b)?;
        assert_eq!((a, x), (b, y), "step {t}");
        if x.done() {
            episodes += 1;
            python.reset(None, &mut a)?;
            native.reset(None, &mut b)?;
            assert_eq!(a, b, "start of episode {episodes}");
        }
    }
    assert!(episodes > 10, "only {episodes} episodes");
    Ok(())
}

#[test]
fn a_vector_of_workers_matches_native_envs() -> TestResult {
    // 5 envs in workers of 2: three workers (2 + 2 + 1), stepped in parallel.
    let states = start_states(30);
    let pool = python_from(&states, 5, 2);
    let python: Vec<Box<dyn Env>> = (0..5)
        .map(|i| pool.make(0, 0, i).map(|e| Box::new(e) as Box<dyn Env>))
        .collect::<Result<_, _>>()?;
    let native: Vec<Box<dyn Env>> = (0..5)
        .map(|_| NativeFrom::new(states.clone()).map(|e| Box::new(e) as Box<dyn Env>))
        .collect::<Result<_, _>>()?;
    let (mut p, mut n) = (VectorEnv::new(python, Some(3))?, VectorEnv::new(native, Some(3))?);
    assert_eq!(p.reset()?, n.reset()?);
    let mut episodes = 0;
    for _ in 0..800 {
        let actions: Vec<f32> = p.obs().chunks(4).map(act).collect();
        let (x, y) = (p.step(&actions)?.clone(), n.step(&actions)?.clone());
        assert_eq!(x, y);
        episodes += x.episodes.len();
    }
    assert!(episodes > 0);
    Ok(())
}

#[test]
fn user_envs_by_entry_point_with_env_config() -> TestResult {
    // A gymnasium.Env subclass gets env_config as keyword arguments; an RLlib-style creator
    // function gets the dict.
    for entry in ["impala_test_envs:MatchBit", "impala_test_envs:make_match_bit"] {
        let mut s = settings_n(entry, 1, 1);
        s.env_config = config(&[("length", 3.into())]);
        let mut env = GymEnvPool::new(s).make(0, 0, 0)?;
        let mut obs = [0.0f32; 2];
        env.reset(Some(1), &mut obs)?;
        let mut steps = 0;
        loop {
            let action = if obs[1] > 0.5 { 1.0 } else { 0.0 };
            let out = env.step(&[action], &mut obs)?;
            steps += 1;
            assert_eq!(out.reward, 1.0, "{entry}: the optimal action pays");
            if out.done() {
                assert!(out.truncated && !out.terminated);
                break;
            }
        }
        assert_eq!(steps, 3, "{entry}: env_config.length was passed");
    }
    Ok(())
}

#[test]
fn workers_give_numerical_libraries_one_thread_unless_exported() -> TestResult {
    let names = ["OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"];
    let mut s = settings_n("impala_test_envs:Environ", 1, 1);
    s.env_config = config(&[("names", serde_json::json!(names))]);
    let mut env = GymEnvPool::new(s).make(0, 0, 0)?;
    let mut obs = vec![0.0; names.len()];
    env.reset(None, &mut obs)?;
    // A value exported to the trainer reaches its workers unchanged.
    let expected: Vec<f32> = names
        .iter()
        .map(|n| std::env::var(n).ok().and_then(|v| v.parse().ok()).unwrap_or(1.0))
        .collect();
    assert_eq!(obs, expected, "{names:?}");
    Ok(())
}

/// Whether `info` (a pickled dict) holds the string `tag`.
fn tagged(info: &[u8], tag: &str) -> bool {
    info.windows(tag.len()).any(|w| w == tag.as_bytes())
}

#[test]
fn infos_come_with_their_observations_only_when_recorded() -> TestResult {
    for record_infos in [true, false] {
        let mut s = settings_n("impala_test_envs:Tagged", 2, 2);
        s.record_infos = record_infos;
        let pool = GymEnvPool::new(s);
        let envs = (0..2).map(|i| Ok(Box::new(pool.make(0, 0, i)?) as Box<dyn Env>));
        let mut vec_env =
            VectorEnv::new(envs.collect::<Result<_, impala_gym::GymError>>()?, Some(0))?;
        vec_env.reset()?;
        let has =
            |info: &[u8], tag: &str| if record_infos { tagged(info, tag) } else { info.is_empty() };
        assert!(has(vec_env.info(0), "reset") && has(vec_env.info(1), "reset"));
        for t in 1..=7 {
            let step = vec_env.step(&[0.0, 1.0])?;
            let ended = t % 3 == 0;
            assert_eq!(step.done(0), ended);
            let final_infos = step.final_infos.clone();
            for (i, final_info) in final_infos.iter().enumerate() {
                if ended {
                    // The step's info goes with the final observation; the reset's with the next.
                    assert!(has(final_info, "step-3"), "step {t}, env {i}");
                    assert!(has(vec_env.info(i), "reset"), "step {t}, env {i}");
                } else {
                    assert!(has(vec_env.info(i), &format!("step-{}", t % 3)), "step {t}, env {i}");
                    assert!(final_info.is_empty());
                }
            }
        }
    }
    Ok(())
}
