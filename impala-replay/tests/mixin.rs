//! Behaviour beyond RLlib's test: modes, errors, sharing, seeding.

use std::sync::Arc;

use impala_core::{SampleBatch, Space};
use impala_replay::{
    replay_ratio_from_proportion, MixInReplay, MixInReplayConfig, ReplayError, ReplayMode,
    ALL_POLICIES, DEFAULT_POLICY_ID,
};

use crate::TestResult;

fn config(capacity: usize, replay_ratio: f64, replay_mode: ReplayMode) -> MixInReplayConfig {
    MixInReplayConfig { capacity, replay_ratio, replay_mode, seed: Some(11) }
}

fn buffer(
    capacity: usize,
    replay_ratio: f64,
    mode: ReplayMode,
) -> impala_replay::Result<MixInReplay<Vec<u32>>> {
    MixInReplay::new(config(capacity, replay_ratio, mode))
}

#[test]
fn invalid_ratios_and_capacity_are_typed_errors() {
    for r in [-0.1, 1.0 + 1e-12, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let err = buffer(4, r, ReplayMode::Lockstep).err();
        assert!(
            matches!(err, Some(ReplayError::InvalidReplayRatio { replay_ratio })
                if replay_ratio.to_bits() == r.to_bits()),
            "ratio {r}: {err:?}"
        );
    }
    let err = buffer(0, 0.5, ReplayMode::Independent).err();
    assert!(matches!(err, Some(ReplayError::ZeroCapacity)), "{err:?}");
    for r in [0.0, 0.25, 1.0] {
        assert!(buffer(1, r, ReplayMode::Lockstep).is_ok(), "ratio {r}");
    }
}

#[test]
fn invalid_proportions_are_typed_errors() {
    for p in [-1.0, -f64::MIN_POSITIVE, f64::NAN, f64::INFINITY] {
        let err = replay_ratio_from_proportion(p).err();
        assert!(
            matches!(err, Some(ReplayError::InvalidReplayProportion { replay_proportion })
                if replay_proportion.to_bits() == p.to_bits()),
            "proportion {p}: {err:?}"
        );
        assert!(MixInReplayConfig::for_impala(p, 4, None).is_err());
    }
}

/// DESIGN.md: `replay_ratio = p / (1 + p)`, so the buffer replays `p` batches per new one; not
/// RLlib's `1 / p`.
#[test]
fn proportion_round_trips_through_the_buffer() -> TestResult {
    for p in [0.0, 0.5, 1.0, 2.0, 3.0, 9.0] {
        let r = replay_ratio_from_proportion(p)?;
        assert!((0.0..1.0).contains(&r));
        let buf = buffer(1, r, ReplayMode::Lockstep)?;
        let back = buf.replay_proportion().ok_or("r < 1 has a proportion")?;
        approx::assert_relative_eq!(back, p, epsilon = 1e-12, max_relative = 1e-12);
    }
    assert_eq!(buffer(1, 1.0, ReplayMode::Lockstep)?.replay_proportion(), None);
    Ok(())
}

#[test]
fn impala_config_maps_zero_slots_to_one() -> TestResult {
    let config = MixInReplayConfig::for_impala(0.0, 0, Some(5))?;
    assert_eq!(
        config,
        MixInReplayConfig {
            capacity: 1,
            replay_ratio: 0.0,
            replay_mode: ReplayMode::Lockstep,
            seed: Some(5)
        }
    );
    assert_eq!(MixInReplayConfig::for_impala(3.0, 8, None)?.capacity, 8);
    assert_eq!(MixInReplayConfig::for_impala(3.0, 8, None)?.replay_ratio, 0.75);
    Ok(())
}

#[test]
fn lockstep_rejects_a_specific_policy_id() -> TestResult {
    let mut buf = buffer(4, 0.5, ReplayMode::Lockstep)?;
    let err = buf.replay_policy(DEFAULT_POLICY_ID).err();
    assert!(
        matches!(&err, Some(ReplayError::LockstepPolicyId { policy_id }) if policy_id == DEFAULT_POLICY_ID),
        "{err:?}"
    );
    assert!(err.map(|e| e.to_string()).is_some_and(|m| m.contains(ALL_POLICIES)));
    let err = buf.add_to_policy("p1", vec![1]).err();
    assert!(matches!(err, Some(ReplayError::LockstepPolicyId { .. })), "{err:?}");
    assert_eq!(buf.num_added(), 0);
    // `add` and the `ALL_POLICIES` key are the same single store.
    buf.add(vec![1]);
    buf.add_to_policy(ALL_POLICIES, vec![2])?;
    assert_eq!(buf.policy_ids().collect::<Vec<_>>(), vec![ALL_POLICIES]);
    let out = buf.replay_policy(ALL_POLICIES)?.ok_or("two new batches")?;
    assert_eq!(out.num_new(), 2);
    assert_eq!(out.concat()?[..2], [1, 2]);
    Ok(())
}

