//! Tenants and the API's bearer tokens, end to end with the real binary: no token means
//! 401 except the open probes; a tenant's token sees and acts on its own jobs and runs
//! only, and anything of another tenant's answers 404; a disabled tenant takes no new runs.

mod common;

use common::{Home, Server};
use serde_json::Value;
use std::time::Duration;

/// Two tenants' jobs: `acme`'s greets, `globex`'s fails at once (so it has a report).
fn two_tenants(home: &Home) -> std::path::PathBuf {
    home.manifest(
        "",
        r#"
        [jobs.greeter]
        component = "{guest:hello}"
        tenant = "acme"
        [jobs.ledger]
        component = "{guest:flaky}"
        tenant = "globex"
        retries = 0
        payload = { fail_times = 1000 }
    "#,
    )
}

/// Kicks a job as the operator and waits for its run to end; returns the run id.
async fn kicked_run(server: &Server, job: &str) -> String {
    let (status, kicked) = server.post(&format!("/jobs/{job}/kick")).await;
    assert_eq!(status, 202, "{kicked}");
    let id = kicked["run_id"].as_str().expect("queued").to_string();
    server
        .wait_runs(job, Duration::from_secs(20), |runs| {
            runs.iter()
                .any(|r| r["run_id"] == id.as_str() && r["finished_at"].is_string())
        })
        .await;
    id
}

/// Every API endpoint, as (method, path): what a token must be shown for.
fn endpoints(job: &str, run: &str) -> Vec<(&'static str, String)> {
    vec![
        ("GET", "/jobs".into()),
        ("GET", format!("/jobs/{job}")),
        ("POST", format!("/jobs/{job}/kick")),
        ("POST", format!("/jobs/{job}/runs")),
        ("GET", "/runs".into()),
        ("GET", format!("/runs/{run}")),
        ("GET", "/reports".into()),
        ("GET", "/tenants".into()),
        ("POST", "/tenants".into()),
        ("POST", "/tenants/acme/disable".into()),
        ("POST", "/tenants/acme/enable".into()),
    ]
}

async fn call(server: &Server, token: Option<&str>, method: &str, path: &str) -> (u16, Value) {
    match method {
        "GET" => server.get_as(token, path).await,
        _ => server.post_as(token, path, None).await,
    }
}

