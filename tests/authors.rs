//! The job author's path, outside this repository: `host new` makes a project in a temp
//! directory that names nothing of this checkout, `host build` builds it with cargo there
//! and shows what it can touch, and the project's own manifest runs it; `host inspect`
//! agrees with the examples' manifest; `host wit` hands out the contract.

use crate::common::{self, Backend, Home, guest, workspace};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            found.extend(files_under(&path));
        } else {
            found.push(path);
        }
    }
    found
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_job_builds_and_runs_outside_the_repository() {
    let home = Home::new(Backend::Sqlite).await;
    let place = tempfile::tempdir().unwrap();
    let project = place.path().join("demo");
    let new = |dir: &Path, name: &str| {
        home.host()
            .args(["new", name, "--dir"])
            .arg(dir)
            .output()
            .unwrap()
    };
    let created = new(&project, "demo");
    assert!(created.status.success(), "{}", text(&created));
    let checkout = std::fs::canonicalize(workspace()).unwrap();
    let checkout = checkout.to_str().unwrap();
    let files = files_under(&project);
    for expected in [
        "Cargo.toml",
        "src/lib.rs",
        "jobhost.toml",
        "migrations/0001_demo_items.sql",
        ".gitignore",
        "README.md",
        "tests.toml",
        "vendor/jobhost-guest/Cargo.toml",
        "vendor/jobhost-guest/wit/jobhost.wit",
    ] {
        assert!(files.contains(&project.join(expected)), "no {expected}");
    }
    for file in &files {
        let content = std::fs::read_to_string(file).unwrap();
        assert!(
            !content.contains(checkout),
            "{} names the checkout",
            file.display()
        );
    }

    // Nothing is written over; a name that is not a job's gets the rule in words.
    let lib_before = std::fs::read(project.join("src/lib.rs")).unwrap();
    let again = new(&project, "demo");
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(text(&again).contains("already exists"), "{}", text(&again));
    assert_eq!(
        std::fs::read(project.join("src/lib.rs")).unwrap(),
        lib_before
    );
    let bad = new(&place.path().join("bad"), "Demo!");
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad).contains("lower-case letters, digits"),
        "{}",
        text(&bad)
    );
    assert!(!place.path().join("bad").exists());

    // `host build`: cargo, in the project, with its own target directory.
    let built = home
        .host()
        .args(["build", "--json"])
        .arg(&project)
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", text(&built));
    let shown: Value = serde_json::from_slice(&built.stdout).expect("JSON");
    let component = project.join("target/wasm32-wasip2/release/demo.wasm");
    assert_eq!(shown["path"], component.display().to_string(), "{shown}");
    assert_eq!(shown["wit_version"], "0.1.7");
    assert_eq!(shown["loadable"], true);
    assert_eq!(
        shown["function_names"], true,
        "the release profile keeps the name section"
    );
    assert_eq!(shown["capabilities"], serde_json::json!(["db"]));
    assert_eq!(
        shown["grants"],
        serde_json::json!(["grants.db = { read = [\"...\"], write = [\"...\"] }"])
    );
    let human = home.host().arg("inspect").arg(&component).output().unwrap();
    assert!(human.status.success());
    assert!(text(&human).contains("touches    db"), "{}", text(&human));
    assert!(
        text(&human).contains("names      kept: a trap's backtrace names your functions"),
        "{}",
        text(&human)
    );

    // `host` run in the project, as its author runs it.
    let in_project = |args: &[&str]| {
        home.host()
            .current_dir(&project)
            .args(args)
            .output()
            .unwrap()
    };

    // Its own cases pass out of the box, each on a database of its own.
    let tested = in_project(&["test", "--json"]);
    assert!(tested.status.success(), "{}", text(&tested));
    let report: Value = serde_json::from_slice(&tested.stdout).unwrap();
    assert_eq!(
        (report["passed"].as_i64(), report["failed"].as_i64()),
        (Some(2), Some(0)),
        "{report}"
    );
    // The same cases on Postgres: a fresh database per case on the server `--db` names.
    let on_postgres = home
        .host()
        .current_dir(&project)
        .env("JOBHOST_DB", common::postgres_admin_url())
        .args(["test", "--json"])
        .output()
        .unwrap();
    assert!(on_postgres.status.success(), "{}", text(&on_postgres));
    // A wrong expected row: exit 1, the case named, expected against actual.
    let cases = std::fs::read_to_string(project.join("tests.toml")).unwrap();
    std::fs::write(
        project.join("tests.toml"),
        cases.replace(r#"[["first"], ["second"]]"#, r#"[["first"], ["third"]]"#),
    )
    .unwrap();
    let failing = in_project(&["test"]);
    let shown = text(&failing);
    assert_eq!(failing.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains("case \"records every item\" failed:"),
        "{shown}"
    );
    assert!(
        shown.contains(r#"expected: [["first"], ["third"]]"#)
            && shown.contains(r#"actual:   [["first"], ["second"]]"#),
        "{shown}"
    );
    assert!(shown.contains("1 of 2 cases passed"), "{shown}");
    // A case whose limits cannot be read: the file's mistake, exit 2, nothing run.
    std::fs::write(
        project.join("tests.toml"),
        format!("{cases}\n[case.limits]\nmemory = \"lots\"\n"),
    )
    .unwrap();
    let invalid = in_project(&["test"]);
    assert_eq!(invalid.status.code(), Some(2), "{}", text(&invalid));
    assert!(
        text(&invalid).contains("limits.memory: invalid size \"lots\""),
        "{}",
        text(&invalid)
    );
    std::fs::write(project.join("tests.toml"), &cases).unwrap();

    // `host test --watch` runs the cases again when the cases file changes.
    /// Stopped however the test ends.
    struct Stopped(std::process::Child);
    impl Drop for Stopped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut watching = Stopped(
        home.host()
            .current_dir(&project)
            .args(["test", "--watch"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let lines = {
        use std::io::BufRead;
        let (send, lines) = std::sync::mpsc::channel();
        let stdout = watching.0.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                let _ = send.send(line);
            }
        });
        lines
    };
    let wait_for = |wanted: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) if line.contains(wanted) => return,
                Ok(_) => {}
                Err(_) => panic!("`host test --watch` never printed {wanted:?}"),
            }
        }
    };
    wait_for("2 of 2 cases passed");
    wait_for("watching");
    std::fs::write(
        project.join("tests.toml"),
        cases.replace(r#"[["first"], ["second"]]"#, r#"[["first"], ["third"]]"#),
    )
    .unwrap();
    wait_for("1 of 2 cases passed");
    drop(watching);
    std::fs::write(project.join("tests.toml"), &cases).unwrap();

    // The project's manifest runs it: its migration, its grant, its payload.
    let ran = in_project(&["run", "demo", "--manifest", "jobhost.toml", "--json"]);
    assert!(ran.status.success(), "{}", text(&ran));
    let run: Value = serde_json::from_slice(&ran.stdout).unwrap();
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(
        home.scalar("SELECT COUNT(*) FROM demo_items WHERE item IN ('first', 'second')")
            .await,
        2
    );

    // A payload that does not decode: where in it, and what was expected there.
    let refused = in_project(&[
        "run",
        "demo",
        "--manifest",
        "jobhost.toml",
        "--payload",
        r#"{"items": ["a", 7]}"#,
    ]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        text(&refused).contains(
            "error: payload does not match the job: at items[1]: invalid type: integer `7`, expected a string"
        ),
        "{}",
        text(&refused)
    );

    // A job that panics: the run's error is the panic's message and place, and its
    // backtrace names the author's functions.
    let lib = std::fs::read_to_string(project.join("src/lib.rs")).unwrap();
    let lib = lib.replace(
        "        for item in &ctx.payload.items {\n",
        "        for item in &ctx.payload.items {\n            check(item);\n",
    ) + "\n#[inline(never)]\nfn check(item: &str) {\n    if item == \"boom\" {\n        panic!(\"cannot record {item}\");\n    }\n}\n";
    std::fs::write(project.join("src/lib.rs"), &lib).unwrap();
    let rebuilt = home
        .host()
        .arg("build")
        .arg(&project)
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap();
    assert!(rebuilt.status.success(), "{}", text(&rebuilt));
    let failed = in_project(&[
        "run",
        "demo",
        "--manifest",
        "jobhost.toml",
        "--retries",
        "0",
        "--payload",
        r#"{"items": ["boom"]}"#,
    ]);
    let shown = text(&failed);
    assert_eq!(failed.status.code(), Some(1), "{shown}");
    let (line, column) = lib
        .lines()
        .enumerate()
        .find_map(|(n, l)| l.find("panic!(\"cannot record").map(|c| (n + 1, c + 1)))
        .unwrap();
    assert!(
        shown.contains(&format!(
            "(trap)\n  error: panicked at src/lib.rs:{line}:{column}: cannot record boom\nguest backtrace:"
        )),
        "{shown}"
    );
    assert!(
        shown.contains("demo::check") && shown.contains("<demo::Demo as jobhost_guest::Job>::run"),
        "{shown}"
    );
    // No advice that cannot be followed in the sandbox.
    assert!(!shown.contains("RUST_BACKTRACE"), "{shown}");

    // `host test`: a retried case runs its retries at once, shows each attempt, and prints
    // the error (and its backtrace) once.
    std::fs::write(
        project.join("tests.toml"),
        r#"
[[case]]
name = "panics"
payload = { items = ["boom"] }
limits = { retries = 2 }
[case.expect]
code = "trap"
error = "not what it says"
"#,
    )
    .unwrap();
    let started = std::time::Instant::now();
    let tested = in_project(&["test"]);
    let shown = text(&tested);
    assert_eq!(tested.status.code(), Some(1), "{shown}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "the manifest's backoff was waited out: {shown}"
    );
    for attempt in 1..=3 {
        assert!(
            shown.contains(&format!("  attempt {attempt} (pass 1): failed (trap) in ")),
            "{shown}"
        );
    }
    assert_eq!(shown.matches("guest backtrace:").count(), 1, "{shown}");
    assert!(
        !shown.contains("  the run's error:")
            && shown.contains("cannot record boom\n              guest backtrace:"),
        "{shown}"
    );
    std::fs::write(project.join("tests.toml"), &cases).unwrap();
}

