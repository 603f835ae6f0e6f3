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
