//! `TrainBatchBuilder` and `AggregationWorkers`: replay mixing and concatenation.

use impala_core::{SampleBatch, Space};
use impala_sampler::{
    AggregationWorkers, Result, SamplerError, TrainBatchAggregator, TrainBatchBuilder,
};

use crate::support::config;

/// A fragment of `t` steps and `b` rows whose rewards carry `id`.
fn fragment(t: usize, b: usize, id: f32) -> SampleBatch {
    let mut batch = SampleBatch::zeros(t, b, &Space::Discrete(3), &Space::Discrete(2), 0);
    batch.rewards.fill(id);
    batch
}

#[test]
fn without_replay_every_step_is_trained_once_in_order() -> Result<()> {
    let mut cfg = config(1, 1, 10);
    cfg.train_batch_size = 25;
    let mut builder = TrainBatchBuilder::new(&cfg)?;
    let mut done = Vec::new();
    for id in 0..9 {
        done.extend(builder.add(fragment(10, 1, id as f32))?);
    }
    // 30 >= 25 after three fragments: three train batches of 3 rows, as RLlib overshoots.
    assert_eq!(done.len(), 3);
    assert!(done.iter().all(|b| b.env_steps() == 30 && b.num_rows == 3));
    let rows: Vec<f32> = done.iter().flat_map(|b| b.rewards[..3].to_vec()).collect();
    assert_eq!(rows, (0..9).map(|i| i as f32).collect::<Vec<_>>());
    assert_eq!(builder.num_steps_being_built(), 0);
    assert_eq!(builder.num_added(), 90);
    Ok(())
}

#[test]
fn replay_proportion_one_mixes_one_old_batch_per_new_one() -> Result<()> {
    let mut cfg = config(1, 1, 10);
    cfg.train_batch_size = 40;
    cfg.replay_proportion = 1.0; // replay_ratio 0.5: exactly one replayed batch per new batch
    cfg.replay_buffer_num_slots = 4;
    let mut builder = TrainBatchBuilder::new(&cfg)?;
    let mut done = Vec::new();
    for id in 0..20 {
        done.extend(builder.add(fragment(10, 1, id as f32))?);
    }
    // Each add yields 20 steps (new + replayed), so a train batch closes every second add.
    assert_eq!(done.len(), 10);
    for b in &done {
        assert_eq!(b.num_rows, 4);
        // Parts are [new, replayed, new, replayed]; replayed ids are never newer than the new one.
        assert!(b.rewards[1] <= b.rewards[0] && b.rewards[3] <= b.rewards[2]);
    }
    Ok(())
}

#[test]
fn a_bad_replay_proportion_is_rejected() {
    let mut cfg = config(1, 1, 10);
    cfg.replay_proportion = -1.0;
    assert!(matches!(TrainBatchBuilder::new(&cfg).err(), Some(SamplerError::Replay { .. })));
}

#[test]
fn aggregation_workers_build_what_the_driver_would() -> Result<()> {
    let mut cfg = config(1, 1, 10);
    cfg.train_batch_size = 30;
    cfg.num_aggregation_workers = 1;
    cfg.max_requests_in_flight_per_aggregator_worker = 3;
    cfg.timeout_s_aggregator_manager = 10.0;
    let mut workers = AggregationWorkers::new(&cfg)?;
    let mut driver = TrainBatchBuilder::new(&cfg)?;
    let mut expected = Vec::new();
    let mut got = Vec::new();
    for round in 0..4 {
        for k in 0..3 {
            let batch = fragment(10, 1, (round * 3 + k) as f32);
            expected.extend(driver.add(batch.clone())?);
            workers.submit(batch).map_err(|_| SamplerError::InvalidConfig {
                field: "max_requests_in_flight_per_aggregator_worker",
                reason: "worker unexpectedly full".into(),
            })?;
        }
        // The cap is reached until `ready` collects.
        assert_eq!(workers.num_in_flight(), 3);
        assert!(workers.submit(fragment(10, 1, -1.0)).is_err());
        got.extend(workers.ready()?);
        assert_eq!(workers.num_in_flight(), 0);
    }
    assert_eq!(got.len(), 4);
    assert_eq!(got, expected);
    workers.shutdown()
}

#[test]
fn a_batch_that_does_not_concatenate_fails_the_worker() -> Result<()> {
    let mut cfg = config(1, 1, 10);
    cfg.train_batch_size = 20;
    cfg.num_aggregation_workers = 2;
    cfg.timeout_s_aggregator_manager = 10.0;
    let mut workers = AggregationWorkers::new(&cfg)?;
    // Round robin: both batches of different T go to worker 0 (the second after 0 and 1 had one).
    for batch in [fragment(10, 1, 0.0), fragment(10, 1, 0.0), fragment(5, 2, 0.0)] {
        assert!(workers.submit(batch).is_ok());
    }
    let err = workers.ready().err();
    assert!(
        matches!(err, Some(SamplerError::AggregationWorkerFailed { worker_index: 0, .. })),
        "{err:?}"
    );
    workers.shutdown()
}

#[test]
fn the_aggregator_keeps_batches_no_worker_could_take() -> Result<()> {
    let mut cfg = config(1, 1, 10);
    cfg.train_batch_size = 20;
    cfg.num_aggregation_workers = 1;
    cfg.max_requests_in_flight_per_aggregator_worker = 1;
    cfg.timeout_s_aggregator_manager = 10.0;
    let mut aggregator = TrainBatchAggregator::new(&cfg)?;
    for id in 0..10 {
        aggregator.push(fragment(10, 1, id as f32));
    }
    // One batch went to the worker; the other nine wait.
    assert_eq!(aggregator.num_pending(), 9);
    let mut built = Vec::new();
    while built.len() < 5 {
        built.extend(aggregator.ready()?);
    }
    assert_eq!(aggregator.num_pending(), 0);
    let ids: Vec<f32> = built.iter().flat_map(|b| b.rewards[..2].to_vec()).collect();
    assert_eq!(ids, (0..10).map(|i| i as f32).collect::<Vec<_>>());
    aggregator.shutdown()
}
