//! What a component may import and must export, checked before anything runs.
//!
//! Imports are deny-by-default: a component may import the WASI interfaces a sandboxed
//! job needs (clocks, random, stdio, and a filesystem with nothing in it), jobhost's `log`,
//! and each jobhost capability its job was granted. Anything else — sockets, HTTP, an
//! unknown interface, a capability not granted, another version of our package — is
//! refused with a one-line reason.

use crate::rules::grants::Grants;

/// The WIT package this host implements, as it appears in import and export names.
pub const PACKAGE: &str = "jobhost:job";
pub const PACKAGE_VERSION: (u64, u64, u64) = (0, 1, 7);

/// WASI interfaces a job may import (any 0.2.x version).
const WASI_ALLOWED: [&str; 27] = [
    "io/error",
    "io/poll",
    "io/streams",
    "clocks/wall-clock",
    "clocks/monotonic-clock",
    "random/random",
    "random/insecure",
    "random/insecure-seed",
    "cli/exit",
    "cli/environment",
    "cli/stdin",
    "cli/stdout",
    "cli/stderr",
    "cli/terminal-input",
    "cli/terminal-output",
    "cli/terminal-stdin",
    "cli/terminal-stdout",
    "cli/terminal-stderr",
    "filesystem/types",
    "filesystem/preopens",
    // Linked with every use refused (`engine::add_wasi`): a language runtime's libc may
    // import them even when the job never opens a socket.
    "sockets/network",
    "sockets/instance-network",
    "sockets/tcp",
    "sockets/tcp-create-socket",
    "sockets/udp",
    "sockets/udp-create-socket",
    "sockets/ip-name-lookup",
];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ContractError {
    #[error(
        "the component targets {PACKAGE}@{found}, but this host implements {PACKAGE}@{}.{}.x: rebuild it against a matching guest SDK",
        PACKAGE_VERSION.0,
        PACKAGE_VERSION.1
    )]
    Version { found: String },
    #[error(
        "the component does not export {PACKAGE}/handler: build it with the jobhost guest SDK (export_job!)"
    )]
    NoHandler,
    #[error("the component imports {0}, which jobs may not use{hint}", hint = instead(.0))]
    Forbidden(String),
    #[error(
        "the component imports the `{0}` capability, which this job was not granted: add {line} to its manifest entry (or --grant to host run)",
        line = grant_line(.0)
    )]
    NotGranted(String),
}

/// What a job uses in place of a forbidden import, where there is something.
fn instead(import: &str) -> &'static str {
    if import.starts_with("wasi:http/") {
        ": a job reaches outside services through `links` (grants.links and a [links.NAME] section)"
    } else if import.starts_with("wasi:filesystem/") {
        ": a job keeps files through `files` (grants.files)"
    } else {
        ""
    }
}

/// The manifest line that grants `capability`, for a refusal's message.
fn grant_line(capability: &str) -> &'static str {
    match capability {
        "db" => "`grants.db = { read = [\"TABLE\"], write = [\"TABLE\"] }`",
        "files" => "`grants.files = { read = [\"COLLECTION\"], write = [\"COLLECTION\"] }`",
        "links" => "`grants.links = [\"MOUNT\"]` (and a [links.MOUNT] section)",
        "steps" => "`grants.steps = true`",
        "jobs" => "`grants.jobs = [\"JOB\", \"event:NAME\"]`",
        _ => "its grant",
    }
}

/// A parsed import or export name: `namespace:package/interface@version`.
struct Name<'a> {
    package: &'a str,
    interface: &'a str,
    version: Option<&'a str>,
}

fn parse(name: &str) -> Option<Name<'_>> {
    let (path, version) = match name.split_once('@') {
        Some((path, version)) => (path, Some(version)),
        None => (name, None),
    };
    let (package, interface) = path.split_once('/')?;
    Some(Name {
        package,
        interface,
        version,
    })
}

