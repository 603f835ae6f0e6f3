//! Integration tests of the runner pool (one binary, modules below).

mod pool;
