//! `Schedule::value_at`: piecewise-linear, first value before the start, last value past the end.

use impala_config::{ConfigFormat, ImpalaConfig, Schedule};
use proptest::prelude::*;

use crate::TestResult;

/// Schedules with strictly increasing timesteps and bounded values.
fn schedules() -> impl Strategy<Value = Schedule> {
    proptest::collection::btree_map(0u64..1_000_000, -10.0f64..10.0, 1..8)
        .prop_map(|points| Schedule { points: points.into_iter().collect() })
}

proptest! {
    #[test]
    fn hits_every_point(s in schedules()) {
        for &(t, v) in &s.points {
            prop_assert_eq!(s.value_at(t), v);
        }
    }

    #[test]
    fn holds_the_ends(s in schedules(), before in 0u64..1_000_000, after in 0u64..1_000_000) {
        let (first, last) = (s.points[0], s.points[s.points.len() - 1]);
        prop_assert_eq!(s.value_at(before.min(first.0)), first.1);
        prop_assert_eq!(s.value_at(last.0.saturating_add(after)), last.1);
    }

    #[test]
    fn stays_between_its_neighbours(s in schedules(), t in 0u64..1_100_000) {
        let v = s.value_at(t);
        let right = s.points.iter().position(|&(tp, _)| tp >= t);
        let (lo, hi) = match right {
            Some(0) => (s.points[0].1, s.points[0].1),
            Some(i) => {
                let (a, b) = (s.points[i - 1].1, s.points[i].1);
                (a.min(b), a.max(b))
            }
            None => {
                let last = s.points[s.points.len() - 1].1;
                (last, last)
            }
        };
        prop_assert!(lo - 1e-9 <= v && v <= hi + 1e-9, "{} not in [{}, {}]", v, lo, hi);
    }

    #[test]
    fn is_linear_between_points(s in schedules(), frac in 0.0f64..1.0) {
        for w in s.points.windows(2) {
            let ((ta, va), (tb, vb)) = (w[0], w[1]);
            let t = ta + ((tb - ta) as f64 * frac) as u64;
            let expected = va + (t - ta) as f64 / (tb - ta) as f64 * (vb - va);
            prop_assert!((s.value_at(t) - expected).abs() <= 1e-9 * (1.0 + expected.abs()));
        }
    }

    #[test]
    fn changes_by_at_most_the_steepest_slope_per_step(s in schedules(), t in 0u64..1_000_000) {
        let steepest = s.points.windows(2)
            .map(|w| (w[1].1 - w[0].1).abs() / (w[1].0 - w[0].0) as f64)
            .fold(0.0, f64::max);
        prop_assert!((s.value_at(t + 1) - s.value_at(t)).abs() <= steepest + 1e-9);
    }

    #[test]
    fn round_trips_through_toml(s in schedules()) {
        let config = ImpalaConfig::default().training(|t| t.lr_schedule(Some(s.clone())));
        let text = config.to_string_as(ConfigFormat::Toml).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let back = ImpalaConfig::from_str_as(&text, ConfigFormat::Toml).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(back.config.lr_schedule, Some(s));
    }
}

#[test]
fn equal_timesteps_make_a_step_to_the_later_value() {
    let s = Schedule { points: vec![(0, 1.0), (10, 2.0), (10, 5.0), (20, 5.0)] };
    assert_eq!(s.value_at(5), 1.5);
    assert_eq!(s.value_at(10), 5.0);
}

#[test]
fn timesteps_may_be_whole_floats_but_not_fractions() -> TestResult {
    let text = "lr_schedule = [[0, 5e-4], [2e7, 1e-12]]\n";
    let config = ImpalaConfig::from_str_as(text, ConfigFormat::Toml)?.config;
    assert_eq!(config.lr_schedule.map(|s| s.points), Some(vec![(0, 5e-4), (20_000_000, 1e-12)]));
    for bad in ["lr_schedule: [[0.5, 0.1]]\n", "lr_schedule: [[-1, 0.1]]\n"] {
        match ImpalaConfig::from_str_as(bad, ConfigFormat::Yaml) {
            Err(impala_config::ConfigError::WrongType { key, .. }) => {
                assert_eq!(key, "lr_schedule[0][0]")
            }
            other => return Err(format!("{bad}: expected WrongType, got {other:?}").into()),
        }
    }
    Ok(())
}

#[test]
fn rllib_schedules_read_from_files() -> TestResult {
    // atari-impala.yaml's lr schedule.
    let text = "lr_schedule: [[0, 0.0005], [20000000, 0.000000000001]]\n";
    let config = ImpalaConfig::from_str_as(text, ConfigFormat::Yaml)?.config;
    let s = config.lr_schedule.ok_or("no schedule")?;
    assert_eq!(s.value_at(10_000_000), 0.0005 / 2.0 + 1e-12 / 2.0);
    Ok(())
}
