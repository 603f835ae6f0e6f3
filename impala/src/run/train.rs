//! A whole training run, as `impala train` makes it: the config from its source or from the
//! checkpoint a run resumes, the stop criteria (the env's `reward_threshold` when none is
//! given), the run folder, the algorithm built (with env runners of a transport, or in this
//! process), restored and run, then stopped, with `profile.json` written when profiling.
//! The caller prints what it wants between the steps: [`Training::new`], [`Training::check`],
//! [`Training::start`], [`Started::run`].

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use impala_config::ValidatedConfig;
use impala_runner_pool::RunnerTransport;

use super::{run, RunDir, RunError, RunEvent, RunOptions, RunSummary, RunTarget};
use crate::checkpoint::{find_checkpoint, read_checkpoint};
use crate::{check_environment, ConfigSource, Impala, ImpalaError, StopCriteria};

/// The file of the run folder a profiled run's [`Report`](impala_profile::Report) is written
/// to.
pub const PROFILE_FILE: &str = "profile.json";

/// What a training run is made of (the options of `impala train`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TrainSpec {
    /// Where the config comes from. A resumed run starts from its checkpoint's config, and
    /// only the source's `env`, `seed` and `set` apply to it: a `file` is refused.
    pub source: ConfigSource,
    /// Continue from this checkpoint folder, or from the newest checkpoint of this run folder.
    pub resume: Option<PathBuf>,
    /// The run folder (default: a new `impala_results/IMPALA_<env>_<UTC date and time>`; when
    /// resuming, the checkpoint's run folder, and another folder forks the run into it).
    pub run_dir: Option<PathBuf>,
    /// When resuming an older checkpoint: rewind its run folder to it instead of forking.
    pub truncate: bool,
    /// When to stop (no criterion at all: at the env's `reward_threshold`, if it has one), how
    /// often to checkpoint and which checkpoints to keep.
    pub options: RunOptions,
    /// Account where every thread's time goes ([`impala_profile`]) and write the report to
    /// [`PROFILE_FILE`] in the run folder.
    pub profile: bool,
}

/// A training run whose config is resolved, not yet started.
///
/// ```
/// use impala::run::{TrainSpec, Training};
/// use impala::{ConfigSource, StopCriteria};
///
/// let runs = tempfile::tempdir()?;
/// let mut spec = TrainSpec {
///     source: ConfigSource { set: vec!["min_time_s_per_iteration=0.1".into()], ..Default::default() },
///     run_dir: Some(runs.path().join("run")),
///     ..Default::default()
/// };
/// spec.options.stop = StopCriteria { training_iteration: Some(1), ..Default::default() };
/// let training = Training::new(spec)?;
/// let _warnings = training.check()?;
/// let started = training.start(Default::default())?;
/// let trained = started.run(|event| println!("{event}"))?;
/// assert_eq!(trained.summary.last.training_iteration, 1);
/// assert!(trained.summary.checkpoint.ends_with("checkpoint_000001"));
/// assert_eq!(trained.run_dir, runs.path().join("run"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Training {
    config: ValidatedConfig,
    warnings: Vec<String>,
    checkpoint: Option<PathBuf>,
    target: RunTarget,
    options: RunOptions,
    profile: bool,
    transport: Option<Arc<dyn RunnerTransport>>,
}

impl Training {
    /// Resolves the config: the source's, or the resumed checkpoint's with the source's
    /// changes; a missing criterion becomes the env's `reward_threshold`. Nothing is built or
    /// written.
    pub fn new(spec: TrainSpec) -> Result<Self, RunError> {
        let TrainSpec { source, resume, run_dir, truncate, mut options, profile } = spec;
        let checkpoint = resume.as_deref().map(find_checkpoint).transpose()?;
        let (config, warnings) = match (&checkpoint, &source.file) {
            (Some(_), Some(file)) => return Err(RunError::ConfigWithResume { file: file.clone() }),
            (Some(ckpt), None) => source.apply(read_checkpoint(ckpt)?.1, Vec::new()),
            (None, _) => source.load(),
        }
        .map_err(ImpalaError::from)?;
        if options.stop == StopCriteria::default() && checkpoint.is_none() {
            // An RLlib experiment file's own criteria, when the command gave none.
            options.stop = source.stop().map_err(ImpalaError::from)?;
        }
        if options.stop == StopCriteria::default() {
            // No criterion: train until solved, i.e. Gymnasium's `reward_threshold` of the env.
            options.stop.episode_return_mean = impala_envs::reward_threshold(&config.config().env);
        }
        let target = match (&checkpoint, run_dir) {
            (Some(ckpt), run_dir) => {
                RunTarget::Resume { checkpoint: ckpt.clone(), run_dir, truncate }
            }
            (None, Some(dir)) => RunTarget::New(dir),
            (None, None) => RunTarget::for_env(&config.config().env),
        };
        Ok(Training { config, warnings, checkpoint, target, options, profile, transport: None })
    }

    /// The resolved config.
    pub fn config(&self) -> &ValidatedConfig {
        &self.config
    }

    /// Checks what can be checked before anything starts: the env (one is built), the
    /// resource request against this machine, and the checkpoint policy. Returns every
    /// warning: the config's (how it was written, its overrides) and the machine's.
    pub fn check(&self) -> Result<Vec<String>, RunError> {
        let mut warnings = self.warnings.clone();
        warnings.extend(check_environment(&self.config)?);
        self.options.checkpoints.check()?;
        Ok(warnings)
    }

    /// Samples with the env runners `transport` brings (the gRPC server of
    /// [`runner_server`](crate::remote::runner_server), or any other) instead of runner threads,
    /// as [`ImpalaBuilder::remote_env_runners`](crate::ImpalaBuilder::remote_env_runners). When
    /// the run ends other than by its interrupt, they are told that it is over.
    pub fn remote_env_runners(&mut self, transport: Arc<dyn RunnerTransport>) {
        self.transport = Some(transport);
    }

