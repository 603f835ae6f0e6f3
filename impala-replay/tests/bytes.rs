//! Byte observations (Atari frames) come back out of the replay buffer as the same bytes.

use impala_core::{Observations, SampleBatch, Space};
use impala_replay::{MixInReplay, MixInReplayConfig, ReplayMode};

use crate::TestResult;

/// A fragment of 84x84x4 frames whose bytes spell its number and position.
fn frames(number: u8) -> SampleBatch {
    let space = Space::Bytes { shape: vec![84, 84, 4] };
    let mut batch = SampleBatch::zeros(5, 2, &space, &Space::Discrete(6), 0);
    for obs in [&mut batch.obs, &mut batch.bootstrap_obs] {
        let values: Vec<f32> = (0..obs.len())
            .map(|i| f32::from(number.wrapping_mul(31).wrapping_add(i as u8)))
            .collect();
        obs.write(0, &values);
    }
    batch.rewards.fill(f32::from(number));
    batch
}

#[test]
fn byte_observations_round_trip_through_replay_unchanged() -> TestResult {
    let mut replay = MixInReplay::new(MixInReplayConfig {
        capacity: 8,
        replay_ratio: 0.5,
        replay_mode: ReplayMode::Lockstep,
        seed: Some(3),
    })?;
    let mut replayed_any = false;
    for number in 0..20u8 {
        replay.add(frames(number));
        let Some(out) = replay.replay() else { continue };
        replayed_any |= out.num_replayed() > 0;
        for part in out.parts() {
            // Each part is one fragment that went in, still bytes, byte for byte.
            assert!(matches!(part.obs, Observations::Bytes(_)));
            let number = part.rewards[0] as u8;
            assert_eq!(**part, frames(number), "fragment {number}");
        }
        let train = out.concat()?;
        assert_eq!(train.obs.kind(), "bytes");
        assert_eq!(train.obs.len(), train.env_steps() * 84 * 84 * 4);
    }
    assert!(replayed_any, "replay_ratio 0.5 replays old fragments");
    Ok(())
}
