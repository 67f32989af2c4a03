//! The languages jobs are written in, and `host new`: a job project an author can build
//! anywhere, with no checkout of jobhost around. The guest SDK this host speaks travels
//! inside the binary and is written into the project (`vendor/jobhost-guest` for Rust,
//! `jobhost.py` or `jobhost.js` beside the job for Python and JavaScript), so it builds
//! from the registries its language's tools already reach; a later host's `host new`
//! (or `host sdk`) carries that host's SDK.
//!
//! A language is a module of its own: the files of a new project, a build step, its SDK
//! (`rust`: cargo; `python`: componentize-py; `js`: componentize-js). Python and
//! JavaScript components are built against a world of only the capabilities their job is
//! granted (`world`), as their runtimes cannot leave an unused import out.

pub mod js;
pub mod python;
pub mod rust;
mod world;

use crate::rules::job::{JobError, validate_name};
use std::path::{Path, PathBuf};

/// The SDK's version: the host's own, as the workspace gives both one.
pub const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Where a new project keeps the SDK.
pub const SDK_DIR: &str = "vendor/jobhost-guest";

#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    #[error(transparent)]
    Name(#[from] JobError),
    #[error(
        "{0} already exists: `host new` never writes over anything; choose another name or --dir"
    )]
    Exists(PathBuf),
    #[error(
        "{0} holds no jobhost guest SDK: `host sdk` updates a project `host new` made (run it in the project)"
    )]
    NoSdk(PathBuf),
    #[error("cannot write the project at {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The languages a job is written in. Each is a plug-in of its own module: the files
/// `host new` writes, the step `host build` runs, the SDK `host sdk` updates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    Js,
}

/// Why `host build` made no component.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A tool the build needs could not be started or installed.
    #[error("{0}")]
    Tool(String),
    /// The project is not one `host build` can build.
    #[error("{0}")]
    Project(String),
    /// The tool ran and failed (its messages are above).
    #[error("the build failed ({0}'s messages are above)")]
    Failed(&'static str),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl Lang {
    /// The language of the project in `dir`, by the file its build starts from.
    pub fn of_project(dir: &Path) -> Option<Lang> {
        if dir.join("Cargo.toml").is_file() {
            Some(Lang::Rust)
        } else if dir.join(python::ENTRY).is_file() {
            Some(Lang::Python)
        } else if dir.join(js::ENTRY).is_file() {
            Some(Lang::Js)
        } else {
            None
        }
    }

    fn project(self, job: &str, names: &Names) -> Vec<(String, String)> {
        match self {
            Lang::Rust => rust::project(job, names),
            Lang::Python => python::project(job, names),
            Lang::Js => js::project(job, names),
        }
    }

    /// The component `host build` makes, relative to the project.
    fn component(self, names: &Names) -> String {
        match self {
            Lang::Rust => format!("target/wasm32-wasip2/release/{}.wasm", names.lib),
            Lang::Python | Lang::Js => format!("build/{}.wasm", names.lib),
        }
    }

    /// Builds the project in `dir`: the component it made.
    pub fn build(self, dir: &Path) -> Result<PathBuf, BuildError> {
        match self {
            Lang::Rust => rust::build(dir),
            Lang::Python => python::build(dir),
            Lang::Js => js::build(dir),
        }
    }

    /// Brings the project's vendored SDK to this host's; the files it changed.
    pub fn update_sdk(self, dir: &Path) -> Result<Vec<String>, ScaffoldError> {
        match self {
            Lang::Rust => rust::update_sdk(dir),
            Lang::Python => python::update_sdk(dir),
            Lang::Js => js::update_sdk(dir),
        }
    }

    /// Where the project keeps the SDK (a directory, or the SDK's one file).
    pub fn sdk_dir(self) -> &'static str {
        match self {
            Lang::Rust => SDK_DIR,
            Lang::Python => "jobhost.py",
            Lang::Js => "jobhost.js",
        }
    }
}

/// What `host new` made.
#[derive(Debug)]
pub struct Created {
    pub dir: PathBuf,
    /// The component `host build` makes, relative to the project.
    pub component: String,
    /// The table its migration creates and its job writes.
    pub table: String,
}

/// Writes a new project for job `name` into `dir`, which must not exist yet. On any
/// failure nothing of it is left behind.
pub fn create(name: &str, dir: &Path, lang: Lang) -> Result<Created, ScaffoldError> {
    validate_name(name)?;
    if dir.symlink_metadata().is_ok() {
        return Err(ScaffoldError::Exists(dir.to_path_buf()));
    }
    let names = Names::of(name);
    let files = lang.project(name, &names);
    let write = |path: &Path, text: &str| -> std::io::Result<()> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, text)
    };
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| ScaffoldError::Write {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    // `create_dir` fails if something appeared meanwhile: never write into it.
    std::fs::create_dir(dir).map_err(|source| match source.kind() {
        std::io::ErrorKind::AlreadyExists => ScaffoldError::Exists(dir.to_path_buf()),
        _ => ScaffoldError::Write {
            path: dir.to_path_buf(),
            source,
        },
    })?;
    for (relative, text) in &files {
        let path = dir.join(relative);
        if let Err(source) = write(&path, text) {
            let _ = std::fs::remove_dir_all(dir);
            return Err(ScaffoldError::Write { path, source });
        }
    }
    Ok(Created {
        dir: dir.to_path_buf(),
        component: lang.component(&names),
        table: names.table,
    })
}

