//! The operator's console, driven in a real headless Chromium against a real host.
//!
//! `tests/page/console.mjs` (Node with `playwright-core`) opens every view on a desktop
//! and a phone viewport, checks what each shows and that its screenshot is not blank,
//! cancels a running run and retries a failed one from their run views, previews a bulk
//! cancel and dismisses it, checks the keyboard, a tenant's token and no token at all;
//! creates and revokes a token in the tokens view, reads the audit log, and walks every
//! view with a read-only token, which is shown no control that changes anything.
//! This test gives it a host with what those checks need, then checks through the API
//! and the database that the page's actions did what they said.
//!
//! Needs `node`, a Chromium (`JOBHOST_TEST_CHROMIUM`, or `chromium` on the path) and
//! `playwright-core` at the version `tests/page/package.json` pins, in the node_modules
//! directory `JOBHOST_PAGE_TOOLS` names (`scripts/test` installs it into
//! `target/page-tools`), else `tests/page/node_modules` (`npm install` in `tests/page`).
//! The screenshots stay in `target/page-screenshots/` for a look after the run.

use crate::common;

use common::{Backend, Home};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The views the driver shoots, each on both viewports.
const VIEWS: [&str; 5] = ["overview", "jobs", "job", "runs", "run"];
const VIEWPORTS: [&str; 2] = ["desktop", "phone"];

/// `name` as a file: itself if it is a path, else the first match on `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return Some(PathBuf::from(name)).filter(|p| p.is_file());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

fn runs(path: &Path, arg: &str) -> bool {
    Command::new(path)
        .arg(arg)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The browser: `JOBHOST_TEST_CHROMIUM`, else a Chromium on the path.
fn chromium() -> PathBuf {
    let candidates = ["chromium", "chromium-browser", "google-chrome"];
    std::env::var("JOBHOST_TEST_CHROMIUM")
        .ok()
        .into_iter()
        .chain(candidates.iter().map(|c| c.to_string()))
        .filter_map(|c| on_path(&c))
        .find(|c| runs(c, "--version"))
        .expect(
            "the page test needs a headless browser: install chromium (apt-get install chromium) \
             or set JOBHOST_TEST_CHROMIUM",
        )
}

fn node() -> PathBuf {
    on_path("node")
        .filter(|n| runs(n, "--version"))
        .expect("the page test needs Node.js (node on the path)")
}

/// The node_modules directory that holds playwright-core.
fn page_tools() -> PathBuf {
    let tools = std::env::var_os("JOBHOST_PAGE_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| common::workspace().join("tests/page/node_modules"));
    assert!(
        tools.join("playwright-core/package.json").is_file(),
        "the page test needs playwright-core in {} (scripts/test installs it; or run \
         `npm install` in tests/page, or set JOBHOST_PAGE_TOOLS to a node_modules directory)",
        tools.display()
    );
    tools
}

/// Where the screenshots are kept: the build's target directory, which CI keeps.
fn screenshots() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || common::workspace().join("target"),
        |dir| common::workspace().join(dir),
    );
    let dir = target.join("page-screenshots");
    // Last run's pictures must not pass for this run's.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the screenshots directory");
    dir
}

