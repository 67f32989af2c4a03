//! Tenants and the API's bearer tokens, end to end with the real binary: no token means
//! 401 except the open probes; a tenant's token sees and acts on its own jobs and runs
//! only, and anything of another tenant's answers 404; a disabled tenant takes no new runs.

use crate::common;

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
        ("GET", "/usage".into()),
    ]
}

async fn call(server: &Server, token: Option<&str>, method: &str, path: &str) -> (u16, Value) {
    match method {
        "GET" => server.get_as(token, path).await,
        _ => server.post_as(token, path, None).await,
    }
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
        let listed: Value = serde_json::from_str(&home.run_ok(&["tokens", "list", "--json"])).unwrap();
        let row = listed.as_array().unwrap().iter().find(|t| t["id"] == id).expect("listed");
        assert_eq!(row["tenant"], "acme");
        assert!(!listed.to_string().contains(secret), "a listing never shows a secret");
        home.run_ok(&["tokens", "revoke", id]);
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
            if ["/jobs", "/runs", "/reports", "/usage"].contains(&path.as_str()) {
                continue;
            }
            let (status, body) = call(&server, acme, method, &path).await;
            assert_eq!(status, 404, "{method} {path}: {body}");
        }
        let (_, foreign) = server.get_as(acme, "/jobs/ledger").await;
        let (_, missing) = server.get_as(acme, "/jobs/nope").await;
        assert_eq!(foreign["error"]["code"], missing["error"]["code"]);
        // Each names the jobs the tenant sees, never another tenant's.
        assert_eq!(foreign["error"]["message"], "no job named \"ledger\"; known jobs: greeter");
        assert_eq!(missing["error"]["message"], "no job named \"nope\"; known jobs: greeter");
        let (_, everyone) = server.get("/jobs/nope").await;
        assert_eq!(everyone["error"]["message"], "no job named \"nope\"; known jobs: greeter, ledger");
        assert_eq!(server.get_as(acme, &format!("/runs/{foreign_run}")).await.1["error"]["code"], "unknown_run");
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'ledger'").await, 1, "nothing kicked or started");

        // Lists hold only its own: the operator sees both tenants' usage, acme its own.
        let tenants_of = |usage: &Value| -> Vec<String> {
            usage["tenants"].as_array().unwrap().iter().map(|u| u["tenant"].as_str().unwrap().to_string()).collect()
        };
        let (_, all_usage) = server.get("/usage").await;
        assert!(tenants_of(&all_usage).len() >= 2, "{all_usage}");
        let (_, own_usage) = server.get_as(acme, "/usage").await;
        assert_eq!(tenants_of(&own_usage), ["acme"], "{own_usage}");
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

        // What each tenant used, and what it has waiting, is exported per tenant.
        let store = home.store().await;
        common::queue_run(&store, "not-served", "waiting", 0).await;
        store.close().await;
        let metrics = server.text("/metrics").await;
        for tenant in ["acme", "globex"] {
            assert!(metrics.contains(&format!("jobhost_tenant_fuel_used_total{{tenant=\"{tenant}\"}}")), "{metrics}");
            assert!(metrics.contains(&format!("jobhost_tenant_attempt_seconds_total{{tenant=\"{tenant}\"}}")), "{metrics}");
        }
        assert!(metrics.contains("jobhost_tenant_queue_due{tenant=\"default\"} 1"), "{metrics}");
        assert!(metrics.contains("jobhost_tenant_queue_lag_seconds{tenant=\"default\"}"), "{metrics}");
    }

    async fn metrics_name_jobs_and_tenants_only_to_a_token_that_may_see_them(home) {
        let m = two_tenants(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        kicked_run(&server, "greeter").await;
        kicked_run(&server, "ledger").await;
        let store = home.store().await;
        common::queue_run(&store, "not-served", "waiting", 0).await;
        store.close().await;
        let scrape = |token: Option<String>| {
            let server = &server;
            async move {
                let (status, text) = server.get_as(token.as_deref(), "/metrics").await;
                assert_eq!(status, 200, "{text}");
                text.as_str().expect("text").to_string()
            }
        };

        // Without a token: the same counts, summed, naming no job, run or tenant.
        let open = scrape(None).await;
        for name in ["greeter", "ledger", "acme", "globex", "not-served", "job=", "tenant="] {
            assert!(!open.contains(name), "the open endpoint names {name}:\n{open}");
        }
        for series in [
            r#"jobhost_attempts_total{status="succeeded",code=""} 1"#,
            r#"jobhost_kicks_total{result="queued"} 2"#,
            r#"jobhost_runs{status="succeeded",code=""} 1"#,
            "jobhost_fuel_used_total ",
            "jobhost_tenant_fuel_used_total ",
            "jobhost_queue_due 1",
        ] {
            assert!(open.contains(series), "missing {series} in\n{open}");
        }

        // The operator's token: every series, by job and tenant.
        let all = scrape(Some(server.token.clone())).await;
        for (job, tenant) in [("greeter", "acme"), ("ledger", "globex")] {
            for series in [
                format!(r#"jobhost_fuel_used_total{{job="{job}",tenant="{tenant}"}}"#),
                format!(r#"jobhost_kicks_total{{job="{job}",tenant="{tenant}",result="queued"}} 1"#),
                format!(r#"jobhost_runs_finished_total{{job="{job}",tenant="{tenant}","#),
                format!(r#"jobhost_tenant_fuel_used_total{{tenant="{tenant}"}}"#),
            ] {
                assert!(all.contains(&series), "missing {series} in\n{all}");
            }
        }
        assert!(all.contains(r#"jobhost_tenant_queue_due{tenant="default"} 1"#), "{all}");

        // A tenant's token: its own jobs' and tenant's series, and those naming no one.
        let own = scrape(Some(home.create_token(Some("acme")))).await;
        for series in [
            r#"jobhost_fuel_used_total{job="greeter",tenant="acme"}"#,
            r#"jobhost_tenant_fuel_used_total{tenant="acme"}"#,
            "jobhost_queue_due 1",
        ] {
            assert!(own.contains(series), "missing {series} in\n{own}");
        }
        for name in ["ledger", "globex", "not-served", r#"tenant="default""#] {
            assert!(!own.contains(name), "acme's scrape names {name}:\n{own}");
        }

        // A token presented must be valid, as on every route.
        let (status, refused) = server.get_as(Some("jh_nonsense"), "/metrics").await;
        assert_eq!((status, refused["error"]["code"].as_str()), (401, Some("unauthenticated")));
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
        let listed: Value = serde_json::from_str(&home.run_ok(&["tenants", "list", "--json"])).unwrap();
        assert_eq!(listed[0]["active"], false, "{listed}");

        home.run_ok(&["tenants", "enable", "acme"]);
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

    async fn a_per_tenant_schedule_fans_out_to_each_active_tenant_once_per_tick(home) {
        for tenant in ["acme", "globex", "initech", "umbrella"] {
            home.run_ok(&["tenants", "add", tenant]);
        }
        home.run_ok(&["tenants", "disable", "umbrella"]);
        let m = home.manifest("", r#"
            [jobs.nightly]
            component = "{guest:hello}"
            per_tenant = true
            schedule = "* * * * * *"
        "#);
        let mut servers = vec![home.serve(&["--manifest", m.to_str().unwrap()]).await];
        if home.backend == common::Backend::Postgres {
            // Two hosts race every tick.
            servers.push(home.serve(&["--manifest", m.to_str().unwrap()]).await);
        }
        home.wait_for("SELECT COUNT(*) FROM (SELECT 1 FROM jobhost_runs WHERE job = 'nightly' AND status = 'succeeded' \
            LIMIT 1 OFFSET 8) AS enough", Duration::from_secs(30)).await;
        for server in servers {
            server.signal("TERM");
            assert_eq!(server.wait_exit(Duration::from_secs(30)).await.0, Some(0));
        }
        let doubled = home.scalar("SELECT COUNT(*) FROM (SELECT scheduled_for, tenant FROM jobhost_runs \
            WHERE job = 'nightly' GROUP BY scheduled_for, tenant HAVING COUNT(*) > 1) AS d").await;
        assert_eq!(doubled, 0, "one child per tenant and tick");
        let partial = home.scalar("SELECT COUNT(*) FROM (SELECT scheduled_for FROM jobhost_runs \
            WHERE job = 'nightly' GROUP BY scheduled_for HAVING COUNT(*) <> 3) AS p").await;
        assert_eq!(partial, 0, "every tick reached the three active tenants");
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE tenant = 'umbrella' OR tenant = 'default'").await, 0);
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE instance <> tenant").await, 0);
        let store = home.store().await;
        let runs = store.list_runs(&jobhost::store::RunFilter {
            tenant: Some("globex".into()), statuses: vec![jobhost::store::RunStatus::Succeeded], limit: 1,
            ..Default::default() }).await.unwrap();
        let attempts = store.list_attempts(&runs[0].id, 100).await.unwrap();
        assert!(attempts[0].log.contains("tenant globex"), "the child runs as its tenant: {}", attempts[0].log);

        // A fan-out retried for the same tick inserts nothing new: the ids are the tick's.
        let job = store.get_job("nightly").await.unwrap().unwrap();
        let template = jobhost::store::NewRun {
            id: String::new(), job: "nightly".into(), instance: "default".into(), tenant: "default".into(),
            origin: jobhost::store::Origin::Cron, payload: "{}".into(), cursor: None,
            component_digest: None, scheduled_for: Some(42), rerun_of: None, delay_ms: 0, trace_parent: None,
        };
        let tenants = store.active_tenants().await.unwrap();
        let children = jobhost::queue::fan_out::children(&template, &jobhost::queue::fan_out::tick_occasion(42), &tenants);
        assert!(store.fire_schedule("nightly", job.next_fire_at, Some(1), &children).await.unwrap());
        assert!(store.fire_schedule("nightly", Some(1), Some(2), &children).await.unwrap());
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE scheduled_for = 42").await, 3);
        store.close().await;
    }

    async fn a_per_tenant_kick_reaches_each_active_tenant_and_a_tenant_kicks_its_own_child(home) {
        for tenant in ["acme", "globex"] {
            home.run_ok(&["tenants", "add", tenant]);
        }
        let m = home.manifest("", "[jobs.fan]\ncomponent = \"{guest:hello}\"\nper_tenant = true\n");
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let (status, kicked) = server.post("/jobs/fan/kick").await;
        assert_eq!((status, &kicked["result"]), (202, &"fanned_out".into()), "{kicked}");
        let children = kicked["children"].as_array().unwrap();
        let tenants: Vec<&str> = children.iter().map(|c| c["tenant"].as_str().unwrap()).collect();
        assert_eq!(tenants, ["acme", "globex"]);
        assert!(children.iter().all(|c| c["result"] == "queued"), "{kicked}");
        server.wait_runs("fan", Duration::from_secs(20), |runs| runs.len() == 2 && runs.iter().all(|r| r["status"] == "succeeded")).await;

        // A tenant sees the job and kicks and starts only its own child.
        let acme = home.create_token(Some("acme"));
        let acme = Some(acme.as_str());
        let (_, job) = server.get_as(acme, "/jobs/fan").await;
        assert_eq!(job["per_tenant"], true, "{job}");
        // When any tenant's child last succeeded is the operator's to know, not a tenant's.
        assert!(job.get("last_success_at").is_none() && job.get("lease").is_none(), "{job}");
        assert!(server.get("/jobs/fan").await.1["last_success_at"].is_string());
        let (_, listed) = server.get_as(acme, "/jobs").await;
        let fan = listed["jobs"].as_array().unwrap().iter().find(|j| j["name"] == "fan").unwrap();
        assert!(fan.get("last_success_at").is_none(), "{fan}");
        let (status, own) = server.post_as(acme, "/jobs/fan/kick", None).await;
        assert_eq!((status, &own["result"]), (202, &"queued".into()), "{own}");
        let (status, _) = server.post_as(acme, "/jobs/fan/kick?instance=globex", None).await;
        assert_eq!(status, 400);
        let (status, started) = server.post_as(acme, "/jobs/fan/runs", Some("{}")).await;
        assert!(status == 200 || status == 201, "{started}");
        server.wait_runs("fan", Duration::from_secs(20), |runs| runs.iter().all(|r| r["status"] == "succeeded") && runs.len() >= 3).await;
        let (_, runs) = server.get_as(acme, "/runs?job=fan").await;
        assert!(runs["runs"].as_array().unwrap().iter().all(|r| r["tenant"] == "acme"), "{runs}");
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE tenant = 'globex'").await, 1);

        // The operator kicks one tenant's child by naming it; a tenant that is not
        // registered, or is disabled, is refused.
        let (status, one) = server.post("/jobs/fan/kick?instance=globex").await;
        assert_eq!((status, &one["result"]), (202, &"queued".into()), "{one}");
        assert_eq!(server.post("/jobs/fan/kick?instance=nobody").await.1["error"]["code"], "unknown_tenant");
        assert_eq!(server.post_as(Some(&server.token), "/jobs/fan/runs", Some("{}")).await.1["error"]["code"], "unknown_tenant");
        home.run_ok(&["tenants", "disable", "globex"]);
        assert_eq!(server.post("/jobs/fan/kick?instance=globex").await.0, 409);
        let (_, kicked) = server.post("/jobs/fan/kick").await;
        assert_eq!(kicked["children"].as_array().unwrap().len(), 1, "only acme is active: {kicked}");
        assert!(cli_refused(&home, &["tenants", "add", "default"]).contains("operator"));
        let bad = home.manifest("", "[jobs.x]\ncomponent = \"{guest:hello}\"\nper_tenant = true\ntenant = \"acme\"\n");
        assert!(cli_refused(&home, &["check", "--manifest", bad.to_str().unwrap()]).contains("per_tenant"));
    }
}

/// On Postgres a run's transactions carry its tenant as `jobhost.tenant`, so the
/// operator's row-level security policies limit a per-tenant job's grant to the rows of
/// the tenant it runs for. (SQLite has no row-level security: see docs/security.md.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_child_reads_and_writes_only_its_tenants_rows() {
    let home = Home::new(common::Backend::Postgres).await;
    home.exec("CREATE TABLE tenant_notes (tenant TEXT NOT NULL, body TEXT NOT NULL)")
        .await;
    home.exec(
        "INSERT INTO tenant_notes VALUES ('acme', 'a1'), ('acme', 'a2'), \
         ('globex', 'g1'), ('globex', 'g2'), ('globex', 'g3')",
    )
    .await;
    home.exec("ALTER TABLE tenant_notes ENABLE ROW LEVEL SECURITY")
        .await;
    home.exec(
        "CREATE POLICY own_rows ON tenant_notes \
         USING (tenant = current_setting('jobhost.tenant', true)) \
         WITH CHECK (tenant = current_setting('jobhost.tenant', true))",
    )
    .await;
    for tenant in ["acme", "globex"] {
        home.run_ok(&["tenants", "add", tenant]);
    }
    let m = home.manifest(
        "",
        r#"
        [jobs.notes]
        component = "{guest:probe}"
        per_tenant = true
        grants.db = { write = ["tenant_notes"] }
        payload = { read = ["SELECT body FROM tenant_notes"] }
    "#,
    );
    let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
    assert_eq!(server.post("/jobs/notes/kick").await.0, 202);
    let runs = server
        .wait_runs("notes", Duration::from_secs(20), |runs| {
            runs.len() == 2 && runs.iter().all(|r| r["finished_at"].is_string())
        })
        .await;
    for (tenant, rows) in [("acme", 2), ("globex", 3)] {
        let run = runs
            .iter()
            .find(|r| r["tenant"] == tenant)
            .expect("a child");
        let (_, detail) = server
            .get(&format!("/runs/{}", run["run_id"].as_str().unwrap()))
            .await;
        assert_eq!(detail["status"], "succeeded", "{detail}");
        let log = detail["attempt_records"][0]["log"].as_str().unwrap();
        assert!(
            log.contains(&format!("read ok: {rows} rows")),
            "{tenant}: {log}"
        );
    }
    // acme's child may write acme's rows, never globex's.
    let server = &server;
    let start = |payload: &str| {
        let body = format!(r#"{{"instance":"acme","payload":{payload}}}"#);
        async move {
            let (status, started) = server
                .post_as(Some(&server.token), "/jobs/notes/runs", Some(&body))
                .await;
            assert_eq!(status, 201, "{started}");
            let id = started["run_id"].as_str().unwrap().to_string();
            let runs = server
                .wait_runs("notes", Duration::from_secs(20), |runs| {
                    runs.iter()
                        .any(|r| r["run_id"] == id.as_str() && r["finished_at"].is_string())
                })
                .await;
            runs.into_iter()
                .find(|r| r["run_id"] == id.as_str())
                .unwrap()
        }
    };
    let forged =
        start(r#"{"write":["INSERT INTO tenant_notes VALUES ('globex', 'forged')"]}"#).await;
    assert_eq!(forged["status"], "failed", "{forged}");
    assert_eq!(forged["code"], "query_refused", "{forged}");
    // Nor can it claim to be another tenant: the setting is the host's.
    for hostile in [
        r#"{"write":["SET LOCAL jobhost.tenant = 'globex'", "INSERT INTO tenant_notes VALUES ('globex', 'forged')"]}"#,
        r#"{"write":["SELECT set_config('jobhost.tenant', 'globex', true)", "INSERT INTO tenant_notes VALUES ('globex', 'forged')"]}"#,
        r#"{"write":["RESET jobhost.tenant", "INSERT INTO tenant_notes VALUES ('globex', 'forged')"]}"#,
        r#"{"read":["SELECT body FROM tenant_notes WHERE tenant = 'globex' OR current_setting('jobhost.tenant', true) IS NOT NULL"]}"#,
    ] {
        let refused = start(hostile).await;
        let detail = server
            .get(&format!("/runs/{}", refused["run_id"].as_str().unwrap()))
            .await
            .1;
        let log = detail["attempt_records"][0]["log"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            refused["code"] == "query_refused" || log.contains("read ok: 2 rows"),
            "{hostile}: {refused} {log}"
        );
    }
    let own = start(r#"{"write":["INSERT INTO tenant_notes VALUES ('acme', 'mine')"]}"#).await;
    assert_eq!(own["status"], "succeeded", "{own}");
    assert_eq!(
        home.scalar("SELECT COUNT(*) FROM tenant_notes WHERE body = 'forged'")
            .await,
        0
    );
    assert_eq!(
        home.scalar("SELECT COUNT(*) FROM tenant_notes WHERE tenant = 'acme'")
            .await,
        3
    );
}
