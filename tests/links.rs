//! `links` end to end: the real binary and the `linker`, `notify`, `invite` and `report`
//! guests against a local HTTP service started by the test (with a small IAM), on SQLite
//! and Postgres.

use crate::common;

use common::service::{Service, verify};
use common::{Home, migrations};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const TOKEN: &str = "s3cr3t-billing-token";

/// A manifest with the mounts `api` (a static credential, and a header list of its own),
/// `signed` (a per-attempt token, the default header list) and `down` (nothing listens),
/// and the `linker` guest as `caller`, which may call `api` and `signed` and declares
/// `invoice.create`.
fn manifest(home: &Home, service: &Service, jobs: &str) -> String {
    let m = home.manifest(
        "",
        &format!(
            r#"
            [links.api]
            url = "{url}/api/"
            methods = ["GET", "POST"]
            timeout = "5s"
            max_response = "1MiB"
            credential = {{ header = "Authorization", prefix = "Bearer ", env = "BILLING_TOKEN" }}
            headers = ["content-type", "x-request-id"]

            [links.signed]
            url = "{url}/api/"
            credential = {{ header = "Authorization", prefix = "Bearer ", token = "attempt", audience = "billing" }}

            [links.down]
            url = "http://127.0.0.1:9/"

            [jobs.caller]
            component = "{{guest:linker}}"
            tenant = "acme"
            timeout = "5s"
            retries = 1
            backoff = "10ms"
            actions = ["invoice.create"]
            grants.links = ["api", "signed", "down"]
            {jobs}
        "#,
            url = service.url
        ),
    );
    m.to_str().unwrap().to_string()
}

fn call(home: &Home, m: &str, job: &str, payload: Value) -> (i32, Value, String) {
    let out = home
        .host()
        .env("BILLING_TOKEN", TOKEN)
        .args([
            "run",
            job,
            "--json",
            "--manifest",
            m,
            "--payload",
            &payload.to_string(),
        ])
        .output()
        .unwrap();
    let run: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "no JSON: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let shown = home
        .run(&["runs", "show", run["run_id"].as_str().unwrap(), "--json"])
        .stdout;
    let everything = format!(
        "{}{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&shown)
    );
    (out.status.code().unwrap_or(-1), run, everything)
}

