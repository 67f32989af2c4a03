//! What the console and the runs API cost the database at a million runs, on SQLite and
//! Postgres in one run: the runs list paged by cursor (first page, a page half-way down,
//! filtered by status, job, code and text in the last error), with OFFSET paging — what a
//! page of numbered pages does — as the peer; the count a bulk action previews; and the
//! reads of the overview, a job's statistics and the live pulse.
//!
//! Then, on the Postgres database: what open pages cost it on a busy fleet. A real `host
//! serve` runs the `noop` job, kicked 100 times a second, and N simulated pages (0, then
//! 10) each do what the overview page does: listen to `/stream` and read `/overview` and
//! `/pauses` on every pulse whose version changed. The database's CPU is the CPU time of
//! the Postgres processes serving the database (from `/proc`) over 30 s.
//!
//! Then, on both backends: what clients waiting for runs cost the database. A real `host
//! serve` holds 1 000 runs due in an hour; N clients (0, then 1 000) each long-poll one of
//! them (`GET /runs/{id}?wait=30s`, again whenever it answers). Over 30 s: the database's
//! CPU and its transactions a second (Postgres: its processes' CPU from `/proc` and
//! `pg_stat_database`), or the host process's CPU (SQLite runs inside it).
//!
//! Run with `cargo bench -p jobhost --bench console` (about 8 minutes on 2 cores, most of
//! it filling the two databases). `JOBHOST_BENCH_PARTS` picks parts, comma-separated from
//! `lists` (the million runs and the open pages) and `waiters` (default both). `JOBHOST_BENCH_RUNS` sets the number of runs (default
//! 1 000 000); `JOBHOST_TEST_POSTGRES` the Postgres server (default
//! `postgres://postgres@127.0.0.1:5432/test`), where a database of its own is made and
//! dropped. Every run is created in the last 7 days, 1 in 20 failed (with an error text),
//! 1 in 97 cancelled, 1 in 1 000 queued, the rest succeeded; 10 jobs, 5 tenants.

#[path = "support/guests.rs"]
mod guests;
#[path = "../../tests/common/postgres.rs"]
mod postgres;

use criterion::{BenchmarkId, Criterion};
use jobhost::store::{RunFilter, RunStatus, Store};
use std::sync::Mutex;
use std::time::Duration;

