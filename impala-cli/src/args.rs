//! The command line's arguments (clap): every subcommand's flags, and the one parser of each
//! kind of number they take.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{PossibleValuesParser, RangedU64ValueParser, TypedValueParser};
use clap::{Args, Parser};
use impala::config::{LogLevel, MAX_EVALUATION_EPISODES, MAX_SECONDS};
use impala::run::ScoreOrder;
use impala::StopCriteria;

/// IMPALA (V-trace actor-learner) reinforcement learning, faithful to Ray RLlib's `Impala`.
#[derive(Debug, Parser)]
#[command(name = "impala", version, about, propagate_version = true)]
pub enum Command {
    /// Train until a stop criterion is met, writing results and checkpoints to a run folder.
    Train(TrainArgs),
    /// Run episodes with a checkpoint's policy and print their returns.
    Evaluate(EvaluateArgs),
    /// Write a checkpoint's policy as a TorchScript module for plain PyTorch (`torch.jit.load`):
    /// `forward(obs) -> (logits, value)`, or `forward(obs, state) -> (logits, value, state)`
    /// for recurrent models, with the run's observation filter folded in.
    Export(ExportArgs),
    /// Print the validated config with every default filled in, and its warnings.
    Config(ConfigArgs),
    /// List the environments that can be trained on.
    Envs,
    /// Measure wall-clock, env steps and peak memory to reach a return on CartPole-v1, over
    /// several seeds (each a fresh `impala train` process), and print JSON.
    BenchCartpole(BenchArgs),
    /// Train with 10 ms iterations for a while and print the growth of resident memory as
    /// JSON (a soak test of the per-iteration bookkeeping; target: < 5 MiB over 30 minutes).
    BenchMemory(MemoryArgs),
    /// Run one env runner for a driver started with `impala train --listen`, on this or another
    /// host: it gets the config, env spec and weights from the driver, steps its envs with its
    /// own CPU policy copies (one per policy of a multi-agent env) and streams fragments back. It reconnects when the driver goes away
    /// (exiting after --reconnect-timeout-s) and exits when the driver's run is over.
    EnvRunner(EnvRunnerArgs),
    /// Draw a run folder's episode_return_mean (and evaluation return) against env steps and
    /// training time into RUN/episode_return_mean.png.
    Plot {
        /// A run folder (it holds result.json).
        run: PathBuf,
    },
    /// Run a hyperparameter search without Ray: every trial of the config file's `grid_search`
    /// and `choice` values is an `impala train` process in its own run folder, as many at once
    /// as fit in --cpus; then a table of the trials sorted by --metric and the best checkpoint.
    Tune(TuneArgs),
}

/// Where the config comes from: a file and/or `--env`, then `--set` overrides.
#[derive(Debug, Clone, Args, Default)]
pub struct SourceArgs {
    /// Config file (.toml, .yaml, .yml or .json) with RLlib's option names. Without one, the
    /// tuned example of --env (examples/; CartPole-v1's for envs without one) is used.
    pub config: Option<PathBuf>,
    /// The environment id (overrides the file's `env`).
    #[arg(long)]
    pub env: Option<String>,
    /// Override one option, e.g. `--set lr=0.001 --set model.fcnet_hiddens=[64,64]`. An `lr` or
    /// `entropy_coeff` set without its schedule replaces the config's schedule of it.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// Seed for every random number generator (overrides the config's `seed`).
    #[arg(long)]
    pub seed: Option<u64>,
}

impl SourceArgs {
    /// The file, `--env`, `--seed` and `--set`.
    pub fn source(&self) -> impala::ConfigSource {
        let (file, env, seed) = (self.config.clone(), self.env.clone(), self.seed);
        impala::ConfigSource { file, env, seed, set: self.overrides.clone() }
    }
}

