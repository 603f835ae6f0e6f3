//! Integration tests of the `impala` library (one binary, modules below).

mod algorithm;
mod common;
mod learner_settings;
mod options;
mod settings;
#[cfg(unix)]
mod runner_processes;
mod trust;
