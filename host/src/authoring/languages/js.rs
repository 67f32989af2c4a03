//! JavaScript jobs: `job.js` exports `run(ctx)` against the SDK `jobhost.js` (written into
//! the project, embedded in the binary); `host build` builds them with componentize-js,
//! installed on first use into the project's own `node_modules` (`npm install` of the
//! project's `package.json`), never globally.
//!
//! The build copies the project's top-level modules and the SDK into `build/js`, writes
//! `capabilities.js` (each granted interface imported, the others `undefined`: a module
//! importing an interface its world lacks does not build) and an entry that hands `run`
//! to the SDK's export, and builds against a world of only the job's grants (`world`),
//! with HTTP off (`links` is how a job calls out). What the runtime would reach past the
//! sandbox, trapping the attempt, throws instead: the entry imports `refusals.js` first
//! (its `fetch` rejects), and `js_imports.mjs` rewrites each `import(...)` in the job's
//! modules to reject likewise and refuses a static import of a Node.js module.
//! `JOBHOST_JS_TOOLS` names a directory whose `node_modules` holds componentize-js, to use
//! instead of the project's (CI).

use super::{BuildError, Names, SDK_VERSION, ScaffoldError, world};
use crate::rules::grants::Grants;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The file a JavaScript job project starts from.
pub const ENTRY: &str = "job.js";
/// The componentize-js this host builds with.
pub const COMPONENTIZE_JS: &str = "0.23.0";
/// The SDK, as the host carries it.
pub const SDK: &str = include_str!("../../../../guest-sdk/js/jobhost.js");
const SDK_FILE: &str = "jobhost.js";
/// The module the entry imports before the job's: the platform's refusals, as errors.
const REFUSALS: &str = include_str!("../../../../guest-sdk/js/refusals.js");
/// The node script that rewrites the job's `import(...)`s to reject (`refusals.js`).
const IMPORTS: &str = include_str!("js_imports.mjs");
/// Where componentize-js's command is, under `node_modules`.
const CLI: &str = "node_modules/@bytecodealliance/componentize-js/src/cli.js";

/// The entry componentize-js builds from: `run` handed to the SDK's export.
const ENTRY_MODULE: &str = "// Written by `host build`: the component's export is job.js's run.\n\
import './refusals.js';\n\
import { run } from './job.js';\n\
import { handler as wrap } from './jobhost.js';\n\
\n\
export const handler = wrap(run);\n";

/// The `package.json` of a new project: componentize-js, pinned.
pub fn package_json(package: &str) -> String {
    format!(
        r#"{{
  "name": "{package}",
  "private": true,
  "type": "module",
  "devDependencies": {{
    "@bytecodealliance/componentize-js": "{COMPONENTIZE_JS}"
  }}
}}
"#
    )
}

pub(super) fn project(job: &str, names: &Names) -> Vec<(String, String)> {
    let Names { package, table, .. } = names;
    let component = super::Lang::Js.component(names);
    vec![
        (
            ENTRY.to_string(),
            format!(
                r#"// `{job}`: logs, reads its payload, and records each item in one fenced
// transaction: every row commits, or none does if the attempt lost its lease.

import {{ DONE, Unrecoverable, db, log }} from './jobhost.js';

export function run(ctx) {{
  const items = ctx.payload.items;
  if (!Array.isArray(items) || !items.every((item) => typeof item === 'string')) {{
    throw new Unrecoverable('items must be a list of strings');
  }}
  log.info(`recording ${{items.length}} items`);
  db.transaction((tx) => {{
    for (const item of items) {{
      tx.execute('INSERT INTO {table} (run_id, item) VALUES ($1, $2)', [ctx.runId, item]);
    }}
  }});
  return DONE;
}}
"#
            ),
        ),
        (SDK_FILE.to_string(), SDK.to_string()),
        ("package.json".to_string(), package_json(package)),
        (
            "jobhost.toml".to_string(),
            super::manifest(job, &component, table),
        ),
        super::migration(job, table),
        super::cases(table, "items must be a list of strings"),
        (
            ".gitignore".to_string(),
            "/build\n/node_modules\n/.jobhost\n".to_string(),
        ),
        (
            "README.md".to_string(),
            format!(
                r#"# {job}

A jobhost job in JavaScript, against the guest SDK in `jobhost.js` (jobhost {SDK_VERSION}).

```sh
host build                                   # the component, and what it can touch
host test                                    # the cases in tests.toml, each on a throwaway database
host run {job} --manifest jobhost.toml       # one run, on a database in .jobhost/
```

`host build` runs `npm install` on its first run (componentize-js {COMPONENTIZE_JS}, into
`node_modules`), then builds `{component}` against the capabilities `jobhost.toml`
grants the job (and no others). The job is `job.js`: `run(ctx)` returns `DONE`,
`new Continue(cursor)` or `new Defer(seconds)`, or throws `Failed` / `Unrecoverable`; any
other error fails the attempt with its stack in the log. Modules of your own go beside
`job.js` and are imported by a relative path.
"#
            ),
        ),
    ]
}

