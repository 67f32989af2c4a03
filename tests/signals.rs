//! Signals (WIT 0.1.6), end to end on both backends with the `waiter` guest: a run waits
//! for the outside holding no worker and no attempt, `POST /runs/{id}/signals/{name}` (or
//! `host runs signal`) wakes it and its next pass reads the payload; a signal sent while
//! the waiting pass still ran is not lost; a wait times out; a send is idempotent by its
//! id; the reading attempt's retry and its replay read the same payload; bad input and
//! other tenants are refused, writing nothing. The Python and JavaScript SDKs' `approval`
//! examples wait for and read a signal as the Rust guest does.

use crate::common;

use common::{Home, Server};
use serde_json::{Value, json};
use std::time::Duration;

/// Jobs of the `waiter` guest, each with its payload.
fn manifest(home: &Home) -> std::path::PathBuf {
    let job = |name: &str, payload: &str, extra: &str| {
        format!(
            "[jobs.{name}]\ncomponent = \"{{guest:waiter}}\"\ntimeout = \"60s\"\n\
             payload = {payload}\n{extra}\n"
        )
    };
    let jobs = [
        job("approve", r#"{ signal = "approval" }"#, "retries = 0"),
        job(
            "early",
            r#"{ signal = "approval", linger_ms = 4000 }"#,
            "retries = 0",
        ),
        job(
            "brief",
            r#"{ signal = "approval", timeout_ms = 1000 }"#,
            "retries = 0",
        ),
        job(
            "fickle",
            r#"{ signal = "approval", fail_reading_once = true }"#,
            "retries = 1",
        ),
        job(
            "acme-wait",
            r#"{ signal = "approval" }"#,
            "retries = 0\ntenant = \"acme\"",
        ),
        job(
            "beta-job",
            r#"{ signal = "approval" }"#,
            "tenant = \"beta\"",
        ),
    ];
    home.manifest("", &jobs.concat())
}

/// The `approval` examples in Python and JavaScript (`approval-py`, `approval-js`).
fn polyglot_manifest(home: &Home) -> std::path::PathBuf {
    let mut jobs = String::new();
    for (lang, x) in [("python", "py"), ("js", "js")] {
        let component = common::polyglot(&format!("{lang}/approval"));
        jobs += &format!(
            "[jobs.approval-{x}]\ncomponent = \"{}\"\nmemory = \"64MiB\"\ntimeout = \"60s\"\n\
             retries = 0\npayload = {{ signal = \"approval\" }}\n",
            component.display()
        );
    }
    home.manifest("", &jobs)
}

async fn kick(server: &Server, job: &str) -> String {
    let (status, kicked) = server.post(&format!("/jobs/{job}/kick")).await;
    assert_eq!(status, 202, "{kicked}");
    kicked["run_id"].as_str().expect("queued").to_string()
}

async fn waiting(server: &Server, id: &str) -> Value {
    server
        .wait_run(id, "the wait", |r| r["status"] == "waiting")
        .await
}

async fn ended(server: &Server, id: &str) -> Value {
    server
        .wait_run(id, "the run's end", |r| {
            !["queued", "claimed", "running", "waiting"]
                .contains(&r["status"].as_str().unwrap_or_default())
        })
        .await
}

/// A signal sent over the API as `token`: the status and the answer.
async fn signal(
    server: &Server,
    token: &str,
    id: &str,
    name: &str,
    body: Option<&str>,
) -> (u16, Value) {
    let path = format!("/runs/{id}/signals/{name}");
    server.post_as(Some(token), &path, body).await
}

async fn stored_signals(home: &Home) -> i64 {
    home.scalar("SELECT COUNT(*) FROM jobhost_signals").await
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

on_every_backend! {
    async fn a_signal_wakes_a_waiting_run_and_its_next_pass_reads_the_payload(home) {
        let m = manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let token = server.token.clone();
        let id = kick(&server, "approve").await;

        // It sleeps: shown waiting for the signal, one attempt used, its lease parked.
        let run = waiting(&server, &id).await;
        assert_eq!(run["waits_for_signal"], "approval", "{run}");
        assert!(run["signal_timeout_at"].is_string(), "{run}");
        assert_eq!(run["attempts"], 1, "{run}");
        let holder = home
            .scalar(&format!(
                "SELECT COUNT(*) FROM jobhost_leases WHERE job = 'approve' AND holder = '{id}'"
            ))
            .await;
        assert_eq!(holder, 1, "the waiting run keeps its lease parked");
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(server.run_view(&id).await["attempts"], 1, "a wait uses no attempt");

        // A signal of another name is kept, and wakes nothing.
        let (status, other) = signal(&server, &token, &id, "other", None).await;
        assert_eq!((status, other["woke"].as_bool()), (201, Some(false)), "{other}");
        assert_eq!(server.run_view(&id).await["status"], "waiting");

        let body = r#"{"payload": {"ok": true, "by": "ann"}, "id": "sig-1"}"#;
        let (status, sent) = signal(&server, &token, &id, "approval", Some(body)).await;
        assert_eq!(status, 201, "{sent}");
        assert_eq!(
            sent,
            json!({"run_id": id, "name": "approval", "signal_id": "sig-1",
                   "duplicate": false, "woke": true})
        );
        // The same id again is the same signal; with another payload, refused.
        let (status, again) = signal(&server, &token, &id, "approval", Some(body)).await;
        assert_eq!((status, again["duplicate"].as_bool()), (200, Some(true)), "{again}");
        let changed = r#"{"payload": {"ok": false}, "id": "sig-1"}"#;
        let (status, reused) = signal(&server, &token, &id, "approval", Some(changed)).await;
        assert_eq!((status, reused["error"]["code"].as_str()), (409, Some("signal_id_reused")), "{reused}");

        let run = ended(&server, &id).await;
        assert_eq!(run["status"], "succeeded", "{run}");
        assert_eq!(run["attempts"], 2, "{run}");
        assert_eq!(
            run["result"],
            json!([{"state": "received", "id": "sig-1", "payload": {"ok": true, "by": "ann"}}])
        );
        assert_eq!(stored_signals(&home).await, 2);

        // An ended run takes no signal; a repeat of one it took is still answered.
        let (status, late) = signal(&server, &token, &id, "approval", Some(r#"{"id": "sig-2"}"#)).await;
        assert_eq!((status, late["error"]["code"].as_str()), (409, Some("run_ended")), "{late}");
        let (status, again) = signal(&server, &token, &id, "approval", Some(body)).await;
        assert_eq!((status, again["duplicate"].as_bool()), (200, Some(true)), "{again}");
        assert_eq!(stored_signals(&home).await, 2, "a refused send writes nothing");
    }

    async fn bad_signals_and_other_tenants_signals_are_refused_and_write_nothing(home) {
        let m = manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let acme = home.create_token(Some("acme"));
        let beta = home.create_token(Some("beta"));
        let id = kick(&server, "acme-wait").await;
        waiting(&server, &id).await;

        let refused = |expect: u16, code: &'static str, field: &'static str| {
            move |(status, answer): (u16, Value)| {
                assert_eq!(status, expect, "{answer}");
                assert_eq!(answer["error"]["code"], code, "{answer}");
                let message = answer["error"]["message"].as_str().unwrap_or_default();
                assert!(message.starts_with(field), "{field}: {answer}");
            }
        };
        refused(404, "unknown_run", "no run")(
            signal(&server, &acme, "no-such-run", "approval", None).await,
        );
        refused(404, "unknown_run", "no run")(signal(&server, &beta, &id, "approval", None).await);
        refused(400, "invalid_parameter", "name:")(
            signal(&server, &acme, &id, "Approval", None).await,
        );
        let big = format!(r#"{{"payload": "{}"}}"#, "x".repeat(70 * 1024));
        refused(400, "invalid_parameter", "payload: ")(
            signal(&server, &acme, &id, "approval", Some(&big)).await,
        );
        refused(400, "invalid_parameter", "body refused: at $.payload")(
            signal(&server, &acme, &id, "approval", Some(r#"{"payload": {"a": 1, "a": 2}}"#)).await,
        );
        refused(400, "invalid_parameter", "the body must be")(
            signal(&server, &acme, &id, "approval", Some(r#"{"payload": 1, "from": "x"}"#)).await,
        );
        refused(400, "invalid_parameter", "body refused")(
            signal(&server, &acme, &id, "approval", Some("not json")).await,
        );
        refused(400, "invalid_parameter", "id:")(
            signal(&server, &acme, &id, "approval", Some(r#"{"id": "a b"}"#)).await,
        );
        let huge = format!(r#"{{"payload": "{}"}}"#, "x".repeat(600 * 1024));
        let (status, answer) = signal(&server, &acme, &id, "approval", Some(&huge)).await;
        assert_eq!(status, 413, "{answer}");
        assert_eq!(stored_signals(&home).await, 0, "a refused send writes nothing");
        assert_eq!(server.run_view(&id).await["status"], "waiting");

        // Its own tenant's signal wakes it.
        let (status, sent) = signal(&server, &acme, &id, "approval", Some(r#"{"payload": 7}"#)).await;
        assert_eq!((status, sent["woke"].as_bool()), (201, Some(true)), "{sent}");
        let run = ended(&server, &id).await;
        assert_eq!(run["result"][0]["payload"], 7, "{run}");
    }

    async fn a_signal_sent_before_the_wait_committed_is_not_lost_and_a_wait_times_out(home) {
        let m = manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let early = kick(&server, "early").await;
        let brief = kick(&server, "brief").await;

        // Sent from the command line while the pass that will wait still runs: the send
        // wakes nothing, and the wait, committed after it, finds it (its timeout is an hour).
        server.wait_run(&early, "the first pass", |r| r["status"] == "running").await;
        let out = home.run(&[
            "runs", "signal", &early, "approval", "--payload", r#"{"n": 1}"#, "--id", "early-1",
            "--json",
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let sent: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(sent["woke"], false, "{sent}");
        assert_eq!(server.run_view(&early).await["status"], "running", "sent while it ran");
        let run = ended(&server, &early).await;
        assert_eq!(run["status"], "succeeded", "{run}");
        assert_eq!(
            run["result"],
            json!([{"state": "received", "id": "early-1", "payload": {"n": 1}}])
        );
        // The command line refuses as the API does.
        let out = home.run(&["runs", "signal", &early, "approval", "--id", "early-2"]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(text(&out).contains("has ended (succeeded)"), "{}", text(&out));
        let out = home.run(&["runs", "signal", "no-such-run", "approval"]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        let out = home.run(&["runs", "signal", &brief, "approval", "--payload", "{nope"]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains("--payload: at $"), "{}", text(&out));

        // Nobody signals the other: its next pass learns that its wait timed out.
        let run = ended(&server, &brief).await;
        assert_eq!(run["status"], "succeeded", "{run}");
        assert_eq!(run["result"], json!([{"state": "timed-out"}]));
        assert_eq!(stored_signals(&home).await, 1);
    }

    async fn the_reading_attempt_retries_and_replays_with_the_same_payload(home) {
        let m = manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let id = kick(&server, "fickle").await;
        waiting(&server, &id).await;
        let body = r#"{"payload": {"x": 7}, "id": "s7"}"#;
        let (status, sent) = signal(&server, &server.token, &id, "approval", Some(body)).await;
        assert_eq!(status, 201, "{sent}");
        let run = ended(&server, &id).await;
        assert_eq!(run["status"], "succeeded", "{run}");
        assert_eq!(run["attempts"], 3, "the wait, the failed reading and its retry: {run}");
        assert_eq!(run["result"], json!([{"state": "received", "id": "s7", "payload": {"x": 7}}]));
        let logs: Vec<String> = run["attempt_records"]
            .as_array()
            .expect("attempt records")
            .iter()
            .map(|a| a["log"].as_str().unwrap_or_default().to_string())
            .filter(|log| log.contains("read: "))
            .collect();
        assert_eq!(logs.len(), 2, "{run}");
        assert!(logs.iter().all(|l| l.contains(r#""x":7"#) && l.contains("s7")), "{logs:?}");

        // The failed reading attempt replays from its journal: the signal's rows gone,
        // it reads the same payload and ends the same.
        home.exec("DELETE FROM jobhost_signals").await;
        let out = home.run(&["replay", "--json", &id]);
        let shown: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("replay printed no JSON: {}", text(&out)));
        assert_eq!(out.status.code(), Some(0), "{shown}");
        let replay = &shown["replay"];
        assert!(replay["log"].as_str().unwrap_or_default().contains(r#""x":7"#), "{shown}");
        assert_eq!(replay["same"], json!({"outcome": true, "log": true, "fuel": true}), "{shown}");
    }

    async fn the_python_and_javascript_sdks_wait_for_and_read_a_signal(home) {
        let m = polyglot_manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        for x in ["py", "js"] {
            let id = kick(&server, &format!("approval-{x}")).await;
            let run = waiting(&server, &id).await;
            assert_eq!(run["waits_for_signal"], "approval", "{run}");
            let body = format!(r#"{{"payload": {{"lang": "{x}"}}, "id": "{x}-1"}}"#);
            let (status, sent) = signal(&server, &server.token, &id, "approval", Some(&body)).await;
            assert_eq!((status, sent["woke"].as_bool()), (201, Some(true)), "{sent}");
            let run = ended(&server, &id).await;
            assert_eq!(run["status"], "succeeded", "{run}");
            assert_eq!(
                run["result"],
                json!([{"state": "received", "id": format!("{x}-1"), "payload": {"lang": x}}]),
                "{run}"
            );
        }
    }
}
