//! The `impala` command: parse, run, print any error as one line. The algorithm, its run
//! folder and its checkpoints are the `impala` library, searches and benchmarks `impala-tune`,
//! plots `impala-plot`; this crate is arguments, signals and printing.

mod args;
mod commands;
mod error;
mod signals;

use std::process::ExitCode;

use clap::Parser as _;

use crate::args::Command;

fn main() -> ExitCode {
    // Help and --version print to stdout and exit 0; usage errors print clap's message, exit 2.
    match run(Command::parse()) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {}", error::describe(&err));
            ExitCode::FAILURE
        }
    }
}

/// Runs the command. Errors are returned for `main` to print as one line.
fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Train(args) => commands::train(&args),
        Command::Evaluate(args) => commands::evaluate(&args),
        Command::Export(args) => commands::export(&args),
        Command::Config(args) => commands::print_config(&args),
        Command::Envs => {
            impala::envs::list()?.iter().for_each(|info| println!("{info}"));
            for id in impala::envs::MULTI_AGENT_ENVS {
                let env = impala::envs::make_multi_agent(id, &Default::default())?;
                let agent = |a: &impala::core::AgentSpec| {
                    format!("{} ({}, {})", a.id, a.observation_space, a.action_space)
                };
                let agents: Vec<String> = env.spec().agents.iter().map(agent).collect();
                println!("{id:<16} multi-agent: {}", agents.join(", "));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::BenchCartpole(args) => commands::bench(&args),
        Command::BenchMemory(args) => commands::memory(&args),
        Command::EnvRunner(args) => commands::env_runner(&args),
        Command::Tune(args) => commands::tune(&args),
        Command::Plot { run } => {
            println!("{}", impala_plot::plot_run(&run)?.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}