/// `impala train`.
#[derive(Debug, Clone, Args)]
pub struct TrainArgs {
    /// The config.
    #[command(flatten)]
    pub source: SourceArgs,
    /// When to stop.
    #[command(flatten)]
    pub stop: StopArgs,
    /// The run folder for results and checkpoints (default: a new
    /// `impala_results/IMPALA_<env>_<UTC date and time>`; with --resume, the checkpoint's run
    /// folder, and another folder forks the run into it).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Save a checkpoint every N iterations (one is always saved at the end); 0 = only at the end.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub checkpoint_every: u64,
    /// The result key that ranks checkpoints (result.json's names, nested keys joined with `/`,
    /// e.g. `evaluation/episode_return_mean`); the best is kept and named in `best_checkpoint`.
    #[arg(long, default_value = "episode_return_mean", value_name = "KEY")]
    pub checkpoint_score_attribute: String,
    /// Whether a higher (`max`) or lower (`min`) score is better.
    #[arg(long, default_value = "max", value_parser = score_order())]
    pub checkpoint_score_order: ScoreOrder,
    /// Keep this many of the newest checkpoints (the final one is among them) plus the best by
    /// --checkpoint-score-attribute, or `all`. Tune keeps the N best instead; keeping the newest
    /// means a resume always finds where the run stopped.
    #[arg(long, default_value = "3", value_name = "N|all", value_parser = num_to_keep)]
    // `std::option::Option`, so clap takes it as one value (`None`: all), not an optional flag.
    pub num_to_keep: std::option::Option<NonZeroUsize>,
    /// Continue a run from a checkpoint folder, or from the newest checkpoint of a run folder.
    /// From the newest checkpoint the run continues in its folder; from an older one a new run
    /// folder is forked with the history up to that checkpoint (see --truncate).
    #[arg(long, value_name = "PATH")]
    pub resume: Option<PathBuf>,
    /// With --resume of an older checkpoint: rewind its run folder to it instead of forking,
    /// deleting the later results, TensorBoard events and checkpoints.
    #[arg(long, requires = "resume")]
    pub truncate: bool,
    /// Print no per-iteration progress lines.
    #[arg(long)]
    pub quiet: bool,
    /// Print a final JSON summary line (what `bench-cartpole` reads).
    #[arg(long)]
    pub summary_json: bool,
    /// Account every thread's wall time by activity (env stepping, inference, fragment and
    /// batch building, queue waits, learner gradient and optimizer, weight copies, the driver
    /// loop) and its CPU time, plus each core's utilisation: written to RUN/profile.json,
    /// printed as a table, and added to the --summary-json line.
    #[arg(long)]
    pub profile: bool,
    /// Serve env runners in other processes or on other hosts on HOST:PORT (e.g.
    /// 0.0.0.0:50051): `num_env_runners` then counts the `impala env-runner --connect`
    /// processes to wait for (up to `env_runner_connect_timeout_s`).
    #[arg(long, value_name = "HOST:PORT", requires = "token_file")]
    pub listen: Option<String>,
    /// The file holding the shared secret remote env runners must present (e.g. made with
    /// `openssl rand -hex 32 > token`).
    #[arg(long, value_name = "FILE", requires = "listen")]
    pub token_file: Option<PathBuf>,
    /// Serve TLS with this certificate chain (PEM), with --tls-key.
    #[arg(long, value_name = "PEM", requires_all = ["tls_key", "listen"])]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

/// The `--stop-*` options of `impala train`, shared with `impala tune` (which passes them on
/// to every trial's `impala train`).
#[derive(Debug, Clone, Args, Default, PartialEq)]
pub struct StopArgs {
    /// Stop once episode_return_mean (over the last 100 episodes) reaches this. With no --stop-*
    /// option at all, training stops at the env's reward_threshold (solved; CartPole-v1: 475).
    #[arg(long, allow_negative_numbers = true, value_parser = finite)]
    pub stop_reward: Option<f64>,
    /// Stop once this many env steps were sampled (at least 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub stop_timesteps: Option<u64>,
    /// Stop after this many training iterations (at least 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub stop_iters: Option<u64>,
    /// Stop after this many seconds of training (a positive number, at most 1e9).
    #[arg(long, value_parser = seconds)]
    pub stop_time: Option<f64>,
}

impl StopArgs {
    /// The criteria as given (all `None` when no --stop-* option was).
    pub fn criteria(&self) -> StopCriteria {
        StopCriteria {
            episode_return_mean: self.stop_reward,
            timesteps_total: self.stop_timesteps,
            training_iteration: self.stop_iters,
            time_total_s: self.stop_time,
        }
    }
}

/// `impala env-runner`.
#[derive(Debug, Clone, Args)]
pub struct EnvRunnerArgs {
    /// The driver's HOST:PORT (its `impala train --listen`).
    #[arg(long, value_name = "HOST:PORT")]
    pub connect: String,
    /// The file holding the driver's shared secret.
    #[arg(long, value_name = "FILE")]
    pub token_file: PathBuf,
    /// Connect with TLS, trusting the driver's certificate by this CA certificate (PEM).
    #[arg(long, value_name = "PEM")]
    pub tls_ca: Option<PathBuf>,
    /// The name to check the driver's certificate for (default: the host of --connect).
    #[arg(long, value_name = "NAME", requires = "tls_ca")]
    pub tls_domain: Option<String>,
    /// Refuse to serve a driver that trains another env.
    #[arg(long, value_name = "ENV")]
    pub expect_env: Option<String>,
    /// Seconds to keep trying to reach the driver (at start and after losing it) before
    /// exiting with an error.
    #[arg(long, default_value = "60", value_name = "SECONDS", value_parser = duration)]
    pub reconnect_timeout_s: Duration,
    /// Log level (`error`, `warn`, `info`, `debug`, `trace`).
    #[arg(long, default_value = "info", value_parser = |s: &str| s.parse::<LogLevel>())]
    pub log_level: LogLevel,
}

/// `impala tune`.
#[derive(Debug, Clone, Args)]
#[command(mut_arg("config", |a| a.required(true).help(
    "Config file (.toml, .yaml, .yml or .json) with RLlib's option names, where any value may be \
     a search space: {grid_search = [a, b]} (every value) or {choice = [a, b]} (one drawn per \
     trial); see docs/TUNING.md"
)))]
pub struct TuneArgs {
    /// The config file with `grid_search`/`choice` values (required), plus --env, --seed and
    /// --set, which apply to every trial after the expansion.
    #[command(flatten)]
    pub source: SourceArgs,
    /// When every trial stops (passed on to each trial's `impala train`).
    #[command(flatten)]
    pub stop: StopArgs,
    /// Repeat the grid this many times, drawing every `choice` anew for each trial (Tune's
    /// `TuneConfig(num_samples=N)`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub num_samples: u64,
    /// The seed of the `choice` draws: the same file, --num-samples and seed give the same trials.
    #[arg(long, default_value_t = 0)]
    pub search_seed: u64,
    /// The result key that ranks the trials (result.json's names, nested keys joined with `/`,
    /// e.g. `evaluation/episode_return_mean`), read from each trial's last result. Each trial
    /// also keeps its best checkpoint by it.
    #[arg(long, default_value = "episode_return_mean", value_name = "KEY")]
    pub metric: String,
    /// Whether a higher (`max`) or lower (`min`) --metric is better.
    #[arg(long, default_value = "max", value_parser = score_order())]
    pub mode: ScoreOrder,
    /// The CPUs trials may use at once: a trial needs its config's resource request
    /// (`num_cpus_for_main_process` + aggregation workers + env runners x
    /// `num_cpus_per_env_runner`), and trials start while they fit (default: the cores of this
    /// machine). A trial that alone needs more runs by itself.
    #[arg(long, value_parser = positive)]
    pub cpus: Option<f64>,
    /// At most this many trials at once, whatever --cpus allows (Tune's `max_concurrent_trials`).
    #[arg(long, value_name = "N")]
    pub max_concurrent: Option<NonZeroUsize>,
    /// The folder that holds experiment folders.
    #[arg(long, default_value = "impala_results", value_name = "DIR")]
    pub output_dir: PathBuf,
    /// The experiment folder's name (default: `tune_IMPALA_<env>_<UTC date and time>`); it
    /// must be new or empty.
    #[arg(long)]
    pub name: Option<String>,
    /// Print the trials (name, parameters, CPUs) and stop: nothing is run or written.
    #[arg(long)]
    pub dry_run: bool,
}

