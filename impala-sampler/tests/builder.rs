//! `TrainBatchBuilder` (replay on the driver or on `AggregationWorkers`, then concatenation)
//! and `AggregationWorkers` on their own.

use std::time::Duration;

use impala_core::{CoreError, SampleBatch, Space};
use impala_sampler::{
    AggregationWorkers, BatchingSettings, Result, SamplerError, TrainBatchBuilder,
};

use crate::support::{batching, nz, Deadline, TestResult};

/// A fragment of `t` steps and `b` rows whose rewards carry `id`.
fn fragment(t: usize, b: usize, id: f32) -> SampleBatch {
    let mut batch = SampleBatch::zeros(t, b, &Space::Discrete(3), &Space::Discrete(2), 0);
    batch.rewards.fill(id);
    batch
}

/// `workers` aggregation workers that wait up to 10 s for what they hold.
fn with_workers(settings: BatchingSettings, workers: usize) -> BatchingSettings {
    BatchingSettings {
        num_aggregation_workers: workers,
        aggregator_timeout: Some(Duration::from_secs(10)),
        ..settings
    }
}

#[test]
fn without_replay_every_step_is_trained_once_in_order() -> Result<()> {
    let mut builder = TrainBatchBuilder::new(&batching(25))?;
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
    assert!(builder.ready()?.is_empty()); // replay on the driver: `add` returned everything
    builder.shutdown()
}

#[test]
fn replay_proportion_one_mixes_one_old_batch_per_new_one() -> Result<()> {
    let settings = BatchingSettings {
        replay_proportion: 1.0, // replay_ratio 0.5: exactly one replayed batch per new batch
        replay_buffer_num_slots: 4,
        ..batching(40)
    };
    let mut builder = TrainBatchBuilder::new(&settings)?;
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
    // Replays are not new steps.
    assert_eq!(builder.num_added(), 200);
    Ok(())
}

#[test]
fn a_bad_replay_proportion_is_rejected() {
    let settings = BatchingSettings { replay_proportion: -1.0, ..batching(10) };
    assert!(matches!(TrainBatchBuilder::new(&settings).err(), Some(SamplerError::Replay { .. })));
    // The workers build the same buffer and reject it the same way.
    let workers = with_workers(settings, 1);
    assert!(matches!(TrainBatchBuilder::new(&workers).err(), Some(SamplerError::Replay { .. })));
}

#[test]
fn aggregation_workers_need_at_least_one_worker() {
    let err = AggregationWorkers::new(&batching(10)).err();
    assert!(matches!(
        err,
        Some(SamplerError::InvalidConfig { field: "num_aggregation_workers", .. })
    ));
}

#[test]
fn aggregation_workers_hold_at_most_their_cap_and_return_replay_parts() -> Result<()> {
    let settings = BatchingSettings {
        max_requests_in_flight_per_aggregator_worker: nz(3),
        ..with_workers(batching(30), 1)
    };
    let mut workers = AggregationWorkers::new(&settings)?;
    for round in 0..4 {
        let batches: Vec<SampleBatch> =
            (0..3).map(|k| fragment(10, 1, (round * 3 + k) as f32)).collect();
        for batch in &batches {
            workers.submit(batch.clone()).map_err(|_| SamplerError::InvalidConfig {
                field: "max_requests_in_flight_per_aggregator_worker",
                reason: "worker unexpectedly full".into(),
            })?;
        }
        // The cap is reached until `ready` collects; the refused batch is handed back.
        assert_eq!(workers.num_in_flight(), 3);
        let refused = workers.submit(fragment(10, 1, -1.0)).err();
        assert_eq!(refused, Some(fragment(10, 1, -1.0)));
        let outputs = workers.ready()?;
        assert_eq!(workers.num_in_flight(), 0);
        // No replay: each output is the batch itself, in order (one worker).
        let got: Vec<SampleBatch> =
            outputs.iter().flat_map(|parts| parts.iter().map(|p| (**p).clone())).collect();
        assert_eq!(got, batches);
    }
    workers.shutdown()
}

/// Feeds 12 fragments to both builders in rounds of 3 (one `ready` per round) and returns
/// what each built.
fn build_both(
    driver: &mut TrainBatchBuilder,
    workers: &mut TrainBatchBuilder,
) -> Result<(Vec<SampleBatch>, Vec<SampleBatch>)> {
    let (mut expected, mut got) = (Vec::new(), Vec::new());
    for round in 0..4 {
        for k in 0..3 {
            let batch = fragment(10, 1, (round * 3 + k) as f32);
            expected.extend(driver.add(batch.clone())?);
            // With workers the batch is handed over; train batches come from `ready`.
            assert!(workers.add(batch)?.is_empty());
        }
        assert_eq!(workers.num_waiting(), 0);
        got.extend(workers.ready()?);
    }
    Ok((expected, got))
}

