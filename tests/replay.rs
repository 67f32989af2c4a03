//! The flight recorder end to end, on both backends: an attempt that fails on the third
//! row of a query (an `expect` on a NULL) is replayed from its journal — from the
//! database, and from an exported file on a "laptop" that cannot reach any database —
//! with the guest's table dropped first, and shows the same panic, frames, log and fuel;
//! a rebuilt component with the fix reaches `done` against the same answers; one whose
//! calls differ is stopped where they diverge; another component is refused unless
//! named; a journal becomes a `host test` case. And, for the example guests and the
//! adversarial one, recording then replaying reproduces the outcome, log and fuel used.

use crate::common;

use common::{Backend, Home, guest};
use serde_json::Value;
use std::path::Path;
use std::process::Output;

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The `totals` job over invoices whose third row has no amount.
fn totals_manifest(home: &Home, component: &str) -> String {
    let m = home.manifest(
        "",
        &format!(
            r#"
            [jobs.totals]
            component = "{component}"
            retries = 0
            timeout = "10s"
            grants.db = {{ read = ["invoices"] }}
            "#
        ),
    );
    m.to_str().unwrap().to_string()
}

async fn seed_invoices(home: &Home, m: &str) {
    let out = home.run(&["migrate", "--manifest", m]);
    assert!(out.status.success(), "{}", text(&out));
    home.exec(
        "INSERT INTO invoices (id, customer, amount) VALUES \
         (1, 'acme', 10), (2, 'bolt', 5), (3, 'acme', NULL), (4, 'bolt', 7)",
    )
    .await;
}

/// `host replay ... --json`: the exit code and the printed object.
fn replay_json(home: &Home, args: &[&str]) -> (i32, Value) {
    let mut all = vec!["replay", "--json"];
    all.extend_from_slice(args);
    let out = home.run(&all);
    let shown = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("replay printed no JSON: {}", text(&out)));
    (out.status.code().unwrap_or(-1), shown)
}

const PANIC: &str = "every invoice has an amount";

/// A journal case of the NULL amount's attempt that only the fixed component passes.
const FIXED_CASE: &str = r#"
[[case]]
name = "a NULL amount counts as nothing"
journal = "journals/null-amount.journal"
[case.expect]
status = "succeeded"
log = ["acme: 10", "bolt: 12"]
"#;

