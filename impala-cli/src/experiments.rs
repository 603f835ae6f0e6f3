//! The commands over many runs (`tune`, `bench-cartpole`) and the soak (`bench-memory`): their
//! flags turned into `impala-tune`'s options, and its results printed.

use std::process::ExitCode;

use anyhow::Context as _;
use impala_tune::bench::{bench_cartpole, BenchOptions, StabilityOptions};
use impala_tune::soak::{memory_soak, SoakOptions, ITERATION_OVERRIDE};
use impala_tune::{Experiment, SearchOptions, TuneError};

use crate::args::{BenchArgs, MemoryArgs, TuneArgs};
use crate::signals::Interrupts;

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
    for w in experiment.warnings() {
        eprintln!("warning: {w}");
    }
    if args.dry_run {
        print!("{}", experiment.dry_run());
        return Ok(ExitCode::SUCCESS);
    }
    // From here on SIGINT/SIGTERM go to the trials instead of ending this process.
    let interrupts = Interrupts::install().context("cannot listen for SIGINT and SIGTERM")?;
    let dir = experiment.claim()?;
    println!("{}", experiment.headline());
    experiment.run(&trainer()?, &|| interrupts.forward(), |event| {
        if event.is_warning() {
            eprintln!("warning: {event}");
        } else {
            println!("{event}");
        }
    })?;
    print!("{}", experiment.report());
    if let Some(code) = interrupts.exit_code() {
        return Ok(code);
    }
    if !experiment.any_finished() {
        let total = experiment.trials().len();
        return Err(TuneError::AllTrialsFailed { total, experiment: dir }.into());
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn bench(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    let s = &args.stability;
    let options = BenchOptions {
        seeds: args.seeds,
        stop_reward: args.stop_reward,
        stop_time: args.stop_time,
        source: impala::ConfigSource {
            file: args.config.clone(),
            set: args.overrides.clone(),
            ..impala::ConfigSource::default()
        },
        profile: args.profile,
        runs_dir: s.runs_dir.clone(),
        stability: (s.stay_s.is_some() || s.stay_steps.is_some()).then_some(StabilityOptions {
            stay_s: s.stay_s,
            stay_steps: s.stay_steps,
            stay_min: s.stay_min,
            eval_episodes: s.eval_episodes,
            eval_min: s.eval_min,
        }),
    };
    // SIGINT/SIGTERM go to the running seed, which saves and exits; no other seed starts.
    let interrupts = Interrupts::install().context("cannot listen for SIGINT and SIGTERM")?;
    let mut printed = Ok(());
    let report = bench_cartpole(&options, &trainer()?, &|| interrupts.forward(), |seed| {
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
    let mut source = args.source.clone();
    source.overrides.insert(0, ITERATION_OVERRIDE.into());
    let (config, warnings) = source.source().load()?;
    crate::cli::print_warnings(&warnings);
    let options = SoakOptions {
        minutes: args.minutes,
        warmup_s: args.warmup_s,
        sample_every_s: args.sample_every_s,
        checkpoint_every: args.checkpoint_every,
        run_dir: args.run_dir.clone(),
        keep_run_dir: args.keep_run_dir,
    };
    let interrupts = Interrupts::install()?;
    let report = memory_soak(config, &options, interrupts.flag())?;
    println!("{}", serde_json::to_value(&report)?);
    Ok(interrupts.exit_code().unwrap_or(ExitCode::SUCCESS))
}
