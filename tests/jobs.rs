//! A job's life across manifests and versions, end to end: `run_on_boot` queues one run
//! per new version fleet-wide, and a job no serving host registered within the orphan
//! grace is orphaned (listed, not scheduled, kicked or reached by events) until retention
//! has deleted its history or a host registers it again; a fleet of hosts with different
//! manifests restarting in turn never orphans a job one of them serves.

use crate::common;

use common::{Backend, Home, guest};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A manifest in a file of its own (`Home::manifest` writes `jobhost.toml`): hosts of one
/// fleet with different manifests.
fn manifest_as(home: &Home, file: &str, jobs: &str) -> PathBuf {
    let written = home.manifest("", jobs);
    let path = home.path().join(file);
    std::fs::rename(written, &path).unwrap();
    path
}

fn noop_job(name: &str, on: &str) -> String {
    format!("[jobs.{name}]\ncomponent = \"{{guest:noop}}\"\non = [\"{on}\"]\n")
}

/// Every job that is orphaned at any moment, read from the jobs table every 50 ms until
/// `stop` is set.
fn watch_orphans(
    db_url: String,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<BTreeSet<String>> {
    tokio::spawn(async move {
        let store = jobhost::store::Store::open(&db_url)
            .await
            .expect("open store");
        let mut seen = BTreeSet::new();
        while !stop.load(Ordering::Acquire) {
            for job in store.list_jobs().await.expect("list jobs") {
                if job.orphaned_at.is_some() {
                    seen.insert(job.name);
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        store.close().await;
        seen
    })
}

/// `host jobs`' lines, by job name: whether each ends `orphaned`.
fn listed_orphans(home: &Home) -> Vec<(String, bool)> {
    let out = home.run(&["jobs"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .skip(1)
        .filter_map(|l| {
            Some((
                l.split_whitespace().next()?.to_string(),
                l.ends_with("orphaned"),
            ))
        })
        .collect()
}

async fn stop(server: common::Server) {
    server.signal("TERM");
    assert_eq!(server.wait_exit(Duration::from_secs(30)).await.0, Some(0));
}

async fn serve_with(home: &Home, manifest: &Path, grace: &str) -> common::Server {
    home.serve(&[
        "--manifest",
        manifest.to_str().unwrap(),
        "--orphan-grace",
        grace,
    ])
    .await
}

/// The orphan race: hosts A and B serve one database with different manifests and restart
/// in turn, each restart a real gap (stopped, then started). Neither ever orphans a job the
/// other serves — with orphaning at start, A's restart orphaned B's job — while a job
/// neither serves any more is orphaned once the grace has passed, and restored when a host
/// serves it again. SQLite takes one serving process per file, so this is Postgres'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_restarting_in_turn_never_orphan_a_job_the_other_serves() {
    let home = Home::new(Backend::Postgres).await;
    let grace = "8s";
    let all = manifest_as(
        &home,
        "all.toml",
        &[
            noop_job("shared", "e"),
            noop_job("only_a", "e"),
            noop_job("only_b", "e"),
            noop_job("neither", "e"),
        ]
        .concat(),
    );
    let a_jobs = manifest_as(
        &home,
        "a.toml",
        &[noop_job("shared", "e"), noop_job("only_a", "e")].concat(),
    );
    let b_jobs = manifest_as(
        &home,
        "b.toml",
        &[noop_job("shared", "e"), noop_job("only_b", "e")].concat(),
    );
    // Every job registered once, `neither` for the last time.
    stop(serve_with(&home, &all, grace).await).await;

    let done = Arc::new(AtomicBool::new(false));
    let watcher = watch_orphans(home.db_url.clone(), done.clone());
    let mut a = serve_with(&home, &a_jobs, grace).await;
    let mut b = serve_with(&home, &b_jobs, grace).await;
    for _ in 0..3 {
        stop(a).await;
        a = serve_with(&home, &a_jobs, grace).await;
        stop(b).await;
        b = serve_with(&home, &b_jobs, grace).await;
    }
    home.wait_for(
        "SELECT COUNT(*) FROM jobhost_jobs WHERE name = 'neither' AND orphaned_at IS NOT NULL",
        Duration::from_secs(30),
    )
    .await;
    // One more restart each after `neither` was orphaned.
    stop(a).await;
    let a = serve_with(&home, &a_jobs, grace).await;
    stop(b).await;
    let b = serve_with(&home, &b_jobs, grace).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    done.store(true, Ordering::Release);
    assert_eq!(
        watcher.await.unwrap(),
        BTreeSet::from(["neither".to_string()])
    );
    let listed = listed_orphans(&home);
    let expected: Vec<(String, bool)> = [
        ("neither", true),
        ("only_a", false),
        ("only_b", false),
        ("shared", false),
    ]
    .iter()
    .map(|(n, o)| (n.to_string(), *o))
    .collect();
    assert_eq!(listed, expected);
    // An event reaches what the fleet serves, not the orphan.
    let (status, emitted) = a
        .post_as(Some(&a.token), "/events/e", Some(r#"{"key":"k1"}"#))
        .await;
    assert_eq!(status, 202, "{emitted}");
    let mut reached: Vec<&str> = emitted["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["job"].as_str().unwrap())
        .collect();
    reached.sort();
    assert_eq!(reached, ["only_a", "only_b", "shared"]);

    // A host that serves it again restores it.
    stop(a).await;
    let a = serve_with(&home, &all, grace).await;
    home.wait_for(
        "SELECT COUNT(*) FROM jobhost_jobs WHERE name = 'neither' AND orphaned_at IS NULL",
        Duration::from_secs(10),
    )
    .await;
    assert!(listed_orphans(&home).iter().all(|(_, orphaned)| !orphaned));
    stop(a).await;
    stop(b).await;
}

async fn serve_and_stop_once(home: &Home, manifest: &std::path::Path, wait_sql: &str) {
    let args = ["--manifest", manifest.to_str().unwrap()];
    let mut servers = vec![home.serve(&args).await];
    if home.backend == Backend::Postgres {
        // A fleet starting the version together.
        servers.push(home.serve(&args).await);
    }
    home.wait_for(wait_sql, Duration::from_secs(20)).await;
    for server in servers {
        server.signal("TERM");
        assert_eq!(server.wait_exit(Duration::from_secs(30)).await.0, Some(0));
    }
}

on_every_backend! {
    async fn a_boot_run_is_queued_once_per_version_across_hosts_and_restarts(home) {
        let wasm = home.path().join("boot.wasm");
        std::fs::copy(guest("hello"), &wasm).unwrap();
        let m = home.manifest("", &format!(
            "[jobs.boot]\ncomponent = \"{}\"\nrun_on_boot = true\n[jobs.plain]\ncomponent = \"{{guest:noop}}\"\n",
            wasm.display()));
        let first = "SELECT COUNT(*) FROM jobhost_runs WHERE job = 'boot' AND status = 'succeeded'";
        serve_and_stop_once(&home, &m, first).await;
        // Started again, the same version owes nothing more.
        serve_and_stop_once(&home, &m, first).await;
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'boot'").await, 1);
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'boot' AND origin = 'boot'").await, 1);
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'plain'").await, 0);
        // Even once retention deleted the boot run, the version stays booted.
        home.exec("DELETE FROM jobhost_attempts").await;
        home.exec("DELETE FROM jobhost_runs").await;
        serve_and_stop_once(&home, &m, "SELECT COUNT(*) FROM jobhost_jobs WHERE name = 'plain'").await;
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs").await, 0);
        // A new version boots once.
        std::fs::copy(guest("noop"), &wasm).unwrap();
        serve_and_stop_once(&home, &m, first).await;
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'boot'").await, 1);
    }

    async fn a_disabled_tenants_new_version_boots_once_it_is_enabled(home) {
        for args in [["tenants", "add", "acme"], ["tenants", "disable", "acme"]] {
            assert!(home.run(&args).status.success());
        }
        let m = home.manifest("", "[jobs.boot]\ncomponent = \"{guest:hello}\"\ntenant = \"acme\"\nrun_on_boot = true\n");
        serve_and_stop_once(&home, &m, "SELECT COUNT(*) FROM jobhost_jobs WHERE name = 'boot'").await;
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs").await, 0, "no new runs while disabled");
        assert!(home.run(&["tenants", "enable", "acme"]).status.success());
        serve_and_stop_once(&home, &m, "SELECT COUNT(*) FROM jobhost_runs WHERE job = 'boot' AND status = 'succeeded'").await;
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE origin = 'boot'").await, 1);
    }

    async fn a_job_left_out_of_the_manifest_is_orphaned_until_its_history_is_pruned(home) {
        let all = "[jobs.ticker]\ncomponent = \"{guest:noop}\"\nschedule = \"* * * * * *\"\n\
                   [jobs.gone]\ncomponent = \"{guest:noop}\"\n[jobs.kept]\ncomponent = \"{guest:noop}\"\n";
        let m = home.manifest("", all);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        assert_eq!(server.post("/jobs/gone/kick").await.0, 202);
        home.wait_for("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'gone' AND status = 'succeeded'", Duration::from_secs(20)).await;
        home.wait_for("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'ticker'", Duration::from_secs(20)).await;
        server.signal("TERM");
        server.wait_exit(Duration::from_secs(30)).await;

        let m = home.manifest("", "[jobs.kept]\ncomponent = \"{guest:noop}\"\n");
        let server = home.serve(&["--manifest", m.to_str().unwrap(), "--orphan-grace", "1s"]).await;
        // Orphaned once no host registered them for the grace.
        home.wait_for("SELECT COUNT(*) FROM jobhost_jobs a JOIN jobhost_jobs b ON a.name = 'gone' AND b.name = 'ticker' \
            WHERE a.orphaned_at IS NOT NULL AND b.orphaned_at IS NOT NULL", Duration::from_secs(20)).await;
        let (_, jobs) = server.get("/jobs").await;
        let orphaned: Vec<(&str, bool)> = jobs["jobs"].as_array().unwrap().iter()
            .map(|j| (j["name"].as_str().unwrap(), j["orphaned"].as_bool().unwrap())).collect();
        assert_eq!(orphaned, [("gone", true), ("kept", false), ("ticker", true)]);
        let listed = String::from_utf8(home.run(&["jobs"]).stdout).unwrap();
        assert!(listed.lines().any(|l| l.starts_with("gone") && l.ends_with("orphaned")), "{listed}");
        let (status, refused) = server.post("/jobs/gone/kick").await;
        assert_eq!((status, &refused["error"]["code"]), (409, &"job_orphaned".into()), "{refused}");
        assert_eq!(home.run(&["kick", "gone"]).status.code(), Some(2));
        // Not scheduled any more.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let ticks = home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'ticker'").await;
        tokio::time::sleep(Duration::from_millis(2000)).await;
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'ticker'").await, ticks);
        server.signal("TERM");
        server.wait_exit(Duration::from_secs(30)).await;

        // Retention deletes its history, and then the job; a kept job stays whatever it ran.
        let store = home.store().await;
        let pruned = store.prune(0, 500).await.unwrap();
        assert!(pruned.jobs >= 1, "{pruned:?}");
        assert!(store.get_job("gone").await.unwrap().is_none());
        assert!(store.get_job("kept").await.unwrap().is_some());
        store.close().await;
        // Named by a manifest again, a job is registered afresh and not orphaned.
        let m = home.manifest("", all);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let (_, jobs) = server.get("/jobs").await;
        assert!(jobs["jobs"].as_array().unwrap().iter().all(|j| j["orphaned"] == false), "{jobs}");
    }

    async fn an_orphaned_jobs_waiting_runs_end_orphaned_reported_once_then_pruned(home) {
        // A run of each way of waiting: queued (its job paused), retrying (an hour's
        // backoff), a next pass deferred an hour (its lease parked), a parent waiting for
        // its children, and those children, due in an hour.
        let jobs = r#"
            [jobs.held]
            component = "{guest:noop}"
            [jobs.retrying]
            component = "{guest:flaky}"
            retries = 3
            backoff = "1h"
            payload = { fail_times = 3 }
            [jobs.deferring]
            component = "{guest:pager}"
            payload = { pages = 3, defer_ms = 3600000 }
            [jobs.waiting]
            component = "{guest:family}"
            grants.db = { write = ["ledger"] }
            grants.jobs = ["family-child"]
            grants.steps = true
            payload = { children = 2, delay_ms = 3600000, wait = "continue" }
            [jobs.family-child]
            component = "{guest:family}"
            grants.db = { write = ["ledger"] }
            grants.jobs = ["family-child"]
            grants.steps = true
            [jobs.kept]
            component = "{guest:noop}"
        "#;
        let m = home.manifest("", jobs);
        let server = serve_with(&home, &m, "1s").await;
        assert!(home.run(&["pause", "job", "held"]).status.success());
        // The host reads the pauses at most every 250 ms before it claims.
        tokio::time::sleep(Duration::from_millis(600)).await;
        for job in ["held", "retrying", "deferring", "waiting"] {
            let (status, kicked) = server.post(&format!("/jobs/{job}/kick")).await;
            assert_eq!(status, 202, "{kicked}");
        }
        for waits in [
            "job = 'retrying' AND failures = 1",
            "job = 'deferring' AND defers = 1",
            "job = 'waiting' AND wait_pass IS NOT NULL AND pass > wait_pass",
        ] {
            home.wait_for(&format!("SELECT COUNT(*) FROM jobhost_runs WHERE status = 'queued' AND {waits}"), Duration::from_secs(30)).await;
        }
        let parked = "SELECT COUNT(*) FROM jobhost_leases WHERE job IN ('deferring', 'waiting') AND holder IS NOT NULL";
        assert_eq!(home.scalar(parked).await, 2, "the deferred run and the waiting parent hold their leases");
        stop(server).await;
        let mut queued = Vec::new();
        for job in ["held", "retrying", "deferring", "waiting", "family-child"] {
            let sql = format!("SELECT COUNT(*) FROM jobhost_runs WHERE status = 'queued' AND job = '{job}'");
            queued.push((job, home.scalar(&sql).await));
        }
        let one_each = [("held", 1), ("retrying", 1), ("deferring", 1), ("waiting", 1), ("family-child", 2)];
        assert_eq!(queued, one_each);
        let waiting = "SELECT COUNT(*) FROM jobhost_runs WHERE status = 'queued' AND job <> 'kept'";

        // No host serves them any more: past the grace, each ends once, reported once.
        let m = home.manifest("", "[jobs.kept]\ncomponent = \"{guest:noop}\"\n");
        let server = serve_with(&home, &m, "1s").await;
        let ended = "SELECT COUNT(*) FROM jobhost_runs WHERE status = 'skipped' AND last_code = 'orphaned'";
        home.wait_for("SELECT COUNT(*) FROM jobhost_jobs WHERE name = 'kept' AND NOT EXISTS \
            (SELECT 1 FROM jobhost_runs WHERE status = 'queued' AND job <> 'kept')", Duration::from_secs(30)).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(home.scalar(waiting).await, 0);
        assert_eq!(home.scalar(ended).await, 6);
        assert_eq!(home.scalar(parked).await, 0, "a parked lease was left held");
        let reports = "SELECT COUNT(*) FROM jobhost_reports WHERE code = 'orphaned'";
        assert_eq!(home.scalar(reports).await, 6, "one report per run, however many beats");
        assert_eq!(home.scalar("SELECT COUNT(DISTINCT run_id) FROM jobhost_reports WHERE code = 'orphaned'").await, 6);
        let parent = server.runs(Some("waiting")).await[0]["run_id"].as_str().unwrap().to_string();
        let (_, parent) = server.get(&format!("/runs/{parent}")).await;
        assert_eq!((&parent["status"], &parent["code"]), (&"skipped".into(), &"orphaned".into()), "{parent}");
        stop(server).await;

        // Retention deletes them like any ended run, and then their jobs.
        let store = home.store().await;
        let pruned = store.prune(0, 500).await.unwrap();
        assert_eq!(pruned.jobs, 5, "{pruned:?}");
        for job in ["held", "retrying", "deferring", "waiting", "family-child"] {
            assert!(store.get_job(job).await.unwrap().is_none(), "{job} was kept");
        }
        assert!(store.get_job("kept").await.unwrap().is_some());
        store.close().await;
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs").await, 0);
    }

    async fn an_event_queues_no_run_of_an_orphaned_job_until_it_is_served_again(home) {
        let both = [noop_job("kept", "tick"), noop_job("gone", "tick")].concat();
        let m = home.manifest("", &both);
        stop(serve_with(&home, &m, "1s").await).await;
        let m = home.manifest("", &noop_job("kept", "tick"));
        let server = serve_with(&home, &m, "1s").await;
        home.wait_for("SELECT COUNT(*) FROM jobhost_jobs WHERE name = 'gone' AND orphaned_at IS NOT NULL", Duration::from_secs(20)).await;
        let emit = |key: &str| {
            let out = home.run(&["emit", "tick", "--key", key, "--json"]);
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let mut jobs: Vec<String> = answer["runs"].as_array().unwrap().iter()
                .map(|r| r["job"].as_str().unwrap().to_string()).collect();
            jobs.sort();
            jobs
        };
        assert_eq!(emit("k1"), ["kept"]);
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'gone'").await, 0);
        stop(server).await;
        // Served again, it is restored and reached.
        let m = home.manifest("", &both);
        let server = serve_with(&home, &m, "1s").await;
        home.wait_for("SELECT COUNT(*) FROM jobhost_jobs WHERE name = 'gone' AND orphaned_at IS NULL", Duration::from_secs(20)).await;
        assert_eq!(emit("k2"), ["gone", "kept"]);
        stop(server).await;
    }
}
