//! Validation: RLlib's `validate_config` rules for IMPALA plus the checks a user needs.
//! Problems are collected (all of them are reported at once), warnings are returned.

use std::time::Duration;

use crate::config::{DurationUnit, ImpalaConfig};
use crate::diagnostics::{Rule, Violation, Warning, WarningKind};
use crate::error::{ConfigError, Result};
use crate::log_level::LogLevel;
use crate::model::ModelConfig;
use impala_core::{
    suggest, Activation, CustomModel, OptType, ResNetSettings, Schedule, UnknownActivation,
};

/// A config that passed [`ImpalaConfig::validate`], with RLlib's fix-ups applied
/// (`num_data_loader_buffers` moved to `num_multi_gpu_tower_stacks`, `minibatch_buffer_size`
/// lowered to the tower stacks), the values validation parsed, and the warnings found.
///
/// It does not deref to [`ImpalaConfig`]: the crates below the algorithm take settings built
/// from it, and the algorithm reads the raw options through [`ValidatedConfig::config`].
#[derive(Debug, Clone, PartialEq)]
pub struct ValidatedConfig {
    config: ImpalaConfig,
    activations: ModelActivations,
    custom_model: Option<CustomModel>,
    log_level: LogLevel,
    durations: Durations,
    warnings: Vec<Warning>,
}

/// The longest wait or time limit an option takes, in seconds (about 31.7 years): a longer one
/// would make no difference, and every accepted value becomes a [`Duration`] without overflow.
pub const MAX_SECONDS: f64 = 1e9;

/// The options in seconds as the [`Duration`]s validation made of them, once: each was finite,
/// at least 0 (more than 0 where a zero would never wait) and at most [`MAX_SECONDS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durations {
    /// `sample_timeout_s`.
    pub sample_timeout: Duration,
    /// `env_runner_connect_timeout_s`.
    pub env_runner_connect_timeout: Duration,
    /// `shutdown_grace_s`.
    pub shutdown_grace: Duration,
    /// `learner_queue_timeout`.
    pub learner_queue_timeout: Duration,
    /// `timeout_s_sampler_manager`.
    pub sampler_manager_timeout: Duration,
    /// `timeout_s_aggregator_manager`.
    pub aggregator_manager_timeout: Duration,
    /// `min_time_s_per_iteration`.
    pub min_time_per_iteration: Duration,
}

impl Durations {
    /// Each wait with the option it was made from, in the config's order.
    pub fn by_option(&self) -> [(&'static str, Duration); 7] {
        [
            ("sample_timeout_s", self.sample_timeout),
            ("env_runner_connect_timeout_s", self.env_runner_connect_timeout),
            ("shutdown_grace_s", self.shutdown_grace),
            ("learner_queue_timeout", self.learner_queue_timeout),
            ("timeout_s_sampler_manager", self.sampler_manager_timeout),
            ("timeout_s_aggregator_manager", self.aggregator_manager_timeout),
            ("min_time_s_per_iteration", self.min_time_per_iteration),
        ]
    }
}

impl std::fmt::Display for Durations {
    /// The waits as validation made them, by option (what `impala config` prints).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (key, wait)) in self.by_option().iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{key} {:?}", wait)?;
        }
        write!(f, " (every option in seconds is at most {MAX_SECONDS:e})")
    }
}

/// The model's activations, parsed from their RLlib names once, by validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelActivations {
    /// `model.fcnet_activation`.
    pub fcnet: Activation,
    /// `model.conv_activation`.
    pub conv: Activation,
    /// `model.post_fcnet_activation`.
    pub post_fcnet: Activation,
}

impl ValidatedConfig {
    /// The validated (fixed-up) config, as the user wrote it apart from the fix-ups.
    pub fn config(&self) -> &ImpalaConfig {
        &self.config
    }

    /// The model's activations.
    pub fn model_activations(&self) -> ModelActivations {
        self.activations
    }

    /// The model `model.custom_model` names, parsed with its `custom_model_config`; `None`
    /// for RLlib's catalog model.
    pub fn custom_model(&self) -> Option<&CustomModel> {
        self.custom_model.as_ref()
    }

    /// How much to log (`log_level`).
    pub fn log_level(&self) -> LogLevel {
        self.log_level
    }

    /// The options in seconds, as [`Duration`]s.
    ///
    /// ```
    /// use std::time::Duration;
    /// use impala_config::ImpalaConfig;
    ///
    /// let mut config = ImpalaConfig::default();
    /// config.sample_timeout_s = 2.5;
    /// assert_eq!(config.validate()?.durations().sample_timeout, Duration::from_millis(2500));
    /// config.sample_timeout_s = 1e30; // no Duration holds it; refused, naming the key
    /// let refused = config.validate().err().map(|e| e.to_string()).unwrap_or_default();
    /// assert!(refused.contains("sample_timeout_s"), "{refused}");
    /// # Ok::<(), impala_config::ConfigError>(())
    /// ```
    pub fn durations(&self) -> Durations {
        self.durations
    }

    /// The warnings validation found; the caller decides how to show them.
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// The config and the warnings.
    pub fn into_parts(self) -> (ImpalaConfig, Vec<Warning>) {
        (self.config, self.warnings)
    }
}

#[derive(Default)]
struct Checker {
    violations: Vec<Violation>,
    warnings: Vec<Warning>,
}

impl Checker {
    fn error(&mut self, key: impl Into<String>, rule: Rule, problem: String, fix: String) {
        self.violations.push(Violation { key: key.into(), rule, problem, fix });
    }

