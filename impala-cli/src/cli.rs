//! The `impala` command line: `train`, `tune`, `env-runner`, `evaluate`, `config`, `envs` and
//! the benches. Argument parsing, signals and printing only; the algorithm is the `impala`
//! library.

use std::ffi::OsString;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use impala::checkpoint::{find_checkpoint, read_checkpoint};
use impala::config::{ImpalaConfig, ValidatedConfig};
use impala::remote::{
    read_pem, serve_env_runner, ClientSettings, ClientTls, RunnerServer, ServerSettings, ServerTls,
    Token,
};
use impala::run::{
    BestCheckpoint, CheckpointPolicy, Opened, RunDir, RunEvent, RunOptions, RunTarget, ScoreOrder,
};
use impala::{peak_rss_mib, Impala, ImpalaError, StopCriteria};

use crate::error::CliError;
use crate::signals::Interrupts;

/// The config `impala train` uses when no file is given: the tuned CartPole-v1 example.
pub(crate) const DEFAULT_CONFIG_TOML: &str = include_str!("../../examples/cartpole-impala.toml");

/// The tuned example configs, embedded: with no file, `--env` picks its env's example (and any
/// other env starts from the CartPole-v1 one).
const EXAMPLE_CONFIGS: [(&str, &str); 3] = [
    ("CartPole-v1", DEFAULT_CONFIG_TOML),
    ("Acrobot-v1", include_str!("../../examples/acrobot-impala.toml")),
    ("Pendulum-v1", include_str!("../../examples/pendulum-impala.toml")),
];

/// IMPALA (V-trace actor-learner) reinforcement learning, faithful to Ray RLlib's `Impala`.
#[derive(Debug, Parser)]
#[command(name = "impala", version, about, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Train until a stop criterion is met, writing results and checkpoints to a run folder.
    Train(TrainArgs),
    /// Run episodes with a checkpoint's policy and print their returns.
    Evaluate(EvaluateArgs),
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
    /// own CPU policy copy and streams fragments back. It reconnects when the driver goes away
    /// (exiting after --reconnect-timeout-s) and exits when the driver's run is over.
    EnvRunner(EnvRunnerArgs),
    /// Draw a run folder's episode_return_mean (and evaluation return) against env steps and
    /// training time into RUN/episode_return_mean.png.
    Plot(PlotArgs),
    /// Run a hyperparameter search without Ray: every trial of the config file's `grid_search`
    /// and `choice` values is an `impala train` process in its own run folder, as many at once
    /// as fit in --cpus; then a table of the trials sorted by --metric and the best checkpoint.
    Tune(crate::tune::TuneArgs),
}

/// Where the config comes from: a file and/or `--env`, then `--set` overrides.
#[derive(Debug, Clone, Args, Default)]
pub struct ConfigSource {
    /// Config file (.toml, .yaml, .yml or .json) with RLlib's option names. Without one, the
    /// embedded tuned example for --env is used (examples/*-impala.toml; CartPole-v1's for
    /// envs without one).
    pub config: Option<PathBuf>,
    /// The environment id (overrides the file's `env`).
    #[arg(long)]
    pub env: Option<String>,
    /// Override one option, e.g. `--set lr=0.001 --set model.fcnet_hiddens=[64,64]`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// Seed for every random number generator (overrides the config's `seed`).
    #[arg(long)]
    pub seed: Option<u64>,
}

/// `impala train`.
#[derive(Debug, Clone, Args)]
pub struct TrainArgs {
    /// The config.
    #[command(flatten)]
    pub source: ConfigSource,
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
    #[arg(long, default_value = "max", value_parser = ["max", "min"])]
    pub checkpoint_score_order: String,
    /// Keep this many of the newest checkpoints (the final one is among them) plus the best by
    /// --checkpoint-score-attribute, or `all`. Tune keeps the N best instead; keeping the newest
    /// means a resume always finds where the run stopped.
    #[arg(long, default_value = "3", value_name = "N|all", value_parser = num_to_keep)]
    pub num_to_keep: NumToKeep,
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
    /// Stop after this many seconds of training (a positive number).
    #[arg(long, value_parser = positive)]
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
    #[arg(long, default_value_t = 60.0, value_parser = positive)]
    pub reconnect_timeout_s: f64,
    /// Log level (`error`, `warn`, `info`, `debug`, `trace`).
    #[arg(long, default_value = "info")]
    pub log_level: String,
}

