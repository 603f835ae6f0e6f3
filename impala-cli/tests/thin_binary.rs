//! The `impala` binary stays a thin layer: arguments, signals and printing over the library
//! crates (`impala`, `impala-tune`, `impala-plot`), which own everything else.

use std::fs;
use std::path::{Path, PathBuf};

use crate::common::TestResult;

/// The most lines `impala-cli/src` may hold, all its .rs files together (as `wc -l` counts).
const MAX_LINES: usize = 900;

/// Every .rs file under `dir` (its subfolders too) and its line count.
fn rust_lines(dir: &Path, files: &mut Vec<(PathBuf, usize)>) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            rust_lines(&path, files)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            let lines = fs::read_to_string(&path)?.lines().count();
            files.push((path, lines));
        }
    }
    Ok(())
}

#[test]
fn the_binary_is_a_thin_layer_of_at_most_900_lines() -> TestResult {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_lines(&src, &mut files)?;
    assert!(files.iter().any(|(path, _)| path.ends_with("main.rs")), "no main.rs in {src:?}");
    files.sort_by_key(|(_, lines)| std::cmp::Reverse(*lines));
    let total: usize = files.iter().map(|(_, lines)| lines).sum();
    let name = |path: &Path| path.strip_prefix(&src).unwrap_or(path).display().to_string();
    let each: Vec<String> = files.iter().map(|(path, n)| format!("{} {n}", name(path))).collect();
    assert!(
        total <= MAX_LINES,
        "impala-cli/src has {total} lines ({}), more than {MAX_LINES}: the binary is arguments, \
         signals and printing, and logic belongs in the library crates (impala, impala-tune, \
         impala-plot)",
        each.join(", ")
    );
    Ok(())
}