    fn warn(&mut self, key: &str, kind: WarningKind, message: String) {
        self.warnings.push(Warning { key: key.into(), kind, message });
    }

    fn positive_size(&mut self, key: &str, value: usize) {
        if value == 0 {
            self.error(
                key,
                Rule::PositiveSize,
                "is 0 but must be at least 1".into(),
                format!("set `{key}` to 1 or more"),
            );
        }
    }

    fn positive_number(&mut self, key: &str, value: f64) {
        if !(value.is_finite() && value > 0.0) {
            let problem = format!("is {value} but must be a finite number > 0");
            self.error(
                key,
                Rule::PositiveNumber,
                problem,
                format!("set `{key}` to a positive number"),
            );
        }
    }

    fn non_negative(&mut self, key: &str, value: f64) {
        if !(value.is_finite() && value >= 0.0) {
            let problem = format!("is {value} but must be a finite number >= 0");
            self.error(key, Rule::NonNegativeNumber, problem, format!("set `{key}` to 0 or more"));
        }
    }

    fn threshold(&mut self, key: &str, value: Option<f64>) {
        match value {
            Some(v) if !(v.is_finite() && v > 0.0) => self.error(
                key,
                Rule::PositiveThreshold,
                format!("is {v} but a threshold must be a finite number > 0"),
                format!("set `{key}` to a positive number, or to none to turn it off"),
            ),
            _ => {}
        }
    }

    /// Non-empty, sorted by timestep, values finite and >= 0.
    fn schedule(&mut self, key: &str, schedule: Option<&Schedule>) {
        let Some(schedule) = schedule else { return };
        let points = &schedule.points;
        if points.is_empty() {
            let fix = format!("give `{key}` at least one [timestep, value] pair, or remove it");
            self.error(key, Rule::Schedule, "is empty".into(), fix);
            return;
        }
        for (i, pair) in points.windows(2).enumerate() {
            if pair[1].0 < pair[0].0 {
                let problem = format!(
                    "timestep {} comes after timestep {}; schedules must be sorted by timestep",
                    pair[1].0, pair[0].0
                );
                self.error(
                    format!("{key}[{}]", i + 1),
                    Rule::Schedule,
                    problem,
                    format!("sort `{key}` by timestep"),
                );
            }
        }
        for (i, &(_, value)) in points.iter().enumerate() {
            if !(value.is_finite() && value >= 0.0) {
                let problem = format!("has value {value}; schedule values must be finite and >= 0");
                self.error(
                    format!("{key}[{i}]"),
                    Rule::Schedule,
                    problem,
                    "use finite values >= 0".into(),
                );
            }
        }
        if points[0].0 > 0 {
            let message = format!(
                "starts at timestep {}; before it impala-rs holds the first value (RLlib would use the last); start it at 0 to make that explicit",
                points[0].0
            );
            self.warn(key, WarningKind::ScheduleStartsAfterZero, message);
        }
    }

    fn activation(&mut self, key: &str, name: &str) -> Option<Activation> {
        name.parse()
            .map_err(|e: UnknownActivation| {
                let fix = format!("use one of {}", Activation::NAMES.join(", "));
                self.error(key, Rule::ActivationName, e.to_string(), fix);
            })
            .ok()
    }
}

impl ImpalaConfig {
    /// Checks every rule and returns the config with RLlib's fix-ups applied plus the warnings,
    /// or [`ConfigError::Invalid`] listing every problem found (not only the first).
    ///
    /// ```
    /// use impala_config::{ConfigError, ImpalaConfig, Rule};
    /// let bad = ImpalaConfig::default().training(|t| t.entropy_coeff(-0.1).gamma(1.5));
    /// let Err(ConfigError::Invalid { violations }) = bad.validate() else {
    ///     return Err("expected problems".into());
    /// };
    /// let rules: Vec<Rule> = violations.iter().map(|v| v.rule).collect();
    /// assert_eq!(rules, [Rule::GammaInUnitInterval, Rule::EntropyCoeffNonNegative]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[doc(alias = "validate_config")]
    pub fn validate(&self) -> Result<ValidatedConfig> {
        let mut fixed = self.clone();
        let mut c = Checker::default();

        // RLlib's `validate_config`: the deprecated name wins over the default, with a warning.
        if let Some(n) = fixed.num_data_loader_buffers.take() {
            c.warnings.push(crate::io::deprecated(
                "num_data_loader_buffers",
                "num_multi_gpu_tower_stacks",
            ));
            fixed.num_multi_gpu_tower_stacks = n;
        }

        check_environment(&fixed, &mut c);
        check_training(&fixed, &mut c);
        let activations = check_model(&fixed.model, &mut c);
        let custom_model = check_custom_model(&fixed.model, &mut c);
        check_resources(&fixed, &mut c);
        check_learner_thread(&mut fixed, &mut c);
        let log_level = check_rest(&fixed, &mut c);
        let durations = check_durations(&fixed, &mut c);

        match (activations, log_level) {
            // A name that does not parse is a violation, so `None` never passes.
            (Some(activations), Some(log_level)) if c.violations.is_empty() => {
                Ok(ValidatedConfig {
                    config: fixed,
                    activations,
                    custom_model,
                    log_level,
                    durations,
                    warnings: c.warnings,
                })
            }
            _ => Err(ConfigError::Invalid { violations: c.violations }),
        }
    }

