//! The guard on the workspace's `harness = false` test binaries: they run on
//! `idemkey_test_support::runner::trials::main()`, which runs only `#[idemkey_test_support::test]`s,
//! so a plain `#[test]` or `#[tokio::test]` in one of them would never run, silently.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

/// The workspace's `crates/` folder.
fn crates() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// The sources of every `harness = false` test binary of `package`: its `path` (or
/// `tests/<name>.rs`), and with a `main.rs` every file of its folder.
fn custom_harness_sources(package: &Path) -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(package.join("Cargo.toml")).unwrap();
    let manifest: toml::Table = manifest.parse().unwrap();
    let Some(targets) = manifest.get("test").and_then(toml::Value::as_array) else {
        return Vec::new();
    };
    let mut sources = Vec::new();
    for target in targets.iter().filter_map(toml::Value::as_table) {
        if target.get("harness").and_then(toml::Value::as_bool) != Some(false) {
            continue;
        }
        let name = target["name"].as_str().unwrap();
        let path = match target.get("path").and_then(toml::Value::as_str) {
            Some(path) => package.join(path),
            None if package.join("tests").join(name).is_dir() => {
                package.join("tests").join(name).join("main.rs")
            }
            None => package.join("tests").join(format!("{name}.rs")),
        };
        if path.ends_with("main.rs") {
            rust_files(path.parent().unwrap(), &mut sources);
        } else {
            sources.push(path);
        }
    }
    sources
}

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
}

/// `file:line` of every line of code in `source` with libtest's or tokio's attribute, or
/// that calls the conformance suite without a `test:` attribute (it would write tokio's).
fn plain_tests(file: &Path, source: &str) -> Vec<String> {
    let lines: Vec<&str> = source.lines().collect();
    (0..lines.len())
        .filter(|&number| {
            let line = lines[number].trim_start();
            // Anywhere on a line of code: a macro may write its attribute after a brace.
            !line.starts_with("//")
                && (line.contains("#[test]")
                    || line.contains("#[tokio::test")
                    || line.contains("store_conformance_suite!(")
                        && !names_a_test(&lines[number..]))
        })
        .map(|number| format!("{}:{}", file.display(), number + 1))
        .collect()
}

/// Whether the macro call starting on the first line passes `test:` before it ends.
fn names_a_test(lines: &[&str]) -> bool {
    for line in lines {
        if line.contains("test:") {
            return true;
        }
        if line.trim_end().ends_with(");") {
            return false;
        }
    }
    false
}

#[test]
fn harness_false_binaries_have_no_plain_tests() {
    let mut packages: Vec<PathBuf> = std::fs::read_dir(crates())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|package| package.join("Cargo.toml").exists())
        .collect();
    packages.sort();
    let sources: Vec<PathBuf> = packages
        .iter()
        .flat_map(|package| custom_harness_sources(package))
        .collect();
    assert!(!sources.is_empty(), "no harness = false test binary found");
    let plain: Vec<String> = sources
        .iter()
        .flat_map(|file| plain_tests(file, &std::fs::read_to_string(file).unwrap()))
        .collect();
    assert!(
        plain.is_empty(),
        "these tests would never run: use #[idemkey_test_support::test] instead\n{}",
        plain.join("\n")
    );
}

#[test]
fn the_guard_sees_libtest_and_tokio_attributes() {
    let source = "#[test]\nfn a() {}\n    mod m { $( #[tokio::test(flavor = \"multi_thread\")]\nasync fn b() {}\n/// #[test] in a comment\n#[idemkey_test_support::test]\nfn c() {}\n";
    let found = plain_tests(Path::new("x.rs"), source);
    assert_eq!(found, ["x.rs:1", "x.rs:3"]);
}

#[test]
fn the_guard_sees_a_conformance_suite_on_tokio() {
    let source = "store_conformance_suite!(\n    setup(),\n    except: [a],\n);\nstore_conformance_suite!(\n    setup(),\n    test: runner::test(needs = [redis]),\n);\n";
    let found = plain_tests(Path::new("x.rs"), source);
    assert_eq!(found, ["x.rs:1"]);
}
