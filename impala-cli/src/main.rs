//! The `impala` command: parse, run, print any error as one line. The algorithm, its run
//! folder and its checkpoints are the `impala` library, searches and benchmarks `impala-tune`,
//! plots `impala-plot`; this crate is arguments, signals and printing.

mod args;
mod cli;
mod error;
mod experiments;
mod logging;
mod signals;

use std::process::ExitCode;

use clap::Parser as _;

use crate::args::{Cli, Command};

fn main() -> ExitCode {
    match run(std::env::args_os()) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {}", error::describe(&err));
            ExitCode::FAILURE
        }
    }
}

/// Parses `args` and runs the command. Errors are returned for `main` to print as one line.
fn run(args: impl IntoIterator<Item = std::ffi::OsString>) -> anyhow::Result<ExitCode> {
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
        Command::Train(args) => cli::train(&args),
        Command::Evaluate(args) => cli::evaluate(&args),
        Command::Config(args) => cli::print_config(&args),
        Command::Envs => cli::list_envs(),
        Command::BenchCartpole(args) => experiments::bench(&args),
        Command::BenchMemory(args) => experiments::memory(&args),
        Command::EnvRunner(args) => cli::env_runner(&args),
        Command::Tune(args) => experiments::tune(&args),
        Command::Plot(args) => {
            println!("{}", impala_plot::plot_run(&args.run)?.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}
