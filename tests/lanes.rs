//! Lanes and fair claiming end to end, with the real binary and real guests: a lane's
//! workers are its own, a host serves only the lanes it is given, and one tenant's backlog
//! delays another tenant's run by a claim's turn, not by the backlog.

use crate::common;

use common::{Backend, Home};
use serde_json::Value;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn status(r: &Value) -> &str {
    r["status"].as_str().unwrap_or_default()
}

fn succeeded(runs: &[Value]) -> usize {
    runs.iter().filter(|r| status(r) == "succeeded").count()
}

fn lanes_manifest(home: &Home) -> std::path::PathBuf {
    home.manifest(
        "",
        r#"
        [lanes.bulk]
        workers = 1
        [jobs.bulk]
        component = "{guest:hello}"
        lane = "bulk"
        payload = { sleep_ms = 700 }
        [jobs.quick]
        component = "{guest:hello}"
    "#,
    )
}

/// Queues `n` due runs of `job` for `tenant` with `payload`, each its own instance,
/// straight into the table (a backlog as a burst of kicks or a fan-out leaves it), in a
/// few statements.
async fn backlog(home: &Home, job: &str, tenant: &str, payload: &str, n: usize) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let ids: Vec<String> = (0..n).map(|_| jobhost::store::new_run_id()).collect();
    for (chunk_no, chunk) in ids.chunks(500).enumerate() {
        let rows: Vec<String> = chunk
            .iter()
            .enumerate()
            .map(|(i, id)| {
                format!(
                    "('{id}', '{job}', 'i{chunk_no}-{i}', '{tenant}', 'kick', '{payload}', 'queued', {now}, {now}, {now})"
                )
            })
            .collect();
        home.exec(&format!(
            "INSERT INTO jobhost_runs (id, job, instance, tenant, origin, payload, status, \
             next_attempt_at, created_at, updated_at) VALUES {}",
            rows.join(", ")
        ))
        .await;
    }
}

fn median(mut values: Vec<i64>) -> i64 {
    values.sort_unstable();
    values[values.len() / 2]
}

