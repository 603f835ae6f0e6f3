//! Integration tests of impala-vtrace (one test binary, see the workspace's `autotests = false`).

mod common;
mod errors;
mod golden;
mod logits;
mod properties;
mod reference;