/// The stability part of `bench-cartpole` (flattened into [`BenchArgs`]). Off unless
/// `--stay-s` or `--stay-steps` is given.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct StabilityArgs {
    /// Train on after first reaching --stop-reward: watch episode_return_mean for this many
    /// seconds of training (or --stay-steps env steps, whichever comes first).
    #[arg(long, value_name = "SECONDS", value_parser = seconds)]
    pub stay_s: Option<f64>,
    /// Watch this many env steps after first reaching --stop-reward (or --stay-s seconds,
    /// whichever comes first).
    #[arg(long, value_name = "STEPS", value_parser = clap::value_parser!(u64).range(1..))]
    pub stay_steps: Option<u64>,
    /// A seed stayed solved when episode_return_mean never fell below this in the window
    /// (default: --stop-reward).
    #[arg(long, value_name = "RETURN", allow_negative_numbers = true)]
    pub stay_min: Option<f64>,
    /// Greedy evaluation episodes of each seed's final checkpoint (0: no evaluation).
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub eval_episodes: usize,
    /// A seed passes only when its final checkpoint's evaluation reaches this too.
    #[arg(long, value_name = "RETURN", allow_negative_numbers = true)]
    pub eval_min: Option<f64>,
    /// Keep each seed's run folder here (`DIR/seedS`), e.g. for `impala plot`; by default they
    /// go to a temporary folder that is removed at the end.
    #[arg(long, value_name = "DIR")]
    pub runs_dir: Option<PathBuf>,
}

/// `--num-to-keep`: a count, or `None` for all.
fn num_to_keep(s: &str) -> Result<Option<NonZeroUsize>, String> {
    if s == "all" {
        return Ok(None);
    }
    match s.parse::<usize>() {
        Ok(n) => NonZeroUsize::new(n).map(Some).ok_or_else(|| {
            "keep at least 1 (the final and best are kept besides), or `all`".into()
        }),
        Err(_) => Err("expected a positive number or `all`".into()),
    }
}