pub(super) fn build(dir: &Path) -> Result<PathBuf, BuildError> {
    let (spec, component) = super::job_to_build(dir)?;
    let out = dir.join("build");
    world::write(&out.join("wit"), &spec.grants)?;
    let modules = out.join("js");
    if modules.exists() {
        std::fs::remove_dir_all(&modules)?;
    }
    std::fs::create_dir_all(&modules)?;
    let mut copied = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let is_module = path.extension().is_some_and(|e| e == "js" || e == "mjs");
        if is_module && path.is_file() {
            let to = modules.join(path.file_name().expect("a file"));
            std::fs::copy(&path, &to)?;
            copied.push(to);
        }
    }
    // The project's own SDK if it has one (`host sdk` keeps it current), else the host's.
    if !dir.join(SDK_FILE).is_file() {
        std::fs::write(modules.join(SDK_FILE), SDK)?;
    }
    let cli = componentize_js(dir)?;
    let node = std::env::var_os("JOBHOST_NODE").unwrap_or_else(|| "node".into());
    let imports = out.join("imports.mjs");
    std::fs::write(&imports, IMPORTS)?;
    let mut rewrite = Command::new(&node);
    rewrite.arg(&imports).arg(&cli).args(&copied);
    super::run_tool(rewrite, "the import check")?;
    std::fs::write(modules.join("capabilities.js"), capabilities(&spec.grants))?;
    std::fs::write(modules.join("refusals.js"), REFUSALS)?;
    std::fs::write(modules.join("entry.js"), ENTRY_MODULE)?;
    if let Some(parent) = component.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut command = Command::new(node);
    command
        .current_dir(dir)
        .arg(cli)
        .args(["--wit", "build/wit", "--world-name", "job"])
        .args(["--disable", "http", "fetch-event", "--out"])
        .arg(&component)
        .arg("build/js/entry.js");
    super::run_tool(command, "componentize-js")?;
    // componentize-js says nothing when it fails to write: the component must be there.
    if !component.is_file() {
        return Err(BuildError::Failed("componentize-js"));
    }
    Ok(component)
}

/// The SDK's view of the capabilities: `log` and `run` (every job's) and those granted
/// imported, the others `undefined`.
fn capabilities(grants: &Grants) -> String {
    let version = world::version();
    let mut text =
        String::from("// Written by `host build`: the capabilities this job was granted.\n");
    let always = [("log", true), ("run", true)];
    for (name, on) in always.into_iter().chain(world::granted(grants)) {
        if on {
            text.push_str(&format!(
                "import * as {name} from 'jobhost:job/{name}@{version}';\n"
            ));
        } else {
            text.push_str(&format!("const {name} = undefined;\n"));
        }
    }
    text.push_str("export { log, run, db, files, links, steps, jobs };\n");
    text
}

/// componentize-js's command: under `JOBHOST_JS_TOOLS`, or the project's `node_modules`,
/// installed there on first use.
fn componentize_js(dir: &Path) -> Result<PathBuf, BuildError> {
    if let Some(tools) = std::env::var_os("JOBHOST_JS_TOOLS") {
        return Ok(PathBuf::from(tools).join(CLI));
    }
    let cli = dir.join(CLI);
    if cli.is_file() {
        return Ok(cli);
    }
    if !dir.join("package.json").is_file() {
        return Err(BuildError::Project(format!(
            "no package.json in {}: `host build` installs componentize-js from it (`host new --lang js` writes one)",
            dir.display()
        )));
    }
    eprintln!(
        "installing componentize-js into {} (npm install; the first build only)",
        dir.join("node_modules").display()
    );
    let npm = std::env::var_os("JOBHOST_NPM").unwrap_or_else(|| "npm".into());
    let mut install = Command::new(npm);
    install
        .current_dir(dir)
        .args(["install", "--no-audit", "--no-fund", "--loglevel=error"]);
    super::run_tool(install, "npm install")?;
    Ok(cli)
}

/// Brings the project's `jobhost.js` to this host's SDK.
pub(super) fn update_sdk(dir: &Path) -> Result<Vec<String>, ScaffoldError> {
    super::update_file(dir, SDK_FILE, SDK, "jobhost guest SDK for JavaScript")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capability_not_granted_is_not_imported() {
        let grants: Grants = toml::from_str("db = { write = [\"t\"] }").unwrap();
        let text = capabilities(&grants);
        assert!(text.contains("import * as log from 'jobhost:job/log@0.1.7';"));
        assert!(text.contains("import * as run from 'jobhost:job/run@0.1.7';"));
        assert!(text.contains("import * as db from 'jobhost:job/db@0.1.7';"));
        assert!(text.contains("const links = undefined;"));
        assert!(!text.contains("jobhost:job/links"));
    }
}
