//! Every command: its arguments turned into a call of the library (`impala`, and `impala-tune`
//! for the commands over many runs: `tune`, `bench-cartpole`, `bench-memory`), and what comes
//! back printed.

use std::fmt::Display;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use impala::config::ConfigFormat;
use impala::remote::{
    runner_server, serve_env_runner, ClientSettings, ClientTls, RunnerHost, ServerTls, Token,
};
use impala::run::{CheckpointPolicy, RunOptions, TrainSpec, Training, PROFILE_FILE};
use impala::StopCriteria;
use impala_tune::bench::{bench_cartpole, BenchOptions, StabilityOptions};
use impala_tune::soak::{memory_soak, soak_config, SoakOptions};
use impala_tune::{Experiment, SearchOptions, TrainSummary};

use crate::args::{
    BenchArgs, ConfigArgs, EnvRunnerArgs, EvaluateArgs, ExportArgs, MemoryArgs, StabilityArgs,
    TrainArgs, TuneArgs,
};
use crate::signals;

/// Each warning on stderr.
fn print_warnings(warnings: impl IntoIterator<Item = impl Display>) {
    for w in warnings {
        eprintln!("warning: {w}");
    }
}

/// `text` on stdout, or on stderr when it is a warning.
fn print_notice(text: impl Display, warning: bool) {
    if warning {
        eprintln!("warning: {text}");
    } else {
        println!("{text}");
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
    // The learner's device mapping (num_gpus, or num_learners x num_gpus_per_learner) and the
    // waits validation made of the options in seconds, as comments in every format but JSON,
    // on stderr for JSON so stdout stays parseable.
    let plan = format!("learner: {}", config.config().learner_plan());
    // RLlib's `api_stack()` flags are kept as written; say what they mean here.
    let stack = "api_stack: both of RLlib's API stacks drive the one engine here; \
                 enable_rl_module_and_learner and enable_env_runner_and_connector_v2 change nothing";
    for line in [plan, format!("waits: {}", config.durations()), stack.to_string()] {
        match format {
            ConfigFormat::Json => eprintln!("{line}"),
            _ => println!("# {line}"),
        }
    }
    print_warnings(&warnings);
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn env_runner(args: &EnvRunnerArgs) -> anyhow::Result<ExitCode> {
    impala::logging::init(args.log_level);
    let mut settings = ClientSettings::new(&args.connect, Token::from_file(&args.token_file)?);
    settings.expect_env = args.expect_env.clone();
    settings.reconnect_timeout = args.reconnect_timeout_s;
    let tls = args.tls_ca.as_deref().map(|ca| ClientTls::from_file(ca, args.tls_domain.clone()));
    settings.tls = tls.transpose()?;
    let reason = serve_env_runner(&settings, RunnerHost::default())?;
    println!("the driver's run is over ({reason}); exiting");
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn train(args: &TrainArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    // Progress on stdout, unless --quiet.
    let say = |line: &dyn Display| {
        if !args.quiet {
            println!("{line}");
        }
    };
    let mut training = Training::new(TrainSpec {
        source: args.source.source(),
        resume: args.resume.clone(),
        run_dir: args.run_dir.clone(),
        truncate: args.truncate,
        options: RunOptions {
            stop: args.stop.criteria(),
            checkpoint_every: args.checkpoint_every,
            checkpoints: CheckpointPolicy {
                score_attribute: args.checkpoint_score_attribute.clone(),
                score_order: args.checkpoint_score_order,
                num_to_keep: args.num_to_keep,
            },
        },
        profile: args.profile,
    })?;
    impala::logging::init(training.config().log_level());
    print_warnings(training.check()?);
    // From here on SIGINT/SIGTERM finish the iteration and save instead of killing the process.
    let interrupts = signals::listen()?;
    if let Some(listen) = &args.listen {
        let token = args.token_file.as_deref().context("--listen needs --token-file")?;
        let tls = args.tls_cert.as_deref().zip(args.tls_key.as_deref());
        let tls = tls.map(|(cert, key)| ServerTls::from_files(cert, key)).transpose()?;
        let token = Token::from_file(token)?;
        let server = Arc::new(runner_server(training.config(), listen, token, tls)?);
        say(&format_args!("serving env runners on {}", server.local_addr()));
        training.remote_env_runners(server);
    }
    let run = training.start(interrupts.flag())?;
    let (dir, stop) = (run.dir(), run.stop());
    if let Some(text) = dir.opened().describe(dir.path(), "--truncate") {
        print_notice(text, dir.opened().is_warning());
    }
    let from = run.checkpoint().map_or_else(|| "scratch".into(), |c| c.display().to_string());
    let never = *stop == StopCriteria::default();
    let never = if never { " (Ctrl-C or SIGTERM saves and stops)" } else { "" };
    let (env, path) = (&run.config().config().env, dir.path().display());
    say(&format_args!("training {env} in {path} (from {from}); stop: {stop}{never}"));
    say(&format_args!("learner: {}", run.config().config().learner_plan()));
    let mut trained = run.run(|e| say(&e))?;
    if let Some(profile) = trained.profile.as_ref().filter(|_| !args.quiet) {
        print!("{}", profile.table());
        println!("profile: {}", trained.run_dir.join(PROFILE_FILE).display());
    }
    match impala_plot::plot_run(&trained.run_dir) {
        Ok(plot) => say(&format_args!("plot: {}", plot.display())),
        Err(e) => eprintln!("warning: no plot: {}", impala::one_line(&e)),
    }
    interrupts.name_signal_in(&mut trained.summary);
    say(&trained.summary.describe());
    if args.summary_json {
        let line = TrainSummary::of(&trained, started.elapsed().as_secs_f64())?;
        println!("{}", serde_json::to_value(&line)?);
    }
    // After a signal, 128 + its number: a job scheduler must not take it for a finished run.
    Ok(interrupts.exit_code().unwrap_or(ExitCode::SUCCESS))
}

pub(crate) fn evaluate(args: &EvaluateArgs) -> anyhow::Result<ExitCode> {
    if let Some(dir) = &args.video {
        return record_video(args, dir);
    }
    // Only what evaluation needs: the env and CPU policies with the checkpoint's weights (no
    // learner thread, optimizer state or training runners), its files verified.
    let eval = impala::evaluate_checkpoint(&args.checkpoint, args.episodes, args.explore)?;
    println!("{}", serde_json::to_string(&eval)?);
    Ok(ExitCode::SUCCESS)
}

/// `evaluate --video`: the episodes are played by the `impala_rs` Python package
/// (`python -m impala_rs.video`), which renders the env through Gymnasium (frames this process
/// has no renderer for) and encodes them with imageio-ffmpeg; it prints a JSON line per episode.
fn record_video(args: &EvaluateArgs, dir: &std::path::Path) -> anyhow::Result<ExitCode> {
    let python = impala::gym::default_python();
    let mut command = std::process::Command::new(&python);
    command.args(["-m", "impala_rs.video", "--checkpoint"]).arg(&args.checkpoint);
    command.arg("--video").arg(dir).args(["--episodes", &args.episodes.to_string()]);
    if args.explore {
        command.arg("--explore");
    }
    let status = command.status().with_context(|| {
        format!(
            "--video: cannot run {} (the interpreter that records); name one that has the \
             impala_rs package with IMPALA_PYTHON",
            python.display()
        )
    })?;
    if !status.success() {
        anyhow::bail!(
            "--video: `{} -m impala_rs.video` failed ({status}); it needs the impala_rs package \
             and imageio-ffmpeg in that interpreter (`pip install \"impala-rs[video]\"`), or \
             IMPALA_PYTHON naming one that has them",
            python.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn export(args: &ExportArgs) -> anyhow::Result<ExitCode> {
    let policy = impala::TrainedPolicy::from_checkpoint(&args.checkpoint, impala::Device::Cpu)?;
    policy.export_torchscript(&args.out)?;
    let obs: Vec<String> =
        policy.observation_space().shape().iter().map(usize::to_string).collect();
    let width = policy.action_space().dist_inputs_dim();
    let state = match policy.state_dim() {
        0 => String::new(),
        s => format!(", state [B, {s}]"),
    };
    println!(
        "{}: forward(obs [B, {}] float32{state}) -> (logits [B, {width}], value [B]{state})",
        args.out.display(),
        obs.join(", ")
    );
    Ok(ExitCode::SUCCESS)
}

/// The `impala` executable that runs each trial and seed: this one.
fn trainer() -> anyhow::Result<std::path::PathBuf> {
    std::env::current_exe().context("cannot find the impala executable to run trials")
}

pub(crate) fn tune(args: &TuneArgs) -> anyhow::Result<ExitCode> {
    let mut experiment = Experiment::new(SearchOptions {
        source: args.source.source(),
        stop: args.stop.criteria(),
        num_samples: args.num_samples,
        search_seed: args.search_seed,
        metric: args.metric.clone(),
        mode: args.mode,
        cpus: args.cpus,
        max_concurrent: args.max_concurrent,
        output_dir: args.output_dir.clone(),
        name: args.name.clone(),
    })?;
    print_warnings(experiment.warnings());
    if args.dry_run {
        print!("{}", experiment.dry_run());
        return Ok(ExitCode::SUCCESS);
    }
    // From here on SIGINT/SIGTERM go to the trials instead of ending this process.
    let interrupts = signals::listen()?;
    experiment.claim()?;
    println!("{}", experiment.headline());
    experiment.run(&trainer()?, &|| interrupts.received(), |e| print_notice(&e, e.is_warning()))?;
    print!("{}", experiment.report());
    if let Some(code) = interrupts.exit_code() {
        return Ok(code);
    }
    experiment.check_finished()?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn bench(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    let (file, set) = (args.config.clone(), args.overrides.clone());
    let StabilityArgs { stay_s, stay_steps, stay_min, eval_episodes, eval_min, .. } =
        args.stability;
    let stability = StabilityOptions { stay_s, stay_steps, stay_min, eval_episodes, eval_min };
    let options = BenchOptions {
        seeds: args.seeds,
        stop_reward: args.stop_reward,
        stop_time: args.stop_time,
        source: impala::ConfigSource { file, set, ..Default::default() },
        profile: args.profile,
        runs_dir: args.stability.runs_dir.clone(),
        // Off unless --stay-s or --stay-steps is given.
        stability: (stay_s.is_some() || stay_steps.is_some()).then_some(stability),
    };
    // SIGINT/SIGTERM go to the running seed, which saves and exits; no other seed starts.
    let interrupts = signals::listen()?;
    let mut printed = Ok(());
    let report = bench_cartpole(&options, &trainer()?, &|| interrupts.received(), |seed| {
        if printed.is_ok() {
            printed = serde_json::to_value(seed).map(|line| println!("{line}"));
        }
    })?;
    printed?;
    println!("{}", serde_json::to_value(&report)?);
    let passed = if report.all_passed() { ExitCode::SUCCESS } else { ExitCode::FAILURE };
    Ok(interrupts.exit_code().unwrap_or(passed))
}

pub(crate) fn memory(args: &MemoryArgs) -> anyhow::Result<ExitCode> {
    let (config, warnings) = soak_config(args.source.source())?;
    print_warnings(&warnings);
    let options = SoakOptions {
        minutes: args.minutes,
        warmup_s: args.warmup_s,
        sample_every_s: args.sample_every_s,
        checkpoint_every: args.checkpoint_every,
        run_dir: args.run_dir.clone(),
        keep_run_dir: args.keep_run_dir,
    };
    let interrupts = signals::listen()?;
    let report = memory_soak(config, &options, interrupts.flag())?;
    println!("{}", serde_json::to_value(&report)?);
    Ok(interrupts.exit_code().unwrap_or(ExitCode::SUCCESS))
}