    /// `replay_proportion` as the fraction of replayed batches in the output: `p / (1 + p)`
    /// (`p = 1` gives half replayed, `p = 3` three quarters).
    ///
    /// RLlib documents `replay_proportion` as "replayed with a p:1 proportion to new data"
    /// but computes `replay_ratio = 1 / replay_proportion`, so `p = 0.5` replays nothing and
    /// `p = 2` gives a 1:1 mix (ray-project/ray#18799). impala-rs implements the documented
    /// meaning and does not port that conversion.
    ///
    /// ```
    /// use impala_config::ImpalaConfig;
    /// let config = ImpalaConfig::default().training(|t| t.replay_proportion(3.0));
    /// assert_eq!(config.replay_ratio(), 0.75);
    /// assert_eq!(ImpalaConfig::default().replay_ratio(), 0.0);
    /// ```
    pub fn replay_ratio(&self) -> f64 {
        let p = self.replay_proportion;
        if p > 0.0 {
            p / (1.0 + p)
        } else {
            0.0
        }
    }

    /// Python envs per env worker process: 1 with `remote_worker_envs`, else
    /// `num_envs_per_env_worker`, else all of a runner's envs.
    pub fn envs_per_env_worker(&self) -> usize {
        match (self.remote_worker_envs, self.num_envs_per_env_worker) {
            (true, _) => 1,
            (false, Some(n)) => n.min(self.num_envs_per_env_runner).max(1),
            (false, None) => self.num_envs_per_env_runner.max(1),
        }
    }

    /// Env steps in one sample batch from an env runner:
    /// `rollout_fragment_length * num_envs_per_env_runner`.
    pub fn sample_batch_size(&self) -> usize {
        self.rollout_fragment_length.saturating_mul(self.num_envs_per_env_runner)
    }

    /// The train batch one learner sees: `train_batch_size_per_learner`, else
    /// `train_batch_size / max(num_learners, 1)` (RLlib's `train_batch_size_per_learner`
    /// property).
    pub fn learner_train_batch_size(&self) -> usize {
        self.train_batch_size_per_learner
            .unwrap_or(self.train_batch_size / self.num_learners.max(1))
    }

    /// The train batch of all learners together (RLlib's `total_train_batch_size`).
    ///
    /// ```
    /// use impala_config::ImpalaConfig;
    /// let config = ImpalaConfig::default()
    ///     .training(|t| t.train_batch_size_per_learner(Some(256)))
    ///     .learners(|l| l.num_learners(2));
    /// assert_eq!((config.learner_train_batch_size(), config.total_train_batch_size()), (256, 512));
    /// ```
    pub fn total_train_batch_size(&self) -> usize {
        match self.train_batch_size_per_learner {
            Some(per_learner) => per_learner.saturating_mul(self.num_learners.max(1)),
            None => self.train_batch_size,
        }
    }

    /// Whether evaluation runs (`evaluation_interval` set and not 0, as RLlib's truthiness test).
    pub fn evaluation_enabled(&self) -> bool {
        self.evaluation_interval.is_some_and(|n| n > 0)
    }

    /// The learning rate after `timestep` trained steps: `lr_schedule` if set, else `lr`.
    ///
    /// ```
    /// use impala_config::{ImpalaConfig, Schedule};
    /// let config = ImpalaConfig::default()
    ///     .training(|t| t.lr_schedule(Some(Schedule { points: vec![(0, 1e-3), (1000, 0.0)] })));
    /// assert_eq!(config.lr_at(500), 5e-4);
    /// ```
    pub fn lr_at(&self, timestep: u64) -> f64 {
        self.lr_schedule.as_ref().map_or(self.lr, |s| s.value_at(timestep))
    }

    /// The entropy coefficient after `timestep` trained steps: `entropy_coeff_schedule` if
    /// set, else `entropy_coeff`.
    pub fn entropy_coeff_at(&self, timestep: u64) -> f64 {
        self.entropy_coeff_schedule.as_ref().map_or(self.entropy_coeff, |s| s.value_at(timestep))
    }
}

fn check_environment(config: &ImpalaConfig, c: &mut Checker) {
    if config.env.trim().is_empty() {
        c.error(
            "env",
            Rule::EnvName,
            "is empty".into(),
            "set `env` to an environment id such as CartPole-v1".into(),
        );
    }
    c.threshold("clip_rewards", config.clip_rewards);
    if let Some(n) = config.num_envs_per_env_worker {
        c.positive_size("num_envs_per_env_worker", n);
        if config.remote_worker_envs && n != 1 {
            c.error(
                "num_envs_per_env_worker",
                Rule::EnvWorkersTwice,
                format!("is {n} but `remote_worker_envs = true` puts each env in its own worker"),
                "remove one of the two (`remote_worker_envs = true` means `num_envs_per_env_worker = 1`)".into(),
            );
        }
    }
    check_atari_frameskip(config, c);
    check_atari_crop(config, c);
    if config.python_executable.as_deref().is_some_and(|p| p.trim().is_empty()) {
        c.error(
            "python_executable",
            Rule::EnvName,
            "is empty".into(),
            "set `python_executable` to an interpreter path, or remove it to use the default"
                .into(),
        );
    }
}

