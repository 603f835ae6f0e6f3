//! Shared test helpers.

pub type TestResult = Result<(), Box<dyn std::error::Error>>;
