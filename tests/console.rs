//! What the console's hosts, upcoming and payload search read, through the API with the
//! real binary, on both backends: the hosts' heartbeats (alive, stopped, silent; lanes and
//! workers), what is due later in time order (runs started for later, the schedules' next
//! fires), and the runs whose payload contains a JSON object — each as the caller may see it.

use crate::common;

use common::Home;
use serde_json::Value;
use std::time::{Duration, Instant};

/// `GET /hosts` once `ok` holds of its hosts (a beat is at most 5 s away; a death shows
/// after three missed).
async fn hosts_when(
    server: &common::Server,
    what: &str,
    ok: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let (status, body) = server.get("/hosts").await;
        assert_eq!(status, 200, "{body}");
        let hosts = body["hosts"].as_array().expect("hosts").clone();
        if ok(&hosts) {
            return hosts;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}: {body:#}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn host_of<'a>(hosts: &'a [Value], server: &common::Server) -> &'a Value {
    let pid = format!("-{}", server.child.id());
    hosts
        .iter()
        .find(|h| h["host"].as_str().is_some_and(|id| id.ends_with(&pid)))
        .unwrap_or_else(|| panic!("no host of pid {pid}: {hosts:#?}"))
}

fn lanes(host: &Value) -> Vec<(String, u64, u64)> {
    host["lanes"]
        .as_array()
        .expect("lanes")
        .iter()
        .map(|l| {
            let n = |k: &str| l[k].as_u64().expect("a count");
            (
                l["lane"].as_str().expect("a lane").to_string(),
                n("workers"),
                n("busy"),
            )
        })
        .collect()
}

/// `text` as a query value: every byte but letters and digits escaped.
fn query_value(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The ids of the runs `GET /runs/search` finds for `payload` (and `extra` query), as
/// `token` (the operator's if none).
async fn found(
    server: &common::Server,
    token: Option<&str>,
    payload: &str,
    extra: &str,
) -> Vec<String> {
    let path = format!("/runs/search?payload={}{extra}", query_value(payload));
    let (status, body) = server
        .get_as(Some(token.unwrap_or(&server.token)), &path)
        .await;
    assert_eq!(status, 200, "{path}: {body}");
    assert_eq!(body["complete"], true, "{body}");
    body["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| r["run_id"].as_str().unwrap().to_string())
        .collect()
}

/// Starts a run of `job` for each of `instances` (a start joins the live run of its job
/// and instance: each its own).
async fn start_each(server: &common::Server, job: &str, instances: &[&str]) {
    for instance in instances {
        let body = format!(r#"{{"instance": "{instance}"}}"#);
        let path = format!("/jobs/{job}/runs");
        let (status, run) = server
            .post_as(Some(&server.token), &path, Some(&body))
            .await;
        assert_eq!(status, 201, "{run}");
    }
}

fn tenants_add(home: &Home, name: &str) {
    let out = home.run(&["tenants", "add", name]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

on_every_backend! {
    async fn hosts_show_who_is_alive_with_their_lanes_workers_and_version(home) {
        tenants_add(&home, "acme");
        let m = home.manifest("", r#"
            [lanes.bulk]
            workers = 2
            [jobs.hello]
            component = "{guest:hello}"
        "#);
        let m = m.to_str().unwrap();
        // One host after another (SQLite takes one serving process per file): each sees
        // those before it as they left.
        let a = home.serve(&["--manifest", m, "--workers", "3"]).await;
        let hosts = hosts_when(&a, "a alive", |hosts| hosts.len() == 1 && hosts[0]["state"] == "alive").await;
        let lane = |name: &str, workers| (name.to_string(), workers, 0);
        let a_row = host_of(&hosts, &a).clone();
        assert_eq!(lanes(&a_row), [lane("bulk", 2), lane("default", 3)]);
        assert_eq!(a_row["workers"], serde_json::json!({"busy": 0, "total": 5}));
        assert_eq!((&a_row["version"], &a_row["this_host"]), (&Value::from(env!("CARGO_PKG_VERSION")), &Value::from(true)));

        // The fleet is the operator's: a tenant is told no such thing exists; a read-only
        // token sees it.
        let tenant = home.create_token(Some("acme"));
        let (status, body) = a.get_as(Some(&tenant), "/hosts").await;
        assert_eq!((status, &body["error"]["code"]), (404, &Value::from("not_found")), "{body}");
        let out = home.run(&["tokens", "create", "--read-only", "--json"]);
        let read_only: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let (status, body) = a.get_as(read_only["token"].as_str(), "/hosts").await;
        assert_eq!((status, body["hosts"].as_array().map(Vec::len)), (200, Some(1)), "{body}");

        // A host that stops says so.
        a.signal("TERM");
        let (code, _) = a.wait_exit(Duration::from_secs(30)).await;
        assert_eq!(code, Some(0));
        let b = home.serve(&["--manifest", m, "--lanes", "bulk"]).await;
        let hosts = hosts_when(&b, "a stopped, b alive", |hosts| hosts.len() == 2 && hosts.iter().any(|h| h["state"] == "alive")).await;
        let a_now = hosts.iter().find(|h| h["host"] == a_row["host"]).expect("a is listed");
        assert_eq!(a_now["state"], "stopped", "{hosts:#?}");
        assert!(a_now["stopped_at"].is_string(), "{a_now}");
        let b_row = host_of(&hosts, &b).clone();
        assert_eq!(lanes(&b_row), [lane("bulk", 2)]);
        assert_eq!(b_row["this_host"], true);

        // One killed falls silent after three missed beats, not at the first.
        drop(b);
        let killed = Instant::now();
        let c = home.serve(&["--manifest", m, "--lanes", "default", "--workers", "1"]).await;
        let hosts = hosts_when(&c, "b silent", |hosts| {
            hosts.iter().any(|h| h["host"] == b_row["host"] && h["state"] == "silent")
        })
        .await;
        assert!(killed.elapsed() >= Duration::from_secs(9), "silent after {:?}", killed.elapsed());
        let c_row = host_of(&hosts, &c);
        assert_eq!((lanes(c_row), &c_row["state"]), (vec![lane("default", 1)], &Value::from("alive")));
        let states: Vec<&str> = hosts.iter().map(|h| h["state"].as_str().unwrap()).collect();
        assert_eq!(states.len(), 3, "{hosts:#?}");
    }

    async fn upcoming_lists_later_runs_and_next_fires_in_time_order_as_the_caller_may_see(home) {
        tenants_add(&home, "acme");
        let m = home.manifest("", r#"
            [jobs.hello]
            component = "{guest:hello}"
            schedule = "0 0 3 * * *"
            [jobs.report]
            component = "{guest:hello}"
            tenant = "acme"
        "#);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        // Each its own instance: a start joins the live run of its job and instance.
        let start = |job: &'static str, delay: &'static str| {
            let server = &server;
            async move {
                let body = format!(r#"{{"instance": "in-{delay}", "payload": {{"name": "x"}}, "delay": "{delay}"}}"#);
                let (status, run) = server.post_as(Some(&server.token), &format!("/jobs/{job}/runs"), Some(&body)).await;
                assert_eq!(status, 201, "{run}");
                run["run_id"].as_str().expect("a run id").to_string()
            }
        };
        let late = start("hello", "2h").await;
        let soon = start("hello", "10m").await;
        let tenants = start("report", "30m").await;
        let (status, now) = server.post_as(Some(&server.token), "/jobs/hello/runs", Some("{}")).await;
        assert_eq!(status, 201, "{now}");

        let (status, body) = server.get("/upcoming").await;
        assert_eq!(status, 200, "{body}");
        let due = body["upcoming"].as_array().expect("upcoming");
        let runs: Vec<&str> = due.iter().filter(|d| d["kind"] == "run").map(|d| d["run"]["run_id"].as_str().unwrap()).collect();
        assert_eq!(runs, [soon.as_str(), tenants.as_str(), late.as_str()], "{body:#}");
        assert!(due.iter().filter(|d| d["kind"] == "run").all(|d| d["run"]["why"] == "scheduled"), "{body:#}");
        let fires = due.iter().filter(|d| d["kind"] == "fire").count();
        assert!(fires >= 2 && due.iter().filter(|d| d["kind"] == "fire").all(|d| d["job"] == "hello"), "{body:#}");
        let times: Vec<chrono::DateTime<chrono::FixedOffset>> = due
            .iter()
            .map(|d| chrono::DateTime::parse_from_rfc3339(d["at"].as_str().unwrap()).unwrap())
            .collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "not in time order: {body:#}");

        let (_, two) = server.get("/upcoming?limit=2").await;
        assert_eq!(two["upcoming"].as_array().map(Vec::len), Some(2), "{two}");
        let (status, bad) = server.get("/upcoming?limit=many").await;
        assert_eq!((status, &bad["error"]["code"]), (400, &Value::from("invalid_parameter")), "{bad}");

        // A tenant sees its own run, and no schedule of a job it does not see.
        let tenant = home.create_token(Some("acme"));
        let (status, body) = server.get_as(Some(&tenant), "/upcoming").await;
        assert_eq!(status, 200, "{body}");
        let due = body["upcoming"].as_array().expect("upcoming");
        assert_eq!(due.len(), 1, "{body:#}");
        assert_eq!(due[0]["run"]["run_id"], tenants.as_str(), "{body:#}");
    }

    async fn upcoming_says_a_run_waits_out_its_retry_backoff_or_its_signal_timeout_and_when(home) {
        // A retry's delay is the backoff, half of it jittered: between 30 and 60 minutes
        // after the failure. A wait for a signal is due at its timeout if nothing comes.
        let m = home.manifest("", r#"
            [jobs.flaky]
            component = "{guest:flaky}"
            payload = { fail_times = 9 }
            retries = 2
            backoff = "1h"
            backoff_max = "2h"
            [jobs.approve]
            component = "{guest:waiter}"
            payload = { signal = "approval", timeout_ms = 3600000 }
            retries = 0
        "#);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let before = chrono::Utc::now();
        let kick = |job: &'static str| {
            let server = &server;
            async move {
                let (status, kicked) = server.post(&format!("/jobs/{job}/kick")).await;
                assert_eq!(status, 202, "{kicked}");
                kicked["run_id"].as_str().expect("queued").to_string()
            }
        };
        let flaky = kick("flaky").await;
        let approve = kick("approve").await;
        let retrying = server
            .wait_run(&flaky, "the first failure", |r| r["status"] == "queued" && r["attempts"] == 1)
            .await;
        let waiting = server
            .wait_run(&approve, "the wait", |r| r["signal_timeout_at"].is_string())
            .await;
        let after = chrono::Utc::now();

        let (status, body) = server.get("/upcoming").await;
        assert_eq!(status, 200, "{body}");
        let due = |id: &str| {
            body["upcoming"]
                .as_array()
                .expect("upcoming")
                .iter()
                .find(|d| d["kind"] == "run" && d["run"]["run_id"] == id)
                .unwrap_or_else(|| panic!("{id} is not upcoming: {body:#}"))
                .clone()
        };
        let at = |d: &Value| chrono::DateTime::parse_from_rfc3339(d["at"].as_str().unwrap()).unwrap().to_utc();
        let minutes = |m: i64| chrono::Duration::minutes(m);

        let retry = due(&flaky);
        assert_eq!(retry["run"]["why"], "retry", "{retry:#}");
        assert_eq!(retry["at"], retrying["next_attempt_at"], "{retry:#} {retrying:#}");
        assert!(at(&retry) >= before + minutes(30) && at(&retry) <= after + minutes(60), "{retry:#}");

        let timeout = due(&approve);
        assert_eq!(timeout["run"]["why"], "signal timeout", "{timeout:#}");
        assert_eq!(timeout["at"], waiting["signal_timeout_at"], "{timeout:#} {waiting:#}");
        assert!(at(&timeout) >= before + minutes(60) && at(&timeout) <= after + minutes(60), "{timeout:#}");

        // Once the signal comes, the run is due now, not upcoming.
        let (status, sent) = server.post_as(Some(&server.token), &format!("/runs/{approve}/signals/approval"), Some("{}")).await;
        assert_eq!(status, 201, "{sent}");
        let (_, body) = server.get("/upcoming").await;
        assert!(body["upcoming"].as_array().unwrap().iter().all(|d| d["run"]["run_id"] != approve.as_str()), "{body:#}");
    }

    async fn payload_search_finds_runs_whose_payload_contains_an_object_bounded_and_scoped(home) {
        tenants_add(&home, "acme");
        let m = home.manifest("", r#"
            [jobs.hello]
            component = "{guest:hello}"
            [jobs.report]
            component = "{guest:hello}"
            tenant = "acme"
        "#);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        // Started for later, so they stay queued with the payload as given; each its own
        // instance (a start joins the live run of its job and instance).
        let started = std::sync::atomic::AtomicUsize::new(0);
        let start = |job: &'static str, payload: &'static str| {
            let (server, n) = (&server, started.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
            async move {
                let body = format!(r#"{{"instance": "i{n}", "payload": {payload}, "delay": "1h"}}"#);
                let (status, run) = server.post_as(Some(&server.token), &format!("/jobs/{job}/runs"), Some(&body)).await;
                assert_eq!(status, 201, "{run}");
                run["run_id"].as_str().expect("a run id").to_string()
            }
        };
        let rich = start("hello", r#"{"customer": 42, "tags": ["a", "b"], "nested": {"k": "v", "n": null}}"#).await;
        let other = start("hello", r#"{"customer": 43}"#).await;
        let text = start("hello", r#"{"customer": "42"}"#).await;
        let tenants = start("report", r#"{"customer": 42}"#).await;
        let listed = start("hello", "[1, 2]").await;
        // Valid JSON that Postgres' jsonb refuses (the escape of NUL) is still a run's payload:
        // the search's index leaves it out rather than refusing the run.
        start("hello", r#"{"customer": 45, "note": "a\u0000b"}"#).await;

        // Newest first; containment as Postgres' jsonb decides it, on both backends.
        assert_eq!(found(&server, None, r#"{"customer": 42}"#, "").await, [tenants.as_str(), rich.as_str()]);
        assert_eq!(found(&server, None, r#"{"customer": 42.0}"#, "").await, [tenants.as_str(), rich.as_str()]);
        assert_eq!(found(&server, None, r#"{"customer": "42"}"#, "").await, [text.as_str()]);
        assert_eq!(found(&server, None, r#"{"tags": ["b"]}"#, "").await, [rich.as_str()]);
        assert_eq!(found(&server, None, r#"{"nested": {"n": null}}"#, "").await, [rich.as_str()]);
        assert!(found(&server, None, r#"{"tags": "a"}"#, "").await.is_empty());
        assert!(found(&server, None, r#"{"customer": 44}"#, "").await.is_empty());
        let every = found(&server, None, "{}", "").await;
        assert!(every.contains(&other) && !every.contains(&listed), "an object contains {{}}; an array does not: {every:?}");
        assert_eq!(found(&server, None, r#"{"customer": 42}"#, "&job=hello").await, [rich.as_str()]);
        assert_eq!(found(&server, None, r#"{"customer": 42}"#, "&tenant=acme").await, [tenants.as_str()]);
        assert_eq!(found(&server, None, r#"{"customer": 42}"#, "&limit=1").await, [tenants.as_str()]);

        // A tenant searches its own runs, whatever it asks.
        let acme = home.create_token(Some("acme"));
        assert_eq!(found(&server, Some(&acme), r#"{"customer": 42}"#, "&tenant=default").await, [tenants.as_str()]);

        // A bad search term is refused in words and reads nothing.
        let deep = format!("{}1{}", "{\"a\":".repeat(9), "}".repeat(9));
        let large = format!(r#"{{"a": "{}"}}"#, "x".repeat(5000));
        for (bad, says) in [
            ("[1]", "a JSON object"),
            ("42", "a JSON object"),
            ("{nope", "not JSON"),
            (r#"{"a": 1, "a": 2}"#, "a key given twice"),
            (deep.as_str(), "nested deeper"),
            (large.as_str(), "the limit is 4096"),
        ] {
            let (status, body) = server.get(&format!("/runs/search?payload={}", query_value(bad))).await;
            assert_eq!((status, &body["error"]["code"]), (400, &Value::from("invalid_parameter")), "{bad}: {body}");
            assert!(body["error"]["message"].as_str().unwrap().contains(says), "{bad}: {body}");
        }
        let (status, body) = server.get("/runs/search").await;
        assert_eq!(status, 400, "{body}");
    }

    async fn failures_by_code_count_each_failed_run_once_in_its_bucket(home) {
        tenants_add(&home, "acme");
        let m = home.manifest("", r#"
            [jobs.broken]
            component = "{guest:flaky}"
            payload = { fail_times = 9 }
            retries = 0
            [jobs.report]
            component = "{guest:hello}"
            tenant = "acme"
        "#);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        start_each(&server, "broken", &["a", "b", "c"]).await;
        let runs = server
            .wait_runs("broken", Duration::from_secs(120), |runs| {
                runs.len() == 3 && runs.iter().all(|r| r["status"] == "failed")
            })
            .await;
        let code = runs[0]["code"].as_str().expect("a code").to_string();
        assert!(runs.iter().all(|r| r["code"] == code.as_str()), "{runs:#?}");

        for window in ["hour", "day", "week"] {
            let (status, body) = server.get(&format!("/failures?window={window}")).await;
            assert_eq!(status, 200, "{body}");
            assert_eq!(body["codes"], serde_json::json!([code]), "{body}");
            assert_eq!(body["totals"], serde_json::json!([{"code": code, "count": 3}]), "{body}");
            let buckets = body["buckets"].as_array().expect("buckets");
            let drawn: i64 = buckets.iter().map(|b| b[code.as_str()].as_i64().unwrap()).sum();
            assert_eq!(drawn, 3, "{body}");
            let width = body["bucket_ms"].as_i64().unwrap();
            assert!(buckets.len() as i64 >= 60 * 60_000 / width, "{window}: {} buckets", buckets.len());
        }
        let tenant = home.create_token(Some("acme"));
        let (status, body) = server.get_as(Some(&tenant), "/failures").await;
        assert_eq!((status, &body["codes"], &body["totals"]), (200, &serde_json::json!([]), &serde_json::json!([])), "{body}");
        let (status, body) = server.get("/failures?window=year").await;
        assert_eq!((status, &body["error"]["code"]), (400, &Value::from("invalid_parameter")), "{body}");
    }

    async fn a_purge_by_filter_says_how_many_then_deletes_only_ended_runs_with_their_rows(home) {
        tenants_add(&home, "acme");
        let m = home.manifest("", r#"
            [jobs.hello]
            component = "{guest:hello}"
            payload = { name = "p" }
            [jobs.report]
            component = "{guest:hello}"
            tenant = "acme"
        "#);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        start_each(&server, "hello", &["a", "b", "c"]).await;
        let (status, _) = server.post_as(Some(&server.token), "/jobs/report/runs", Some("{}")).await;
        assert_eq!(status, 201);
        let ended = server
            .wait_runs("hello", Duration::from_secs(120), |runs| {
                runs.len() == 3 && runs.iter().all(|r| r["status"] == "succeeded")
            })
            .await;
        server
            .wait_runs("report", Duration::from_secs(120), |runs| runs.iter().any(|r| r["status"] == "succeeded"))
            .await;
        let (status, later) = server
            .post_as(Some(&server.token), "/jobs/hello/runs", Some(r#"{"instance": "d", "delay": "1h"}"#))
            .await;
        assert_eq!(status, 201, "{later}");
        let purge = |confirm: bool| format!(r#"{{"filter": {{"job": "hello"}}, "confirm": {confirm}}}"#);

        // Not the tenant's to do, nor a read-only token's; a bad filter is refused.
        let tenant = home.create_token(Some("acme"));
        let (status, _) = server.post_as(Some(&tenant), "/runs/purge", Some(&purge(false))).await;
        assert_eq!(status, 404);
        let out = home.run(&["tokens", "create", "--read-only", "--json"]);
        let read_only: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let (status, body) = server.post_as(read_only["token"].as_str(), "/runs/purge", Some(&purge(true))).await;
        assert_eq!((status, &body["error"]["code"]), (403, &Value::from("read_only")), "{body}");
        for bad in [r#"{"filter": {"job": "hello"}, "confirm": "yes"}"#, r#"{"filter": {"limit": 5}}"#, r#"{"filter": {"status": "nope"}}"#, "nope"] {
            let (status, body) = server.post_as(Some(&server.token), "/runs/purge", Some(bad)).await;
            assert_eq!((status, &body["error"]["code"]), (400, &Value::from("invalid_parameter")), "{bad}: {body}");
        }

        // The preview counts the ended runs only, and deletes and records nothing.
        let audited = |body: Value| body["audit"].as_array().expect("audit").clone();
        let before = audited(server.get("/audit?action=runs.purge").await.1);
        let (status, preview) = server.post_as(Some(&server.token), "/runs/purge", Some(&purge(false))).await;
        assert_eq!((status, &preview["count"], &preview["confirmed"]), (200, &Value::from(3), &Value::from(false)), "{preview}");
        assert_eq!(server.runs(Some("hello")).await.len(), 4);
        assert_eq!(audited(server.get("/audit?action=runs.purge").await.1).len(), before.len());

        let (status, done) = server.post_as(Some(&server.token), "/runs/purge", Some(&purge(true))).await;
        assert_eq!((status, &done["done"], &done["more"]), (200, &Value::from(3), &Value::from(false)), "{done}");
        for run in &ended {
            let id = run["run_id"].as_str().unwrap();
            let (status, _) = server.get(&format!("/runs/{id}")).await;
            assert_eq!(status, 404, "{id} is still there");
            let attempts = home.scalar(&format!("SELECT COUNT(*) FROM jobhost_attempts WHERE run_id = '{id}'")).await;
            assert_eq!(attempts, 0, "{id}'s attempts are left");
        }
        let left: Vec<Value> = server.runs(Some("hello")).await;
        assert_eq!(left.len(), 1, "{left:#?}");
        assert_eq!(left[0]["run_id"], later["run_id"]);
        assert_eq!(server.runs(Some("report")).await.len(), 1, "another job's run was purged");
        let rows = audited(server.get("/audit?action=runs.purge").await.1);
        assert_eq!(rows.len(), before.len() + 1, "{rows:#?}");
        assert_eq!((&rows[0]["result"], &rows[0]["object"]), (&Value::from("ok"), &Value::from("runs: 3 purged by filter")), "{rows:#?}");
        assert!(before.iter().any(|r| r["result"] == "read_only"), "{before:#?}");
    }
}
