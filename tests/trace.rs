//! Trace propagation end to end: a `traceparent` given on a kick, start or emit is
//! carried to the run, its attempts, its `links` calls and its report's webhook; without
//! one (or with a malformed one, which is never stored) the host starts a trace; a guest
//! cannot set it; spans are exported over OTLP when an endpoint is given. The real binary
//! against local HTTP servers started by the test, on SQLite and Postgres.

use crate::common;

use common::Home;
use common::service::Service;
use common::webhook::Hook;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";
const GIVEN: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// The mount `api` (the test's service) and three jobs: `caller` calls `api/echo` and
/// then fails (so a report is written), `quiet` does nothing (on lane `traced`),
/// `listener` subscribes to `thing.done`.
fn manifest(home: &Home, service: &Service) -> String {
    let m = home.manifest(
        "",
        &format!(
            r#"
            [links.api]
            url = "{url}/api/"
            methods = ["GET", "POST"]

            [jobs.caller]
            component = "{{guest:linker}}"
            timeout = "5s"
            retries = 0
            payload = {{ mount = "api", path = "echo", fail_first = true }}
            grants.links = ["api"]

            [lanes.traced]
            workers = 1

            [jobs.quiet]
            component = "{{guest:noop}}"
            lane = "traced"

            [jobs.listener]
            component = "{{guest:noop}}"
            on = ["thing.done"]
        "#,
            url = service.url
        ),
    );
    m.to_str().unwrap().to_string()
}

/// Whether `header` is a well-formed version-00 `traceparent`; its trace and parent ids.
fn ids(header: &str) -> Option<(String, String)> {
    let parts: Vec<&str> = header.split('-').collect();
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let ok = parts.len() == 4
        && parts[0] == "00"
        && hex(parts[1], 32)
        && hex(parts[2], 16)
        && hex(parts[3], 2)
        && parts[1] != "0".repeat(32)
        && parts[2] != "0".repeat(16);
    ok.then(|| (parts[1].to_string(), parts[2].to_string()))
}

/// A POST with the operator's token and these `traceparent` values.
async fn post_traced(
    server: &common::Server,
    path: &str,
    traceparents: &[&str],
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{}{path}", server.url))
        .bearer_auth(&server.token);
    for value in traceparents {
        request = request.header("traceparent", *value);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("POST");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A kick sent as raw bytes, so its `traceparent` may hold what no HTTP client sends
/// (NUL, escape sequences); the status line the server answers.
async fn raw_kick(server: &common::Server, path: &str, traceparent: &[u8]) -> String {
    let addr = server.url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {}\r\ncontent-length: 0\r\nconnection: close\r\ntraceparent: ",
        server.token
    )
    .into_bytes();
    request.extend_from_slice(traceparent);
    request.extend_from_slice(b"\r\n\r\n");
    stream.write_all(&request).await.expect("write");
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer).to_string();
    answer.lines().next().unwrap_or_default().to_string()
}

async fn wait_run(server: &common::Server, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let (_, run) = server.get(&format!("/runs/{id}")).await;
        if done(&run) {
            return run;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "run {id}: {run:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn finished(run: &Value) -> bool {
    matches!(run["status"].as_str(), Some("succeeded" | "failed"))
}

/// The stored `trace_parent` of every run.
async fn stored(home: &Home) -> Vec<(String, Option<String>)> {
    let store = home.store().await;
    let runs = store
        .list_runs(&jobhost::store::RunFilter {
            limit: 500,
            ..Default::default()
        })
        .await
        .unwrap();
    store.close().await;
    runs.into_iter().map(|r| (r.id, r.trace_parent)).collect()
}

/// A collector that keeps the body of every `POST /v1/traces`.
async fn collector() -> (String, Arc<Mutex<Vec<Vec<u8>>>>) {
    use axum::routing::post;
    let seen: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let app = axum::Router::new()
        .route(
            "/v1/traces",
            post(
                |axum::extract::State(seen): axum::extract::State<Arc<Mutex<Vec<Vec<u8>>>>>,
                 body: axum::body::Bytes| async move {
                    seen.lock().unwrap().push(body.to_vec());
                    axum::http::StatusCode::OK
                },
            ),
        )
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), seen)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

