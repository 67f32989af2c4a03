//! Claim limits end to end (issue 40), with the real binary and the `hello` guest, on both
//! backends: per-key FIFO, `concurrency` and `key_concurrency` across racing hosts (one
//! killed mid-run), and `rate`. Each checker reads the recorded times back from the
//! database: an attempt's row spans its claim (`started_at`, the run's claim) to its
//! recorded ending, so the slots the claim counted cover every attempt's span.

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
        let hosts = fleet(&home, &["--manifest", m.to_str().unwrap()]).await;
        for i in 0..70 {
            start(&hosts[i % hosts.len()], "paced", &format!("p{i}"), json!({})).await;
        }
        hosts[0]
            .wait_runs("paced", Duration::from_secs(60), |runs| count(runs, |r| status(r) == "succeeded") == 70)
            .await;
        let starts: Vec<i64> = rows(&home, "SELECT started_at FROM jobhost_runs WHERE job = 'paced' ORDER BY started_at")
            .await
            .into_iter()
            .map(|r| r[0].parse().unwrap())
            .collect();
        assert_eq!(starts.len(), 70);
        // The window rule: a start at T counts the starts in (T - 1 s, T]. The runs' start
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
    }
}
