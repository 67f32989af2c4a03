//! Live runs, end to end on both backends: while an attempt runs, the log lines it wrote
//! and the fuel it burnt so far are seen through the API, `host runs show` and `host runs tail` (another process
//! than the host that runs it, reading the database), and `tail` ends with the run's
//! ending and its exit code.

use crate::common;

use common::{Home, Server};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

/// `live` logs its greeting (holding an escape sequence), then sleeps 4 s; `late` sleeps
/// past its 1 s deadline, and fails.
fn manifest(home: &Home) -> std::path::PathBuf {
    home.manifest(
        "",
        r#"
        [jobs.live]
        component = "{guest:hello}"
        timeout = "60s"
        payload = { name = "live\u001b[2J", sleep_ms = 4000 }
        [jobs.late]
        component = "{guest:hello}"
        timeout = "1s"
        retries = 0
        payload = { sleep_ms = 3000 }
    "#,
    )
}

async fn kick(server: &Server, job: &str) -> String {
    let (status, kicked) = server.post(&format!("/jobs/{job}/kick")).await;
    assert_eq!(status, 202, "{kicked}");
    kicked["run_id"].as_str().expect("queued").to_string()
}

/// The run's status, as the API has it now.
async fn status(server: &Server, id: &str) -> String {
    let (code, run) = server.get(&format!("/runs/{id}")).await;
    assert_eq!(code, 200, "{run}");
    run["status"].as_str().unwrap_or_default().to_string()
}

