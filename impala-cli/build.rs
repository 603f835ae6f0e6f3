//! libtorch's run path, and with the `cuda` feature `libtorch_cuda.so` in the `impala` binary and
//! the tests, so `num_gpus > 0` sees the CUDA devices (see build-support/libtorch.rs).

include!("../build-support/libtorch.rs");

fn main() {
    link_libtorch("CARGO_FEATURE_CUDA", &["bins", "tests"]);
}
