//! Links libtorch so the `impala` binary and every test (doctests included) find it, and with
//! the `cuda` feature keeps `libtorch_cuda.so` linked so `num_gpus > 0` sees the CUDA devices.
//!
//! The linker's default `--as-needed` drops `libtorch_cuda.so` because nothing references it
//! directly, and then libtorch sees no CUDA device (tch 0.24 has no `maybe_init_cuda`). Loading
//! it costs about 350 MiB of resident memory, so CPU builds leave it out. Doctests run from a
//! temporary folder, where the workspace's `$ORIGIN`-relative run path does not reach libtorch,
//! hence the absolute run path.

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    let Some(libtorch) = std::env::var_os("LIBTORCH") else { return };
    let lib = std::path::Path::new(&libtorch).join("lib");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    if std::env::var_os("CARGO_FEATURE_CUDA").is_some() && lib.join("libtorch_cuda.so").exists() {
        for kind in ["bins", "tests"] {
            println!("cargo:rustc-link-arg-{kind}=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
        }
    }
}
