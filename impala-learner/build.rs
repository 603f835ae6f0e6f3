//! libtorch's run path, and with `cuda-tests` `libtorch_cuda.so` in tests and benches
//! (see build-support/libtorch.rs).

include!("../build-support/libtorch.rs");

fn main() {
    link_libtorch("CARGO_FEATURE_CUDA_TESTS", &["tests", "benches"]);
}
