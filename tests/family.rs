//! Jobs that start jobs, end to end on both backends: children commit with the parent's
//! transaction or not at all, a superseded attempt starts none, a parent waits for a
//! thousand children and resumes once with their results, a failed child fails a parent
//! that waits with policy `fail`, a cancelled parent takes its attached children with it
//! (at once, however busily they write),
//! grants and tenants bound what a job may start, and a flood stops at the cap; and the
//! Python and JavaScript twins of the `family` guest behave as it does, one test body for
//! the three languages.

use crate::common;

use common::{Home, Server};
use serde_json::Value;
use std::time::{Duration, Instant};

/// The `family` guest as parents (one job per payload) and as `family-child`.
fn manifest(home: &Home) -> std::path::PathBuf {
    let parent = |name: &str, payload: &str, extra: &str| {
        format!(
            r#"
            [jobs.{name}]
            component = "{{guest:family}}"
            grants.db = {{ write = ["ledger"] }}
            grants.jobs = ["family-child"]
            grants.steps = true
            retries = 0
            timeout = "60s"
            payload = {payload}
            {extra}
            "#
        )
    };
    let jobs = [
        parent("commits", "{ children = 100, in_tx = true }", ""),
        parent(
            "rolls-back",
            "{ children = 100, in_tx = true, fail_after = true }",
            "",
        ),
        parent(
            "own-writes",
            "{ children = 100, in_tx = false, fail_after = true }",
            "",
        ),
        parent(
            "gathers",
            r#"{ children = 1000, in_tx = true, wait = "continue" }"#,
            "",
        ),
        parent(
            "strict",
            r#"{ children = 20, failing = [7], delay_ms = 3000, wait = "fail" }"#,
            "",
        ),
        parent(
            "lenient",
            r#"{ children = 5, failing = [1], wait = "continue" }"#,
            "",
        ),
        parent(
            "patient",
            r#"{ children = 10, delay_ms = 60000, wait = "continue" }"#,
            "",
        ),
        parent(
            "busy-family",
            r#"{ children = 2, wait = "continue", child_writes = 10000, child_wait_ms = 150 }"#,
            "",
        ),
        parent(
            "letting-go",
            "{ children = 10, delay_ms = 60000, detached = true, fail_after = true }",
            "",
        ),
        parent(
            "abandons",
            "{ children = 3, busy_ms = 30000, linger_ms = 2000, fail_after = true }",
            "",
        ),
        parent(
            "superseded",
            "{ children = 10, in_tx = true, wait_ms = 3000 }",
            "",
        ),
        parent(
            "flood",
            "{ children = 10001, delay_ms = 3600000, detached = true }",
            "",
        ),
        parent("ungranted", r#"{ children = 1, job = "commits" }"#, ""),
        parent(
            "beside",
            r#"{ children = 2, in_tx = true, beside = ["enqueue", "kick", "emit", "result"] }"#,
            "grants.jobs = [\"family-child\", \"event:nudge\"]",
        ),
        parent(
            "acme-parent",
            r#"{ children = 1, job = "beta-child" }"#,
            "tenant = \"acme\"\ngrants.jobs = [\"family-child\", \"beta-child\"]",
        ),
    ];
    // One component is parent and child: the children are granted what it imports.
    let children = r#"
        [jobs.family-child]
        component = "{guest:family}"
        grants.db = { write = ["ledger"] }
        grants.jobs = ["family-child"]
        grants.steps = true
        retries = 0
        [jobs.beta-child]
        component = "{guest:family}"
        grants.db = { write = ["ledger"] }
        grants.jobs = ["family-child"]
        grants.steps = true
        tenant = "beta"
        retries = 0
    "#;
    // `acme-parent` and `beside` have their own grants.jobs: drop the shared line.
    let jobs: String = jobs
        .iter()
        .map(|j| {
            if j.matches("grants.jobs").count() > 1 {
                j.replacen("grants.jobs = [\"family-child\"]\n", "", 1)
            } else {
                j.clone()
            }
        })
        .collect();
    home.manifest("", &format!("{jobs}{children}"))
}

/// A fork bomb (each run queues two more of its job) of tenant acme, whose queue is
/// capped at 30; a chain (each run queues one more); and jobs of another tenant, one of
/// them with a queue of one.
fn bounded_manifest(home: &Home) -> std::path::PathBuf {
    let job = |name: &str, tenant: &str, payload: &str| {
        format!(
            r#"
            [jobs.{name}]
            component = "{{guest:family}}"
            tenant = "{tenant}"
            grants.db = {{ write = ["ledger"] }}
            grants.jobs = ["{name}"]
            grants.steps = true
            retries = 0
            payload = {payload}
            "#
        )
    };
    let jobs = [
        "[tenants.acme]\nmax_queued = 30\n".to_string(),
        job(
            "bomb",
            "acme",
            r#"{ children = 2, job = "bomb", forks = true, detached = true }"#,
        ),
        job(
            "chain",
            "default",
            r#"{ children = 1, job = "chain", forks = true, detached = true }"#,
        ),
        job("beta-work", "beta", "{}"),
        job("capped", "beta", "{}") + "max_queued = 1\n",
    ];
    home.manifest("", &jobs.concat())
}

async fn kick(server: &Server, job: &str) -> String {
    let (status, kicked) = server.post(&format!("/jobs/{job}/kick")).await;
    assert_eq!(status, 202, "{kicked}");
    kicked["run_id"].as_str().expect("queued").to_string()
}

async fn run(server: &Server, id: &str) -> Value {
    let (status, run) = server.get(&format!("/runs/{id}")).await;
    assert_eq!(status, 200, "{run}");
    run
}

async fn wait_run(
    server: &Server,
    id: &str,
    within: Duration,
    what: &str,
    ok: impl Fn(&Value) -> bool,
) -> Value {
    let start = Instant::now();
    loop {
        let run = run(server, id).await;
        if ok(&run) {
            return run;
        }
        assert!(
            start.elapsed() < within,
            "timed out waiting for {what}: {run}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn ended(server: &Server, id: &str) -> Value {
    wait_run(server, id, Duration::from_secs(60), "the run's end", |r| {
        !["queued", "claimed", "running", "waiting"]
            .contains(&r["status"].as_str().unwrap_or_default())
    })
    .await
}

/// The wall clock in milliseconds, as the `family` guest's children stamp their rows.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Rows the children of `parent` committed, `filter` further narrowing them.
async fn children_rows(home: &Home, parent: &str, filter: &str) -> i64 {
    home.scalar(&format!(
        "SELECT COUNT(*) FROM ledger WHERE run_id IN \
         (SELECT id FROM jobhost_runs WHERE parent_run = '{parent}') {filter}"
    ))
    .await
}

async fn children(home: &Home, parent: &str, filter: &str) -> i64 {
    home.scalar(&format!(
        "SELECT COUNT(*) FROM jobhost_runs WHERE parent_run = '{parent}' {filter}"
    ))
    .await
}

/// The `family` guest and its twins, by language: the component, and the suffix of the
/// jobs that run it (`lenient-py`, `py-child`).
fn family_in(lang: &str) -> (std::path::PathBuf, &'static str) {
    match lang {
        "rust" => (common::guest("family"), "rs"),
        "python" => (common::polyglot("python/family"), "py"),
        _ => (common::polyglot("js/family"), "js"),
    }
}

/// What the `sample` step reads back in each language, on the first run as on a resume:
/// the JSON form the host keeps, keys in order (Python's tuple a list, its `3` a string;
/// JavaScript's `Date` a string, its `undefined` gone or null).
fn sample_line(lang: &str) -> &'static str {
    match lang {
        "rust" => r#"step sample: {"3":"three","pair":[1,"a"]}"#,
        "python" => "step sample: {'3': 'three', 'pair': [1, 'a']}",
        _ => r#"step sample: {list: [null, 1], pair: [1, "a"], when: "1970-01-01T00:00:00.000Z"}"#,
    }
}

/// Three parents and their children for the guest of each language: `lenient-X` (steps,
/// retries, a failing child, waits and sums), `strict-X` (fails with a child) and
/// `beside-X` (calls beside its open transaction).
fn three_languages_manifest(home: &Home) -> std::path::PathBuf {
    let mut jobs = String::new();
    for lang in ["rust", "python", "js"] {
        let (component, x) = family_in(lang);
        let component = component.display();
        let job = |name: &str, retries: u32, payload: &str, also: &str| {
            format!(
                "[jobs.{name}]\ncomponent = \"{component}\"\nmemory = \"64MiB\"\ntimeout = \"60s\"\n\
                 retries = {retries}\ngrants.db = {{ write = [\"ledger\"] }}\ngrants.steps = true\n\
                 grants.jobs = [\"{x}-child\"{also}]\npayload = {payload}\n"
            )
        };
        jobs += &job(
            &format!("lenient-{x}"),
            1,
            &format!(
                r#"{{ children = 3, in_tx = true, failing = [1], wait = "continue", step = true, job = "{x}-child" }}"#
            ),
            "",
        );
        jobs += &job(
            &format!("strict-{x}"),
            0,
            &format!(
                r#"{{ children = 2, failing = [1], wait = "fail", delay_ms = 3000, job = "{x}-child" }}"#
            ),
            "",
        );
        jobs += &job(
            &format!("beside-{x}"),
            0,
            &format!(
                r#"{{ children = 2, in_tx = true, beside = ["enqueue", "kick", "emit", "result"], job = "{x}-child" }}"#
            ),
            r#", "event:nudge""#,
        );
        jobs += &job(
            &format!("starts-{x}"),
            0,
            &format!(r#"{{ children = 0, start_key = "key-{x}", job = "{x}-child" }}"#),
            "",
        );
        jobs += &job(&format!("{x}-child"), 0, "{}", "");
    }
    home.manifest("", &jobs)
}

/// Every attempt's log of run `id`, oldest first (as the run view lists them).
async fn attempt_logs(server: &Server, id: &str) -> Vec<String> {
    run(server, id).await["attempt_records"]
        .as_array()
        .expect("attempt records")
        .iter()
        .map(|a| a["log"].as_str().unwrap_or_default().to_string())
        .collect()
}

on_every_backend! {
    async fn children_commit_with_the_parents_transaction_or_not_at_all(home) {
        let m = manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;

        let failed = kick(&server, "rolls-back").await;
        let run = ended(&server, &failed).await;
        assert_eq!(run["status"], "failed", "{run}");
        assert_eq!(children(&home, &failed, "").await, 0, "a rolled-back transaction queued runs");
        let rows = home.scalar(&format!("SELECT COUNT(*) FROM ledger WHERE run_id = '{failed}'")).await;
        assert_eq!(rows, 0);

        let ok = kick(&server, "commits").await;
        let run = ended(&server, &ok).await;
        assert_eq!(run["status"], "succeeded", "{run}");
        assert_eq!(children(&home, &ok, "").await, 100);
        assert_eq!(children(&home, &ok, "AND parent_attempt = 1 AND origin = 'child'").await, 100);
        let rows = home.scalar(&format!("SELECT COUNT(*) FROM ledger WHERE run_id = '{ok}'")).await;
        assert_eq!(rows, 1, "the rows and the runs commit together");
        // Each child runs, as the parent's tenant, started by it.
        let start = Instant::now();
        while children(&home, &ok, "AND status = 'succeeded'").await < 100 {
            assert!(start.elapsed() < Duration::from_secs(60), "children did not all run");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let child = server.runs(Some("family-child")).await[0]["run_id"]
            .as_str()
            .unwrap()
            .to_string();
        let log = home.run(&["runs", "show", &child]);
        let shown = String::from_utf8_lossy(&log.stdout).to_string();
        assert!(shown.contains(&format!("Parent(\"{ok}\")")), "{shown}");

        // Outside a transaction each call is its own write: the parent's later failure
        // does not undo them.
        let own = kick(&server, "own-writes").await;
        assert_eq!(ended(&server, &own).await["status"], "failed");
        assert_eq!(children(&home, &own, "").await, 100);
    }

    async fn a_family_runs_alike_in_rust_python_and_javascript(home) {
        // One body, three guests: the Rust `family` and its Python and JavaScript twins
        // queue children in their transaction, wait, read how each ended, hand results back,
        // say where they stand in their run, and read a step's value back through JSON on
        // the first run as on the retry.
        let m = three_languages_manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        for lang in ["rust", "python", "js"] {
            let (_, x) = family_in(lang);
            let id = kick(&server, &format!("lenient-{x}")).await;
            let done = ended(&server, &id).await;
            assert_eq!(done["status"], "succeeded", "{lang}: {done}");
            assert_eq!(done["result"], serde_json::json!({"succeeded": 2, "other": 1, "sum": 2}), "{lang}: {done}");
            assert_eq!((&done["passes"], &done["attempts"]), (&2.into(), &3.into()), "{lang}: {done}");
            let logs = attempt_logs(&server, &id).await;
            assert_eq!(logs.len(), 3, "{lang}: {logs:?}");
            let places = [
                "pass 1 attempt 1: final=false retries_left=1 started_by=StartedBy::Kick deferrals=0",
                "pass 1 attempt 2: final=true retries_left=0 started_by=StartedBy::Kick deferrals=0",
                "pass 2 attempt 1: final=false retries_left=1 started_by=StartedBy::Kick deferrals=0",
            ];
            for (log, place) in logs.iter().zip(places) {
                assert!(log.contains(place), "{lang}: {place} in {log}");
            }
            let sample = |log: &str| log.lines().find(|l| l.contains("step sample: ")).map(str::to_string);
            let (first, again) = (sample(&logs[0]), sample(&logs[1]));
            assert_eq!(first, again, "{lang}: the step read differently on its first run and its retry");
            let first = first.unwrap_or_else(|| panic!("{lang}: no step line in {logs:?}"));
            assert!(first.ends_with(sample_line(lang)), "{lang}: {first}");
            assert!(logs[2].contains("children: 2 succeeded, 1 other, sum 2"), "{lang}: {}", logs[2]);
            // The children were queued by the second attempt, with its ledger row.
            assert_eq!(children(&home, &id, "AND parent_attempt = 2 AND origin = 'child'").await, 3, "{lang}");
            let rows = home.scalar(&format!("SELECT COUNT(*) FROM ledger WHERE run_id = '{id}'")).await;
            assert_eq!(rows, 1, "{lang}");
            let kids: Vec<String> = server.runs(Some(&format!("{x}-child"))).await.iter()
                .filter(|r| r["parent_run"] == id.as_str())
                .map(|r| r["run_id"].as_str().unwrap().to_string())
                .collect();
            assert_eq!(kids.len(), 3, "{lang}");
            let said = attempt_logs(&server, &kids[0]).await.concat();
            assert!(said.contains(&format!("started_by=StartedBy::Parent(\"{id}\")")), "{lang}: {said}");

            let strict = kick(&server, &format!("strict-{x}")).await;
            let failed = ended(&server, &strict).await;
            assert_eq!((&failed["status"], &failed["code"]), (&"failed".into(), &"child_failed".into()), "{lang}: {failed}");

            let beside = kick(&server, &format!("beside-{x}")).await;
            let done = ended(&server, &beside).await;
            assert_eq!(done["status"], "succeeded", "{lang}: {done}");
            let said = attempt_logs(&server, &beside).await.concat();
            for call in ["enqueue", "kick", "emit", "result"] {
                assert!(said.contains(&format!("beside {call}: invalid call: transaction-open")), "{lang} {call}: {said}");
            }

            // Starts with options (WIT 0.1.7): a unique key held until finished, the
            // second start joining the first's run, which keeps its one attempt.
            let starts = kick(&server, &format!("starts-{x}")).await;
            assert_eq!(ended(&server, &starts).await["status"], "succeeded", "{lang}");
            let said = attempt_logs(&server, &starts).await.concat();
            assert!(said.contains(&format!("started key-{x}: created then joined, one run: true")), "{lang}: {said}");
            let started = home.scalar(&format!(
                "SELECT COUNT(*) FROM jobhost_runs WHERE job = '{x}-child' AND parent_run = '{starts}' \
                 AND max_attempts = 1 AND detached = 1 AND status = 'queued'"
            )).await;
            assert_eq!(started, 1, "{lang}");
            assert_eq!(children(&home, &beside, "").await, 2, "{lang}");
        }
    }

    async fn a_superseded_attempt_starts_nothing(home) {
        let m = manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let id = kick(&server, "superseded").await;
        wait_run(&server, &id, Duration::from_secs(20), "the attempt", |r| r["status"] == "running").await;
        // What a takeover does to the lease while the attempt still runs (its host
        // frozen, say): the generation moves on.
        let moved = home
            .exec(&format!(
                "UPDATE jobhost_leases SET generation = generation + 1 WHERE holder = '{id}'"
            ))
            .await;
        assert_eq!(moved, 1);
        let run = ended(&server, &id).await;
        assert_eq!(run["code"], "lease_lost", "{run}");
        assert_eq!(children(&home, &id, "").await, 0, "a superseded attempt's runs appeared");
        let rows = home.scalar(&format!("SELECT COUNT(*) FROM ledger WHERE run_id = '{id}'")).await;
        assert_eq!(rows, 0);
        // The host serves on.
        let next = kick(&server, "commits").await;
        assert_eq!(ended(&server, &next).await["status"], "succeeded");
    }

    async fn a_parent_waits_for_a_thousand_children_and_resumes_once_with_their_results(home) {
        let m = manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let id = kick(&server, "gathers").await;
        let waiting = wait_run(&server, &id, Duration::from_secs(30), "the wait", |r| {
            r["status"] == "waiting" || r["status"] == "succeeded"
        })
        .await;
        assert_eq!(waiting["status"], "waiting", "it should sleep while children run: {waiting}");
        assert_eq!(waiting["waits_for"], "continue");
        let metrics = server.text("/metrics").await;
        assert!(metrics.contains("jobhost_runs{status=\"waiting\""), "{metrics}");
        let run = wait_run(&server, &id, Duration::from_secs(240), "the parent's end", |r| {
            r["status"] == "succeeded" || r["status"] == "failed"
        })
        .await;
        assert_eq!(run["status"], "succeeded", "{run}");
        assert_eq!(run["result"]["succeeded"], 1000, "{run}");
        assert_eq!(run["result"]["other"], 0, "{run}");
        assert_eq!(run["result"]["sum"], 999 * 1000 / 2, "{run}");
        // Two passes, one attempt each: it resumed once, and waiting used no attempt.
        assert_eq!(run["passes"], 2, "{run}");
        assert_eq!(run["attempts"], 2, "{run}");
        assert_eq!(children(&home, &id, "AND status = 'succeeded'").await, 1000);
    }

    async fn a_failed_child_fails_a_strict_parent_and_a_lenient_one_reads_it(home) {
        let m = manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let strict = kick(&server, "strict").await;
        let run = ended(&server, &strict).await;
        assert_eq!(run["status"], "failed", "{run}");
        assert_eq!(run["code"], "child_failed", "{run}");
        assert_eq!(run["passes"], 2, "the next pass never ran: {run}");
        let start = Instant::now();
        while children(&home, &strict, "AND status IN ('queued', 'running')").await > 0 {
            assert!(start.elapsed() < Duration::from_secs(20), "children were left running");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(children(&home, &strict, "AND status = 'cancelled' AND last_code = 'parent_failed'").await, 19);
        let reports = home
            .scalar(&format!("SELECT COUNT(*) FROM jobhost_reports WHERE run_id = '{strict}'"))
            .await;
        assert_eq!(reports, 1);

        let lenient = kick(&server, "lenient").await;
        let run = ended(&server, &lenient).await;
        assert_eq!(run["status"], "succeeded", "{run}");
        assert_eq!(run["result"]["succeeded"], 4, "{run}");
        assert_eq!(run["result"]["other"], 1, "{run}");
    }

    async fn a_cancelled_or_failed_parent_takes_its_attached_children_only(home) {
        let m = manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let attached = kick(&server, "patient").await;
        wait_run(&server, &attached, Duration::from_secs(20), "the wait", |r| r["status"] == "waiting").await;
        let (status, body) = server.post(&format!("/runs/{attached}/cancel")).await;
        assert_eq!(status, 200, "{body}");
        // A parent that fails after starting detached children leaves them be.
        let detached = kick(&server, "letting-go").await;
        assert_eq!(ended(&server, &detached).await["status"], "failed");
        let start = Instant::now();
        while children(&home, &attached, "AND status = 'queued'").await > 0 {
            assert!(start.elapsed() < Duration::from_secs(20), "attached children survived");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(children(&home, &attached, "AND last_code = 'parent_failed'").await, 10);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(children(&home, &detached, "AND status = 'queued'").await, 10, "detached children were cancelled");
    }

    async fn a_failed_parents_running_children_end_parent_failed_every_time(home) {
        // A parent that fails while its children run, again and again (on Postgres with a
        // second host, so some children are stopped through the other host's watch): every
        // child's run, attempt and report says `parent_failed`, never the operator's code —
        // the attempt is stopped with its run's ending, whichever is recorded first.
        let m = manifest(&home);
        let args = ["--manifest", m.to_str().unwrap(), "--workers", "8"];
        let server = home.serve(&args).await;
        let _second = match home.backend {
            common::Backend::Postgres => Some(home.serve(&args).await),
            common::Backend::Sqlite => None,
        };
        let mut stopped = 0;
        for round in 0..6 {
            let parent = kick(&server, "abandons").await;
            let run = ended(&server, &parent).await;
            assert_eq!(run["code"], "handler_failed", "{run}");
            let start = Instant::now();
            while children(&home, &parent, "AND status IN ('queued', 'running')").await > 0 {
                // Well before the children's 30 s of work would end them.
                assert!(start.elapsed() < Duration::from_secs(20), "round {round}: children were left running\n{}", home.server_logs());
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let of_children = format!("run_id IN (SELECT id FROM jobhost_runs WHERE parent_run = '{parent}')");
            assert_eq!(children(&home, &parent, "AND status = 'cancelled' AND last_code = 'parent_failed'").await, 3, "round {round}");
            let attempts = home.scalar(&format!("SELECT COUNT(*) FROM jobhost_attempts WHERE {of_children}")).await;
            let right = home.scalar(&format!("SELECT COUNT(*) FROM jobhost_attempts WHERE {of_children} \
                AND status = 'cancelled' AND code = 'parent_failed'")).await;
            assert_eq!(right, attempts, "round {round}: an attempt recorded another code");
            assert!(attempts >= 1, "round {round}: no child was mid-attempt");
            stopped += attempts;
            let reports = home.scalar(&format!("SELECT COUNT(*) FROM jobhost_reports WHERE {of_children} \
                AND kind = 'cancelled' AND code = 'parent_failed'")).await;
            let all_reports = home.scalar(&format!("SELECT COUNT(*) FROM jobhost_reports WHERE {of_children}")).await;
            assert_eq!((reports, all_reports), (3, 3), "round {round}: one report per child");
        }
        for table in ["jobhost_runs WHERE last_code", "jobhost_attempts WHERE code", "jobhost_reports WHERE code"] {
            let operator = home.scalar(&format!("SELECT COUNT(*) FROM {table} = 'cancelled_by_operator'")).await;
            assert_eq!(operator, 0, "{table}: no operator cancelled anything");
        }
        assert!(stopped >= 6, "{stopped}");
    }

    async fn cancelling_a_waiting_parent_stops_its_busily_writing_children_at_once(home) {
        let m = manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        for round in 0..3u64 {
            let parent = kick(&server, "busy-family").await;
            wait_run(&server, &parent, Duration::from_secs(20), "the wait", |r| r["status"] == "waiting").await;
            // Both children run and write (on SQLite one may be starved of the write lock
            // by the other, as any busy writer starves the rest).
            let start = Instant::now();
            while children_rows(&home, &parent, "").await == 0
                || children(&home, &parent, "AND status = 'running'").await < 2
            {
                assert!(start.elapsed() < Duration::from_secs(30), "the children write");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tokio::time::sleep(Duration::from_millis(37 * round % 200)).await;
            let asked = Instant::now();
            let out = home.run(&["runs", "cancel", &parent]);
            let took = asked.elapsed();
            let returned = now_ms();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            while children(&home, &parent, "AND status IN ('queued', 'running')").await > 0 {
                assert!(asked.elapsed() < Duration::from_secs(10), "the children outlived their parent");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            println!(
                "{:?} round {round}: the parent's cancel returned in {} ms, its children ended within {} ms",
                home.backend,
                took.as_millis(),
                asked.elapsed().as_millis()
            );
            assert!(took < Duration::from_secs(2), "the cancel returned in {took:?}");
            assert_eq!(run(&server, &parent).await["status"], "cancelled");
            assert_eq!(children(&home, &parent, "AND status = 'cancelled'").await, 2, "no child ended otherwise");
            // The family sweep cancels the children within its period (250 ms) of the
            // parent's cancel: no child transaction begun after that committed.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let late = children_rows(&home, &parent, &format!("AND n > {}", returned + 1000)).await;
            assert_eq!(late, 0, "round {round}: a child's transaction begun after the family's cancel committed");
        }
    }

    async fn a_job_starts_only_what_it_was_granted_and_its_tenant_may_run(home) {
        let m = manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let ungranted = kick(&server, "ungranted").await;
        let run = ended(&server, &ungranted).await;
        assert_eq!(run["code"], "capability_refused", "{run}");
        assert!(run["error"].as_str().unwrap_or_default().contains("job-not-granted"), "{run}");
        let foreign = kick(&server, "acme-parent").await;
        let run = ended(&server, &foreign).await;
        assert_eq!(run["code"], "capability_refused", "{run}");
        assert!(run["error"].as_str().unwrap_or_default().contains("job-of-another-tenant"), "{run}");
        for id in [&ungranted, &foreign] {
            assert_eq!(children(&home, id, "").await, 0);
        }
    }

    async fn a_call_beside_the_guests_own_transaction_is_refused_at_once_and_nothing_is_lost(home) {
        // After queueing inside its transaction, the parent enqueues, kicks, emits and
        // sets its result outside it. Each would wait for a lock the guest's own
        // transaction holds (SQLite's one write lock; on Postgres the parent's row, which
        // the transaction's attached children mark) until the transaction's bound rolled
        // it back: each is refused at once, and the transaction commits.
        let m = manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let id = kick(&server, "beside").await;
        let run = ended(&server, &id).await;
        assert_eq!(run["status"], "succeeded", "{run}");
        let shown = home.run(&["runs", "show", &id]);
        let shown = String::from_utf8_lossy(&shown.stdout).to_string();
        for call in ["enqueue", "kick", "emit", "result"] {
            assert!(shown.contains(&format!("beside {call}: invalid call: transaction-open")), "{call}: {shown}");
        }
        assert_eq!(children(&home, &id, "").await, 2, "the runs queued in the transaction");
        let rows = home.scalar(&format!("SELECT COUNT(*) FROM ledger WHERE run_id = '{id}'")).await;
        assert_eq!(rows, 1, "the transaction committed");
        assert!(run["result"].is_null(), "{run}");
    }

    async fn a_fork_bomb_stops_at_its_tenants_cap_and_another_tenants_job_still_runs(home) {
        let m = bounded_manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap(), "--workers", "2"]).await;
        kick(&server, "bomb").await;
        let refused = "SELECT COUNT(*) FROM jobhost_runs WHERE job = 'bomb' AND last_code = 'queue_full'";
        let start = Instant::now();
        while home.scalar(refused).await == 0 {
            assert!(start.elapsed() < Duration::from_secs(60), "the bomb was never refused");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let bomb = server.runs(Some("bomb")).await;
        let failed = bomb.iter().find(|r| r["code"] == "queue_full").expect("a refused run");
        assert!(failed["error"].as_str().unwrap_or_default().contains("queue-full"), "{failed}");
        // While the bomb presses on the cap, acme's queue stays within it, give or take
        // the calls in flight (two workers, two runs each).
        let queued = "SELECT COUNT(*) FROM jobhost_runs WHERE tenant = 'acme' AND status = 'queued'";
        for _ in 0..10 {
            let n = home.scalar(queued).await;
            assert!(n <= 30 + 4, "acme has {n} runs queued");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // Another tenant's job still runs.
        let other = kick(&server, "beta-work").await;
        assert_eq!(ended(&server, &other).await["status"], "succeeded");
        // Paused, the bomb stops taking runs off the queue; starts fill it to the cap, and
        // the next is refused: 429 through the API, exit 5 from the CLI.
        let (status, body) = server.post("/pauses/job/bomb").await;
        assert_eq!(status, 200, "{body}");
        let running = "SELECT COUNT(*) FROM jobhost_runs WHERE job = 'bomb' AND status = 'running'";
        for _ in 0..2 {
            let start = Instant::now();
            while home.scalar(running).await > 0 {
                assert!(start.elapsed() < Duration::from_secs(30), "the bomb kept running");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            tokio::time::sleep(Duration::from_millis(1500)).await;
        }
        let mut refused = None;
        for i in 0..40 {
            let body = format!(r#"{{"instance": "top-{i}"}}"#);
            let (status, answer) = server.post_as(Some(&server.token), "/jobs/bomb/runs", Some(&body)).await;
            if status == 429 {
                refused = Some((i, answer));
                break;
            }
            assert_eq!(status, 201, "{answer}");
        }
        let (i, body) = refused.expect("a start past the cap was refused");
        assert_eq!(body["error"]["code"], "queue_full", "{body}");
        let n = home.scalar(queued).await;
        assert!((30..=34).contains(&n), "acme has {n} runs queued");
        let out = home.run(&["start", "bomb", "--instance", "cli"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(5), "{stderr}");
        assert!(stderr.contains("queue_full"), "{stderr}");
        let instances = format!("SELECT COUNT(*) FROM jobhost_runs WHERE instance IN ('top-{i}', 'cli')");
        assert_eq!(home.scalar(&instances).await, 0, "a refused start queued a run");
        // A job's own cap holds as its tenant's does: the paused job has one run queued.
        let (status, body) = server.post("/pauses/job/capped").await;
        assert_eq!(status, 200, "{body}");
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let start = |i: &str| format!(r#"{{"instance": "{i}"}}"#);
        let (status, body) = server.post_as(Some(&server.token), "/jobs/capped/runs", Some(&start("one"))).await;
        assert_eq!(status, 201, "{body}");
        let (status, body) = server.post_as(Some(&server.token), "/jobs/capped/runs", Some(&start("two"))).await;
        assert_eq!((status, &body["error"]["code"]), (429, &serde_json::json!("queue_full")), "{body}");
        assert!(body["error"]["message"].as_str().unwrap_or_default().contains("job \"capped\""), "{body}");
        // Metrics and the console show acme at its cap.
        let metrics = server.text("/metrics").await;
        assert!(metrics.contains("jobhost_tenant_queue_full{tenant=\"acme\"} 1"), "{metrics}");
        let (_, overview) = server.get("/overview").await;
        assert_eq!(overview["queue_full"][0]["tenant"], "acme", "{overview}");
        assert_eq!(overview["queue_full"][0]["max_queued"], 30, "{overview}");
    }

    async fn a_chain_of_runs_stops_at_the_family_depth_limit(home) {
        // Each run of `chain` queues the next: run 0 is kicked, run 16 may not start 17.
        let m = bounded_manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        kick(&server, "chain").await;
        let ended_runs = "SELECT COUNT(*) FROM jobhost_runs WHERE job = 'chain' \
            AND status NOT IN ('queued', 'running')";
        let start = Instant::now();
        while home.scalar(ended_runs).await < 17 {
            assert!(start.elapsed() < Duration::from_secs(90), "the chain did not reach its end");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'chain'").await, 17);
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'chain' AND status = 'succeeded'").await, 16);
        let last = server.runs(Some("chain")).await;
        let last = last.iter().find(|r| r["status"] == "failed").expect("the last run failed");
        assert_eq!(last["code"], "family_too_deep", "{last}");
    }

    async fn a_flood_of_enqueues_stops_at_the_cap_with_the_host_healthy(home) {
        let m = manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let id = kick(&server, "flood").await;
        let run = ended(&server, &id).await;
        assert_eq!(run["code"], "run_limit", "{run}");
        assert!(run["error"].as_str().unwrap_or_default().contains("run-limit"), "{run}");
        assert_eq!(children(&home, &id, "").await, 10_000);
        let next = kick(&server, "commits").await;
        assert_eq!(ended(&server, &next).await["status"], "succeeded");
    }

    async fn a_guests_starts_obey_max_per_tenant_as_an_api_start_does(home) {
        // Parents each start three children of a job with `max_per_tenant = 1`: in their
        // transaction, over `skip`; in writes of their own, over `defer`.
        let m = home.manifest("", r#"
            [jobs.skipping]
            component = "{guest:family}"
            grants.db = { write = ["ledger"] }
            grants.jobs = ["capped-child"]
            grants.steps = true
            retries = 0
            payload = { children = 3, in_tx = true, delay_ms = 3600000, detached = true, job = "capped-child" }
            [jobs.deferring]
            component = "{guest:family}"
            grants.jobs = ["paced-child"]
            grants.steps = true
            retries = 0
            payload = { children = 3, delay_ms = 3600000, detached = true, job = "paced-child" }
            [jobs.capped-child]
            component = "{guest:family}"
            grants.jobs = ["capped-child"]
            grants.steps = true
            max_per_tenant = 1
            [jobs.paced-child]
            component = "{guest:family}"
            grants.jobs = ["paced-child"]
            grants.steps = true
            max_per_tenant = 1
            over_limit = "defer"
        "#);
        let m = m.to_str().unwrap();
        for parent in ["skipping", "deferring"] {
            let (code, run) = home.run_json(&[parent, "--manifest", m]);
            assert_eq!((code, run["status"].as_str()), (0, Some("succeeded")), "{run}");
        }
        let count = |condition: &str| {
            format!("SELECT COUNT(*) FROM jobhost_runs WHERE {condition}")
        };
        // Over `skip`: one queued, two skipped `tenant_limit` and reported as dropped.
        assert_eq!(home.scalar(&count("job = 'capped-child' AND status = 'queued'")).await, 1);
        assert_eq!(
            home.scalar(&count("job = 'capped-child' AND status = 'skipped' AND last_code = 'tenant_limit' AND attempts = 0")).await,
            2
        );
        assert_eq!(
            home.scalar("SELECT COUNT(*) FROM jobhost_reports WHERE kind = 'dropped' AND job = 'capped-child' AND code = 'tenant_limit'").await,
            2
        );
        // Over `defer`: one holds the slot, two wait for it.
        assert_eq!(home.scalar(&count("job = 'paced-child' AND status = 'queued' AND waiting = 0")).await, 1);
        assert_eq!(home.scalar(&count("job = 'paced-child' AND status = 'queued' AND waiting = 1")).await, 2);
        // A start from the command line meets the same cap.
        let kicked = home.run(&["kick", "capped-child", "--instance", "x", "--json"]);
        let kicked: Value = serde_json::from_slice(&kicked.stdout).unwrap();
        assert_eq!(kicked["result"], "dropped", "{kicked}");
        assert_eq!(home.scalar(&count("job = 'capped-child' AND status = 'skipped'")).await, 3);
    }
}

#[test]
fn a_manifest_granting_an_unknown_job_is_refused_at_load() {
    let home = tempfile::tempdir().unwrap();
    let manifest = home.path().join("jobhost.toml");
    std::fs::write(
        &manifest,
        format!(
            "[jobs.parent]\ncomponent = \"{}\"\ngrants.jobs = [\"nope\", \"event:Bad Name\"]\n",
            common::guest("family").display()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_host"))
        .args(["check", "--manifest", manifest.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("grants.jobs"), "{stderr}");
}

/// `host run` of a parent registers the jobs it may start, so its runs are queued; a pass
/// that waits ends the command, saying what becomes of the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_run_queues_a_parents_children_and_says_what_a_wait_leaves() {
    let home = Home::new(common::Backend::Sqlite).await;
    let m = manifest(&home);
    let out = home.run(&["run", "commits", "--manifest", m.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let queued = home
        .scalar(
            "SELECT COUNT(*) FROM jobhost_runs WHERE job = 'family-child' AND status = 'queued'",
        )
        .await;
    assert_eq!(queued, 100, "{stdout}");

    let out = home.run(&["run", "lenient", "--manifest", m.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains(": waiting after 1 attempt"), "{stdout}");
    assert!(stdout.contains("host runs cancel"), "{stdout}");
}
