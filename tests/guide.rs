//! `docs/guide.md`, run as written: every code block in order, in a temporary directory
//! outside this checkout, with this build's `host` first on the `PATH`. A `sh` block is
//! run by a shell and must succeed; a block whose info string names a file
//! (`rust file=src/lib.rs`) is written there, whole. Any other block fails the test, so
//! nothing in the guide goes unchecked.

use crate::common::{shared_cache, workspace};
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Debug, PartialEq)]
enum Block {
    Shell(String),
    File { path: String, text: String },
}

/// The guide's code blocks, in order; panics on one it cannot run.
fn blocks(markdown: &str) -> Vec<Block> {
    let mut found = Vec::new();
    let mut lines = markdown.lines().enumerate();
    while let Some((number, line)) = lines.next() {
        let Some(info) = line.strip_prefix("```") else {
            continue;
        };
        let mut body = String::new();
        for (_, line) in lines.by_ref() {
            if line == "```" {
                break;
            }
            body.push_str(line);
            body.push('\n');
        }
        let words: Vec<&str> = info.split_whitespace().collect();
        found.push(match words[..] {
            ["sh"] => Block::Shell(body),
            [_, file] if file.starts_with("file=") => Block::File {
                path: file["file=".len()..].to_string(),
                text: body,
            },
            _ => panic!(
                "docs/guide.md:{}: a code block must be `sh` or name its file (`rust file=src/lib.rs`), not {info:?}",
                number + 1
            ),
        });
    }
    found
}

#[test]
fn a_block_is_a_command_or_a_file_and_nothing_else() {
    let guide = "text\n```sh\nhost new x\ncd x\n```\n```toml file=tests.toml\n[[case]]\n```\n";
    assert_eq!(
        blocks(guide),
        [
            Block::Shell("host new x\ncd x\n".into()),
            Block::File {
                path: "tests.toml".into(),
                text: "[[case]]\n".into()
            }
        ]
    );
    let loose = std::panic::catch_unwind(|| blocks("```rust\nfn main() {}\n```\n"));
    assert!(loose.is_err());
}

#[test]
fn the_guide_runs_as_written() {
    let guide = std::fs::read_to_string(workspace().join("docs/guide.md")).unwrap();
    let blocks = blocks(&guide);
    assert!(blocks.len() >= 10, "the guide lost its code blocks");
    let place = tempfile::tempdir().unwrap();
    // `host` is this build's binary, found on the PATH as a reader's would be.
    let bin = place.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_host"), bin.join("host")).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let work = place.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let mut cwd: PathBuf = work.clone();
    let state = place.path().join("cwd");
    for block in &blocks {
        match block {
            Block::File { path, text } => {
                let file = cwd.join(path);
                std::fs::create_dir_all(file.parent().unwrap()).unwrap();
                std::fs::write(file, text).unwrap();
            }
            Block::Shell(script) => {
                let out = shell(&cwd, script, &path, &state);
                assert!(
                    out.status.success(),
                    "this block of docs/guide.md failed in {}:\n{script}\n{}{}",
                    cwd.display(),
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                cwd = PathBuf::from(std::fs::read_to_string(&state).unwrap().trim());
            }
        }
    }
    // The guide ends with the job it built tested, its receipts as written.
    assert_eq!(cwd, work.join("receipts"));

    // Its cases hold on Postgres too: placed files, canned responses and all.
    let on_postgres = format!(
        "host --db '{}' test --json",
        crate::common::postgres_admin_url()
    );
    let out = shell(&cwd, &on_postgres, &path, &state);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["failed"], 0, "{report}");
    assert_eq!(report["passed"], 3, "{report}");

    // A request other than the one the case expects fails it, saying how.
    let cases = std::fs::read_to_string(cwd.join("tests.toml")).unwrap();
    let wrong = cases.replace(
        r#"json = { customer = "Ada", items = ["tea", "cake"] }"#,
        r#"json = { customer = "Ada", items = ["tea"] }"#,
    );
    assert_ne!(wrong, cases);
    std::fs::write(cwd.join("tests.toml"), wrong).unwrap();
    let out = shell(&cwd, "host test --only receipt", &path, &state);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains("request 1 to pricing: json")
            && shown.contains(r#"expected: {"customer":"Ada","items":["tea"]}"#)
            && shown.contains(r#"actual:   {"customer":"Ada","items":["tea","cake"]}"#),
        "{shown}"
    );
}

/// Runs `script` in `cwd` as a reader's shell would (stopping at the first failing
/// command), and records the directory it ended in.
fn shell(cwd: &Path, script: &str, path: &str, state: &Path) -> std::process::Output {
    let mut command = Command::new("bash");
    command
        .arg("-euo")
        .arg("pipefail")
        .arg("-c")
        .arg(format!("{script}\npwd > '{}'\n", state.display()))
        .current_dir(cwd)
        .env("PATH", path)
        // A reader's defaults: no database or home from the test's environment, the
        // component cache shared with the other tests (it only saves compiling).
        .env("JOBHOST_CACHE", shared_cache())
        .env("JOBHOST_LOG", "warn");
    for name in [
        "JOBHOST_DB",
        "JOBHOST_HOME",
        "JOBHOST_LISTEN",
        "CARGO_TARGET_DIR",
    ] {
        command.env_remove(name);
    }
    command.output().unwrap()
}
