//! Integration tests: the `impala` binary on bad input, and a short train/resume/evaluate run.

mod algorithm;
mod bad_input;
mod common;
mod train;
