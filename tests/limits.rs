//! Claim limits end to end (issue 40), with the real binary and the `hello` guest, on both
//! backends: per-key FIFO, `concurrency` and `key_concurrency` across racing hosts (one
//! killed mid-run), `rate`, and runs claimed ahead of a free worker shown `claimed` until
//! their guests start. Each checker reads the recorded times back from the database: an
//! attempt's row spans its guest's start to its recorded ending, within the span the claim
//! counted its slot (from the claim to the ending), so the limits cover every attempt's
//! span; the rate's starts are the claims', as the claim entered them in the window.

use crate::common;

use common::{Backend, Home, Server};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

fn count(runs: &[Value], f: impl Fn(&Value) -> bool) -> usize {
    runs.iter().filter(|r| f(r)).count()
}

fn status(r: &Value) -> &str {
    r["status"].as_str().unwrap_or_default()
}

/// Rows of `sql` whose columns are all integers or text, as strings.
async fn rows(home: &Home, sql: &str) -> Vec<Vec<String>> {
    use sqlx::Row;
    let store = home.store().await;
    // Each backend's rows are their own type: one body, read for either.
    macro_rules! read_all {
        ($pool:expr) => {
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .fetch_all($pool)
                .await
                .expect("rows")
                .iter()
                .map(|r| {
                    (0..r.columns().len())
                        .map(|i| {
                            r.try_get::<i64, _>(i)
                                .map(|v| v.to_string())
                                .or_else(|_| r.try_get::<String, _>(i))
                                .unwrap_or_default()
                        })
                        .collect::<Vec<_>>()
                })
                .collect()
        };
    }
    let found = match store.pool() {
        jobhost::store::Pool::Sqlite(p) => read_all!(p),
        jobhost::store::Pool::Postgres(p) => read_all!(p),
    };
    store.close().await;
    found
}

/// The most spans (`[start, end)` in ms) that were open at one moment.
fn most_at_once(spans: &[(i64, i64)]) -> usize {
    let mut edges: Vec<(i64, i32)> = spans.iter().flat_map(|&(s, e)| [(s, 1), (e, -1)]).collect();
    // An end at the moment of a start frees its slot first.
    edges.sort();
    let (mut open, mut most) = (0i32, 0i32);
    for (_, step) in edges {
        open += step;
        most = most.max(open);
    }
    most as usize
}

/// The attempts of `job`'s runs: (key, start, end), the ended ones.
async fn attempt_spans(home: &Home, job: &str) -> Vec<(String, i64, i64)> {
    rows(
        home,
        &format!(
            "SELECT COALESCE(r.limit_key, ''), a.started_at, a.finished_at FROM jobhost_attempts a \
             JOIN jobhost_runs r ON r.id = a.run_id WHERE r.job = '{job}' AND a.finished_at IS NOT NULL"
        ),
    )
    .await
    .into_iter()
    .map(|r| (r[0].clone(), r[1].parse().unwrap(), r[2].parse().unwrap()))
    .collect()
}

/// One host with several workers on SQLite (one `host serve` per file), three hosts with
/// three workers each on Postgres.
async fn fleet(home: &Home, args: &[&str]) -> Vec<Server> {
    let (hosts, workers) = match home.backend {
        Backend::Sqlite => (1, "6"),
        Backend::Postgres => (3, "3"),
    };
    let mut all = args.to_vec();
    all.extend(["--workers", workers]);
    let mut started = Vec::new();
    for _ in 0..hosts {
        started.push(home.serve(&all).await);
    }
    started
}