fn compatible(version: Option<&str>) -> Result<(), ContractError> {
    let found = version.unwrap_or("(unversioned)");
    let parts: Vec<u64> = version
        .unwrap_or("")
        .split(['.', '-', '+'])
        .take(3)
        .filter_map(|p| p.parse().ok())
        .collect();
    let (major, minor, _) = PACKAGE_VERSION;
    let ok = match parts.as_slice() {
        [m, n, _] if major == 0 => *m == 0 && *n == minor,
        [m, _, _] => *m == major,
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(ContractError::Version {
            found: found.to_string(),
        })
    }
}

/// The capabilities a component imports, once its imports passed the check.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Imports {
    pub db: bool,
    pub files: bool,
    pub links: bool,
    pub steps: bool,
    pub jobs: bool,
}

/// Checks a component's imports and exports against what any job may use.
pub fn check<'a>(
    imports: impl Iterator<Item = &'a str>,
    exports: impl Iterator<Item = &'a str>,
) -> Result<Imports, ContractError> {
    let mut found = Imports::default();
    let mut handler = None;
    for export in exports {
        if let Some(name) =
            parse(export).filter(|n| n.package == PACKAGE && n.interface == "handler")
        {
            handler = Some(name.version);
        }
    }
    compatible(handler.ok_or(ContractError::NoHandler)?)?;
    for import in imports {
        let Some(name) = parse(import) else {
            return Err(ContractError::Forbidden(import.to_string()));
        };
        if name.package == PACKAGE {
            compatible(name.version)?;
            match name.interface {
                // `run` reaches only the run's own row: every job may import it.
                "types" | "log" | "run" => {}
                "db" => found.db = true,
                "files" => found.files = true,
                "links" => found.links = true,
                "steps" => found.steps = true,
                "jobs" => found.jobs = true,
                _ => return Err(ContractError::Forbidden(import.to_string())),
            }
        } else if let Some(wasi) = name.package.strip_prefix("wasi:") {
            let interface = format!("{wasi}/{}", name.interface);
            let version_ok = name.version.is_some_and(|v| v.starts_with("0.2."));
            if !version_ok || !WASI_ALLOWED.contains(&interface.as_str()) {
                return Err(ContractError::Forbidden(import.to_string()));
            }
        } else {
            return Err(ContractError::Forbidden(import.to_string()));
        }
    }
    Ok(found)
}