on_every_backend! {
    async fn a_failed_attempt_replays_from_its_journal_with_nothing_live(home) {
        let m = totals_manifest(&home, "{guest:totals}");
        seed_invoices(&home, &m).await;
        let (code, run) = home.run_json(&["totals", "--manifest", &m]);
        assert_eq!((code, run["code"].as_str()), (1, Some("trap")), "{run}");
        let id = run["run_id"].as_str().unwrap().to_string();
        let shown = text(&home.run(&["runs", "show", &id]));
        assert!(shown.contains(PANIC), "{shown}");
        assert!(shown.contains("journal: "), "{shown}");
        let log: String = {
            let store = home.store().await;
            let attempts = store.list_attempts(&id, 10).await.unwrap();
            store.close().await;
            attempts[0].log.clone()
        };

        // The guest's data is gone: whatever the replay answers comes from the journal.
        home.exec("DROP TABLE invoices").await;
        let out = home.run(&["replay", &id]);
        let printed = text(&out);
        assert_eq!(out.status.code(), Some(0), "{printed}");
        assert!(printed.contains(PANIC), "{printed}");
        assert!(printed.contains("panicked at examples/totals/src/lib.rs"), "{printed}");
        assert!(printed.contains("guest backtrace"), "{printed}");
        assert!(printed.contains("outcome the same, log the same, fuel the same"), "{printed}");
        let (code, shown) = replay_json(&home, &[&id]);
        assert_eq!(code, 0, "{shown}");
        let replay = &shown["replay"];
        assert_eq!(replay["code"], "trap", "{shown}");
        assert_eq!(replay["log"].as_str().unwrap(), log, "the log, clock and random included");
        assert_eq!(replay["same"], serde_json::json!({"outcome": true, "log": true, "fuel": true}));
        assert!(replay["stopped"].is_null(), "{shown}");
        let calls = replay["calls_recorded"].as_u64().unwrap();
        assert!(calls >= 2, "a clock reading and the query at least: {shown}");
        assert_eq!(replay["calls_answered"].as_u64(), Some(calls));
        assert_eq!(replay["verdict"], serde_json::json!({"kind": "fails_again", "code": "trap"}));

        // The rebuilt component gets past the NULL, against the same answers.
        let fixed = guest("totals_fixed");
        let (code, shown) = replay_json(&home, &[&id, "--job", fixed.to_str().unwrap()]);
        assert_eq!(code, 0, "{shown}");
        assert_eq!(shown["replay"]["outcome"], "done", "{shown}");
        let log = shown["replay"]["log"].as_str().unwrap();
        assert!(log.contains("acme: 10") && log.contains("bolt: 12"), "{log}");
        assert_eq!(shown["replay"]["same"]["outcome"], false);
        let verdict = &shown["replay"]["verdict"];
        assert_eq!(verdict["kind"], "gets_past", "{shown}");
        assert_eq!(verdict["failed_after"].as_u64(), Some(calls), "{shown}");
        assert_eq!(verdict["ended"], "done", "{shown}");
        let out = home.run(&["replay", &id, "--job", fixed.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        assert!(
            text(&out).contains(&format!(
                "verdict: gets past the failure: the original failed after {calls} calls; this component ends done"
            )),
            "{}",
            text(&out)
        );


        // Exported, it replays on a machine that reaches no database at all.
        let out = home.run(&["runs", "export", &id]);
        assert!(out.status.success(), "{}", text(&out));
        let laptop = tempfile::tempdir().unwrap();
        let file = laptop.path().join("a.journal");
        std::fs::write(&file, &out.stdout).unwrap();
        // In a network namespace of its own when the machine allows one: no socket could
        // reach anything, the database's address included.
        let isolated = std::process::Command::new("unshare")
            .args(["-n", "true"])
            .status()
            .is_ok_and(|s| s.success());
        let mut replay = if isolated {
            let mut cmd = std::process::Command::new("unshare");
            cmd.args(["-n", env!("CARGO_BIN_EXE_host")]);
            cmd
        } else {
            std::process::Command::new(env!("CARGO_BIN_EXE_host"))
        };
        let out = replay
            .env_clear()
            .env("JOBHOST_HOME", laptop.path())
            .env("JOBHOST_CACHE", common::shared_cache())
            .env("JOBHOST_DB", "postgres://nobody@127.0.0.1:1/nothing")
            .current_dir(laptop.path())
            .args(["replay", "--from", file.to_str().unwrap(), "--job"])
            .arg(guest("totals"))
            .output()
            .unwrap();
        let printed = text(&out);
        assert_eq!(out.status.code(), Some(0), "{printed}");
        assert!(printed.contains(PANIC), "{printed}");
        assert!(printed.contains("outcome the same, log the same, fuel the same"), "{printed}");
        assert!(!laptop.path().join("jobhost.db").exists(), "the replay opened a database");
    }

    async fn a_component_whose_calls_differ_is_stopped_where_they_diverge(home) {
        let m = home.manifest(
            "",
            r#"
            [jobs.ledger]
            component = "{guest:ledger}"
            retries = 0
            record = "always"
            payload = { rows = 3 }
            grants.db = { write = ["ledger"] }
            "#,
        );
        let m = m.to_str().unwrap();
        assert!(home.run(&["migrate", "--manifest", m]).status.success());
        let (code, run) = home.run_json(&["ledger", "--manifest", m]);
        assert_eq!(code, 0, "{run}");
        let id = run["run_id"].as_str().unwrap();
        let rows = home.scalar("SELECT COUNT(*) FROM ledger").await;
        assert_eq!(rows, 3);

        // The recording itself replays exactly, and writes nothing.
        let (code, shown) = replay_json(&home, &[id]);
        assert_eq!((code, &shown["replay"]["outcome"]), (0, &Value::from("done")), "{shown}");
        assert_eq!(shown["replay"]["same"]["fuel"], true, "{shown}");
        assert_eq!(home.scalar("SELECT COUNT(*) FROM ledger").await, 3);

        // `totals` asks for the clock where `ledger` began a transaction.
        let (code, shown) = replay_json(&home, &[id, "--job", guest("totals").to_str().unwrap()]);
        assert_eq!(code, 1, "{shown}");
        let stopped = &shown["replay"]["stopped"];
        assert_eq!(stopped["kind"], "diverged", "{shown}");
        assert_eq!(stopped["call"], 1, "{shown}");
        assert!(stopped["journal"].as_str().unwrap().starts_with("db.begin"), "{shown}");
        assert!(stopped["asked"].as_str().unwrap().starts_with("wall-clock.now"), "{shown}");
        let out = home.run(&["replay", id, "--job", guest("totals").to_str().unwrap()]);
        assert!(text(&out).contains("diverged at call 1: the journal has db.begin"), "{}", text(&out));
        assert!(shown["replay"]["verdict"].is_null(), "no failure to judge: {shown}");

        // Of a failed attempt, the verdict names both calls where they diverge, before
        // the failure; and what the component made of the placeholder it was answered
        // after the stop (its log line of a clock reading it never got) is not the
        // replay's log.
        let (code, run) = home.run_json(&[
            "ledger",
            "--manifest",
            m,
            "--payload",
            r#"{"rows": 1, "wait_ms": 5000}"#,
            "--timeout",
            "1s",
        ]);
        assert_eq!((code, run["code"].as_str()), (1, Some("timeout")), "{run}");
        let failed = run["run_id"].as_str().unwrap();
        let (code, shown) =
            replay_json(&home, &[failed, "--job", guest("totals").to_str().unwrap()]);
        assert_eq!(code, 1, "{shown}");
        let verdict = &shown["replay"]["verdict"];
        assert_eq!(verdict["kind"], "diverged", "{shown}");
        assert_eq!(verdict["call"], 1, "{shown}");
        assert!(verdict["original"].as_str().unwrap().starts_with("db.begin"), "{shown}");
        assert!(verdict["fix"].as_str().unwrap().starts_with("wall-clock.now"), "{shown}");
        assert_eq!(shown["replay"]["log"], "", "nothing after the divergence: {shown}");

        // The job's component replaced on disk is not the one that ran: refused, unless
        // named with --job.
        let component = home.path().join("replaced.wasm");
        std::fs::copy(guest("hello"), &component).unwrap();
        home.exec(&format!(
            "UPDATE jobhost_jobs SET component_path = '{}' WHERE name = 'ledger'",
            component.display()
        ))
        .await;
        let out = home.run(&["replay", id]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains("give the component with --job"), "{}", text(&out));
    }

    async fn a_journal_is_a_test_case_that_keeps_a_fix_fixed(home) {
        let m = totals_manifest(&home, "{guest:totals}");
        seed_invoices(&home, &m).await;
        let (code, run) = home.run_json(&["totals", "--manifest", &m]);
        assert_eq!(code, 1, "{run}");
        let id = run["run_id"].as_str().unwrap();
        let out = home.run(&["runs", "export", id]);
        let project = home.path().join("project");
        std::fs::create_dir_all(project.join("journals")).unwrap();
        std::fs::write(project.join("journals/null-amount.journal"), &out.stdout).unwrap();
        std::fs::write(project.join("tests.toml"), FIXED_CASE).unwrap();
        let write_manifest = |component: &Path| {
            std::fs::write(
                project.join("jobhost.toml"),
                format!(
                    "[jobs.totals]\ncomponent = \"{}\"\ngrants.db = {{ read = [\"invoices\"] }}\n",
                    component.display()
                ),
            )
            .unwrap();
        };
        let test = |project: &Path| {
            std::process::Command::new(env!("CARGO_BIN_EXE_host"))
                .env("JOBHOST_HOME", project.join(".jobhost"))
                .env("JOBHOST_CACHE", common::shared_cache())
                .env_remove("JOBHOST_DB")
                .args(["test", "--json"])
                .arg(project)
                .output()
                .unwrap()
        };
        write_manifest(&guest("totals_fixed"));
        let out = test(&project);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        // What a replay can honestly check of a fix: it gets past the failure. The fix
        // passes; the unfixed component, and one that diverges first, do not.
        let past_failure = r#"
            [[case]]
            name = "gets past the NULL"
            journal = "journals/null-amount.journal"
            [case.expect]
            past_failure = true
            "#;
        std::fs::write(project.join("tests.toml"), past_failure).unwrap();
        let out = test(&project);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        for (component, said) in [
            ("totals", "fails again: trap"),
            ("ledger", "fails differently: unrecoverable"),
        ] {
            write_manifest(&guest(component));
            let out = test(&project);
            assert_eq!(out.status.code(), Some(1), "{component}: {}", text(&out));
            assert!(text(&out).contains(said), "{component}: {}", text(&out));
        }
        std::fs::write(
            project.join("tests.toml"),
            "[[case]]\nname = \"x\"\n[case.expect]\npast_failure = true\n",
        )
        .unwrap();
        let out = test(&project);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains("`expect.past_failure` needs `journal`"), "{}", text(&out));
        std::fs::write(project.join("tests.toml"), FIXED_CASE).unwrap();
        // The unfixed component fails the case with the trap it had.
        write_manifest(&guest("totals"));
        let out = test(&project);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(text(&out).contains("trap"), "{}", text(&out));
        // A journal case that also seeds rows is refused: nothing is read in a replay.
        std::fs::write(
            project.join("tests.toml"),
            "[[case]]\nname = \"x\"\njournal = \"journals/null-amount.journal\"\nseed = [\"SELECT 1\"]\n",
        )
        .unwrap();
        let out = test(&project);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains("cannot go with `journal`"), "{}", text(&out));
    }
}