on_every_backend! {
    async fn a_running_runs_log_is_seen_live_and_tail_follows_it_to_its_end(home) {
        let m = manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let id = kick(&server, "live").await;

        // `tail` from another process, its lines read as they come.
        let mut tail = home.spawn(&["runs", "tail", &id]);
        let stdout = tail.stdout.take().expect("piped");
        let (sent, lines) = std::sync::mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sent.send(line).is_err() {
                    break;
                }
            }
        });

        // The API: the live attempt with its log so far, while the run is running.
        let start = Instant::now();
        let live = loop {
            let (code, run) = server.get(&format!("/runs/{id}")).await;
            assert_eq!(code, 200, "{run}");
            let log = run["live_attempt"]["log"].as_str().unwrap_or_default();
            if log.contains("attempt 1 of pass 1") {
                assert_eq!(run["status"], "running", "{run:#}");
                break run;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "no live log: {run:#}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let attempt = &live["live_attempt"];
        assert_eq!(attempt["seq"], 1, "{live:#}");
        assert_eq!(attempt["pass"], 1, "{live:#}");
        assert_eq!(attempt["attempt"], 1, "{live:#}");
        assert!(attempt["host"].is_string(), "{live:#}");
        assert!(attempt["started_at"].is_string(), "{live:#}");
        assert!(attempt["running_ms"].as_i64().is_some_and(|ms| ms >= 0), "{live:#}");
        assert!(
            attempt["log"].as_str().unwrap().starts_with("[info] hello, live\u{1b}[2J, from live"),
            "{live:#}"
        );
        assert_eq!(live["attempt_records"], Value::Array(vec![]), "{live:#}");

        // `host runs show`, as text and as JSON, while it runs.
        let shown = home.run(&["runs", "show", &id]);
        let text = String::from_utf8_lossy(&shown.stdout);
        assert!(text.contains("attempt 1 (pass 1, try 1, generation"), "{text}");
        assert!(text.contains(": running on "), "{text}");
        assert!(text.contains("| [info] hello, live\\u{1b}[2J, from live"), "{text}");
        let shown = home.run(&["runs", "show", &id, "--json"]);
        let shown: Value = serde_json::from_slice(&shown.stdout).expect("JSON");
        if shown["status"] == "running" {
            assert!(
                shown["live_attempt"]["log"].as_str().unwrap().contains("hello, live"),
                "{shown:#}"
            );
        }

        // `tail` printed the greeting, escaped, while the run was still running.
        let start = Instant::now();
        loop {
            let line = lines
                .recv_timeout(Duration::from_secs(20))
                .expect("tail printed the greeting");
            assert!(!line.contains('\u{1b}'), "an escape reached the terminal: {line:?}");
            if line.starts_with("[info] hello, live\\u{1b}[2J, from live") {
                assert_eq!(status(&server, &id).await, "running", "tail saw it only at the end");
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(20));
        }
        // ... then the attempt's end and the run's, and exited 0.
        let rest: Vec<String> = lines.iter().collect();
        let (code, _) = tokio::task::spawn_blocking(move || tail.wait().map(|s| (s.code(), ())))
            .await
            .expect("join")
            .expect("tail exited");
        assert_eq!(code, Some(0), "{rest:#?}");
        assert!(rest.iter().any(|l| l == "attempt 1 of pass 1"), "{rest:#?}");
        assert!(rest.iter().any(|l| l.starts_with("== attempt 1 (pass 1, try 1): succeeded")), "{rest:#?}");
        assert!(
            rest.last().is_some_and(|l| l.starts_with(&format!("run {id} of live: succeeded"))),
            "{rest:#?}"
        );
        // The live log went with the attempt: its log is the attempt's row.
        let (_, ended) = server.get(&format!("/runs/{id}")).await;
        assert!(ended["live_attempt"].is_null(), "{ended:#}");
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_live_logs").await, 0);

        // `--json` on a run that fails: the events, the ending, exit 1.
        let late = kick(&server, "late").await;
        let mut cmd = home.host();
        cmd.args(["runs", "tail", &late, "--json"]);
        let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .expect("join")
        .expect("tail ran");
        let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        assert_eq!(out.status.code(), Some(1), "{events:#?}");
        let end = events.last().expect("events");
        assert_eq!(end["event"], "end", "{events:#?}");
        assert_eq!(end["run"]["status"], "failed", "{events:#?}");
        assert_eq!(end["run"]["code"], "timeout", "{events:#?}");
        assert_eq!(end["exit"], 1, "{events:#?}");
        assert!(
            events.iter().any(|e| e["event"] == "log"
                && e["line"].as_str().is_some_and(|l| l.starts_with("[info] hello, world"))),
            "{events:#?}"
        );
        assert!(events.iter().any(|e| e["event"] == "attempt" && e["attempt"]["code"] == "timeout"), "{events:#?}");

        // An unknown run: a clear error, exit 2.
        let unknown = home.run(&["runs", "tail", "00000000-0000-0000-0000-000000000000"]);
        assert_eq!(unknown.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&unknown.stderr).contains("no run with id"));
    }

    async fn a_running_runs_fuel_so_far_is_seen_growing_and_never_past_its_attempts(home) {
        let m = home.manifest(
            "",
            r#"
            [jobs.spin]
            component = "{guest:spin}"
            timeout = "6s"
            retries = 0
        "#,
        );
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let id = kick(&server, "spin").await;
        // A guest that computes without a host call: its fuel so far grows while it runs.
        let fuel_so_far = || async {
            let run = server.run_view(&id).await;
            (run["live_attempt"]["fuel_used"].as_u64(), run)
        };
        let start = Instant::now();
        let first = loop {
            if let (Some(fuel), _) = fuel_so_far().await
                && fuel > 0
            {
                break fuel;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "no fuel so far");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let grown = loop {
            let (fuel, run) = fuel_so_far().await;
            assert_eq!(run["status"], "running", "ended before its fuel was seen growing: {run:#}");
            if let Some(fuel) = fuel.filter(|&f| f > first) {
                break fuel;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "the fuel never grew: {run:#}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let shown = home.run(&["runs", "show", &id]);
        let text = String::from_utf8_lossy(&shown.stdout);
        if text.contains(": running on ") {
            assert!(text.contains(", fuel so far "), "{text}");
        }
        // It ends at its deadline; what it burnt in all is at least what was seen.
        let ended = server
            .wait_run(&id, "the spin's ending", |r| r["status"] == "failed")
            .await;
        assert_eq!(ended["code"], "timeout", "{ended:#}");
        let recorded = ended["attempt_records"][0]["fuel_used"].as_u64().expect("fuel recorded");
        assert!(recorded >= grown, "recorded {recorded} < seen {grown}");
        assert!(ended["live_attempt"].is_null(), "{ended:#}");
    }
}
