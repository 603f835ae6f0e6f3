//! Run paths for doctests, and with the `cuda-tests` feature `libtorch_cuda.so` kept linked into
//! this crate's test and bench binaries.
//!
//! The linker's default `--as-needed` drops `libtorch_cuda.so` because nothing references it
//! directly, and then libtorch sees no CUDA device (tch 0.24 has no `maybe_init_cuda`). Loading
//! it costs hundreds of MiB of resident memory, so CPU builds leave it out.

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    let Some(libtorch) = std::env::var_os("LIBTORCH") else { return };
    let lib = std::path::Path::new(&libtorch).join("lib");
    // Doctests run from a temporary folder, where the workspace's $ORIGIN-relative run path
    // does not reach libtorch.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    if std::env::var_os("CARGO_FEATURE_CUDA_TESTS").is_some()
        && lib.join("libtorch_cuda.so").exists()
    {
        for kind in ["tests", "benches"] {
            println!("cargo:rustc-link-arg-{kind}=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
        }
    }
}
