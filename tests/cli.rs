//! The operator's command line with the real binary, on both backends: each command's help
//! shows its own options and the global ones are shown once (and taken before or after the
//! command); `host runs purge` previews then deletes, audited as the CLI's; `host hosts`
//! reads the fleet's heartbeats; `host runs search` finds runs by payload — each the same
//! reading as its API route.

use crate::common;

use common::{Home, Server};
use serde_json::Value;
use std::time::{Duration, Instant};

/// Starts a run of `job` for later (so it stays queued with its payload), as its own
/// instance; its id.
async fn later(server: &Server, job: &str, instance: &str, payload: &str) -> String {
    let body = format!(r#"{{"instance": "{instance}", "payload": {payload}, "delay": "1h"}}"#);
    let (status, run) = server
        .post_as(
            Some(&server.token),
            &format!("/jobs/{job}/runs"),
            Some(&body),
        )
        .await;
    assert_eq!(status, 201, "{run}");
    run["run_id"].as_str().expect("a run id").to_string()
}

/// What `--db`'s help says of it.
const DB_HELP: &str = "Database URL: sqlite://PATH";

on_every_backend! {
    async fn a_commands_help_shows_its_own_options_and_the_global_ones_work_on_either_side(home) {
        let top = home.run_ok(&["--help"]);
        for global in ["--db", "--home", "--cache", "--log-format", "--compile-memory", "--compile-timeout", "--compile-threads"] {
            assert!(top.contains(&format!("{global} <")), "{global} is not in host --help: {top}");
        }
        assert!(top.contains(DB_HELP), "{top}");
        for command in [&["runs", "list"][..], &["runs"], &["pause", "job"], &["serve"], &["hosts"]] {
            let mut args = command.to_vec();
            args.push("--help");
            let help = home.run_ok(&args);
            assert!(!help.contains(DB_HELP) && !help.contains("--compile-memory <"), "host {command:?} --help repeats the global options: {help}");
            assert!(help.contains("see `host --help`"), "{help}");
        }
        let list = home.run_ok(&["runs", "list", "--help"]);
        assert!(list.contains("--instance <INSTANCE>") && list.contains("--limit <LIMIT>"), "{list}");

        // `--db` before and after the command, at any depth: another database (where no
        // tenant is) is read instead of the one the environment names.
        home.run_ok(&["tenants", "add", "acme"]);
        assert!(home.run_ok(&["tenants", "list"]).contains("acme"));
        let other = format!("sqlite://{}", home.path().join("other.db").display());
        assert!(!home.run_ok(&["--db", &other, "tenants", "list"]).contains("acme"));
        assert!(!home.run_ok(&["tenants", "list", "--db", &other]).contains("acme"));
        assert!(!home.run_ok(&["tenants", "--db", &other, "list"]).contains("acme"));
        // A value the option refuses is refused in either place.
        for args in [&["--compile-timeout", "soon", "codes"][..], &["codes", "--compile-timeout", "soon"]] {
            let (code, _, stderr) = home.run_text(args);
            assert_eq!(code, 2, "{args:?}: {stderr}");
            assert!(stderr.contains("--compile-timeout"), "{stderr}");
        }
    }

    async fn runs_purge_counts_then_deletes_the_ended_runs_a_filter_matches_audited_as_the_cli(home) {
        let m = home.manifest("", r#"
            [jobs.hello]
            component = "{guest:hello}"
            payload = { name = "p" }
            [jobs.other]
            component = "{guest:hello}"
            payload = { name = "q" }
        "#);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        for (job, instance) in [("hello", "a"), ("hello", "b"), ("hello", "c"), ("other", "a")] {
            let body = format!(r#"{{"instance": "{instance}"}}"#);
            let (status, run) = server.post_as(Some(&server.token), &format!("/jobs/{job}/runs"), Some(&body)).await;
            assert_eq!(status, 201, "{run}");
        }
        let ended = server
            .wait_runs("hello", Duration::from_secs(120), |runs| runs.len() == 3 && runs.iter().all(|r| r["status"] == "succeeded"))
            .await;
        server.wait_runs("other", Duration::from_secs(120), |runs| runs.iter().all(|r| r["status"] == "succeeded")).await;
        let queued = later(&server, "hello", "d", "{}").await;

        // Bad input is refused in words, and nothing changes.
        for (args, says) in [
            (&["runs", "purge"][..], "by a filter"),
            (&["runs", "purge", "--job", "hello", "--code", "nope", "--yes"], "not a failure code"),
            (&["runs", "purge", "--status", "gone", "--yes"], "unknown status"),
        ] {
            let (code, _, stderr) = home.run_text(args);
            assert_eq!(code, 2, "{args:?}: {stderr}");
            assert!(stderr.contains(says), "{args:?}: {stderr}");
        }

        // The preview counts the ended runs only, and deletes and records nothing.
        let text = home.run_ok(&["runs", "purge", "--job", "hello"]);
        assert!(text.starts_with("3 ended runs match; add --yes"), "{text}");
        // `--until`: created longer ago than that; none is.
        assert_eq!(home.answer_json(&["runs", "purge", "--job", "hello", "--until", "1h", "--json"])["count"], 0);
        assert_eq!(home.answer_json(&["runs", "purge", "--job", "hello", "--json"]), serde_json::json!({"count": 3, "confirmed": false}));
        assert_eq!(server.runs(Some("hello")).await.len(), 4);
        // Only the refusal of a confirmed purge is audited (as refused).
        let purges = |home: &Home| home.answer_json(&["audit", "--action", "runs.purge", "--json"]);
        let refused = purges(&home);
        assert_eq!(refused.as_array().map(Vec::len), Some(1), "{refused:#}");
        assert_eq!((&refused[0]["result"], &refused[0]["object"]), (&Value::from("refused"), &Value::from("runs by filter")), "{refused:#}");

        assert_eq!(home.answer_json(&["runs", "purge", "--job", "hello", "--yes", "--json"]), serde_json::json!({"done": 3}));
        for run in &ended {
            let id = run["run_id"].as_str().unwrap();
            let (status, _) = server.get(&format!("/runs/{id}")).await;
            assert_eq!(status, 404, "{id} is still there");
            let attempts = home.scalar(&format!("SELECT COUNT(*) FROM jobhost_attempts WHERE run_id = '{id}'")).await;
            assert_eq!(attempts, 0, "{id}'s attempts are left");
        }
        let left = server.runs(Some("hello")).await;
        assert_eq!(left.len(), 1, "{left:#?}");
        assert_eq!(left[0]["run_id"], queued.as_str());
        assert_eq!(server.runs(Some("other")).await.len(), 1, "another job's run was purged");
        assert_eq!(home.run_ok(&["runs", "purge", "--job", "hello", "--yes"]).trim(), "0 runs purged");

        let rows = purges(&home);
        let user = std::env::var("USER").or_else(|_| std::env::var("LOGNAME")).unwrap_or_else(|_| "unknown".into());
        assert_eq!(rows.as_array().map(Vec::len), Some(3), "{rows:#}");
        let first = &rows[1];
        assert_eq!((&first["actor"], &first["label"], &first["object"], &first["result"]),
            (&Value::from("cli"), &Value::from(user), &Value::from("runs: 3 purged by filter"), &Value::from("ok")), "{rows:#}");
        assert_eq!(rows[0]["object"], "runs: 0 purged by filter", "{rows:#}");
    }

    async fn hosts_lists_each_host_alive_or_stopped_with_its_lanes_and_workers(home) {
        assert_eq!(home.run_ok(&["hosts"]).trim(), "no host has served in the last day");
        let m = home.manifest("", r#"
            [lanes.bulk]
            workers = 2
            [jobs.hello]
            component = "{guest:hello}"
        "#);
        let server = home.serve(&["--manifest", m.to_str().unwrap(), "--workers", "3"]).await;
        let start = Instant::now();
        let listed = loop {
            let listed = home.answer_json(&["hosts", "--json"]);
            if listed["hosts"].as_array().is_some_and(|h| h.len() == 1) {
                break listed;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "no heartbeat: {listed}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        // The same view as `GET /hosts`, but for `this_host`: the CLI is no host.
        let (status, api) = server.get("/hosts").await;
        assert_eq!(status, 200, "{api}");
        let host = &listed["hosts"][0];
        assert_eq!((&host["host"], &host["state"], &host["version"]), (&api["hosts"][0]["host"], &Value::from("alive"), &Value::from(env!("CARGO_PKG_VERSION"))), "{listed:#}");
        assert_eq!(host["workers"], serde_json::json!({"busy": 0, "total": 5}));
        assert_eq!((&host["this_host"], &api["hosts"][0]["this_host"]), (&Value::from(false), &Value::from(true)));
        let name = host["host"].as_str().unwrap().to_string();

        let text = home.run_ok(&["hosts"]);
        let line = text.lines().find(|l| l.starts_with(&name)).unwrap_or_else(|| panic!("{text}"));
        for shown in ["alive", "0/5", "bulk 0/2, default 0/3", " ago", env!("CARGO_PKG_VERSION")] {
            assert!(line.contains(shown), "{shown:?} is not in {line:?}");
        }
        assert!(text.starts_with("HOST "), "{text}");

        server.signal("TERM");
        let (code, _) = server.wait_exit(Duration::from_secs(30)).await;
        assert_eq!(code, Some(0));
        let listed = home.answer_json(&["hosts", "--json"]);
        assert_eq!(listed["hosts"][0]["state"], "stopped", "{listed:#}");
        assert!(home.run_ok(&["hosts"]).contains(" stopped "));
    }

    async fn runs_search_finds_the_runs_whose_payload_contains_an_object(home) {
        let m = home.manifest("", r#"
            [jobs.hello]
            component = "{guest:hello}"
            [jobs.other]
            component = "{guest:hello}"
        "#);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let rich = later(&server, "hello", "a", r#"{"customer": 42, "tags": ["a", "b"]}"#).await;
        later(&server, "hello", "b", r#"{"customer": 43}"#).await;
        let elsewhere = later(&server, "other", "a", r#"{"customer": 42}"#).await;

        let ids = |found: &Value| -> Vec<String> {
            assert_eq!(found["complete"], true, "{found}");
            found["runs"].as_array().expect("runs").iter().map(|r| r["run_id"].as_str().unwrap().to_string()).collect()
        };
        assert_eq!(ids(&home.answer_json(&["runs", "search", r#"{"customer": 42}"#, "--json"])), [elsewhere.as_str(), rich.as_str()]);
        assert_eq!(ids(&home.answer_json(&["runs", "search", r#"{"customer": 42}"#, "--job", "hello", "--json"])), [rich.as_str()]);
        assert_eq!(ids(&home.answer_json(&["runs", "search", r#"{"tags": ["b"]}"#, "--json"])), [rich.as_str()]);
        assert_eq!(ids(&home.answer_json(&["runs", "search", r#"{"customer": 42}"#, "--limit", "1", "--json"])), [elsewhere.as_str()]);
        // The API finds the same runs.
        let (status, api) = server.get("/runs/search?payload=%7B%22customer%22%3A42%7D").await;
        assert_eq!(status, 200, "{api}");
        assert_eq!(ids(&api), [elsewhere.as_str(), rich.as_str()]);

        let table = home.run_ok(&["runs", "search", r#"{"customer": 42}"#, "--job", "hello"]);
        assert!(table.starts_with("RUN ") && table.contains(&rich) && !table.contains(&elsewhere), "{table}");
        assert_eq!(home.run_ok(&["runs", "search", r#"{"customer": 44}"#]).trim(), "no runs");

        // A bad search term is refused in words.
        for (bad, says) in [("[1]", "a JSON object"), ("{nope", "not JSON"), (r#"{"a": 1, "a": 2}"#, "a key given twice")] {
            let (code, _, stderr) = home.run_text(&["runs", "search", bad]);
            assert_eq!(code, 2, "{bad}: {stderr}");
            assert!(stderr.contains(says), "{bad}: {stderr}");
        }
    }
}
