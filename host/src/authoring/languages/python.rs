//! Python jobs: `app.py` defines `run(ctx)` against the SDK `jobhost.py` (written into
//! the project, embedded in the binary); `host build` builds them with componentize-py,
//! installed on first use into the project's own virtualenv (`.venv`), never globally.
//!
//! The build writes a world of only the job's grants (`world`), an entry module that
//! hands `app.run` to the SDK's export, and runs componentize-py with the entry, the
//! SDK and the project on the module path. `JOBHOST_COMPONENTIZE_PY` names a
//! componentize-py to use instead of the project's (a shared install, for CI).

use super::{BuildError, Names, SDK_VERSION, ScaffoldError, world};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The file a Python job project starts from.
pub const ENTRY: &str = "app.py";
/// The componentize-py this host builds with (its CPython and WASI versions load here).
pub const COMPONENTIZE_PY: &str = "0.25.1";
/// The SDK, as the host carries it.
pub const SDK: &str = include_str!("../../../../guest-sdk/python/jobhost.py");
const SDK_FILE: &str = "jobhost.py";

/// The module componentize-py builds from: `app.run` handed to the SDK's export.
const ENTRY_MODULE: &str = "# Written by `host build`: the component's export is app.run.\n\
import jobhost\n\
import app\n\
\n\
Handler = jobhost.handler(app.run)\n";

pub(super) fn project(job: &str, names: &Names) -> Vec<(String, String)> {
    let Names { table, .. } = names;
    let component = super::Lang::Python.component(names);
    vec![
        (
            ENTRY.to_string(),
            format!(
                r#""""`{job}`: logs, reads its payload, and records each item in one fenced
transaction: every row commits, or none does if the attempt lost its lease."""

import jobhost
from jobhost import db, log


def run(ctx):
    items = ctx.payload["items"]
    if not all(isinstance(item, str) for item in items):
        raise jobhost.Unrecoverable("items must be a list of strings")
    log.info(f"recording {{len(items)}} items")
    with db.transaction() as tx:
        for item in items:
            tx.execute(
                "INSERT INTO {table} (run_id, item) VALUES ($1, $2)",
                [ctx.run_id, item],
            )
    return jobhost.DONE
"#
            ),
        ),
        (SDK_FILE.to_string(), SDK.to_string()),
        (
            "jobhost.toml".to_string(),
            super::manifest(job, &component, table),
        ),
        super::migration(job, table),
        super::cases(table, "items must be a list of strings"),
        (
            ".gitignore".to_string(),
            "/build\n/.venv\n/.jobhost\n__pycache__/\n".to_string(),
        ),
        (
            "README.md".to_string(),
            format!(
                r#"# {job}

A jobhost job in Python, against the guest SDK in `jobhost.py` (jobhost {SDK_VERSION}).

```sh
host build                                   # the component, and what it can touch
host test                                    # the cases in tests.toml, each on a throwaway database
host run {job} --manifest jobhost.toml       # one run, on a database in .jobhost/
```

`host build` installs componentize-py {COMPONENTIZE_PY} into `.venv` on its first run, then
builds `{component}` against the capabilities `jobhost.toml` grants the job (and no
others). The job is `app.py`: `run(ctx)` returns `jobhost.DONE`, `jobhost.Continue(cursor)`
or `jobhost.Defer(seconds)`, or raises `jobhost.Failed` / `jobhost.Unrecoverable`; any
other exception fails the attempt with its traceback in the log. Import what the job
needs at the top of `app.py`: the component holds only modules imported when it is built.
"#
            ),
        ),
    ]
}

pub(super) fn build(dir: &Path) -> Result<PathBuf, BuildError> {
    let (spec, component) = super::job_to_build(dir)?;
    let out = dir.join("build");
    world::write(&out.join("wit"), &spec.grants)?;
    let modules = out.join("py");
    std::fs::create_dir_all(&modules)?;
    std::fs::write(modules.join("jobhost_entry.py"), ENTRY_MODULE)?;
    // The project's own SDK if it has one (`host sdk` keeps it current), else the host's.
    let sdk = modules.join(SDK_FILE);
    if dir.join(SDK_FILE).is_file() {
        let _ = std::fs::remove_file(&sdk);
    } else {
        std::fs::write(&sdk, SDK)?;
    }
    let (tool, venv) = componentize_py(dir)?;
    if let Some(parent) = component.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut command = Command::new(&tool);
    command
        .current_dir(dir)
        .args(["-d", "build/wit", "-w", "job", "componentize"])
        .args(["-p", "build/py", "-p", ".", "jobhost_entry", "-o"])
        .arg(&component);
    // Only the virtualenv's packages are put in the component, never the system's.
    if let Some(venv) = venv {
        command.env("VIRTUAL_ENV", venv);
    }
    super::run_tool(command, "componentize-py")?;
    Ok(component)
}

/// componentize-py, and the virtualenv it lives in: `JOBHOST_COMPONENTIZE_PY`, or the
/// project's `.venv`, installed there on first use.
fn componentize_py(dir: &Path) -> Result<(PathBuf, Option<PathBuf>), BuildError> {
    if let Some(tool) = std::env::var_os("JOBHOST_COMPONENTIZE_PY") {
        let tool = PathBuf::from(tool);
        let venv = tool.parent().and_then(Path::parent).map(Path::to_path_buf);
        return Ok((tool, venv));
    }
    let venv = dir.join(".venv");
    let tool = venv.join("bin/componentize-py");
    let installed = venv.join(format!(".componentize-py-{COMPONENTIZE_PY}"));
    if tool.is_file() && installed.is_file() {
        return Ok((tool, Some(venv)));
    }
    eprintln!(
        "installing componentize-py {COMPONENTIZE_PY} into {} (the first build only)",
        venv.display()
    );
    if !venv.join("bin/python").exists() {
        let python = std::env::var_os("JOBHOST_PYTHON").unwrap_or_else(|| "python3".into());
        let mut make = Command::new(python);
        make.arg("-m").arg("venv").arg(&venv);
        super::run_tool(make, "python3 -m venv")?;
    }
    let mut install = Command::new(venv.join("bin/python"));
    install
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .arg(format!("componentize-py=={COMPONENTIZE_PY}"));
    super::run_tool(install, "pip")?;
    std::fs::write(&installed, "")?;
    Ok((tool, Some(venv)))
}

/// Brings the project's `jobhost.py` to this host's SDK.
pub(super) fn update_sdk(dir: &Path) -> Result<Vec<String>, ScaffoldError> {
    super::update_file(dir, SDK_FILE, SDK, "jobhost guest SDK for Python")
}
