//! Integration tests.

mod crashing;
mod envs;
mod parity;
mod registry;
mod vector;
mod wrappers;

/// The error type test bodies return.
type TestResult = Result<(), Box<dyn std::error::Error>>;
