//! Integration tests of impala-learner (one binary: every test binary relinks libtorch).
//!
//! The bodies take a device, so the `cuda-tests` feature runs the same checks on CUDA.

mod checkpoint;
mod common;
#[cfg(feature = "cuda-tests")]
mod cuda;
mod custom_models;
mod export;
mod learning;
mod loss;
mod policy;
mod precision;
mod threads;
mod towers;
