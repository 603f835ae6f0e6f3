//! Observation normalisation with running statistics (RLlib's `MeanStdFilter`).

use std::sync::{Arc, Mutex, MutexGuard};

use super::check_obs;
use crate::EnvError;
use impala_core::{CoreError, Env, EnvSpec, Result, Space, StepOutcome};
use serde::{Deserialize, Serialize};

/// RLlib's `SMALL_NUMBER`, added to the standard deviation before dividing.
const SMALL_NUMBER: f64 = 1e-8;

/// A synced env merges what it saw into the run's filter and takes the run's statistics at
/// every episode start and at least this often within an episode (in filtered observations).
const SYNC_EVERY: u32 = 1000;

/// Running per-element mean and variance (Welford's algorithm, RLlib's `RunningStat`), in `f64`.
///
/// ```
/// let mut stat = impala_envs::RunningStat::new(1);
/// for x in [1.0f32, 2.0, 3.0, 4.0] {
///     stat.push(&[x])?;
/// }
/// assert_eq!(stat.mean(), [2.5]);
/// assert!((stat.std(0) - 1.2909944).abs() < 1e-6); // sample standard deviation
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunningStat {
    num_pushes: u64,
    mean: Vec<f64>,
    /// Sum of squared deviations from the mean (RLlib's `_S`).
    sum_sq_dev: Vec<f64>,
}

impl RunningStat {
    /// Empty statistics over vectors of `dim` values.
    pub fn new(dim: usize) -> Self {
        Self { num_pushes: 0, mean: vec![0.0; dim], sum_sq_dev: vec![0.0; dim] }
    }

    /// How many vectors were pushed (or merged in).
    pub fn num_pushes(&self) -> u64 {
        self.num_pushes
    }

    /// The running mean.
    pub fn mean(&self) -> &[f64] {
        &self.mean
    }

    /// The standard deviation of element `i`: the sample standard deviation after two or more
    /// pushes, `|mean|` after one (RLlib's convention), 0 before any.
    pub fn std(&self, i: usize) -> f64 {
        if self.num_pushes > 1 {
            (self.sum_sq_dev[i] / (self.num_pushes - 1) as f64).sqrt()
        } else {
            self.mean[i].abs()
        }
    }

    /// Adds one vector.
    pub fn push(&mut self, x: &[f32]) -> Result<()> {
        check_len("RunningStat::push", x.len(), self.mean.len())?;
        self.num_pushes += 1;
        let n = self.num_pushes as f64;
        for ((m, s), &x) in self.mean.iter_mut().zip(&mut self.sum_sq_dev).zip(x) {
            let x = f64::from(x);
            if self.num_pushes == 1 {
                *m = x;
            } else {
                let old_m = *m;
                *m = old_m + (x - old_m) / n;
                *s += (x - old_m) * (x - *m);
            }
        }
        Ok(())
    }

    /// Merges another statistic in, as if its vectors had been pushed here (RLlib's
    /// `RunningStat.update`, Chan et al.'s parallel formula).
    pub fn merge(&mut self, other: &RunningStat) -> Result<()> {
        check_len("RunningStat::merge", other.mean.len(), self.mean.len())?;
        let (n1, n2) = (self.num_pushes as f64, other.num_pushes as f64);
        let n = n1 + n2;
        if n == 0.0 {
            return Ok(());
        }
        for i in 0..self.mean.len() {
            let delta = self.mean[i] - other.mean[i];
            self.mean[i] = (n1 * self.mean[i] + n2 * other.mean[i]) / n;
            self.sum_sq_dev[i] += other.sum_sq_dev[i] + delta * delta / n * n1 * n2;
        }
        self.num_pushes += other.num_pushes;
        Ok(())
    }
}

fn check_len(what: &str, got: usize, expected: usize) -> Result<()> {
    if got != expected {
        return Err(CoreError::ShapeMismatch { what: what.into(), expected, got });
    }
    Ok(())
}

