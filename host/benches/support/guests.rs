//! Finds the example guests the benchmarks run, building them first (before any
//! measurement starts, so no build competes for the CPU) if one is missing.

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn workspace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Where cargo puts the guests: `CARGO_TARGET_DIR` if set (it is passed on unchanged to
/// the guest build, which runs in the workspace root), else the workspace's `target`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => workspace_dir().join(dir),
        None => workspace_dir().join("target"),
    }
}

/// The absolute paths of the named guests' components, in order.
pub fn locate_or_build(names: &[&str]) -> Result<Vec<PathBuf>, String> {
    let dir = target_dir().join("wasm32-wasip2").join("guest");
    let paths: Vec<PathBuf> = names
        .iter()
        .map(|n| dir.join(format!("{n}.wasm")))
        .collect();
    if !paths.iter().all(|p| p.is_file()) {
        let mut args = vec!["build", "--profile", "guest", "--target", "wasm32-wasip2"];
        for name in names {
            args.extend(["-p", name]);
        }
        let command = format!("cargo {}", args.join(" "));
        eprintln!("guests missing in {}; running `{command}`", dir.display());
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args(&args)
            .current_dir(workspace_dir())
            .status()
            .map_err(|e| format!("cannot run `{command}`: {e}"))?;
        if !status.success() {
            return Err(format!(
                "building the guests failed (`{command}`: {status}); see cargo's output above \
                 (a missing target: `rustup target add wasm32-wasip2`)"
            ));
        }
    }
    paths
        .iter()
        .map(|p| {
            p.canonicalize()
                .map_err(|e| format!("{} is missing after the build: {e}", p.display()))
        })
        .collect()
}
