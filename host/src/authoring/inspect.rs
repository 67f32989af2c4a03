//! What a component can touch, read from its import and export names without compiling
//! it: `host inspect` and `host build` show it to an author, with the manifest lines a job
//! running it needs, and say plainly when this host would refuse it and why (the same
//! check a load runs, `engine::contract`).

use crate::sandbox::engine::bindings::{PACKAGE, PACKAGE_VERSION};
use crate::sandbox::engine::contract::{self, ContractError, Imports};
use wasmparser::{Parser, Payload};

/// Larger components are refused before they are parsed, as a load refuses them.
const MAX_COMPONENT: usize = 64 << 20;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InspectError {
    #[error("the component is larger than 64 MiB, which no host loads")]
    TooLarge,
    #[error(
        "not a WebAssembly component (a core module or another file): build it for wasm32-wasip2"
    )]
    NotComponent,
    #[error("not a valid WebAssembly component: {0}")]
    Malformed(String),
}

/// What one component imports and exports, and whether a host of this version loads it.
#[derive(Debug)]
pub struct Inspection {
    pub size: usize,
    /// The jobhost contract version its handler export names, if it exports one.
    pub wit_version: Option<String>,
    /// Every import, as the component names it (`jobhost:job/db@0.1.3`, `wasi:...`).
    pub imports: Vec<String>,
    /// The capabilities it imports, or why a host of this version refuses it.
    pub verdict: Result<Imports, ContractError>,
    /// Its largest core module (the job's code) carries a name section: a trap's
    /// backtrace names its functions rather than numbering them.
    pub function_names: bool,
}

impl Inspection {
    /// The contract this host speaks, for messages beside the component's own.
    pub fn host_wit_version() -> String {
        let (major, minor, patch) = PACKAGE_VERSION;
        format!("{PACKAGE}@{major}.{minor}.{patch}")
    }
}

