//! docs/DESIGN.md's crate table says what the workspace is: the same crates, and for each the
//! same workspace crates it depends on (normal dependencies), as `cargo metadata` reports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

type Crates = BTreeMap<String, BTreeSet<String>>;

/// The table under "## The workspace": `| `crate` | owns | `dep`, `dep` | external |`.
fn design_table() -> Result<Crates, Box<dyn std::error::Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(root.join("docs/DESIGN.md"))?;
    let section = text.split("\n## The workspace").nth(1).ok_or("no `## The workspace` section")?;
    let section = section.split("\n## ").next().unwrap_or(section);
    let ticked = |cell: &str| -> BTreeSet<String> {
        cell.split('`').skip(1).step_by(2).map(str::to_string).collect()
    };
    let mut crates = Crates::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let [_, name, _, deps, ..] = cells[..] else {
            return Err(format!("a crate row needs crate, owns and dependency cells: {row}").into());
        };
        let name = ticked(name).into_iter().next().ok_or(format!("no crate name in {row}"))?;
        crates.insert(name, ticked(deps));
    }
    Ok(crates)
}

/// The workspace's crates and their normal dependencies on each other.
fn workspace() -> Result<Crates, Box<dyn std::error::Error>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned().into());
    }
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let packages = metadata["packages"].as_array().ok_or("no packages in cargo metadata")?;
    let names: BTreeSet<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    let mut crates = Crates::new();
    for package in packages {
        let name = package["name"].as_str().ok_or("a package without a name")?;
        let deps = package["dependencies"].as_array().ok_or("a package without dependencies")?;
        let internal = deps
            .iter()
            .filter(|d| d["kind"].is_null())
            .filter_map(|d| d["name"].as_str())
            .filter(|d| names.contains(d))
            .map(str::to_string)
            .collect();
        crates.insert(name.to_string(), internal);
    }
    Ok(crates)
}

#[test]
fn the_design_crate_table_is_the_workspace() -> Result<(), Box<dyn std::error::Error>> {
    let (table, workspace) = (design_table()?, workspace()?);
    let listed: Vec<&String> = table.keys().collect();
    let members: Vec<&String> = workspace.keys().collect();
    assert_eq!(listed, members, "docs/DESIGN.md's crates differ from the workspace's");
    for (name, deps) in &workspace {
        assert_eq!(
            &table[name], deps,
            "docs/DESIGN.md says `{name}` depends on {:?}; Cargo.toml says {deps:?}",
            table[name]
        );
    }
    Ok(())
}

/// README.md is a short guide that starts with the set-up commands; the licences it names exist;
/// every relative link in README.md and docs/RESULTS.md points at a file that exists.
#[test]
fn the_readme_is_a_guide_with_its_licences() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md"))?;
    let lines = readme.lines().count();
    assert!(lines <= 200, "README.md has {lines} lines; a guide has at most 200");
    for command in ["./dev train", "./dev test"] {
        let early = readme.lines().take(6).any(|line| line.contains(command));
        assert!(early, "README.md's first 6 lines do not show `{command}`");
    }
    for licence in ["LICENSE-MIT", "LICENSE-APACHE"] {
        let size = std::fs::metadata(root.join(licence)).map(|m| m.len()).unwrap_or(0);
        assert!(size > 0, "{licence} is missing or empty");
    }
    for doc in ["README.md", "docs/RESULTS.md"] {
        let path = root.join(doc);
        let dir = path.parent().ok_or("a document without a folder")?;
        for link in std::fs::read_to_string(&path)?.split("](").skip(1) {
            let target = link.split(')').next().unwrap_or_default();
            let target = target.split_whitespace().next().unwrap_or_default();
            let file = target.split('#').next().unwrap_or_default();
            if file.is_empty() || target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            assert!(dir.join(file).exists(), "{doc} links to `{target}`, which does not exist");
        }
    }
    Ok(())
}

