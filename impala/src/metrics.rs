//! Episode metrics smoothed over the last N completed episodes, across iterations (RLlib's
//! `metrics_num_episodes_for_smoothing`), so `episode_return_mean` does not jump with the few
//! episodes one short iteration happens to finish.

use std::collections::VecDeque;

use impala_core::EpisodeStats;
use serde::{Deserialize, Serialize};

/// The last `capacity` completed episodes (oldest first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeWindow {
    capacity: usize,
    /// `(episode_return, episode_len)` of the retained episodes.
    episodes: VecDeque<(f64, u64)>,
}

/// Summary of the window, RLlib's `episode_return_*` and `episode_len_mean`. All are `NaN`
/// before the first episode completes (as RLlib reports them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpisodeSummary {
    /// Mean return over the window.
    pub episode_return_mean: f64,
    /// Smallest return in the window.
    pub episode_return_min: f64,
    /// Largest return in the window.
    pub episode_return_max: f64,
    /// Mean length over the window.
    pub episode_len_mean: f64,
}

impl EpisodeWindow {
    /// An empty window keeping the last `capacity` episodes (at least one).
    ///
    /// ```
    /// use impala::EpisodeWindow;
    /// use impala_core::EpisodeStats;
    /// let mut w = EpisodeWindow::new(2);
    /// let ep = |r: f64| EpisodeStats { episode_return: r, episode_len: r as u64, truncated: false };
    /// w.extend(&[ep(10.0), ep(20.0), ep(40.0)]);
    /// assert_eq!(w.summary().episode_return_mean, 30.0); // 10 fell out of the window
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        EpisodeWindow { capacity, episodes: VecDeque::with_capacity(capacity) }
    }

    /// Adds completed episodes, dropping the oldest beyond the capacity.
    pub fn extend(&mut self, episodes: &[EpisodeStats]) {
        for e in episodes {
            if self.episodes.len() == self.capacity {
                self.episodes.pop_front();
            }
            self.episodes.push_back((e.episode_return, e.episode_len));
        }
    }

    /// Number of episodes in the window.
    pub fn len(&self) -> usize {
        self.episodes.len()
    }

    /// Whether no episode has completed yet.
    pub fn is_empty(&self) -> bool {
        self.episodes.is_empty()
    }

    /// Mean, min and max return and mean length over the window.
    pub fn summary(&self) -> EpisodeSummary {
        if self.episodes.is_empty() {
            return EpisodeSummary {
                episode_return_mean: f64::NAN,
                episode_return_min: f64::NAN,
                episode_return_max: f64::NAN,
                episode_len_mean: f64::NAN,
            };
        }
        let n = self.episodes.len() as f64;
        let (mut sum, mut min, mut max, mut len) = (0.0, f64::INFINITY, f64::NEG_INFINITY, 0.0);
        for &(r, l) in &self.episodes {
            sum += r;
            min = min.min(r);
            max = max.max(r);
            len += l as f64;
        }
        EpisodeSummary {
            episode_return_mean: sum / n,
            episode_return_min: min,
            episode_return_max: max,
            episode_len_mean: len / n,
        }
    }
}

/// Peak resident memory of this process in MiB (`VmHWM` from `/proc/self/status`, the same
/// number as `getrusage`'s `ru_maxrss`); `NaN` where `/proc` is unavailable.
pub fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(r: f64, l: u64) -> EpisodeStats {
        EpisodeStats { episode_return: r, episode_len: l, truncated: false }
    }

    #[test]
    fn window_smooths_across_iterations() {
        let mut w = EpisodeWindow::new(100);
        assert!(w.summary().episode_return_mean.is_nan());
        // Iteration 1: 100 short episodes; iteration 2: one long episode.
        w.extend(&vec![ep(10.0, 10); 100]);
        w.extend(&[ep(500.0, 500)]);
        let s = w.summary();
        assert_eq!(w.len(), 100);
        assert!((s.episode_return_mean - (99.0 * 10.0 + 500.0) / 100.0).abs() < 1e-12);
        assert_eq!((s.episode_return_min, s.episode_return_max), (10.0, 500.0));
        assert!((s.episode_len_mean - 14.9).abs() < 1e-12);
    }

    #[test]
    fn peak_rss_is_positive_on_linux() {
        assert!(peak_rss_mib() > 0.0);
    }
}
