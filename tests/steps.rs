//! Resumable runs end to end, on both backends: memoised steps, counters, a pass's end
//! committed with its writes, start-or-join and `host drive`, with the real binary and
//! the `stepper` and `import` guests.

use crate::common;

use common::{Home, guest};
use serde_json::Value;
use std::process::Stdio;
use std::time::{Duration, Instant};

fn path(name: &str) -> String {
    guest(name).display().to_string()
}

/// `host run` of the stepper guest, as a job of a manifest that grants everything it
/// imports (its mount points nowhere: only the `links` scenario calls it).
fn stepper(home: &Home, payload: &str, extra: &[&str]) -> (i32, Value) {
    let manifest = home.manifest(
        "",
        "[jobs.stepper]\ncomponent = \"{guest:stepper}\"\n\
         grants.db = { write = [\"step_effects\"] }\ngrants.steps = true\ngrants.links = [\"svc\"]\n\
         [links.svc]\nurl = \"http://127.0.0.1:9/\"\nmethods = [\"POST\"]\n",
    );
    let manifest = manifest.display().to_string();
    let mut args = vec!["stepper", "--manifest", &manifest, "--payload", payload];
    args.extend_from_slice(extra);
    home.run_json(&args)
}

fn show(home: &Home, id: &str) -> Value {
    let out = home.run(&["runs", "show", id, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("runs show prints JSON")
}

fn logs(run: &Value) -> String {
    run["attempt_records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["log"].as_str().unwrap().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

on_every_backend! {
    async fn a_retry_skips_the_steps_a_failed_attempt_recorded(home) {
        let (code, run) = stepper(&home, r#"{"scenario":"memo","steps":4,"fail_after":2}"#,
            &["--retries", "2", "--backoff", "10ms"]);
        assert_eq!((code, &run["status"], &run["attempts"]), (0, &"succeeded".into(), &2.into()), "{run}");
        let id = run["run_id"].as_str().unwrap();
        // Each step's rows committed with its record: exactly once, whoever did it.
        let effects = home.scalar(&format!("SELECT COUNT(*) FROM step_effects WHERE run_id = '{id}'")).await;
        assert_eq!(effects, 4);
        let distinct = home.scalar(&format!(
            "SELECT COUNT(*) FROM (SELECT DISTINCT name FROM step_effects WHERE run_id = '{id}') d")).await;
        assert_eq!(distinct, 4);
        let shown = show(&home, id);
        let log = logs(&shown);
        assert!(log.contains("s0: done by attempt 1") && log.contains("s1: done by attempt 1"), "{log}");
        assert!(log.contains("s2: done by attempt 2") && log.contains("s3: done by attempt 2"), "{log}");
        // The pass committed: its ledger is gone.
        assert_eq!(shown["steps"], Value::Array(vec![]));
        assert_eq!(home.scalar(&format!("SELECT COUNT(*) FROM jobhost_steps WHERE run_id = '{id}'")).await, 0);
    }

    async fn a_run_that_fails_keeps_its_last_ledger_as_evidence(home) {
        let (code, run) = stepper(&home, r#"{"scenario":"memo","steps":4,"fail_after":2}"#, &[]);
        assert_eq!((code, &run["status"], &run["code"]), (1, &"failed".into(), &"handler_failed".into()), "{run}");
        let shown = show(&home, run["run_id"].as_str().unwrap());
        let steps = shown["steps"].as_array().unwrap();
        let names: Vec<&str> = steps.iter().map(|s| s["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["s0", "s1"], "{shown}");
        assert_eq!(steps[0]["result"]["i"], 0);
        assert_eq!(steps[0]["pass"], 1);
        assert_eq!(steps[0]["decode_error"], Value::Null);
        // And in words.
        let out = home.run(&["runs", "show", run["run_id"].as_str().unwrap()]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("step s1 (pass 1)"), "{text}");
    }

    async fn a_step_name_reached_twice_ends_the_run_step_reused(home) {
        let (code, run) = stepper(&home, r#"{"scenario":"reuse"}"#, &["--retries", "3", "--backoff", "10ms"]);
        assert_eq!(code, 1, "{run}");
        assert_eq!(run["code"], "step_reused");
        assert_eq!(run["attempts"], 1, "step_reused is never retried");
        let log = logs(&show(&home, run["run_id"].as_str().unwrap()));
        assert!(log.contains("reused: step-reused"), "{log}");
    }

    async fn steps_recorded_on_their_own_are_memoised_too(home) {
        let (code, run) = stepper(&home, r#"{"scenario":"plain","steps":3}"#, &[]);
        assert_eq!(code, 0, "{run}");
        let log = logs(&show(&home, run["run_id"].as_str().unwrap()));
        assert!(log.contains("s2: {\"i\":2}"), "{log}");
    }

    async fn a_step_retries_inside_the_attempt_by_its_own_policy(home) {
        let (code, run) = stepper(&home, r#"{"scenario":"retry","fail_times":2,"attempts":3}"#, &[]);
        assert_eq!((code, &run["attempts"]), (0, &1.into()), "{run}");
        let log = logs(&show(&home, run["run_id"].as_str().unwrap()));
        assert!(log.contains("flaky: 3 tries"), "{log}");
        // Past its own tries the step fails the attempt, and the job's policy takes over.
        let (code, run) = stepper(&home, r#"{"scenario":"retry","fail_times":5,"attempts":3}"#,
            &["--retries", "1", "--backoff", "10ms"]);
        assert_eq!((code, &run["code"], &run["attempts"]), (1, &"handler_failed".into(), &2.into()), "{run}");
        assert_eq!(run["error"], "try 3 failed");
    }

    async fn a_step_attempts_failed_in_keeps_their_count_and_the_last_error(home) {
        // `flaky` fails all three of its tries in each of the run's two attempts.
        let (code, run) = stepper(&home, r#"{"scenario":"retry","fail_times":5,"attempts":3}"#,
            &["--retries", "1", "--backoff", "10ms"]);
        assert_eq!((code, &run["attempts"]), (1, &2.into()), "{run}");
        let id = run["run_id"].as_str().unwrap();
        let shown = show(&home, id);
        let failed = shown["failed_steps"].as_array().unwrap();
        assert_eq!(failed.len(), 1, "{shown}");
        assert_eq!(
            (&failed[0]["name"], &failed[0]["pass"], &failed[0]["failed_attempts"], &failed[0]["last_code"], &failed[0]["last_error"]),
            (&"flaky".into(), &1.into(), &2.into(), &"handler_failed".into(), &"try 3 failed".into()),
            "{shown}"
        );
        assert_eq!(shown["steps"], Value::Array(vec![]), "never recorded");
        let out = home.run(&["runs", "show", id]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("step flaky (pass 1) failed 2 times, last: handler_failed: try 3 failed"), "{text}");

        // A step that failed once and was then recorded still says it failed, after its
        // pass's ledger is gone.
        let (code, run) = stepper(&home, r#"{"scenario":"retry","fail_times":1,"attempts":1,"first_attempt_only":true}"#,
            &["--retries", "1", "--backoff", "10ms"]);
        assert_eq!((code, &run["attempts"]), (0, &2.into()), "{run}");
        let once = show(&home, run["run_id"].as_str().unwrap());
        assert_eq!(once["failed_steps"][0]["failed_attempts"], 1, "{once}");
        assert_eq!(once["failed_steps"][0]["last_error"], "try 1 failed", "{once}");
        let out = home.run(&["runs", "show", run["run_id"].as_str().unwrap()]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("step flaky (pass 1) failed once, last: handler_failed: try 1 failed"), "{text}");
        // An attempt that failed between steps failed in none.
        let (code, run) = stepper(&home, r#"{"scenario":"memo","steps":3,"fail_after":1}"#,
            &["--retries", "1", "--backoff", "10ms"]);
        assert_eq!(code, 0, "{run}");
        assert_eq!(show(&home, run["run_id"].as_str().unwrap())["failed_steps"], Value::Array(vec![]));
        // The API's run view shows the same.
        let server = home.serve(&[]).await;
        let (status, viewed) = server.get(&format!("/runs/{id}")).await;
        assert_eq!(status, 200, "{viewed}");
        assert_eq!(viewed["failed_steps"], shown["failed_steps"]);
    }

    async fn step_bounds_are_refused_with_fixed_reasons(home) {
        let (code, run) = stepper(&home, r#"{"scenario":"bounds"}"#, &[]);
        assert_eq!(code, 0, "{run}");
        let log = logs(&show(&home, run["run_id"].as_str().unwrap()));
        assert!(log.contains("refused name: invalid-step-name"), "{log}");
        assert!(log.contains("refused result: too-large"), "{log}");
        assert!(log.contains("refused depth: too-deep"), "{log}");
    }

    async fn counters_commit_with_each_pass_and_are_dropped_with_a_failed_attempt(home) {
        let (code, run) = stepper(&home, r#"{"scenario":"counters","passes":3,"fail_first":true}"#,
            &["--retries", "1", "--backoff", "10ms"]);
        assert_eq!(code, 0, "{run}");
        // 2 per committed pass; the failed first attempt's 2 were dropped with it.
        assert_eq!(run["counters"], serde_json::json!({"seen": 6}), "{run}");
        let log = logs(&show(&home, run["run_id"].as_str().unwrap()));
        assert!(log.contains("pass 2: seen 2 -> 4"), "{log}");
        let out = home.run(&["runs", "show", run["run_id"].as_str().unwrap()]);
        assert!(String::from_utf8_lossy(&out.stdout).contains("counters: seen=6"));
    }

    async fn a_cursor_the_rule_refuses_names_its_json_path(home) {
        let (code, run) = stepper(&home, r#"{"scenario":"bad_cursor","depth":40}"#, &[]);
        assert_eq!((code, &run["code"]), (1, &"invalid_outcome".into()), "{run}");
        let error = run["error"].as_str().unwrap();
        assert!(error.contains("$[0][0]") && error.contains("nested deeper"), "{error}");
        // Through commit-pass the guest is refused and nothing commits.
        let (code, run) = stepper(&home, r#"{"scenario":"bad_cursor","depth":40,"commit_pass":true}"#, &[]);
        assert_eq!(code, 0, "{run}");
        let log = logs(&show(&home, run["run_id"].as_str().unwrap()));
        assert!(log.contains("refused cursor: too-deep"), "{log}");
    }

    async fn a_payload_the_rule_refuses_names_its_json_path(home) {
        let out = home.run(&["run", "--job", &path("hello"), "--payload", r#"{"a":[1,{"b":NaN}]}"#]);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("$.a[1].b") && err.contains("not finite"), "{err}");
        let out = home.run(&["run", "--job", &path("hello"), "--payload", r#"{"a":1,"a":2}"#]);
        assert!(String::from_utf8_lossy(&out.stderr).contains("a key given twice"));
    }

    async fn a_start_joins_the_live_run_and_a_kick_keeps_its_meaning(home) {
        let manifest = home.manifest("", "[jobs.hello]\ncomponent = \"{guest:hello}\"\n\
            [jobs.spin]\ncomponent = \"{guest:spin}\"\ntimeout = \"60s\"\n");
        register(&home, &manifest).await;
        let started = start_json(&home, &["hello", "--payload", r#"{"name":"a"}"#]);
        assert_eq!(started["joined"], false, "{started}");
        let joined = start_json(&home, &["hello", "--payload", r#"{"name":"b"}"#]);
        assert_eq!(joined["joined"], true);
        assert_eq!(joined["run_id"], started["run_id"]);
        let other = start_json(&home, &["hello", "--instance", "other"]);
        assert_eq!(other["joined"], false);
        let payload = home.scalar(&format!(
            "SELECT COUNT(*) FROM jobhost_runs WHERE id = '{}' AND payload = '{{\"name\":\"a\"}}'",
            started["run_id"].as_str().unwrap())).await;
        assert_eq!(payload, 1, "the joined start did not change the live run");
        // A kick keeps its meaning, once more after the live run; a start then still joins
        // the oldest live run.
        kick(&home, "hello");
        let live = "SELECT COUNT(*) FROM jobhost_runs WHERE job = 'hello' AND instance = 'default' \
            AND status IN ('queued', 'running')";
        assert_eq!(home.scalar(live).await, 2);
        let joined = start_json(&home, &["hello"]);
        assert_eq!((&joined["run_id"], &joined["joined"]), (&started["run_id"], &true.into()));
        assert_eq!(home.scalar(live).await, 2);
        // A bad payload is refused in words, with its path, and changes nothing.
        let out = home.run(&["start", "hello", "--instance", "third", "--payload", r#"{"x":[Infinity]}"#]);
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("$.x[0]"));
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE instance = 'third'").await, 0);
        // The API: 201 for a new run, 200 joined (the run is running: `spin` runs until
        // its deadline); a refused payload is a 400 with its path.
        let server = home.serve(&["--manifest", manifest.to_str().unwrap(), "--workers", "1"]).await;
        let post = |body: &'static str| server.post_as(Some(&server.token), "/jobs/spin/runs", Some(body));
        let (status, body) = post(r#"{"instance":"api","payload":{"name":"x"}}"#).await;
        assert_eq!(status, 201, "{body}");
        home.wait_for(&format!("SELECT COUNT(*) FROM jobhost_runs WHERE id = '{}' AND status = 'running'",
            body["run_id"].as_str().unwrap()), Duration::from_secs(20)).await;
        let (status, again) = post(r#"{"instance":"api"}"#).await;
        assert_eq!((status, &again["run_id"], &again["joined"]), (200, &body["run_id"], &true.into()));
        let (status, refused) = post(r#"{"instance":"api2","payload":{"n":[1,2,{"x":1e999}]}}"#).await;
        assert_eq!(status, 400, "{refused}");
        assert_eq!(refused["error"]["code"], "invalid_parameter");
        assert!(refused["error"]["message"].as_str().unwrap().contains("$.payload.n[2].x"), "{refused}");
        let (status, _) = post(r#"{"instance":"api","unknown":1}"#).await;
        assert_eq!(status, 400);
        let (status, unknown) = server.post("/jobs/nope/runs").await;
        assert_eq!((status, &unknown["error"]["code"]), (404, &"unknown_job".into()));
        drop(server);
    }

    async fn twenty_concurrent_starts_from_separate_processes_give_one_run(home) {
        let manifest = home.manifest("", "[jobs.hello]\ncomponent = \"{guest:hello}\"\n");
        register(&home, &manifest).await;
        let children: Vec<_> = (0..20)
            .map(|_| {
                home.host()
                    .args(["start", "hello", "--instance", "race", "--json"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("spawn host start")
            })
            .collect();
        let mut ids = Vec::new();
        let mut joined = 0;
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let started: Value = serde_json::from_slice(&out.stdout).unwrap();
            joined += usize::from(started["joined"] == true);
            ids.push(started["run_id"].as_str().unwrap().to_string());
        }
        ids.dedup();
        assert_eq!(ids.len(), 1, "{ids:?}");
        assert_eq!(joined, 19);
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE instance = 'race'").await, 1);
    }

    async fn a_drive_sweep_is_bounded_and_pages_past_jobs_it_does_not_have(home) {
        let manifest = home.manifest("", "[jobs.noop]\ncomponent = \"{guest:noop}\"\n");
        register(&home, &manifest).await;
        let store = home.store().await;
        // A run of a job this sweep does not have comes first in claim order.
        common::queue_run(&store, "elsewhere", "first", 0).await;
        for i in 0..1000 {
            common::queue_run(&store, "noop", &format!("i{i}"), 0).await;
        }
        store.close().await;
        let out = home.run(&["drive", "--manifest", manifest.to_str().unwrap(), "--limit", "50", "--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["attempted"], 50, "{report}");
        let sum: i64 = ["advanced", "completed", "retrying", "failed", "skipped"]
            .iter().map(|k| report[k].as_i64().unwrap()).sum();
        assert_eq!(sum, 50);
        assert_eq!(report["completed"], 50);
        assert_eq!(report["runs"].as_array().unwrap().len(), 50);
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE status = 'succeeded'").await, 50);
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE status = 'queued'").await, 951);
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'elsewhere' AND status = 'queued'").await, 1);
        // A sweep that may look at few candidates stops there.
        let out = home.run(&["drive", "--manifest", manifest.to_str().unwrap(), "--limit", "50", "--scan", "10", "--json"]);
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!((&report["scanned"], &report["attempted"]), (&10.into(), &9.into()), "{report}");
    }

    async fn a_drive_runs_passes_of_a_run_up_to_its_bound(home) {
        let manifest = home.manifest("",
            "[jobs.stepper]\ncomponent = \"{guest:stepper}\"\npayload = { scenario = \"counters\", passes = 5 }\n\
             grants.db = { write = [\"step_effects\"] }\ngrants.steps = true\ngrants.links = [\"svc\"]\n\
             [links.svc]\nurl = \"http://127.0.0.1:9/\"\nmethods = [\"POST\"]\n");
        register(&home, &manifest).await;
        kick(&home, "stepper");
        let out = home.run(&["drive", "--manifest", manifest.to_str().unwrap(), "--max-passes", "2", "--json"]);
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!((&report["attempted"], &report["advanced"]), (&1.into(), &1.into()), "{report}");
        assert_eq!(report["runs"][0]["passes"], 2);
        let out = home.run(&["drive", "--manifest", manifest.to_str().unwrap(), "--json"]);
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!((&report["completed"], &report["runs"][0]["passes"]), (&1.into(), &3.into()), "{report}");
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE status = 'succeeded' AND counters = '{\"seen\":10}'").await, 1);
    }

    async fn a_run_with_undecodable_rows_is_still_listed_and_shown(home) {
        let (_, run) = home.run_json(&["--job", &path("hello")]);
        let id = run["run_id"].as_str().unwrap();
        home.exec(&format!("UPDATE jobhost_runs SET payload = 'nope', cursor = 'not json', counters = '{{' WHERE id = '{id}'")).await;
        let listed: Value = serde_json::from_slice(&home.run(&["runs", "list", "--json"]).stdout).unwrap();
        assert_eq!(listed[0]["decode_error"], "payload: not JSON; cursor: not JSON; counters: not JSON", "{listed}");
        assert!(listed[0].get("payload").is_none(), "a list does not carry payloads");
        let shown = show(&home, id);
        assert_eq!((&shown["cursor"], &shown["payload"]), (&Value::Null, &Value::Null));
        assert_eq!(shown["decode_error"], "payload: not JSON; cursor: not JSON; counters: not JSON");
    }

    async fn a_list_leaves_out_a_large_cursor_that_the_run_shows(home) {
        let (_, run) = home.run_json(&["--job", &path("hello")]);
        let id = run["run_id"].as_str().unwrap();
        let cursor = serde_json::to_string(&vec![0; 3000]).unwrap();
        home.exec(&format!("UPDATE jobhost_runs SET cursor = '{cursor}' WHERE id = '{id}'")).await;
        let listed: Value = serde_json::from_slice(&home.run(&["runs", "list", "--json"]).stdout).unwrap();
        assert_eq!((&listed[0]["cursor"], &listed[0]["cursor_omitted"]), (&Value::Null, &Value::Bool(true)), "{listed}");
        assert_eq!(listed[0]["decode_error"], Value::Null);
        let shown = show(&home, id);
        assert_eq!(shown["cursor"].as_array().map(Vec::len), Some(3000));
        assert_eq!(shown["cursor_omitted"], false);
    }
}

/// Registers a manifest's jobs (as a serving host does at start) without serving.
/// On Postgres a job's role may execute `jobhost_record_step` (inside its transaction);
/// the function itself records only for a run running that pass at that generation, so a
/// call from anywhere else plants nothing in any run's ledger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_records_a_step_only_for_a_run_running_that_pass() {
    let home = Home::new(common::Backend::Postgres).await;
    let (code, run) = stepper(&home, r#"{"scenario":"memo","steps":1}"#, &[]);
    assert_eq!(code, 0, "{run}");
    let id = run["run_id"].as_str().unwrap();
    let generation = home
        .scalar(&format!(
            "SELECT generation FROM jobhost_runs WHERE id = '{id}'"
        ))
        .await;
    for (run, pass, generation) in [
        (id, 1, generation),
        (id, 2, generation),
        ("no-such-run", 1, 1),
    ] {
        let recorded = home.scalar(&format!(
            "SELECT CAST(CAST(jobhost_record_step('{run}', {pass}, 'planted', '1', {generation}) AS INT) AS BIGINT)"
        )).await;
        assert_eq!(recorded, 0, "{run} pass {pass}");
    }
    assert_eq!(
        home.scalar("SELECT COUNT(*) FROM jobhost_steps WHERE name = 'planted'")
            .await,
        0
    );
    // A running run at its pass and generation is recorded, as the host's calls are.
    home.exec(&format!(
        "UPDATE jobhost_runs SET status = 'running' WHERE id = '{id}'"
    ))
    .await;
    let pass = home
        .scalar(&format!("SELECT pass FROM jobhost_runs WHERE id = '{id}'"))
        .await;
    let recorded = home.scalar(&format!(
        "SELECT CAST(CAST(jobhost_record_step('{id}', {pass}, 'planted', '1', {generation}) AS INT) AS BIGINT)"
    )).await;
    assert_eq!(recorded, 1);
}

async fn register(home: &Home, manifest: &std::path::Path) {
    let server = home
        .serve(&["--manifest", manifest.to_str().unwrap(), "--workers", "1"])
        .await;
    server.signal("TERM");
    let (code, _) = server.wait_exit(Duration::from_secs(30)).await;
    assert_eq!(code, Some(0));
}

fn start_json(home: &Home, args: &[&str]) -> Value {
    let mut all = vec!["start", "--json"];
    all.extend_from_slice(args);
    let out = home.run(&all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("host start prints JSON")
}

fn kick(home: &Home, job: &str) {
    let out = home.run(&["kick", job]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// How long a kill-and-resume test may take, at most, per backend.
const KILL_BUDGET: Duration = Duration::from_secs(420);

/// The kill-and-resume tests, on both backends.
mod kills {
    use super::*;

    on_every_backend! {
        // The `import` example copies 100 000 source rows in bounded passes, with a step per
        // page whose rows commit with it and the cursor committed with each pass's last page;
        // hosts serving it (and sweeps driving it) are killed at random points at least 20
        // times. Every row is copied exactly once, the cursor and the ledger always match the
        // rows, the counter is exact, and no run's ledger ever holds more than one pass's
        // steps.
        async fn an_import_killed_twenty_times_copies_every_row_once(home) {
            const ITEMS: i64 = 100_000;
            const PAGES_PER_PASS: i64 = 5;
            let manifest = home.manifest("", &format!(
                "[jobs.import]\ncomponent = \"{{guest:import}}\"\ntimeout = \"1s\"\n\
                 retries = 100\nbackoff = \"10ms\"\n\
                 payload = {{ page_size = 200, pages_per_pass = {PAGES_PER_PASS}, pause_ms = 15 }}\n\
                 grants.db = {{ read = [\"import_source\"], write = [\"import_items\"] }}\ngrants.steps = true\n"));
            let manifest = manifest.to_str().unwrap().to_string();
            let out = home.run(&["migrate", "--manifest", &manifest]);
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            home.exec(&format!(
                "INSERT INTO import_source (id, value) \
                 WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {ITEMS}) \
                 SELECT i, 'item-' || i FROM n")).await;
            register(&home, std::path::Path::new(&manifest)).await;
            kick(&home, "import");
            let serve_args = ["--manifest", manifest.as_str(), "--workers", "2", "--lease-grace", "1s",
                "--surveillance-interval", "1s", "--max-reruns", "100"];
            let drive_args = ["drive", "--manifest", manifest.as_str(), "--limit", "1", "--max-passes", "100000",
                "--lease-grace", "1s", "--surveillance-interval", "1s", "--max-reruns", "100"];
            let started = Instant::now();
            let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
            let mut kills = 0;
            while kills < 20 && started.elapsed() < KILL_BUDGET {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let alive = Duration::from_millis(800 + seed % 1500);
                // The next host resumes what surveillance finds once the killed attempt's lease
                // has expired: start it then, so the kill after it lands mid-run.
                wait_for_expired_leases(&home, "import").await;
                let mut child = if kills % 2 == 0 {
                    home.spawn(&[&["serve"][..], &serve_args[..]].concat())
                } else {
                    home.spawn(&drive_args)
                };
                tokio::time::sleep(alive).await;
                let _ = child.kill();
                let _ = child.wait();
                kills += 1;
                // The ledger of a run never holds more than one pass's steps.
                let widest = home.scalar(
                    "SELECT COALESCE(MAX(n), 0) FROM (SELECT COUNT(*) AS n FROM jobhost_steps GROUP BY run_id) s").await;
                assert!(widest <= PAGES_PER_PASS, "a ledger of {widest} steps");
                let passes = home.scalar(
                    "SELECT COALESCE(MAX(n), 0) FROM (SELECT COUNT(DISTINCT pass) AS n FROM jobhost_steps GROUP BY run_id) s").await;
                assert!(passes <= 1, "a ledger spans {passes} passes");
                // A crash hands the ledger on: the step rows belong to one run, the newest.
                let holders = home.scalar("SELECT COUNT(DISTINCT run_id) FROM jobhost_steps").await;
                assert!(holders <= 1, "{holders} runs hold step rows");
                // The rows copied are exactly those the cursor and the ledger account for: the
                // committed passes, and the pages of the current one.
                if let Some((after, in_ledger)) = progress(&home).await {
                    let rows = home.scalar("SELECT COUNT(*) FROM import_items").await;
                    assert_eq!(rows, after + in_ledger, "the cursor and ledger do not match the rows");
                }
            }
            assert!(kills >= 20, "only {kills} kills in {KILL_BUDGET:?}");
            let server = home.serve(&serve_args).await;
            home.wait_for("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'import' AND status = 'succeeded'",
                Duration::from_secs(300)).await;
            drop(server);
            assert_eq!(home.scalar("SELECT COUNT(*) FROM import_items").await, ITEMS);
            assert_eq!(home.scalar("SELECT COUNT(*) FROM import_items i JOIN import_source s ON s.id = i.id AND s.value = i.value").await, ITEMS);
            let done = home.store().await;
            let runs = done.list_runs(&jobhost::store::RunFilter { job: Some("import".into()), limit: 500,
                ..Default::default() }).await.unwrap();
            let finished = runs.iter().find(|r| r.status == "succeeded").expect("a succeeded run");
            let counters: Value = serde_json::from_str(&finished.counters).unwrap();
            assert_eq!(counters["imported"], ITEMS, "{counters}");
            assert!(runs.iter().filter(|r| r.status == "crashed").count() >= 1, "no kill landed mid-run");
            done.close().await;
        }

        // A run of the `import` example is killed mid-pass three times, by turns under
        // `host serve` and `host drive`, each time once its pass recorded steps; then
        // surveillance finds it. Each crash hands the pass's ledger to the rerun in the
        // transaction that queues it: the step rows belong only to the newest run, the
        // crashed run names its rerun (`resumed_by`) and shows no steps, and the rerun
        // skips those pages (every row copied once, the counter exact).
        async fn a_crashed_runs_ledger_moves_to_its_rerun(home) {
            // One pass of 30 pages, the last one short: a kill lands mid-pass.
            const ITEMS: i64 = 2_950;
            let manifest = home.manifest("",
                "[jobs.import]\ncomponent = \"{guest:import}\"\ntimeout = \"10s\"\n\
                 retries = 100\nbackoff = \"10ms\"\n\
                 payload = { page_size = 100, pages_per_pass = 30, pause_ms = 50 }\n\
                 grants.db = { read = [\"import_source\"], write = [\"import_items\"] }\ngrants.steps = true\n");
            let manifest = manifest.to_str().unwrap().to_string();
            let out = home.run(&["migrate", "--manifest", &manifest]);
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            home.exec(&format!(
                "INSERT INTO import_source (id, value) \
                 WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {ITEMS}) \
                 SELECT i, 'item-' || i FROM n")).await;
            let serve_args = ["serve", "--manifest", manifest.as_str(), "--workers", "1", "--lease-grace", "1s",
                "--surveillance-interval", "1s", "--max-reruns", "100"];
            let drive_args = ["drive", "--manifest", manifest.as_str(), "--limit", "1", "--max-passes", "1000",
                "--lease-grace", "1s", "--surveillance-interval", "1s", "--max-reruns", "100"];
            // Registered by a host whose surveillance turn is as short as the others' (the
            // default interval would hold it for 54 s).
            let server = home.serve(&serve_args[1..]).await;
            server.signal("TERM");
            let (code, _) = server.wait_exit(Duration::from_secs(30)).await;
            assert_eq!(code, Some(0));
            kick(&home, "import");
            let store = home.store().await;
            let surveillance = jobhost::service::schedule::surveillance::Surveillance {
                store: store.clone(),
                catalog: None,
                host_id: "the-test".into(),
                interval: Duration::from_millis(100),
                stale: Duration::ZERO,
                max_reruns: 100,
            };
            let newest = async || store.list_runs(&jobhost::store::RunFilter {
                job: Some("import".into()), limit: 1, ..Default::default() }).await.unwrap().remove(0);
            for kill in 0..3 {
                wait_for_expired_leases(&home, "import").await;
                let mut child = home.spawn(if kill % 2 == 0 { &serve_args[..] } else { &drive_args[..] });
                // Killed mid-pass, once this attempt recorded a step of its own.
                home.wait_for("SELECT COUNT(*) FROM jobhost_steps s JOIN jobhost_runs r ON r.id = s.run_id \
                    WHERE r.status = 'running' AND s.generation = r.generation", Duration::from_secs(60)).await;
                let _ = child.kill();
                let _ = child.wait();
                let run = newest().await;
                assert_eq!(run.status, "running", "killed {}", if kill % 2 == 0 { "serve" } else { "drive" });
                wait_for_expired_leases(&home, "import").await;
                // Read once the lease expired: a commit the killed host had sent is finished
                // by the server even after the host died, and belongs to the ledger too.
                let ledger: Vec<(i64, String, String)> = store.run_steps(&run.id).await.unwrap()
                    .into_iter().map(|s| (s.pass, s.name, s.result)).collect();
                let found = Instant::now();
                while surveillance.check().await.unwrap().crashed == 0 {
                    assert!(found.elapsed() < Duration::from_secs(40), "surveillance never found {}", run.id);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                let lost = store.get_run(&run.id).await.unwrap().unwrap();
                let rerun = newest().await;
                assert_eq!((lost.status.as_str(), lost.resumed_by.as_deref()), ("crashed", Some(rerun.id.as_str())));
                assert_eq!((rerun.status.as_str(), rerun.pass), ("queued", run.pass));
                // The ledger moved, whole, to the rerun: its rows belong to no other run.
                assert!(store.run_steps(&lost.id).await.unwrap().is_empty(), "the crashed run kept its ledger");
                let moved: Vec<(i64, String, String)> = store.run_steps(&rerun.id).await.unwrap()
                    .into_iter().map(|s| (s.pass, s.name, s.result)).collect();
                assert!(!ledger.is_empty());
                assert_eq!(moved, ledger);
                assert_eq!(home.scalar(&format!(
                    "SELECT COUNT(*) FROM jobhost_steps WHERE run_id <> '{}'", rerun.id)).await, 0);
                let shown = show(&home, &lost.id);
                assert_eq!((&shown["resumed_by"], &shown["steps"]), (&Value::from(rerun.id.as_str()), &Value::Array(vec![])));
            }
            let server = home.serve(&serve_args[1..]).await;
            home.wait_for("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'import' AND status = 'succeeded'",
                Duration::from_secs(120)).await;
            drop(server);
            assert_eq!(home.scalar("SELECT COUNT(*) FROM import_items").await, ITEMS);
            assert_eq!(home.scalar("SELECT COUNT(*) FROM import_items i JOIN import_source s ON s.id = i.id AND s.value = i.value").await, ITEMS);
            let done = newest().await;
            assert_eq!(done.status, "succeeded");
            let counters: Value = serde_json::from_str(&done.counters).unwrap();
            assert_eq!(counters["imported"], ITEMS, "{counters}");
            assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_steps").await, 0);
            assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE status = 'crashed' AND resumed_by IS NOT NULL").await, 3);
            store.close().await;
        }

        // The stepper guest calls an outside service in steps (`links`); hosts running it
        // are killed at random points. No call of a step is made again after the step was
        // recorded, and every repeat of a call made before carries the same idempotency key:
        // across attempts, and across the reruns of crashed runs.
        async fn a_killed_run_never_calls_again_for_a_recorded_step(home) {
            const CALLS: usize = 30;
            const KILLS: usize = 10;
            let service = common::service::Service::start().await;
            let manifest = home.manifest("", &format!(
                "[jobs.stepper]\ncomponent = \"{{guest:stepper}}\"\ntimeout = \"2s\"\n\
                 retries = 100\nbackoff = \"10ms\"\n\
                 payload = {{ scenario = \"links\", mount = \"svc\", calls = {CALLS}, pause_ms = 60 }}\n\
                 grants.db = {{ write = [\"step_effects\"] }}\ngrants.steps = true\ngrants.links = [\"svc\"]\n\
                 [links.svc]\nurl = \"{}/api/\"\nmethods = [\"POST\"]\n", service.url));
            let manifest = manifest.to_str().unwrap().to_string();
            let out = home.run(&["migrate", "--manifest", &manifest]);
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            // Every step the ledger ever recorded, with when (a rerun takes over its crashed
            // run's ledger rows; each is inserted once, when its step is recorded).
            home.exec("CREATE TABLE steps_audit (name TEXT NOT NULL, recorded_at BIGINT NOT NULL)").await;
            match home.backend {
                common::Backend::Sqlite => {
                    home.exec("CREATE TRIGGER steps_audit AFTER INSERT ON jobhost_steps BEGIN \
                        INSERT INTO steps_audit VALUES (NEW.name, NEW.recorded_at); END").await;
                }
                common::Backend::Postgres => {
                    home.exec("CREATE FUNCTION steps_audit() RETURNS trigger LANGUAGE plpgsql AS $$ \
                        BEGIN INSERT INTO steps_audit VALUES (NEW.name, NEW.recorded_at); RETURN NULL; END $$").await;
                    home.exec("CREATE TRIGGER steps_audit AFTER INSERT ON jobhost_steps \
                        FOR EACH ROW EXECUTE FUNCTION steps_audit()").await;
                }
            }
            register(&home, std::path::Path::new(&manifest)).await;
            kick(&home, "stepper");
            let serve_args = ["serve", "--manifest", manifest.as_str(), "--workers", "1", "--lease-grace", "1s",
                "--surveillance-interval", "1s", "--max-reruns", "100"];
            let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
            for _ in 0..KILLS {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                wait_for_expired_leases(&home, "stepper").await;
                let mut child = home.spawn(&serve_args);
                tokio::time::sleep(Duration::from_millis(700 + seed % 1200)).await;
                let _ = child.kill();
                let _ = child.wait();
            }
            wait_for_expired_leases(&home, "stepper").await;
            let server = home.serve(&serve_args[1..]).await;
            home.wait_for("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'stepper' AND status = 'succeeded'",
                Duration::from_secs(180)).await;
            drop(server);
            let seen = service.seen();
            let store = home.store().await;
            for i in 0..CALLS {
                let name = format!("call-{i}");
                let calls: Vec<_> = seen.iter().filter(|s| s.body == name.as_bytes()).collect();
                assert!(!calls.is_empty(), "{name} was never called");
                let keys: std::collections::BTreeSet<_> =
                    calls.iter().map(|c| c.headers.get("idempotency-key").cloned()).collect();
                assert_eq!(keys.len(), 1, "{name} was called with several keys: {keys:?}");
                assert!(keys.iter().next().unwrap().is_some());
                let recorded = home.scalar(&format!(
                    "SELECT MIN(recorded_at) FROM steps_audit WHERE name = '{name}'")).await;
                let late: Vec<_> = calls.iter().filter(|c| c.at_ms as i64 > recorded).collect();
                assert!(late.is_empty(), "{name} was called again after it was recorded at {recorded}: {late:?}");
            }
            let crashed = home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'stepper' AND status = 'crashed'").await;
            assert!(crashed >= 1, "no kill landed mid-run");
            store.close().await;
        }
    }
}

/// The newest import run's cursor (`after`, 0 before the first pass) and the rows its
/// ledger says the current pass copied; `None` once it succeeded.
async fn progress(home: &Home) -> Option<(i64, i64)> {
    let store = home.store().await;
    let runs = store
        .list_runs(&jobhost::store::RunFilter {
            job: Some("import".into()),
            limit: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    let run = runs.first().expect("an import run");
    if run.status == "succeeded" {
        store.close().await;
        return None;
    }
    let after = run
        .cursor
        .as_deref()
        .map(|c| {
            serde_json::from_str::<Value>(c).unwrap()["after"]
                .as_i64()
                .unwrap_or(0)
        })
        .unwrap_or(0);
    let in_ledger = store
        .run_steps(&run.id)
        .await
        .unwrap()
        .iter()
        .map(|s| {
            serde_json::from_str::<Value>(&s.result).unwrap()["count"]
                .as_i64()
                .unwrap()
        })
        .sum();
    store.close().await;
    Some((after, in_ledger))
}

/// Waits until no lease is held past its expiry: a killed host's runs can be found.
async fn wait_for_expired_leases(home: &Home, job: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        let now = home
            .scalar(match home.backend {
                common::Backend::Sqlite => "SELECT CAST(unixepoch('subsec') * 1000 AS BIGINT)",
                common::Backend::Postgres => {
                    "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"
                }
            })
            .await;
        let held = home.scalar(&format!(
            "SELECT COUNT(*) FROM jobhost_leases WHERE job = '{job}' AND holder IS NOT NULL AND expires_at > {now}")).await;
        if held == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
