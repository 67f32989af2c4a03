//! The world a Python or JavaScript job is built against: `log` and `run` (every job may
//! import them) and only the capabilities its job is granted. Their runtimes import every
//! interface of the world they are built for, used or not, so building against the whole
//! `jobhost:job/job` world would make every job need every grant.

use crate::rules::grants::Grants;

/// The WIT package the world is built from: the host's own.
pub const JOBHOST_WIT: &str = include_str!("../../../../wit/jobhost.wit");

/// The version of `jobhost:job` this host speaks (`0.1.7`).
pub(super) fn version() -> String {
    let (major, minor, patch) = crate::sandbox::engine::bindings::PACKAGE_VERSION;
    format!("{major}.{minor}.{patch}")
}

/// Each capability interface, and whether `grants` gives the job it.
pub(super) fn granted(grants: &Grants) -> [(&'static str, bool); 5] {
    [
        ("db", grants.db.is_some()),
        ("files", grants.files.is_some()),
        ("links", grants.links.is_some()),
        ("steps", grants.steps),
        ("jobs", grants.jobs.is_some()),
    ]
}

/// The world's text, in a package of its own (`jobhost:build`) that depends on
/// `jobhost:job` at this host's version.
pub fn world(grants: &Grants) -> String {
    let version = version();
    let mut lines = vec![
        "package jobhost:build;".to_string(),
        String::new(),
        "/// What this job was granted, and nothing more (written by `host build`).".into(),
        "world job {".into(),
        format!("    import jobhost:job/log@{version};"),
        format!("    import jobhost:job/run@{version};"),
    ];
    for (interface, on) in granted(grants) {
        if on {
            lines.push(format!("    import jobhost:job/{interface}@{version};"));
        }
    }
    lines.push(format!("    export jobhost:job/handler@{version};"));
    lines.push("}".into());
    lines.join("\n") + "\n"
}

/// Writes the world and the package it depends on under `dir` (`dir/world.wit`,
/// `dir/deps/jobhost/jobhost.wit`), for a component tool's `-d dir`.
pub fn write(dir: &std::path::Path, grants: &Grants) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("deps/jobhost"))?;
    std::fs::write(dir.join("world.wit"), world(grants))?;
    std::fs::write(dir.join("deps/jobhost/jobhost.wit"), JOBHOST_WIT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_world_imports_what_was_granted_and_nothing_more() {
        let nothing = world(&Grants::default());
        assert!(
            nothing.contains("import jobhost:job/log@0.1.7;"),
            "{nothing}"
        );
        assert!(
            nothing.contains("import jobhost:job/run@0.1.7;"),
            "{nothing}"
        );
        assert!(nothing.contains("export jobhost:job/handler@0.1.7;"));
        assert!(!nothing.contains("/db@"));
        let grants: Grants = toml::from_str("db = { write = [\"t\"] }\nlinks = [\"api\"]").unwrap();
        let some = world(&grants);
        assert!(some.contains("import jobhost:job/db@0.1.7;"));
        assert!(some.contains("import jobhost:job/links@0.1.7;"));
        assert!(!some.contains("/files@") && !some.contains("/steps@"));
    }
}
