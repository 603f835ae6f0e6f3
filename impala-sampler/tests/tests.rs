//! Integration tests of impala-sampler (one binary, modules below).

mod support;

mod builder;
mod faults;
mod group;
mod runner;