/// IMPALA's Atari action repeat is 4, done by ale-py's vector env (no wrapper skips frames in
/// impala-rs): `frameskip = 1`, as RLlib's Atari configs have it for their own wrapper, would
/// turn it off, so it is refused; other values warn.
fn check_atari_frameskip(config: &ImpalaConfig, c: &mut Checker) {
    const KEY: &str = "env_config.frameskip";
    let Some(value) = config.env_config.get("frameskip").filter(|_| config.env.starts_with("ALE/"))
    else {
        return;
    };
    match value.as_u64() {
        Some(4) => {}
        Some(1) => c.error(
            KEY,
            Rule::AtariFrameskip,
            format!(
                "is 1 for `{}`: ale-py's vector env is what repeats each action here (RLlib's \
                 Atari configs set 1 because their own wrapper skips frames, which impala-rs \
                 does not add), so every action would last one frame",
                config.env
            ),
            "remove `env_config.frameskip` for IMPALA's 4 frames per action (max-pooled over \
             the last two)"
                .into(),
        ),
        Some(n) if n > 1 => c.warn(
            KEY,
            WarningKind::AtariFrameskip,
            format!(
                "is {n}: ale-py repeats each action {n} frames (IMPALA's and RLlib's Atari \
                 setting is 4); remove the key for 4"
            ),
        ),
        _ => c.error(
            KEY,
            Rule::AtariFrameskip,
            format!("is {value}, not a number of frames of 1 or more"),
            "remove `env_config.frameskip` for IMPALA's 4 frames per action".into(),
        ),
    }
}

/// ALE's screen, `[height, width]`, for every game: what `env_config.crop` cuts from.
const ALE_SCREEN: [u64; 2] = [210, 160];

/// `env_config.crop` for an Atari game: the pixels cut from each side of ALE's screen before
/// the frame is resized to `img_height x img_width` (the Atari worker crops; ale-py cannot).
fn check_atari_crop(config: &ImpalaConfig, c: &mut Checker) {
    const KEY: &str = "env_config.crop";
    const SIDES: [&str; 4] = ["top", "bottom", "left", "right"];
    let Some(value) = config.env_config.get("crop").filter(|_| config.env.starts_with("ALE/"))
    else {
        return;
    };
    let fix = || {
        "set `env_config.crop` to the pixels cut from each side of the 210x160 screen, e.g. \
         `{ top = 34, bottom = 16 }` for Pong's playing field"
            .to_string()
    };
    let Some(sides) = value.as_object() else {
        c.error(KEY, Rule::AtariCrop, format!("is {value}, not a table of sides"), fix());
        return;
    };
    let mut cut = [0u64; 4];
    for (side, pixels) in sides {
        let Some(i) = SIDES.iter().position(|s| s == side) else {
            let problem = format!("has an unknown side `{side}` (the sides: {})", SIDES.join(", "));
            c.error(KEY, Rule::AtariCrop, problem, fix());
            continue;
        };
        match pixels.as_u64() {
            Some(n) => cut[i] = n,
            None => {
                let problem = format!("`{side}` is {pixels}, not a number of pixels (0 or more)");
                c.error(KEY, Rule::AtariCrop, problem, fix());
            }
        }
    }
    let (rows, cols) = (cut[0].saturating_add(cut[1]), cut[2].saturating_add(cut[3]));
    if rows >= ALE_SCREEN[0] || cols >= ALE_SCREEN[1] {
        let problem = format!(
            "cuts {rows} rows and {cols} columns, leaving nothing of the {}x{} screen",
            ALE_SCREEN[0], ALE_SCREEN[1]
        );
        c.error(KEY, Rule::AtariCrop, problem, fix());
    }
    if config.env_config.get("grayscale") == Some(&serde_json::Value::Bool(false)) {
        c.error(
            KEY,
            Rule::AtariCrop,
            "needs grayscale frames, but `env_config.grayscale` is false".into(),
            "remove `env_config.grayscale` (cropped frames are grayscale), or remove the crop"
                .into(),
        );
    }
}

/// The most episodes one evaluation may run (`evaluation_duration`, `impala evaluate
/// --episodes`): more would keep a run or a command busy for days.
pub const MAX_EVALUATION_EPISODES: usize = 1_000_000;

