//! libtorch's run path, with `cuda-tests` `libtorch_cuda.so` in tests and benches (see
//! build-support/libtorch.rs), and the C++ shim that turns libtorch's autocast on for the CPU
//! (`csrc/autocast.cpp`), compiled against the libtorch torch-sys found.

include!("../build-support/libtorch.rs");

fn main() {
    link_libtorch("CARGO_FEATURE_CUDA_TESTS", &["tests", "benches"]);
    println!("cargo:rerun-if-changed=csrc/autocast.cpp");
    println!("cargo:rerun-if-env-changed=LIBTORCH_CXX11_ABI");
    // torch-sys (`links = "tch"`) passes its libtorch's lib folder to crates that depend on it.
    let Some(lib) = std::env::var_os("DEP_TCH_LIBTORCH_LIB") else {
        panic!("torch-sys did not say where libtorch is (DEP_TCH_LIBTORCH_LIB)");
    };
    let include = std::path::Path::new(&lib).join("../include");
    let abi = std::env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".into());
    cc::Build::new()
        .cpp(true)
        .pic(true)
        .warnings(false)
        .include(&include)
        .flag("-std=c++17")
        .flag(format!("-D_GLIBCXX_USE_CXX11_ABI={abi}"))
        .file("csrc/autocast.cpp")
        .compile("impala_autocast");
}