/// A crate's top-level modules (`src/<name>.rs` with its `src/<name>/` files) and, per module,
/// the others its non-test code names (`crate::<module>`, or an item `lib.rs` re-exports from
/// one), comments left out.
fn module_imports(src: &Path) -> Result<Crates, Box<dyn std::error::Error>> {
    let lib = std::fs::read_to_string(src.join("lib.rs"))?;
    let mut texts: BTreeMap<String, String> = BTreeMap::new();
    let mut pending = vec![src.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            let rel = path.strip_prefix(src)?.to_string_lossy().into_owned();
            let Some(rel) = rel.strip_suffix(".rs").filter(|r| *r != "lib" && *r != "main") else {
                continue;
            };
            let module = rel.split('/').next().unwrap_or(rel).to_string();
            let text = std::fs::read_to_string(&path)?;
            let code = text.split("#[cfg(test)]").next().unwrap_or(&text);
            let code: Vec<&str> = code.lines().filter(|l| !l.trim().starts_with("//")).collect();
            texts.entry(module).or_default().push_str(&code.join("\n"));
        }
    }
    // `pub use module::{A, B};` and `pub use module::A;` in lib.rs: which module an item is of.
    let mut owner = BTreeMap::new();
    for statement in lib.split(';').filter_map(|s| s.trim().strip_prefix("pub use ")) {
        let Some((module, items)) = statement.split_once("::") else { continue };
        if texts.contains_key(module) {
            let items = items.split(|c: char| !(c.is_alphanumeric() || c == '_'));
            for item in items.filter(|item| !item.is_empty() && *item != "self") {
                owner.insert(item.to_string(), module.to_string());
            }
        }
    }
    let words = |text: &str| -> Vec<String> {
        text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .filter(|word| !word.is_empty())
            .map(str::to_string)
            .collect()
    };
    let mut imports = Crates::new();
    for (module, text) in &texts {
        let mut named = BTreeSet::new();
        for word in words(text) {
            let Some(rest) = word.strip_prefix("crate::") else { continue };
            let first = rest.split("::").next().unwrap_or(rest);
            named.extend(texts.contains_key(first).then(|| first.to_string()));
            named.extend(owner.get(first).cloned());
        }
        // `use crate::{A, b::C};`: the names inside the braces.
        for group in text.split("use crate::{").skip(1) {
            let group = group.split("};").next().unwrap_or(group);
            for word in words(group) {
                let first = word.split("::").next().unwrap_or(&word).to_string();
                if texts.contains_key(&first) {
                    named.insert(first);
                } else if let Some(module) = owner.get(&first) {
                    named.insert(module.clone());
                }
            }
        }
        named.remove(module);
        imports.insert(module.clone(), named);
    }
    Ok(imports)
}

/// A path of imports from `from` back to itself, if there is one.
fn circle(imports: &Crates, from: &str) -> Option<Vec<String>> {
    let mut stack = vec![vec![from.to_string()]];
    let mut seen = BTreeSet::new();
    while let Some(path) = stack.pop() {
        let last = path.last()?;
        for next in imports.get(last).into_iter().flatten() {
            if next == from {
                return Some([path.clone(), vec![next.clone()]].concat());
            }
            if seen.insert(next.clone()) {
                stack.push([path.clone(), vec![next.clone()]].concat());
            }
        }
    }
    None
}

/// The `impala` crate's modules are layered (docs/DESIGN.md, "Layers"): the run's envs, its
/// policies, its runners, evaluation, the algorithm, its builder, run folders; none imports a
/// module that imports it back.
#[test]
fn the_algorithm_crate_has_no_circle_of_imports_between_its_modules(
) -> Result<(), Box<dyn std::error::Error>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../impala/src");
    let imports = module_imports(&src)?;
    assert!(imports.len() > 10 && imports["algorithm"].contains("policies"), "{imports:?}");
    let circles: Vec<String> =
        imports.keys().filter_map(|m| circle(&imports, m)).map(|path| path.join(" -> ")).collect();
    assert!(circles.is_empty(), "modules that import each other:\n{}", circles.join("\n"));
    Ok(())
}