on_every_backend! {
    async fn a_lanes_workers_are_its_own(home) {
        let m = lanes_manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap(), "--workers", "2"]).await;
        for i in 0..4 {
            assert_eq!(server.post(&format!("/jobs/bulk/kick?instance=b{i}")).await.0, 202);
        }
        assert_eq!(server.post("/jobs/quick/kick").await.0, 202);
        server.wait_runs("quick", Duration::from_secs(20), |runs| succeeded(runs) == 1).await;
        // The default lane's run did not wait behind the bulk lane's backlog.
        let bulk_done = succeeded(&server.runs(Some("bulk")).await);
        assert!(bulk_done <= 1, "quick waited for {bulk_done} bulk runs");
        server.wait_runs("bulk", Duration::from_secs(30), |runs| succeeded(runs) == 4).await;
        // The bulk lane has one worker: its runs never ran at once, though the default
        // lane's two workers were free. An attempt ran for its `duration_ms` up to its
        // ending (the claim's time is earlier: the next run is claimed ahead); 100 ms
        // allow for how late each ending is recorded.
        let overlapping = home.scalar(
            "SELECT COUNT(*) FROM jobhost_attempts a JOIN jobhost_runs ra ON ra.id = a.run_id \
             JOIN jobhost_attempts b ON a.run_id < b.run_id JOIN jobhost_runs rb ON rb.id = b.run_id \
             WHERE ra.job = 'bulk' AND rb.job = 'bulk' \
             AND a.finished_at - a.duration_ms + 100 < b.finished_at \
             AND b.finished_at - b.duration_ms + 100 < a.finished_at",
        ).await;
        assert_eq!(overlapping, 0);
        let metrics = server.text("/metrics").await;
        for lane in ["bulk", "default"] {
            assert!(metrics.contains(&format!("jobhost_lane_queue_due{{lane=\"{lane}\"}} 0")), "{metrics}");
        }
    }

    async fn a_host_serves_only_the_lanes_it_is_given(home) {
        let m = lanes_manifest(&home);
        let m = m.to_str().unwrap();
        let refused = home.run(&["serve", "--manifest", m, "--lanes", "nope", "--listen", "127.0.0.1:0"]);
        assert_eq!(refused.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(stderr.contains("no lane \"nope\"") && stderr.contains("bulk, default"), "{stderr}");

        let bulk_only = home.serve(&["--manifest", m, "--lanes", "bulk"]).await;
        assert_eq!(bulk_only.post("/jobs/quick/kick").await.0, 202);
        assert_eq!(bulk_only.post("/jobs/bulk/kick").await.0, 202);
        bulk_only.wait_runs("bulk", Duration::from_secs(20), |runs| succeeded(runs) == 1).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let quick = bulk_only.runs(Some("quick")).await;
        assert_eq!(status(&quick[0]), "queued", "{quick:#?}");
        bulk_only.signal("TERM");
        assert_eq!(bulk_only.wait_exit(Duration::from_secs(20)).await.0, Some(0));

        let default_only = home.serve(&["--manifest", m, "--lanes", "default"]).await;
        default_only.wait_runs("quick", Duration::from_secs(20), |runs| succeeded(runs) == 1).await;
    }

    async fn one_tenants_backlog_delays_another_tenants_run_by_a_turn_not_by_the_backlog(home) {
        let m = home.manifest("", r#"
            [jobs.flood]
            component = "{guest:hello}"
            tenant = "alpha"
            [jobs.single]
            component = "{guest:noop}"
            tenant = "beta"
        "#);
        let hosts = match home.backend {
            Backend::Sqlite => 1,
            Backend::Postgres => 2,
        };
        let mut servers = Vec::new();
        for _ in 0..hosts {
            servers.push(home.serve(&["--manifest", m.to_str().unwrap(), "--workers", "4"]).await);
        }
        // Each of alpha's runs keeps a worker for 10 ms, so however fast the machine the
        // backlog takes at least BACKLOG x 10 ms / workers to drain (3.75 s on Postgres's
        // eight, 7.5 s on SQLite's four): beta's five tries, a claim's turn each, end well
        // before. A backlog of no-op runs was sized by how fast one machine drained it,
        // and a faster one drained it first.
        const BACKLOG: usize = 3_000;
        backlog(&home, "flood", "alpha", r#"{"sleep_ms":10}"#, BACKLOG).await;
        let server = &servers[0];
        // Several tries while alpha's backlog drains: beta's single run each time.
        let mut waits = Vec::new();
        for i in 0..5 {
            let (code, kicked) = server.post(&format!("/jobs/single/kick?instance=s{i}")).await;
            assert_eq!(code, 202, "{kicked}");
            let run_id = kicked["run_id"].as_str().unwrap().to_string();
            let started = format!("SELECT COUNT(*) FROM jobhost_runs WHERE id = '{run_id}' AND started_at IS NOT NULL");
            home.wait_for(&started, Duration::from_secs(60)).await;
            waits.push(home.scalar(&format!(
                "SELECT started_at - created_at FROM jobhost_runs WHERE id = '{run_id}'"
            )).await);
        }
        let left_when_done = home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'flood' AND status = 'queued'").await;
        home.wait_for(
            &format!("SELECT CAST(CASE WHEN COUNT(*) = {BACKLOG} THEN 1 ELSE 0 END AS BIGINT) FROM jobhost_runs \
                WHERE job = 'flood' AND status = 'succeeded'"),
            Duration::from_secs(600),
        ).await;
        let drain_ms = home.scalar(
            "SELECT MAX(finished_at) - MIN(started_at) FROM jobhost_runs WHERE job = 'flood'",
        ).await;
        let median_wait = median(waits.clone());
        eprintln!(
            "fairness ({:?}, {hosts} host(s) x 4 workers): beta's queue-to-start {waits:?} ms, median {median_wait} ms; \
             alpha's {BACKLOG} runs drained in {drain_ms} ms ({left_when_done} still queued after beta's last try)",
            home.backend
        );
        assert!(left_when_done > 0, "the backlog drained before beta's tries ended: the test measured nothing");
        // Without fairness beta's run waits for the runs due before it: most of the
        // backlog. With it, a claim's turn; the bound is generous for a loaded machine.
        assert!(
            median_wait * 10 < drain_ms,
            "beta waited {median_wait} ms (median of {waits:?}) against a drain of {drain_ms} ms"
        );
    }
}
