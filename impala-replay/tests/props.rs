//! Property tests: the expected replay count over many draws, capacity bounds, overwrite order.

use approx::abs_diff_eq;
use impala_replay::{MixInReplay, MixInReplayConfig, ReplayMode, ALL_POLICIES};
use proptest::prelude::*;

use crate::TestResult;

fn buffer(
    capacity: usize,
    replay_ratio: f64,
    seed: u64,
) -> impala_replay::Result<MixInReplay<Vec<u32>>> {
    MixInReplay::new(MixInReplayConfig {
        capacity,
        replay_ratio,
        replay_mode: ReplayMode::Lockstep,
        seed: Some(seed),
    })
}

/// Expected replays of RLlib's loop `while random() < num_new * p: p -= 1; replay()`: the m-th
/// replay happens with probability `prod_{j < m} clip(num_new * (p - j), 0, 1)`.
fn expected_replays(replay_ratio: f64, num_new: usize) -> f64 {
    let mut p = replay_ratio / (1.0 - replay_ratio);
    let (mut reach, mut total) = (1.0, 0.0);
    loop {
        reach *= (num_new as f64 * p).clamp(0.0, 1.0);
        if reach == 0.0 {
            return total;
        }
        total += reach;
        p -= 1.0;
    }
}

/// Mean replayed batches per call over `calls` rounds of `num_new` adds then one replay; checks
/// on the way that the new batches come back first, in order, and replays come from the store.
fn mean_replays(
    buf: &mut MixInReplay<Vec<u32>>,
    num_new: usize,
    calls: usize,
) -> Result<f64, TestCaseError> {
    let mut added = 0u32;
    let mut replayed = 0usize;
    let capacity = buf.capacity() as u32;
    for _ in 0..calls {
        let first_new = added;
        for _ in 0..num_new {
            buf.add(vec![added]);
            added += 1;
        }
        let out = buf.replay().ok_or_else(|| TestCaseError::fail("new batches pending"))?;
        prop_assert_eq!(out.num_new(), num_new);
        let values: Vec<u32> = out.parts().iter().map(|p| p[0]).collect();
        let (new, old) = values.split_at(num_new);
        prop_assert!(new.iter().copied().eq(first_new..added));
        prop_assert!(old.iter().all(|&v| v < added && v + capacity >= added), "{old:?}");
        replayed += out.num_replayed();
    }
    Ok(replayed as f64 / calls as f64)
}

#[test]
fn expectation_is_the_proportion_for_one_new_batch() {
    for r in [0.0, 0.1, 0.25, 0.333, 0.5, 0.6, 0.75, 0.9, 0.95] {
        let p = r / (1.0 - r);
        assert!(abs_diff_eq!(expected_replays(r, 1), p, epsilon = 1e-9), "r = {r}");
    }
    // RLlib's quirk: two new batches at p = 1 replay exactly one old batch, not two.
    assert_eq!(expected_replays(0.5, 2), 1.0);
}

/// RLlib's test cases (section 4.2 of the reference notes) over 20,000 calls instead of 100.
#[test]
fn rllib_means_over_many_draws() -> TestResult {
    let cases = [(0.5, 1, 2.0), (0.333, 2, 3.0), (0.333, 1, 1.5), (0.9, 1, 10.0), (0.0, 1, 1.0)];
    for (r, num_new, rllib_mean) in cases {
        let mut buf = buffer(10, r, 99)?;
        let mean =
            num_new as f64 + mean_replays(&mut buf, num_new, 20_000).map_err(|e| e.to_string())?;
        let exact = num_new as f64 + expected_replays(r, num_new);
        assert!(abs_diff_eq!(mean, exact, epsilon = 0.02), "r = {r}: {mean} vs {exact}");
        assert!(abs_diff_eq!(mean, rllib_mean, epsilon = 0.1), "r = {r}: {mean}");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The replay count per call is `floor(E) + Bernoulli(frac)`, so its variance is at most 1/4
    /// and the mean of 2,000 calls lies within 0.06 (> 5 standard deviations) of `E`.
    #[test]
    fn mean_replay_count_matches_expectation(
        r in 0.0f64..0.95,
        num_new in 1usize..=3,
        capacity in 1usize..16,
        seed in any::<u64>(),
    ) {
        let mut buf = buffer(capacity, r, seed)?;
        let mean = mean_replays(&mut buf, num_new, 2_000)?;
        let expected = expected_replays(r, num_new);
        prop_assert!(abs_diff_eq!(mean, expected, epsilon = 0.06), "{mean} vs {expected}");
    }

    /// After n adds, `min(n, capacity)` batches are stored, slot i holds the latest add k < n
    /// with `k % capacity == i`, and the next overwrite is slot `n % capacity` once full;
    /// replays in between do not disturb the store.
    #[test]
    fn store_is_bounded_and_overwrites_round_robin(
        capacity in 1usize..20,
        replay_after in proptest::collection::vec(any::<bool>(), 0..100),
        r in prop_oneof![Just(0.0), Just(1.0), 0.0f64..1.0],
        seed in any::<u64>(),
    ) {
        let mut buf = buffer(capacity, r, seed)?;
        for (k, &replay) in replay_after.iter().enumerate() {
            buf.add(vec![k as u32]);
            if replay {
                let out = buf.replay().ok_or_else(|| TestCaseError::fail("stored"))?;
                if r == 1.0 {
                    prop_assert_eq!((out.num_new(), out.num_batches()), (0, 1));
                } else if r == 0.0 {
                    prop_assert_eq!(out.num_replayed(), 0);
                }
            }
            let n = k + 1;
            let store = buf.buffer(ALL_POLICIES).ok_or_else(|| TestCaseError::fail("store"))?;
            prop_assert_eq!(store.len(), n.min(capacity));
            prop_assert_eq!(store.num_slots(), capacity);
            let expected_next = if n < capacity { 0 } else { n % capacity };
            prop_assert_eq!(store.next_overwrite(), expected_next);
            for (i, slot) in store.slots().iter().enumerate() {
                let latest = (0..n).rev().find(|k| k % capacity == i);
                prop_assert_eq!(Some(slot[0] as usize), latest);
            }
        }
        prop_assert_eq!(buf.num_added(), replay_after.len());
    }
}