/// A new project's manifest: its one job, run from `component`, writing `table`.
fn manifest(job: &str, component: &str, table: &str) -> String {
    format!(
        r#"# The manifest of `{job}`; paths are relative to this file.
#   host run {job} --manifest jobhost.toml      runs it once
#   host serve --manifest jobhost.toml         serves it (schedules, kicks, the API)
[host]
migrations = "migrations"

[jobs.{job}]
component = "{component}"
payload = {{ items = ["first", "second"] }}
timeout = "30s"
retries = 2
grants.db = {{ write = ["{table}"] }}
"#
    )
}

/// A new project's migration: the table its job writes.
fn migration(job: &str, table: &str) -> (String, String) {
    (
        format!("migrations/0001_{table}.sql"),
        format!(
            "-- The table `{job}` writes (applied by `host migrate` and at start).\n\
             CREATE TABLE {table} (\n    run_id TEXT NOT NULL,\n    item   TEXT NOT NULL\n);\n"
        ),
    )
}

/// A new project's cases: its items recorded, and a payload of the wrong shape refused
/// with `bad_payload` (each language's own words for it).
fn cases(table: &str, bad_payload: &str) -> (String, String) {
    (
        "tests.toml".to_string(),
        format!(
            r#"# `host test` runs each case on a throwaway database: the payload, statements to
# run first (`seed`), and what must hold afterwards. A NULL cell is written "<null>".
[[case]]
name = "records every item"
payload = {{ items = ["first", "second"] }}
[case.expect]
status = "succeeded"
attempts = 1
log = ["recording 2 items"]
rows = {{ "SELECT item FROM {table} ORDER BY item" = [["first"], ["second"]] }}

[[case]]
name = "a payload that does not decode fails at once"
payload = {{ items = [7] }}
[case.expect]
code = "unrecoverable"
error = "{bad_payload}"
attempts = 1
"#
        ),
    )
}

/// The job a Python or JavaScript project builds (its manifest's only job, or the one
/// named after the project's directory), and the component path the manifest gives it.
fn job_to_build(dir: &Path) -> Result<(crate::rules::job::JobSpec, PathBuf), BuildError> {
    let path = dir.join("jobhost.toml");
    let manifest = crate::service::manifest::Manifest::load(&path).map_err(|e| {
        BuildError::Project(format!(
            "{}: {e} (the build reads the job's grants from it)",
            path.display()
        ))
    })?;
    let named = dir
        .canonicalize()
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()));
    let spec = match &manifest.jobs[..] {
        [only] => only.clone(),
        jobs => jobs
            .iter()
            .find(|j| Some(&j.name) == named.as_ref())
            .cloned()
            .ok_or_else(|| {
                BuildError::Project(format!(
                    "{} has {} jobs: `host build` builds a project's one job (or the one named after its directory)",
                    path.display(),
                    jobs.len()
                ))
            })?,
    };
    // Absolute: the build tool runs in the project, wherever `host build` was started.
    let component = std::path::absolute(&spec.component)?;
    Ok((spec, component))
}

/// Runs a build tool with its output on the terminal (stderr): an error if it could not
/// start or failed.
fn run_tool(mut command: std::process::Command, name: &'static str) -> Result<(), BuildError> {
    // Its output goes to stderr: stdout is `host build`'s own (`--json` for tools).
    let status = command
        .stdout(std::io::stderr())
        .status()
        .map_err(|e| BuildError::Tool(format!("cannot run {name}: {e}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(BuildError::Failed(name))
    }
}

/// Writes `text` as the project's SDK file `file` where it differs; only over a file
/// that is the SDK (its text names `marker`).
fn update_file(
    dir: &Path,
    file: &str,
    text: &str,
    marker: &str,
) -> Result<Vec<String>, ScaffoldError> {
    let path = dir.join(file);
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    if !current.contains(marker) {
        return Err(ScaffoldError::NoSdk(path));
    }
    if current == text {
        return Ok(Vec::new());
    }
    std::fs::write(&path, text).map_err(|source| ScaffoldError::Write { path, source })?;
    Ok(vec![file.to_string()])
}

/// The names a job's name gives its project: a package name cargo takes, the library's
/// (and so the component file's) name, a type name and a table name.
struct Names {
    package: String,
    lib: String,
    type_name: String,
    table: String,
}

impl Names {
    fn of(job: &str) -> Names {
        // Job names may hold '.', and may start with a digit; package names and SQL
        // identifiers may not.
        let mut package: String = job
            .chars()
            .map(|c| if c == '.' { '-' } else { c })
            .collect();
        if package.starts_with(|c: char| c.is_ascii_digit()) {
            package.insert_str(0, "job-");
        }
        let lib = package.replace('-', "_");
        // Never empty: a job name starts with a letter or a digit (and `job-` is put
        // before a digit).
        let type_name: String = lib
            .split('_')
            .filter(|w| !w.is_empty())
            .map(|w| {
                let mut chars = w.chars();
                chars
                    .next()
                    .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
                    .unwrap_or_default()
            })
            .collect();
        Names {
            table: format!("{lib}_items"),
            package,
            lib,
            type_name,
        }
    }
}

#[cfg(test)]
mod tests {
    /// The Python and JavaScript SDKs check a `Defer` where the job makes it, against the
    /// host's own bound: they must not drift apart.
    #[test]
    fn the_sdks_refuse_the_defers_the_host_refuses() {
        let seconds = crate::sandbox::engine::attempt::MAX_DEFER.as_secs();
        assert!(super::python::SDK.contains(&format!("\n_MAX_DEFER_SECONDS = {seconds}\n")));
        assert!(super::js::SDK.contains(&format!("\nconst MAX_DEFER_SECONDS = {seconds};\n")));
    }
}
