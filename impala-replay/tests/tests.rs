//! The single integration-test binary of impala-replay.

mod bytes;
mod mixin;
mod props;
mod rllib;

/// Tests return this so `?` works on any error.
type TestResult = Result<(), Box<dyn std::error::Error>>;