    /// Builds the algorithm, restores the checkpoint it resumes, then opens the run folder: a
    /// checkpoint that does not load changes no run folder. `interrupt` cuts the current
    /// iteration short and ends the run (set it from a signal handler).
    pub fn start(self, interrupt: Arc<AtomicBool>) -> Result<Started, RunError> {
        let Training { config, checkpoint, target, options, profile, transport, .. } = self;
        options.checkpoints.check()?;
        if profile {
            impala_profile::enable();
        }
        let mut builder = Impala::builder(config);
        if let Some(transport) = &transport {
            builder = builder.remote_env_runners(Arc::clone(transport));
        }
        if let Some(checkpoint) = &checkpoint {
            builder = builder.restore_from(checkpoint);
        }
        let mut algo = builder.build()?;
        algo.set_interrupt_flag(Arc::clone(&interrupt));
        let dir = RunDir::open(&target)?;
        Ok(Started { algo, dir, checkpoint, options, profile, transport, interrupt })
    }
}

/// A training run with its algorithm built and its run folder open.
#[derive(Debug)]
pub struct Started {
    algo: Impala,
    dir: RunDir,
    checkpoint: Option<PathBuf>,
    options: RunOptions,
    profile: bool,
    transport: Option<Arc<dyn RunnerTransport>>,
    interrupt: Arc<AtomicBool>,
}

impl Started {
    /// The run folder, and how it was opened.
    pub fn dir(&self) -> &RunDir {
        &self.dir
    }

    /// The config.
    pub fn config(&self) -> &ValidatedConfig {
        self.algo.config()
    }

    /// The checkpoint the run continues from (`None`: from scratch).
    pub fn checkpoint(&self) -> Option<&Path> {
        self.checkpoint.as_deref()
    }

    /// When it stops (no criterion: only when interrupted).
    pub fn stop(&self) -> &StopCriteria {
        &self.options.stop
    }

    /// Trains until a stop criterion is met or the interrupt is set ([`run`]), `on_event`
    /// seeing each result and periodic checkpoint; then tells the transport's runners that the
    /// run is over (unless it was interrupted: it may be resumed), stops the algorithm and
    /// writes the profile. The run folder is closed (unlocked) on return.
    pub fn run(self, on_event: impl FnMut(RunEvent<'_>)) -> Result<Trained, RunError> {
        let Started { mut algo, dir, options, profile, transport, interrupt, .. } = self;
        let summary = run(&mut algo, &dir, &options, &interrupt, on_event)?;
        // Read while every thread still runs (their CPU times come from /proc).
        let profile = profile.then(impala_profile::report);
        if let Some(transport) = transport.filter(|_| !summary.interrupted) {
            transport.finish(&format!("the run stopped: {}", summary.stop_reason));
        }
        algo.stop()?;
        let run_dir = dir.path().to_path_buf();
        if let Some(profile) = &profile {
            let path = run_dir.join(PROFILE_FILE);
            let json = serde_json::to_string_pretty(profile).map_err(|source| {
                ImpalaError::Json { action: "write", path: path.clone(), source }
            })?;
            std::fs::write(&path, json).map_err(|e| ImpalaError::io("write", &path, e))?;
        }
        let seed = algo.config().config().seed;
        Ok(Trained { summary, run_dir, stop: options.stop, seed, profile })
    }
}

/// How a training run ended.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Trained {
    /// Why it stopped, its last result and its checkpoints.
    pub summary: RunSummary,
    /// The run folder.
    pub run_dir: PathBuf,
    /// The criteria it ran toward (with the env's `reward_threshold` when none was given).
    pub stop: StopCriteria,
    /// The config's seed.
    pub seed: Option<u64>,
    /// Where the time went, when profiled (also in the run folder's [`PROFILE_FILE`]).
    pub profile: Option<impala_profile::Report>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_run_refuses_a_config_file() -> Result<(), RunError> {
        let runs = tempfile::tempdir().map_err(|e| ImpalaError::io("create", Path::new("t"), e))?;
        let checkpoint = runs.path().join("run/checkpoint_000001");
        std::fs::create_dir_all(&checkpoint)
            .map_err(|e| ImpalaError::io("create", &checkpoint, e))?;
        let spec = TrainSpec {
            source: ConfigSource { file: Some("a.toml".into()), ..Default::default() },
            resume: Some(runs.path().join("run")),
            ..Default::default()
        };
        let err = Training::new(spec).err();
        assert!(
            matches!(&err, Some(RunError::ConfigWithResume { file }) if file == Path::new("a.toml")),
            "{err:?}"
        );
        Ok(())
    }

    #[test]
    fn no_stop_criterion_stops_at_the_reward_threshold() -> Result<(), RunError> {
        let training = Training::new(TrainSpec::default())?;
        assert_eq!(training.options.stop.episode_return_mean, Some(475.0));
        assert_eq!(training.target, RunTarget::for_env("CartPole-v1"));
        let mut spec = TrainSpec {
            source: ConfigSource { env: Some("Pendulum-v1".into()), ..Default::default() },
            run_dir: Some("run".into()),
            ..Default::default()
        };
        let pendulum = Training::new(spec.clone())?;
        assert_eq!(pendulum.options.stop, StopCriteria::default());
        assert_eq!(pendulum.target, RunTarget::New("run".into()));
        spec.options.stop.training_iteration = Some(3);
        let given = Training::new(spec)?;
        assert_eq!(given.options.stop.episode_return_mean, None);
        Ok(())
    }
}
