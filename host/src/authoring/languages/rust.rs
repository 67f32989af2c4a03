//! Rust jobs: the project `host new --lang rust` writes (the guest SDK crate vendored into
//! it), `host sdk`'s update of that SDK, and `host build`'s step (cargo, for
//! `wasm32-wasip2`, installing the target where it is missing).

use super::{BuildError, Names, SDK_DIR, SDK_VERSION, ScaffoldError};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The target every job is built for.
const TARGET: &str = "wasm32-wasip2";

/// `host build` of a Rust project: the target installed where missing, then cargo.
pub(super) fn build(dir: &Path) -> Result<PathBuf, BuildError> {
    ensure_target()?;
    cargo_build(dir)?.ok_or(BuildError::Failed("cargo"))
}

/// Installs the `wasm32-wasip2` target with rustup where it is missing.
fn ensure_target() -> Result<(), BuildError> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .stderr(Stdio::null())
        .output();
    match installed {
        Ok(out) if out.status.success() => {
            if String::from_utf8_lossy(&out.stdout)
                .lines()
                .any(|l| l.trim() == TARGET)
            {
                return Ok(());
            }
            eprintln!("installing the {TARGET} target (rustup target add {TARGET})");
            let added = Command::new("rustup")
                .args(["target", "add", TARGET])
                .status()?;
            if added.success() {
                Ok(())
            } else {
                Err(BuildError::Tool(format!(
                    "could not install the {TARGET} target with rustup"
                )))
            }
        }
        // No rustup: a toolchain installed another way may have the target; cargo says
        // so if it has not.
        _ => Ok(()),
    }
}

/// `cargo build --release --target wasm32-wasip2` in `dir`, cargo's own messages on
/// stderr; the component it made, if it made one.
fn cargo_build(dir: &Path) -> Result<Option<PathBuf>, BuildError> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut child = Command::new(cargo)
        .current_dir(dir)
        .args([
            "build",
            "--release",
            "--target",
            TARGET,
            "--message-format=json-render-diagnostics",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| BuildError::Tool(format!("cannot run cargo (is Rust installed?): {e}")))?;
    let mut component = None;
    if let Some(stdout) = child.stdout.take() {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(message) = serde_json::from_str::<serde_json::Value>(&line?) else {
                continue;
            };
            let is_cdylib = message["target"]["kind"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().any(|k| k == "cdylib"));
            if message["reason"] == "compiler-artifact" && is_cdylib {
                component = message["filenames"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|f| f.as_str())
                    .find(|f| f.ends_with(".wasm"))
                    .map(PathBuf::from);
            }
        }
    }
    let status = child.wait()?;
    Ok(component.filter(|_| status.success()))
}

/// The SDK's files, as the crate has them (this module's tests keep the list complete and
/// the SDK's `wit/` identical to the workspace's).
const SDK_FILES: [(&str, &str); 5] = [
    (
        "src/jobs.rs",
        include_str!("../../../../guest-sdk/src/jobs.rs"),
    ),
    (
        "src/lib.rs",
        include_str!("../../../../guest-sdk/src/lib.rs"),
    ),
    (
        "src/run.rs",
        include_str!("../../../../guest-sdk/src/run.rs"),
    ),
    (
        "src/steps.rs",
        include_str!("../../../../guest-sdk/src/steps.rs"),
    ),
    (
        "wit/jobhost.wit",
        include_str!("../../../../guest-sdk/wit/jobhost.wit"),
    ),
];

/// Brings the vendored SDK of the Rust project in `project` to this host's: each file
/// written only where it differs (so cargo rebuilds nothing when nothing changed), and a
/// file this SDK no longer has removed. Returns the files changed, relative to the SDK.
pub(super) fn update_sdk(project: &Path) -> Result<Vec<String>, ScaffoldError> {
    let sdk = project.join(SDK_DIR);
    let ours = sdk.join("Cargo.toml");
    let manifest = std::fs::read_to_string(&ours).unwrap_or_default();
    // Only a directory that holds our SDK is touched: never another crate by that path.
    if !manifest.contains("name = \"jobhost-guest\"") {
        return Err(ScaffoldError::NoSdk(sdk));
    }
    let wanted: Vec<(String, String)> = std::iter::once(("Cargo.toml".to_string(), sdk_manifest()))
        .chain(
            SDK_FILES
                .iter()
                .map(|(p, t)| ((*p).to_string(), (*t).to_string())),
        )
        .collect();
    let mut changed = Vec::new();
    let failed = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ScaffoldError::Write { path, source }
    };
    for (relative, text) in &wanted {
        let path = sdk.join(relative);
        if std::fs::read_to_string(&path).ok().as_deref() == Some(text.as_str()) {
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(failed(parent))?;
        }
        std::fs::write(&path, text).map_err(failed(&path))?;
        changed.push(relative.clone());
    }
    for dir in ["src", "wit"] {
        let Ok(entries) = std::fs::read_dir(sdk.join(dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let relative = format!("{dir}/{}", entry.file_name().to_string_lossy());
            if !wanted.iter().any(|(p, _)| *p == relative) {
                std::fs::remove_file(entry.path()).map_err(failed(&entry.path()))?;
                changed.push(relative);
            }
        }
    }
    Ok(changed)
}

