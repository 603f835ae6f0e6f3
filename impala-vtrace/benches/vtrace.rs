//! V-trace throughput on time-major `[T, B]` f32 data, T = 50 (RLlib's default
//! `rollout_fragment_length`), in elements (`T * B`) per second.
#![allow(missing_docs, reason = "criterion_group! generates an undocumented pub fn")]

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use impala_vtrace::from_importance_weights_into;

const T: usize = 50;

/// Deterministic inputs in the ranges a learner sees (log-rhos in [-1, 1], discount 0.99 with
/// an episode end every 37 steps).
fn inputs(b: usize) -> [Vec<f32>; 5] {
    let n = T * b;
    let wave = |i: usize, k: f32| ((i as f32) * k).sin();
    let log_rhos = (0..n).map(|i| wave(i, 0.37)).collect();
    let discounts = (0..n).map(|i| if i % 37 == 0 { 0.0 } else { 0.99 }).collect();
    let rewards = (0..n).map(|i| wave(i, 0.11)).collect();
    let values = (0..n).map(|i| 2.0 * wave(i, 0.05)).collect();
    let bootstrap = (0..b).map(|i| wave(i, 0.3)).collect();
    [log_rhos, discounts, rewards, values, bootstrap]
}

fn bench_vtrace(c: &mut Criterion) {
    let mut group = c.benchmark_group("from_importance_weights_into_f32_T50");
    for b in [32, 256, 1024] {
        let [log_rhos, discounts, rewards, values, bootstrap] = inputs(b);
        let (mut vs, mut pg) = (vec![0.0_f32; T * b], vec![0.0_f32; T * b]);
        group.throughput(Throughput::Elements((T * b) as u64));
        group.bench_with_input(BenchmarkId::from_parameter(b), &b, |bench, _| {
            bench.iter(|| {
                from_importance_weights_into(
                    black_box(&log_rhos),
                    black_box(&discounts),
                    black_box(&rewards),
                    black_box(&values),
                    black_box(&bootstrap),
                    Some(1.0),
                    Some(1.0),
                    &mut vs,
                    &mut pg,
                )
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench_vtrace);
criterion_main!(benches);