/// For the example guests and the adversarial one, each recorded on every attempt: the
/// replay of every attempt reaches the code the attempt ended with, with the same log and
/// the same fuel. The payloads are drawn at random within each guest's range.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recording_then_replaying_reproduces_outcome_log_and_fuel() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let home = Home::new(Backend::Sqlite).await;
    let m = home.manifest(
        "",
        r#"
        [defaults]
        record = "always"
        retries = 0
        timeout = "5s"

        [jobs.hello]
        component = "{guest:hello}"
        [jobs.flaky]
        component = "{guest:flaky}"
        [jobs.ledger]
        component = "{guest:ledger}"
        grants.db = { write = ["ledger"] }
        [jobs.spin]
        component = "{guest:spin}"
        timeout = "300ms"
        [jobs.hog]
        component = "{guest:hog}"
        memory = "16MiB"
        [jobs.adversary]
        component = "{guest:adversary}"
        grants.db = { write = ["ledger"] }
        "#,
    );
    let m = m.to_str().unwrap().to_string();
    assert!(home.run(&["migrate", "--manifest", &m]).status.success());
    let replays_the_same = |job: &str, payload: &str| -> Result<(), String> {
        let (_, run) = home.run_json(&[job, "--manifest", &m, "--payload", payload]);
        let id = run["run_id"].as_str().expect("a run").to_string();
        let (code, shown) = replay_json(&home, &[&id]);
        let replay = &shown["replay"];
        let same = serde_json::json!({"outcome": true, "log": true, "fuel": true});
        if code != 0
            || replay["same"] != same
            || replay["fuel_used"] != shown["recorded"]["fuel_used"]
        {
            return Err(format!("{job} {payload} (ended {}): {shown}", run["code"]));
        }
        Ok(())
    };
    // Every way an attempt ends at least once: stopped at its deadline, at its memory
    // cap, by each hostile mode; then payloads drawn at random.
    let mut fixed = vec![
        ("spin", "{}".to_string()),
        ("hog", "{}".to_string()),
        ("flaky", r#"{"fail_times": 1}"#.to_string()),
    ];
    for mode in [
        "escapes",
        "markup",
        "nul",
        "random",
        "huge-sql",
        "many-params",
        "handles",
        "panic-in-transaction",
        "stack-overflow",
        "huge-cursor",
    ] {
        fixed.push(("adversary", serde_json::json!({ "mode": mode }).to_string()));
    }
    for (job, payload) in &fixed {
        replays_the_same(job, payload).unwrap();
    }
    let cases = prop_oneof![
        "[a-z ]{0,12}".prop_map(|name| ("hello", serde_json::json!({ "name": name }))),
        (0i64..40).prop_map(|rows| ("ledger", serde_json::json!({ "rows": rows }))),
        (0u64..2_000_000).prop_map(|n| ("spin", serde_json::json!({ "iterations": n }))),
    ];
    let mut runner = TestRunner::new(Config {
        cases: 8,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&cases, |(job, payload)| {
            replays_the_same(job, &payload.to_string()).map_err(TestCaseError::fail)
        })
        .unwrap();
}
