//! The operator's controls, end to end on both backends: cancel (fenced, at once, from the
//! serving host or from another process, with the attempt's host frozen across it), retry
//! now, pause and resume, and a disabled tenant's queued retries.

use crate::common;

use common::{Backend, Home, Server};
use serde_json::Value;
use std::time::{Duration, Instant};

/// A manifest of the jobs these tests control: `ledger` writes rows in one transaction
/// and waits inside it (or before it), `writer` and `holder` write transaction after
/// transaction, each holding the write lock a while (each row stamped with when its
/// transaction began), `flaky` fails, `pager` runs pass after pass.
fn manifest(home: &Home, ledger_wait_at: &str) -> std::path::PathBuf {
    home.manifest(
        "[lanes.bulk]\nworkers = 1\n",
        &format!(
            r#"
            [jobs.ledger]
            component = "{{guest:ledger}}"
            grants.db = {{ write = ["ledger"] }}
            timeout = "60s"
            retries = 0
            payload = {{ rows = 3, wait_ms = 8000, wait_at = "{ledger_wait_at}" }}
            [jobs.writer]
            component = "{{guest:ledger}}"
            grants.db = {{ write = ["ledger"] }}
            timeout = "60s"
            retries = 0
            payload = {{ rows = 2, wait_ms = 150, transactions = 10000, stamp = true }}
            [jobs.holder]
            component = "{{guest:ledger}}"
            grants.db = {{ write = ["ledger"] }}
            timeout = "60s"
            retries = 0
            payload = {{ rows = 2, wait_ms = 4000, transactions = 10000, stamp = true }}
            [jobs.flaky]
            component = "{{guest:flaky}}"
            retries = 0
            payload = {{ fail_times = 1000 }}
            [jobs.pager]
            component = "{{guest:pager}}"
            payload = {{ pages = 1000, defer_ms = 60000 }}
            [jobs.spin]
            component = "{{guest:spin}}"
            timeout = "60s"
            retries = 0
            [jobs.hello]
            component = "{{guest:hello}}"
            [jobs.bulky]
            component = "{{guest:hello}}"
            lane = "bulk"
        "#
        ),
    )
}

/// Kicks `job` (with `?instance=` if given) and returns its run's id.
async fn kick(server: &Server, job: &str) -> String {
    let (job, query) = job
        .split_once('?')
        .map_or((job, String::new()), |(j, q)| (j, format!("?{q}")));
    let (status, kicked) = server.post(&format!("/jobs/{job}/kick{query}")).await;
    assert_eq!(status, 202, "{kicked}");
    kicked["run_id"].as_str().expect("queued").to_string()
}

/// Pauses through the API, then lets a claim already in flight (which read the pauses
/// before) finish: a pause holds from the claims that start after it.
async fn pause(server: &Server, what: &str) {
    let (status, paused) = server.post(&format!("/pauses/{what}")).await;
    assert_eq!(status, 200, "{paused}");
    tokio::time::sleep(Duration::from_millis(500)).await;
}

async fn ledger_rows(home: &Home, run: &str) -> i64 {
    home.scalar(&format!(
        "SELECT COUNT(*) FROM ledger WHERE run_id = '{run}'"
    ))
    .await
}

