//! Integration tests: the `impala` binary on bad input, a short train/resume/evaluate run and
//! `impala tune` (the library's own tests are in impala/tests).

mod bad_input;
mod common;
mod custom_models;
mod design;
mod export;
mod faults;
mod netns;
mod python_envs;
mod remote;
mod runs;
mod thin_binary;
mod train;
mod tune;
