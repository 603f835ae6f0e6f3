//! libtorch's run path for this crate's tests and doctests, and with the `cuda` feature
//! `libtorch_cuda.so` in the tests (see build-support/libtorch.rs).

include!("../build-support/libtorch.rs");

fn main() {
    link_libtorch("CARGO_FEATURE_CUDA", &["tests"]);
}