fn cli_ok(home: &Home, args: &[&str]) -> String {
    let out = home.run(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

fn cli_refused(home: &Home, args: &[&str]) -> String {
    let out = home.run(args);
    assert_eq!(out.status.code(), Some(2), "{args:?} must be refused");
    String::from_utf8(out.stderr).expect("utf-8")
}

on_every_backend! {
    async fn without_a_valid_token_only_the_page_and_the_probes_answer(home) {
        let m = two_tenants(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let run = kicked_run(&server, "greeter").await;
        let acme = home.create_token(Some("acme"));
        let (id, secret) = acme.strip_prefix("jh_").unwrap().split_once('_').unwrap();
        let wrong_secret = format!("jh_{id}_{}", "0".repeat(secret.len()));
        let unknown_id = format!("jh_{}_{secret}", "0".repeat(id.len()));
        for token in [None, Some(""), Some("nonsense"), Some(wrong_secret.as_str()),
                      Some(unknown_id.as_str()), Some("jh_%00_x")] {
            for (method, path) in endpoints("greeter", &run) {
                let (status, body) = call(&server, token, method, &path).await;
                assert_eq!(status, 401, "{method} {path} with {token:?}: {body}");
                assert_eq!(body["error"]["code"], "unauthenticated");
            }
        }
        for open in ["/", "/healthz", "/readyz", "/metrics", "/.well-known/jwks.json"] {
            let (status, _) = server.get_as(None, open).await;
            assert_eq!(status, 200, "{open} is open");
        }
        // The token works until it is revoked, and then at once no more.
        assert_eq!(server.get_as(Some(&acme), "/jobs").await.0, 200);
        let listed: Value = serde_json::from_str(&cli_ok(&home, &["tokens", "list", "--json"])).unwrap();
        let row = listed.as_array().unwrap().iter().find(|t| t["id"] == id).expect("listed");
        assert_eq!(row["tenant"], "acme");
        assert!(!listed.to_string().contains(secret), "a listing never shows a secret");
        cli_ok(&home, &["tokens", "revoke", id]);
        assert_eq!(server.get_as(Some(&acme), "/jobs").await.0, 401);
        cli_refused(&home, &["tokens", "revoke", id]);
        // Only a hash of the secret is stored.
        let stored = home.scalar(&format!(
            "SELECT COUNT(*) FROM jobhost_tokens WHERE secret_hash = '{secret}' OR secret_hash LIKE '%{secret}%' \
             OR id LIKE '%{secret}%' OR label LIKE '%{secret}%'")).await;
        assert_eq!(stored, 0);
        assert_eq!(home.scalar(&format!("SELECT COUNT(*) FROM jobhost_tokens WHERE id = '{id}' AND length(secret_hash) = 64")).await, 1);
    }

    async fn a_tenant_token_sees_and_acts_on_its_own_tenant_only(home) {
        let m = two_tenants(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let own_run = kicked_run(&server, "greeter").await;
        let foreign_run = kicked_run(&server, "ledger").await;
        server.wait_runs("ledger", Duration::from_secs(20), |runs| runs.iter().any(|r| r["status"] == "failed")).await;
        let acme = home.create_token(Some("acme"));
        let acme = Some(acme.as_str());

        // Every endpoint with another tenant's job or run is a 404, as if it did not exist.
        for (method, path) in endpoints("ledger", &foreign_run) {
            if ["/jobs", "/runs", "/reports"].contains(&path.as_str()) {
                continue;
            }
            let (status, body) = call(&server, acme, method, &path).await;
            assert_eq!(status, 404, "{method} {path}: {body}");
        }
        let (_, foreign) = server.get_as(acme, "/jobs/ledger").await;
        let (_, missing) = server.get_as(acme, "/jobs/nope").await;
        assert_eq!(foreign["error"]["code"], missing["error"]["code"]);
        assert_eq!(server.get_as(acme, &format!("/runs/{foreign_run}")).await.1["error"]["code"], "unknown_run");
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'ledger'").await, 1, "nothing kicked or started");

        // Lists hold only its own.
        let (_, jobs) = server.get_as(acme, "/jobs").await;
        let names: Vec<&str> = jobs["jobs"].as_array().unwrap().iter().map(|j| j["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["greeter"]);
        assert!(jobs["jobs"][0].get("component").is_none(), "no host paths: {jobs}");
        let (_, runs) = server.get_as(acme, "/runs?limit=500").await;
        let runs = runs["runs"].as_array().unwrap().clone();
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0]["run_id"], own_run.as_str());
        assert!(runs[0].get("host").is_none());
        assert_eq!(server.get_as(acme, "/runs?job=ledger").await.1["runs"], Value::Array(vec![]));
        assert_eq!(server.get_as(acme, "/runs?status=failed").await.1["runs"], Value::Array(vec![]));
        assert_eq!(server.get_as(acme, "/runs?status=crashed").await.0, 400, "a tenant is told five statuses");
        let (_, reports) = server.get_as(acme, "/reports?limit=500").await;
        assert_eq!(reports["reports"], Value::Array(vec![]), "{reports}");
        let (_, reports) = server.get_as(acme, "/reports?job=ledger").await;
        assert_eq!(reports["reports"], Value::Array(vec![]));

        // Its own: shown without host details, and it may kick and start.
        let (status, detail) = server.get_as(acme, &format!("/runs/{own_run}")).await;
        assert_eq!(status, 200);
        assert_eq!(detail["status"], "succeeded");
        assert!(detail.get("host").is_none());
        assert!(detail["attempt_records"].as_array().unwrap().iter().all(|a| a.get("host").is_none()));
        assert_eq!(server.post_as(acme, "/jobs/greeter/kick", None).await.0, 202);
        let (status, started) = server.post_as(acme, "/jobs/greeter/runs", Some(r#"{"instance":"mine"}"#)).await;
        assert_eq!(status, 201, "{started}");

        // The operator sees both tenants.
        let (_, all) = server.get("/jobs").await;
        assert_eq!(all["jobs"].as_array().unwrap().len(), 2);
        let (_, reports) = server.get("/reports?job=ledger").await;
        assert!(!reports["reports"].as_array().unwrap().is_empty(), "{reports}");
        let (_, tenants) = server.get("/tenants").await;
        let names: Vec<&str> = tenants["tenants"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["acme", "globex"], "a job's tenant is registered with the job");
    }

    async fn a_disabled_tenant_takes_no_new_runs_and_its_tokens_stop_working(home) {
        let m = home.manifest("", r#"
            [jobs.greeter]
            component = "{guest:hello}"
            tenant = "acme"
            [jobs.ticker]
            component = "{guest:noop}"
            tenant = "acme"
            schedule = "* * * * * *"
        "#);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let acme = home.create_token(Some("acme"));
        assert_eq!(server.get_as(Some(&acme), "/jobs").await.0, 200);
        home.wait_for("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'ticker'", Duration::from_secs(10)).await;

        let (status, tenant) = server.post("/tenants/acme/disable").await;
        assert_eq!((status, &tenant["active"]), (200, &false.into()), "{tenant}");
        assert_eq!(server.get_as(Some(&acme), "/jobs").await.0, 401);
        let (status, refused) = server.post("/jobs/greeter/kick").await;
        assert_eq!((status, &refused["error"]["code"]), (409, &"tenant_disabled".into()), "{refused}");
        let (status, _) = server.post_as(Some(&server.token), "/jobs/greeter/runs", Some("{}")).await;
        assert_eq!(status, 409);
        assert!(cli_refused(&home, &["kick", "greeter"]).contains("disabled"));
        // Fires already queued may drain; after that the schedule queues no more.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let before = home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'ticker'").await;
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'ticker'").await, before, "no fires while disabled");
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'greeter'").await, 0);
        let listed: Value = serde_json::from_str(&cli_ok(&home, &["tenants", "list", "--json"])).unwrap();
        assert_eq!(listed[0]["active"], false, "{listed}");

        cli_ok(&home, &["tenants", "enable", "acme"]);
        assert_eq!(server.get_as(Some(&acme), "/jobs").await.0, 200);
        assert_eq!(server.post("/jobs/greeter/kick").await.0, 202);
        home.wait_for(&format!("SELECT COUNT(*) FROM (SELECT 1 FROM jobhost_runs WHERE job = 'ticker' LIMIT 1 OFFSET {before}) AS later"),
            Duration::from_secs(10)).await;
    }

    async fn the_registry_refuses_bad_input_and_changes_nothing(home) {
        let m = home.manifest("", "[jobs.greeter]\ncomponent = \"{guest:hello}\"\ntenant = \"acme\"\n");
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let (status, added) = server.post_as(Some(&server.token), "/tenants", Some(r#"{"name":"initech"}"#)).await;
        assert_eq!((status, &added["name"], &added["active"]), (201, &"initech".into(), &true.into()), "{added}");
        let (status, again) = server.post_as(Some(&server.token), "/tenants", Some(r#"{"name":"initech"}"#)).await;
        assert_eq!((status, &again["error"]["code"]), (409, &"tenant_exists".into()));
        for body in [r#"{"name":"Not Valid"}"#, r#"{"name":"a\u0000b"}"#, r#"{"name":"x","more":1}"#, "[]", "nope"] {
            let (status, refused) = server.post_as(Some(&server.token), "/tenants", Some(body)).await;
            assert_eq!((status, &refused["error"]["code"]), (400, &"invalid_parameter".into()), "{body}");
        }
        assert_eq!(server.post("/tenants/nope/disable").await.1["error"]["code"], "unknown_tenant");
        assert!(cli_refused(&home, &["tokens", "create", "--tenant", "nope"]).contains("unknown tenant"));
        cli_refused(&home, &["tokens", "create", "--tenant", "Bad/Name"]);
        cli_refused(&home, &["tokens", "create", "--label", "a\u{1b}[2Jb"]);
        cli_refused(&home, &["tenants", "add", "Bad Name"]);
        cli_refused(&home, &["tenants", "disable", "nope"]);
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_tenants").await, 2, "acme and initech");
        // The operator token of the test harness is the only one.
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_tokens").await, 1);
        // A manifest with a tenant name the rule refuses does not load.
        let bad = home.manifest("", "[jobs.x]\ncomponent = \"{guest:hello}\"\ntenant = \"../etc\"\n");
        assert!(cli_refused(&home, &["check", "--manifest", bad.to_str().unwrap()]).contains("invalid tenant name"));
    }
}