#[test]
fn aggregation_workers_build_what_the_driver_would() -> Result<()> {
    let settings =
        BatchingSettings { max_requests_in_flight_per_aggregator_worker: nz(3), ..batching(30) };
    let mut driver = TrainBatchBuilder::new(&settings)?;
    let mut workers = TrainBatchBuilder::new(&with_workers(settings, 1))?;
    let (expected, got) = build_both(&mut driver, &mut workers)?;
    assert_eq!(got.len(), 4);
    assert_eq!(got, expected);
    assert_eq!(workers.num_added(), driver.num_added());
    driver.shutdown()?;
    workers.shutdown()
}

#[test]
fn with_replay_a_worker_builds_what_the_driver_would_with_its_seed() -> Result<()> {
    let settings = BatchingSettings {
        replay_proportion: 1.0,
        replay_buffer_num_slots: 4,
        max_requests_in_flight_per_aggregator_worker: nz(3),
        seed: Some(0),
        ..batching(40)
    };
    // Worker 0's replay RNG is seeded with `seed + 1`: a driver seeded so replays the same.
    let mut driver =
        TrainBatchBuilder::new(&BatchingSettings { seed: Some(1), ..settings.clone() })?;
    let mut workers = TrainBatchBuilder::new(&with_workers(settings, 1))?;
    let (expected, got) = build_both(&mut driver, &mut workers)?;
    // 12 new batches + 12 replays of 10 steps: 6 train batches of 40.
    assert_eq!(got.len(), 6);
    assert!(got.iter().all(|b| b.env_steps() == 40));
    assert_eq!(got, expected);
    driver.shutdown()?;
    workers.shutdown()
}

/// Central concatenation replaces the workers' own: batches of different lengths now fail in
/// `ready`, as a concatenation error, instead of failing a worker.
#[test]
fn a_batch_that_does_not_concatenate_fails_the_builder() -> Result<()> {
    let mut builder = TrainBatchBuilder::new(&with_workers(batching(20), 2))?;
    // Round robin: the two batches of different T go to different workers, and meet here.
    for batch in [fragment(10, 1, 0.0), fragment(5, 2, 0.0)] {
        assert!(builder.add(batch)?.is_empty());
    }
    let err = builder.ready().err();
    assert!(
        matches!(err, Some(SamplerError::Core(CoreError::IncompatibleBatches { .. }))),
        "{err:?}"
    );
    // The workers themselves are fine.
    builder.shutdown()
}

#[test]
fn the_builder_keeps_batches_no_worker_could_take() -> TestResult {
    let settings = BatchingSettings {
        max_requests_in_flight_per_aggregator_worker: nz(1),
        ..with_workers(batching(20), 1)
    };
    let mut builder = TrainBatchBuilder::new(&settings)?;
    for id in 0..10 {
        assert!(builder.add(fragment(10, 1, id as f32))?.is_empty());
    }
    // One batch went to the worker; the other nine wait.
    assert_eq!(builder.num_waiting(), 9);
    let mut built = Vec::new();
    let deadline = Deadline::start();
    while built.len() < 5 {
        deadline.check("5 train batches")?;
        built.extend(builder.ready()?);
    }
    assert_eq!(builder.num_waiting(), 0);
    let ids: Vec<f32> = built.iter().flat_map(|b| b.rewards[..2].to_vec()).collect();
    assert_eq!(ids, (0..10).map(|i| i as f32).collect::<Vec<_>>());
    Ok(builder.shutdown()?)
}

/// With a train batch of two fragments, the first train batch is complete after exactly two,
/// wherever the replay runs.
#[test]
fn the_first_train_batch_arrives_after_exactly_two_fragments() -> Result<()> {
    for workers in [0, 1, 2, 4] {
        let settings = BatchingSettings {
            num_aggregation_workers: workers,
            aggregator_timeout: Some(Duration::from_secs(10)),
            ..batching(20)
        };
        let mut builder = TrainBatchBuilder::new(&settings)?;
        let mut first = builder.add(fragment(10, 1, 0.0))?;
        first.extend(builder.ready()?);
        assert!(first.is_empty(), "{workers} workers: {} train batches", first.len());
        assert_eq!(builder.num_steps_being_built(), 10, "{workers} workers");
        let mut second = builder.add(fragment(10, 1, 1.0))?;
        second.extend(builder.ready()?);
        assert_eq!(second.len(), 1, "{workers} workers");
        assert_eq!((second[0].env_steps(), second[0].num_rows), (20, 2), "{workers} workers");
        assert_eq!(second[0].rewards[..2], [0.0, 1.0], "{workers} workers");
        assert_eq!(builder.num_steps_being_built(), 0);
        builder.shutdown()?;
    }
    Ok(())
}
