//! Integration tests of the `impala` library (one binary, modules below).

mod algorithm;
mod common;
mod options;
mod learner_settings;
mod settings;
mod trust;