/// `max` or `min`.
fn score_order() -> impl TypedValueParser<Value = ScoreOrder> {
    PossibleValuesParser::new(["max", "min"]).try_map(|s| s.parse::<ScoreOrder>())
}

/// A finite number (`nan` and `inf` never stop a run).
fn finite(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    v.is_finite().then_some(v).ok_or_else(|| "expected a finite number".into())
}

/// A finite positive number: every positive option (seconds, minutes, CPUs).
fn positive(s: &str) -> Result<f64, String> {
    let v = finite(s)?;
    (v > 0.0).then_some(v).ok_or_else(|| "expected a positive number".into())
}

/// A positive number of seconds, at most `MAX_SECONDS` (1e9, about 31 years): every option in
/// seconds, as the config's are.
fn seconds(s: &str) -> Result<f64, String> {
    let v = positive(s)?;
    (v <= MAX_SECONDS)
        .then_some(v)
        .ok_or_else(|| format!("expected at most {MAX_SECONDS:e} seconds (about 31 years)"))
}

/// [`seconds`] as a [`Duration`].
fn duration(s: &str) -> Result<Duration, String> {
    Duration::try_from_secs_f64(seconds(s)?).map_err(|e| e.to_string())
}

/// `impala evaluate`.
#[derive(Debug, Clone, Args)]
pub struct EvaluateArgs {
    /// A checkpoint folder, or a run folder (its newest checkpoint is used).
    #[arg(long, value_name = "PATH")]
    pub checkpoint: PathBuf,
    /// Episodes to run (1 to 1,000,000: `MAX_EVALUATION_EPISODES`).
    #[arg(
        long,
        default_value_t = 10,
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_EVALUATION_EPISODES as u64)
    )]
    pub episodes: usize,
    /// Sample actions instead of acting greedily.
    #[arg(long)]
    pub explore: bool,
    /// Write one MP4 per episode into DIR (`episode-000-return-<R>.mp4`), rendered by the
    /// env's Gymnasium twin; needs the `impala_rs` Python package with imageio-ffmpeg in the
    /// interpreter IMPALA_PYTHON names (`pip install "impala-rs[video]"`).
    #[arg(long, value_name = "DIR")]
    pub video: Option<PathBuf>,
}

/// `impala export`.
#[derive(Debug, Clone, Args)]
pub struct ExportArgs {
    /// A checkpoint folder, or a run folder (its newest checkpoint is used).
    pub checkpoint: PathBuf,
    /// The file to write.
    pub out: PathBuf,
    /// The module format.
    #[arg(long, default_value = "torchscript", value_parser = ["torchscript"])]
    pub format: String,
}

/// `impala config`.
#[derive(Debug, Clone, Args)]
pub struct ConfigArgs {
    /// The config.
    #[command(flatten)]
    pub source: SourceArgs,
    /// Output format.
    #[arg(long, default_value = "toml", value_parser = ["toml", "yaml", "json"])]
    pub format: String,
}

/// `impala bench-cartpole`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Seeds 0..N, one training process each.
    #[arg(long, default_value_t = 3)]
    pub seeds: u64,
    /// The episode_return_mean to reach.
    #[arg(long, default_value_t = 450.0, allow_negative_numbers = true, value_parser = finite)]
    pub stop_reward: f64,
    /// Give up on a seed after this many seconds of training.
    #[arg(long, default_value_t = 300.0, value_parser = seconds)]
    pub stop_time: f64,
    /// Config file (default: the embedded CartPole-v1 example).
    pub config: Option<PathBuf>,
    /// Override options for every seed.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// The stability benchmark (off unless --stay-s or --stay-steps is given).
    #[command(flatten)]
    pub stability: StabilityArgs,
    /// Train every seed with `--profile`: each seed's JSON line holds its time breakdown.
    #[arg(long)]
    pub profile: bool,
}

/// `impala bench-memory`.
#[derive(Debug, Clone, Args)]
pub struct MemoryArgs {
    /// The config (`min_time_s_per_iteration=0.01` is applied first; --set may change it).
    #[command(flatten)]
    pub source: SourceArgs,
    /// How long to train, in minutes.
    #[arg(long, default_value_t = 30.0, value_parser = positive)]
    pub minutes: f64,
    /// Growth is measured from this many seconds in (allocator and libtorch warm-up).
    #[arg(long, default_value_t = 60.0, value_parser = finite)]
    pub warmup_s: f64,
    /// Seconds between resident-memory samples.
    #[arg(long, default_value_t = 10.0, value_parser = seconds)]
    pub sample_every_s: f64,
    /// Save (and prune) checkpoints every N iterations.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub checkpoint_every: u64,
    /// The run folder (default: a temporary folder, removed at the end).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Keep the temporary run folder.
    #[arg(long)]
    pub keep_run_dir: bool,
}
