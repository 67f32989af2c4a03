//! The job author's commands: `host wit`, `host new`, `host build`, `host inspect`
//! (`host test` is `cli::cases`).
//!
//! Exit codes: 0 done (and the component loads on this host), 1 the build failed or this
//! host would refuse the component, 2 bad input (a name, a directory, a file that is not
//! a component).

use super::Failure;
use crate::inspect::{InspectError, Inspection, grants_needed, inspect};
use crate::scaffold::{self, Lang};
use clap::Args;
use serde_json::json;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The WIT package this host speaks, as `host wit` hands it out.
pub const WIT: &str = include_str!("../../../wit/jobhost.wit");

/// The target every job is built for.
const TARGET: &str = "wasm32-wasip2";

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
    let created = scaffold::create(&args.name, &dir, args.lang).map_err(Failure::usage)?;
    let shown = created.dir.display();
    println!(
        "created job {} in {shown} (guest SDK {}, in {})",
        args.name,
        scaffold::SDK_VERSION,
        scaffold::SDK_DIR
    );
    // This binary by its full path: a `host` on the PATH is usually the DNS lookup tool.
    let host =
        std::env::current_exe().map_or_else(|_| "host".to_string(), |p| p.display().to_string());
    println!("next:");
    println!("  cd {shown}");
    println!("  {host} build    # builds {}", created.component);
    println!("  {host} test     # runs the cases in tests.toml");
    println!(
        "  {host} run {} --manifest jobhost.toml    # runs it once; it writes to {}",
        args.name, created.table
    );
    Ok(0)
}

/// `host sdk [DIR]`.
pub fn sdk(dir: &Path) -> Result<u8, Failure> {
    let changed = scaffold::update_sdk(dir).map_err(Failure::usage)?;
    if changed.is_empty() {
        println!(
            "the guest SDK in {} is up to date (jobhost {})",
            dir.join(scaffold::SDK_DIR).display(),
            scaffold::SDK_VERSION
        );
    } else {
        println!(
            "the guest SDK in {} is updated to jobhost {}; changed: {}",
            dir.join(scaffold::SDK_DIR).display(),
            scaffold::SDK_VERSION,
            changed.join(", ")
        );
    }
    Ok(0)
}

/// `host build [DIR]`: builds the job project in `dir` for its language, then shows what
/// the component can touch.
pub fn build(dir: &Path, as_json: bool) -> Result<u8, Failure> {
    if !dir.join("Cargo.toml").is_file() {
        return Err(Failure::usage(format!(
            "no job project in {}: `host build` looks for a Cargo.toml (a Rust job; `host new` makes one)",
            dir.display()
        )));
    }
    ensure_target()?;
    let component = cargo_build(dir)?;
    let Some(component) = component else {
        eprintln!("error: the build failed (cargo's messages are above)");
        return Ok(1);
    };
    show(&component, as_json)
}

/// `host inspect FILE`.
pub fn inspect_file(path: &Path, as_json: bool) -> Result<u8, Failure> {
    show(path, as_json)
}

fn show(path: &Path, as_json: bool) -> Result<u8, Failure> {
    let bytes = std::fs::read(path)
        .map_err(|e| Failure::usage(format!("cannot read {}: {e}", path.display())))?;
    let seen = inspect(&bytes)
        .map_err(|e: InspectError| Failure::usage(format!("{}: {e}", path.display())))?;
    if as_json {
        println!("{}", as_json_value(path, &seen));
    } else {
        print_human(path, &seen);
    }
    Ok(if seen.verdict.is_ok() { 0 } else { 1 })
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
    })
}

fn print_human(path: &Path, seen: &Inspection) {
    println!("component  {} ({})", path.display(), size(seen.size));
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
    crate::guest_text::for_terminal(&crate::guest_text::for_storage(text, 1024)).into_owned()
}

fn size(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / f64::from(1 << 20)),
        b if b >= 1 << 10 => format!("{} KiB", b.div_ceil(1 << 10)),
        b => format!("{b} bytes"),
    }
}

/// Installs the `wasm32-wasip2` target with rustup where it is missing.
fn ensure_target() -> Result<(), Failure> {
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
                Err(Failure {
                    exit: 1,
                    message: format!("could not install the {TARGET} target with rustup"),
                })
            }
        }
        // No rustup: a toolchain installed another way may have the target; cargo says
        // so if it has not.
        _ => Ok(()),
    }
}

/// `cargo build --release --target wasm32-wasip2` in `dir`, cargo's own messages on
/// stderr; the component it made, if it made one.
fn cargo_build(dir: &Path) -> Result<Option<PathBuf>, Failure> {
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
        .map_err(|e| Failure::usage(format!("cannot run cargo (is Rust installed?): {e}")))?;
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