fn runs() -> i64 {
    std::env::var("JOBHOST_BENCH_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000)
}

/// The rows, written by one statement: `{n}` runs, the newest created now.
fn fill_sql(backend: &str, n: i64) -> String {
    let (series, id, cat, now) = match backend {
        "sqlite" => (
            format!(
                "WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < {n} - 1) "
            ),
            "printf('run-%09d', i)",
            "||",
            "CAST(unixepoch('subsec') * 1000 AS BIGINT)",
        ),
        _ => (
            String::new(),
            "'run-' || lpad(i::text, 9, '0')",
            "||",
            "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
        ),
    };
    let from = match backend {
        "sqlite" => "FROM s".to_string(),
        _ => format!("FROM generate_series(CAST(0 AS BIGINT), {n} - 1) AS s(i)"),
    };
    // Run i was created (n - i) * span / n ms ago: i = n - 1 is the newest.
    let span: i64 = 7 * 24 * 3_600_000;
    format!(
        "{series}INSERT INTO jobhost_runs (id, job, instance, tenant, origin, payload, status, \
         attempts, failures, last_code, last_error, next_attempt_at, created_at, started_at, \
         finished_at, updated_at) \
         SELECT {id}, 'job-' {cat} (i % 10), 'default', 'tenant-' {cat} (i % 5), 'kick', '{{}}', \
         CASE WHEN i % 1000 = 7 THEN 'queued' WHEN i % 20 = 0 THEN 'failed' \
              WHEN i % 97 = 0 THEN 'cancelled' ELSE 'succeeded' END, \
         1, CASE WHEN i % 20 = 0 THEN 1 ELSE 0 END, \
         CASE WHEN i % 1000 = 7 THEN NULL WHEN i % 20 = 0 THEN \
              (CASE WHEN i % 40 = 0 THEN 'timeout' ELSE 'handler_failed' END) \
              WHEN i % 97 = 0 THEN 'cancelled_by_operator' END, \
         CASE WHEN i % 20 = 0 THEN 'row ' {cat} (i % 13) {cat} ' of the invoice batch had no customer' END, \
         {now} - ({n} - i) * {span} / {n}, {now} - ({n} - i) * {span} / {n}, \
         {now} - ({n} - i) * {span} / {n} + 5, \
         CASE WHEN i % 1000 = 7 THEN NULL ELSE {now} - ({n} - i) * {span} / {n} + 5 + i % 200 END, \
         {now} - ({n} - i) * {span} / {n} {from}"
    )
}

struct Database {
    backend: &'static str,
    store: Store,
    /// The run half-way down the list, for the deep page's cursor.
    middle: (i64, String),
    /// The Postgres database, dropped at the end.
    pg: Option<postgres::PgDatabase>,
}

async fn exec(store: &Store, sql: &str) {
    match store.pool() {
        jobhost::store::Pool::Sqlite(p) => sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
            .execute(p)
            .await
            .map(|_| ()),
        jobhost::store::Pool::Postgres(p) => sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
            .execute(p)
            .await
            .map(|_| ()),
    }
    .expect("statement");
}

async fn open(backend: &'static str, dir: &std::path::Path, n: i64) -> Database {
    let pg = match backend {
        "sqlite" => None,
        _ => Some(postgres::PgDatabase::create("jobhost_bench_console_").await),
    };
    let url = match &pg {
        None => format!("sqlite://{}/console.db", dir.display()),
        Some(database) => database.url.clone(),
    };
    let store = Store::open(&url).await.expect("open");
    let started = std::time::Instant::now();
    exec(&store, &fill_sql(backend, n)).await;
    exec(&store, "ANALYZE").await;
    eprintln!("{backend}: {n} runs written in {:.1?}", started.elapsed());
    let middle = store
        .list_runs(&RunFilter {
            limit: 1,
            before: None,
            ..Default::default()
        })
        .await
        .expect("newest");
    let newest = &middle[0];
    let middle = (newest.created_at - 7 * 24 * 3_600_000 / 2, "~".to_string());
    Database {
        backend,
        store,
        middle,
        pg,
    }
}

async fn offset_page(store: &Store, offset: i64) -> usize {
    let sql = format!(
        "SELECT id FROM jobhost_runs ORDER BY created_at DESC, id DESC LIMIT 50 OFFSET {offset}"
    );
    match store.pool() {
        jobhost::store::Pool::Sqlite(p) => {
            sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(sql))
                .fetch_all(p)
                .await
                .map(|r| r.len())
        }
        jobhost::store::Pool::Postgres(p) => {
            sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(sql))
                .fetch_all(p)
                .await
                .map(|r| r.len())
        }
    }
    .expect("offset page")
}

/// Whether `JOBHOST_BENCH_PARTS` asks for `part` (every part if unset).
fn part(name: &str) -> bool {
    std::env::var("JOBHOST_BENCH_PARTS")
        .map_or(true, |parts| parts.split(',').any(|p| p.trim() == name))
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    if part("lists") {
        lists(&rt);
    }
    if part("waiters") {
        let dir = tempfile::tempdir().expect("temp dir");
        for backend in ["sqlite", "postgres"] {
            rt.block_on(waiters(backend, dir.path()));
        }
    }
}