fn check_training(config: &ImpalaConfig, c: &mut Checker) {
    if !(0.0..=1.0).contains(&config.gamma) {
        let problem = format!("is {} but a discount must be in [0, 1]", config.gamma);
        c.error(
            "gamma",
            Rule::GammaInUnitInterval,
            problem,
            "set `gamma` between 0 and 1 (e.g. 0.99)".into(),
        );
    }
    match &config.lr_schedule {
        None => c.positive_number("lr", config.lr),
        Some(schedule) if schedule.points.first().is_some_and(|p| p.1 != config.lr) => c.warn(
            "lr",
            WarningKind::LrIgnoredBySchedule,
            format!(
                "is {} but `lr_schedule` is set and starts at {}; the schedule sets the learning rate, so `lr` is ignored (set `lr_schedule = none` to use `lr`, or change the schedule)",
                config.lr,
                schedule.value_at(0)
            ),
        ),
        Some(_) => {}
    }
    c.schedule("lr_schedule", config.lr_schedule.as_ref());
    // RLlib: "`entropy_coeff` must be >= 0.0!"
    if !(config.entropy_coeff.is_finite() && config.entropy_coeff >= 0.0) {
        let problem = format!(
            "is {} but must be >= 0 (a negative bonus punishes exploration)",
            config.entropy_coeff
        );
        c.error(
            "entropy_coeff",
            Rule::EntropyCoeffNonNegative,
            problem,
            "set `entropy_coeff` to 0 or more".into(),
        );
    }
    c.schedule("entropy_coeff_schedule", config.entropy_coeff_schedule.as_ref());
    c.non_negative("vf_loss_coeff", config.vf_loss_coeff);
    c.threshold("vtrace_clip_rho_threshold", config.vtrace_clip_rho_threshold);
    c.threshold("vtrace_clip_pg_rho_threshold", config.vtrace_clip_pg_rho_threshold);
    c.threshold("grad_clip", config.grad_clip);

    for (key, value) in [
        ("train_batch_size", config.train_batch_size),
        ("rollout_fragment_length", config.rollout_fragment_length),
        ("num_envs_per_env_runner", config.num_envs_per_env_runner),
        ("learner_queue_size", config.learner_queue_size),
        ("num_sgd_iter", config.num_sgd_iter),
        ("minibatch_buffer_size", config.minibatch_buffer_size),
        ("num_multi_gpu_tower_stacks", config.num_multi_gpu_tower_stacks),
        ("broadcast_interval", config.broadcast_interval),
        (
            "max_requests_in_flight_per_sampler_worker",
            config.max_requests_in_flight_per_sampler_worker,
        ),
        (
            "max_requests_in_flight_per_aggregator_worker",
            config.max_requests_in_flight_per_aggregator_worker,
        ),
        ("num_gpu_loader_threads", config.num_gpu_loader_threads),
        ("num_learner_threads", config.num_learner_threads),
        ("metrics_num_episodes_for_smoothing", config.metrics_num_episodes_for_smoothing),
    ] {
        c.positive_size(key, value);
    }
    if let Some(n) = config.train_batch_size_per_learner {
        c.positive_size("train_batch_size_per_learner", n);
    }

    c.non_negative("replay_proportion", config.replay_proportion);
    if config.replay_proportion > 0.0 && config.replay_buffer_num_slots == 0 {
        // RLlib falls back to a buffer of one slot, which only ever replays the newest batch.
        c.error(
            "replay_buffer_num_slots",
            Rule::ReplayNeedsSlots,
            format!("is 0 but replay_proportion = {} asks for replay", config.replay_proportion),
            "set `replay_buffer_num_slots` to the number of sample batches to keep (e.g. 100), or `replay_proportion` to 0".into(),
        );
    }
    if config.opt_type == OptType::Rmsprop {
        c.positive_number("epsilon", config.epsilon);
        c.non_negative("decay", config.decay);
        c.non_negative("momentum", config.momentum);
    }

    // RLlib's `validate_config`: aggregation workers only make sense below the env runners.
    let (aggregators, runners) = (config.num_aggregation_workers, config.num_env_runners);
    if aggregators > runners {
        c.error(
            "num_aggregation_workers",
            Rule::AggregationWorkersWithinEnvRunners,
            format!("is {aggregators} but `num_env_runners` is {runners}; aggregation makes no sense otherwise"),
            format!("set `num_aggregation_workers` to at most {runners} (0.5 * num_env_runners or less is best)"),
        );
    } else if aggregators as f64 > runners as f64 / 2.0 {
        c.warn(
            "num_aggregation_workers",
            WarningKind::AggregationWorkersAboveHalf,
            format!(
                "{aggregators} aggregation workers for {runners} env runners: `num_aggregation_workers` should be significantly smaller than `num_env_runners`; try {} or less",
                runners / 2
            ),
        );
    }

    // `_separate_vf_optimizer`: RLlib supports it only for tf (it raises for torch) and gives
    // the value-only variables their own optimizer; impala-rs does the same with torch.
    if config.separate_vf_optimizer {
        if !(config.lr_vf.is_finite() && config.lr_vf > 0.0) {
            c.error(
                "_lr_vf",
                Rule::SeparateVfOptimizer,
                format!(
                    "is {} but `_separate_vf_optimizer` trains the value function with it",
                    config.lr_vf
                ),
                "set `_lr_vf` to a positive learning rate (e.g. 0.0005)".into(),
            );
        }
        if config.vf_loss_coeff != ImpalaConfig::default().vf_loss_coeff {
            c.warn(
                "vf_loss_coeff",
                WarningKind::VfLossCoeffIgnored,
                "is set but `_separate_vf_optimizer` trains the value function on the value loss alone (as RLlib does), so it only weighs the reported total_loss; remove it, or set `_separate_vf_optimizer = false` to use it".into(),
            );
        }
        // A custom model decides for itself which parameters are the value function's.
        if config.model.vf_share_layers && config.model.custom_model.is_none() {
            c.warn(
                "_separate_vf_optimizer",
                WarningKind::SeparateVfOptimizerSharedLayers,
                "with `model.vf_share_layers = true` the value optimizer trains only the value head and the shared layers learn from the policy loss alone; set `model.vf_share_layers = false` for a separate value network".into(),
            );
        }
    } else if config.lr_vf != ImpalaConfig::default().lr_vf {
        c.warn(
            "_lr_vf",
            WarningKind::LrVfIgnored,
            "is set but `_separate_vf_optimizer` is false, so it is ignored; set `_separate_vf_optimizer = true` to use it".into(),
        );
    }
}