#[test]
fn independent_mode_keeps_one_store_per_policy() -> TestResult {
    let mut buf = buffer(3, 0.5, ReplayMode::Independent)?;
    buf.add(vec![0]);
    for i in 1..=5 {
        buf.add_to_policy("a", vec![i])?;
    }
    buf.add_to_policy("b", vec![100])?;
    assert_eq!(buf.buffer(DEFAULT_POLICY_ID).map(|b| b.len()), Some(1));
    assert_eq!(buf.buffer("a").map(|b| b.len()), Some(3));
    assert_eq!(buf.buffer("b").map(|b| b.len()), Some(1));
    assert_eq!((buf.num_pending("a"), buf.num_pending("b")), (5, 1));
    assert_eq!(buf.num_added(), 7);

    // "b" replays only its own batch, and leaves "a" pending.
    let out = buf.replay_policy("b")?.ok_or("b has a new batch")?;
    assert!(out.concat()?.iter().all(|&x| x == 100));
    assert_eq!(buf.num_pending("a"), 5);
    // `replay()` reads the default policy's store.
    let out = buf.replay().ok_or("default has a new batch")?;
    assert!(out.concat()?.iter().all(|&x| x == 0));
    // Unknown ids have nothing (and are not created by asking).
    assert!(buf.replay_policy("nobody")?.is_none());
    assert!(buf.buffer("nobody").is_none());
    // RLlib's `_ALL_POLICIES` key is just another (empty) key in independent mode.
    assert!(buf.replay_policy(ALL_POLICIES)?.is_none());
    Ok(())
}

/// `replay_ratio = 1`: new batches are stored but not returned as such; one stored batch comes
/// back per call, with or without anything new.
#[test]
fn ratio_one_returns_one_stored_batch() -> TestResult {
    let mut buf = buffer(4, 1.0, ReplayMode::Lockstep)?;
    assert!(buf.replay().is_none());
    for i in 0..3 {
        buf.add(vec![i]);
    }
    for _ in 0..20 {
        let out = buf.replay().ok_or("r = 1 always replays")?;
        assert_eq!((out.num_new(), out.num_replayed()), (0, 1));
        assert!(out.concat()?[0] < 3);
    }
    assert_eq!(buf.num_pending(ALL_POLICIES), 0);
    Ok(())
}

/// `replay_ratio = 0`: every added batch comes back exactly once, in order, even when several
/// were added between replays, and the parts are the very batches the store holds.
#[test]
fn ratio_zero_returns_new_batches_once_and_shared() -> TestResult {
    let mut buf = buffer(2, 0.0, ReplayMode::Lockstep)?;
    for i in 0..3 {
        buf.add(vec![i]);
    }
    let out = buf.replay().ok_or("three new batches")?;
    assert_eq!(out.num_batches(), 3);
    let stored = buf.buffer(ALL_POLICIES).ok_or("stored")?.slots();
    // Slots after 3 adds to 2 slots: [2, 1]; the returned parts are those allocations.
    assert!(Arc::ptr_eq(&out.parts()[2], &stored[0]));
    assert!(Arc::ptr_eq(&out.parts()[1], &stored[1]));
    assert_eq!(out.concat()?, vec![0, 1, 2]);
    assert!(buf.replay().is_none());
    Ok(())
}

/// Stored batches are released once overwritten and no replay output holds them.
#[test]
fn overwritten_batches_are_freed() -> TestResult {
    let mut buf = buffer(3, 0.5, ReplayMode::Lockstep)?;
    buf.add(vec![7; 1000]);
    let out = buf.replay().ok_or("new batch")?;
    let first = Arc::downgrade(&out.parts()[0]);
    drop(out);
    assert!(first.upgrade().is_some());
    for i in 0..3 {
        buf.add(vec![i]);
        drop(buf.replay());
    }
    assert!(first.upgrade().is_none());
    Ok(())
}

#[test]
fn same_seed_same_replays() -> TestResult {
    let run = |seed: u64| -> impala_replay::Result<Vec<Vec<u32>>> {
        let mut config = config(5, 0.6, ReplayMode::Lockstep);
        config.seed = Some(seed);
        let mut buf = MixInReplay::new(config)?;
        let mut outs = Vec::new();
        for i in 0..50 {
            buf.add(vec![i]);
            if let Some(out) = buf.replay() {
                outs.push(out.concat()?);
            }
        }
        Ok(outs)
    };
    assert_eq!(run(1)?, run(1)?);
    assert_ne!(run(1)?, run(2)?);
    Ok(())
}

#[test]
fn concat_errors_are_reported() -> TestResult {
    let obs = Space::Discrete(3);
    let mut buf = MixInReplay::new(config(4, 0.0, ReplayMode::Lockstep))?;
    buf.add(SampleBatch::zeros(2, 1, &obs, &Space::Discrete(2), 0));
    buf.add(SampleBatch::zeros(3, 1, &obs, &Space::Discrete(2), 0));
    let out = buf.replay().ok_or("two new batches")?;
    assert_eq!(out.count(), 5);
    let err = out.concat().err();
    assert!(matches!(err, Some(ReplayError::Concat { .. })), "{err:?}");
    Ok(())
}

#[test]
fn sample_batches_concatenate_along_rows() -> TestResult {
    let obs = Space::Discrete(3);
    let mut buf = MixInReplay::new(config(4, 0.0, ReplayMode::Lockstep))?;
    let mut a = SampleBatch::zeros(2, 1, &obs, &Space::Discrete(2), 0);
    a.rewards = vec![1.0, 2.0];
    let mut b = SampleBatch::zeros(2, 2, &obs, &Space::Discrete(2), 0);
    b.rewards = vec![3.0, 4.0, 5.0, 6.0];
    buf.add(a);
    buf.add(b);
    assert_eq!(buf.num_added(), 6);
    let out = buf.replay().ok_or("two new batches")?.concat()?;
    assert_eq!(out.num_rows, 3);
    assert_eq!(out.rewards, vec![1.0, 3.0, 4.0, 2.0, 5.0, 6.0]);
    Ok(())
}