/// The server remote env runners connect to (`train --listen`).
fn runner_server(
    args: &TrainArgs,
    listen: &str,
    config: &ValidatedConfig,
) -> anyhow::Result<Arc<RunnerServer>> {
    let token_file = args.token_file.as_deref().context("--listen needs --token-file")?;
    let mut settings = ServerSettings::new(listen, Token::from_file(token_file)?);
    settings.stall_timeout =
        Duration::try_from_secs_f64(config.sample_timeout_s).unwrap_or(Duration::MAX);
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        settings.tls = Some(ServerTls {
            cert_pem: read_pem("TLS certificate", cert)?,
            key_pem: read_pem("TLS key", key)?,
        });
    }
    Ok(Arc::new(RunnerServer::bind(settings)?))
}

/// `impala env-runner`.
fn env_runner(args: &EnvRunnerArgs) -> anyhow::Result<ExitCode> {
    crate::logging::init(&args.log_level);
    let mut settings = ClientSettings::new(&args.connect, Token::from_file(&args.token_file)?);
    settings.expect_env = args.expect_env.clone();
    settings.reconnect_timeout = Duration::from_secs_f64(args.reconnect_timeout_s);
    if let Some(ca) = &args.tls_ca {
        settings.tls = Some(ClientTls {
            ca_pem: read_pem("TLS CA certificate", ca)?,
            domain: args.tls_domain.clone(),
        });
    }
    let reason = serve_env_runner(&settings)?;
    println!("the driver's run is over ({reason}); exiting");
    Ok(ExitCode::SUCCESS)
}

/// `--num-to-keep`: a count, or `None` for all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NumToKeep(pub Option<NonZeroUsize>);

fn num_to_keep(s: &str) -> Result<NumToKeep, String> {
    if s == "all" {
        return Ok(NumToKeep(None));
    }
    match s.parse::<usize>() {
        Ok(n) => NonZeroUsize::new(n).map(|n| NumToKeep(Some(n))).ok_or_else(|| {
            "keep at least 1 (the final and best are kept besides), or `all`".into()
        }),
        Err(_) => Err("expected a positive number or `all`".into()),
    }
}

/// A finite number (`nan` and `inf` never stop a run).
fn finite(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err("expected a finite number".into())
    }
}

/// A finite positive number.
fn positive(s: &str) -> Result<f64, String> {
    let v = finite(s)?;
    if v > 0.0 {
        Ok(v)
    } else {
        Err("expected a positive number".into())
    }
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
        value_parser = clap::value_parser!(u64).range(1..=impala::config::MAX_EVALUATION_EPISODES as u64)
    )]
    pub episodes: u64,
    /// Sample actions instead of acting greedily.
    #[arg(long)]
    pub explore: bool,
}

/// `impala config`.
#[derive(Debug, Clone, Args)]
pub struct ConfigArgs {
    /// The config.
    #[command(flatten)]
    pub source: ConfigSource,
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
    #[arg(long, default_value_t = 300.0, value_parser = positive)]
    pub stop_time: f64,
    /// Config file (default: the embedded CartPole-v1 example).
    pub config: Option<PathBuf>,
    /// Override options for every seed.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// The stability benchmark (off unless --stay-s or --stay-steps is given).
    #[command(flatten)]
    pub stability: crate::bench::StabilityArgs,
    /// Train every seed with `--profile`: each seed's JSON line holds its time breakdown.
    #[arg(long)]
    pub profile: bool,
}

/// `impala plot`.
#[derive(Debug, Clone, Args)]
pub struct PlotArgs {
    /// A run folder (it holds result.json).
    pub run: PathBuf,
}

