//! The installed module (`site-packages/impala_rs/_impala_rs*.so`) finds libtorch in the torch
//! wheel next to it (`site-packages/torch/lib`), the one `import torch` loads, so both share one
//! libtorch; `impala_rs/__init__.py` imports torch first anyway.
fn main() {
    println!("cargo:rustc-link-arg-cdylib=-Wl,-rpath,$ORIGIN/../torch/lib");
}
