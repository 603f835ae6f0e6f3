//! The `impala` command. Thin: parse and run in `impala_cli::cli`, print any error as one line.

use std::process::ExitCode;

fn main() -> ExitCode {
    match impala_cli::cli::run(std::env::args_os()) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {}", impala_cli::cli::one_line(&err));
            ExitCode::FAILURE
        }
    }
}