/// `impala bench-memory`.
#[derive(Debug, Clone, Args)]
pub struct MemoryArgs {
    /// The config (`min_time_s_per_iteration=0.01` is applied first; --set may change it).
    #[command(flatten)]
    pub source: ConfigSource,
    /// How long to train, in minutes.
    #[arg(long, default_value_t = 30.0, value_parser = positive)]
    pub minutes: f64,
    /// Growth is measured from this many seconds in (allocator and libtorch warm-up).
    #[arg(long, default_value_t = 60.0, value_parser = finite)]
    pub warmup_s: f64,
    /// Seconds between resident-memory samples.
    #[arg(long, default_value_t = 10.0, value_parser = positive)]
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

/// Parses `args` and runs the command. Errors are returned for `main` to print as one line.
pub(crate) fn run<I, T>(args: I) -> anyhow::Result<ExitCode>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // Help and --version print to stdout and succeed; usage errors print clap's message.
            let code = e.exit_code();
            e.print()?;
            return Ok(ExitCode::from(u8::try_from(code).unwrap_or(2)));
        }
    };
    match cli.command {
        Command::Train(args) => train(&args),
        Command::Evaluate(args) => evaluate(&args),
        Command::Config(args) => print_config(&args),
        Command::Envs => list_envs(),
        Command::BenchCartpole(args) => crate::bench::bench_cartpole(&args),
        Command::BenchMemory(args) => crate::soak::bench_memory(&args),
        Command::EnvRunner(args) => env_runner(&args),
        Command::Tune(args) => crate::tune::tune(&args),
        Command::Plot(args) => {
            println!("{}", crate::plot::plot_run(&args.run)?.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Loads the config from `source` (file or embedded default, `--env`, `--seed`, `--set`),
/// validates it and returns the validated config with its warnings.
pub(crate) fn load_config(source: &ConfigSource) -> anyhow::Result<(ValidatedConfig, Vec<String>)> {
    let loaded = match &source.config {
        Some(path) => ImpalaConfig::load(path)?,
        None => {
            let env = source.env.as_deref().unwrap_or("CartPole-v1");
            let text = EXAMPLE_CONFIGS
                .iter()
                .find(|(id, _)| *id == env)
                .map_or(DEFAULT_CONFIG_TOML, |(_, t)| t);
            ImpalaConfig::from_str_as(text, impala::config::ConfigFormat::Toml)
                .context("an embedded example config is invalid")?
        }
    };
    let warnings = loaded.warnings.iter().map(ToString::to_string).collect();
    apply_source(loaded.config, source, warnings)
}

/// Applies `--env`, `--seed` and `--set` of `source` to `config`, then validates it.
pub(crate) fn apply_source(
    mut config: ImpalaConfig,
    source: &ConfigSource,
    mut warnings: Vec<String>,
) -> anyhow::Result<(ValidatedConfig, Vec<String>)> {
    if let Some(env) = &source.env {
        config.env.clone_from(env);
    }
    if let Some(seed) = source.seed {
        config.seed = Some(seed);
    }
    for text in &source.overrides {
        warnings.extend(config.apply_override(text)?.iter().map(ToString::to_string));
    }
    let config = config.validate()?;
    warnings.extend(config.warnings().iter().map(ToString::to_string));
    Ok((config, warnings))
}

fn print_warnings(warnings: &[String]) {
    for w in warnings {
        eprintln!("warning: {w}");
    }
}

fn print_config(args: &ConfigArgs) -> anyhow::Result<ExitCode> {
    let (config, mut warnings) = load_config(&args.source)?;
    warnings.extend(impala::check_environment(&config)?);
    let format = match args.format.as_str() {
        "yaml" => impala::config::ConfigFormat::Yaml,
        "json" => impala::config::ConfigFormat::Json,
        _ => impala::config::ConfigFormat::Toml,
    };
    print!("{}", config.to_string_as(format)?);
    // The learner's device mapping (num_gpus, or num_learners x num_gpus_per_learner), as a
    // comment in every format but JSON, on stderr for JSON so stdout stays parseable.
    let plan = format!("learner: {}", config.learner_plan());
    match format {
        impala::config::ConfigFormat::Json => eprintln!("{plan}"),
        _ => println!("# {plan}"),
    }
    print_warnings(&warnings);
    Ok(ExitCode::SUCCESS)
}

fn list_envs() -> anyhow::Result<ExitCode> {
    for info in impala::envs::list()? {
        let spec = &info.spec;
        let threshold = info.reward_threshold.map_or_else(|| "-".to_string(), |t| t.to_string());
        println!(
            "{:<16} obs {:<28} actions {:<18} max_episode_steps {:<5} reward_threshold {:<6} env_config keys: {}",
            spec.id,
            format!("{:?}", spec.observation_space.shape()),
            spec.action_space.to_string(),
            spec.max_episode_steps.map_or_else(|| "-".to_string(), |n| n.to_string()),
            threshold,
            info.config_keys.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The folder of a new run without --run-dir: `impala_results/IMPALA_<env>_<date>` (Tune's
/// `~/ray_results/IMPALA_<env>_<date>` naming, relative to the working folder so it is easy to
/// find), to the microsecond and never shared.
fn default_target(env: &str) -> RunTarget {
    let env: String = env.chars().map(|c| if matches!(c, '/' | '\\') { '_' } else { c }).collect();
    RunTarget::Unique { parent: PathBuf::from("impala_results"), prefix: format!("IMPALA_{env}") }
}

fn train(args: &TrainArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    // The config: from the checkpoint when resuming (plus --set/--seed), else from the source.
    let checkpoint = args.resume.as_deref().map(find_checkpoint).transpose()?;
    let (config, mut warnings) = match (&checkpoint, &args.source.config) {
        (Some(_), Some(file)) => anyhow::bail!(CliError::InvalidArgument {
            what: "config file",
            value: file.display().to_string(),
            reason: "--resume continues with the checkpoint's config; drop the file and change \
                     options with --set"
                .into(),
        }),
        (Some(ckpt), None) => {
            let (_, saved) = read_checkpoint(ckpt)?;
            apply_source(saved, &args.source, Vec::new())?
        }
        (None, _) => load_config(&args.source)?,
    };
    crate::logging::init(&config.log_level);
    warnings.extend(impala::check_environment(&config)?);
    print_warnings(&warnings);
    let mut stop = args.stop.criteria();
    if stop == StopCriteria::default() {
        // No criterion given: train until solved, i.e. Gymnasium's `reward_threshold` of the env.
        stop.episode_return_mean = impala::envs::reward_threshold(&config.env);
    }
    let policy = CheckpointPolicy {
        score_attribute: args.checkpoint_score_attribute.clone(),
        score_order: if args.checkpoint_score_order == "min" {
            ScoreOrder::Min
        } else {
            ScoreOrder::Max
        },
        num_to_keep: args.num_to_keep.0,
    };
    policy.check()?;
    let target = match (&checkpoint, &args.run_dir) {
        (Some(ckpt), run_dir) => RunTarget::Resume {
            checkpoint: ckpt.clone(),
            run_dir: run_dir.clone(),
            truncate: args.truncate,
        },
        (None, Some(dir)) => RunTarget::New(dir.clone()),
        (None, None) => default_target(&config.env),
    };

    // From here on SIGINT/SIGTERM finish the iteration and save instead of killing the process.
    let interrupts = Interrupts::install().context("cannot listen for SIGINT and SIGTERM")?;
    let (env, seed) = (config.env.clone(), config.seed);
    if args.profile {
        impala::profile::enable();
    }
    let server =
        args.listen.as_ref().map(|listen| runner_server(args, listen, &config)).transpose()?;
    let mut builder = Impala::builder(config);
    if let Some(server) = &server {
        builder = builder.remote_env_runners(Arc::clone(server));
        if !args.quiet {
            println!("serving env runners on {}", server.local_addr());
        }
    }
    let mut algo = builder.build()?;
    if let Some(ckpt) = &checkpoint {
        algo.restore(ckpt)?;
    }
    algo.set_interrupt_flag(interrupts.flag());
    // Restored first: a checkpoint that does not load changes no run folder.
    let run_dir = RunDir::open(&target)?;
    print_opened(&run_dir);
    if !args.quiet {
        println!(
            "training {env} in {} (from {}); stop: {}",
            run_dir.path().display(),
            checkpoint.as_ref().map_or_else(|| "scratch".to_string(), |c| c.display().to_string()),
            describe_stop(&stop)
        );
    }
    let options = RunOptions { stop, checkpoint_every: args.checkpoint_every, checkpoints: policy };
    let interrupt = interrupts.flag();
    let summary = impala::run::run(&mut algo, &run_dir, &options, &interrupt, |event| {
        if args.quiet {
            return;
        }
        match event {
            RunEvent::Result(result) => println!("{}", result.progress_line()),
            RunEvent::Checkpoint { path, score, best } => {
                println!("checkpoint saved: {}{}", path.display(), describe_score(score, best));
            }
            _ => {}
        }
    })?;
    // Read while every thread still runs (their CPU times come from /proc).
    let profile = args.profile.then(impala::profile::report);
    if let Some(server) = &server {
        // An interrupted run may be resumed: its runners keep trying to reconnect.
        if !summary.interrupted {
            server.finish(format!("the run stopped: {}", summary.stop_reason));
        }
    }
    algo.stop()?;
    let run_path = run_dir.path().to_path_buf();
    if let Some(profile) = &profile {
        let path = run_path.join("profile.json");
        std::fs::write(&path, serde_json::to_string_pretty(profile)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
        if !args.quiet {
            print!("{}", describe_profile(profile));
            println!("profile: {}", path.display());
        }
    }
    drop(run_dir);
    match crate::plot::plot_run(&run_path) {
        Ok(plot) if !args.quiet => println!("plot: {}", plot.display()),
        Ok(_) => {}
        Err(e) => eprintln!("warning: no plot: {}", impala::one_line(e.as_ref())),
    }
    let stop_reason = if summary.interrupted {
        format!("interrupted ({})", interrupts.received_name().unwrap_or("signal"))
    } else {
        summary.stop_reason
    };
    let result = &summary.last;
    let wall_s = started.elapsed().as_secs_f64();
    if !args.quiet {
        let best = summary.best.as_ref().map_or_else(String::new, |b| {
            format!("; best checkpoint {} ({} {})", b.path.display(), b.attribute, b.score)
        });
        println!(
            "stopped: {stop_reason}; episode_return_mean {:.2} after {} env steps in {:.1}s; \
             checkpoint {}{best}",
            result.episode_return_mean,
            result.num_env_steps_sampled,
            result.time_total_s,
            summary.checkpoint.display()
        );
    }
    if args.summary_json {
        let summary = serde_json::json!({
            "seed": seed,
            "stop_reason": stop_reason,
            "reached_stop_reward": stop.episode_return_mean.is_some_and(|r| result.episode_return_mean >= r),
            "wall_s": wall_s,
            "time_total_s": result.time_total_s,
            "training_iteration": result.training_iteration,
            "num_env_steps_sampled": result.num_env_steps_sampled,
            "num_env_steps_trained": result.num_env_steps_trained,
            "episode_return_mean": result.episode_return_mean,
            "peak_rss_mib": peak_rss_mib(),
            "checkpoint": summary.checkpoint,
            "best_checkpoint": summary.best.as_ref().map(|b| &b.path),
            "best_checkpoint_score": summary.best.as_ref().map(|b| b.score),
            "profile": profile,
        });
        println!("{summary}");
    }
    // 128 + the signal's number, as a shell reports a process that the signal ended: a job
    // scheduler must not take an interrupted run for a finished one.
    Ok(interrupts.exit_code().unwrap_or(ExitCode::SUCCESS))
}

/// ` (episode_return_mean 21.5; best checkpoint_000004 at 30.25)`.
fn describe_score(score: Option<f64>, best: Option<&BestCheckpoint>) -> String {
    let Some(best) = best else {
        return String::new();
    };
    let name = best.path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let own = score.map_or_else(|| "no score yet".to_string(), |s| format!("{s}"));
    format!(" ({} {own}; best {name} at {})", best.attribute, best.score)
}

/// Says what opening the run folder did besides starting: a fork, a rewind, dropped results.
fn print_opened(dir: &RunDir) {
    let path = dir.path().display();
    let range = |(a, b): (u64, u64)| if a == b { format!("{a}") } else { format!("{a}-{b}") };
    match dir.opened() {
        Opened::Continued { iteration, dropped: Some(dropped) } => eprintln!(
            "warning: iteration(s) {} of `{path}` came after its newest checkpoint \
             (iteration {iteration}); their results are removed and they are trained again",
            range(*dropped)
        ),
        Opened::Forked { checkpoint, source, iteration, source_last } => println!(
            "forked a new run folder {path} from {}: it holds the history up to iteration \
             {iteration}; {} is unchanged{}",
            checkpoint.display(),
            source.display(),
            source_last.map_or_else(String::new, |l| format!(
                " and keeps iterations to {l} (--truncate rewinds it to {iteration} instead)"
            ))
        ),
        Opened::Truncated { iteration, dropped, removed_checkpoints } => println!(
            "rewound {path} to iteration {iteration} (--truncate): removed the results of \
             iteration(s) {} and checkpoint(s) {}",
            dropped.map_or_else(|| "none".to_string(), range),
            if removed_checkpoints.is_empty() {
                "none".to_string()
            } else {
                removed_checkpoints.join(", ")
            }
        ),
        _ => {}
    }
}

fn describe_stop(stop: &StopCriteria) -> String {
    let mut parts = Vec::new();
    if let Some(r) = stop.episode_return_mean {
        parts.push(format!("episode_return_mean >= {r}"));
    }
    if let Some(t) = stop.timesteps_total {
        parts.push(format!("timesteps_total >= {t}"));
    }
    if let Some(i) = stop.training_iteration {
        parts.push(format!("training_iteration >= {i}"));
    }
    if let Some(s) = stop.time_total_s {
        parts.push(format!("time_total_s >= {s}"));
    }
    if parts.is_empty() {
        "never (Ctrl-C or SIGTERM saves and stops)".into()
    } else {
        parts.join(" or ")
    }
}

fn evaluate(args: &EvaluateArgs) -> anyhow::Result<ExitCode> {
    evaluate_checkpoint(args).map_err(|e| match e.downcast::<ImpalaError>() {
        // The library's checkpoint errors suggest resuming from another checkpoint; here the
        // fix is to evaluate another one.
        Ok(ImpalaError::CorruptCheckpoint { path, reason }) => {
            CliError::UnreadableCheckpoint { path, reason }.into()
        }
        Ok(ImpalaError::IncompatibleCheckpoint { path, reason, .. }) => {
            CliError::IncompatibleCheckpoint { path, reason }.into()
        }
        Ok(other) => other.into(),
        Err(e) => e,
    })
}

fn evaluate_checkpoint(args: &EvaluateArgs) -> anyhow::Result<ExitCode> {
    // Only what evaluation needs: the env and CPU policies with the checkpoint's weights (no
    // learner thread, optimizer state or training runners), its files verified.
    let episodes = usize::try_from(args.episodes).unwrap_or(usize::MAX);
    let eval = impala::evaluate_checkpoint(&args.checkpoint, episodes, args.explore)?;
    println!("{}", serde_json::to_string(&eval)?);
    Ok(ExitCode::SUCCESS)
}

/// A `--profile` report as a table: per thread its wall and CPU time and the shares of its
/// activities, largest first.
fn describe_profile(profile: &impala::profile::Report) -> String {
    let cores: Vec<String> =
        profile.core_utilisation.iter().map(|u| format!("{:.0}%", u * 100.0)).collect();
    let mut out = format!(
        "profile over {:.1} s (cores busy: {}):\n",
        profile.wall_s,
        if cores.is_empty() { "unknown".to_string() } else { cores.join(" ") }
    );
    for t in &profile.threads {
        let mut shares: Vec<(&String, &f64)> =
            t.shares.iter().filter(|(_, &s)| s >= 0.005).collect();
        shares.sort_by(|a, b| b.1.total_cmp(a.1));
        let shares: Vec<String> =
            shares.iter().map(|(k, s)| format!("{k} {:.0}%", *s * 100.0)).collect();
        let cpu = t.cpu_s.map_or_else(|| "?".to_string(), |c| format!("{c:.1}"));
        out += &format!(
            "  {:<22} wall {:>6.1} s  cpu {:>6} s  {}\n",
            t.name,
            t.wall_s,
            cpu,
            shares.join(", ")
        );
    }
    out
}
