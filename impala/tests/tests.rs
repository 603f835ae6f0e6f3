//! Integration tests of the `impala` library (one binary, modules below).

mod algorithm;
mod common;
mod image_model;
mod learner_settings;
mod learning;
mod models;
mod multi_agent;
mod options;
mod policy;
#[cfg(unix)]
mod runner_processes;
mod settings;
mod trust;
