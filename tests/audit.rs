//! Read-only and expiring tokens, and the audit log, end to end with the real binary.
//!
//! The test that cannot be forgotten: it takes the API's routes from the router itself
//! (`jobhost::service::http::api_routes`) and the CLI's commands from its argument
//! definitions (`jobhost::cli::Cli`), performs every change, and finds one audit row for
//! each; a read-only token is refused each change (403, itself audited). A route or
//! command this file does not know fails it until it is added here, with its audit.

use crate::common;

use clap::CommandFactory;
use common::{Home, Server};
use serde_json::Value;

/// Jobs of the operator's and of tenant `acme`'s.
fn manifest(home: &Home) -> std::path::PathBuf {
    home.manifest(
        "",
        r#"
        [jobs.hello]
        component = "{guest:hello}"
        [jobs.greeter]
        component = "{guest:hello}"
        tenant = "acme"
    "#,
    )
}

/// The newest audit rows (at most 500), as the operator reads them.
async fn audit_rows(server: &Server) -> Vec<Value> {
    let (status, body) = server.get("/audit?limit=500").await;
    assert_eq!(status, 200, "{body}");
    body["audit"].as_array().cloned().expect("rows")
}

/// A run of `hello` in `status` that no retry took yet: what a cancel or a retry acts on.
async fn a_run(server: &Server, status: &str) -> String {
    let (_, body) = server
        .get(&format!("/runs?job=hello&status={status}&limit=500"))
        .await;
    body["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["retried_by"].is_null())
        .and_then(|r| r["run_id"].as_str())
        .unwrap_or_else(|| panic!("no {status} run of hello: {body}"))
        .to_string()
}

/// The concrete path and body that perform the change registered as `method path`.
/// A delivery given up, for a retry to send again: written as the delivery worker leaves
/// one whose receiver never answered within its window.
async fn a_failed_delivery(home: &Home) -> i64 {
    home.scalar(
        "INSERT INTO jobhost_deliveries (run_id, job, tenant, webhook, ending, state, attempts, \
         next_try_at, retry_from, created_at, updated_at) \
         VALUES ('gone', 'hello', 'default', 'ops', 'failed', 'failed', 9, 0, 0, 0, 0) RETURNING id",
    )
    .await
}

async fn perform(
    home: &Home,
    server: &Server,
    method: &str,
    path: &str,
) -> (String, Option<String>) {
    let made = |p: &str, body: Option<&str>| (p.to_string(), body.map(str::to_string));
    match (method, path) {
        ("POST", "/jobs/{name}/kick") => made("/jobs/hello/kick", None),
        ("POST", "/jobs/{name}/runs") => {
            made("/jobs/hello/runs", Some(r#"{"payload": {"name": "a"}}"#))
        }
        ("POST", "/jobs/{name}/runs:batch") => {
            made("/jobs/hello/runs:batch", Some(r#"{"runs": [{}, {}]}"#))
        }
        ("POST", "/runs/cancel") => made(
            "/runs/cancel",
            Some(r#"{"filter": {"job": "hello", "status": "queued"}, "confirm": true}"#),
        ),
        ("POST", "/runs/retry") => made(
            "/runs/retry",
            Some(r#"{"filter": {"job": "hello", "status": "cancelled"}, "confirm": true}"#),
        ),
        ("POST", "/runs/purge") => made(
            "/runs/purge",
            Some(r#"{"filter": {"job": "hello", "status": "succeeded"}, "confirm": true}"#),
        ),
        ("POST", "/runs/{id}/cancel") => {
            server.post("/jobs/hello/kick").await;
            made(
                &format!("/runs/{}/cancel", a_run(server, "queued").await),
                None,
            )
        }
        ("POST", "/runs/{id}/signals/{name}") => {
            server.post("/jobs/hello/kick").await;
            made(
                &format!("/runs/{}/signals/go", a_run(server, "queued").await),
                Some(r#"{"payload": {"ok": true}}"#),
            )
        }
        ("POST", "/runs/{id}/retry") => made(
            &format!("/runs/{}/retry", a_run(server, "cancelled").await),
            None,
        ),
        ("POST", "/pauses/{scope}/{name}") | ("DELETE", "/pauses/{scope}/{name}") => {
            made("/pauses/lane/spare", None)
        }
        ("POST", "/deliveries/{id}/retry") => made(
            &format!("/deliveries/{}/retry", a_failed_delivery(home).await),
            None,
        ),
        ("POST", "/events/{name}") => made("/events/order.paid", Some(r#"{"key": "k1"}"#)),
        ("POST", "/tenants") => made("/tenants", Some(r#"{"name": "initech"}"#)),
        ("POST", "/tenants/{name}/disable") => made("/tenants/acme/disable", None),
        ("POST", "/tenants/{name}/enable") => made("/tenants/acme/enable", None),
        ("POST", "/tokens") => made(
            "/tokens",
            Some(r#"{"label": "made by the API", "expires": "1h"}"#),
        ),
        ("DELETE", "/tokens/{id}") => {
            let made_now = home.run_ok(&["tokens", "create", "--json", "--label", "to revoke"]);
            let id = serde_json::from_str::<Value>(&made_now).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string();
            made(&format!("/tokens/{id}"), None)
        }
        _ => panic!(
            "{method} {path} changes something and this test does not know it: add how to \
             perform it here, so its audit row and its refusal to a read-only token are checked"
        ),
    }
}

/// A path of a read route with its parameters filled in.
fn concrete(path: &str) -> String {
    path.replace("{name}", "hello")
        .replace("{id}", "0195e0b4-0000-7000-8000-000000000000")
        .replace("{seq}", "1")
}

on_every_backend! {
    async fn every_change_through_the_api_is_audited_and_refused_to_a_read_only_token(home) {
        let m = manifest(&home);
        // `hello` stays paused, so the runs this test starts wait to be acted on.
        home.run_ok(&["pause", "job", "hello"]);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let read_only = {
            let out = home.run_ok(&["tokens", "create", "--read-only", "--label", "on-call", "--json"]);
            let made: Value = serde_json::from_str(&out).unwrap();
            assert_eq!(made["kind"], "read_only");
            made["token"].as_str().unwrap().to_string()
        };
        let (status, me) = server.get_as(Some(&read_only), "/whoami").await;
        assert_eq!((status, me["kind"].as_str()), (200, Some("read_only")), "{me}");

        let routes = jobhost::service::http::api_routes();
        let changes: Vec<_> = routes.iter().filter(|r| r.action.is_some()).collect();
        assert!(changes.len() >= 15, "{routes:?}");
        for route in &changes {
            let action = route.action.unwrap();
            let (path, body) = perform(&home, &server, route.method, route.path).await;
            let before = audit_rows(&server).await.len();
            let (status, refused) = server
                .request_as(route.method, Some(&read_only), &path, body.as_deref())
                .await;
            assert_eq!(
                (status, refused["error"]["code"].as_str()),
                (403, Some("read_only")),
                "{} {path} as a read-only token: {refused}", route.method
            );
            let rows = audit_rows(&server).await;
            assert_eq!(rows.len(), before + 1, "{} {path}: one row for the refusal", route.method);
            assert_eq!((rows[0]["action"].as_str(), rows[0]["result"].as_str()), (Some(action), Some("read_only")));
            assert_eq!(rows[0]["label"], "on-call");

            let (status, answer) = server
                .request_as(route.method, Some(&server.token), &path, body.as_deref())
                .await;
            assert!((200..300).contains(&status), "{} {path}: {status} {answer}", route.method);
            let rows = audit_rows(&server).await;
            assert_eq!(rows.len(), before + 2, "{} {path}: one row for the change", route.method);
            let row = &rows[0];
            assert_eq!((row["action"].as_str(), row["result"].as_str()), (Some(action), Some("ok")), "{row}");
            assert_eq!(row["actor"], "token");
            assert!(row["token_id"].is_string() && !row["object"].as_str().unwrap().is_empty(), "{row}");
        }

        // What only reads answers no other method: a change cannot hide behind a read.
        for route in routes.iter().filter(|r| r.action.is_none()) {
            for method in ["POST", "PUT", "PATCH", "DELETE"] {
                if routes.iter().any(|r| r.path == route.path && r.method == method) {
                    continue;
                }
                let (status, _) = server
                    .request_as(method, Some(&server.token), &concrete(route.path), None)
                    .await;
                assert_eq!(status, 405, "{method} {}", route.path);
            }
        }

        // A refused change is audited with its fixed code; a preview writes nothing.
        let before = audit_rows(&server).await.len();
        let (status, _) = server.post("/tenants/nobody/disable").await;
        assert_eq!(status, 404);
        let (status, _) = server
            .request_as("POST", Some(&server.token), "/runs/cancel", Some(r#"{"filter": {"job": "hello"}}"#))
            .await;
        assert_eq!(status, 200);
        let rows = audit_rows(&server).await;
        assert_eq!(rows.len(), before + 1);
        assert_eq!((rows[0]["action"].as_str(), rows[0]["result"].as_str(), rows[0]["object"].as_str()),
            (Some("tenant.disable"), Some("unknown_tenant"), Some("tenant nobody")));

        // A read-only token sees what an operator sees.
        for path in ["/runs", "/jobs", "/tenants", "/tokens", "/pauses", "/audit", "/reports"] {
            let (status, body) = server.get_as(Some(&read_only), path).await;
            assert_eq!(status, 200, "{path}: {body}");
        }
    }

    async fn every_change_through_the_cli_is_audited(home) {
        let m = manifest(&home);
        home.run_ok(&["pause", "job", "hello"]);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let user = std::env::var("USER").or_else(|_| std::env::var("LOGNAME")).unwrap_or_else(|_| "unknown".into());

        // Every command, as the CLI defines them.
        let mut leaves = Vec::new();
        let mut stack: Vec<(Vec<String>, clap::Command)> = jobhost::cli::Cli::command()
            .get_subcommands()
            .map(|c| (vec![c.get_name().to_string()], c.clone()))
            .collect();
        while let Some((path, command)) = stack.pop() {
            if command.has_subcommands() {
                for sub in command.get_subcommands() {
                    let mut deeper = path.clone();
                    deeper.push(sub.get_name().to_string());
                    stack.push((deeper, sub.clone()));
                }
            } else {
                leaves.push(path.join(" "));
            }
        }
        leaves.sort();
        const READS: &[&str] = &[
            "apps list", "audit", "audit-write", "build", "check", "codes", "compile-component", "deliveries show", "drive", "files get", "files ls", "hosts", "inspect", "jobs",
            "migrate", "new", "pauses", "replay", "run", "runs export", "runs list", "runs search", "runs show",
            "runs tail", "runs wait", "sdk", "serve", "tenants list", "test", "tokens list", "wit",
        ];
        leaves.retain(|leaf| leaf != "help" && !leaf.ends_with(" help"));
        let mut app_roles = Vec::new();
        for leaf in &leaves {
            if READS.contains(&leaf.as_str()) {
                continue;
            }
            let before = audit_rows(&server).await.len();
            let (action, args): (&str, Vec<String>) = match leaf.as_str() {
                "kick" => ("run.kick", vec!["kick".into(), "hello".into()]),
                "start" => ("run.start", vec!["start".into(), "hello".into(), "--payload".into(), r#"{"name": "b"}"#.into()]),
                "emit" => ("event.emit", vec!["emit".into(), "order.paid".into(), "--key".into(), "k2".into()]),
                "runs cancel" => ("run.cancel", vec!["runs".into(), "cancel".into(), a_run(&server, "queued").await]),
                "runs retry" => ("run.retry", vec!["runs".into(), "retry".into(), a_run(&server, "cancelled").await]),
                "runs purge" => ("runs.purge", vec!["runs".into(), "purge".into(), "--job".into(), "hello".into(), "--status".into(), "succeeded".into(), "--yes".into()]),
                "runs signal" => {
                    server.post("/jobs/hello/kick").await;
                    ("run.signal", vec!["runs".into(), "signal".into(), a_run(&server, "queued").await, "go".into()])
                }
                "pause job" | "resume job" => (leaf.split(' ').next().unwrap(), leaf.split(' ').chain(["ghost"]).map(String::from).collect()),
                "pause tenant" | "resume tenant" => (leaf.split(' ').next().unwrap(), leaf.split(' ').chain(["acme"]).map(String::from).collect()),
                "pause lane" | "resume lane" => (leaf.split(' ').next().unwrap(), leaf.split(' ').chain(["spare"]).map(String::from).collect()),
                "tenants add" => ("tenant.add", vec!["tenants".into(), "add".into(), "initech".into()]),
                "tenants disable" => ("tenant.disable", vec!["tenants".into(), "disable".into(), "acme".into()]),
                "tenants enable" => ("tenant.enable", vec!["tenants".into(), "enable".into(), "acme".into()]),
                "tokens create" => ("token.create", vec!["tokens".into(), "create".into(), "--label".into(), "made by the CLI".into()]),
                "deliveries retry" => (
                    "delivery.retry",
                    vec!["deliveries".into(), "retry".into(), a_failed_delivery(&home).await.to_string()],
                ),
                "files put" => {
                    let file = home.path().join("put.txt");
                    std::fs::write(&file, "put by the CLI").unwrap();
                    ("file.put", vec!["files".into(), "put".into(), "docs".into(), "put.txt".into(), file.display().to_string()])
                }
                "apps grant" | "apps revoke" => {
                    let verb = leaf.split(' ').nth(1).unwrap();
                    let action = if verb == "grant" { "app.grant" } else { "app.revoke" };
                    if home.backend == common::Backend::Sqlite {
                        // SQLite has no roles: refused, and audited as refused.
                        let (code, _, stderr) = home.run_text(&["apps", verb, "app_reader"]);
                        assert_eq!(code, 2, "host {leaf}: {stderr}");
                        assert!(stderr.contains("SQLite has no roles"), "{stderr}");
                        let rows = audit_rows(&server).await;
                        assert_eq!(rows.len(), before + 1, "host {leaf}: one audit row");
                        assert_eq!((rows[0]["action"].as_str(), rows[0]["result"].as_str()),
                            (Some(action), Some("refused")), "host {leaf}: {}", rows[0]);
                        continue;
                    }
                    app_roles.push(common::PgRole::create(&home.db_url).await);
                    let role = app_roles.last().unwrap().name.clone();
                    (action, vec!["apps".into(), verb.into(), role])
                }
                "tokens revoke" => {
                    let out = home.run_ok(&["tokens", "create", "--json"]);
                    let id = serde_json::from_str::<Value>(&out).unwrap()["id"].as_str().unwrap().to_string();
                    ("token.revoke", vec!["tokens".into(), "revoke".into(), id])
                }
                other => panic!(
                    "`host {other}` is a command this test does not know: if it changes \
                     something, add how to perform it here (its audit row is checked); if it \
                     only reads, add it to READS"
                ),
            };
            // Each made one row of its own first: the token to revoke, the run to signal.
            let before = if leaf == "tokens revoke" || leaf == "runs signal" { before + 1 } else { before };
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            home.run_ok(&args);
            let rows = audit_rows(&server).await;
            assert_eq!(rows.len(), before + 1, "host {leaf}: one audit row");
            let row = &rows[0];
            assert_eq!((row["action"].as_str(), row["result"].as_str(), row["actor"].as_str()),
                (Some(action), Some("ok"), Some("cli")), "host {leaf}: {row}");
            assert_eq!(row["label"], user.as_str());
        }
        assert!(leaves.iter().filter(|l| !READS.contains(&l.as_str())).count() >= 20, "{leaves:?}");

        // A refused command is audited as refused; a preview by filter writes nothing.
        let before = audit_rows(&server).await.len();
        let (code, _, _) = home.run_text(&["tenants", "disable", "nobody"]);
        assert_eq!(code, 2);
        home.run_ok(&["runs", "cancel", "--job", "hello"]);
        let rows = audit_rows(&server).await;
        assert_eq!(rows.len(), before + 1);
        assert_eq!((rows[0]["action"].as_str(), rows[0]["result"].as_str()), (Some("tenant.disable"), Some("refused")));

        // `host audit`, filtered, and its refusal of an action no change has.
        let listed = home.run_ok(&["audit", "--action", "tenant.disable", "--json"]);
        let listed: Vec<Value> = serde_json::from_str(&listed).unwrap();
        assert_eq!(listed.len(), 2, "{listed:?}");
        assert!(listed.iter().all(|r| r["action"] == "tenant.disable"));
        let text = home.run_ok(&["audit", "--since", "1h"]);
        assert!(text.contains("token.create") && text.contains(&format!("cli {user}")), "{text}");
        let (code, _, stderr) = home.run_text(&["audit", "--action", "run.delete"]);
        assert_eq!(code, 2);
        assert!(stderr.contains("unknown action \"run.delete\"") && stderr.contains("run.cancel"), "{stderr}");
    }

    async fn a_run_records_who_started_kicked_cancelled_and_retried_it(home) {
        let m = manifest(&home);
        home.run_ok(&["pause", "job", "hello"]);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let out = home.run_ok(&["tokens", "create", "--label", "deploy bot", "--json"]);
        let bot: Value = serde_json::from_str(&out).unwrap();
        let (status, kicked) = server
            .post_as(bot["token"].as_str(), "/jobs/hello/kick", None)
            .await;
        assert_eq!(status, 202, "{kicked}");
        let run = kicked["run_id"].as_str().unwrap().to_string();
        home.run_ok(&["runs", "cancel", &run]);
        let (status, _) = server.post(&format!("/runs/{run}/retry")).await;
        assert_eq!(status, 201);

        let (_, detail) = server.get(&format!("/runs/{run}")).await;
        let actions: Vec<(String, String)> = detail["actions"]
            .as_array()
            .expect("actions")
            .iter()
            .map(|a| (a["action"].as_str().unwrap().to_string(), a["who"].as_str().unwrap().to_string()))
            .collect();
        let bot_id = bot["id"].as_str().unwrap();
        assert_eq!(actions.len(), 3, "{actions:?}");
        assert_eq!(actions[2], ("run.kick".to_string(), format!("token {bot_id} (deploy bot)")));
        assert_eq!(actions[1].0, "run.cancel");
        assert!(actions[1].1.starts_with("cli "), "{actions:?}");
        assert_eq!(actions[0].0, "run.retry");

        let shown = home.run_ok(&["runs", "show", &run]);
        assert!(shown.contains(&format!("run.kick by token {bot_id} (deploy bot): ok")), "{shown}");
        assert!(shown.contains("run.cancel by cli "), "{shown}");

        // A tenant sees its own tokens' changes only, and an operator's as "operator".
        let acme = home.create_token(Some("acme"));
        let (status, _) = server.post_as(Some(&acme), "/jobs/greeter/kick", None).await;
        assert_eq!(status, 202);
        let (status, own) = server.get_as(Some(&acme), "/audit").await;
        assert_eq!(status, 200);
        let own = own["audit"].as_array().unwrap();
        assert_eq!(own.len(), 1, "{own:?}");
        assert_eq!((own[0]["action"].as_str(), own[0]["tenant"].as_str()), (Some("run.kick"), Some("acme")));
        let (status, _) = server.get_as(Some(&acme), "/tokens").await;
        assert_eq!(status, 404, "tokens are the operator's");
    }

    async fn an_expired_token_is_refused_and_listed_expired(home) {
        let m = manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let out = home.run_ok(&["tokens", "create", "--expires", "30d", "--label", "contractor", "--json"]);
        let made: Value = serde_json::from_str(&out).unwrap();
        let (token, id) = (made["token"].as_str().unwrap(), made["id"].as_str().unwrap());
        assert_eq!(server.get_as(Some(token), "/jobs").await.0, 200);
        let listed = home.run_ok(&["tokens", "list"]);
        assert!(listed.lines().any(|l| l.starts_with(id) && l.contains("live, expires")), "{listed}");

        // Thirty days later, as the database's clock sees it.
        home.exec(&format!("UPDATE jobhost_tokens SET expires_at = created_at - 1 WHERE id = '{id}'")).await;
        let (status, refused) = server.get_as(Some(token), "/jobs").await;
        assert_eq!((status, refused["error"]["code"].as_str()), (401, Some("token_expired")), "{refused}");
        let listed = home.run_ok(&["tokens", "list"]);
        assert!(listed.lines().any(|l| l.starts_with(id) && l.contains("expired")), "{listed}");
        let json: Vec<Value> = serde_json::from_str(&home.run_ok(&["tokens", "list", "--json"])).unwrap();
        let row = json.iter().find(|t| t["id"] == id).unwrap();
        assert_eq!((row["expired"].as_bool(), row["kind"].as_str()), (Some(true), Some("operator")));

        // Bad input: a fixed message naming the units, and no token written.
        let count = json.len();
        for bad in ["30", "30s", "0d", "forever", "3651d", "1\u{1b}[2Jd"] {
            let (code, _, stderr) = home.run_text(&["tokens", "create", "--expires", bad]);
            assert_eq!(code, 2, "{bad:?}");
            assert!(stderr.contains("m (minutes), h (hours) or d (days)"), "{bad:?}: {stderr}");
            assert!(!stderr.contains('\u{1b}'), "{stderr}");
        }
        let (code, _, stderr) = home.run_text(&["tokens", "create", "--read-only", "--tenant", "acme"]);
        assert_eq!(code, 2, "{stderr}");
        let (code, _, stderr) = home.run_text(&["tokens", "create", "--label", &"x".repeat(201)]);
        assert_eq!(code, 2, "{stderr}");
        let (status, refused) = server
            .request_as("POST", Some(&server.token), "/tokens", Some(r#"{"expires": "2 weeks"}"#))
            .await;
        assert_eq!((status, refused["error"]["code"].as_str()), (400, Some("invalid_parameter")));
        let after: Vec<Value> = serde_json::from_str(&home.run_ok(&["tokens", "list", "--json"])).unwrap();
        assert_eq!(after.len(), count, "nothing half-written");
    }
}
