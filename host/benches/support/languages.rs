//! The Python and JavaScript examples the sandbox benchmark runs beside the Rust guests,
//! built with `host build`'s own code (`Lang::build`) before any measurement starts, and
//! only when missing or older than the project's files.

use super::guests::{target_dir, workspace_dir};
use jobhost::authoring::languages::Lang;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The build tools `scripts/test` installs in the target directory, used unless the
/// environment names others: without them `host build` installs componentize-py into the
/// project and componentize-js into its `node_modules` on first use. Call before any
/// thread starts: it sets environment variables.
pub fn use_shared_tools() {
    let tools = target_dir().join("polyglot-tools");
    let py = tools.join("venv").join("bin").join("componentize-py");
    let js = tools.join("js");
    if std::env::var_os("JOBHOST_COMPONENTIZE_PY").is_none() && py.is_file() {
        // SAFETY: called first thing in `main`, before any other thread exists.
        unsafe { std::env::set_var("JOBHOST_COMPONENTIZE_PY", py) };
    }
    if std::env::var_os("JOBHOST_JS_TOOLS").is_none() && js.join("node_modules").is_dir() {
        // SAFETY: as above.
        unsafe { std::env::set_var("JOBHOST_JS_TOOLS", js) };
    }
}

/// The component of `examples/<example>` (a Python or JavaScript project), built first if
/// it is missing or older than a file of the project or the language's SDK.
pub fn polyglot(example: &str, lang: Lang) -> Result<PathBuf, String> {
    let dir = workspace_dir().join("examples").join(example);
    let sdk = workspace_dir().join("guest-sdk").join(match lang {
        Lang::Python => "python/jobhost.py",
        _ => "js/jobhost.js",
    });
    let newest_source = std::fs::read_dir(&dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|p| p.is_file())
        .chain([sdk])
        .filter_map(|p| modified(&p))
        .max();
    let built = std::fs::read_dir(dir.join("build"))
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|p| p.extension().is_some_and(|e| e == "wasm"));
    if let Some(built) = built
        && modified(&built) >= newest_source
    {
        return Ok(built);
    }
    eprintln!("building examples/{example} (host build)");
    lang.build(&dir)
        .map_err(|e| format!("building examples/{example} failed: {e}"))?
        .canonicalize()
        .map_err(|e| format!("examples/{example}'s component is missing after its build: {e}"))
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}
