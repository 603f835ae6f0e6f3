//! What the learner benches share: the specs they train on, random train batches of T = 50
//! steps, and the embedded CartPole config's network as TorchScript.

use std::path::{Path, PathBuf};
use std::process::Command;

use impala_core::{EnvSpec, SampleBatch, Space};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Steps per row of every bench batch (RLlib's `rollout_fragment_length` of 50).
pub const T: usize = 50;

pub fn cartpole() -> EnvSpec {
    EnvSpec {
        id: "CartPole-v1".into(),
        observation_space: Space::Box {
            low: vec![-4.8, -5.0, -0.42, -5.0],
            high: vec![4.8, 5.0, 0.42, 5.0],
            shape: vec![4],
        },
        action_space: Space::Discrete(2),
        max_episode_steps: Some(500),
    }
}

pub fn atari() -> EnvSpec {
    atari_of(84)
}

/// Pong's spec with `size x size` frames (`examples/pong-impala-fast.toml` trains 42x42).
pub fn atari_of(size: usize) -> EnvSpec {
    EnvSpec {
        id: "ALE/Pong-v5".into(),
        observation_space: Space::Bytes { shape: vec![size, size, 4] },
        action_space: Space::Discrete(6),
        max_episode_steps: None,
    }
}

pub fn batch(spec: &EnvSpec, rows: usize, seed: u64) -> SampleBatch {
    batch_of(spec, T, rows, seed)
}

/// A random train batch of `rows` fragments of `t` steps.
pub fn batch_of(spec: &EnvSpec, t: usize, rows: usize, seed: u64) -> SampleBatch {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut b = SampleBatch::zeros(t, rows, &spec.observation_space, &spec.action_space, 0);
    let n_actions = spec.action_space.dist_inputs_dim();
    let bytes = matches!(spec.observation_space, Space::Bytes { .. });
    for obs in [&mut b.obs, &mut b.bootstrap_obs] {
        let values: Vec<f32> = (0..obs.len())
            .map(|_| {
                if bytes {
                    rng.random_range(0..=255u8).into()
                } else {
                    rng.random_range(-0.5..0.5)
                }
            })
            .collect();
        obs.write(0, &values);
    }
    for i in 0..t * rows {
        b.actions[i] = rng.random_range(0..n_actions) as f32;
        b.action_logp[i] = -(n_actions as f32).ln() + rng.random_range(-0.1..0.1);
        b.rewards[i] = 1.0;
        b.terminateds[i] = rng.random::<f32>() < 0.02;
    }
    b
}

/// `benches/cartpole_mlp.py` run with the venv's Python (or `IMPALA_PYTHON`): the embedded
/// CartPole config's network as TorchScript. `None`, saying why, where that Python cannot run.
pub fn scripted_cartpole_mlp() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = std::env::var_os("IMPALA_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("../.venv/bin/python"));
    let out =
        std::env::temp_dir().join(format!("impala-bench-cartpole-mlp-{}.pt", std::process::id()));
    let run = Command::new(&python).arg(root.join("benches/cartpole_mlp.py")).arg(&out).output();
    match run {
        Ok(done) if done.status.success() => Some(out),
        Ok(done) => {
            println!("skipping the TorchScript benches: {}", String::from_utf8_lossy(&done.stderr));
            None
        }
        Err(e) => {
            println!("skipping the TorchScript benches: {}: {e}", python.display());
            None
        }
    }
}