/// The million runs' lists, counts and console reads, then the open pages.
fn lists(rt: &tokio::runtime::Runtime) {
    let n = runs();
    let dir = tempfile::tempdir().expect("temp dir");
    let databases: Vec<Database> = ["sqlite", "postgres"]
        .into_iter()
        .map(|backend| rt.block_on(open(backend, dir.path(), n)))
        .collect();
    let medians = Mutex::new(Vec::<(String, f64)>::new());
    let mut c = Criterion::default()
        .sample_size(20)
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let page = |filter: RunFilter| RunFilter {
        limit: 50,
        ..filter
    };
    for db in &databases {
        let mut group = c.benchmark_group(format!("console/{}", db.backend));
        let now = rt.block_on(db.store.now()).expect("now");
        let middle = Some(db.middle.clone());
        let cases: Vec<(&str, RunFilter)> = vec![
            ("list_first_page", page(RunFilter::default())),
            (
                "list_deep_page",
                page(RunFilter {
                    before: middle.clone(),
                    ..Default::default()
                }),
            ),
            (
                "list_failed_first_page",
                page(RunFilter {
                    statuses: vec![RunStatus::Failed],
                    ..Default::default()
                }),
            ),
            (
                "list_failed_deep_page",
                page(RunFilter {
                    statuses: vec![RunStatus::Failed],
                    before: middle.clone(),
                    ..Default::default()
                }),
            ),
            (
                "list_job_code_deep_page",
                page(RunFilter {
                    job: Some("job-0".into()),
                    code: Some("timeout".into()),
                    before: middle.clone(),
                    ..Default::default()
                }),
            ),
            (
                "list_error_text_first_page",
                page(RunFilter {
                    error_text: Some("ROW 7 of".into()),
                    ..Default::default()
                }),
            ),
            (
                "list_tenant_last_hour",
                page(RunFilter {
                    tenant: Some("tenant-3".into()),
                    since: Some(now - 3_600_000),
                    ..Default::default()
                }),
            ),
        ];
        for (name, filter) in &cases {
            group.bench_function(BenchmarkId::from_parameter(name), |b| {
                b.to_async(rt)
                    .iter(|| async { db.store.list_runs(filter).await.expect("list") })
            });
        }
        group.bench_function(BenchmarkId::from_parameter("offset_deep_page"), |b| {
            b.to_async(rt)
                .iter(|| async { offset_page(&db.store, n / 2).await })
        });
        group.bench_function(BenchmarkId::from_parameter("count_failed_capped"), |b| {
            let filter = RunFilter {
                statuses: vec![RunStatus::Failed],
                ..Default::default()
            };
            b.to_async(rt).iter(|| async {
                db.store
                    .count_matching_runs(&filter, 100_000)
                    .await
                    .expect("count")
            })
        });
        group.bench_function(BenchmarkId::from_parameter("overview_hour"), |b| {
            b.to_async(rt).iter(|| async {
                let since = now - 3_600_000;
                db.store
                    .ended_by_bucket(since, 60_000, None)
                    .await
                    .expect("buckets");
                db.store
                    .failures_by_job(since, None)
                    .await
                    .expect("failures");
                db.store.queue_lag_by_tenant_and_job().await.expect("lanes")
            })
        });
        group.bench_function(BenchmarkId::from_parameter("overview_day"), |b| {
            b.to_async(rt).iter(|| async {
                let since = now - 24 * 3_600_000;
                db.store
                    .ended_by_bucket(since, 30 * 60_000, None)
                    .await
                    .expect("buckets");
                db.store
                    .failures_by_job(now - 3_600_000, None)
                    .await
                    .expect("failures")
            })
        });
        group.bench_function(BenchmarkId::from_parameter("job_stats_day"), |b| {
            b.to_async(rt).iter(|| async {
                db.store
                    .job_endings("job-3", now - 24 * 3_600_000, None, 20_000)
                    .await
                    .expect("endings")
            })
        });
        group.bench_function(BenchmarkId::from_parameter("pulse"), |b| {
            b.to_async(rt)
                .iter(|| async { db.store.live_counts().await.expect("pulse") })
        });
        group.finish();
    }
    c.final_summary();
    // Criterion's estimates, read back from its report directory.
    let root = std::env::var("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::path::PathBuf::from("../target"))
        .join("criterion");
    for db in &databases {
        let dir = root.join(format!("console_{}", db.backend));
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let estimates = entry.path().join("new").join("estimates.json");
            let Ok(text) = std::fs::read_to_string(&estimates) else {
                continue;
            };
            let value: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            if let Some(median) = value["median"]["point_estimate"].as_f64() {
                medians.lock().unwrap().push((
                    format!("{}/{}", db.backend, entry.file_name().to_string_lossy()),
                    median,
                ));
            }
        }
    }
    let mut medians = medians.into_inner().unwrap();
    medians.sort_by(|a, b| a.0.cmp(&b.0));
    println!("\n{n} runs; medians:");
    for (name, median) in &medians {
        println!("{name:<44} {:>10.3} ms", median / 1e6);
    }
    if let Some(pg) = databases.iter().find(|db| db.backend == "postgres") {
        rt.block_on(pages(pg, dir.path()));
    }
    for db in databases {
        rt.block_on(db.store.close());
        if let Some(database) = db.pg {
            rt.block_on(database.drop_now());
        }
    }
}

