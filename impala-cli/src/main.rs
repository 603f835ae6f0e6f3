//! The `impala` command: parse, run, print any error as one line. The algorithm, its run
//! folder and its checkpoints are the `impala` library; this crate is arguments, signals and
//! printing.

mod bench;
mod cli;
mod error;
mod logging;
mod plot;
mod signals;
mod soak;
mod tune;

use std::process::ExitCode;

fn main() -> ExitCode {
    match cli::run(std::env::args_os()) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {}", error::describe(&err));
            ExitCode::FAILURE
        }
    }
}