/// `host tokens create --read-only`: the on-call engineer's token.
fn read_only_token(home: &Home) -> String {
    let out = home.run(&[
        "tokens",
        "create",
        "--read-only",
        "--label",
        "on-call",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let made: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    made["token"].as_str().expect("a token").to_string()
}

fn id_of(run: &Value) -> String {
    run["run_id"].as_str().expect("a run id").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_works_in_a_real_browser() {
    let (chromium, node, tools) = (chromium(), node(), page_tools());
    let home = Home::new(Backend::Sqlite).await;
    let added = home.run(&["tenants", "add", "acme"]);
    assert!(
        added.status.success(),
        "tenants add: {}",
        String::from_utf8_lossy(&added.stderr)
    );
    // `broken` fails at once for good; `slow` waits half a minute before it writes its
    // rows, long enough for the page to cancel it while it runs (it waits outside its
    // transaction: on SQLite an open write transaction would hold up the host's own
    // writes); `sleeper` logs, then sleeps half a minute (its run view shows it live);
    // `greeter` is the operator's, hidden from the tenant, whose job is `acme-report`.
    let m = home.manifest(
        "",
        r#"
        [jobs.greeter]
        component = "{guest:hello}"
        [jobs.broken]
        component = "{guest:flaky}"
        payload = { fail_times = 9 }
        retries = 0
        [jobs.slow]
        component = "{guest:ledger}"
        timeout = "60s"
        payload = { rows = 3, wait_ms = 30000, wait_at = "begin" }
        grants.db = { write = ["ledger"] }
        [jobs.acme-report]
        component = "{guest:hello}"
        tenant = "acme"
        [jobs.hostile]
        component = "{guest:adversary}"
        payload = { mode = "markup" }
        grants.db = { write = ["ledger"] }
        retries = 0
        [jobs.nightly]
        component = "{guest:hello}"
        schedule = "0 0 3 * * *"
        [jobs.chatty]
        component = "{guest:ledger}"
        payload = { rows = 2400 }
        grants.db = { write = ["ledger"] }
        record = "always"
        [jobs.held]
        component = "{guest:hello}"
        [jobs.sleeper]
        component = "{guest:hello}"
        timeout = "60s"
        payload = { name = "live", sleep_ms = 30000 }
    "#,
    );
    let server = home
        .serve(&["--manifest", m.to_str().unwrap(), "--workers", "4"])
        .await;
    for job in [
        "greeter",
        "broken",
        "slow",
        "acme-report",
        "hostile",
        "sleeper",
    ] {
        let (status, body) = server.post(&format!("/jobs/{job}/kick")).await;
        assert_eq!(status, 202, "kick {job}: {body}");
    }
    // `held` is paused with a run due: the overview shows it apart from the lag.
    let (status, body) = server.post("/pauses/job/held").await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = server.post("/jobs/held/kick").await;
    assert_eq!(status, 202, "{body}");
    let within = Duration::from_secs(30);
    let failed = server
        .wait_runs("broken", within, |runs| {
            runs.iter().any(|r| r["status"] == "failed")
        })
        .await;
    let failed = id_of(&failed[0]);
    let hostile = server
        .wait_runs("hostile", within, |runs| {
            runs.iter().any(|r| r["status"] == "failed")
        })
        .await;
    let hostile = id_of(&hostile[0]);
    let running = server
        .wait_runs("slow", within, |runs| {
            runs.iter().any(|r| r["status"] == "running")
        })
        .await;
    let running = id_of(&running[0]);
    let sleeping = server
        .wait_runs("sleeper", within, |runs| {
            runs.iter().any(|r| r["status"] == "running")
        })
        .await;
    let sleeping = id_of(&sleeping[0]);
    let chatty = {
        let (status, body) = server.post("/jobs/chatty/kick").await;
        assert_eq!(status, 202, "{body}");
        let ended = server
            .wait_runs("chatty", Duration::from_secs(120), |runs| {
                runs.iter().any(|r| r["status"] == "succeeded")
            })
            .await;
        id_of(&ended[0])
    };
    for job in ["greeter", "acme-report"] {
        server
            .wait_runs(job, within, |runs| {
                runs.iter().any(|r| r["status"] == "succeeded")
            })
            .await;
    }

    let out = screenshots();
    let scenario = json!({
        "chromium": chromium,
        "url": server.url,
        "token": server.token,
        "tenant_token": home.create_token(Some("acme")),
        "read_only_token": read_only_token(&home),
        "out": out,
        "expect": {
            "job": "broken",
            "failed_run": failed,
            "running_run": running,
            "hostile_run": hostile,
            "live_run": sleeping,
            "tenant_job": "acme-report",
            "hidden_from_tenant": "greeter",
            "start_job": "greeter",
            "scheduled_job": "nightly",
            "workers": 4,
            "settings_job": "slow",
            "tenant": "acme",
            "purge_job": "hostile",
            "paused_job": "held",
            "chatty_run": chatty,
        },
    });
    let scenario_path = home.path().join("scenario.json");
    std::fs::write(&scenario_path, scenario.to_string()).expect("write the scenario");
    let driver = common::workspace().join("tests/page/console.mjs");
    let started = Instant::now();
    let ran = tokio::task::spawn_blocking(move || {
        Command::new(node)
            .arg(driver)
            .arg(scenario_path)
            .env("JOBHOST_PAGE_TOOLS", tools)
            .output()
            .expect("run node")
    })
    .await
    .expect("join");
    let said = format!(
        "the page driver exited with {:?} after {:?}\n--- stdout\n{}\n--- stderr\n{}\n--- host log\n{}",
        ran.status.code(),
        started.elapsed(),
        String::from_utf8_lossy(&ran.stdout),
        String::from_utf8_lossy(&ran.stderr),
        home.server_logs(),
    );
    assert!(ran.status.success(), "{said}");
    let summary = String::from_utf8_lossy(&ran.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find_map(|line| line.get("summary").cloned())
        .unwrap_or_else(|| panic!("no summary line: {said}"));
    assert_eq!(summary["failed"], 0, "{said}");
    assert!(summary["passed"].as_u64() > Some(40), "{said}");

    let mut shots: Vec<String> = VIEWS
        .iter()
        .flat_map(|view| VIEWPORTS.iter().map(move |vp| format!("{view}-{vp}.png")))
        .collect();
    shots.extend(
        [
            "jobs-tenant.png",
            "jobs-read-only.png",
            "tokens.png",
            "audit.png",
            "start.png",
            "search.png",
            "tenants.png",
            "settings.png",
            "reports.png",
            "not-found-tenant.png",
            "many-calls.png",
            "hosts.png",
            "upcoming.png",
        ]
        .map(String::from),
    );
    for shot in shots {
        let path = out.join(&shot);
        let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        assert!(
            size > 0,
            "no screenshot {} (or empty): {said}",
            path.display()
        );
    }

    // The run the page started two hours ahead waits for its time.
    let later: Vec<Value> = server
        .runs(Some("greeter"))
        .await
        .into_iter()
        .filter(|r| r["status"] == "queued" && r["origin"] == "start")
        .collect();
    assert_eq!(later.len(), 1, "{later:#?}");
    let due = later[0]["next_attempt_at"].as_str().expect("due");
    let created = later[0]["created_at"].as_str().expect("created");
    let at = |t: &str| chrono::DateTime::parse_from_rfc3339(t).expect("a time");
    let ahead = at(due) - at(created);
    assert!((7_190..=7_210).contains(&ahead.num_seconds()), "{ahead:?}");

    // The page's Cancel stopped the running run: cancelled by the operator, its attempt
    // ended long before the guest would have written its rows, and none were written.
    let start = Instant::now();
    let cancelled = loop {
        let (status, run) = server.get(&format!("/runs/{running}")).await;
        assert_eq!(status, 200, "{run}");
        let ended = run["attempt_records"]
            .as_array()
            .is_some_and(|a| !a.is_empty() && a.iter().all(|a| !a["finished_at"].is_null()));
        if ended {
            break run;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the cancelled run's attempt did not end: {run:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(cancelled["status"], "cancelled", "{cancelled:#}");
    assert_eq!(cancelled["code"], "cancelled_by_operator", "{cancelled:#}");
    let took = cancelled["attempt_records"][0]["duration_ms"].as_i64();
    assert!(
        took.is_some_and(|ms| ms < 30_000),
        "the attempt was not cut short: {cancelled:#}"
    );
    let rows = home
        .scalar(&format!(
            "SELECT COUNT(*) FROM ledger WHERE run_id = '{running}'"
        ))
        .await;
    assert_eq!(rows, 0, "a cancelled run's rows were committed");

    // The page's Retry queued a new run of the failed one.
    let retries: Vec<Value> = server
        .runs(Some("broken"))
        .await
        .into_iter()
        .filter(|r| r["retry_of"] == failed.as_str())
        .collect();
    assert_eq!(retries.len(), 1, "one retry of {failed}: {retries:#?}");
    let (_, original) = server.get(&format!("/runs/{failed}")).await;
    assert_eq!(original["retried_by"], retries[0]["run_id"], "{original:#}");

    // The page's changes are in the audit log under the operator's token, and the
    // read-only token's refused kick under its own.
    let (_, audit) = server.get("/audit?limit=500").await;
    let rows = audit["audit"].as_array().expect("audit rows");
    let made = |action: &str, result: &str| {
        rows.iter()
            .any(|r| r["action"] == action && r["result"] == result && r["actor"] == "token")
    };
    for action in [
        "runs.purge",
        "run.cancel",
        "run.retry",
        "token.create",
        "token.revoke",
        "tenant.add",
        "tenant.disable",
        "tenant.enable",
    ] {
        assert!(made(action, "ok"), "no {action} row: {audit:#}");
    }
    assert!(made("run.kick", "read_only"), "{audit:#}");

    // The page's starts made one run each, carrying the payload typed, under the
    // operator's and the tenant's token; the refused payloads made none.
    for (job, name) in [
        ("greeter", "operator-start"),
        ("acme-report", "tenant-start"),
    ] {
        let started: Vec<Value> = server
            .runs(Some(job))
            .await
            .into_iter()
            .filter(|r| r["origin"] == "start")
            .collect();
        let mut carrying = Vec::new();
        for run in &started {
            let (_, view) = server.get(&format!("/runs/{}", id_of(run))).await;
            if view["payload"] == json!({ "name": name }) {
                carrying.push(id_of(run));
            }
        }
        assert_eq!(carrying.len(), 1, "{job}: {started:#?}");
        let audited = rows.iter().any(|r| {
            r["action"] == "run.start" && r["result"] == "ok" && r["run_id"] == carrying[0].as_str()
        });
        assert!(audited, "no run.start row for {job}: {audit:#}");
    }
    let actions = original["actions"].as_array().expect("actions");
    assert!(
        actions.iter().any(|a| a["action"] == "run.retry"),
        "{original:#}"
    );
}