/// The wall clock in ms: the database's, on this one machine.
fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Keeps each start the claims enter in a job's rate window in `test_starts` (the claims
/// delete the window's old rows as they go).
async fn keep_rate_starts(home: &Home) {
    home.exec(match home.backend {
        Backend::Sqlite => {
            "CREATE TABLE test_starts (at BIGINT NOT NULL); \
            CREATE TRIGGER test_keep_start AFTER INSERT ON jobhost_rate_starts \
            WHEN NEW.scope = 0 BEGIN INSERT INTO test_starts (at) VALUES (NEW.at); END"
        }
        Backend::Postgres => {
            "CREATE TABLE test_starts (at BIGINT NOT NULL); \
            CREATE FUNCTION test_keep_start() RETURNS trigger LANGUAGE plpgsql AS \
            $$ BEGIN INSERT INTO test_starts (at) VALUES (NEW.at); RETURN NULL; END $$; \
            CREATE TRIGGER test_keep_start AFTER INSERT ON jobhost_rate_starts \
            FOR EACH ROW WHEN (NEW.scope = 0) EXECUTE FUNCTION test_keep_start()"
        }
    })
    .await;
}

/// Starts a run of `job` as instance `instance` with `payload`, through the API.
async fn start(host: &Server, job: &str, instance: &str, payload: Value) {
    let body = json!({ "instance": instance, "payload": payload }).to_string();
    let (code, answer) = host
        .post_as(Some(&host.token), &format!("/jobs/{job}/runs"), Some(&body))
        .await;
    assert_eq!(code, 201, "{answer}");
}

