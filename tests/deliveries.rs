//! Every ending delivered (issue 41): the real `host serve` POSTs each routed ending to a
//! real receiver started here, which checks the HMAC signature itself (with RustCrypto's
//! `hmac`, not the host's code); a receiver that fails recovers every ending, once, in
//! order; a host killed while its receiver is down loses nothing; a filtered ending is
//! never written; a given-up delivery is sent again by the operator; the secret is in no
//! listing, log or answer; and `host check` refuses a bad `[webhooks]` or `deliver`.

use crate::common::{self, Home};
use hmac::{Hmac, KeyInit, Mac};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SECRET_VAR: &str = "JOBHOST_TEST_DELIVERY_SECRET";
/// Long and unlike anything else, so finding it anywhere is a leak.
const SECRET: &str = "whsec-7f3a9c1e5b2d4f60a8e1c3b5d7f9a2c4e6b8d0f1";

/// What the receiver got: each accepted delivery's body, in order, and every request.
#[derive(Default)]
struct Seen {
    requests: usize,
    accepted: Vec<serde_json::Value>,
    bad_signatures: usize,
}

struct Receiver {
    url: String,
    seen: Arc<Mutex<Seen>>,
    /// While set, every request is answered 503 (with a hostile body).
    refusing: Arc<AtomicBool>,
}

impl Receiver {
    /// Listens on `addr` (`127.0.0.1:0`: any port); refuses its first `failures` requests.
    async fn start(addr: &str, failures: usize) -> Receiver {
        use axum::{body::Bytes, extract::State, http::StatusCode, routing::post};
        let seen = Arc::new(Mutex::new(Seen::default()));
        let refusing = Arc::new(AtomicBool::new(false));
        let state = (seen.clone(), refusing.clone());
        let app = axum::Router::new()
            .route(
                "/in",
                post(
                    move |State((seen, refusing)): State<(Arc<Mutex<Seen>>, Arc<AtomicBool>)>,
                          headers: axum::http::HeaderMap,
                          body: Bytes| async move {
                        let mut seen = seen.lock().unwrap();
                        seen.requests += 1;
                        if seen.requests <= failures || refusing.load(Ordering::SeqCst) {
                            // Escape sequences, a NUL and far more than the host keeps.
                            let hostile = format!("\x1b[31mdown\x1b[0m\0{}", "x".repeat(20_000));
                            return (StatusCode::SERVICE_UNAVAILABLE, hostile);
                        }
                        let signature = headers
                            .get("jobhost-signature")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default();
                        if !verified(signature, &body) {
                            seen.bad_signatures += 1;
                            return (StatusCode::BAD_REQUEST, String::new());
                        }
                        let mut value: serde_json::Value = serde_json::from_slice(&body).unwrap();
                        value["header_delivery"] = headers
                            .get("jobhost-delivery")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .into();
                        seen.accepted.push(value);
                        (StatusCode::NO_CONTENT, String::new())
                    },
                ),
            )
            .with_state(state);
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver {
            url: format!("http://{addr}/in"),
            seen,
            refusing,
        }
    }

    fn accepted(&self) -> Vec<serde_json::Value> {
        self.seen.lock().unwrap().accepted.clone()
    }