/// RLlib's `MeanStdFilter`: `clip((x - mean) / (std + 1e-8), -clip, clip)` with running statistics
/// updated from every observation it filters.
///
/// It keeps two statistics, as RLlib does: `running_stats` (everything seen, used to normalise)
/// and `buffer` (what this copy saw since its last sync). RLlib's filter synchronisation is:
/// the driver's filter calls [`MeanStdFilter::apply_changes`] with each runner's filter (merging
/// their buffers), then each runner calls [`MeanStdFilter::sync`] with the driver's filter and
/// [`MeanStdFilter::reset_buffer`]. The whole state serialises with serde for checkpoints.
///
/// ```
/// use impala_envs::MeanStdFilter;
///
/// let mut runner = MeanStdFilter::new(2, Some(10.0));
/// let mut obs = [1.0f32, 10.0];
/// runner.apply(&mut obs, true)?;
/// let mut obs = [3.0f32, 30.0];
/// runner.apply(&mut obs, true)?;
/// assert!((obs[0] - 0.70710677).abs() < 1e-6); // (3 - 2) / std([1, 3])
///
/// let mut driver = MeanStdFilter::new(2, Some(10.0));
/// driver.apply_changes(&runner)?;
/// runner.sync(&driver);
/// runner.reset_buffer();
/// assert_eq!(driver.running_stats().num_pushes(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeanStdFilter {
    running_stats: RunningStat,
    buffer: RunningStat,
    clip: Option<f64>,
}

impl MeanStdFilter {
    /// A filter over observations of `dim` values; RLlib's default `clip` is `Some(10.0)`.
    pub fn new(dim: usize, clip: Option<f64>) -> Self {
        Self { running_stats: RunningStat::new(dim), buffer: RunningStat::new(dim), clip }
    }

    /// Everything this filter has seen (what it normalises with).
    pub fn running_stats(&self) -> &RunningStat {
        &self.running_stats
    }

    /// What this filter has seen since its last [`MeanStdFilter::reset_buffer`].
    pub fn buffer(&self) -> &RunningStat {
        &self.buffer
    }

    /// The clip bound applied after normalising.
    pub fn clip(&self) -> Option<f64> {
        self.clip
    }

    /// What each value is divided by after its mean is taken off: its standard deviation plus
    /// RLlib's `SMALL_NUMBER` (an exported policy folds these in).
    pub fn divisors(&self) -> Vec<f64> {
        (0..self.running_stats.mean.len()).map(|i| self.divisor(i)).collect()
    }

    fn divisor(&self, i: usize) -> f64 {
        self.running_stats.std(i) + SMALL_NUMBER
    }

    /// Normalises one or more observations in place (`obs` holds whole rows of `dim` values),
    /// first pushing each row into the statistics when `update` is true (RLlib's
    /// `__call__(x, update)`; evaluation uses `update = false`).
    pub fn apply(&mut self, obs: &mut [f32], update: bool) -> Result<()> {
        let dim = self.running_stats.mean.len();
        if dim == 0 || obs.len() % dim != 0 {
            return Err(CoreError::ShapeMismatch {
                what: "MeanStdFilter input (whole rows of this many values)".into(),
                expected: dim,
                got: obs.len(),
            });
        }
        for row in obs.chunks_exact_mut(dim) {
            if update {
                self.running_stats.push(row)?;
                self.buffer.push(row)?;
            }
            for (i, x) in row.iter_mut().enumerate() {
                let mut y = (f64::from(*x) - self.running_stats.mean[i]) / self.divisor(i);
                if let Some(c) = self.clip {
                    y = y.clamp(-c, c);
                }
                *x = y as f32;
            }
        }
        Ok(())
    }

    /// Merges `other`'s buffer (its new observations) into this filter's statistics (RLlib's
    /// `apply_changes(other, with_buffer=False)`).
    pub fn apply_changes(&mut self, other: &MeanStdFilter) -> Result<()> {
        self.running_stats.merge(&other.buffer)
    }

    /// Copies `other`'s whole state (RLlib's `sync`).
    pub fn sync(&mut self, other: &MeanStdFilter) {
        self.clone_from(other);
    }