on_every_backend! {
    async fn per_key_fifo_runs_each_keys_runs_one_at_a_time_in_queue_order(home) {
        let m = home.manifest("", r#"
            [jobs.fifo]
            component = "{guest:hello}"
            key = "/customer"
            order = "fifo"
        "#);
        let hosts = fleet(&home, &["--manifest", m.to_str().unwrap()]).await;
        // Queued through one host, so queue order is the order of these calls.
        for i in 0..20 {
            for k in 0..3 {
                start(&hosts[0], "fifo", &format!("k{k}-{i:02}"), json!({"customer": format!("k{k}"), "sleep_ms": 40})).await;
            }
        }
        let runs = hosts[0]
            .wait_runs("fifo", Duration::from_secs(120), |runs| count(runs, |r| status(r) == "succeeded") == 60)
            .await;
        assert_eq!(runs.len(), 60, "nothing skipped or added: {runs:#?}");
        assert!(runs.iter().all(|r| r["attempts"] == 1), "waiting used no attempt: {runs:#?}");
        // Per key, in queue order: each attempt starts after the one before it ended.
        let ordered = rows(&home, "SELECT r.limit_key, a.started_at, a.finished_at, r.instance \
            FROM jobhost_runs r JOIN jobhost_attempts a ON a.run_id = r.id \
            WHERE r.job = 'fifo' ORDER BY r.limit_key, r.created_at, r.id").await;
        assert_eq!(ordered.len(), 60);
        let mut last: BTreeMap<String, (i64, String)> = BTreeMap::new();
        for row in &ordered {
            let (key, started, finished) = (&row[0], row[1].parse::<i64>().unwrap(), row[2].parse::<i64>().unwrap());
            assert!(row[3].starts_with(&format!("{key}-")), "the key is the payload's customer: {row:?}");
            if let Some((ended, before)) = last.get(key) {
                assert!(started >= *ended, "{} started at {started}, before {before} ended at {ended}", row[3]);
                assert!(row[3] > *before, "queue order: {} after {before}", row[3]);
            }
            last.insert(key.clone(), (finished, row[3].clone()));
        }
        // The keys did not wait for each other: runs of different keys overlapped.
        let spans = attempt_spans(&home, "fifo").await;
        let all: Vec<(i64, i64)> = spans.iter().map(|(_, s, e)| (*s, *e)).collect();
        assert!(most_at_once(&all) > 1, "the keys ran one after another");
    }

    async fn concurrency_and_key_concurrency_hold_across_racing_hosts_one_killed(home) {
        let m = home.manifest("", r#"
            [jobs.capped]
            component = "{guest:hello}"
            concurrency = 3
            timeout = "5s"
            payload = { sleep_ms = 60 }
            [jobs.keyed]
            component = "{guest:hello}"
            key = "/k"
            key_concurrency = 2
            timeout = "5s"
            [jobs.free]
            component = "{guest:hello}"
            payload = { sleep_ms = 60 }
        "#);
        let args = ["--manifest", m.to_str().unwrap(), "--lease-grace", "1s", "--surveillance-interval", "1s"];
        let mut hosts = fleet(&home, &args).await;
        // The whole backlog queued before any of it is claimed, so the limits bind.
        for job in ["capped", "keyed", "free"] {
            let (code, _) = hosts[0].post(&format!("/pauses/job/{job}")).await;
            assert_eq!(code, 200);
        }
        // Each host reads the pauses at most about once a second.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        for i in 0..40 {
            let host = &hosts[i % hosts.len()];
            start(host, "capped", &format!("c{i}"), json!({"sleep_ms": 150})).await;
            start(host, "keyed", &format!("k{i}"), json!({"k": format!("key{}", i % 4), "sleep_ms": 300})).await;
            start(host, "free", &format!("f{i}"), json!({"sleep_ms": 60})).await;
        }
        for job in ["capped", "keyed", "free"] {
            hosts[0].delete(&format!("/pauses/job/{job}")).await;
        }
        if hosts.len() > 1 {
            // A host killed with runs of the limited jobs running: their slots come free
            // once surveillance finds them crashed, and their reruns run.
            let doomed = hosts.pop().unwrap();
            home.wait_for("SELECT COUNT(*) FROM jobhost_runs WHERE status = 'running' AND job IN ('capped', 'keyed')", Duration::from_secs(20)).await;
            doomed.signal("KILL");
            let _ = doomed.wait_exit(Duration::from_secs(5)).await;
        }
        for job in ["capped", "keyed", "free"] {
            hosts[0]
                .wait_runs(job, Duration::from_secs(120), |runs| {
                    // Every run succeeded, or crashed and its rerun succeeded.
                    runs.iter().all(|r| {
                        status(r) == "succeeded"
                            || (status(r) == "crashed"
                                && runs.iter().any(|o| o["rerun_of"] == r["run_id"] && status(o) == "succeeded"))
                    }) && count(runs, |r| r["rerun_of"].is_null()) == 40
                })
                .await;
        }
        let capped = attempt_spans(&home, "capped").await;
        let spans: Vec<(i64, i64)> = capped.iter().map(|(_, s, e)| (*s, *e)).collect();
        assert!(most_at_once(&spans) <= 3, "more than 3 runs of `capped` at once: {}", most_at_once(&spans));
        assert!(most_at_once(&spans) >= 2, "the limit was never reached, so the check proves nothing");
        let keyed = attempt_spans(&home, "keyed").await;
        for key in ["key0", "key1", "key2", "key3"] {
            let spans: Vec<(i64, i64)> = keyed.iter().filter(|(k, _, _)| k == key).map(|(_, s, e)| (*s, *e)).collect();
            assert!(most_at_once(&spans) <= 2, "more than 2 runs of {key} at once");
        }
        let all: Vec<(i64, i64)> = keyed.iter().map(|(_, s, e)| (*s, *e)).collect();
        assert!(most_at_once(&all) > 2, "keys never ran beside each other");
        // Waiting for a slot used no attempt.
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job IN ('capped', 'keyed') AND attempts > 1").await, 0);
    }

    async fn a_rate_never_starts_more_than_it_allows_in_any_window(home) {
        let m = home.manifest("", r#"
            [jobs.paced]
            component = "{guest:hello}"
            rate = "20/s"
        "#);
        let hosts = fleet(&home, &["--manifest", m.to_str().unwrap(), "--surveillance-interval", "1s"]).await;
        keep_rate_starts(&home).await;
        for i in 0..70 {
            start(&hosts[i % hosts.len()], "paced", &format!("p{i}"), json!({})).await;
        }
        hosts[0]
            .wait_runs("paced", Duration::from_secs(60), |runs| count(runs, |r| status(r) == "succeeded") == 70)
            .await;
        let starts: Vec<i64> = rows(&home, "SELECT at FROM test_starts ORDER BY at")
            .await
            .into_iter()
            .map(|r| r[0].parse().unwrap())
            .collect();
        assert_eq!(starts.len(), 70);
        // Each guest started once claimed: no run shows a start before its claim's first.
        // The guest's start is the host's clock, the claim's the database's statement
        // clock, read apart: a few milliseconds of slack (seen: 2 ms on SQLite).
        let first_guest = home.scalar("SELECT MIN(started_at) FROM jobhost_runs WHERE job = 'paced'").await;
        assert!(first_guest + 25 >= starts[0], "a guest started at {first_guest}, before the first claim at {}", starts[0]);
        // The window rule: a start at T counts the starts in (T - 1 s, T]. The claims'
        // times are read by a statement of their own, so 2 ms of slack.
        for (i, &t) in starts.iter().enumerate() {
            let within = starts[..=i].iter().filter(|&&s| s > t - 998).count();
            assert!(within <= 20, "{within} starts in the second before {t}: {starts:?}");
        }
        // And the rate is reached, not undershot by much: 70 starts need at least three
        // full windows after the first.
        let span = starts[69] - starts[0];
        assert!(span >= 2_900, "70 starts at 20/s took {span} ms");
        assert!(span < 30_000, "70 starts at 20/s took {span} ms");
        // The window's last starts are left by the last claim; no claim of the job comes
        // to drop them, and the retention chore does (no `--retention` given).
        let emptied = "SELECT COUNT(*) FROM jobhost_jobs WHERE NOT EXISTS (SELECT 1 FROM jobhost_rate_starts)";
        home.wait_for(emptied, Duration::from_secs(30)).await;
    }

    async fn runs_claimed_ahead_show_claimed_until_their_guests_start(home) {
        let m = home.manifest("", r#"
            [jobs.slow]
            component = "{guest:hello}"
        "#);
        let host = home.serve(&["--manifest", m.to_str().unwrap(), "--workers", "6"]).await;
        // The whole backlog queued first: six start, and the host claims the next ones
        // ahead of its busy workers.
        let (code, _) = host.post("/pauses/job/slow").await;
        assert_eq!(code, 200);
        for i in 0..24 {
            start(&host, "slow", &format!("s{i:02}"), json!({"sleep_ms": 1000})).await;
        }
        host.delete("/pauses/job/slow").await;
        // Every view of a run, until all succeeded: a claimed run shows no start, a
        // running one does. When a run was last seen claimed (the clock read before the
        // request), its guest had not started — give or take the write of its start, which
        // follows the start by a round trip (250 ms of slack: a claim is a second before).
        let mut claimed_until: BTreeMap<String, i64> = BTreeMap::new();
        let waiting = std::time::Instant::now();
        loop {
            let asked_at = wall_ms();
            let runs = host.runs(Some("slow")).await;
            for r in &runs {
                let id = r["run_id"].as_str().unwrap().to_string();
                match status(r) {
                    "claimed" => {
                        assert!(r["started_at"].is_null(), "a claimed run shown started: {r}");
                        if claimed_until.is_empty() {
                            // `host runs show` says the same (or, started meanwhile, shows
                            // a start no earlier than the claimed view was asked for).
                            let out = home.run(&["runs", "show", &id, "--json"]);
                            let shown: Value = serde_json::from_slice(&out.stdout).expect("runs show --json");
                            match status(&shown) {
                                "claimed" => assert!(shown["started_at"].is_null(), "{shown}"),
                                _ => assert!(shown["started_at"].is_string(), "{shown}"),
                            }
                        }
                        claimed_until.insert(id, asked_at);
                    }
                    "running" | "succeeded" => assert!(!r["started_at"].is_null(), "started without a start: {r}"),
                    _ => {}
                }
            }
            if count(&runs, |r| status(r) == "succeeded") == 24 {
                break;
            }
            assert!(waiting.elapsed() < Duration::from_secs(120), "timed out: {runs:#?}");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert!(claimed_until.len() >= 3, "too few runs seen claimed ahead for the check to prove anything: {claimed_until:?}");
        let timings = rows(&home, "SELECT r.id, r.started_at, r.finished_at, a.started_at, a.duration_ms \
            FROM jobhost_runs r JOIN jobhost_attempts a ON a.run_id = r.id WHERE r.job = 'slow'").await;
        assert_eq!(timings.len(), 24, "one attempt each");
        for row in &timings {
            let [id, run_started, run_finished, attempt_started, attempt_ms] = &row[..] else { unreachable!() };
            let n = |v: &String| v.parse::<i64>().unwrap();
            assert_eq!(run_started, attempt_started, "the run started with its first attempt's guest: {row:?}");
            if let Some(&seen) = claimed_until.get(id) {
                assert!(n(run_started) >= seen - 250, "{id} was claimed, not started, at {seen}, yet shows a start at {run_started}");
            }
            // The run's duration is its guest's, not its wait for a worker (a second) too.
            let run_ms = n(run_finished) - n(run_started);
            assert!(n(attempt_ms) >= 1_000, "{row:?}");
            assert!(run_ms + 20 >= n(attempt_ms), "{id} ran {run_ms} ms, shorter than its attempt's {attempt_ms} ms");
            assert!(run_ms < n(attempt_ms) + 500, "{id} counted its wait for a worker: {run_ms} ms against its attempt's {attempt_ms} ms");
        }
    }

    async fn a_run_cancelled_while_claimed_ahead_never_starts(home) {
        let m = home.manifest("", r#"
            [jobs.long]
            component = "{guest:hello}"
        "#);
        let host = home.serve(&["--manifest", m.to_str().unwrap(), "--workers", "1"]).await;
        let (code, _) = host.post("/pauses/job/long").await;
        assert_eq!(code, 200);
        // The first runs for less than the 2 s a claimed run may wait for a worker before
        // its host gives it back (`start_within`): the worker takes the second.
        for name in ["first", "second"] {
            start(&host, "long", name, json!({"sleep_ms": 1500})).await;
        }
        host.delete("/pauses/job/long").await;
        // The one worker runs one; the other waits for it, claimed.
        let runs = host
            .wait_runs("long", Duration::from_secs(120), |runs| {
                count(runs, |r| status(r) == "running") == 1 && count(runs, |r| status(r) == "claimed") == 1
            })
            .await;
        let waiting = runs.iter().find(|r| status(r) == "claimed").unwrap();
        let id = waiting["run_id"].as_str().unwrap();
        let (code, answer) = host.post(&format!("/runs/{id}/cancel")).await;
        assert_eq!(code, 200, "{answer}");
        // The worker frees up, takes the run it had claimed, and finds it ended.
        host.wait_runs("long", Duration::from_secs(60), |runs| count(runs, |r| status(r) == "succeeded") == 1).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (_, run) = host.get(&format!("/runs/{id}")).await;
        assert_eq!(status(&run), "cancelled", "{run}");
        assert!(run["started_at"].is_null(), "a cancelled claimed run shows a start: {run}");
        // Its attempt's row is the cancel's: no guest ran to end it.
        let ran = home.scalar(&format!("SELECT COUNT(*) FROM jobhost_attempts WHERE run_id = '{id}' AND duration_ms IS NOT NULL")).await;
        assert_eq!(ran, 0, "the guest of a cancelled claimed run started");
        assert!(home.server_logs().contains("not started"), "{}", home.server_logs());
    }
}
