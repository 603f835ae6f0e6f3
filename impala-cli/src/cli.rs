//! The commands that train or serve: `train`, `evaluate`, `config`, `envs` and `env-runner`,
//! over the `impala` library; the config every command starts from.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use impala::checkpoint::{find_checkpoint, read_checkpoint};
use impala::config::{ConfigFormat, ValidatedConfig};
use impala::remote::{
    read_pem, serve_env_runner, ClientSettings, ClientTls, RunnerServer, ServerSettings, ServerTls,
    Token,
};
use impala::run::{CheckpointPolicy, Opened, RunDir, RunOptions, RunTarget};
use impala::{Impala, ImpalaError, StopCriteria};
use impala_tune::TrainSummary;

use crate::args::{ConfigArgs, EnvRunnerArgs, EvaluateArgs, TrainArgs};
use crate::error::CliError;
use crate::signals::Interrupts;

pub(crate) fn print_warnings(warnings: &[String]) {
    for w in warnings {
        eprintln!("warning: {w}");
    }
}

pub(crate) fn print_config(args: &ConfigArgs) -> anyhow::Result<ExitCode> {
    let (config, mut warnings) = args.source.source().load()?;
    warnings.extend(impala::check_environment(&config)?);
    let format = match args.format.as_str() {
        "yaml" => ConfigFormat::Yaml,
        "json" => ConfigFormat::Json,
        _ => ConfigFormat::Toml,
    };
    print!("{}", config.config().to_string_as(format)?);
    // The learner's device mapping (num_gpus, or num_learners x num_gpus_per_learner), as a
    // comment in every format but JSON, on stderr for JSON so stdout stays parseable.
    let plan = format!("learner: {}", config.config().learner_plan());
    match format {
        ConfigFormat::Json => eprintln!("{plan}"),
        _ => println!("# {plan}"),
    }
    print_warnings(&warnings);
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn list_envs() -> anyhow::Result<ExitCode> {
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

/// The server remote env runners connect to (`train --listen`).
fn runner_server(
    args: &TrainArgs,
    listen: &str,
    config: &ValidatedConfig,
) -> anyhow::Result<Arc<RunnerServer>> {
    let token_file = args.token_file.as_deref().context("--listen needs --token-file")?;
    let mut settings = ServerSettings::new(listen, Token::from_file(token_file)?);
    settings.stall_timeout =
        Duration::try_from_secs_f64(config.config().sample_timeout_s).unwrap_or(Duration::MAX);
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        settings.tls = Some(ServerTls {
            cert_pem: read_pem("TLS certificate", cert)?,
            key_pem: read_pem("TLS key", key)?,
        });
    }
    Ok(Arc::new(RunnerServer::bind(settings)?))
}

pub(crate) fn env_runner(args: &EnvRunnerArgs) -> anyhow::Result<ExitCode> {
    crate::logging::init(args.log_level);
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

pub(crate) fn train(args: &TrainArgs) -> anyhow::Result<ExitCode> {
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
        (Some(ckpt), None) => args.source.source().apply(read_checkpoint(ckpt)?.1, Vec::new())?,
        (None, _) => args.source.source().load()?,
    };
    crate::logging::init(config.log_level());
    warnings.extend(impala::check_environment(&config)?);
    print_warnings(&warnings);
    let mut stop = args.stop.criteria();
    if stop == StopCriteria::default() {
        // No criterion given: train until solved, i.e. Gymnasium's `reward_threshold` of the env.
        stop.episode_return_mean = impala::envs::reward_threshold(&config.config().env);
    }
    let policy = CheckpointPolicy {
        score_attribute: args.checkpoint_score_attribute.clone(),
        score_order: args.checkpoint_score_order,
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
        (None, None) => RunTarget::for_env(&config.config().env),
    };

    // From here on SIGINT/SIGTERM finish the iteration and save instead of killing the process.
    let interrupts = Interrupts::install().context("cannot listen for SIGINT and SIGTERM")?;
    let (env, seed) = (config.config().env.clone(), config.config().seed);
    if args.profile {
        impala::profile::enable();
    }
    let server =
        args.listen.as_ref().map(|listen| runner_server(args, listen, &config)).transpose()?;
    let mut builder = Impala::builder(config);
    if let Some(server) = &server {
        builder = builder.remote_env_runners(server.clone());
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
        let from =
            checkpoint.as_ref().map_or_else(|| "scratch".into(), |c| c.display().to_string());
        let stop = if stop == StopCriteria::default() {
            "never (Ctrl-C or SIGTERM saves and stops)".into()
        } else {
            stop.to_string()
        };
        println!("training {env} in {} (from {from}); stop: {stop}", run_dir.path().display());
    }
    let options = RunOptions { stop, checkpoint_every: args.checkpoint_every, checkpoints: policy };
    let interrupt = interrupts.flag();
    let summary = impala::run::run(&mut algo, &run_dir, &options, &interrupt, |event| {
        if !args.quiet {
            println!("{event}");
        }
    });
    let mut summary = summary?;
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
            print!("{}", profile.table());
            println!("profile: {}", path.display());
        }
    }
    drop(run_dir);
    match impala_plot::plot_run(&run_path) {
        Ok(plot) if !args.quiet => println!("plot: {}", plot.display()),
        Ok(_) => {}
        Err(e) => eprintln!("warning: no plot: {}", impala::one_line(&e)),
    }
    if summary.interrupted {
        summary.stop_reason =
            format!("interrupted ({})", interrupts.received_name().unwrap_or("signal"));
    }
    if !args.quiet {
        println!("{}", summary.describe());
    }
    if args.summary_json {
        let wall_s = started.elapsed().as_secs_f64();
        let profile = profile.as_ref().map(serde_json::to_value).transpose()?;
        let line = TrainSummary::new(&summary, &stop, seed, wall_s, profile);
        println!("{}", serde_json::to_value(&line)?);
    }
    // 128 + the signal's number, as a shell reports a process that the signal ended: a job
    // scheduler must not take an interrupted run for a finished one.
    Ok(interrupts.exit_code().unwrap_or(ExitCode::SUCCESS))
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

pub(crate) fn evaluate(args: &EvaluateArgs) -> anyhow::Result<ExitCode> {
    // Only what evaluation needs: the env and CPU policies with the checkpoint's weights (no
    // learner thread, optimizer state or training runners), its files verified.
    let episodes = usize::try_from(args.episodes).unwrap_or(usize::MAX);
    let eval = match impala::evaluate_checkpoint(&args.checkpoint, episodes, args.explore) {
        Ok(eval) => eval,
        // The library's checkpoint errors suggest resuming from another checkpoint; here the
        // fix is to evaluate another one.
        Err(ImpalaError::CorruptCheckpoint { path, reason }) => {
            anyhow::bail!(CliError::UnreadableCheckpoint { path, reason })
        }
        Err(ImpalaError::IncompatibleCheckpoint { path, reason, .. }) => {
            anyhow::bail!(CliError::IncompatibleCheckpoint { path, reason })
        }
        Err(other) => return Err(other.into()),
    };
    println!("{}", serde_json::to_string(&eval)?);
    Ok(ExitCode::SUCCESS)
}