    async fn wait_accepted(&self, n: usize, within: Duration) -> Vec<serde_json::Value> {
        let start = Instant::now();
        loop {
            let accepted = self.accepted();
            if accepted.len() >= n {
                return accepted;
            }
            assert!(
                start.elapsed() < within,
                "the receiver accepted {} of {n} deliveries",
                accepted.len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The receiver's check, as `docs/operating.md` documents it: `t=T,v1=HEX`, HEX the
/// HMAC-SHA256 of `T.body` keyed with the secret, T within five minutes of now.
fn verified(header: &str, body: &[u8]) -> bool {
    let mut t = None;
    let mut v1 = None;
    for part in header.split(',') {
        match part.split_once('=') {
            Some(("t", value)) => t = value.parse::<i64>().ok(),
            Some(("v1", value)) => v1 = hex::decode(value).ok(),
            _ => {}
        }
    }
    let (Some(t), Some(v1)) = (t, v1) else {
        return false;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    if (now - t).abs() > 300 {
        return false;
    }
    let mut mac = Hmac::<sha2_hmac::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(format!("{t}.").as_bytes());
    mac.update(body);
    mac.verify_slice(&v1).is_ok()
}

fn manifest(home: &Home, url: &str, webhook_extra: &str) -> std::path::PathBuf {
    home.manifest(
        "",
        &format!(
            r#"
            [webhooks.ops]
            url = "{url}"
            secret_env = "{SECRET_VAR}"
            backoff = "50ms"
            backoff_max = "300ms"
            {webhook_extra}

            [defaults]
            deliver = {{ ops = ["failed", "crashed"] }}

            [jobs.ok]
            component = "{{guest:hello}}"
            deliver = {{ ops = ["succeeded", "failed"] }}

            [jobs.bad]
            component = "{{guest:flaky}}"
            payload = {{ fail_times = 9 }}
            retries = 0

            [jobs.filtered]
            component = "{{guest:hello}}"
            "#
        ),
    )
}

async fn serve(home: &Home, manifest: &std::path::Path) -> common::Server {
    home.serve_env(
        &[(SECRET_VAR, SECRET)],
        &["--manifest", manifest.to_str().unwrap()],
    )
    .await
}

fn deliveries_cli(home: &Home, args: &[&str]) -> (String, serde_json::Value) {
    let mut all = vec!["deliveries"];
    all.extend_from_slice(args);
    let text = home.run(&all);
    assert!(
        text.status.success(),
        "{}",
        String::from_utf8_lossy(&text.stderr)
    );
    all.push("--json");
    let json = home.run(&all);
    assert!(
        json.status.success(),
        "{}",
        String::from_utf8_lossy(&json.stderr)
    );
    (
        String::from_utf8_lossy(&text.stdout).into_owned(),
        serde_json::from_slice(&json.stdout).expect("JSON"),
    )
}

/// The value of the series `name` (its labels included, as rendered) in a scrape.
fn series(scrape: &str, name: &str) -> Option<f64> {
    scrape.lines().find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        (series == name).then(|| value.parse().expect("a number"))
    })
}

/// A token of tenant `acme`, registered first.
fn tenant_token(home: &Home) -> String {
    let added = home.run(&["tenants", "add", "acme"]);
    assert!(
        added.status.success(),
        "{}",
        String::from_utf8_lossy(&added.stderr)
    );
    home.create_token(Some("acme"))
}

on_every_backend! {
    async fn a_receiver_that_fails_five_times_gets_every_ending_once_verified_in_order(home) {
        let receiver = Receiver::start("127.0.0.1:0", 5).await;
        let m = manifest(&home, &receiver.url, "");
        let server = serve(&home, &m).await;
        server.post("/jobs/ok/kick").await;
        server.post("/jobs/bad/kick").await;
        server.post("/jobs/filtered/kick").await;
        let runs = server
            .wait_runs("bad", Duration::from_secs(120), |runs| runs.iter().any(|r| r["status"] == "failed"))
            .await;
        let failed = runs[0]["run_id"].as_str().unwrap().to_string();
        // The operator's retry of the failed run: its delivery goes after the first's.
        let (code, retried) = server.post(&format!("/runs/{failed}/retry")).await;
        assert_eq!(code, 201, "{retried}");
        let retry = retried["run"]["run_id"].as_str().unwrap().to_string();
        server
            .wait_runs("filtered", Duration::from_secs(120), |runs| runs.iter().any(|r| r["status"] == "succeeded"))
            .await;
        let accepted = receiver.wait_accepted(3, Duration::from_secs(120)).await;
        // Nothing more comes: each ending once.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let accepted_now = receiver.accepted();
        assert_eq!(accepted_now.len(), 3, "{accepted_now:#?}");
        assert_eq!(accepted, accepted_now);
        assert_eq!(receiver.seen.lock().unwrap().bad_signatures, 0);
        assert!(receiver.seen.lock().unwrap().requests >= 8, "five refused, three accepted");
        let endings: Vec<(String, String)> = accepted
            .iter()
            .map(|d| (d["job"].as_str().unwrap().into(), d["status"].as_str().unwrap().into()))
            .collect();
        assert!(endings.contains(&("ok".into(), "succeeded".into())), "{endings:?}");
        assert_eq!(endings.iter().filter(|e| e.0 == "bad" && e.1 == "failed").count(), 2);
        assert!(!endings.iter().any(|e| e.0 == "filtered"), "a filtered ending is not delivered");
        let position = |run: &str| accepted.iter().position(|d| d["run_id"] == run).unwrap();
        assert!(position(&failed) < position(&retry), "in order: the failed run, then its retry");
        for d in &accepted {
            assert_eq!(d["type"], "run.ended");
            assert_eq!(d["header_delivery"], d["delivery_id"].to_string());
            assert!(d["attempts"].as_i64().unwrap() >= 1 && d["finished_at"].is_string(), "{d}");
            assert_eq!(d["tenant"], "default");
        }
        assert_eq!(accepted.iter().find(|d| d["run_id"] == retry.as_str()).unwrap()["retry_of"], failed.as_str());
        assert_eq!(accepted.iter().find(|d| d["job"] == "bad").unwrap()["code"], "handler_failed");
        assert_eq!(
            home.scalar("SELECT COUNT(*) FROM jobhost_deliveries WHERE job = 'filtered'").await,
            0,
            "no outbox row for an ending its job does not route"
        );

        // Every attempt is recorded and visible, the receiver's text bounded and escaped.
        let (text, listed) = deliveries_cli(&home, &[]);
        let listed = listed.as_array().unwrap().clone();
        assert_eq!(listed.len(), 3, "{text}");
        assert!(listed.iter().all(|d| d["state"] == "delivered"), "{listed:#?}");
        let tries: i64 = listed.iter().map(|d| d["attempts"].as_i64().unwrap()).sum();
        assert_eq!(tries, receiver.seen.lock().unwrap().requests as i64, "one attempt recorded per request");
        let retried_one = listed.iter().find(|d| d["attempts"].as_i64().unwrap() > 1).unwrap();
        let id = retried_one["id"].to_string();
        let (shown, detail) = deliveries_cli(&home, &["show", &id]);
        let failures: Vec<&serde_json::Value> = detail["attempt_records"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["status_code"] == 503)
            .collect();
        assert!(!failures.is_empty(), "{detail}");
        for failure in failures {
            let error = failure["error"].as_str().unwrap();
            assert!(error.starts_with("HTTP 503: \\u{1b}[31mdown"), "{error}");
            assert!(!error.contains('\x1b') && !error.contains('\0'), "escaped: {error:?}");
            assert!(error.len() <= 320, "bounded: {} bytes", error.len());
        }
        assert!(!shown.contains('\x1b'), "{shown}");
        let (_, only_run) = deliveries_cli(&home, &["--run", &failed]);
        assert_eq!(only_run.as_array().unwrap().len(), 1);
        let (_, none_failed) = deliveries_cli(&home, &["--status", "failed"]);
        assert!(none_failed.as_array().unwrap().is_empty());

        // The API and the run view list them; for a tenant's token they do not exist.
        let (code, api) = server.get("/deliveries").await;
        assert_eq!(code, 200);
        assert_eq!(api["deliveries"].as_array().unwrap().len(), 3);
        let (code, filtered) = server.get(&format!("/deliveries?run={failed}&status=delivered")).await;
        assert_eq!(code, 200);
        assert_eq!(filtered["deliveries"].as_array().unwrap().len(), 1);
        let (code, bad) = server.get("/deliveries?status=lost").await;
        assert_eq!((code, bad["error"]["code"].as_str()), (400, Some("invalid_parameter")));
        let (_, run_view) = server.get(&format!("/runs/{failed}")).await;
        assert_eq!(run_view["deliveries"].as_array().unwrap().len(), 1, "{run_view}");
        assert_eq!(run_view["deliveries"][0]["webhook"], "ops");
        let tenant = tenant_token(&home);
        let (code, _) = server.get_as(Some(&tenant), "/deliveries").await;
        assert_eq!(code, 404);
        let shown_run = home.run(&["runs", "show", &failed, "--json"]);
        let run_show: serde_json::Value = serde_json::from_slice(&shown_run.stdout).expect("JSON");
        assert_eq!(run_show["deliveries"][0]["state"], "delivered");
        let shown_text = home.run(&["runs", "show", &failed]);
        let shown_text = String::from_utf8_lossy(&shown_text.stdout).into_owned();
        assert!(shown_text.contains("delivery ") && shown_text.contains("→ ops"), "{shown_text}");

        // The secret is nowhere: listings, views, answers, logs.
        let (_, one) = server.get(&format!("/deliveries/{id}")).await;
        let seen = [text, shown, shown_text, api.to_string(), run_view.to_string(), one.to_string(), run_show.to_string()];
        drop(server);
        for (n, said) in seen.iter().chain([&home.server_logs()]).enumerate() {
            assert!(!said.contains(SECRET), "the secret leaked in output {n}");
        }
    }

    async fn a_receiver_down_while_the_host_is_killed_loses_nothing(home) {
        // A port nothing listens on yet.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("http://127.0.0.1:{port}/in");
        let m = manifest(&home, &url, "");
        let mut server = serve(&home, &m).await;
        for instance in ["a", "b"] {
            let (code, started) = server
                .post_as(Some(&server.token), "/jobs/ok/runs", Some(&format!(r#"{{"instance": "{instance}"}}"#)))
                .await;
            assert!(code == 200 || code == 201 || code == 202, "{code} {started}");
        }
        home.wait_for(
            "SELECT COUNT(*) FROM (SELECT COUNT(*) AS n FROM jobhost_deliveries WHERE attempts >= 1) c WHERE n = 2",
            Duration::from_secs(120),
        )
        .await;
        // The metrics show the backlog, by webhook to the operator only, and the failures.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let scrape = server.text("/metrics").await;
        assert_eq!(series(&scrape, "jobhost_deliveries_pending"), Some(2.0), "{scrape}");
        assert_eq!(series(&scrape, r#"jobhost_webhook_deliveries_pending{webhook="ops"}"#), Some(2.0), "{scrape}");
        let oldest = series(&scrape, "jobhost_deliveries_oldest_pending_seconds").unwrap();
        assert!(oldest >= 1.0, "waited since the endings were written: {oldest}");
        assert_eq!(series(&scrape, r#"jobhost_webhook_oldest_pending_seconds{webhook="ops"}"#), Some(oldest));
        let retries = series(&scrape, r#"jobhost_delivery_attempts_total{webhook="ops",result="retry"}"#).unwrap();
        assert!(retries >= 2.0, "{scrape}");
        assert_eq!(series(&scrape, r#"jobhost_delivery_attempts_total{webhook="ops",result="delivered"}"#), None);
        let (_, open) = server.get_as(None, "/metrics").await;
        let open = open.as_str().unwrap().to_string();
        assert_eq!(series(&open, "jobhost_deliveries_pending"), Some(2.0), "{open}");
        assert!(!open.contains("webhook="), "no webhook named without a token: {open}");
        server.child.kill().unwrap();
        server.child.wait().unwrap();
        assert_eq!(
            home.scalar("SELECT COUNT(*) FROM jobhost_deliveries WHERE state = 'pending'").await,
            2,
            "both endings wait in the outbox"
        );
        let receiver = Receiver::start(&format!("127.0.0.1:{port}"), 0).await;
        let server = serve(&home, &m).await;
        let accepted = receiver.wait_accepted(2, Duration::from_secs(120)).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(receiver.accepted().len(), 2, "each once");
        let mut runs: Vec<&str> = accepted.iter().map(|d| d["run_id"].as_str().unwrap()).collect();
        runs.sort();
        runs.dedup();
        assert_eq!(runs.len(), 2, "two runs' endings");
        home.wait_for(
            "SELECT COUNT(*) FROM (SELECT COUNT(*) AS n FROM jobhost_deliveries WHERE state = 'delivered') c WHERE n = 2",
            Duration::from_secs(30),
        )
        .await;
        let (_, listed) = deliveries_cli(&home, &["--status", "delivered"]);
        for d in listed.as_array().unwrap() {
            assert!(d["attempts"].as_i64().unwrap() >= 2, "tried while down, then delivered: {d}");
            assert_eq!(d["last_error"], serde_json::Value::Null);
        }
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let scrape = server.text("/metrics").await;
        assert_eq!(series(&scrape, "jobhost_deliveries_pending"), Some(0.0), "{scrape}");
        assert_eq!(series(&scrape, "jobhost_deliveries_oldest_pending_seconds"), Some(0.0));
        assert_eq!(series(&scrape, r#"jobhost_webhook_deliveries_pending{webhook="ops"}"#), None);
        assert_eq!(
            series(&scrape, r#"jobhost_delivery_attempts_total{webhook="ops",result="delivered"}"#),
            Some(2.0),
            "this host's counters: {scrape}"
        );
        drop(server);
    }

    async fn a_delivery_given_up_is_sent_again_by_the_operator(home) {
        let receiver = Receiver::start("127.0.0.1:0", 0).await;
        receiver.refusing.store(true, Ordering::SeqCst);
        let m = manifest(&home, &receiver.url, r#"retry_for = "400ms""#);
        let server = serve(&home, &m).await;
        server.post("/jobs/ok/kick").await;
        home.wait_for(
            "SELECT COUNT(*) FROM jobhost_deliveries WHERE state = 'failed'",
            Duration::from_secs(120),
        )
        .await;
        let (_, given_up) = deliveries_cli(&home, &["--status", "failed"]);
        let given_up = given_up.as_array().unwrap();
        assert_eq!(given_up.len(), 1);
        let tries = given_up[0]["attempts"].as_i64().unwrap();
        assert!(tries >= 2, "{given_up:?}");
        // Each attempt counted once, by what followed it: the receiver saw them all.
        let scrape = server.text("/metrics").await;
        let counted = |result: &str| {
            series(&scrape, &format!(r#"jobhost_delivery_attempts_total{{webhook="ops",result="{result}"}}"#))
        };
        assert_eq!(counted("given_up"), Some(1.0), "{scrape}");
        assert_eq!(counted("retry"), Some((tries - 1) as f64), "{scrape}");
        assert_eq!(receiver.seen.lock().unwrap().requests as i64, tries);
        assert!(given_up[0]["last_error"].as_str().unwrap().starts_with("HTTP 503"));
        let id = given_up[0]["id"].to_string();
        // A delivered or pending one is not retried; a tenant cannot; an unknown one is 404.
        let (code, _) = server.post("/deliveries/999999/retry").await;
        assert_eq!(code, 404);
        let tenant = tenant_token(&home);
        let (code, _) = server.post_as(Some(&tenant), &format!("/deliveries/{id}/retry"), None).await;
        assert_eq!(code, 404);
        receiver.refusing.store(false, Ordering::SeqCst);
        let out = home.run(&["deliveries", "retry", &id]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let accepted = receiver.wait_accepted(1, Duration::from_secs(60)).await;
        assert_eq!(accepted[0]["delivery_id"].to_string(), id);
        home.wait_for(
            &format!("SELECT COUNT(*) FROM jobhost_deliveries WHERE id = {id} AND state = 'delivered'"),
            Duration::from_secs(30),
        )
        .await;
        let scrape = server.text("/metrics").await;
        assert_eq!(
            series(&scrape, r#"jobhost_delivery_attempts_total{webhook="ops",result="delivered"}"#),
            Some(1.0),
            "{scrape}"
        );
        let (code, again) = server.post(&format!("/deliveries/{id}/retry")).await;
        assert_eq!((code, again["error"]["code"].as_str()), (409, Some("not_retryable")));
        let out = home.run(&["deliveries", "retry", &id]);
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("only a delivery given up (failed) is retried"));
    }
}

/// `host check` refuses a bad `[webhooks]` or `deliver` with fixed words naming the line
/// and key, and never prints the secret.
#[test]
fn host_check_refuses_bad_webhooks_naming_the_line_and_key() {
    let home = tempfile::tempdir().unwrap();
    let hello = common::guest("hello");
    let write = |text: &str| {
        let path = home.path().join("jobhost.toml");
        std::fs::write(&path, text).unwrap();
        path
    };
    let check = |path: &std::path::Path| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_host"))
            .env("JOBHOST_CACHE", common::shared_cache())
            .env_remove("JOBHOST_DB")
            .env(SECRET_VAR, SECRET)
            .args(["check", "--manifest", path.to_str().unwrap()])
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!said.contains(SECRET));
        (out.status.code(), said)
    };
    let good = write(&format!(
        "[webhooks.ops]\nurl = \"https://ops.example/in\"\nsecret_env = \"{SECRET_VAR}\"\n\
         [jobs.hello]\ncomponent = \"{}\"\ndeliver = {{ ops = [\"failed\"] }}\n",
        hello.display()
    ));
    let (code, said) = check(&good);
    assert_eq!(code, Some(0), "{said}");
    let bad = write(&format!(
        "[webhooks.ops]\nurl = \"ops.example\"\nsecret_env = \"{SECRET_VAR}\"\n\
         [webhooks.billing]\nurl = \"https://billing.example/in\"\nsecret_env = \"JOBHOST_TEST_NO_SUCH_VAR\"\n\
         [jobs.hello]\ncomponent = \"{}\"\ndeliver = {{ ops = [\"finished\"] }}\n",
        hello.display()
    ));
    let (code, said) = check(&bad);
    assert_eq!(code, Some(2), "{said}");
    for expected in [
        "webhook ops: line 2: url: use an http:// or https:// URL with a host",
        "webhook billing: line 6: secret_env: the environment has no JOBHOST_TEST_NO_SUCH_VAR (its signing secret)",
        "job hello: line 9: deliver.ops: unknown ending \"finished\" (known: succeeded, failed, cancelled, crashed, skipped)",
    ] {
        assert!(said.contains(expected), "{expected}\nin: {said}");
    }
}