/// Asserts the run ended cancelled by an operator, with one report, and stays so.
async fn assert_cancelled(home: &Home, server: &Server, id: &str) {
    let run = server
        .wait_run(id, "the cancel", |r| r["status"] == "cancelled")
        .await;
    assert_eq!(run["code"], "cancelled_by_operator", "{run}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let reports = home
        .scalar(&format!(
            "SELECT COUNT(*) FROM jobhost_reports WHERE run_id = '{id}' AND kind = 'cancelled'"
        ))
        .await;
    assert_eq!(reports, 1, "one report");
    assert_eq!(run_status(server, id).await, "cancelled", "never retried");
}

/// The wall clock in milliseconds, as the `ledger` guest stamps its rows.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Cancels the running `job`'s run from another process (`host runs cancel`) while it
/// writes transaction after transaction, `rounds` times, each at another point of its
/// cycle: the cancel returns within the bound, the run ends cancelled with one report, and
/// no transaction the attempt began after the cancel returned committed. Prints each
/// cancel's latency.
async fn race_cancels_against(home: &Home, server: &Server, job: &str, rounds: u64) {
    for round in 0..rounds {
        let id = kick(server, job).await;
        server
            .wait_run(&id, "the attempt", |r| r["status"] == "running")
            .await;
        let start = Instant::now();
        while ledger_rows(home, &id).await == 0 && job == "writer" {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the writer commits"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if job == "holder" {
            // Inside its first transaction, which holds the write lock for seconds.
            tokio::time::sleep(Duration::from_millis(1000)).await;
        }
        tokio::time::sleep(Duration::from_millis(37 * round % 200)).await;
        let asked = Instant::now();
        let out = home.run(&["runs", "cancel", &id]);
        let took = asked.elapsed();
        let returned = now_ms();
        let printed = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{printed}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(printed.contains("cancelled"), "{printed}");
        println!(
            "{:?} {job} round {round}: the cancel returned in {} ms",
            home.backend,
            took.as_millis()
        );
        assert!(
            took < Duration::from_secs(2),
            "the cancel returned in {took:?}"
        );
        assert_cancelled(home, server, &id).await;
        server
            .wait_run(&id, "the stopped attempt", |r| {
                r["attempt_records"][0]["finished_at"].is_string()
            })
            .await;
        let late = home
            .scalar(&format!(
                "SELECT COUNT(*) FROM ledger WHERE run_id = '{id}' AND n > {returned}"
            ))
            .await;
        assert_eq!(
            late, 0,
            "round {round}: a transaction begun after the cancel returned committed"
        );
    }
}

async fn run_status(server: &Server, id: &str) -> String {
    server.run_view(id).await["status"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

on_every_backend! {
    async fn a_cancelled_queued_run_never_starts(home) {
        let m = manifest(&home, "commit");
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        pause(&server, "job/hello").await;
        let id = kick(&server, "hello").await;
        let (status, cancelled) = server.post(&format!("/runs/{id}/cancel")).await;
        assert_eq!(status, 200, "{cancelled}");
        assert_eq!(cancelled["run"]["status"], "cancelled");
        let resumed = server.delete("/pauses/job/hello").await;
        assert_eq!(resumed.0, 200, "{}", resumed.1);
        assert_cancelled(&home, &server, &id).await;
        let run = server.run_view(&id).await;
        assert_eq!(run["attempts"], 0, "{run}");
        assert_eq!(run["attempt_records"].as_array().map(Vec::len), Some(0), "{run}");
        // Cancelling again, or a run that ended, is refused and changes nothing.
        let (status, again) = server.post(&format!("/runs/{id}/cancel")).await;
        assert_eq!((status, again["error"]["code"].as_str()), (409, Some("not_cancellable")), "{again}");
        let (status, _) = server.post("/runs/no-such-run/cancel").await;
        assert_eq!(status, 404);
    }

    async fn a_running_ledger_attempt_cancelled_mid_transaction_commits_nothing(home) {
        let m = manifest(&home, "commit");
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let id = kick(&server, "ledger").await;
        server.wait_run(&id, "the attempt", |r| r["status"] == "running").await;
        // Inside its transaction: the rows are inserted, the commit waits.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let asked = Instant::now();
        let (status, cancelled) = server.post(&format!("/runs/{id}/cancel")).await;
        assert_eq!(status, 200, "{cancelled}");
        assert_cancelled(&home, &server, &id).await;
        let run = server.wait_run(&id, "the attempt's record", |r| {
            r["attempt_records"][0]["finished_at"].is_string()
        })
        .await;
        assert!(asked.elapsed() < Duration::from_secs(5), "stopped at once, not at its commit");
        assert_eq!(run["attempt_records"][0]["code"], "cancelled_by_operator", "{run}");
        // Past the guest's wait: had it not been stopped and fenced, it would have committed.
        tokio::time::sleep(Duration::from_secs(8)).await;
        assert_eq!(ledger_rows(&home, &id).await, 0, "no row of a cancelled attempt commits");
        assert_eq!(run_status(&server, &id).await, "cancelled");
    }

    async fn a_cancel_from_another_process_wins_over_a_busy_writer_every_time(home) {
        let m = manifest(&home, "commit");
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        race_cancels_against(&home, &server, "writer", 10).await;
        // A transaction that holds the write lock longer than a cancel waits for it: the
        // cancel answers, recorded, and the attempt it stops lets the cancel be written.
        race_cancels_against(&home, &server, "holder", 3).await;
        let next = kick(&server, "hello").await;
        server.wait_run(&next, "another run", |r| r["status"] == "succeeded").await;
    }

    async fn a_cancel_answers_at_once_though_a_host_run_holds_the_write_lock_for_seconds(home) {
        // `host run` watches for no cancel: on SQLite its guest's transaction keeps the
        // write lock for seconds, past the cancel's wait. The cancel answers, recorded; the
        // guest's commit is refused, and `host run` writes the cancel as it finishes.
        let m = manifest(&home, "commit");
        let mut host_run = home.spawn(&["run", "holder", "--manifest", m.to_str().unwrap()]);
        let store = home.store().await;
        let start = Instant::now();
        let id = loop {
            let filter = jobhost::store::RunFilter {
                job: Some("holder".into()),
                limit: 10,
                ..Default::default()
            };
            let runs = store.list_runs(&filter).await.unwrap();
            if let Some(run) = runs.iter().find(|r| r.status == "running") {
                break run.id.clone();
            }
            // The wait includes the component's compile, shared with every other test's
            // hosts through the compile cache: a liveness bound, not a timing.
            assert!(start.elapsed() < Duration::from_secs(180), "host run starts the run");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        store.close().await;
        // Inside its first transaction.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let asked = Instant::now();
        let out = home.run(&["runs", "cancel", &id]);
        let took = asked.elapsed();
        let printed = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{printed}{}", String::from_utf8_lossy(&out.stderr));
        assert!(printed.contains("cancelled"), "{printed}");
        println!("{:?} host run holder: the cancel returned in {} ms", home.backend, took.as_millis());
        assert!(took < Duration::from_secs(2), "the cancel returned in {took:?}");
        let start = Instant::now();
        while host_run.try_wait().unwrap().is_none() {
            assert!(start.elapsed() < Duration::from_secs(30), "host run ends");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let cancelled = home
            .scalar(&format!(
                "SELECT COUNT(*) FROM jobhost_runs WHERE id = '{id}' AND status = 'cancelled' \
                 AND last_code = 'cancelled_by_operator'"
            ))
            .await;
        assert_eq!(cancelled, 1, "the recorded cancel was written");
        // Its audit row too, handed to a process of its own while the lock was held.
        home.wait_for(
            &format!("SELECT COUNT(*) FROM jobhost_audit WHERE run_id = '{id}' AND action = 'run.cancel' AND result = 'ok'"),
            Duration::from_secs(60),
        )
        .await;
        let reports = home
            .scalar(&format!(
                "SELECT COUNT(*) FROM jobhost_reports WHERE run_id = '{id}' AND kind = 'cancelled'"
            ))
            .await;
        assert_eq!(reports, 1, "one report");
        assert_eq!(ledger_rows(&home, &id).await, 0, "the open transaction's commit was refused");
    }

    async fn a_guest_spinning_in_pure_compute_is_stopped_by_a_cancel_from_another_process(home) {
        // No host call to cut: only the epoch deadline callback can stop it.
        let m = manifest(&home, "commit");
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let id = kick(&server, "spin").await;
        server.wait_run(&id, "the attempt", |r| r["status"] == "running").await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let asked = Instant::now();
        let out = home.run(&["runs", "cancel", &id]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let run = server.wait_run(&id, "the stopped attempt", |r| {
            r["attempt_records"][0]["finished_at"].is_string()
        })
        .await;
        assert!(asked.elapsed() < Duration::from_secs(10), "stopped long before its 60 s deadline");
        assert_eq!(run["status"], "cancelled", "{run}");
        assert_eq!(run["attempt_records"][0]["code"], "cancelled_by_operator", "{run}");
        let next = kick(&server, "hello").await;
        server.wait_run(&next, "another run", |r| r["status"] == "succeeded").await;
    }

    async fn a_cancel_from_another_process_fences_an_attempt_whose_host_is_frozen(home) {
        // On SQLite a guest's open transaction holds the file's one write lock, which a
        // frozen host would keep: the host is frozen before its transaction opens there,
        // inside it on Postgres.
        let wait_at = match home.backend {
            Backend::Sqlite => "begin",
            Backend::Postgres => "commit",
        };
        let m = manifest(&home, wait_at);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let id = kick(&server, "ledger").await;
        server.wait_run(&id, "the attempt", |r| r["status"] == "running").await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        server.signal("STOP");
        let out = home.run(&["runs", "cancel", &id]);
        let printed = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{printed}{}", String::from_utf8_lossy(&out.stderr));
        assert!(printed.contains("cancelled"), "{printed}");
        // The cancel committed while the host was frozen: its lease moved on.
        let generation = home
            .scalar(&format!(
                "SELECT COUNT(*) FROM jobhost_leases WHERE job = 'ledger' AND holder IS NULL \
                 AND generation > (SELECT generation FROM jobhost_runs WHERE id = '{id}')"
            ))
            .await;
        assert_eq!(generation, 1, "the lease is fenced off");
        server.signal("CONT");
        assert_cancelled(&home, &server, &id).await;
        // The guest woke and tried to commit (at most the rest of its wait): refused.
        tokio::time::sleep(Duration::from_secs(9)).await;
        assert_eq!(ledger_rows(&home, &id).await, 0, "no row of a cancelled attempt commits");
        let run = server.run_view(&id).await;
        assert_eq!(run["status"], "cancelled", "{run}");
        assert_eq!(run["attempt_records"][0]["code"], "cancelled_by_operator", "{run}");
        // The host serves on.
        let next = kick(&server, "hello").await;
        server.wait_run(&next, "another run", |r| r["status"] == "succeeded").await;
    }

    async fn a_cancelled_stepped_run_keeps_its_passes_and_a_retry_resumes_them(home) {
        let m = manifest(&home, "commit");
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let id = kick(&server, "pager").await;
        // Pass 1 continues, pass 2 defers for a minute: the run waits, deferred.
        let waiting = server.wait_run(&id, "a deferred pass", |r| {
            r["status"] == "queued" && r["passes"].as_i64() >= Some(2)
        })
        .await;
        // A kick while the run holds its instance's lease waits in the lease's pending flag:
        // the cancel queues it, as any end of the run would.
        let (status, pending) = server.post("/jobs/pager/kick").await;
        assert_eq!((status, pending["result"].as_str()), (202, Some("pending")), "{pending}");
        assert_eq!(server.run_view(&id).await["kicks_pending"], 1, "the run shows the kick it holds");
        let (status, _) = server.post(&format!("/runs/{id}/cancel")).await;
        assert_eq!(status, 200);
        assert_cancelled(&home, &server, &id).await;
        let follow_ups = home
            .scalar(&format!("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'pager' AND origin = 'kick' AND id <> '{id}'"))
            .await;
        assert_eq!(follow_ups, 1, "the pending kick is not lost");
        // The follow-up holds the instance's lease; cancelled by filter, it frees it for the
        // retry below (which would otherwise end skipped, as any run that finds its
        // instance's lease held).
        let body = r#"{"filter": {"job": "pager", "status": "queued"}, "confirm": true}"#;
        let deadline = Instant::now() + Duration::from_secs(30);
        while home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'pager' AND status = 'running'").await > 0 {
            assert!(Instant::now() < deadline, "the follow-up's first pass did not end");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (status, done) = server.post_as(Some(&server.token), "/runs/cancel", Some(body)).await;
        assert_eq!((status, &done["done"]), (200, &Value::from(1)), "{done}");
        let cancelled = server.run_view(&id).await;
        assert_eq!(cancelled["passes"], waiting["passes"], "committed passes stay");
        assert_eq!(cancelled["cursor"], waiting["cursor"]);

        let (status, retried) = server.post(&format!("/runs/{id}/retry")).await;
        assert_eq!(status, 201, "{retried}");
        let retry = retried["run"]["run_id"].as_str().unwrap().to_string();
        assert_eq!(retried["run"]["retry_of"], id.as_str());
        assert_eq!(retried["run"]["origin"], "retry");
        assert_eq!(retried["run"]["passes"], waiting["passes"], "resumes the last committed pass");
        assert_eq!(retried["run"]["cursor"], waiting["cursor"]);
        assert_eq!(server.run_view(&id).await["retried_by"], retry.as_str());
        // Retried once: asking again answers the same retry.
        let (status, again) = server.post(&format!("/runs/{id}/retry")).await;
        assert_eq!((status, &again["run"]["run_id"], &again["already"]), (200, &Value::from(retry.as_str()), &Value::Bool(true)));
        server.wait_run(&retry, "the retry's next pass", |r| {
            r["passes"].as_i64() > waiting["passes"].as_i64()
        })
        .await;
        let (status, _) = server.post(&format!("/runs/{retry}/cancel")).await;
        assert_eq!(status, 200);
    }

    async fn a_kick_folded_into_a_running_run_is_no_run_of_its_own(home) {
        let m = home.manifest("", r#"
            [jobs.folded]
            component = "{guest:hello}"
        "#);
        let m = m.to_str().unwrap();
        let drive = || {
            let out = home.run(&["drive", "--manifest", m, "--json"]);
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        };
        // Registers the job; then a kick queues a run while nothing holds the lease.
        drive();
        let out = home.run(&["kick", "folded", "--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let kicked: Value = serde_json::from_slice(&out.stdout).unwrap();
        let kick_id = kicked["run_id"].as_str().expect("queued").to_string();
        // Before a host claims it, another run takes the instance's lease (as one on
        // another host would).
        home.exec(
            "INSERT INTO jobhost_runs (id, job, instance, tenant, origin, payload, status, \
             generation, next_attempt_at, created_at, updated_at) VALUES \
             ('holder', 'folded', 'default', 'default', 'kick', '{}', 'running', 1, 5, 5, 5); \
             INSERT INTO jobhost_leases (job, instance, generation, holder, deadline_at, \
             expires_at, pending, updated_at) VALUES ('folded', 'default', 1, 'elsewhere', 9e15, 9e15, 0, 5)",
        )
        .await;
        // The claim finds the lease held: the kick folds into the holder's pending flag
        // and is no run of its own, in the list or anywhere.
        drive();
        assert_eq!(home.scalar("SELECT pending FROM jobhost_leases WHERE job = 'folded'").await, 1);
        let out = home.run(&["runs", "list", "--job", "folded", "--json"]);
        let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
        let ids: Vec<&str> = listed.as_array().unwrap().iter().map(|r| r["run_id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["holder"], "{listed}");
        assert_eq!(home.scalar(&format!("SELECT COUNT(*) FROM jobhost_runs WHERE id = '{kick_id}'")).await, 0);
        // The running run says it holds one.
        let out = home.run(&["runs", "show", "holder", "--json"]);
        let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(shown["kicks_pending"], 1, "{shown}");
        let out = home.run(&["runs", "show", "holder"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("1 kick pending: the job runs once more when this run ends"), "{text}");
    }

    async fn a_failed_run_is_retried_now_singly_and_by_filter_once(home) {
        let m = manifest(&home, "commit");
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let first = kick(&server, "flaky").await;
        server.wait_run(&first, "the failure", |r| r["status"] == "failed").await;
        let (status, refused) = server.post(&format!("/runs/{first}/cancel")).await;
        assert_eq!(status, 409, "{refused}");
        let (status, retried) = server.post(&format!("/runs/{first}/retry")).await;
        assert_eq!(status, 201, "{retried}");
        let retry = retried["run"]["run_id"].as_str().unwrap().to_string();
        let retry_run = server.wait_run(&retry, "the retry", |r| r["status"] == "failed").await;
        assert_eq!(retry_run["retry_of"], first.as_str());
        assert_eq!(retry_run["payload"], serde_json::json!({"fail_times": 1000}));

        // By filter: a preview counts and changes nothing; confirmed, each run is retried
        // once, and sending it again retries nothing more. The job is paused, so the
        // retries wait (a retry that failed could be retried in turn).
        pause(&server, "job/flaky").await;
        let body = r#"{"filter": {"job": "flaky", "status": "failed"}}"#;
        let (status, preview) = server.post_as(Some(&server.token), "/runs/retry", Some(body)).await;
        assert_eq!(status, 200, "{preview}");
        assert_eq!(preview["count"], 1, "the first run was retried already: {preview}");
        let confirmed = r#"{"filter": {"job": "flaky", "status": "failed"}, "confirm": true}"#;
        let (_, done) = server.post_as(Some(&server.token), "/runs/retry", Some(confirmed)).await;
        assert_eq!(done, serde_json::json!({"done": 1, "more": false}));
        let (_, again) = server.post_as(Some(&server.token), "/runs/retry", Some(confirmed)).await;
        assert_eq!(again["done"], 0, "idempotent: {again}");
        let retries = home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE origin = 'retry'").await;
        assert_eq!(retries, 2);
        let (status, refused) = server
            .post_as(Some(&server.token), "/runs/retry", Some(r#"{"filter": {"code": "nonsense"}}"#))
            .await;
        assert_eq!((status, refused["error"]["code"].as_str()), (400, Some("invalid_parameter")));
        let metrics = server.text("/metrics").await;
        assert!(
            metrics.contains(r#"jobhost_operator_actions_total{action="retry",job="flaky",tenant="default"} 2"#),
            "{metrics}"
        );
    }

    async fn a_paused_job_and_a_paused_lane_claim_nothing_until_resumed(home) {
        let m = manifest(&home, "commit");
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let out = home.run(&["pause", "job", "hello"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        pause(&server, "lane/bulk").await;
        let mut held = Vec::new();
        for instance in ["a", "b", "c"] {
            held.push(kick(&server, &format!("hello?instance={instance}")).await);
            held.push(kick(&server, &format!("bulky?instance={instance}")).await);
        }
        let (_, hello) = server.get("/jobs/hello").await;
        assert_eq!(hello["paused"], true, "{hello}");
        // A pause through another process reaches the host's claims within a quarter second.
        tokio::time::sleep(Duration::from_secs(2)).await;
        for id in &held {
            assert_eq!(run_status(&server, id).await, "queued", "{id} waits while paused");
        }
        let listed = String::from_utf8_lossy(&home.run(&["pauses"]).stdout).to_string();
        assert!(listed.contains("job") && listed.contains("hello") && listed.contains("bulk"), "{listed}");
        let metrics = server.text("/metrics").await;
        assert!(metrics.contains(r#"jobhost_paused{lane="bulk"} 1"#), "{metrics}");
        assert!(metrics.contains(r#"jobhost_paused{job="hello"} 1"#), "{metrics}");

        let out = home.run(&["resume", "job", "hello"]);
        assert!(out.status.success());
        let (status, _) = server.delete("/pauses/lane/bulk").await;
        assert_eq!(status, 200);
        for id in &held {
            server.wait_run(id, "the resumed run", |r| r["status"] == "succeeded").await;
        }
        let listed = String::from_utf8_lossy(&home.run(&["pauses"]).stdout).to_string();
        assert!(listed.contains("nothing is paused"), "{listed}");
        // Bad pauses are refused in words, and change nothing.
        let (status, refused) = server.post("/pauses/queue/x").await;
        assert_eq!((status, refused["error"]["code"].as_str()), (400, Some("invalid_parameter")));
        let out = home.run(&["pause", "job", "Not A Name"]);
        assert_eq!(out.status.code(), Some(2));
    }

    async fn a_disabled_tenants_queued_retries_end_with_a_fixed_code(home) {
        assert!(home.run(&["tenants", "add", "acme"]).status.success());
        let m = home.manifest(
            "",
            r#"
            [jobs.acme-flaky]
            component = "{guest:flaky}"
            tenant = "acme"
            retries = 3
            backoff = "3s"
            payload = { fail_times = 1000 }
            [jobs.acme-hello]
            component = "{guest:hello}"
            tenant = "acme"
        "#,
        );
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let acme = home.create_token(Some("acme"));
        let id = kick(&server, "acme-flaky").await;
        server.wait_run(&id, "a retry waiting", |r| {
            r["status"] == "queued" && r["code"] == "handler_failed"
        })
        .await;
        // A tenant cancels only its own runs: another tenant's, or the operator's, do not
        // exist for it.
        let other = kick(&server, "acme-hello").await;
        let globex = {
            assert!(home.run(&["tenants", "add", "globex"]).status.success());
            home.create_token(Some("globex"))
        };
        let (status, _) = server.post_as(Some(&globex), &format!("/runs/{other}/cancel"), None).await;
        assert_eq!(status, 404);
        let (status, _) = server.post_as(Some(&acme), "/pauses/job/acme-hello", None).await;
        assert_eq!(status, 404, "pauses are the operator's");

        let (status, _) = server.post("/tenants/acme/disable").await;
        assert_eq!(status, 200);
        let ended = server.wait_run(&id, "the retry's claim", |r| r["status"] == "skipped").await;
        assert_eq!(ended["code"], "tenant_disabled", "{ended}");
        let ran = ended["attempt_records"].as_array().map(Vec::len);
        assert_eq!(ran, Some(1), "no attempt ran after the disable: {ended}");
        let reports = home
            .scalar(&format!("SELECT COUNT(*) FROM jobhost_reports WHERE run_id = '{id}' AND code = 'tenant_disabled'"))
            .await;
        assert_eq!(reports, 1);
    }

    async fn cancel_and_retry_by_filter_preview_first_and_act_in_bounded_batches(home) {
        let m = manifest(&home, "commit");
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        pause(&server, "job/hello").await;
        let store = home.store().await;
        for i in 0..30 {
            common::queue_run(&store, "hello", &format!("held-{i:02}"), 0).await;
        }
        store.close().await;
        let (status, counted) = server.get("/runs/count?job=hello&status=queued").await;
        assert_eq!((status, counted["count"].as_i64()), (200, Some(30)), "{counted}");
        let out = home.run(&["runs", "cancel", "--job", "hello"]);
        let printed = String::from_utf8_lossy(&out.stdout);
        assert!(printed.contains("30 runs match; add --yes"), "{printed}");
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE status = 'cancelled'").await, 0);
        let out = home.run(&["runs", "cancel", "--job", "hello", "--yes"]);
        assert!(String::from_utf8_lossy(&out.stdout).contains("30 runs cancelled"));
        let out = home.run(&["runs", "cancel", "--job", "hello", "--yes"]);
        assert!(String::from_utf8_lossy(&out.stdout).contains("0 runs cancelled"), "idempotent");
        let out = home.run(&["runs", "retry", "--job", "hello", "--status", "cancelled", "--yes"]);
        assert!(String::from_utf8_lossy(&out.stdout).contains("30 runs retried"));
        let out = home.run(&["runs", "cancel", "some-run", "--job", "hello"]);
        assert_eq!(out.status.code(), Some(2), "ids or a filter, not both");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_run_shows_a_long_runs_progress_pass_by_pass_and_nothing_with_json() {
    let home = Home::new(Backend::Sqlite).await;
    let pager = common::guest("pager");
    let args = [
        "run",
        "--job",
        pager.to_str().unwrap(),
        "--payload",
        r#"{"pages": 3}"#,
    ];
    let out = home.run(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Not a terminal: one plain line per pass, on stderr.
    let progress = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = progress
        .lines()
        .filter(|l| l.starts_with("pager pass "))
        .collect();
    // After each pass that leaves the run queued: the pass to run next and its cursor.
    assert_eq!(lines.len(), 2, "{progress}");
    assert!(
        lines[0].starts_with("pager pass 2 · cursor {\"page\":1} · "),
        "{progress}"
    );
    assert!(
        lines[1].starts_with("pager pass 3 · cursor {\"page\":2} · ") && lines[1].ends_with(" s"),
        "{progress}"
    );
    assert!(
        !progress.contains('\r') && !progress.contains('\x1b'),
        "{progress:?}"
    );
    let mut json = args.to_vec();
    json.push("--json");
    let out = home.run(&json);
    assert!(out.status.success());
    let quiet = String::from_utf8_lossy(&out.stderr);
    assert!(!quiet.contains("pager pass"), "{quiet}");
}