/// The SDK's `Cargo.toml` for a project of its own: the workspace's fields spelled out
/// (this module's test checks them against the workspace's).
fn sdk_manifest() -> String {
    format!(
        r#"[package]
name = "jobhost-guest"
description = "Write jobhost jobs in Rust"
version = "{SDK_VERSION}"
edition = "2024"
license = "Apache-2.0"
rust-version = "1.95"

[dependencies]
serde = {{ version = "1", features = ["derive"] }}
serde_json = "1"
serde_path_to_error = "0.1"
wit-bindgen = "0.46"
"#
    )
}

pub(super) fn project(job: &str, names: &Names) -> Vec<(String, String)> {
    let Names {
        package,
        type_name,
        table,
        ..
    } = names;
    let mut files = vec![
        (
            "Cargo.toml".to_string(),
            format!(
                r#"[package]
name = "{package}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
crate-type = ["cdylib"]

[dependencies]
# The guest SDK of the host that made this project (`host new`, jobhost {SDK_VERSION}).
jobhost-guest = {{ path = "{SDK_DIR}" }}
serde = {{ version = "1", features = ["derive"] }}
serde_json = "1"

# A component is small and quick to load: optimised for size, whole-program, its debug
# info stripped (its function names kept, so a trap's backtrace names them).
[profile.release]
opt-level = "s"
lto = true
strip = "debuginfo"
codegen-units = 1

# A workspace of its own, wherever it is created.
[workspace]
"#
            ),
        ),
        (
            "src/lib.rs".to_string(),
            format!(
                r#"//! `{job}`: logs, reads its payload, and records each item in one fenced
//! transaction — every row commits, or none does if the attempt lost its lease.

use jobhost_guest::{{Context, Job, JobError, Outcome, db, log}};
use serde::Deserialize;

#[derive(Deserialize)]
struct Payload {{
    /// What to record, one row each.
    items: Vec<String>,
}}

struct {type_name};

impl Job for {type_name} {{
    type Payload = Payload;

    fn run(ctx: Context<Payload>) -> Result<Outcome, JobError> {{
        log::info(&format!("recording {{}} items", ctx.payload.items.len()));
        let tx = db::begin()?;
        for item in &ctx.payload.items {{
            tx.execute(
                "INSERT INTO {table} (run_id, item) VALUES ($1, $2)",
                &[ctx.run_id.as_str().into(), item.as_str().into()],
            )?;
        }}
        tx.commit()?;
        Ok(Outcome::Done)
    }}
}}

jobhost_guest::export_job!({type_name});
"#
            ),
        ),
        (
            "jobhost.toml".to_string(),
            super::manifest(job, &super::Lang::Rust.component(names), table),
        ),
        super::migration(job, table),
        super::cases(table, "at items[0]"),
        (".gitignore".to_string(), "/target\n/.jobhost\n".to_string()),
        (
            "README.md".to_string(),
            format!(
                r#"# {job}

A jobhost job, written in Rust against the guest SDK in `{SDK_DIR}` (jobhost
{SDK_VERSION}).

```sh
host build                                   # the component, and what it can touch
host test                                    # the cases in tests.toml, each on a throwaway database
host run {job} --manifest jobhost.toml       # one run, on a database in .jobhost/
```

`host build` runs `cargo build --release --target wasm32-wasip2` (installing the target
if it is missing) and prints the component's path and the grants a job running it needs.
The job itself is `src/lib.rs`; its table, `migrations/`; how it runs, `jobhost.toml`.
"#
            ),
        ),
        (format!("{SDK_DIR}/Cargo.toml"), sdk_manifest()),
    ];
    files.extend(
        SDK_FILES
            .iter()
            .map(|(path, text)| (format!("{SDK_DIR}/{path}"), (*text).to_string())),
    );
    files
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authoring::languages::{Lang, Names, create};

    fn workspace() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    #[test]
    fn the_embedded_sdk_is_the_crate_whole() {
        let sdk = workspace().join("guest-sdk");
        let mut on_disk = Vec::new();
        for dir in ["src", "wit"] {
            for entry in std::fs::read_dir(sdk.join(dir)).unwrap() {
                let name = entry.unwrap().file_name().into_string().unwrap();
                on_disk.push(format!("{dir}/{name}"));
            }
        }
        on_disk.sort();
        let mut embedded: Vec<String> = SDK_FILES.iter().map(|(p, _)| p.to_string()).collect();
        embedded.sort();
        assert_eq!(embedded, on_disk, "add the SDK's new files to SDK_FILES");
    }

    #[test]
    fn the_sdk_carries_the_workspaces_wit() {
        let names = |dir: &str| -> Vec<String> {
            let mut names: Vec<String> = std::fs::read_dir(workspace().join(dir))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            names.sort();
            names
        };
        assert_eq!(names("guest-sdk/wit"), names("wit"));
        for file in names("wit") {
            let read = |dir: &str| std::fs::read_to_string(workspace().join(dir).join(&file));
            assert_eq!(
                read("guest-sdk/wit").unwrap(),
                read("wit").unwrap(),
                "copy wit/{file} to guest-sdk/wit/"
            );
        }
    }

    #[test]
    fn the_sdk_manifest_spells_out_the_workspaces_fields() {
        let read = |path: PathBuf| -> toml::Table {
            toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
        };
        let root = read(workspace().join("Cargo.toml"));
        let crate_manifest = read(workspace().join("guest-sdk/Cargo.toml"));
        let written: toml::Table = toml::from_str(&sdk_manifest()).unwrap();
        let package = &root["workspace"]["package"];
        for field in ["version", "edition", "license", "rust-version"] {
            assert_eq!(written["package"][field], package[field], "{field}");
        }
        assert_eq!(
            written["package"]["description"],
            crate_manifest["package"]["description"]
        );
        let shared = &root["workspace"]["dependencies"];
        let deps = written["dependencies"].as_table().unwrap();
        let wanted = crate_manifest["dependencies"].as_table().unwrap();
        assert_eq!(
            deps.keys().collect::<Vec<_>>(),
            wanted.keys().collect::<Vec<_>>()
        );
        for name in wanted.keys() {
            assert_eq!(deps[name], shared[name], "{name}");
        }
    }

    #[test]
    fn a_project_is_named_from_its_job() {
        let names = Names::of("nightly.report-v2");
        assert_eq!(
            (
                names.package.as_str(),
                names.lib.as_str(),
                names.type_name.as_str(),
                names.table.as_str()
            ),
            (
                "nightly-report-v2",
                "nightly_report_v2",
                "NightlyReportV2",
                "nightly_report_v2_items"
            )
        );
        assert_eq!(Names::of("7up").package, "job-7up");
        assert_eq!(Names::of("7up").table, "job_7up_items");
    }

    #[test]
    fn the_sdk_is_brought_up_to_date_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("demo");
        create("demo", &project, Lang::Rust).unwrap();
        assert_eq!(update_sdk(&project).unwrap(), Vec::<String>::new());
        let sdk = project.join(SDK_DIR);
        std::fs::write(sdk.join("src/lib.rs"), "// an older SDK").unwrap();
        std::fs::write(sdk.join("src/gone.rs"), "// a file dropped since").unwrap();
        assert_eq!(update_sdk(&project).unwrap(), ["src/lib.rs", "src/gone.rs"]);
        assert_eq!(
            std::fs::read_to_string(sdk.join("src/lib.rs")).unwrap(),
            include_str!("../../../../guest-sdk/src/lib.rs")
        );
        assert!(!sdk.join("src/gone.rs").exists());
        let elsewhere = dir.path().join("other");
        std::fs::create_dir_all(elsewhere.join(SDK_DIR)).unwrap();
        std::fs::write(
            elsewhere.join(SDK_DIR).join("Cargo.toml"),
            "[package]\nname = \"x\"",
        )
        .unwrap();
        assert!(matches!(
            update_sdk(&elsewhere),
            Err(ScaffoldError::NoSdk(_))
        ));
    }

    #[test]
    fn a_new_project_never_writes_over_anything() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("demo");
        let created = create("demo", &project, Lang::Rust).unwrap();
        assert_eq!(created.component, "target/wasm32-wasip2/release/demo.wasm");
        assert!(
            project
                .join("vendor/jobhost-guest/wit/jobhost.wit")
                .exists()
        );
        let before = std::fs::read_to_string(project.join("src/lib.rs")).unwrap();
        assert!(matches!(
            create("demo", &project, Lang::Rust),
            Err(ScaffoldError::Exists(_))
        ));
        assert_eq!(
            std::fs::read_to_string(project.join("src/lib.rs")).unwrap(),
            before
        );
        let refused = create("Demo", &dir.path().join("other"), Lang::Rust).unwrap_err();
        assert!(
            refused.to_string().contains("lower-case letters"),
            "{refused}"
        );
        assert!(!dir.path().join("other").exists());
    }
}
