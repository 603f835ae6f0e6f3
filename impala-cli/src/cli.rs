//! The `impala` command line: `train`, `evaluate`, `config`, `envs` and `bench-cartpole`.
//! Argument parsing, signals and printing only; the algorithm is the `impala` library.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use impala::checkpoint::{find_checkpoint, read_checkpoint};
use impala::config::{ImpalaConfig, ValidatedConfig};
use impala::run::{default_run_dir, RunEvent, RunOptions};
use impala::{peak_rss_mib, Impala, StopCriteria};

use crate::error::CliError;

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
    /// Stop once episode_return_mean (over the last 100 episodes) reaches this. With no --stop-*
    /// option at all, training stops at the env's reward_threshold (solved; CartPole-v1: 475).
    #[arg(long, allow_negative_numbers = true)]
    pub stop_reward: Option<f64>,
    /// Stop once this many env steps were sampled.
    #[arg(long)]
    pub stop_timesteps: Option<u64>,
    /// Stop after this many training iterations.
    #[arg(long)]
    pub stop_iters: Option<u64>,
    /// Stop after this many seconds of training.
    #[arg(long)]
    pub stop_time: Option<f64>,
    /// The run folder for results and checkpoints (default:
    /// `impala_results/IMPALA_<env>_<date>`; with --resume, the checkpoint's run folder).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Save a checkpoint every N iterations (one is always saved at the end); 0 = only at the end.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub checkpoint_every: u64,
    /// Continue a run from a checkpoint folder, or from the newest checkpoint of a run folder.
    #[arg(long, value_name = "PATH")]
    pub resume: Option<PathBuf>,
    /// Print no per-iteration progress lines.
    #[arg(long)]
    pub quiet: bool,
    /// Print a final JSON summary line (what `bench-cartpole` reads).
    #[arg(long)]
    pub summary_json: bool,
}

/// `impala evaluate`.
#[derive(Debug, Clone, Args)]
pub struct EvaluateArgs {
    /// A checkpoint folder, or a run folder (its newest checkpoint is used).
    #[arg(long, value_name = "PATH")]
    pub checkpoint: PathBuf,
    /// Episodes to run.
    #[arg(long, default_value_t = 10)]
    pub episodes: usize,
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
    #[arg(long, default_value_t = 450.0)]
    pub stop_reward: f64,
    /// Give up on a seed after this many seconds of training.
    #[arg(long, default_value_t = 300.0)]
    pub stop_time: f64,
    /// Config file (default: the embedded CartPole-v1 example).
    pub config: Option<PathBuf>,
    /// Override options for every seed.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
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
    }
}

/// The error and its causes on one line (`problem: cause: cause`), skipping causes already
/// spelled out by the message before them, and folding multi-line lists into `; `.
pub(crate) fn one_line(err: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in err.chain() {
        let full = cause.to_string();
        let lines: Vec<&str> = full.split('\n').map(str::trim).filter(|s| !s.is_empty()).collect();
        let text = lines.join("; ").replace(":;", ":");
        if parts.last().is_some_and(|prev| prev.contains(&text)) {
            continue;
        }
        parts.push(text);
    }
    parts.join(": ")
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
fn apply_source(
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

/// Ctrl-C handling: the first press asks the loop to finish the iteration, save and exit; a
/// second press exits at once.
fn install_interrupt_handler() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let presses = AtomicUsize::new(0);
    let handler_flag = Arc::clone(&flag);
    let installed = ctrlc::set_handler(move || {
        if presses.fetch_add(1, Ordering::SeqCst) == 0 {
            eprintln!("\ninterrupted: finishing this iteration and saving a checkpoint (Ctrl-C again to quit now)");
            handler_flag.store(true, Ordering::SeqCst);
        } else {
            std::process::exit(130);
        }
    });
    if let Err(e) = installed {
        eprintln!("warning: Ctrl-C will not save a checkpoint ({e})");
    }
    flag
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
    let mut stop = StopCriteria {
        episode_return_mean: args.stop_reward,
        timesteps_total: args.stop_timesteps,
        training_iteration: args.stop_iters,
        time_total_s: args.stop_time,
    };
    if stop == StopCriteria::default() {
        // No criterion given: train until solved, i.e. Gymnasium's `reward_threshold` of the env.
        stop.episode_return_mean = impala::envs::reward_threshold(&config.env);
    }

    let run_dir = match (&args.run_dir, &checkpoint) {
        (Some(dir), _) => dir.clone(),
        (None, Some(ckpt)) => ckpt.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf),
        (None, None) => default_run_dir(&config.env),
    };
    let (env, seed) = (config.env.clone(), config.seed);
    let mut algo = Impala::new(config)?;
    if let Some(ckpt) = &checkpoint {
        algo.restore(ckpt)?;
    }
    let interrupted = install_interrupt_handler();
    algo.set_interrupt_flag(Arc::clone(&interrupted));
    if !args.quiet {
        println!(
            "training {env} in {} (from {}); stop: {}",
            run_dir.display(),
            checkpoint.as_ref().map_or_else(|| "scratch".to_string(), |c| c.display().to_string()),
            describe_stop(&stop)
        );
    }
    let options = RunOptions {
        run_dir,
        stop,
        checkpoint_every: args.checkpoint_every,
        resumed: checkpoint.is_some(),
    };
    let summary = impala::run::run(&mut algo, &options, &interrupted, |event| {
        if args.quiet {
            return;
        }
        match event {
            RunEvent::Result(result) => println!("{}", result.progress_line()),
            RunEvent::Checkpoint(path) => println!("checkpoint saved: {}", path.display()),
        }
    })?;
    algo.stop()?;
    let stop_reason =
        if summary.interrupted { "interrupted (Ctrl-C)".to_string() } else { summary.stop_reason };
    let result = &summary.last;
    let wall_s = started.elapsed().as_secs_f64();
    if !args.quiet {
        println!(
            "stopped: {stop_reason}; episode_return_mean {:.2} after {} env steps in {:.1}s; \
             checkpoint {}",
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
        });
        println!("{summary}");
    }
    Ok(ExitCode::SUCCESS)
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
        "never (Ctrl-C saves and stops)".into()
    } else {
        parts.join(" or ")
    }
}

fn evaluate(args: &EvaluateArgs) -> anyhow::Result<ExitCode> {
    let ckpt = find_checkpoint(&args.checkpoint)?;
    let (_, mut config) = read_checkpoint(&ckpt)?;
    config.evaluation_duration = args.episodes.max(1);
    config.evaluation_duration_unit = impala::config::DurationUnit::Episodes;
    config.evaluation_explore = args.explore;
    // Evaluation needs no runners or learner thread beyond what restoring weights requires.
    config.num_env_runners = 0;
    let config = config.validate()?;
    impala::check_environment(&config)?;
    let mut algo = Impala::new(config)?;
    algo.restore(&ckpt)?;
    let eval = algo.evaluate()?;
    algo.stop()?;
    println!("{}", serde_json::to_string(&eval)?);
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_joins_causes_without_repeats() {
        let inner = anyhow::anyhow!("disk full");
        let err = inner.context("could not write `x`: disk full").context("saving failed");
        assert_eq!(one_line(&err), "saving failed: could not write `x`: disk full");
        let multi = anyhow::anyhow!("2 problem(s) in the config:\n  - a\n  - b");
        assert_eq!(one_line(&multi), "2 problem(s) in the config: - a; - b");
    }
}