/// Checks the model options and parses their activations.
/// `model.custom_model` and `model.custom_model_config`, parsed (a violation leaves `None`).
fn check_custom_model(model: &ModelConfig, c: &mut Checker) -> Option<CustomModel> {
    const KEY: &str = "model.custom_model";
    let options = &model.custom_model_config;
    let Some(name) = &model.custom_model else {
        if let Some(key) = options.keys().next() {
            c.error(
                format!("model.custom_model_config.{key}"),
                Rule::CustomModel,
                "is set but `model.custom_model` is not".into(),
                "set `model.custom_model` (\"impala_resnet\" or a TorchScript file), or \
                 remove `model.custom_model_config`"
                    .into(),
            );
        }
        return None;
    };
    if name == "impala_resnet" {
        let mut resnet = ResNetSettings::default();
        for (key, value) in options {
            let full = format!("model.custom_model_config.{key}");
            let parsed = match key.as_str() {
                "channels" => serde_json::from_value::<Vec<usize>>(value.clone())
                    .ok()
                    .filter(|v| !v.is_empty() && !v.contains(&0))
                    .map(|v| resnet.channels = v),
                "hidden" => serde_json::from_value::<usize>(value.clone())
                    .ok()
                    .filter(|&h| h > 0)
                    .map(|h| resnet.hidden = h),
                _ => {
                    c.error(
                        full,
                        Rule::CustomModel,
                        format!(
                            "is not an option of impala_resnet, which reads {:?}",
                            ResNetSettings::KEYS
                        ),
                        match suggest::did_you_mean(key, ResNetSettings::KEYS) {
                            Some(k) => format!("did you mean `{k}`?"),
                            None => "remove it".into(),
                        },
                    );
                    continue;
                }
            };
            if parsed.is_none() {
                c.error(
                    full,
                    Rule::CustomModel,
                    format!(
                        "is {value}, not a positive {}",
                        if key == "channels" { "list of channel counts" } else { "width" }
                    ),
                    format!(
                        "set it like the paper's: channels = {:?}, hidden = {}",
                        ResNetSettings::default().channels,
                        ResNetSettings::default().hidden
                    ),
                );
            }
        }
        return Some(CustomModel::ImpalaResNet(resnet));
    }
    let path = std::path::PathBuf::from(name);
    if !path.is_file() {
        c.error(
            KEY,
            Rule::CustomModel,
            format!(
                "is `{name}`, which is neither a built-in model ({}) nor a TorchScript file \
                 (no file at that path)",
                CustomModel::NAMES.join(", ")
            ),
            match suggest::did_you_mean(name, CustomModel::NAMES) {
                Some(known) => format!("did you mean \"{known}\"?"),
                None => "set it to \"impala_resnet\" or to the file that \
                         `torch.jit.script(module).save(path)` wrote"
                    .into(),
            },
        );
        return None;
    }
    if let Some(key) = options.keys().next() {
        c.error(
            format!("model.custom_model_config.{key}"),
            Rule::CustomModel,
            "is set for a TorchScript file, which is built already".into(),
            "remove `model.custom_model_config` (the impala_rs Python package builds a \
             registered class with it before scripting)"
                .into(),
        );
        return None;
    }
    Some(CustomModel::TorchScript(path))
}

fn check_model(model: &ModelConfig, c: &mut Checker) -> Option<ModelActivations> {
    let fcnet = c.activation("model.fcnet_activation", &model.fcnet_activation);
    let conv = c.activation("model.conv_activation", &model.conv_activation);
    let post_fcnet = c.activation("model.post_fcnet_activation", &model.post_fcnet_activation);
    for (key, sizes) in [
        ("model.fcnet_hiddens", &model.fcnet_hiddens),
        ("model.post_fcnet_hiddens", &model.post_fcnet_hiddens),
    ] {
        for (i, &size) in sizes.iter().enumerate() {
            c.positive_size(&format!("{key}[{i}]"), size);
        }
    }
    for (i, filter) in model.conv_filters.iter().flatten().enumerate() {
        if filter.has_zero() {
            c.error(
                format!("model.conv_filters[{i}]"),
                Rule::PositiveSize,
                format!("is {filter} but channels, kernel and stride must be at least 1"),
                "write each filter as [out_channels, kernel, stride] with positive numbers \
                 (kernel and stride an int or an [h, w] pair)"
                    .into(),
            );
        }
    }
    c.positive_size("model.framestack", model.framestack);
    if model.use_lstm {
        c.positive_size("model.lstm_cell_size", model.lstm_cell_size);
        c.positive_size("model.max_seq_len", model.max_seq_len);
    }
    Some(ModelActivations { fcnet: fcnet?, conv: conv?, post_fcnet: post_fcnet? })
}

