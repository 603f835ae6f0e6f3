//! Integration tests: the `impala` binary on bad input, and a short train/resume/evaluate run
//! (the library's own tests are in impala/tests).

mod bad_input;
mod common;
mod faults;
mod python_envs;
mod remote;
mod runs;
mod train;
