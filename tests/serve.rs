//! `host serve` end to end: schedules, kicks, surveillance, reports, the HTTP API and
//! graceful shutdown, with the real binary and real guests.

use crate::common;

use common::guest;
use serde_json::Value;
use std::time::{Duration, Instant};

fn count(runs: &[Value], f: impl Fn(&Value) -> bool) -> usize {
    runs.iter().filter(|r| f(r)).count()
}

fn status(r: &Value) -> &str {
    r["status"].as_str().unwrap_or_default()
}

on_every_backend! {
    async fn a_fast_schedule_fires_runs(home) {
        let m = home.manifest("", r#"
            [jobs.tick]
            component = "{guest:hello}"
            schedule = "* * * * * *"
        "#);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let runs = server
            .wait_runs("tick", Duration::from_secs(15), |runs| count(runs, |r| status(r) == "succeeded") >= 3)
            .await;
        assert!(runs.iter().all(|r| r["origin"] == "cron"), "{runs:#?}");
        let mut ticks: Vec<&str> = runs.iter().filter_map(|r| r["scheduled_for"].as_str()).collect();
        let all = ticks.len();
        ticks.dedup();
        assert_eq!(ticks.len(), all, "one run per tick");
        let (_, job) = server.get("/jobs/tick").await;
        assert_eq!(job["schedule"], "* * * * * *");
        assert!(job["next_fire_at"].is_string() && job["last_success_at"].is_string(), "{job}");
    }

    async fn overlapping_ticks_are_skipped_not_run_twice(home) {
        let m = home.manifest("", r#"
            [jobs.slow]
            component = "{guest:hello}"
            schedule = "* * * * * *"
            timeout = "10s"
            payload = { sleep_ms = 2500 }
        "#);
        let server = home.serve(&["--manifest", m.to_str().unwrap(), "--workers", "4"]).await;
        let runs = server
            .wait_runs("slow", Duration::from_secs(20), |runs| {
                count(runs, |r| status(r) == "succeeded") >= 2 && count(runs, |r| status(r) == "skipped") >= 2
            })
            .await;
        // No two runs of the job ever ran at once.
        let mut spans: Vec<(String, String)> = runs
            .iter()
            .filter(|r| status(r) == "succeeded")
            .map(|r| (r["started_at"].as_str().unwrap().to_string(), r["finished_at"].as_str().unwrap().to_string()))
            .collect();
        spans.sort();
        for w in spans.windows(2) {
            assert!(w[0].1 <= w[1].0, "runs overlapped: {w:?}");
        }
        let skipped = runs.iter().find(|r| status(r) == "skipped").unwrap();
        assert_eq!(skipped["attempts"], 0);
        assert_eq!(skipped["code"], Value::Null);
    }

    async fn a_host_leaves_the_runs_of_jobs_it_does_not_have_queued(home) {
        // Both jobs registered (by a host that had both), then a host with only `hello`.
        let both = "[jobs.hello]\ncomponent = \"{guest:hello}\"\n[jobs.other]\ncomponent = \"{guest:noop}\"\n";
        let m = home.manifest("", both);
        drop(home.serve(&["--manifest", m.to_str().unwrap()]).await);
        let out = home.run(&["kick", "other"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let only = home.manifest("", "[jobs.hello]\ncomponent = \"{guest:hello}\"\n");
        let server = home.serve(&["--manifest", only.to_str().unwrap(), "--poll", "100ms"]).await;
        let (code, _) = server.post("/jobs/hello/kick").await;
        assert_eq!(code, 202);
        server.wait_runs("hello", Duration::from_secs(20), |runs| count(runs, |r| status(r) == "succeeded") == 1).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let other = server.runs(Some("other")).await;
        assert_eq!((other.len(), status(&other[0])), (1, "queued"), "{other:#?}");
        drop(server);
        // A host that has it runs it.
        let m = home.manifest("", both);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        server.wait_runs("other", Duration::from_secs(20), |runs| count(runs, |r| status(r) == "succeeded") == 1).await;
    }

    async fn retention_prunes_finished_history_and_never_a_live_run(home) {
        let hello = guest("hello").display().to_string();
        for _ in 0..3 {
            let (code, run) = home.run_json(&["--job", &hello]);
            assert_eq!(code, 0, "{run}");
        }
        // Instances run once long ago leave idle leases; one of them has a run queued.
        for instance in ["old-1", "old-2", "later"] {
            assert_eq!(home.run_json(&["--job", &hello, "--instance", instance]).0, 0);
        }
        let store = home.store().await;
        let live = common::queue_run(&store, "hello", "later", 86_400_000).await;
        store.close().await;
        assert_eq!(home.exec("UPDATE jobhost_leases SET updated_at = updated_at - 7200000 \
            WHERE job = 'hello' AND instance <> 'default'").await, 3);
        // Everything so far is two hours old; then one recent run.
        home.exec("UPDATE jobhost_runs SET created_at = created_at - 7200000").await;
        let (_, recent) = home.run_json(&["--job", &hello]);
        home.exec("INSERT INTO jobhost_reports (kind, job, code, body, created_at, next_try_at, delivered_at) \
            VALUES ('run_failed', 'hello', 'trap', '{}', 0, 0, 0), ('run_failed', 'hello', 'trap', '{}', 0, 0, NULL)").await;
        home.exec("INSERT INTO jobhost_audit (at, actor, label, action, object, result) \
            VALUES (0, 'cli', 'old', 'pause', 'job hello', 'ok'), \
            (9000000000000000, 'cli', 'recent', 'pause', 'job hello', 'ok')").await;
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_attempts").await, 7);
        let m = home.manifest("", "[jobs.hello]\ncomponent = \"{guest:hello}\"\n");
        let server = home.serve(&["--manifest", m.to_str().unwrap(), "--retention", "1h",
            "--webhook", "http://127.0.0.1:9/hook",
            "--surveillance-interval", "1s"]).await;
        home.wait_for("SELECT COUNT(*) FROM (SELECT COUNT(*) AS n FROM jobhost_runs) c WHERE n = 2", Duration::from_secs(20)).await;
        drop(server);
        let kept = home.scalar(&format!(
            "SELECT COUNT(*) FROM jobhost_runs WHERE id IN ('{}', '{}')", live.id, recent["run_id"].as_str().unwrap())).await;
        assert_eq!(kept, 2, "the live run and the recent one are kept");
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_attempts").await, 1, "only the recent run's attempt");
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_reports WHERE created_at = 0").await, 1,
            "an undelivered report (its webhook refuses) is kept");
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_audit WHERE label = 'old'").await, 0,
            "audit rows past the retention age go with the runs");
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_audit WHERE label = 'recent'").await, 1);
        // Idle leases went with the runs, in the same transaction; the one a queued run
        // needs, and the recently used one, stay.
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_leases WHERE instance LIKE 'old-%'").await, 0);
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_leases WHERE job = 'hello' AND instance IN ('later', 'default')").await, 2);
    }

    async fn ten_kicks_during_a_run_cause_exactly_one_follow_up(home) {
        let m = home.manifest("", r#"
            [jobs.busy]
            component = "{guest:hello}"
            payload = { sleep_ms = 2000 }
        "#);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let (code, first) = server.post("/jobs/busy/kick").await;
        assert_eq!(code, 202);
        assert_eq!(first["result"], "queued");
        // Wait for the run to hold its lease (claimed is not enough: a kick between the
        // claim and the lease queues a run, which then folds itself into the flag).
        let started = Instant::now();
        while server.get("/jobs/busy").await.1["lease"]["held"] != true {
            assert!(started.elapsed() < Duration::from_secs(10), "the run never took its lease");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for _ in 0..10 {
            let (code, kicked) = server.post("/jobs/busy/kick").await;
            assert_eq!((code, kicked["result"].as_str()), (202, Some("pending")));
        }
        let runs = server
            .wait_runs("busy", Duration::from_secs(20), |runs| count(runs, |r| status(r) == "succeeded") == 2)
            .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let runs_after = server.runs(Some("busy")).await;
        assert_eq!(runs_after.len(), 2, "exactly one follow-up: {runs:#?}");
        assert!(runs_after.iter().all(|r| r["origin"] == "kick"));
        let (_, job) = server.get("/jobs/busy").await;
        assert_eq!(job["lease"]["pending"], false);
    }

    async fn a_follow_up_after_a_failed_run_waits_for_the_jobs_backoff(home) {
        let m = home.manifest("", r#"
            [jobs.failing]
            component = "{guest:hello}"
            timeout = "1s"
            retries = 0
            backoff = "4s"
            payload = { sleep_ms = 3000 }
        "#);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let (code, first) = server.post("/jobs/failing/kick").await;
        assert_eq!((code, first["result"].as_str()), (202, Some("queued")), "{first}");
        let started = Instant::now();
        while server.get("/jobs/failing").await.1["lease"]["held"] != true {
            assert!(started.elapsed() < Duration::from_secs(10), "the run never took its lease");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (code, kicked) = server.post("/jobs/failing/kick").await;
        assert_eq!((code, kicked["result"].as_str()), (202, Some("pending")), "{kicked}");
        // The run times out; the kick's follow-up is queued due after the job's backoff (2
        // to 4 s: half of it fixed, half jitter), as a retry would be, not at once.
        server
            .wait_runs("failing", Duration::from_secs(20), |runs| runs.len() == 2 && count(runs, |r| status(r) == "failed") >= 1)
            .await;
        let first_id = first["run_id"].as_str().unwrap();
        let delay = home
            .scalar(&format!(
                "SELECT next_attempt_at - created_at FROM jobhost_runs WHERE job = 'failing' AND id <> '{first_id}'"
            ))
            .await;
        assert!((1_900..=4_100).contains(&delay), "the follow-up was due {delay} ms after it was queued");
    }

    async fn a_killed_host_is_found_by_the_next_and_reported_crashed_once(home) {
        let m = home.manifest("", r#"
            [jobs.victim]
            component = "{guest:hello}"
            timeout = "3s"
            payload = { sleep_ms = 1500 }
        "#);
        let manifest = m.to_str().unwrap();
        let first = home
            .serve(&["--manifest", manifest, "--lease-grace", "1s", "--surveillance-interval", "1s"])
            .await;
        first.post("/jobs/victim/kick").await;
        first.wait_runs("victim", Duration::from_secs(10), |runs| count(runs, |r| status(r) == "running") == 1).await;
        first.signal("KILL");
        let _ = first.wait_exit(Duration::from_secs(5)).await;
        let second = home
            .serve(&["--manifest", manifest, "--lease-grace", "1s", "--surveillance-interval", "1s"])
            .await;
        let runs = second
            .wait_runs("victim", Duration::from_secs(30), |runs| {
                count(runs, |r| status(r) == "crashed") == 1 && count(runs, |r| status(r) == "succeeded") == 1
            })
            .await;
        let crashed = runs.iter().find(|r| status(r) == "crashed").unwrap();
        let rerun = runs.iter().find(|r| status(r) == "succeeded").unwrap();
        assert_eq!(crashed["code"], "crashed");
        assert_eq!(rerun["origin"], "rerun");
        assert_eq!(rerun["rerun_of"], crashed["run_id"]);
        // The crashed run names the run that resumed it.
        assert_eq!(crashed["resumed_by"], rerun["run_id"]);
        // Several more surveillance periods: still one crash report.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (_, reports) = second.get("/reports?job=victim").await;
        let crashes: Vec<&Value> = reports["reports"].as_array().unwrap().iter().filter(|r| r["kind"] == "crashed").collect();
        assert_eq!(crashes.len(), 1, "{reports}");
        assert_eq!(crashes[0]["run_id"], crashed["run_id"]);
        assert_eq!(crashes[0]["code"], "crashed");
    }

    async fn a_killed_host_with_a_long_interval_keeps_no_shorter_one_from_finding_its_runs(home) {
        let m = home.manifest("", r#"
            [jobs.victim]
            component = "{guest:hello}"
            timeout = "3s"
            payload = { sleep_ms = 1500 }
        "#);
        let manifest = m.to_str().unwrap();
        // The first host surveils once a minute and takes the turn before it is killed.
        let first = home
            .serve(&["--manifest", manifest, "--lease-grace", "1s", "--surveillance-interval", "60s"])
            .await;
        home.wait_for(
            &format!(
                "SELECT COUNT(*) FROM jobhost_leases WHERE job = 'jobhost:surveillance' AND holder LIKE '%-{}'",
                first.child.id()
            ),
            Duration::from_secs(10),
        )
        .await;
        first.post("/jobs/victim/kick").await;
        first.wait_runs("victim", Duration::from_secs(10), |runs| count(runs, |r| status(r) == "running") == 1).await;
        let lease_expires = home.scalar("SELECT expires_at FROM jobhost_leases WHERE job = 'victim'").await;
        first.signal("KILL");
        let _ = first.wait_exit(Duration::from_secs(5)).await;
        // The second surveils every second: it finds the crashed run within its own
        // periods after the lease's expiry and staleness, not the first host's minute.
        let interval_ms = 1_000;
        let stale_ms = 1_000;
        let second = home
            .serve(&["--manifest", manifest, "--lease-grace", "1s", "--surveillance-interval", "1s"])
            .await;
        let store = home.store().await;
        let second_ready_at = store.now().await.unwrap();
        store.close().await;
        second
            .wait_runs("victim", Duration::from_secs(60), |runs| count(runs, |r| status(r) == "crashed") == 1)
            .await;
        let crashed_at = home.scalar("SELECT finished_at FROM jobhost_runs WHERE status = 'crashed'").await;
        let late = crashed_at - (lease_expires + stale_ms).max(second_ready_at);
        assert!(
            late <= 3 * interval_ms,
            "the crash was found {late} ms after it could be, with the second host checking every {interval_ms} ms"
        );
    }

    async fn a_job_that_keeps_failing_is_reported_missed(home) {
        let m = home.manifest("", r#"
            [jobs.broken]
            component = "{guest:flaky}"
            schedule = "* * * * * *"
            payload = { fail_times = 1000 }
        "#);
        let server = home.serve(&["--manifest", m.to_str().unwrap(), "--surveillance-interval", "1s"]).await;
        let started = Instant::now();
        let reports = loop {
            let (_, body) = server.get("/reports?job=broken").await;
            let reports = body["reports"].as_array().cloned().unwrap_or_default();
            if reports.iter().any(|r| r["kind"] == "missed") {
                break reports;
            }
            assert!(started.elapsed() < Duration::from_secs(20), "no missed report: {reports:#?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let missed = reports.iter().find(|r| r["kind"] == "missed").unwrap();
        assert_eq!(missed["code"], "missed");
        assert_eq!(missed["period_ms"], 1000);
        // It never succeeded: the report says since when the fleet has known it.
        assert_eq!(missed["last_success_at"], Value::Null, "{missed}");
        let registered = home.scalar("SELECT registered_at FROM jobhost_jobs WHERE name = 'broken'").await;
        assert_eq!(missed["first_seen_at"].as_i64(), Some(registered), "{missed}");
        assert!(reports.iter().any(|r| r["kind"] == "run_failed" && r["code"] == "handler_failed"));
        // Reported once per period, not once per check.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (_, body) = server.get("/reports?job=broken&limit=500").await;
        let n = body["reports"].as_array().unwrap().iter().filter(|r| r["kind"] == "missed").count();
        let elapsed = started.elapsed().as_secs() as usize;
        assert!(n >= 1 && n <= elapsed + 1, "{n} missed reports in {elapsed}s");
    }

    async fn the_webhook_receives_reports_with_a_fixed_schema(home) {
        let hook = common::webhook::Hook::start(1).await;
        let m = home.manifest("", r#"
            [jobs.failing]
            component = "{guest:flaky}"
            payload = { fail_times = 5 }
        "#);
        let server = home
            .serve(&["--manifest", m.to_str().unwrap(), "--webhook", &hook.url])
            .await;
        server.post("/jobs/failing/kick").await;
        let bodies = hook.wait_for(1, Duration::from_secs(30)).await;
        let report = &bodies[0];
        assert_eq!(report["kind"], "run_failed");
        assert_eq!(report["job"], "failing");
        assert_eq!(report["code"], "handler_failed");
        assert!(report["id"].is_i64() && report["at"].is_string() && report["run_id"].is_string());
        let mut keys: Vec<&str> = report.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(keys, ["at", "code", "id", "instance", "job", "kind", "run_id", "trace_id"]);
        assert!(!report.to_string().contains("flaky: failing"), "no guest text in reports");
        // The first POST was refused with a 500: the report was retried, not lost.
        assert_eq!(hook.attempts(), 2);
    }

    async fn sigterm_lets_running_attempts_finish(home) {
        let m = home.manifest("", r#"
            [jobs.steady]
            component = "{guest:hello}"
            payload = { sleep_ms = 1500 }
        "#);
        let server = home.serve(&["--manifest", m.to_str().unwrap(), "--shutdown-grace", "10s"]).await;
        server.post("/jobs/steady/kick").await;
        server.wait_runs("steady", Duration::from_secs(10), |runs| count(runs, |r| status(r) == "running") == 1).await;
        server.signal("TERM");
        let (code, took) = server.wait_exit(Duration::from_secs(15)).await;
        assert_eq!(code, Some(0));
        assert!(took < Duration::from_secs(5), "{took:?}");
        let store = home.store().await;
        let runs = store.list_runs(&jobhost::store::RunFilter { limit: 10, ..Default::default() }).await.unwrap();
        assert_eq!(runs[0].status, "succeeded");
    }

    async fn a_sigterm_right_after_the_listening_line_drains_the_host(home) {
        let m = home.manifest("", "[jobs.noop]\ncomponent = \"{guest:noop}\"\n");
        // The handlers must be in place before the host says it listens: a signal in the
        // gap would otherwise kill it with the default action (no exit code).
        for _ in 0..3 {
            let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
            server.signal("TERM");
            let (code, _) = server.wait_exit(Duration::from_secs(30)).await;
            assert_eq!(code, Some(0));
        }
    }

    async fn sigterm_cancels_attempts_past_the_grace_and_another_host_resumes_them(home) {
        let m = home.manifest("", r#"
            [jobs.long]
            component = "{guest:hello}"
            timeout = "30s"
            payload = { sleep_ms = 6000 }
        "#);
        let manifest = m.to_str().unwrap();
        let server = home.serve(&["--manifest", manifest, "--shutdown-grace", "500ms"]).await;
        server.post("/jobs/long/kick").await;
        server.wait_runs("long", Duration::from_secs(10), |runs| count(runs, |r| status(r) == "running") == 1).await;
        server.signal("TERM");
        let (code, took) = server.wait_exit(Duration::from_secs(15)).await;
        assert_eq!(code, Some(0));
        assert!(took < Duration::from_secs(4), "{took:?}");
        let store = home.store().await;
        let runs = store.list_runs(&jobhost::store::RunFilter { limit: 10, ..Default::default() }).await.unwrap();
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].status, "queued");
        assert_eq!(runs[0].last_code.as_deref(), Some("cancelled"));
        let attempts = store.list_attempts(&runs[0].id, 100).await.unwrap();
        assert_eq!(attempts[0].code.as_deref(), Some("cancelled"));
        let next = home.serve(&["--manifest", manifest]).await;
        let runs = next
            .wait_runs("long", Duration::from_secs(20), |runs| count(runs, |r| status(r) == "succeeded") == 1)
            .await;
        assert_eq!(runs.len(), 1, "the same run resumed, none duplicated");
        assert_eq!(runs[0]["attempts"], 2);
    }

    async fn after_downtime_a_schedule_catches_up_once(home) {
        let m = home.manifest("", r#"
            [jobs.every]
            component = "{guest:noop}"
            schedule = "* * * * * *"
        "#);
        let manifest = m.to_str().unwrap();
        let server = home.serve(&["--manifest", manifest]).await;
        server.wait_runs("every", Duration::from_secs(10), |runs| count(runs, |r| status(r) == "succeeded") >= 1).await;
        server.signal("TERM");
        server.wait_exit(Duration::from_secs(10)).await;
        let store = home.store().await;
        // The first tick the stopped host did not fire: on a loaded machine it may lie
        // before the host's exit, so it, not the clock at the exit, bounds the catch-up.
        let down_from = home
            .scalar("SELECT next_fire_at FROM jobhost_jobs WHERE name = 'every'")
            .await;
        tokio::time::sleep(Duration::from_secs(4)).await;
        let back_at = store.now().await.unwrap();
        let server = home.serve(&["--manifest", manifest]).await;
        server.wait_runs("every", Duration::from_secs(10), |runs| {
            runs.iter().filter_map(|r| r["scheduled_for"].as_str()).any(|t| {
                chrono::DateTime::parse_from_rfc3339(t).unwrap().timestamp_millis() > back_at
            })
        }).await;
        let during = home
            .scalar(&format!(
                "SELECT COUNT(*) FROM jobhost_runs WHERE job = 'every' AND scheduled_for >= {down_from} AND scheduled_for < {back_at}"
            ))
            .await;
        assert_eq!(during, 1, "one catch-up run for four missed ticks");
    }

    async fn a_changed_component_is_reloaded_and_runs_record_their_digest(home) {
        let component = home.path().join("job.wasm");
        std::fs::copy(guest("hello"), &component).unwrap();
        let m = home.manifest("", &format!("[jobs.swap]\ncomponent = \"{}\"\n", component.display()));
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        server.post("/jobs/swap/kick").await;
        server.wait_runs("swap", Duration::from_secs(10), |runs| count(runs, |r| status(r) == "succeeded") == 1).await;
        let (_, before) = server.get("/jobs/swap").await;
        std::fs::copy(guest("noop"), &component).unwrap();
        let started = Instant::now();
        loop {
            let (_, job) = server.get("/jobs/swap").await;
            if job["component_digest"] != before["component_digest"] {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(15), "component not reloaded");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        server.post("/jobs/swap/kick").await;
        let runs = server.wait_runs("swap", Duration::from_secs(10), |runs| count(runs, |r| status(r) == "succeeded") == 2).await;
        assert_ne!(runs[0]["component_digest"], runs[1]["component_digest"]);
        assert_eq!(runs[1]["component_digest"], before["component_digest"]);
    }

    async fn the_api_answers_for_jobs_runs_health_and_metrics(home) {
        let m = home.manifest("", r#"
            [jobs.hello]
            component = "{guest:hello}"
            [jobs.runaway]
            component = "{guest:spin}"
            timeout = "1s"
        "#);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        assert_eq!(server.text("/healthz").await, "ok");
        assert_eq!(server.text("/readyz").await, "ready");
        server.post("/jobs/runaway/kick").await;
        server.wait_runs("runaway", Duration::from_secs(10), |runs| count(runs, |r| status(r) == "failed") == 1).await;
        // The host stays healthy after stopping a runaway guest.
        for _ in 0..3 {
            server.post("/jobs/hello/kick").await;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let runs = server.wait_runs("hello", Duration::from_secs(10), |runs| count(runs, |r| status(r) == "succeeded") == 3).await;
        let (_, page) = server.get("/runs?limit=2").await;
        assert_eq!(page["runs"].as_array().unwrap().len(), 2);
        let next = page["next"].as_str().unwrap().to_string();
        let (_, rest) = server.get(&format!("/runs?limit=2&before={next}")).await;
        assert_eq!(rest["runs"].as_array().unwrap().len(), 2);
        assert_ne!(rest["runs"][0]["run_id"], page["runs"][0]["run_id"]);
        let (_, clamped) = server.get("/runs?limit=100000").await;
        assert_eq!(clamped["limit"], 500);
        let (_, failed) = server.get("/runs?status=failed").await;
        assert_eq!(failed["runs"][0]["code"], "timeout");
        let (_, recent) = server.get("/runs?since=1h&job=hello").await;
        assert_eq!(recent["runs"].as_array().unwrap().len(), 3);
        let (code, bad) = server.get("/runs?status=exploded").await;
        assert_eq!((code, bad["error"]["code"].as_str()), (400, Some("invalid_parameter")));
        let id = runs[0]["run_id"].as_str().unwrap();
        let (_, detail) = server.get(&format!("/runs/{id}")).await;
        assert!(detail["attempt_records"][0]["log"].as_str().unwrap().contains("hello"));
        let (code, missing) = server.get("/runs/nope").await;
        assert_eq!((code, missing["error"]["code"].as_str()), (404, Some("unknown_run")));
        let (code, unknown) = server.post("/jobs/nope/kick").await;
        assert_eq!((code, unknown["error"]["code"].as_str()), (404, Some("unknown_job")));
        assert_eq!(unknown["error"]["message"], "no job named \"nope\"; known jobs: hello, runaway");
        let metrics = server.text("/metrics").await;
        for series in [
            r#"jobhost_runs{status="succeeded",code=""} 3"#,
            r#"jobhost_runs{status="failed",code="timeout"} 1"#,
            r#"jobhost_runs{status="crashed",code=""} 0"#,
            r#"jobhost_attempts_total{job="runaway",tenant="default",status="failed",code="timeout"} 1"#,
            "jobhost_attempt_duration_seconds_bucket",
            "jobhost_claim_lag_seconds_count",
            "jobhost_queue_lag_seconds",
            r#"jobhost_fuel_used_total{job="hello",tenant="default"}"#,
        ] {
            assert!(metrics.contains(series), "missing {series} in\n{metrics}");
        }
        // The CLI reads the same.
        let jobs: Value = serde_json::from_slice(&home.run(&["jobs", "--json"]).stdout).unwrap();
        assert_eq!(jobs.as_array().unwrap().len(), 2);
        let kicked = home.run(&["kick", "hello", "--json"]);
        let kicked: Value = serde_json::from_slice(&kicked.stdout).unwrap();
        assert_eq!(kicked["result"], "queued");
        let out = home.run(&["kick", "nope"]);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("unknown job \"nope\"; known jobs: hello, runaway (see `host jobs`)"), "{err}");
        let logs = home.server_logs();
        assert!(!logs.contains("sqlite://") && !logs.contains("postgres://"), "no database URL in logs");
    }

    async fn it_serves_with_no_jobs_and_refuses_bad_manifests(home) {
        let server = home.serve(&[]).await;
        let (code, jobs) = server.get("/jobs").await;
        assert_eq!((code, jobs["jobs"].as_array().map(Vec::len)), (200, Some(0)));
        drop(server);
        let m = home.manifest("", r#"
            [jobs.bad]
            component = "{guest:hello}"
            schedule = "every tuesday"
        "#);
        let out = home.run(&["serve", "--listen", "127.0.0.1:0", "--manifest", m.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("job bad: invalid cron expression \"every tuesday\""), "{err}");
        let out = home.run(&["check", "--manifest", m.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("job bad: invalid cron expression"));
        // Every problem at once, in one message, from `check` and from `serve`.
        let m = home.manifest("", r#"
            [collections.docs]
            [links.api]
            url = "http://127.0.0.1:9/"
            [jobs.cron]
            component = "{guest:hello}"
            schedule = "every tuesday"
            [jobs.undeclared]
            component = "{guest:hello}"
            grants.files = { read = ["nowhere"] }
            grants.links = ["elsewhere"]
            [jobs.ungranted]
            component = "{guest:ledger}"
            [jobs.missing]
            component = "missing.wasm"
            [jobs.tables]
            component = "{guest:ledger}"
            grants.db = { write = ["no_such_table"] }
        "#);
        for command in [vec!["check", "--manifest"], vec!["serve", "--listen", "127.0.0.1:0", "--manifest"]] {
            let mut args = command.clone();
            args.push(m.to_str().unwrap());
            let out = home.run(&args);
            assert_eq!(out.status.code(), Some(2), "{command:?}");
            let err = String::from_utf8_lossy(&out.stderr);
            // The manifest's own problems and those of its sound jobs, together; `serve`
            // checks tables only once its manifest is sound and its database open.
            let mut expected = vec![
                "job undeclared: granted collection \"nowhere\" is not declared",
                "job undeclared: granted link \"elsewhere\" is not declared",
                "job cron: invalid cron expression",
                "imports the `db` capability, which this job was not granted",
                "job missing: cannot read",
            ];
            if command[0] == "check" {
                expected.extend(["6 problems", "job tables: granted table \"no_such_table\" does not exist"]);
            } else {
                expected.push("5 problems");
            }
            for expected in expected {
                assert!(err.contains(expected), "{command:?}: {expected:?} in {err}");
            }
        }
        let m = home.manifest("", r#"
            [jobs.cron]
            component = "{guest:hello}"
            schedule = "every tuesday"
            [jobs.ungranted]
            component = "{guest:ledger}"
            [jobs.missing]
            component = "missing.wasm"
            [jobs.tables]
            component = "{guest:ledger}"
            grants.db = { write = ["no_such_table"] }
        "#);
        for command in [vec!["check", "--manifest"], vec!["serve", "--listen", "127.0.0.1:0", "--manifest"]] {
            let mut args = command.clone();
            args.push(m.to_str().unwrap());
            let out = home.run(&args);
            assert_eq!(out.status.code(), Some(2), "{command:?}");
            let err = String::from_utf8_lossy(&out.stderr);
            for expected in [
                "4 problems",
                "job cron: invalid cron expression",
                "job ungranted: ",
                "imports the `db` capability, which this job was not granted",
                "job missing: cannot read",
                "job tables: granted table \"no_such_table\" does not exist",
            ] {
                assert!(err.contains(expected), "{command:?}: {expected:?} in {err}");
            }
        }
    }

    async fn a_run_claimed_ahead_of_busy_workers_is_given_back_when_its_start_window_ends(home) {
        // Issue 38, item 10: a host whose every worker is busy with a long run claims the
        // next run ahead of them. That run is `running` (its lease taken) before any worker
        // starts it: it must go back to the queue once its start window (2 s) has passed,
        // not when a worker frees up — until then every start of its job joins it, and no
        // other host may run it.
        let m = home.manifest("", r#"
            [jobs.long]
            component = "{guest:hello}"
            timeout = "40s"
            payload = { sleep_ms = 12000 }
            [jobs.quick]
            component = "{guest:hello}"
            timeout = "5s"
            payload = { sleep_ms = 40 }
        "#);
        let manifest = m.to_str().unwrap();
        let busy = home.serve(&["--manifest", manifest, "--workers", "1"]).await;
        let (code, long) = busy.post("/jobs/long/runs").await;
        assert_eq!(code, 201, "{long}");
        let long = long["run_id"].as_str().unwrap().to_string();
        let its = |id: &str, status: &str| {
            format!("SELECT COUNT(*) FROM jobhost_runs WHERE id = '{id}' AND status = '{status}'")
        };
        home.wait_for(&its(&long, "running"), Duration::from_secs(10)).await;
        let (code, quick) = busy.post("/jobs/quick/runs").await;
        assert_eq!(code, 201, "{quick}");
        let quick = quick["run_id"].as_str().unwrap().to_string();
        // The busy host claims it ahead of its one worker: `running`, not started.
        home.wait_for(&its(&quick, "running"), Duration::from_secs(5)).await;
        let claimed = Instant::now();
        let (code, joined) = busy.post("/jobs/quick/runs").await;
        assert_eq!((code, joined["run_id"].as_str()), (200, Some(quick.as_str())), "{joined}");
        // Given back within its start window and a little: queued again, no attempt used,
        // while the long run still holds the worker.
        home.wait_for(
            &format!("SELECT COUNT(*) FROM jobhost_runs WHERE id = '{quick}' AND status = 'queued' AND attempts = 0"),
            Duration::from_secs(5),
        )
        .await;
        assert!(claimed.elapsed() < Duration::from_secs(6));
        assert_eq!(home.scalar(&its(&long, "running")).await, 1);
        if home.backend == common::Backend::Postgres {
            // Another host with a free worker runs it at once, long before the busy one
            // could; a start after it ended starts a new run.
            let free = home.serve(&["--manifest", manifest, "--workers", "1"]).await;
            home.wait_for(&its(&quick, "succeeded"), Duration::from_secs(5)).await;
            assert_eq!(home.scalar(&its(&long, "running")).await, 1);
            let ran_on = home
                .scalar(&format!(
                    "SELECT COUNT(*) FROM jobhost_attempts WHERE run_id = '{quick}' \
                     AND host LIKE '%-{}'",
                    free.child.id()
                ))
                .await;
            assert_eq!(ran_on, 1, "the free host ran it");
            let (code, next) = free.post("/jobs/quick/runs").await;
            assert_eq!(code, 201, "{next}");
        } else {
            // One host serves a SQLite file: it runs the run once its worker is free.
            home.wait_for(&its(&quick, "succeeded"), Duration::from_secs(20)).await;
            assert_eq!(home.scalar(&its(&long, "succeeded")).await, 1);
        }
    }
}

/// A backlog queued by a plain `INSERT` (one kick's row copied, each copy with a random v4
/// id and the same due time, as an operator's script or an import may queue runs) is
/// claimed in the order it was queued: a claim's runs lie together in the table whatever
/// their ids, and its starts and endings write few pages (migration 0021). Taken by id,
/// as they were, every claim and ending wrote pages all over the table and the claim's
/// indexes, and such a backlog drained at a fraction of a kicked one's pace (the serve
/// benchmark's curve has both). SQLite only: Postgres keeps taking ties by id (see the
/// migration).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_claims_an_inserted_backlog_in_the_order_it_was_queued() {
    const RUNS: i64 = 2_000;
    let home = common::Home::new(common::Backend::Sqlite).await;
    let m = home.manifest("", "[jobs.noop]\ncomponent = \"{guest:noop}\"\n");
    let store = home.store().await;
    common::queue_run(&store, "noop", "original", 0).await;
    store.close().await;
    home.exec(&format!(
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < {RUNS}) \
         INSERT INTO jobhost_runs (id, job, instance, tenant, origin, payload, status, \
             next_attempt_at, created_at, updated_at) \
         SELECT lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' \
             || substr(hex(randomblob(2)), 2) || '-' || substr('89AB', 1 + abs(random()) % 4, 1) \
             || substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6))), \
             r.job, 'b' || i, r.tenant, r.origin, r.payload, r.status, r.next_attempt_at, \
             r.created_at, r.updated_at \
         FROM n, (SELECT * FROM jobhost_runs) AS r; \
         DELETE FROM jobhost_runs WHERE instance = 'original'"
    ))
    .await;
    // In the order of their ids, they were not queued in order.
    let next = "FROM jobhost_runs a JOIN jobhost_runs b ON b.rowid = a.rowid + 1";
    assert!(
        home.scalar(&format!("SELECT COUNT(*) {next} WHERE b.id < a.id"))
            .await
            > RUNS / 4
    );
    let server = home
        .serve(&["--manifest", m.to_str().unwrap(), "--workers", "4"])
        .await;
    home.wait_for(
        &format!("SELECT COUNT(*) = {RUNS} FROM jobhost_runs WHERE status = 'succeeded'"),
        Duration::from_secs(120),
    )
    .await;
    drop(server);
    // Each run started no earlier than the one queued before it, give or take the four
    // workers': a start is its guest's, and runs claimed together start on four workers in
    // either order, usually within a few ms (a worker that reads the pauses first starts
    // its run later). Taken by id, about half the runs would start out of order, by up to
    // the whole drain: here fewer than 1 % may, by more than 100 ms.
    let overtaken = home
        .scalar(&format!(
            "SELECT COUNT(*) {next} WHERE b.started_at < a.started_at - 100"
        ))
        .await;
    assert!(
        overtaken < RUNS / 100,
        "{overtaken} runs were claimed out of the order they were queued in"
    );
}

/// `host runs list` and `GET /runs` page alike — 50 runs unless asked, at most 500 — and
/// both take an instance filter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_and_the_api_list_runs_by_instance_in_pages_of_one_size() {
    let home = common::Home::new(common::Backend::Sqlite).await;
    let store = home.store().await;
    // 505 runs due in a minute, of a job no host serves: five of instance `b`.
    for i in 0..505 {
        let instance = if i % 101 == 0 { "b" } else { "a" };
        common::queue_run(&store, "paged", instance, 60_000).await;
    }
    store.close().await;
    let cli = |args: &[&str]| -> Vec<Value> {
        let mut all = vec!["runs", "list", "--json"];
        all.extend_from_slice(args);
        let out = home.run(&all);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    };
    let ids = |runs: &[Value]| -> Vec<String> {
        runs.iter()
            .map(|r| r["run_id"].as_str().unwrap().to_string())
            .collect()
    };
    let first_page = cli(&[]);
    assert_eq!(first_page.len(), 50);
    assert_eq!(cli(&["--limit", "100000"]).len(), 500);
    assert_eq!(cli(&["--limit", "0"]).len(), 1);
    let of_b = cli(&["--instance", "b"]);
    assert_eq!(of_b.len(), 5, "{of_b:#?}");
    assert!(of_b.iter().all(|r| r["instance"] == "b"), "{of_b:#?}");
    let refused = home.run(&["runs", "list", "--instance", ""]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("invalid instance key"));

    let m = home.manifest("", "[jobs.noop]\ncomponent = \"{guest:noop}\"\n");
    let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
    let (_, page) = server.get("/runs").await;
    assert_eq!(page["limit"], 50);
    assert_eq!(ids(page["runs"].as_array().unwrap()), ids(&first_page));
    let (_, all) = server.get("/runs?limit=100000").await;
    assert_eq!(
        (all["limit"].as_i64(), all["runs"].as_array().unwrap().len()),
        (Some(500), 500)
    );
    let (_, api_b) = server.get("/runs?instance=b").await;
    assert_eq!(ids(api_b["runs"].as_array().unwrap()), ids(&of_b));
}
