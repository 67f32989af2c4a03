//! The docs kept true where the source knows the answer, as `rules::failure`'s test keeps
//! `docs/failure-codes.md` true: the WIT version they name, the module table against the
//! tree, the examples against `examples/`, the map's and the README's size, and every
//! relative link. Each failure says what to change.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The map must stay a 15-minute read.
const ARCHITECTURE_MAX_BYTES: usize = 30 * 1024;
/// The README says what jobhost is and where to read on; the rest lives in `docs/`.
const README_MAX_BYTES: usize = 12 * 1024;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ sits in the workspace")
        .to_path_buf()
}

fn read(relative: &str) -> String {
    let path = workspace().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every file under `dir` (recursively) whose name ends with `suffix`, relative to `dir`.
fn files_under(dir: &Path, suffix: &str) -> BTreeSet<String> {
    fn walk(root: &Path, dir: &Path, suffix: &str, found: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, suffix, found);
            } else if path.to_string_lossy().ends_with(suffix) {
                let relative = path.strip_prefix(root).unwrap();
                found.insert(relative.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let mut found = BTreeSet::new();
    walk(dir, dir, suffix, &mut found);
    found
}

/// The lines of the section under `heading` (a `## ` line), up to the next `## ` heading.
fn section<'a>(doc: &'a str, heading: &str) -> Vec<&'a str> {
    let mut lines = doc.lines().skip_while(|line| *line != heading);
    assert!(lines.next().is_some(), "no section {heading:?}");
    lines.take_while(|line| !line.starts_with("## ")).collect()
}

/// The first cell of each table row, when it is one code span: `` | `x` | ... ``.
fn first_cells<'a>(lines: &[&'a str]) -> Vec<&'a str> {
    lines
        .iter()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once("` |").map(|(cell, _)| cell))
        .collect()
}

/// Every code span on a line: the text between pairs of backticks.
fn code_spans(line: &str) -> impl Iterator<Item = &str> {
    line.split('`').skip(1).step_by(2)
}

/// Markdown text with fenced code blocks and inline code spans taken out, so only links
/// that render are read.
fn prose(doc: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            let spans_removed: String = line
                .split('`')
                .enumerate()
                .filter(|(i, _)| i % 2 == 0)
                .map(|(_, part)| part)
                .collect();
            out.push_str(&spans_removed);
            out.push('\n');
        }
    }
    out
}

/// The targets of `[text](target)` links in `doc`.
fn link_targets(doc: &str) -> Vec<String> {
    let text = prose(doc);
    let mut targets = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            targets.push(rest[..end].trim().to_string());
            rest = &rest[end..];
        }
    }
    targets
}

fn markdown_files() -> Vec<String> {
    let mut files = vec!["README.md".to_string()];
    files.extend(
        files_under(&workspace().join("docs"), ".md")
            .into_iter()
            .map(|f| format!("docs/{f}")),
    );
    files
}

#[test]
fn the_wit_version_the_readme_and_the_architecture_name_is_the_package_of_wit_jobhost_wit() {
    let wit = read("wit/jobhost.wit");
    let package = wit
        .lines()
        .find_map(|line| line.strip_prefix("package "))
        .and_then(|rest| rest.strip_suffix(';'))
        .expect("wit/jobhost.wit has a `package` line");
    for file in ["README.md", "docs/architecture.md"] {
        let doc = read(file);
        let named: Vec<&str> = doc
            .match_indices("jobhost:job@")
            .map(|(at, _)| {
                let version = &doc[at + "jobhost:job@".len()..];
                let end = version
                    .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                    .unwrap_or(version.len());
                &doc[at..at + "jobhost:job@".len() + end]
            })
            .collect();
        assert!(
            !named.is_empty(),
            "{file} should name the contract, {package}"
        );
        for name in named {
            assert_eq!(
                name, package,
                "{file} names {name}; wit/jobhost.wit is {package}"
            );
        }
    }
}

