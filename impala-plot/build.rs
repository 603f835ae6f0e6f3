//! libtorch's run path for this crate's tests and doctests, which link it through `impala`
//! (see build-support/libtorch.rs).

include!("../build-support/libtorch.rs");

fn main() {
    link_libtorch("CARGO_FEATURE_CUDA", &["tests"]);
}
