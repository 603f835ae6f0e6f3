// Shared by the build scripts of the crates that link libtorch (`include!`d, so it is plain code).
//
// - An absolute run path to libtorch for every binary of the crate: doctests are linked in a
//   temporary folder where the workspace's `$ORIGIN`-relative run path does not reach.
// - With the crate's CUDA feature, `libtorch_cuda.so` kept linked into `kinds` (`bins`, `tests`,
//   `benches`): the linker's default `--as-needed` drops it because nothing references it
//   directly, and then libtorch sees no CUDA device (tch 0.24 has no `maybe_init_cuda`). Loading
//   it costs about 350 MiB of resident memory, so CPU builds leave it out.

/// Emits the link arguments above; `cuda_feature` is the feature's `CARGO_FEATURE_*` variable.
fn link_libtorch(cuda_feature: &str, kinds: &[&str]) {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    let Some(libtorch) = std::env::var_os("LIBTORCH") else { return };
    let lib = std::path::Path::new(&libtorch).join("lib");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    if std::env::var_os(cuda_feature).is_some() && lib.join("libtorch_cuda.so").exists() {
        for kind in kinds {
            println!("cargo:rustc-link-arg-{kind}=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
        }
    }
}