/// CPU time (ms) used so far by the Postgres processes serving database `name`.
fn postgres_cpu_ms(name: &str) -> f64 {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    let mut total = 0.0;
    for entry in procs.flatten() {
        let path = entry.path();
        let title = std::fs::read(path.join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&title).contains(name) {
            total += process_cpu_ms(&path);
        }
    }
    total
}

/// CPU time (ms) the process at `/proc/PID` used so far.
fn process_cpu_ms(path: &std::path::Path) -> f64 {
    let ticks_per_ms = 100.0 / 1000.0;
    let Ok(stat) = std::fs::read_to_string(path.join("stat")) else {
        return 0.0;
    };
    // Fields after the command's closing parenthesis: utime and stime are the 12th and
    // 13th.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<f64>().ok())
        .sum();
    ticks / ticks_per_ms
}

/// A real `host serve` of the `noop` job in home `dir` on database `url` (with `extra`
/// arguments), an operator's token for it, and its address; `None` if the guest cannot
/// be built.
fn serve_noop(
    dir: &std::path::Path,
    url: &str,
    extra: &[&str],
) -> Option<(std::process::Child, String, String)> {
    use std::io::BufRead;
    let noop = match guests::locate_or_build(&["noop"]) {
        Ok(mut found) => found.remove(0),
        Err(e) => {
            eprintln!("the noop guest: {e}");
            return None;
        }
    };
    let manifest = dir.join("noop.toml");
    std::fs::write(
        &manifest,
        format!("[jobs.noop]\ncomponent = \"{}\"\n", noop.display()),
    )
    .expect("manifest");
    let host = |args: &[&str]| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_host"));
        command
            .args(args)
            .env("JOBHOST_HOME", dir)
            .env("JOBHOST_DB", url)
            .env("JOBHOST_LOG", "warn");
        command
    };
    let created = host(&["tokens", "create", "--json"])
        .output()
        .expect("host tokens create");
    let token: serde_json::Value = serde_json::from_slice(&created.stdout).expect("token JSON");
    let token = token["token"].as_str().expect("a token").to_string();
    let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    args.extend(["--manifest", manifest.to_str().expect("utf-8")]);
    let mut serve = host(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("host serve");
    let mut line = String::new();
    std::io::BufReader::new(serve.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("listening line");
    let base = format!("http://{}", line.trim().trim_start_matches("listening on "));
    Some((serve, base, token))
}

/// What 0 and then 10 open overview pages cost the database of a busy host (see the
/// module's doc).
async fn pages(db: &Database, dir: &std::path::Path) {
    let Some(database) = &db.pg else {
        return;
    };
    let (name, url) = (database.name.clone(), database.url.clone());
    let Some((mut serve, base, token)) = serve_noop(dir, &url, &[]) else {
        return;
    };
    let client = reqwest::Client::new();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let kicker = {
        let (client, base, token, stop) =
            (client.clone(), base.clone(), token.clone(), stop.clone());
        tokio::spawn(async move {
            let mut k = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                k += 1;
                let _ = client
                    .post(format!("{base}/jobs/noop/kick?instance=i{}", k % 1000))
                    .bearer_auth(&token)
                    .send()
                    .await;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    println!(
        "\nopen overview pages on a busy host (Postgres, {} runs kept):",
        runs()
    );
    let mut idle_ms_per_s = 0.0;
    for open in [0usize, 10] {
        let reads = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let readers: Vec<_> = (0..open)
            .map(|_| {
                let (client, base, token, reads) =
                    (client.clone(), base.clone(), token.clone(), reads.clone());
                tokio::spawn(async move {
                    let Ok(mut stream) = client
                        .get(format!("{base}/stream"))
                        .bearer_auth(&token)
                        .send()
                        .await
                    else {
                        return;
                    };
                    while let Ok(Some(chunk)) = stream.chunk().await {
                        if !String::from_utf8_lossy(&chunk).contains("event: pulse") {
                            continue;
                        }
                        for path in ["/overview?window=hour", "/pauses"] {
                            if let Ok(answer) = client
                                .get(format!("{base}{path}"))
                                .bearer_auth(&token)
                                .send()
                                .await
                            {
                                let _ = answer.bytes().await;
                            }
                        }
                        reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (cpu, at, read) = (
            postgres_cpu_ms(&name),
            std::time::Instant::now(),
            reads.load(std::sync::atomic::Ordering::Relaxed),
        );
        tokio::time::sleep(Duration::from_secs(30)).await;
        let seconds = at.elapsed().as_secs_f64();
        let ms_per_s = (postgres_cpu_ms(&name) - cpu) / seconds;
        let refreshes = (reads.load(std::sync::atomic::Ordering::Relaxed) - read) as f64 / seconds;
        for reader in readers {
            reader.abort();
        }
        if open == 0 {
            idle_ms_per_s = ms_per_s;
            println!("  no page:  the database used {ms_per_s:.1} ms of CPU a second");
        } else {
            println!(
                "  {open} pages: {ms_per_s:.1} ms a second; {:.2} ms a second per page, \
                 each refreshing {:.2} times a second",
                (ms_per_s - idle_ms_per_s) / open as f64,
                refreshes / open as f64
            );
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = kicker.await;
    let _ = serve.kill();
    let _ = serve.wait();
}

/// Runs held and clients long-polling them in the `waiters` part.
const WAITED_RUNS: usize = 1000;
/// How long each load is measured: one whole wait, so each client's answer (and its
/// reads) falls in it once.
const WAIT_MEASURE: Duration = Duration::from_secs(30);

/// What `WAITED_RUNS` long-polling clients cost the database, against none (see the
/// module's doc).
async fn waiters(backend: &'static str, dir: &std::path::Path) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let pg = match backend {
        "sqlite" => None,
        _ => Some(postgres::PgDatabase::create("jobhost_bench_waiters_").await),
    };
    let url = match &pg {
        None => format!("sqlite://{}/waiters.db", dir.display()),
        Some(database) => database.url.clone(),
    };
    let home = dir.join(backend);
    std::fs::create_dir_all(&home).expect("home");
    let Some((mut serve, base, token)) = serve_noop(&home, &url, &["--max-connections", "4000"])
    else {
        return;
    };
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(2 * WAITED_RUNS)
        .build()
        .expect("client");
    let items: Vec<serde_json::Value> = (0..WAITED_RUNS)
        .map(|i| serde_json::json!({"instance": format!("w{i}"), "delay": "1h"}))
        .collect();
    let started: serde_json::Value = client
        .post(format!("{base}/jobs/noop/runs:batch"))
        .bearer_auth(&token)
        .json(&serde_json::json!({ "runs": items }))
        .send()
        .await
        .expect("batch")
        .json()
        .await
        .expect("batch answer");
    let ids: Vec<String> = started["runs"]
        .as_array()
        .expect("runs started")
        .iter()
        .map(|r| r["run_id"].as_str().expect("an id").to_string())
        .collect();
    let host_proc = std::path::PathBuf::from(format!("/proc/{}", serve.id()));
    let pg_name = pg.as_ref().map(|p| p.name.clone());
    let cpu_ms = || match &pg_name {
        Some(name) => postgres_cpu_ms(name),
        None => process_cpu_ms(&host_proc),
    };
    let admin = match &pg {
        Some(_) => Some(
            Store::open(&url)
                .await
                .expect("a second connection to count transactions"),
        ),
        None => None,
    };
    let transactions = |admin: Option<Store>, name: Option<String>| async move {
        let (Some(admin), Some(name)) = (admin, name) else {
            return None;
        };
        let jobhost::store::Pool::Postgres(p) = admin.pool() else {
            return None;
        };
        sqlx::query_scalar::<_, i64>(
            "SELECT CAST(xact_commit + xact_rollback AS BIGINT) FROM pg_stat_database WHERE datname = $1",
        )
        .bind(name)
        .fetch_one(p)
        .await
        .ok()
    };
    let load = || {
        let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        text.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!("\nlong-polling clients ({backend}, {WAITED_RUNS} runs held):");
    let mut idle = (0.0, None);
    for clients in [0usize, WAITED_RUNS] {
        let stop = Arc::new(AtomicBool::new(false));
        let answers = Arc::new(AtomicU64::new(0));
        let pollers: Vec<_> = ids
            .iter()
            .take(clients)
            .map(|id| {
                let (client, url, token, stop, answers) = (
                    client.clone(),
                    format!("{base}/runs/{id}?wait=30s"),
                    token.clone(),
                    stop.clone(),
                    answers.clone(),
                );
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        match client.get(&url).bearer_auth(&token).send().await {
                            Ok(answer) => {
                                let _ = answer.bytes().await;
                                answers.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                        }
                    }
                })
            })
            .collect();
        // Every client connected and waiting, the first answers' reads done.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let (cpu, xacts, at, answered) = (
            cpu_ms(),
            transactions(admin.clone(), pg_name.clone()).await,
            std::time::Instant::now(),
            answers.load(Ordering::Relaxed),
        );
        tokio::time::sleep(WAIT_MEASURE).await;
        let seconds = at.elapsed().as_secs_f64();
        let ms_per_s = (cpu_ms() - cpu) / seconds;
        let xacts_per_s = match (xacts, transactions(admin.clone(), pg_name.clone()).await) {
            (Some(before), Some(after)) => Some((after - before) as f64 / seconds),
            _ => None,
        };
        let said = |n: Option<f64>| n.map_or("-".to_string(), |n| format!("{n:.1}"));
        let answers_per_s = (answers.load(Ordering::Relaxed) - answered) as f64 / seconds;
        stop.store(true, Ordering::Relaxed);
        for poller in pollers {
            poller.abort();
        }
        let what = if pg_name.is_some() {
            "Postgres"
        } else {
            "the host process (SQLite inside)"
        };
        if clients == 0 {
            idle = (ms_per_s, xacts_per_s);
            println!(
                "  no client:    {what} used {ms_per_s:.1} ms of CPU a second; {} transactions a second (load {})",
                said(xacts_per_s),
                load()
            );
        } else {
            println!(
                "  {clients} clients: {ms_per_s:.1} ms of CPU a second ({:.2}x); {} transactions a second ({} more); {answers_per_s:.1} answers a second (load {})",
                ms_per_s / idle.0.max(0.1),
                said(xacts_per_s),
                said(xacts_per_s.zip(idle.1).map(|(busy, quiet)| busy - quiet)),
                load()
            );
        }
    }
    let _ = serve.kill();
    let _ = serve.wait();
    if let Some(admin) = admin {
        admin.close().await;
    }
    if let Some(database) = pg {
        database.drop_now().await;
    }
}