on_every_backend! {
    async fn a_kicks_traceparent_reaches_the_run_its_attempts_its_calls_and_its_report(home) {
        let service = Service::start().await;
        let hook = Hook::start(0).await;
        let m = manifest(&home, &service);
        let server = home.serve(&["--manifest", &m, "--webhook", &hook.url]).await;
        let (status, kicked) = post_traced(&server, "/jobs/caller/kick", &[GIVEN], None).await;
        assert_eq!(status, 202, "{kicked}");
        let id = kicked["run_id"].as_str().unwrap().to_string();
        let run = wait_run(&server, &id, finished).await;
        assert_eq!(run["status"], "failed", "{run:#}");
        assert_eq!(run["trace_id"], TRACE);
        let attempts = run["attempt_records"].as_array().unwrap();
        assert!(!attempts.is_empty());
        assert!(attempts.iter().all(|a| a["trace_id"] == TRACE), "{run:#}");
        assert!(attempts[0]["log"].as_str().unwrap().contains("status 200"), "{run:#}");
        // Stored as given: the caller's span is the run's parent.
        assert!(stored(&home).await.contains(&(id.clone(), Some(GIVEN.to_string()))));

        // The links call: the same trace, a span of its own.
        let seen = service.seen();
        assert_eq!(seen.len(), 1);
        let (trace, parent) = ids(&seen[0].headers["traceparent"]).expect("a valid traceparent");
        assert_eq!(trace, TRACE);
        assert_ne!(parent, PARENT, "a new span id, not the caller's");
        assert!(seen[0].headers["traceparent"].ends_with("-01"));

        // The report's webhook: the trace id in the body and a traceparent in the trace.
        let bodies = hook.wait_for(1, Duration::from_secs(30)).await;
        assert_eq!(bodies[0]["run_id"], id.as_str());
        assert_eq!(bodies[0]["trace_id"], TRACE);
        let header = hook.traceparents()[0].clone().expect("the webhook carries a traceparent");
        let (trace, parent) = ids(&header).expect("a valid traceparent");
        assert_eq!(trace, TRACE);
        assert_ne!(parent, PARENT);

        // The host's log line of the attempt names the trace, and the attempt's number,
        // tenant and lane (its span's fields).
        let start = Instant::now();
        while !home.server_logs().lines().any(|l| {
            l.contains("attempt finished")
                && l.contains(TRACE)
                && l.contains("attempt=1 tenant=default lane=default")
        }) {
            assert!(start.elapsed() < Duration::from_secs(10), "{}", home.server_logs());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        // The CLI shows it too.
        let out = home.run(&["runs", "show", &id]);
        assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("trace {TRACE}")));
    }

    async fn without_a_valid_traceparent_the_host_starts_a_trace_and_stores_nothing_given(home) {
        let service = Service::start().await;
        let m = manifest(&home, &service);
        let server = home.serve(&["--manifest", &m]).await;
        let junk = "x".repeat(10 << 10);
        let shifted = GIVEN.to_uppercase();
        let zero = format!("00-{}-{PARENT}-01", "0".repeat(32));
        let unknown_version = GIVEN.replacen("00", "01", 1);
        let cases: Vec<Vec<&str>> = vec![
            vec![],
            vec!["zz"],
            vec![junk.as_str()],
            vec![shifted.as_str()],
            vec![zero.as_str()],
            vec![unknown_version.as_str()],
            vec![GIVEN, GIVEN],
        ];
        let mut runs = Vec::new();
        for (n, headers) in cases.iter().enumerate() {
            let (status, kicked) =
                post_traced(&server, &format!("/jobs/quiet/kick?instance=c{n}"), headers, None).await;
            assert_eq!(status, 202, "{headers:?}: {kicked}");
            assert!(!kicked.to_string().contains("zz") && !kicked.to_string().contains("xxxx"));
            runs.push(kicked["run_id"].as_str().unwrap().to_string());
        }
        // Bytes no client library sends: refused by the HTTP server, or taken without
        // them; either way nothing of them is kept.
        let nasty: Vec<&[u8]> = vec![
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\0",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba90\x1b[2J",
            b"\x1b]0;pwned\x07",
            b"00-\xff\xfe2f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ];
        for (n, bytes) in nasty.iter().enumerate() {
            let status = raw_kick(&server, &format!("/jobs/quiet/kick?instance=r{n}"), bytes).await;
            assert!(status.contains(" 202 ") || status.contains(" 400 "), "{status:?}");
        }
        let kept = stored(&home).await;
        let mut traces = std::collections::HashSet::new();
        for (id, trace_parent) in &kept {
            let trace_parent = trace_parent.as_deref().expect("a kick stores the trace it started");
            let (trace, _) = ids(trace_parent).unwrap_or_else(|| panic!("{trace_parent:?}"));
            assert_ne!(trace, TRACE, "run {id} took a malformed or refused header's trace");
            assert!(traces.insert(trace), "each kick starts a trace of its own");
        }
        assert!(kept.len() >= runs.len());
        for id in &runs {
            let run = wait_run(&server, id, finished).await;
            let (_, parent) = kept.iter().find(|(k, _)| k == id).unwrap().clone();
            assert_eq!(run["trace_id"].as_str(), ids(parent.as_deref().unwrap()).map(|(t, _)| t).as_deref());
        }
        let logs = home.server_logs();
        assert!(!logs.contains("xxxxxxxx") && !logs.contains("pwned") && !logs.contains('\u{1b}'));
    }

    async fn a_start_and_an_emit_take_the_trace_and_the_cli_takes_one_too(home) {
        let service = Service::start().await;
        let m = manifest(&home, &service);
        let server = home.serve(&["--manifest", &m]).await;
        let (status, started) = post_traced(&server, "/jobs/quiet/runs", &[GIVEN], None).await;
        assert_eq!(status, 201, "{started}");
        let run = wait_run(&server, started["run_id"].as_str().unwrap(), finished).await;
        assert_eq!(run["trace_id"], TRACE);

        let other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
        let (status, emitted) =
            post_traced(&server, "/events/thing.done", &[other], Some(json!({"key": "k1"}))).await;
        assert_eq!(status, 202, "{emitted}");
        let id = emitted["runs"][0]["run_id"].as_str().unwrap();
        let run = wait_run(&server, id, finished).await;
        assert_eq!(run["trace_id"], "0af7651916cd43dd8448eb211c80319c");
        assert!(stored(&home).await.iter().any(|(r, t)| r == id && t.as_deref() == Some(other)), "the sampled flag is kept as given");

        // The operator's CLI: a valid traceparent is taken, a malformed one refused.
        let out = home.run(&["kick", "quiet", "--instance", "cli", "--traceparent", GIVEN, "--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let kicked: Value = serde_json::from_slice(&out.stdout).unwrap();
        let run = wait_run(&server, kicked["run_id"].as_str().unwrap(), |_| true).await;
        assert_eq!(run["trace_id"], TRACE);
        let out = home.run(&["kick", "quiet", "--traceparent", "zz"]);
        assert_eq!(out.status.code(), Some(2));
        let out = home.run(&["emit", "thing.done", "--key", "k2", "--traceparent", GIVEN, "--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let emitted: Value = serde_json::from_slice(&out.stdout).unwrap();
        let run = wait_run(&server, emitted["runs"][0]["run_id"].as_str().unwrap(), |_| true).await;
        assert_eq!(run["trace_id"], TRACE);
        let out = home.run(&["start", "quiet", "--instance", "cli2", "--traceparent", GIVEN, "--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let started: Value = serde_json::from_slice(&out.stdout).unwrap();
        let run = wait_run(&server, started["run_id"].as_str().unwrap(), |_| true).await;
        assert_eq!(run["trace_id"], TRACE);
    }

    async fn fan_out_children_and_an_events_runs_share_one_trace(home) {
        for tenant in ["acme", "globex"] {
            let out = home.run(&["tenants", "add", tenant]);
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
        let m = home.manifest("", r#"
            [jobs.fan]
            component = "{guest:noop}"
            per_tenant = true
            on = ["fan.event"]

            [jobs.ticker]
            component = "{guest:noop}"
            per_tenant = true
            schedule = "* * * * * *"
        "#);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let (status, kicked) = post_traced(&server, "/jobs/fan/kick", &[GIVEN], None).await;
        assert_eq!(status, 202, "{kicked}");
        let children = kicked["children"].as_array().unwrap();
        assert_eq!(children.len(), 2, "{kicked}");
        for child in children {
            let run = wait_run(&server, child["run_id"].as_str().unwrap(), |_| true).await;
            assert_eq!(run["trace_id"], TRACE, "{run:#}");
        }
        let (status, emitted) =
            post_traced(&server, "/events/fan.event", &[GIVEN], Some(json!({"key": "e1"}))).await;
        assert_eq!(status, 202, "{emitted}");
        assert_eq!(emitted["runs"].as_array().unwrap().len(), 2, "{emitted}");
        for queued in emitted["runs"].as_array().unwrap() {
            let run = wait_run(&server, queued["run_id"].as_str().unwrap(), |_| true).await;
            assert_eq!(run["trace_id"], TRACE, "{run:#}");
        }
        // Each tick starts a trace of its own, which its children share.
        let runs = server
            .wait_runs("ticker", Duration::from_secs(20), |runs| {
                let ticks: std::collections::HashSet<&str> =
                    runs.iter().filter_map(|r| r["scheduled_for"].as_str()).collect();
                ticks.len() >= 2 && runs.len() >= 2 * ticks.len()
            })
            .await;
        let mut by_tick: std::collections::HashMap<String, std::collections::HashSet<String>> =
            Default::default();
        for run in &runs {
            let trace = run["trace_id"].as_str().unwrap().to_string();
            assert!(ids(&format!("00-{trace}-{PARENT}-01")).is_some() && trace != TRACE, "{run:#}");
            by_tick.entry(run["scheduled_for"].as_str().unwrap().to_string()).or_default().insert(trace);
        }
        let traces: Vec<&std::collections::HashSet<String>> = by_tick.values().collect();
        assert!(traces.iter().all(|t| t.len() == 1), "one trace per tick: {by_tick:?}");
        let distinct: std::collections::HashSet<&String> = traces.iter().flat_map(|t| t.iter()).collect();
        assert_eq!(distinct.len(), by_tick.len(), "a trace per tick: {by_tick:?}");
    }

    async fn a_guest_cannot_set_traceparent_on_a_links_call(home) {
        let service = Service::start().await;
        let m = manifest(&home, &service);
        for name in ["traceparent", "TraceParent"] {
            let payload = json!({"mount": "api", "path": "echo", "headers": [[name, GIVEN]]});
            let out = home
                .host()
                .args(["run", "caller", "--json", "--manifest", &m, "--payload", &payload.to_string()])
                .output()
                .unwrap();
            let run: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
                panic!("{}", String::from_utf8_lossy(&out.stderr))
            });
            assert_eq!(run["code"], "handler_failed", "{run}");
            assert_eq!(run["error"], "invalid call: header-not-allowed", "{run}");
        }
        assert_eq!(service.count(), 0, "a refused call sends nothing");
    }

    async fn spans_are_exported_over_otlp_in_the_callers_trace(home) {
        let service = Service::start().await;
        let (endpoint, received) = collector().await;
        let m = manifest(&home, &service);
        let server = home.serve(&["--manifest", &m, "--otlp-endpoint", &endpoint]).await;
        let (status, kicked) = post_traced(&server, "/jobs/quiet/kick", &[GIVEN], None).await;
        assert_eq!(status, 202, "{kicked}");
        wait_run(&server, kicked["run_id"].as_str().unwrap(), finished).await;
        // Whatever is still batched is sent at shutdown.
        server.signal("TERM");
        let (code, _) = server.wait_exit(Duration::from_secs(30)).await;
        assert_eq!(code, Some(0));
        let bodies = received.lock().unwrap().clone();
        let trace = hex::decode(TRACE).unwrap();
        let parent = hex::decode(PARENT).unwrap();
        assert!(
            bodies.iter().any(|b| contains(b, &trace) && contains(b, &parent) && contains(b, b"attempt")),
            "no exported attempt span in the caller's trace ({} requests)",
            bodies.len()
        );
        // The span's attributes, as OTLP's protobuf encodes them: each a `KeyValue` (key,
        // field 1; value, field 2) whose `AnyValue` is a string (field 1) or an int (field 3).
        let attribute = |key: &str, value: &[u8]| {
            let mut bytes = vec![0x0a, key.len() as u8];
            bytes.extend_from_slice(key.as_bytes());
            bytes.extend_from_slice(&[0x12, value.len() as u8]);
            bytes.extend_from_slice(value);
            bytes
        };
        let text = |value: &str| [&[0x0a, value.len() as u8][..], value.as_bytes()].concat();
        for (key, value) in [
            ("attempt", vec![0x18, 1]),
            ("tenant", text("default")),
            ("lane", text("traced")),
        ] {
            let expected = attribute(key, &value);
            assert!(
                bodies.iter().any(|b| contains(b, &trace) && contains(b, &expected)),
                "no exported attempt span with {key} = {value:?}"
            );
        }
    }
}