    /// Forgets the buffer, after its content was sent to the driver (RLlib's `reset_buffer`).
    pub fn reset_buffer(&mut self) {
        self.buffer = RunningStat::new(self.buffer.mean.len());
    }
}

/// The run's [`MeanStdFilter`] (RLlib's local-worker filter, the one checkpoints keep): envs
/// wrapped with [`NormalizeObservation::synced`] merge their new observations into it and take
/// its statistics, as RLlib's `synchronize_filters` does for every runner. Clones share one
/// filter. It is sized by the first env that syncs with it (or by [`SharedMeanStdFilter::replace`]).
///
/// ```
/// use impala_core::Env;
/// use impala_envs::{MountainCar, MountainCarConfig, NormalizeObservation, SharedMeanStdFilter};
///
/// let run = SharedMeanStdFilter::new(Some(10.0));
/// let mut env = NormalizeObservation::synced(MountainCar::new(MountainCarConfig::default()), &run, true)?;
/// let mut obs = [0.0f32; 2];
/// env.reset(Some(0), &mut obs)?;
/// env.step(&[2.0], &mut obs)?;
/// env.reset(Some(1), &mut obs)?; // episode start: the env's observations reach the run's filter
/// let saved = run.snapshot()?.ok_or("no filter")?;
/// assert_eq!(saved.running_stats().num_pushes(), 2);
///
/// // A frozen copy (evaluation) normalises with the saved statistics and never updates them.
/// let restored = SharedMeanStdFilter::new(Some(10.0));
/// restored.replace(saved.clone())?;
/// let mut eval = NormalizeObservation::synced(MountainCar::new(MountainCarConfig::default()), &restored, false)?;
/// eval.reset(Some(2), &mut obs)?;
/// eval.reset(Some(3), &mut obs)?;
/// assert_eq!(restored.snapshot()?, Some(saved));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct SharedMeanStdFilter {
    inner: Arc<Mutex<Option<MeanStdFilter>>>,
    clip: Option<f64>,
}

impl SharedMeanStdFilter {
    /// An empty run filter clipping at `clip` (RLlib's default is `Some(10.0)`).
    pub fn new(clip: Option<f64>) -> Self {
        Self { inner: Arc::default(), clip }
    }

    /// A copy of the run's filter (`None` before any env synced with it).
    pub fn snapshot(&self) -> Result<Option<MeanStdFilter>> {
        Ok(self.lock()?.clone())
    }

    /// Replaces the run's filter (a restored checkpoint's); envs take it at their next sync.
    pub fn replace(&self, filter: MeanStdFilter) -> Result<()> {
        let mut inner = self.lock()?;
        if let Some(old) = inner.as_ref() {
            let (expected, got) = (old.running_stats.mean.len(), filter.running_stats.mean.len());
            check_len("the restored observation filter", got, expected)?;
        }
        *inner = Some(filter);
        Ok(())
    }

    fn lock(&self) -> Result<MutexGuard<'_, Option<MeanStdFilter>>> {
        self.inner.lock().map_err(|_| CoreError::Env {
            env: "NormalizeObservation".into(),
            reason: "an env panicked while syncing the run's observation filter".into(),
        })
    }

    /// Merges `local`'s new observations in (when `update`) and gives `local` the run's
    /// statistics with an empty buffer (RLlib's `apply_changes`, `sync`, `reset_buffer`).
    fn sync(&self, local: &mut MeanStdFilter, update: bool) -> Result<()> {
        let mut inner = self.lock()?;
        let run = match inner.as_mut() {
            Some(run) => run,
            None => inner.insert(MeanStdFilter::new(local.running_stats.mean.len(), self.clip)),
        };
        check_len(
            "the run's observation filter",
            local.running_stats.mean.len(),
            run.running_stats.mean.len(),
        )?;
        if update {
            run.apply_changes(local)?;
        }
        local.sync(run);
        local.reset_buffer();
        Ok(())
    }
}

