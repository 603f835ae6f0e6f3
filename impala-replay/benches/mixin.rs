//! Cost of IMPALA's per-batch `add` then `replay` on CartPole-sized fragments, with and without
//! concatenating the output (RLlib always concatenates).
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use impala_core::{SampleBatch, Space};
use impala_replay::{MixInReplay, MixInReplayConfig};

fn fragment() -> Result<SampleBatch, impala_core::CoreError> {
    let obs = Space::continuous(vec![-1.0; 4], vec![1.0; 4])?;
    Ok(SampleBatch::zeros(50, 1, &obs, &Space::Discrete(2), 0))
}

fn add_replay(c: &mut Criterion) {
    let Ok(batch) = fragment() else { return };
    let mut group = c.benchmark_group("mixin_add_replay");
    group.throughput(Throughput::Elements(batch.env_steps() as u64));
    for proportion in [0.0, 1.0, 4.0] {
        let config = MixInReplayConfig::for_impala(proportion, 100, Some(0));
        let Ok(mut buffer) = config.and_then(MixInReplay::new) else { return };
        group.bench_with_input(BenchmarkId::new("parts", proportion), &batch, |b, batch| {
            b.iter(|| {
                buffer.add(batch.clone());
                buffer.replay().map(|r| r.num_batches())
            })
        });
        group.bench_with_input(BenchmarkId::new("concat", proportion), &batch, |b, batch| {
            b.iter(|| {
                buffer.add(batch.clone());
                buffer.replay().map(|r| r.concat().map(|c| c.num_rows))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, add_replay);
criterion_main!(benches);