on_every_backend! {
    async fn the_notify_example_posts_its_message_with_the_mounts_credential(home) {
        let service = Service::start().await;
        let m = manifest(&home, &service, r#"
            [jobs.notify]
            component = "{guest:notify}"
            tenant = "acme"
            timeout = "5s"
            grants.links = ["api"]
        "#);
        let message = json!({"event": "ready", "n": 3});
        let (code, run, everything) = call(&home, &m, "notify", json!({"mount": "api", "path": "reports", "message": message}));
        assert_eq!(code, 0, "{run}");
        let seen = service.seen();
        assert_eq!(seen.len(), 1);
        assert_eq!((seen[0].method.as_str(), seen[0].path.as_str()), ("POST", "/api/reports"));
        assert_eq!(serde_json::from_slice::<Value>(&seen[0].body).unwrap(), message);
        assert_eq!(seen[0].headers["authorization"], format!("Bearer {TOKEN}"));
        assert!(!seen[0].headers["idempotency-key"].is_empty());
        assert!(!everything.contains(TOKEN), "the credential leaked: {everything}");
        assert!(everything.contains("api answered 202"), "{everything}");
        // A service that refuses fails the run with the guest's own words, nothing more.
        let (code, run, _) = call(&home, &m, "notify", json!({"mount": "api", "path": "fail", "message": message}));
        assert_eq!((code, run["code"].as_str()), (1, Some("handler_failed")), "{run}");
        assert_eq!(run["error"], "api answered 500");
    }

    async fn the_host_adds_its_credential_which_the_guest_and_logs_never_see(home) {
        let service = Service::start().await;
        let m = manifest(&home, &service, "");
        let (code, run, everything) = call(&home, &m, "caller", json!({
            "mount": "api", "method": "POST", "path": "echo", "body": "hello",
            "headers": [["content-type", "text/plain"], ["x-request-id", "r1"]], "step": "s1",
        }));
        assert_eq!(code, 0, "{run}");
        let seen = service.seen();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].headers["authorization"], format!("Bearer {TOKEN}"));
        assert_eq!(seen[0].headers["x-request-id"], "r1");
        assert_eq!(seen[0].body, b"hello");
        assert!(seen[0].headers.contains_key("idempotency-key"));
        assert!(everything.contains(r#"status 200 body {\"body\":\"hello\",\"method\":\"POST\",\"path\":\"/api/echo\"}"#), "{everything}");
        assert!(!everything.contains(TOKEN), "the credential leaked: {everything}");
    }

    async fn every_refusal_sends_nothing(home) {
        let service = Service::start().await;
        let m = manifest(&home, &service, r#"
            [jobs.ungranted]
            component = "{guest:linker}"
            grants.links = ["signed"]
        "#);
        let cases: Vec<(Value, &str)> = vec![
            (json!({"mount": "api", "path": "http://evil.example/x"}), "invalid call: bad-path"),
            (json!({"mount": "api", "path": "//evil.example/x"}), "invalid call: bad-path"),
            (json!({"mount": "api", "path": "../admin"}), "invalid call: bad-path"),
            (json!({"mount": "api", "path": "%2e%2e/admin"}), "invalid call: bad-path"),
            (json!({"mount": "api", "path": "a/%252e%252e/admin"}), "invalid call: bad-path"),
            (json!({"mount": "api", "path": "user@evil.example/x"}), "invalid call: bad-path"),
            (json!({"mount": "api", "path": "a\\b"}), "invalid call: bad-path"),
            (json!({"mount": "api", "path": "echo", "headers": [["x-a", "a\r\nHost: evil"]]}), "invalid call: bad-header"),
            (json!({"mount": "api", "path": "echo", "headers": [["Authorization", "Bearer mine"]]}), "invalid call: header-not-allowed"),
            (json!({"mount": "api", "path": "echo", "headers": [["host", "evil.example"]]}), "invalid call: header-not-allowed"),
            (json!({"mount": "api", "path": "echo", "headers": [["cookie", "a=b"]]}), "invalid call: header-not-allowed"),
            (json!({"mount": "api", "path": "echo", "headers": [["connection", "close"]]}), "invalid call: header-not-allowed"),
            (json!({"mount": "api", "path": "echo", "headers": [["idempotency-key", "mine"]]}), "invalid call: header-not-allowed"),
            (json!({"mount": "api", "path": "echo", "headers": [["X-HTTP-Method-Override", "DELETE"]]}), "invalid call: header-not-allowed"),
            (json!({"mount": "api", "path": "echo", "headers": [["x-original-url", "/admin"]]}), "invalid call: header-not-allowed"),
            (json!({"mount": "api", "path": "echo", "headers": [["X-Forwarded-Prefix", "/admin"]]}), "invalid call: header-not-allowed"),
            (json!({"mount": "api", "path": "echo", "headers": [["x-real-ip", "127.0.0.1"]]}), "invalid call: header-not-allowed"),
            (json!({"mount": "api", "path": "a/..%00/admin"}), "invalid call: bad-path"),
            (json!({"mount": "api", "path": "echo%0d%0aX-Injected:%201"}), "invalid call: bad-path"),
            (json!({"mount": "api", "method": "DELETE", "path": "echo"}), "capability refused: method-not-allowed"),
            (json!({"mount": "api", "method": "G".repeat(100_000), "path": "echo"}), "capability refused: method-not-allowed"),
            (json!({"mount": "signed", "path": "echo", "action": "invoice.delete"}), "capability refused: action-not-declared"),
            (json!({"mount": "nowhere", "path": "echo"}), "capability refused: not-granted"),
        ];
        // A refusal's run says why in the host's words, naming only granted mounts (never
        // `nowhere`, the guest's), then what the guest made of it.
        let granted = r#"(the job may call "api", "down", "signed")"#;
        let with_reason = |guest: &str| {
            let reason = match guest.strip_prefix("capability refused: ") {
                Some("method-not-allowed") => format!("method-not-allowed: mount \"api\" does not allow the call's method {granted}"),
                Some("action-not-declared") => format!("action-not-declared: the call to mount \"signed\" names an action its job does not declare {granted}"),
                Some("not-granted") => format!("not-granted: a mount is outside the job's links grant {granted}"),
                _ => return guest.to_string(),
            };
            format!("capability_refused: {reason}; the guest's error: {guest}")
        };
        for (payload, error) in cases {
            let (code, run, _) = call(&home, &m, "caller", payload.clone());
            assert_eq!(code, 1, "{payload}: {run}");
            assert_eq!(run["error"], with_reason(error), "{payload}: {run}");
        }
        let (code, run, _) = call(&home, &m, "ungranted", json!({"mount": "api", "path": "echo"}));
        assert_eq!((code, run["code"].as_str()), (1, Some("capability_refused")), "{run}");
        assert_eq!(service.count(), 0, "requests reached the service: {:?}", service.seen());
    }

    async fn a_mount_passes_only_the_headers_it_accepts_with_visible_ascii_values(home) {
        let service = Service::start().await;
        let m = manifest(&home, &service, "");
        let refused = |payload: Value, error: &str| {
            let (code, run, _) = call(&home, &m, "caller", payload.clone());
            assert_eq!(code, 1, "{payload}: {run}");
            assert_eq!(run["error"], error, "{payload}: {run}");
        };
        // The default list: headers a proxy or service might honour, whatever their
        // spelling, are not on it; nor is anything else the operator did not list.
        for name in ["X-Host", "X-Forwarded", "X-Forwarded-Server", "X-Original-Host", "X-Request-Id", "x-user"] {
            refused(json!({"mount": "signed", "path": "echo", "headers": [[name, "evil.example"]]}), "invalid call: header-not-allowed");
        }
        // A mount's own list replaces the default one.
        refused(json!({"mount": "api", "path": "echo", "headers": [["accept", "*/*"]]}), "invalid call: header-not-allowed");
        // Values are visible ASCII: no non-ASCII byte, formatting character or tab.
        for value in ["caf\u{e9}", "text/plain\u{202e}", "a\u{2060}b", "a\tb"] {
            refused(json!({"mount": "signed", "path": "echo", "headers": [["accept", value]]}), "invalid call: bad-header");
        }
        // A step name follows the name rule.
        refused(json!({"mount": "signed", "path": "echo", "step": "charge\u{2060}"}), "invalid call: bad-step");
        assert_eq!(service.count(), 0, "requests reached the service: {:?}", service.seen());

        let (code, run, _) = call(&home, &m, "caller", json!({
            "mount": "signed", "method": "POST", "path": "echo", "body": "{}", "step": "charge 1",
            "headers": [["Accept", "application/json"], ["content-type", "application/json; charset=utf-8"], ["If-None-Match", "\"v1\""]],
        }));
        assert_eq!(code, 0, "{run}");
        let (code, run, _) = call(&home, &m, "caller", json!({
            "mount": "api", "path": "echo", "headers": [["X-Request-Id", "r-7"]],
        }));
        assert_eq!(code, 0, "{run}");
        let seen = service.seen();
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0].headers["accept"], "application/json");
        assert_eq!(seen[0].headers["content-type"], "application/json; charset=utf-8");
        assert_eq!(seen[0].headers["if-none-match"], "\"v1\"");
        assert_eq!(seen[1].headers["x-request-id"], "r-7");
        for s in &seen {
            for name in ["x-host", "x-forwarded", "x-forwarded-server", "x-original-host", "x-user"] {
                assert!(!s.headers.contains_key(name), "{name} reached the service: {:?}", s.headers);
            }
        }
    }

    async fn redirects_are_not_followed_and_answers_are_bounded(home) {
        let service = Service::start().await;
        let m = manifest(&home, &service, "");
        let (code, run, everything) = call(&home, &m, "caller", json!({"mount": "api", "path": "redirect"}));
        assert_eq!(code, 0, "{run}");
        assert!(everything.contains("status 302"), "{everything}");
        assert!(service.seen().iter().all(|s| s.path != "/api/target"));
        let (code, run, _) = call(&home, &m, "caller", json!({"mount": "api", "path": "big"}));
        assert_eq!((code, run["error"].as_str()), (1, Some("invalid call: response-too-large")), "{run}");
        let (code, run, _) = call(&home, &m, "caller", json!({"mount": "down", "path": "x"}));
        assert_eq!((code, run["error"].as_str()), (1, Some("host unavailable")), "{run}");
    }

    async fn a_slow_service_is_cut_off_at_the_deadline(home) {
        let service = Service::start().await;
        let m = manifest(&home, &service, "");
        let started = Instant::now();
        let out = home
            .host()
            .env("BILLING_TOKEN", TOKEN)
            .args(["run", "caller", "--json", "--manifest", &m, "--timeout", "1s", "--retries", "0",
                   "--payload", &json!({"mount": "api", "path": "slow"}).to_string()])
            .output()
            .unwrap();
        let run: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(run["code"], "timeout", "{run}");
        assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    }

    async fn a_superseded_attempt_sends_nothing(home) {
        let service = Service::start().await;
        let m = manifest(&home, &service, "");
        let child = home
            .host()
            .env("BILLING_TOKEN", TOKEN)
            .args(["run", "caller", "--json", "--manifest", &m, "--timeout", "20s", "--retries", "0",
                   "--payload", &json!({"mount": "api", "path": "echo", "wait_ms": 2000}).to_string()])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        home.wait_for(
            "SELECT COUNT(*) FROM jobhost_leases WHERE job = 'caller' AND holder IS NOT NULL",
            Duration::from_secs(20),
        ).await;
        assert_eq!(home.exec("UPDATE jobhost_leases SET generation = generation + 1 WHERE job = 'caller'").await, 1);
        let out = tokio::task::spawn_blocking(move || child.wait_with_output()).await.unwrap().unwrap();
        let run: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(run["code"], "lease_lost", "{run}");
        assert_eq!(service.count(), 0);
    }

    async fn a_retried_attempt_sends_the_same_idempotency_key(home) {
        let service = Service::start().await;
        let m = manifest(&home, &service, "");
        let (code, run, _) = call(&home, &m, "caller", json!({"mount": "api", "method": "POST", "path": "echo", "step": "charge", "fail_first": true}));
        assert_eq!((code, run["attempts"].as_i64()), (0, Some(2)), "{run}");
        let (code, _, _) = call(&home, &m, "caller", json!({"mount": "api", "method": "POST", "path": "echo", "step": "charge"}));
        assert_eq!(code, 0);
        let (code, _, _) = call(&home, &m, "caller", json!({"mount": "api", "method": "POST", "path": "echo", "step": "refund", "calls": 2}));
        assert_eq!(code, 0);
        let keys: Vec<String> = service.seen().iter().map(|s| s.headers["idempotency-key"].clone()).collect();
        assert_eq!(keys.len(), 5);
        assert_eq!(keys[0], keys[1], "a retry of the same step repeats its key");
        assert_ne!(keys[1], keys[2], "another run has its own key");
        assert_eq!(keys[3], keys[4], "the same step twice in one pass is one key");
        assert_ne!(keys[2], keys[3]);
    }

    async fn a_per_attempt_token_says_who_acts_and_until_when(home) {
        let service = Service::start().await;
        let m = manifest(&home, &service, "");
        let (code, run, _) = call(&home, &m, "caller", json!({"mount": "signed", "method": "POST", "path": "echo", "action": "invoice.create"}));
        assert_eq!(code, 0, "{run}");
        let seen = service.seen();
        let token = seen[0].headers["authorization"].strip_prefix("Bearer ").unwrap();
        // The host's published keys (here read where every host of the fleet reads them).
        let keys: Vec<(String, String)> = {
            let store = home.store().await;
            let keys = store.signing_keys().await.unwrap();
            store.close().await;
            keys.into_iter().map(|k| (k.kid, k.public_key)).collect()
        };
        let jwks = json!({"keys": keys.iter().map(|(kid, x)| json!({"kid": kid, "x": x})).collect::<Vec<_>>()});
        let claims = verify(token, &jwks).expect("a valid signature");
        assert_eq!(claims["sub"], "caller");
        assert_eq!(claims["aud"], "billing");
        assert_eq!(claims["tenant"], "acme");
        assert_eq!(claims["run"], run["run_id"]);
        assert_eq!(claims["actions"], json!(["invoice.create"]));
        assert_eq!(claims["action"], "invoice.create");
        let issued = claims["iat"].as_i64().unwrap();
        let expires = claims["exp"].as_i64().unwrap();
        assert!((4..=6).contains(&(expires - issued)), "expires at the attempt's deadline: {claims}");
        // A token does not verify against another key, nor once altered.
        let mut forged = token.to_string();
        forged.replace_range(forged.len() - 4.., "AAAA");
        assert!(verify(&forged, &jwks).is_none());
    }

    // The fleet publishes its keys, rotates them, and an IAM checks workload tokens
    // against them to issue, expire and revoke membership links.
    async fn membership_links_are_issued_expire_and_are_revoked_through_iam(home) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        let service = Service::start().await;
        let m = home.manifest(
            "",
            &format!(
                r#"
                [links.iam]
                url = "{url}/iam/"
                methods = ["POST", "DELETE"]
                credential = {{ header = "Authorization", prefix = "Bearer ", token = "attempt", audience = "iam" }}

                [jobs.invite]
                component = "{{guest:invite}}"
                tenant = "acme"
                actions = ["membership.issue", "membership.revoke"]
                payload = {{ mount = "iam", dimension = "workspace", container = "acme-ws", role = "viewer", expires_in_s = 2 }}
                grants.links = ["iam"]

                [jobs.revoker]
                component = "{{guest:invite}}"
                tenant = "acme"
                actions = ["membership.issue", "membership.revoke"]
                payload = {{ mount = "iam", dimension = "workspace", container = "acme-ws", role = "editor", revoke = true }}
                grants.links = ["iam"]

                [jobs.undeclared]
                component = "{{guest:invite}}"
                tenant = "acme"
                payload = {{ mount = "iam", dimension = "workspace", container = "acme-ws", role = "viewer" }}
                grants.links = ["iam"]

                [jobs.evil]
                component = "{{guest:invite}}"
                tenant = "evil"
                actions = ["membership.issue"]
                payload = {{ mount = "iam", dimension = "workspace", container = "acme-ws", role = "owner" }}
                grants.links = ["iam"]
            "#,
                url = service.url
            ),
        );
        let server = home
            .serve(&["--manifest", m.to_str().unwrap(), "--key-rotation", "3s"])
            .await;
        service.trust(&format!("{}/.well-known/jwks.json", server.url));
        service.refuse_tenant("evil");
        let (status, jwks) = server.get("/.well-known/jwks.json").await;
        assert_eq!(status, 200);
        assert_eq!(jwks["keys"][0]["kty"], "OKP");
        assert_eq!(jwks["keys"][0]["alg"], "EdDSA");
        for job in ["invite", "revoker", "undeclared", "evil"] {
            assert_eq!(server.post(&format!("/jobs/{job}/kick")).await.0, 202);
        }
        let outcome = |job: &'static str| {
            let server = &server;
            async move {
                server
                    .wait_runs(job, Duration::from_secs(30), |runs| {
                        runs.iter()
                            .any(|r| r["status"] == "succeeded" || r["status"] == "failed")
                    })
                    .await[0]
                    .clone()
            }
        };
        assert_eq!(outcome("invite").await["status"], "succeeded");
        assert_eq!(outcome("revoker").await["status"], "succeeded");
        let undeclared = outcome("undeclared").await;
        assert_eq!(
            (undeclared["code"].as_str(), undeclared["error"].as_str()),
            (
                Some("capability_refused"),
                Some(
                    "capability_refused: action-not-declared: the call to mount \"iam\" names an action its job \
                     does not declare (the job may call \"iam\"); the guest's error: capability refused: action-not-declared"
                )
            ),
            "{undeclared}"
        );
        let evil = outcome("evil").await;
        assert_eq!(evil["error"], "iam: unauthorized", "{evil}");
        // The invite's link works until it expires; the revoked one does not.
        assert!(service.link_valid("m-1").await || service.link_valid("m-2").await);
        let revoked = service
            .seen()
            .iter()
            .find(|s| s.method == "DELETE")
            .map(|s| s.path.trim_start_matches("/iam/memberships/").to_string())
            .expect("a revocation");
        assert!(!service.link_valid(&revoked).await);
        let started = Instant::now();
        while service.link_valid("m-1").await || service.link_valid("m-2").await {
            assert!(started.elapsed() < Duration::from_secs(15), "never expired");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Keys rotate: a new one is published beside the old.
        let started = Instant::now();
        loop {
            let (_, jwks) = server.get("/.well-known/jwks.json").await;
            if jwks["keys"].as_array().unwrap().len() >= 2 {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "no rotation: {jwks}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    // A worked tenant job using all three capabilities: rows in, a CSV file out, a
    // service told about it.
    async fn the_report_example_reads_rows_writes_a_file_and_notifies(home) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        home.exec("INSERT INTO ledger (run_id, attempt, n) VALUES ('r1', 1, 7)")
            .await;
        let service = Service::start().await;
        let m = home.manifest(
            "",
            &format!(
                r#"
                [collections.reports]
                [links.hooks]
                url = "{url}/api/"
                methods = ["POST"]
                [jobs.report]
                component = "{{guest:report}}"
                tenant = "acme"
                payload = {{ collection = "reports", name = "ledger.csv", notify = "hooks" }}
                grants.db = {{ read = ["ledger"] }}
                grants.files = {{ write = ["reports"] }}
                grants.links = ["hooks"]
            "#,
                url = service.url
            ),
        );
        let (code, run) = home.run_json(&["report", "--manifest", m.to_str().unwrap()]);
        assert_eq!(code, 0, "{run}");
        let seen = service.seen();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].path, "/api/reports");
        let body: Value = serde_json::from_slice(&seen[0].body).unwrap();
        assert_eq!(body["report"], "ledger.csv");
        assert_eq!(body["tenant"], "acme");
        let csv = std::fs::read_dir(home.path().join("files/reports/acme"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        assert_eq!(
            std::fs::read_to_string(csv).unwrap(),
            "run_id,attempt,n\nr1,1,7\n"
        );
    }
}
