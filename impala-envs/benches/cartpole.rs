//! CartPole-v1 env steps per second, single-threaded: one env as `make` returns it (a boxed
//! `TimeLimit<CartPole>`, what an env runner holds), the bare `CartPole`, and a `VectorEnv` of 8.
//!
//! Actions come from a precomputed pseudo-random table, as a policy's batch output would: random
//! actions end an episode every ~20 steps, so resets are part of the cost.

// `criterion_group!` generates an undocumented function.
#![allow(missing_docs)]
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use impala_core::Env;
use impala_envs::{make, CartPole, CartPoleConfig, EnvConfig, VectorEnv};
use std::hint::black_box;

const STEPS: usize = 8_192;

/// 0/1 actions from a 64-bit LCG (Knuth's MMIX constants), one per step.
fn action_table() -> Vec<f32> {
    let mut x = 12_345u64;
    (0..STEPS)
        .map(|_| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (x >> 63) as f32
        })
        .collect()
}

/// Steps `env` once per action, resetting when an episode ends.
fn run(env: &mut dyn Env, actions: &[f32]) {
    let mut obs = [0.0f32; 4];
    let _ = env.reset(Some(0), &mut obs);
    for a in actions {
        match env.step(std::slice::from_ref(a), &mut obs) {
            Ok(outcome) if !outcome.done() => {}
            _ => {
                let _ = env.reset(None, &mut obs);
            }
        }
    }
    black_box(obs);
}

fn cartpole(c: &mut Criterion) {
    let actions = action_table();
    let mut group = c.benchmark_group("CartPole-v1");
    group.throughput(Throughput::Elements(STEPS as u64));
    group.bench_function("make (boxed TimeLimit)", |b| {
        b.iter_batched_ref(
            || make("CartPole-v1", &EnvConfig::new()),
            |env| {
                if let Ok(env) = env {
                    run(env.as_mut(), &actions);
                }
            },
            BatchSize::SmallInput,
        )
    });
    group.bench_function("bare CartPole", |b| {
        b.iter_batched_ref(
            || CartPole::new(CartPoleConfig::default()),
            |env| run(env, &actions),
            BatchSize::SmallInput,
        )
    });
    group.bench_function("VectorEnv of 8", |b| {
        b.iter_batched_ref(
            || {
                let envs: Result<Vec<_>, _> =
                    (0..8).map(|_| make("CartPole-v1", &EnvConfig::new())).collect();
                envs.and_then(|envs| VectorEnv::new(envs, Some(0)))
            },
            |vec_env| {
                if let Ok(vec_env) = vec_env {
                    for batch in actions.chunks_exact(8) {
                        if vec_env.step(batch).is_err() {
                            return;
                        }
                    }
                }
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, cartpole);
criterion_main!(benches);
