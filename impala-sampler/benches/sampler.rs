//! Env steps per second of `EnvRunnerGroup` on CartPole-v1 with an MLP-sized policy
//! (4x256x256x2 + value head, pure Rust, per env row), and the latency from weight publication
//! to the first fragment sampled with those weights.

// `criterion_group!` generates an undocumented function.
#![allow(missing_docs)]

#[path = "support/mlp.rs"]
mod mlp;

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use impala_core::Policy;
use impala_sampler::{
    EnvFactory, EnvRunnerGroup, EnvRunnerGroupSettings, EnvRunnerSettings, PolicyFactory,
    RandomPolicy, Result, SamplerError,
};
use mlp::MlpPolicy;

const FRAGMENT: usize = 50;

/// CartPole-v1 envs and policies of `hiddens` (`None`: `RandomPolicy`, to show the sampler's own
/// per-step cost).
fn factories(hiddens: Option<&'static [usize]>) -> (EnvFactory, PolicyFactory) {
    let envs: EnvFactory = Arc::new(|ctx| {
        impala_envs::make("CartPole-v1", &ctx.env_config).map_err(|e| impala_core::CoreError::Env {
            env: "CartPole-v1".into(),
            reason: e.to_string(),
        })
    });
    let policies: PolicyFactory = Arc::new(move |id| {
        let env = impala_envs::make("CartPole-v1", &Default::default()).map_err(|e| {
            impala_core::CoreError::Env { env: "CartPole-v1".into(), reason: e.to_string() }
        })?;
        Ok(match hiddens {
            Some(h) => Box::new(MlpPolicy::new(env.spec(), h, id as u64)?) as Box<dyn Policy>,
            None => Box::new(RandomPolicy::new(env.spec(), id as u64)),
        })
    });
    (envs, policies)
}

fn group(runners: usize, envs: usize, hiddens: Option<&'static [usize]>) -> Result<EnvRunnerGroup> {
    let positive = |n: usize, field| {
        NonZeroUsize::new(n)
            .ok_or(SamplerError::InvalidConfig { field, reason: "must be at least 1".into() })
    };
    let settings = EnvRunnerGroupSettings {
        num_env_runners: runners,
        runner: EnvRunnerSettings {
            num_envs: positive(envs, "num_envs_per_env_runner")?,
            rollout_fragment_length: positive(FRAGMENT, "rollout_fragment_length")?,
            seed: Some(0),
            ..EnvRunnerSettings::default()
        },
        sample_timeout: Some(Duration::from_millis(10)),
        ..EnvRunnerGroupSettings::default()
    };
    let (e, p) = factories(hiddens);
    EnvRunnerGroup::new(&settings, e, p)
}

/// Samples until `steps` env steps arrived; returns the time taken.
fn sample_steps(group: &mut EnvRunnerGroup, steps: u64) -> Result<Duration> {
    let start = Instant::now();
    let mut got = 0;
    while got < steps {
        got += group.sample()?.iter().map(|f| f.batch.env_steps() as u64).sum::<u64>();
    }
    Ok(start.elapsed())
}

fn env_steps_per_second(c: &mut Criterion) {
    let mut g = c.benchmark_group("cartpole_mlp_env_steps");
    g.sample_size(10);
    for runners in [1, 2] {
        for envs in [1, 4, 16, 64] {
            let Ok(mut sampler) = group(runners, envs, Some(&[256, 256])) else { return };
            let per_iter = (runners * envs * FRAGMENT) as u64;
            g.throughput(Throughput::Elements(per_iter));
            g.bench_with_input(
                BenchmarkId::new(format!("runners_{runners}"), format!("envs_{envs}")),
                &per_iter,
                |b, &per_iter| {
                    b.iter_custom(|iters| {
                        sample_steps(&mut sampler, iters * per_iter).unwrap_or(Duration::MAX)
                    })
                },
            );
        }
    }
    g.finish();
    let mut g = c.benchmark_group("cartpole_random_env_steps");
    g.sample_size(10);
    for envs in [1, 64] {
        let Ok(mut sampler) = group(1, envs, None) else { return };
        let per_iter = (envs * FRAGMENT) as u64;
        g.throughput(Throughput::Elements(per_iter));
        g.bench_with_input(
            BenchmarkId::new("runners_1", format!("envs_{envs}")),
            &per_iter,
            |b, &n| {
                b.iter_custom(|iters| {
                    sample_steps(&mut sampler, iters * n).unwrap_or(Duration::MAX)
                })
            },
        );
    }
    g.finish();
}

fn weight_publication_to_use(c: &mut Criterion) {
    let mut g = c.benchmark_group("weights_publication_to_use");
    g.sample_size(10);
    let envs = 16;
    let Ok(mut sampler) = group(1, envs, Some(&[256, 256])) else { return };
    let Ok(env) = impala_envs::make("CartPole-v1", &Default::default()) else { return };
    let Ok(policy) = MlpPolicy::new(env.spec(), &[256, 256], 0) else { return };
    let mut version = 0;
    g.throughput(Throughput::Elements(1));
    g.bench_function(format!("runners_1_envs_{envs}"), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                version += 1;
                let weights = Arc::new(policy.weights(version));
                let start = Instant::now();
                sampler.sync_weights(0, weights, &[1]);
                // Until a delivered fragment was sampled with the new weights.
                'wait: loop {
                    let Ok(fragments) = sampler.sample() else { return Duration::MAX };
                    if fragments.iter().any(|f| f.batch.weights_version[0] == version) {
                        break 'wait;
                    }
                }
                total += start.elapsed();
            }
            total
        })
    });
    g.finish();
    let m = sampler.metrics();
    println!(
        "{{\"weight_syncs_applied\": {}, \"publication_to_policy_load_mean_s\": {:.6}}}",
        m.num_weight_syncs_applied, m.weight_sync_latency_mean_s
    );
}

criterion_group!(benches, env_steps_per_second, weight_publication_to_use);
criterion_main!(benches);
