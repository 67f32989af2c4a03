//! Jobs that start jobs, end to end on both backends: children commit with the parent's
//! transaction or not at all, a superseded attempt starts none, a parent waits for a
//! thousand children and resumes once with their results, a failed child fails a parent
//! that waits with policy `fail`, a cancelled parent takes its attached children with it
//! (at once, however busily they write),
//! grants and tenants bound what a job may start, and a flood stops at the cap.

use crate::common;

use common::{Home, Server};
use serde_json::Value;
use std::time::{Duration, Instant};

/// The `family` guest as parents (one job per payload) and as `family-child`.
fn manifest(home: &Home) -> std::path::PathBuf {
    let parent = |name: &str, payload: &str, extra: &str| {
        format!(
            r#"
            [jobs.{name}]
            component = "{{guest:family}}"
            grants.db = {{ write = ["ledger"] }}
            grants.jobs = ["family-child"]
            retries = 0
            timeout = "60s"
            payload = {payload}
            {extra}
            "#
        )
    };
    let jobs = [
        parent("commits", "{ children = 100, in_tx = true }", ""),
        parent(
            "rolls-back",
            "{ children = 100, in_tx = true, fail_after = true }",
            "",
        ),
        parent(
            "own-writes",
            "{ children = 100, in_tx = false, fail_after = true }",
            "",
        ),
        parent(
            "gathers",
            r#"{ children = 1000, in_tx = true, wait = "continue" }"#,
            "",
        ),
        parent(
            "strict",
            r#"{ children = 20, failing = [7], delay_ms = 3000, wait = "fail" }"#,
            "",
        ),
        parent(
            "lenient",
            r#"{ children = 5, failing = [1], wait = "continue" }"#,
            "",
        ),
        parent(
            "patient",
            r#"{ children = 10, delay_ms = 60000, wait = "continue" }"#,
            "",
        ),
        parent(
            "busy-family",
            r#"{ children = 2, wait = "continue", child_writes = 10000, child_wait_ms = 150 }"#,
            "",
        ),
        parent(
            "letting-go",
            "{ children = 10, delay_ms = 60000, detached = true, fail_after = true }",
            "",
        ),
        parent(
            "superseded",
            "{ children = 10, in_tx = true, wait_ms = 3000 }",
            "",
        ),
        parent(
            "flood",
            "{ children = 10001, delay_ms = 3600000, detached = true }",
            "",
        ),
        parent("ungranted", r#"{ children = 1, job = "commits" }"#, ""),
        parent(
            "acme-parent",
            r#"{ children = 1, job = "beta-child" }"#,
            "tenant = \"acme\"\ngrants.jobs = [\"family-child\", \"beta-child\"]",
        ),
    ];
    // One component is parent and child: the children are granted what it imports.
    let children = r#"
        [jobs.family-child]
        component = "{guest:family}"
        grants.db = { write = ["ledger"] }
        grants.jobs = ["family-child"]
        retries = 0
        [jobs.beta-child]
        component = "{guest:family}"
        grants.db = { write = ["ledger"] }
        grants.jobs = ["family-child"]
        tenant = "beta"
        retries = 0
    "#;
    // `acme-parent` has its own grants.jobs: drop the shared line for it.
    let jobs: String = jobs
        .iter()
        .map(|j| {
            if j.contains("acme-parent") {
                j.replacen("grants.jobs = [\"family-child\"]\n", "", 1)
            } else {
                j.clone()
            }
        })
        .collect();
    home.manifest("", &format!("{jobs}{children}"))
}

async fn kick(server: &Server, job: &str) -> String {
    let (status, kicked) = server.post(&format!("/jobs/{job}/kick")).await;
    assert_eq!(status, 202, "{kicked}");
    kicked["run_id"].as_str().expect("queued").to_string()
}

async fn run(server: &Server, id: &str) -> Value {
    let (status, run) = server.get(&format!("/runs/{id}")).await;
    assert_eq!(status, 200, "{run}");
    run
}

async fn wait_run(
    server: &Server,
    id: &str,
    within: Duration,
    what: &str,
    ok: impl Fn(&Value) -> bool,
) -> Value {
    let start = Instant::now();
    loop {
        let run = run(server, id).await;
        if ok(&run) {
            return run;
        }
        assert!(
            start.elapsed() < within,
            "timed out waiting for {what}: {run}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn ended(server: &Server, id: &str) -> Value {
    wait_run(server, id, Duration::from_secs(60), "the run's end", |r| {
        !["queued", "running", "waiting"].contains(&r["status"].as_str().unwrap_or_default())
    })
    .await
}

/// The wall clock in milliseconds, as the `family` guest's children stamp their rows.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Rows the children of `parent` committed, `filter` further narrowing them.
async fn children_rows(home: &Home, parent: &str, filter: &str) -> i64 {
    home.scalar(&format!(
        "SELECT COUNT(*) FROM ledger WHERE run_id IN \
         (SELECT id FROM jobhost_runs WHERE parent_run = '{parent}') {filter}"
    ))
    .await
}

async fn children(home: &Home, parent: &str, filter: &str) -> i64 {
    home.scalar(&format!(
        "SELECT COUNT(*) FROM jobhost_runs WHERE parent_run = '{parent}' {filter}"
    ))
    .await
}

on_every_backend! {
    async fn children_commit_with_the_parents_transaction_or_not_at_all(home) {
        let m = manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;

        let failed = kick(&server, "rolls-back").await;
        let run = ended(&server, &failed).await;
        assert_eq!(run["status"], "failed", "{run}");
        assert_eq!(children(&home, &failed, "").await, 0, "a rolled-back transaction queued runs");
        let rows = home.scalar(&format!("SELECT COUNT(*) FROM ledger WHERE run_id = '{failed}'")).await;
        assert_eq!(rows, 0);

        let ok = kick(&server, "commits").await;
        let run = ended(&server, &ok).await;
        assert_eq!(run["status"], "succeeded", "{run}");
        assert_eq!(children(&home, &ok, "").await, 100);
        assert_eq!(children(&home, &ok, "AND parent_attempt = 1 AND origin = 'child'").await, 100);
        let rows = home.scalar(&format!("SELECT COUNT(*) FROM ledger WHERE run_id = '{ok}'")).await;
        assert_eq!(rows, 1, "the rows and the runs commit together");
        // Each child runs, as the parent's tenant, started by it.
        let start = Instant::now();
        while children(&home, &ok, "AND status = 'succeeded'").await < 100 {
            assert!(start.elapsed() < Duration::from_secs(60), "children did not all run");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let child = server.runs(Some("family-child")).await[0]["run_id"]
            .as_str()
            .unwrap()
            .to_string();
        let log = home.run(&["runs", "show", &child]);
        let shown = String::from_utf8_lossy(&log.stdout).to_string();
        assert!(shown.contains(&format!("Parent(\"{ok}\")")), "{shown}");

        // Outside a transaction each call is its own write: the parent's later failure
        // does not undo them.
        let own = kick(&server, "own-writes").await;
        assert_eq!(ended(&server, &own).await["status"], "failed");
        assert_eq!(children(&home, &own, "").await, 100);
    }

    async fn a_superseded_attempt_starts_nothing(home) {
        let m = manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let id = kick(&server, "superseded").await;
        wait_run(&server, &id, Duration::from_secs(20), "the attempt", |r| r["status"] == "running").await;
        // What a takeover does to the lease while the attempt still runs (its host
        // frozen, say): the generation moves on.
        let moved = home
            .exec(&format!(
                "UPDATE jobhost_leases SET generation = generation + 1 WHERE holder = '{id}'"
            ))
            .await;
        assert_eq!(moved, 1);
        let run = ended(&server, &id).await;
        assert_eq!(run["code"], "lease_lost", "{run}");
        assert_eq!(children(&home, &id, "").await, 0, "a superseded attempt's runs appeared");
        let rows = home.scalar(&format!("SELECT COUNT(*) FROM ledger WHERE run_id = '{id}'")).await;
        assert_eq!(rows, 0);
        // The host serves on.
        let next = kick(&server, "commits").await;
        assert_eq!(ended(&server, &next).await["status"], "succeeded");
    }

    async fn a_parent_waits_for_a_thousand_children_and_resumes_once_with_their_results(home) {
        let m = manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let id = kick(&server, "gathers").await;
        let waiting = wait_run(&server, &id, Duration::from_secs(30), "the wait", |r| {
            r["status"] == "waiting" || r["status"] == "succeeded"
        })
        .await;
        assert_eq!(waiting["status"], "waiting", "it should sleep while children run: {waiting}");
        assert_eq!(waiting["waits_for"], "continue");
        let metrics = server.text("/metrics").await;
        assert!(metrics.contains("jobhost_runs{status=\"waiting\""), "{metrics}");
        let run = wait_run(&server, &id, Duration::from_secs(240), "the parent's end", |r| {
            r["status"] == "succeeded" || r["status"] == "failed"
        })
        .await;
        assert_eq!(run["status"], "succeeded", "{run}");
        assert_eq!(run["result"]["succeeded"], 1000, "{run}");
        assert_eq!(run["result"]["other"], 0, "{run}");
        assert_eq!(run["result"]["sum"], 999 * 1000 / 2, "{run}");
        // Two passes, one attempt each: it resumed once, and waiting used no attempt.
        assert_eq!(run["passes"], 2, "{run}");
        assert_eq!(run["attempts"], 2, "{run}");
        assert_eq!(children(&home, &id, "AND status = 'succeeded'").await, 1000);
    }

    async fn a_failed_child_fails_a_strict_parent_and_a_lenient_one_reads_it(home) {
        let m = manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let strict = kick(&server, "strict").await;
        let run = ended(&server, &strict).await;
        assert_eq!(run["status"], "failed", "{run}");
        assert_eq!(run["code"], "child_failed", "{run}");
        assert_eq!(run["passes"], 2, "the next pass never ran: {run}");
        let start = Instant::now();
        while children(&home, &strict, "AND status IN ('queued', 'running')").await > 0 {
            assert!(start.elapsed() < Duration::from_secs(20), "children were left running");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(children(&home, &strict, "AND status = 'cancelled' AND last_code = 'parent_failed'").await, 19);
        let reports = home
            .scalar(&format!("SELECT COUNT(*) FROM jobhost_reports WHERE run_id = '{strict}'"))
            .await;
        assert_eq!(reports, 1);

        let lenient = kick(&server, "lenient").await;
        let run = ended(&server, &lenient).await;
        assert_eq!(run["status"], "succeeded", "{run}");
        assert_eq!(run["result"]["succeeded"], 4, "{run}");
        assert_eq!(run["result"]["other"], 1, "{run}");
    }

    async fn a_cancelled_or_failed_parent_takes_its_attached_children_only(home) {
        let m = manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let attached = kick(&server, "patient").await;
        wait_run(&server, &attached, Duration::from_secs(20), "the wait", |r| r["status"] == "waiting").await;
        let (status, body) = server.post(&format!("/runs/{attached}/cancel")).await;
        assert_eq!(status, 200, "{body}");
        // A parent that fails after starting detached children leaves them be.
        let detached = kick(&server, "letting-go").await;
        assert_eq!(ended(&server, &detached).await["status"], "failed");
        let start = Instant::now();
        while children(&home, &attached, "AND status = 'queued'").await > 0 {
            assert!(start.elapsed() < Duration::from_secs(20), "attached children survived");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(children(&home, &attached, "AND last_code = 'parent_failed'").await, 10);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(children(&home, &detached, "AND status = 'queued'").await, 10, "detached children were cancelled");
    }

    async fn cancelling_a_waiting_parent_stops_its_busily_writing_children_at_once(home) {
        let m = manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        for round in 0..3u64 {
            let parent = kick(&server, "busy-family").await;
            wait_run(&server, &parent, Duration::from_secs(20), "the wait", |r| r["status"] == "waiting").await;
            // Both children run and write (on SQLite one may be starved of the write lock
            // by the other, as any busy writer starves the rest).
            let start = Instant::now();
            while children_rows(&home, &parent, "").await == 0
                || children(&home, &parent, "AND status = 'running'").await < 2
            {
                assert!(start.elapsed() < Duration::from_secs(30), "the children write");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tokio::time::sleep(Duration::from_millis(37 * round % 200)).await;
            let asked = Instant::now();
            let out = home.run(&["runs", "cancel", &parent]);
            let took = asked.elapsed();
            let returned = now_ms();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            while children(&home, &parent, "AND status IN ('queued', 'running')").await > 0 {
                assert!(asked.elapsed() < Duration::from_secs(10), "the children outlived their parent");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            println!(
                "{:?} round {round}: the parent's cancel returned in {} ms, its children ended within {} ms",
                home.backend,
                took.as_millis(),
                asked.elapsed().as_millis()
            );
            assert!(took < Duration::from_secs(2), "the cancel returned in {took:?}");
            assert_eq!(run(&server, &parent).await["status"], "cancelled");
            assert_eq!(children(&home, &parent, "AND status = 'cancelled'").await, 2, "no child ended otherwise");
            // The family sweep cancels the children within its period (250 ms) of the
            // parent's cancel: no child transaction begun after that committed.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let late = children_rows(&home, &parent, &format!("AND n > {}", returned + 1000)).await;
            assert_eq!(late, 0, "round {round}: a child's transaction begun after the family's cancel committed");
        }
    }

    async fn a_job_starts_only_what_it_was_granted_and_its_tenant_may_run(home) {
        let m = manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let ungranted = kick(&server, "ungranted").await;
        let run = ended(&server, &ungranted).await;
        assert_eq!(run["code"], "capability_refused", "{run}");
        assert!(run["error"].as_str().unwrap_or_default().contains("job-not-granted"), "{run}");
        let foreign = kick(&server, "acme-parent").await;
        let run = ended(&server, &foreign).await;
        assert_eq!(run["code"], "capability_refused", "{run}");
        assert!(run["error"].as_str().unwrap_or_default().contains("job-of-another-tenant"), "{run}");
        for id in [&ungranted, &foreign] {
            assert_eq!(children(&home, id, "").await, 0);
        }
    }

    async fn a_flood_of_enqueues_stops_at_the_cap_with_the_host_healthy(home) {
        let m = manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let id = kick(&server, "flood").await;
        let run = ended(&server, &id).await;
        assert_eq!(run["code"], "run_limit", "{run}");
        assert!(run["error"].as_str().unwrap_or_default().contains("run-limit"), "{run}");
        assert_eq!(children(&home, &id, "").await, 10_000);
        let next = kick(&server, "commits").await;
        assert_eq!(ended(&server, &next).await["status"], "succeeded");
    }
}

#[test]
fn a_manifest_granting_an_unknown_job_is_refused_at_load() {
    let home = tempfile::tempdir().unwrap();
    let manifest = home.path().join("jobhost.toml");
    std::fs::write(
        &manifest,
        format!(
            "[jobs.parent]\ncomponent = \"{}\"\ngrants.jobs = [\"nope\", \"event:Bad Name\"]\n",
            common::guest("family").display()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_host"))
        .args(["check", "--manifest", manifest.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("grants.jobs"), "{stderr}");
}

/// `host run` of a parent registers the jobs it may start, so its runs are queued; a pass
/// that waits ends the command, saying what becomes of the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_run_queues_a_parents_children_and_says_what_a_wait_leaves() {
    let home = Home::new(common::Backend::Sqlite).await;
    let m = manifest(&home);
    let out = home.run(&["run", "commits", "--manifest", m.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let queued = home
        .scalar(
            "SELECT COUNT(*) FROM jobhost_runs WHERE job = 'family-child' AND status = 'queued'",
        )
        .await;
    assert_eq!(queued, 100, "{stdout}");

    let out = home.run(&["run", "lenient", "--manifest", m.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains(": waiting after 1 attempt"), "{stdout}");
    assert!(stdout.contains("host runs cancel"), "{stdout}");
}
