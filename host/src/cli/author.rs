//! The job author's commands: `host wit`, `host new`, `host build`, `host inspect`
//! (`host test` is `cli::cases`).
//!
//! Exit codes: 0 done (and the component loads on this host), 1 the build failed or this
//! host would refuse the component, 2 bad input (a name, a directory, a file that is not
//! a component).

use super::failure::Failure;
use super::global::Global;
use crate::authoring::inspect::{InspectError, Inspection, grants_needed, inspect};
use crate::authoring::languages::{self, BuildError, Lang};
use crate::sandbox::engine::{Engine, EngineSettings, LoadError};
use clap::Args;
use serde_json::json;
use std::path::{Path, PathBuf};

/// The WIT package this host speaks, as `host wit` hands it out.
pub const WIT: &str = include_str!("../../../wit/jobhost.wit");

#[derive(Args, Debug)]
pub struct NewArgs {
    /// The job's name: 1-64 lower-case letters, digits, '-', '_' or '.'.
    pub name: String,
    /// Where to create the project (default: a directory named after the job, here).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Lang::Rust)]
    pub lang: Lang,
}

/// `host wit [--out DIR]`: the contract, on stdout or as `DIR/jobhost.wit`.
pub fn wit(out: Option<PathBuf>) -> Result<u8, Failure> {
    match out {
        None => print!("{WIT}"),
        Some(dir) => {
            std::fs::create_dir_all(&dir)?;
            let path = dir.join("jobhost.wit");
            std::fs::write(&path, WIT)?;
            println!("{}", path.display());
        }
    }
    Ok(0)
}

/// `host new NAME`.
pub fn new(args: NewArgs) -> Result<u8, Failure> {
    let dir = args.dir.unwrap_or_else(|| PathBuf::from(&args.name));
    let created = languages::create(&args.name, &dir, args.lang).map_err(Failure::usage)?;
    let shown = created.dir.display();
    println!(
        "created job {} in {shown} (guest SDK {}, in {})",
        args.name,
        languages::SDK_VERSION,
        args.lang.sdk_dir()
    );
    // The commands as a person types them, whatever path this binary was called by.
    println!("next:");
    println!("  cd {shown}");
    println!("  host build    # builds {}", created.component);
    println!("  host test     # runs the cases in tests.toml");
    println!(
        "  host run {} --manifest jobhost.toml    # runs it once; it writes to {}",
        args.name, created.table
    );
    Ok(0)
}

/// The language of the project in `dir`, or the rule for one in words.
fn project_lang(dir: &Path, command: &str) -> Result<Lang, Failure> {
    Lang::of_project(dir).ok_or_else(|| {
        Failure::usage(format!(
            "no job project in {}: `host {command}` looks for Cargo.toml (Rust), app.py (Python) or job.js (JavaScript); `host new` makes one",
            dir.display()
        ))
    })
}

/// `host sdk [DIR]`.
pub fn sdk(dir: &Path) -> Result<u8, Failure> {
    let lang = project_lang(dir, "sdk")?;
    let changed = lang.update_sdk(dir).map_err(Failure::usage)?;
    let place = dir.join(lang.sdk_dir());
    if changed.is_empty() {
        println!(
            "the guest SDK in {} is up to date (jobhost {})",
            place.display(),
            languages::SDK_VERSION
        );
    } else {
        println!(
            "the guest SDK in {} is updated to jobhost {}; changed: {}",
            place.display(),
            languages::SDK_VERSION,
            changed.join(", ")
        );
    }
    Ok(0)
}

/// `host build [DIR]`: builds the job project in `dir` for its language, shows what the
/// component can touch and, if this host loads it, compiles it into the compile cache
/// (`--cache`, or the home's), so the `host run` and `host test` that follow start at once
/// rather than compile (many seconds for a Python or JavaScript component).
pub fn build(global: &Global, dir: &Path, as_json: bool) -> Result<u8, Failure> {
    let lang = project_lang(dir, "build")?;
    match lang.build(dir) {
        Ok(component) => {
            let (seen, code) = inspected(&component)?;
            let warmed = if seen.verdict.is_ok() {
                Some(warm(global, &component)?)
            } else {
                None
            };
            if as_json {
                let mut shown = as_json_value(&component, &seen);
                shown["cache"] = match &warmed {
                    Some(Ok((digest, compiled))) => json!({
                        "dir": global.cache_dir().display().to_string(),
                        "digest": digest,
                        "compiled": compiled,
                    }),
                    _ => serde_json::Value::Null,
                };
                println!("{shown}");
            } else {
                print_human(&component, &seen);
                print_warmed(global, warmed.as_ref());
            }
            Ok(match warmed {
                Some(Err(_)) => 1,
                _ => code,
            })
        }
        Err(BuildError::Failed(tool)) => {
            eprintln!("error: the build failed ({tool}'s messages are above)");
            Ok(1)
        }
        Err(BuildError::Project(message)) => Err(Failure::usage(message)),
        Err(other) => Err(Failure {
            exit: 1,
            message: other.to_string(),
        }),
    }
}