#[test]
fn the_module_table_of_the_architecture_lists_every_file_of_host_src_and_nothing_else() {
    let doc = read("docs/architecture.md");
    let rows: BTreeSet<String> = first_cells(&section(&doc, "## Modules (`host/src`)"))
        .into_iter()
        .filter(|cell| cell.ends_with(".rs"))
        .map(str::to_string)
        .collect();
    let tree = files_under(&workspace().join("host/src"), ".rs");
    let missing: Vec<_> = tree.difference(&rows).collect();
    let stale: Vec<_> = rows.difference(&tree).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/architecture.md's module table is out of date: add a row for {missing:?}, \
         remove (or rename) the rows of {stale:?}"
    );
}

#[test]
fn every_path_the_rule_table_names_under_host_src_exists() {
    let doc = read("docs/architecture.md");
    let src = workspace().join("host/src");
    let mut absent = BTreeSet::new();
    for line in section(&doc, "## Where each rule lives") {
        let Some((_, files)) = line.trim_start_matches('|').split_once(" | ") else {
            continue;
        };
        for span in code_spans(files) {
            let names_a_file = span.ends_with(".rs") || span.ends_with('/');
            if names_a_file && !span.starts_with("migrations/") && !src.join(span).exists() {
                absent.insert(span.to_string());
            }
        }
    }
    assert!(
        absent.is_empty(),
        "docs/architecture.md's \"Where each rule lives\" names what host/src does not have: \
         {absent:?}"
    );
}

#[test]
fn the_readmes_list_of_examples_is_the_folders_of_examples() {
    let readme = read("README.md");
    let row = readme
        .lines()
        .find(|line| line.starts_with("| `examples/` |"))
        .expect("README.md's layout has an `examples/` row");
    let listed: BTreeSet<String> = code_spans(row)
        .filter(|span| {
            span.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        })
        .map(str::to_string)
        .collect();
    let folders: BTreeSet<String> = std::fs::read_dir(workspace().join("examples"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_dir())
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let missing: Vec<_> = folders.difference(&listed).collect();
    let stale: Vec<_> = listed.difference(&folders).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "README.md's examples: add {missing:?}, remove {stale:?}"
    );
}

#[test]
fn the_architecture_map_is_at_most_30_kb() {
    let size = read("docs/architecture.md").len();
    assert!(
        size <= ARCHITECTURE_MAX_BYTES,
        "docs/architecture.md is {size} bytes, over {ARCHITECTURE_MAX_BYTES}: move detail to \
         docs/internals/"
    );
}

#[test]
fn the_readme_is_at_most_12_kb() {
    let size = read("README.md").len();
    assert!(
        size <= README_MAX_BYTES,
        "README.md is {size} bytes, over {README_MAX_BYTES}: move detail to docs/"
    );
}

#[test]
fn every_relative_link_in_the_readme_and_the_docs_points_at_a_file_that_exists() {
    let mut broken = Vec::new();
    for file in markdown_files() {
        let dir = workspace().join(&file).parent().unwrap().to_path_buf();
        for target in link_targets(&read(&file)) {
            if target.contains("://") || target.starts_with('#') || target.starts_with("mailto:") {
                continue;
            }
            let path = target.split('#').next().unwrap();
            if !dir.join(path).exists() {
                broken.push(format!("{file}: {target}"));
            }
        }
    }
    assert!(broken.is_empty(), "links to nothing: {broken:#?}");
}

#[test]
fn every_deep_note_is_linked_from_the_architecture_map() {
    let links: BTreeSet<String> = link_targets(&read("docs/architecture.md"))
        .into_iter()
        .collect();
    let unlinked: Vec<_> = files_under(&workspace().join("docs/internals"), ".md")
        .into_iter()
        .filter(|note| !links.contains(&format!("internals/{note}")))
        .collect();
    assert!(
        unlinked.is_empty(),
        "docs/architecture.md's \"Deep notes\" should link {unlinked:?}"
    );
}