fn check_resources(config: &ImpalaConfig, c: &mut Checker) {
    for (key, value) in [
        ("num_gpus", config.num_gpus),
        ("num_cpus_for_main_process", config.num_cpus_for_main_process),
        ("num_cpus_per_env_runner", config.num_cpus_per_env_runner),
        ("num_gpus_per_env_runner", config.num_gpus_per_env_runner),
        ("num_gpus_per_learner", config.num_gpus_per_learner),
    ] {
        c.non_negative(key, value);
    }
    for (name, &amount) in &config.custom_resources_per_env_runner {
        c.non_negative(&format!("custom_resources_per_env_runner.{name}"), amount);
    }
    // Ray places env runner actors by these; runner threads (and `impala env-runner`
    // processes, placed by Kubernetes or Slurm) have nothing to place, so there they are
    // refused, not ignored.
    let ray = config.env_runner_backend == crate::EnvRunnerBackend::Ray;
    if config.placement_strategy != crate::PlacementStrategy::Pack && !ray {
        c.error(
            "placement_strategy",
            Rule::NotSupported,
            format!("is {} but env runner threads are not placed by Ray, so it would do nothing", config.placement_strategy.as_str()),
            "remove `placement_strategy`, or set `env_runner_backend = \"ray\"` for env runner actors on a Ray cluster".into(),
        );
    }
    let custom = config.custom_resources_per_env_runner.iter().find(|(_, &amount)| amount > 0.0);
    if let Some((name, _)) = custom.filter(|_| !ray) {
        c.error(
            format!("custom_resources_per_env_runner.{name}"),
            Rule::NotSupported,
            "asks for a custom Ray resource, but env runner threads are not placed by Ray".into(),
            "remove `custom_resources_per_env_runner`, or set `env_runner_backend = \"ray\"`"
                .into(),
        );
    }
    if config.env_runner_tls && !ray {
        c.error(
            "env_runner_tls",
            Rule::NotSupported,
            "is true, but only Ray env runner actors get the run's certificate".into(),
            "set `env_runner_backend = \"ray\"`, or remove `env_runner_tls`: `impala train \
             --listen` serves TLS with --tls-cert/--tls-key and `impala env-runner` trusts it \
             with --tls-ca"
                .into(),
        );
    }
    if ray && config.num_env_runners == 0 {
        c.error(
            "num_env_runners",
            Rule::NotSupported,
            "is 0, but `env_runner_backend = \"ray\"` samples only with env runner actors".into(),
            "set `num_env_runners` to the number of env runner actors (1 or more)".into(),
        );
    }
    if config.num_gpus_per_env_runner > 0.0 {
        c.error(
            "num_gpus_per_env_runner",
            Rule::NotSupported,
            format!("is {} but env runners' policies always infer on the CPU (one libtorch thread each)", config.num_gpus_per_env_runner),
            "set `num_gpus_per_env_runner = 0`; the learner's GPUs are `num_gpus` or `num_gpus_per_learner`".into(),
        );
    }
    let per_learner = config.num_gpus_per_learner;
    if config.num_gpus > 0.0 && per_learner > 0.0 {
        c.error(
            "num_gpus_per_learner",
            Rule::LearnerGpusTwice,
            format!("is {per_learner} but `num_gpus` = {} asks for learner GPUs too (old and new API stack)", config.num_gpus),
            "set either `num_gpus` (old stack) or `num_learners` with `num_gpus_per_learner` (new stack), and the other to 0".into(),
        );
    }
    if config.num_gpus > 0.0 && config.num_learners > 1 {
        c.error(
            "num_learners",
            Rule::LearnerGpusTwice,
            format!("is {} but `num_gpus` = {} places the learner's towers the old-stack way", config.num_learners, config.num_gpus),
            "use `num_learners` with `num_gpus_per_learner` (new stack) and `num_gpus = 0`, or `num_gpus` with `num_learners` at most 1".into(),
        );
    }
    if per_learner > 1.0 && per_learner.fract() != 0.0 {
        c.error(
            "num_gpus_per_learner",
            Rule::WholeGpus,
            format!("is {per_learner} but only a fraction below 1 can share a GPU"),
            format!(
                "set `num_gpus_per_learner` to {} or {}",
                per_learner.floor(),
                per_learner.ceil()
            ),
        );
    } else if per_learner > 0.0 && per_learner < 1.0 && config.num_learners > 1 {
        c.error(
            "num_gpus_per_learner",
            Rule::WholeGpus,
            format!(
                "is {per_learner} with `num_learners` = {}: learners cannot share one GPU",
                config.num_learners
            ),
            "set `num_gpus_per_learner` to 1 (one GPU per learner), or `num_learners` to 1".into(),
        );
    }
    if config.num_gpus > 1.0 && config.num_gpus.fract() != 0.0 {
        c.error(
            "num_gpus",
            Rule::WholeGpus,
            format!("is {} but only a fraction below 1 can share a GPU", config.num_gpus),
            format!("set `num_gpus` to {} or {}", config.num_gpus.floor(), config.num_gpus.ceil()),
        );
    }
}

/// RLlib's `make_learner_thread` and `MultiGPULearnerThread` rules (multi-GPU path only).
fn check_learner_thread(config: &mut ImpalaConfig, c: &mut Checker) {
    let plan = config.learner_plan();
    if config.simple_optimizer && plan.num_devices > 1 {
        c.error(
            "simple_optimizer",
            Rule::SimpleOptimizerOneDevice,
            format!("is true, but the single-device LearnerThread cannot train {plan}"),
            "set `simple_optimizer = false` to train the towers with the MultiGPULearnerThread, or ask for one device".into(),
        );
    }
    if plan.multi_gpu_thread {
        let (stacks, buffer) = (config.num_multi_gpu_tower_stacks, config.minibatch_buffer_size);
        if stacks > 0 && stacks < buffer {
            c.warn(
                "minibatch_buffer_size",
                WarningKind::MinibatchBufferLowered { from: buffer, to: stacks },
                format!(
                    "in multi-GPU mode you should have at least as many tower stacks as buffer slots; you have {stacks} stacks and a buffer of {buffer}, so `minibatch_buffer_size` is set to {stacks}"
                ),
            );
            config.minibatch_buffer_size = stacks;
        }
    }
    let (devices, batch) = (plan.num_devices, plan.train_batch_size);
    if batch > 0 && batch % devices != 0 {
        let key = if config.train_batch_size_per_learner.is_some() {
            "train_batch_size_per_learner"
        } else {
            "train_batch_size"
        };
        let lower = batch / devices * devices;
        let fix = if lower > 0 {
            format!("set `{key}` to a multiple of {devices}, e.g. {lower} or {}", lower + devices)
        } else {
            format!("set `{key}` to a multiple of {devices}, e.g. {devices}")
        };
        c.error(
            key,
            Rule::TrainBatchDivisibleByDevices,
            format!("is {batch}, which does not split evenly over the learner's {devices} towers ({plan})"),
            fix,
        );
    }
    if config.minibatch_buffer_size > 1 && config.num_sgd_iter == 1 {
        c.warn(
            "minibatch_buffer_size",
            WarningKind::MinibatchBufferUnused,
            format!("is {} but only matters when `num_sgd_iter` > 1", config.minibatch_buffer_size),
        );
    }
}