#[tokio::test]
async fn inspect_names_the_grants_the_examples_manifest_gives() {
    let home = Home::new(Backend::Sqlite).await;
    let manifest: toml::Table = toml::from_str(
        &std::fs::read_to_string(workspace().join("examples/jobhost.toml")).unwrap(),
    )
    .unwrap();
    let jobs = manifest["jobs"].as_table().unwrap();
    assert!(!jobs.is_empty());
    for (job, entry) in jobs {
        let component = entry["component"].as_str().unwrap();
        let name = Path::new(component).file_stem().unwrap().to_str().unwrap();
        let out = home
            .host()
            .arg("inspect")
            .arg(guest(name))
            .arg("--json")
            .output()
            .unwrap();
        assert!(out.status.success(), "{job}: {}", text(&out));
        let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
        let needs: BTreeSet<&str> = shown["capabilities"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        let granted: BTreeSet<&str> = entry
            .get("grants")
            .and_then(|g| g.as_table())
            .map(|g| {
                g.iter()
                    .filter(|(_, v)| v.as_bool() != Some(false))
                    .map(|(k, _)| k.as_str())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(needs, granted, "job {job}");
    }
}

#[tokio::test]
async fn inspect_says_which_contract_each_side_speaks() {
    let home = Home::new(Backend::Sqlite).await;
    let inspect = |name: &str| {
        let out = home
            .host()
            .arg("inspect")
            .arg(guest(name))
            .output()
            .unwrap();
        (out.status.code(), text(&out))
    };
    // Built against the earlier compatible contract: loads.
    let (code, earlier) = inspect("earlier");
    assert_eq!(code, Some(0), "{earlier}");
    assert!(
        earlier.contains("jobhost:job@0.1.2 (this host speaks jobhost:job@0.1.7)"),
        "{earlier}"
    );
    // Built against a newer one: refused, and both versions named.
    let (code, future) = inspect("future");
    assert_eq!(code, Some(1), "{future}");
    assert!(
        future.contains("jobhost:job@0.2.0 (this host speaks jobhost:job@0.1.7)"),
        "{future}"
    );
    assert!(
        future.contains("loads      no: the component targets jobhost:job@0.2.0"),
        "{future}"
    );
    // Not a component at all.
    let stray = home.path().join("stray.wasm");
    std::fs::write(&stray, b"\0asm\x01\0\0\0").unwrap();
    let out = home.host().arg("inspect").arg(&stray).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).contains("not a WebAssembly component"),
        "{}",
        text(&out)
    );
}

#[tokio::test]
async fn wit_hands_out_the_contract_this_host_speaks() {
    let home = Home::new(Backend::Sqlite).await;
    let contract = std::fs::read_to_string(workspace().join("wit/jobhost.wit")).unwrap();
    let out = home.run(&["wit"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), contract);
    let dir = home.path().join("wit-out");
    let out = home.run(&["wit", "--out", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(dir.join("jobhost.wit")).unwrap(),
        contract
    );
}
