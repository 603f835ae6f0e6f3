//! Integration tests of impala-sampler (one binary, modules below).

mod support;

mod builder;
mod faults;
mod group;
mod multi_agent;
mod runner;
mod seam;

/// The benches' pure-Rust MLP policy, included so its unit tests run with the suite.
#[path = "../benches/support/mlp.rs"]
mod mlp;