/// Every option in seconds: finite, at least 0 (more than 0 for the two that would otherwise
/// never wait), at most [`MAX_SECONDS`]; made [`Duration`]s here, once.
fn check_durations(config: &ImpalaConfig, c: &mut Checker) -> Durations {
    let mut seconds = |key: &str, value: f64, positive: bool| {
        if positive {
            c.positive_number(key, value);
        } else {
            c.non_negative(key, value);
        }
        if value.is_finite() && value > MAX_SECONDS {
            c.error(
                key,
                Rule::TooManySeconds,
                format!("is {value:e} seconds, more than the longest wait, {MAX_SECONDS:e} s (about 31 years)"),
                format!("set `{key}` to at most {MAX_SECONDS:e}"),
            );
        }
        Duration::try_from_secs_f64(value).unwrap_or(Duration::ZERO)
    };
    Durations {
        sample_timeout: seconds("sample_timeout_s", config.sample_timeout_s, true),
        env_runner_connect_timeout: seconds(
            "env_runner_connect_timeout_s",
            config.env_runner_connect_timeout_s,
            true,
        ),
        shutdown_grace: seconds("shutdown_grace_s", config.shutdown_grace_s, false),
        learner_queue_timeout: seconds(
            "learner_queue_timeout",
            config.learner_queue_timeout,
            false,
        ),
        sampler_manager_timeout: seconds(
            "timeout_s_sampler_manager",
            config.timeout_s_sampler_manager,
            false,
        ),
        aggregator_manager_timeout: seconds(
            "timeout_s_aggregator_manager",
            config.timeout_s_aggregator_manager,
            false,
        ),
        min_time_per_iteration: seconds(
            "min_time_s_per_iteration",
            config.min_time_s_per_iteration,
            false,
        ),
    }
}

fn check_rest(config: &ImpalaConfig, c: &mut Checker) -> Option<LogLevel> {
    if config.vtrace_drop_last_ts && config.rollout_fragment_length < 2 {
        c.error(
            "vtrace_drop_last_ts",
            Rule::DropLastTsNeedsTwoSteps,
            format!(
                "is true with `rollout_fragment_length` = {}: dropping the last step leaves nothing to train on",
                config.rollout_fragment_length
            ),
            "set `rollout_fragment_length` to 2 or more, or `vtrace_drop_last_ts = false`".into(),
        );
    }
    if config.evaluation_parallel_to_training && config.evaluation_num_env_runners == 0 {
        c.error(
            "evaluation_parallel_to_training",
            Rule::ParallelEvaluationNeedsRunners,
            "is true but `evaluation_num_env_runners` is 0, so evaluation would run on the driver and stop training".into(),
            "set `evaluation_num_env_runners` to 1 or more, or `evaluation_parallel_to_training = false`".into(),
        );
    }
    if config.evaluation_enabled() {
        c.positive_size("evaluation_duration", config.evaluation_duration);
        let episodes = config.evaluation_duration_unit == DurationUnit::Episodes;
        if episodes && config.evaluation_duration > MAX_EVALUATION_EPISODES {
            c.error(
                "evaluation_duration",
                Rule::AboveLimit,
                format!(
                    "is {} episodes, more than the {MAX_EVALUATION_EPISODES} an evaluation may \
                     run (each iteration would wait for them)",
                    config.evaluation_duration
                ),
                format!("set `evaluation_duration` to at most {MAX_EVALUATION_EPISODES}"),
            );
        }
    }
    let log_level = config
        .log_level
        .parse::<LogLevel>()
        .map_err(|e| {
            let fix = format!("use one of {}", LogLevel::NAMES.join(", "));
            c.error("log_level", Rule::LogLevel, e.to_string(), fix);
        })
        .ok();
    let (train, sample) = (config.train_batch_size, config.sample_batch_size());
    if train > 0 && sample > 0 {
        if train < sample {
            c.warn(
                "train_batch_size",
                WarningKind::TrainBatchSmallerThanSampleBatch,
                format!(
                    "is {train}, smaller than one sample batch (rollout_fragment_length * num_envs_per_env_runner = {sample}); every train batch will hold {sample} steps"
                ),
            );
        } else if train % sample != 0 {
            c.warn(
                "train_batch_size",
                WarningKind::TrainBatchNotMultipleOfSampleBatch,
                format!(
                    "is {train}, not a multiple of the sample batch size {sample}; train batches will hold {} steps. Set it to a multiple of {sample}",
                    train.div_ceil(sample) * sample
                ),
            );
        }
    }
    log_level
}
