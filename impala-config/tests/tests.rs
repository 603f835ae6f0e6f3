//! Integration tests of impala-config (one binary, see the crate's `autotests = false`).

mod formats;
mod keys;
mod messages;
mod resources;
mod schedule;
mod validation;

/// The error type every test returns.
type TestResult = Result<(), Box<dyn std::error::Error>>;