/// Normalises an env's observations with a [`MeanStdFilter`] (RLlib's
/// `observation_filter="MeanStdFilter"`): its own ([`NormalizeObservation::new`]), reachable
/// through [`NormalizeObservation::filter_mut`], or a copy synced with the run's
/// ([`NormalizeObservation::synced`]).
///
/// ```
/// use impala_core::Env;
/// use impala_envs::{MountainCar, MountainCarConfig, NormalizeObservation};
///
/// let mut env = NormalizeObservation::new(MountainCar::new(MountainCarConfig::default()), Some(10.0))?;
/// let mut obs = [0.0f32; 2];
/// env.reset(Some(0), &mut obs)?;
/// assert_eq!(obs, [0.0, 0.0]); // the first observation is the mean
/// env.step(&[2.0], &mut obs)?;
/// assert_eq!(env.filter().running_stats().num_pushes(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct NormalizeObservation<E> {
    env: E,
    spec: EnvSpec,
    filter: MeanStdFilter,
    update: bool,
    /// The run's filter this copy syncs with, and observations filtered since the last sync.
    run: Option<(SharedMeanStdFilter, u32)>,
}

impl<E: Env> NormalizeObservation<E> {
    /// Wraps `env` with a fresh filter clipping at `clip` (RLlib's default is `Some(10.0)`).
    pub fn new(env: E, clip: Option<f64>) -> crate::Result<Self> {
        if clip.is_some_and(|c| c.is_nan() || c <= 0.0) {
            return Err(EnvError::InvalidSetup {
                what: "NormalizeObservation".into(),
                reason: format!("the clip bound must be positive, got {clip:?}"),
            });
        }
        let dim = env.spec().observation_space.flat_dim();
        let bound = clip.map_or(f32::INFINITY, |c| c as f32);
        let observation_space = Space::Box {
            low: vec![-bound; dim],
            high: vec![bound; dim],
            shape: env.spec().observation_space.shape(),
        };
        let spec = EnvSpec { observation_space, ..env.spec().clone() };
        Ok(Self { env, spec, filter: MeanStdFilter::new(dim, clip), update: true, run: None })
    }

    /// Wraps `env` with a copy of the run's filter `run`, synced with it at every episode start
    /// and every 1000 observations. With `update` false (evaluation) the copy normalises with
    /// the run's statistics as they were when it was built, and changes nothing.
    pub fn synced(env: E, run: &SharedMeanStdFilter, update: bool) -> crate::Result<Self> {
        let mut wrapped = Self::new(env, run.clip)?;
        wrapped.update = update;
        run.sync(&mut wrapped.filter, false)?;
        if update {
            wrapped.run = Some((run.clone(), 0));
        }
        Ok(wrapped)
    }

    /// The filter, e.g. to send its buffer to the driver.
    pub fn filter(&self) -> &MeanStdFilter {
        &self.filter
    }

    /// The filter, e.g. to [`MeanStdFilter::sync`] it with the driver's.
    pub fn filter_mut(&mut self) -> &mut MeanStdFilter {
        &mut self.filter
    }

    /// Whether observations update the statistics (true by default; false to evaluate).
    pub fn set_update(&mut self, update: bool) {
        self.update = update;
    }
}

impl<E: Env> Env for NormalizeObservation<E> {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> Result<()> {
        check_obs(obs, self.filter.running_stats.mean.len())?;
        self.env.reset(seed, obs)?;
        self.filter_synced(obs, true)
    }

    fn step(&mut self, action: &[f32], obs: &mut [f32]) -> Result<StepOutcome> {
        check_obs(obs, self.filter.running_stats.mean.len())?;
        let outcome = self.env.step(action, obs)?;
        self.filter_synced(obs, false)?;
        Ok(outcome)
    }

    fn info(&self) -> &[u8] {
        self.env.info()
    }
}

impl<E> NormalizeObservation<E> {
    /// Filters `obs`, syncing with the run's filter first at an episode start or when due.
    fn filter_synced(&mut self, obs: &mut [f32], episode_start: bool) -> Result<()> {
        if let Some((run, since)) = &mut self.run {
            if episode_start || *since >= SYNC_EVERY {
                run.sync(&mut self.filter, true)?;
                *since = 0;
            }
            *since += 1;
        }
        self.filter.apply(obs, self.update)
    }
}