/// `host inspect FILE`.
pub fn inspect_file(path: &Path, as_json: bool) -> Result<u8, Failure> {
    show(path, as_json)
}

fn show(path: &Path, as_json: bool) -> Result<u8, Failure> {
    let (seen, code) = inspected(path)?;
    if as_json {
        println!("{}", as_json_value(path, &seen));
    } else {
        print_human(path, &seen);
    }
    Ok(code)
}

/// What the component at `path` imports, and the exit code that says whether this host
/// loads it.
fn inspected(path: &Path) -> Result<(Inspection, u8), Failure> {
    let bytes = std::fs::read(path)
        .map_err(|e| Failure::usage(format!("cannot read {}: {e}", path.display())))?;
    let seen = inspect(&bytes)
        .map_err(|e: InspectError| Failure::usage(format!("{}: {e}", path.display())))?;
    let code = if seen.verdict.is_ok() { 0 } else { 1 };
    Ok((seen, code))
}

/// Compiles the component into the compile cache, as `host run` would, under the same
/// limits: its digest and whether it was compiled now (`false`: it was there), or why it
/// cannot be.
fn warm(global: &Global, path: &Path) -> Result<Result<(String, bool), LoadError>, Failure> {
    let engine = Engine::new(&EngineSettings {
        cache_dir: Some(global.cache_dir()),
        compiler: Some(global.compiler()?),
        ..EngineSettings::default()
    })?;
    Ok(engine.warm(path))
}

fn print_warmed(global: &Global, warmed: Option<&Result<(String, bool), LoadError>>) {
    let dir = global.cache_dir();
    match warmed {
        Some(Ok((_, true))) => println!(
            "compiled   into {}: `host run` and `host test` here start at once",
            dir.display()
        ),
        Some(Ok((_, false))) => println!(
            "compiled   already, in {}: `host run` and `host test` here start at once",
            dir.display()
        ),
        Some(Err(e)) => println!("compiled   no: {e}"),
        None => {}
    }
}

fn capability_names(seen: &Inspection) -> Vec<&'static str> {
    let Ok(imports) = &seen.verdict else {
        return Vec::new();
    };
    [
        (imports.db, "db"),
        (imports.files, "files"),
        (imports.links, "links"),
        (imports.steps, "steps"),
        (imports.jobs, "jobs"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect()
}

fn as_json_value(path: &Path, seen: &Inspection) -> serde_json::Value {
    let grants: Vec<&str> = seen
        .verdict
        .as_ref()
        .map(|imports| grants_needed(imports).into_iter().map(|(l, _)| l).collect())
        .unwrap_or_default();
    json!({
        "path": path.display().to_string(),
        "size": seen.size,
        "wit_version": seen.wit_version,
        "host_wit_version": Inspection::host_wit_version(),
        "imports": seen.imports,
        "capabilities": capability_names(seen),
        "grants": grants,
        "loadable": seen.verdict.is_ok(),
        "refusal": seen.verdict.as_ref().err().map(ToString::to_string),
        "function_names": seen.function_names,
    })
}

fn print_human(path: &Path, seen: &Inspection) {
    println!(
        "component  {} ({})",
        path.display(),
        crate::rules::units::readable_size(seen.size as u64)
    );
    let theirs = seen
        .wit_version
        .as_deref()
        .map_or("no jobhost handler".to_string(), |v| {
            format!("jobhost:job@{}", shown_name(v))
        });
    println!(
        "contract   {theirs} (this host speaks {})",
        Inspection::host_wit_version()
    );
    if seen.function_names {
        println!("names      kept: a trap's backtrace names your functions");
    } else {
        println!(
            "names      stripped: a trap's backtrace can only number your functions (a Rust build keeps them with `strip = \"debuginfo\"` in its release profile, not `strip = true`)"
        );
    }
    match &seen.verdict {
        Err(refusal) => {
            println!("loads      no: {}", shown_name(&refusal.to_string()));
        }
        Ok(imports) => {
            let names = capability_names(seen);
            if names.is_empty() {
                println!("touches    nothing but its log: a job running it needs no grants");
                return;
            }
            println!("touches    {}", names.join(", "));
            println!("grants     a job running it needs, in its manifest entry:");
            let needed = grants_needed(imports);
            let width = needed.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
            for (line, what) in needed {
                println!("             {line:width$}   # {what}");
            }
        }
    }
}

/// The component's own text (a version, an import's name), bounded and escaped for the
/// terminal: it is whatever its author put there.
fn shown_name(text: &str) -> String {
    crate::rules::guest_text::for_terminal(&crate::rules::guest_text::for_storage(text, 1024))
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_components_own_names_are_bounded_and_escaped_before_they_are_printed() {
        assert_eq!(shown_name("0.1.3"), "0.1.3");
        assert_eq!(shown_name("x\u{1b}[2Jy"), "x\\u{1b}[2Jy");
        assert!(shown_name(&"n".repeat(1 << 20)).len() <= 1024);
    }
}