/// Reads a component's top-level imports and exports (nested modules and components are
/// its own business) and checks them as a load would.
pub fn inspect(bytes: &[u8]) -> Result<Inspection, InspectError> {
    if bytes.len() > MAX_COMPONENT {
        return Err(InspectError::TooLarge);
    }
    if !wasmparser::Parser::is_component(bytes) {
        return Err(InspectError::NotComponent);
    }
    let mut imports = Vec::new();
    let mut exports = Vec::new();
    let mut depth = 0usize;
    // Each core module's size and whether it has a name section; for each nested module
    // or component open, the module's index (`None`: a component).
    let mut modules: Vec<(usize, bool)> = Vec::new();
    let mut open: Vec<Option<usize>> = Vec::new();
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(|e| InspectError::Malformed(e.message().to_string()))?;
        match payload {
            Payload::ModuleSection {
                unchecked_range, ..
            } => {
                modules.push((unchecked_range.len(), false));
                open.push(Some(modules.len() - 1));
                depth += 1;
            }
            Payload::ComponentSection { .. } => {
                open.push(None);
                depth += 1;
            }
            Payload::End(_) => {
                open.pop();
                depth = depth.saturating_sub(1);
            }
            Payload::CustomSection(section) if section.name() == "name" => {
                if let Some(Some(module)) = open.last() {
                    modules[*module].1 = true;
                }
            }
            Payload::ComponentImportSection(section) if depth == 0 => {
                for import in section {
                    let import =
                        import.map_err(|e| InspectError::Malformed(e.message().to_string()))?;
                    imports.push(import.name.name.to_string());
                }
            }
            Payload::ComponentExportSection(section) if depth == 0 => {
                for export in section {
                    let export =
                        export.map_err(|e| InspectError::Malformed(e.message().to_string()))?;
                    exports.push(export.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    let handler = format!("{PACKAGE}/handler@");
    let wit_version = exports
        .iter()
        .find_map(|e| e.strip_prefix(&handler))
        .map(str::to_string);
    let verdict = contract::check(
        imports.iter().map(String::as_str),
        exports.iter().map(String::as_str),
    );
    let function_names = modules
        .iter()
        .max_by_key(|(size, _)| *size)
        .is_some_and(|(_, named)| *named);
    Ok(Inspection {
        size: bytes.len(),
        wit_version,
        imports,
        verdict,
        function_names,
    })
}

/// The manifest lines a job running a component with these imports needs, one per
/// capability, with what each grant names.
pub fn grants_needed(imports: &Imports) -> Vec<(&'static str, &'static str)> {
    [
        (
            imports.db,
            "grants.db = { read = [\"...\"], write = [\"...\"] }",
            "the tables its statements read and write",
        ),
        (
            imports.files,
            "grants.files = { read = [\"...\"], write = [\"...\"], scan = [\"...\"] }",
            "the collections it reads, writes and lists",
        ),
        (
            imports.links,
            "grants.links = [\"...\"]",
            "the outside services it calls, each declared under [links.NAME]",
        ),
        (
            imports.steps,
            "grants.steps = true",
            "memoised steps and counters across passes",
        ),
        (
            imports.jobs,
            "grants.jobs = [\"...\"]",
            "the jobs it starts, and `event:NAME` for the events it emits",
        ),
    ]
    .into_iter()
    .filter(|(imported, _, _)| *imported)
    .map(|(_, line, what)| (line, what))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn component(imports: &[&str], handler: Option<&str>) -> Vec<u8> {
        let mut text = String::from("(component\n");
        for (i, name) in imports.iter().enumerate() {
            text.push_str(&format!("(import \"{name}\" (instance $i{i}))\n"));
        }
        if let Some(version) = handler {
            text.push_str(&format!(
                "(instance $h) (export \"{PACKAGE}/handler@{version}\" (instance $h))\n"
            ));
        }
        text.push(')');
        wat::parse_str(text).expect("a valid component")
    }

    #[test]
    fn a_job_names_its_capabilities_and_the_grants_they_need() {
        let bytes = component(
            &[
                "wasi:cli/stdout@0.2.6",
                "jobhost:job/log@0.1.3",
                "jobhost:job/db@0.1.3",
                "jobhost:job/steps@0.1.3",
            ],
            Some("0.1.3"),
        );
        let seen = inspect(&bytes).unwrap();
        assert_eq!(seen.wit_version.as_deref(), Some("0.1.3"));
        assert_eq!(seen.imports.len(), 4);
        let imports = seen.verdict.unwrap();
        let lines: Vec<&str> = grants_needed(&imports).iter().map(|(l, _)| *l).collect();
        assert_eq!(
            lines,
            [
                "grants.db = { read = [\"...\"], write = [\"...\"] }",
                "grants.steps = true"
            ]
        );
    }

    #[test]
    fn whether_the_jobs_module_keeps_its_function_names_is_seen() {
        let named = wat::parse_str(
            "(component (core module (func $small)) (core module (func $work) (func $more)))",
        )
        .unwrap();
        assert!(inspect(&named).unwrap().function_names);
        // Only a small module (an adapter, say) named: the job's own code is not.
        let body = "(func (result i64) i64.const 1234567890123)".repeat(20);
        let stripped = wat::parse_str(format!(
            "(component (core module (func $small)) (core module {body}))"
        ))
        .unwrap();
        assert!(!inspect(&stripped).unwrap().function_names);
        assert!(
            !inspect(&component(&[], Some("0.1.3")))
                .unwrap()
                .function_names
        );
    }

    #[test]
    fn a_component_this_host_refuses_says_why() {
        let newer = inspect(&component(&[], Some("0.9.0"))).unwrap();
        assert_eq!(newer.wit_version.as_deref(), Some("0.9.0"));
        assert!(matches!(newer.verdict, Err(ContractError::Version { .. })));
        let http = inspect(&component(&["wasi:http/types@0.2.6"], Some("0.1.3"))).unwrap();
        assert_eq!(
            http.verdict,
            Err(ContractError::Forbidden("wasi:http/types@0.2.6".into()))
        );
        let no_job = inspect(&component(&[], None)).unwrap();
        assert_eq!(no_job.verdict, Err(ContractError::NoHandler));
    }

    #[test]
    fn what_is_not_a_component_is_refused_in_words() {
        let module = wat::parse_str("(module)").unwrap();
        assert_eq!(inspect(&module).unwrap_err(), InspectError::NotComponent);
        assert_eq!(
            inspect(b"\0\0\0\0").unwrap_err(),
            InspectError::NotComponent
        );
        let mut cut = component(&["jobhost:job/db@0.1.3"], Some("0.1.3"));
        cut.truncate(cut.len() - 3);
        assert!(matches!(
            inspect(&cut).unwrap_err(),
            InspectError::Malformed(_)
        ));
    }
}