/// A component's top-level import and export names, read without compiling it (nested
/// modules and components are its own business): what [`check`] takes, before a compile.
/// An unreadable component is refused in the parser's words.
pub fn names(bytes: &[u8]) -> Result<(Vec<String>, Vec<String>), String> {
    use wasmparser::{Parser, Payload};
    let unreadable = |e: wasmparser::BinaryReaderError| e.message().to_string();
    let (mut imports, mut exports) = (Vec::new(), Vec::new());
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.map_err(unreadable)? {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(section) if depth == 0 => {
                for import in section {
                    imports.push(import.map_err(unreadable)?.name.name.to_string());
                }
            }
            Payload::ComponentExportSection(section) if depth == 0 => {
                for export in section {
                    exports.push(export.map_err(unreadable)?.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    Ok((imports, exports))
}

/// Checks that every capability a component imports was granted to this job.
pub fn check_grants(imports: &Imports, grants: &Grants) -> Result<(), ContractError> {
    let missing = [
        // `files`, `steps` and `jobs` use db's transaction type, so a component built
        // against them imports db even when it never runs a statement (Python and
        // JavaScript components import whole interfaces): with any of them granted, db
        // loads without its own grant, and each statement is refused when called.
        (
            imports.db
                && grants.db.is_none()
                && grants.files.is_none()
                && !grants.steps
                && grants.jobs.is_none(),
            "db",
        ),
        (imports.files && grants.files.is_none(), "files"),
        (imports.links && grants.links.is_none(), "links"),
        (imports.steps && !grants.steps, "steps"),
        (imports.jobs && grants.jobs.is_none(), "jobs"),
    ];
    match missing.iter().find(|(missing, _)| *missing) {
        Some((_, capability)) => Err(ContractError::NotGranted((*capability).into())),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HANDLER: &str = "jobhost:job/handler@0.1.2";

    fn db_grant() -> Grants {
        let mut g = Grants::default();
        g.add_flag("db.write=t").unwrap();
        g
    }

    #[test]
    fn accepts_wasi_basics_log_and_granted_db() {
        let imports = [
            "wasi:io/streams@0.2.4",
            "wasi:cli/stdout@0.2.4",
            "wasi:filesystem/preopens@0.2.4",
            "jobhost:job/types@0.1.0",
            "jobhost:job/log@0.1.0",
            "jobhost:job/db@0.1.0",
        ];
        let got = check(imports.into_iter(), [HANDLER].into_iter()).unwrap();
        assert!(got.db);
        assert_eq!(check_grants(&got, &db_grant()), Ok(()));
        assert_eq!(
            check_grants(&got, &Grants::default()),
            Err(ContractError::NotGranted("db".into()))
        );
    }

    #[test]
    fn steps_must_be_granted() {
        let imports = ["jobhost:job/steps@0.1.2", "jobhost:job/db@0.1.2"];
        let got = check(imports.into_iter(), [HANDLER].into_iter()).unwrap();
        assert!(got.steps && got.db);
        assert_eq!(
            check_grants(&got, &db_grant()),
            Err(ContractError::NotGranted("steps".into()))
        );
        let mut granted = db_grant();
        granted.steps = true;
        assert_eq!(check_grants(&got, &granted), Ok(()));
        // Steps alone: db is there for the transaction type, its calls refused when made.
        let steps_only = Grants {
            steps: true,
            ..Grants::default()
        };
        assert_eq!(check_grants(&got, &steps_only), Ok(()));
    }

    #[test]
    fn refuses_what_jobs_may_not_use() {
        let refuse = |import: &str| check([import].into_iter(), [HANDLER].into_iter());
        assert_eq!(
            refuse("wasi:http/outgoing-handler@0.2.4"),
            Err(ContractError::Forbidden(
                "wasi:http/outgoing-handler@0.2.4".into()
            ))
        );
        // The refusal says what a job uses instead.
        assert_eq!(
            refuse("wasi:http/outgoing-handler@0.2.4")
                .unwrap_err()
                .to_string(),
            "the component imports wasi:http/outgoing-handler@0.2.4, which jobs may not use: a job reaches outside services through `links` (grants.links and a [links.NAME] section)"
        );
        // Sockets load (every use is refused when called).
        assert!(refuse("wasi:sockets/tcp@0.2.4").is_ok());
        assert!(
            refuse("acme:secret/api")
                .unwrap_err()
                .to_string()
                .ends_with("which jobs may not use")
        );
        assert!(matches!(
            refuse("wasi:http/outgoing-handler@0.2.4"),
            Err(ContractError::Forbidden(_))
        ));
        assert!(matches!(
            refuse("wasi:io/streams@0.3.0"),
            Err(ContractError::Forbidden(_))
        ));
        assert!(matches!(
            refuse("acme:evil/thing"),
            Err(ContractError::Forbidden(_))
        ));
        assert!(matches!(
            refuse("jobhost:job/db@0.2.0"),
            Err(ContractError::Version { .. })
        ));
    }

    #[test]
    fn checks_the_handler_export_and_its_version() {
        let none: [&str; 0] = [];
        assert_eq!(
            check(none.into_iter(), ["run"].into_iter()),
            Err(ContractError::NoHandler)
        );
        let err = check(none.into_iter(), ["jobhost:job/handler@0.2.0"].into_iter()).unwrap_err();
        assert!(err.to_string().contains("jobhost:job@0.2.0"), "{err}");
        assert!(check(none.into_iter(), ["jobhost:job/handler@0.1.3"].into_iter()).is_ok());
    }
}
