//! Benchmarks of the serve path and the fleet: how fast real `host serve` processes drain a
//! queue of no-op runs, how long a kick waits before a worker claims it, and the same drain
//! through graphile-worker on the same Postgres server, for comparison.
//!
//! Run with `cargo bench -p jobhost --bench serve` (about 2 minutes on 2 cores; a plain
//! summary table with the medians, runs/second and the ratios is printed at the end). For a fast check:
//! `JOBHOST_BENCH_BATCH=50 cargo bench -p jobhost --bench serve -- --quick`. Criterion's
//! name filter works as usual (`... -- fleet_postgres`); only what it selects is set up.
//!
//! Settings (environment):
//! - `JOBHOST_BENCH_BATCH`: runs (jobs) per drained batch, default 200.
//! - `JOBHOST_BENCH_SAMPLES`: criterion samples per drain variant, default 30 (at least 10,
//!   criterion's minimum); each sample drains one batch, after one warm-up batch.
//! - `JOBHOST_TEST_POSTGRES`: the Postgres server, as for the tests (default
//!   `postgres://postgres@127.0.0.1:5432/test`); each group creates a database
//!   `jobhost_bench_<uuid>` of its own there and drops it at the end.
//!
//! What runs: the release `host` binary (`CARGO_BIN_EXE_host`) as child processes,
//! `host serve --listen 127.0.0.1:0 --manifest M --workers 4`, with a manifest holding one
//! job, `noop` (the `noop` guest, built into `target/wasm32-wasip2/guest/` first if it is
//! missing), its own `JOBHOST_HOME` and the host's default log level (a line per run goes
//! to a log file). graphile-worker runs from the Node project in `benches/graphile/`
//! (`npm ci` there first if `node_modules` is missing), one `node worker.js` process per
//! worker with concurrency 4 and graphile-worker's defaults otherwise (LISTEN/NOTIFY plus
//! its 2 s poll).
//!
//! What a drain measures, the same for both systems: the workers are already running and
//! idle; the clock starts when the statement that makes the whole batch visible to them
//! has committed, and stops when the first check (every 5 ms, on a connection of its own)
//! finds no job left to do.
//! - jobhost: the batch's runs are first inserted with the library (`Store::insert_run`,
//!   distinct instances `i0`..`iN`) due a day from now, which no host will claim; then one
//!   `UPDATE` makes them all due at once. On Postgres that statement's trigger notifies
//!   `jobhost_work`, which wakes every host, just as a kick or a schedule would; the clock
//!   starts when it returns. Done: no run of the job is `queued` or `running` (each batch
//!   is then checked to have succeeded, outside the clock).
//! - SQLite has no notifications and nothing wakes a host for rows another process wrote:
//!   such a batch would be found only at the dispatcher's next poll (`--poll`, 1 s), a
//!   uniform 0–1 s that would swamp the drain itself. So on SQLite the `UPDATE` makes the
//!   batch due 1.5 s ahead, at a database-clock instant `T`; the host sees it at its next
//!   poll and sleeps until `T` (the dispatcher waits for the earliest due run), and the
//!   clock runs from `T` (the system clock, which SQLite's clock is).
//! - graphile-worker: workers started before the batch is queued; `enqueue.js` adds the
//!   batch with one `addJobs` call (one statement, one `jobs:insert` notification) and the
//!   clock starts when it resolves, i.e. after the commit, as for jobhost. Done: no job row
//!   left (graphile-worker deletes a job when it succeeds); each `worker.js` checks that on
//!   its own connection and reports how long it took; the earliest report counts.
//!
//! `serve_sqlite/kick_to_start` is latency, not throughput: sequential kicks over HTTP of
//! one instance, each waited for until it succeeded, measuring `started_at - created_at`
//! of the run (queued to claimed, on the database clock, whole milliseconds: single
//! samples are 0 or 1 ms, their mean is what counts).
//!
//! Criterion warns that it cannot complete the samples in the measurement time: each
//! sample is one batch, on purpose (flat sampling, one iteration per sample).
//!
//! Where a jobhost drain's time goes (sampled from `pg_stat_activity` and the runs' and
//! attempts' timestamps, not by this benchmark): every no-op run costs five committed
//! transactions (claim, lease, begin attempt, finish attempt, finish run), against two
//! for a graphile-worker job (get, complete). A host claims through one dispatcher loop,
//! one claim (one commit) at a time, so on Postgres a host keeps only about 2.5 of its 4
//! workers busy and tops out near one run per claim round trip. Every successful run of
//! a job updates that job's one `jobhost_jobs` row (`last_success_at`, inside the
//! finish-run transaction), so finishing runs of one job queue on that row's lock until
//! the holder's commit is flushed: with 3 hosts that is the most common wait.

#[path = "support/guests.rs"]
mod guests;

use criterion::{BenchmarkGroup, Criterion, SamplingMode, Throughput, measurement::WallTime};
use jobhost::runner::new_run_id;
use jobhost::store::{NewRun, Origin, Pool, Store};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tempfile::TempDir;
use tokio::runtime::Runtime;

/// The one job every host serves.
const JOB: &str = "noop";
/// Workers per host, and graphile-worker's concurrency per process.
const WORKERS: usize = 4;
/// How often completion is checked, for every system.
const CHECK_EVERY: Duration = Duration::from_millis(5);
/// Runs inserted ahead of a drain are due this far ahead: never, for the benchmark.
const PARKED_MS: i64 = 24 * 60 * 60 * 1000;
/// On SQLite the batch becomes due this far ahead: beyond the host's 1 s poll, so the
/// host has looked at the queue once more and waits for exactly that instant.
const SQLITE_DUE_AHEAD_MS: i64 = 1_500;
/// Criterion samples of `serve_sqlite/kick_to_start` (each a few dozen kicks).
const KICK_SAMPLES: usize = 20;
/// Nothing in one drain should come near this.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a host may take to print its listening line (it compiles the guest first).
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// Makes every parked run of the job due at `$1` (and, on Postgres, notifies the hosts:
/// the trigger fires on updates that set `status` to queued).
const RELEASE_BATCH: &str = "UPDATE jobhost_runs SET status = 'queued', next_attempt_at = $1 \
    WHERE status = 'queued' AND job = $2";
const NOT_DONE: &str = "SELECT COUNT(*) FROM jobhost_runs WHERE status IN ('queued', 'running')";
const NOT_SUCCEEDED: &str = "SELECT COUNT(*) FROM jobhost_runs WHERE status <> 'succeeded'";

fn main() {
    let noop = match guests::locate_or_build(&["noop"]).map(|mut found| found.remove(0)) {
        Ok(path) => path,
        Err(message) => {
            eprintln!("serve benchmarks: {message}");
            std::process::exit(1);
        }
    };
    let settings = Settings::from_env();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("start the tokio runtime");
    let mut c = Criterion::default().configure_from_args();
    let record = Record::default();

    bench_serve_sqlite(&mut c, &rt, &noop, &settings, &record);
    bench_fleet_postgres(&mut c, &rt, &noop, &settings, &record);
    bench_graphile(&mut c, &settings, &record);

    c.final_summary();
    record.print_summary(&settings);
}

// ---- settings -----------------------------------------------------------------------

struct Settings {
    batch: usize,
    samples: usize,
}

impl Settings {
    fn from_env() -> Settings {
        let number = |name: &str, default: usize| match std::env::var(name) {
            Ok(v) => v
                .parse()
                .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
            Err(_) => default,
        };
        let samples = number("JOBHOST_BENCH_SAMPLES", 30);
        assert!(
            samples >= 10,
            "JOBHOST_BENCH_SAMPLES must be at least 10 (criterion's minimum)"
        );
        let batch = number("JOBHOST_BENCH_BATCH", 200);
        assert!(batch >= 1, "JOBHOST_BENCH_BATCH must be at least 1");
        Settings { batch, samples }
    }
}

/// Flat sampling, one batch per sample, one warm-up batch: criterion's warm-up stops after
/// the first call that takes longer than the warm-up time, and a flat sample gets a
/// single iteration when the measurement time is below one iteration per sample.
fn configure_drain(group: &mut BenchmarkGroup<'_, WallTime>, settings: &Settings) {
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(settings.samples)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_millis(10))
        .throughput(Throughput::Elements(settings.batch as u64));
}

// ---- what was measured, for the summary ---------------------------------------------

/// Every sample each variant produced in this process (seconds per iteration), and a few
/// side observations.
#[derive(Default)]
struct Record {
    samples: Mutex<BTreeMap<&'static str, Vec<f64>>>,
    notes: Mutex<BTreeMap<&'static str, Vec<f64>>>,
}

impl Record {
    fn sample(&self, variant: &'static str, total: Duration, iters: u64) {
        let per_iter = total.as_secs_f64() / iters.max(1) as f64;
        self.samples
            .lock()
            .unwrap()
            .entry(variant)
            .or_default()
            .push(per_iter);
    }

    fn note(&self, what: &'static str, value: f64) {
        self.notes
            .lock()
            .unwrap()
            .entry(what)
            .or_default()
            .push(value);
    }

    /// The median of the last `n` samples: the measured ones (the warm-up came first).
    fn median(&self, variant: &str, n: usize) -> Option<f64> {
        let all = self.samples.lock().unwrap();
        let v = all.get(variant)?;
        let mut last: Vec<f64> = v[v.len().saturating_sub(n)..].to_vec();
        median(&mut last)
    }

    fn note_median(&self, what: &str) -> Option<f64> {
        let mut v = self.notes.lock().unwrap().get(what)?.clone();
        median(&mut v)
    }

    fn print_summary(&self, settings: &Settings) {
        let n = settings.samples;
        let batch = settings.batch as f64;
        let rate = |variant: &str| self.median(variant, n).map(|s| batch / s);
        let fmt_rate = |r: Option<f64>| r.map_or("n/a".to_string(), |r| format!("{r:.0}"));
        let fmt_ms = |s: Option<f64>| s.map_or("n/a".to_string(), |s| format!("{:.1} ms", s * 1e3));
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => format!("{:.2}", a / b),
            _ => "n/a".to_string(),
        };

        println!();
        println!(
            "serve benchmarks: batches of {} no-op runs, {} workers per host (concurrency {} per \
             graphile-worker process), medians of {} samples",
            settings.batch, WORKERS, WORKERS, n
        );
        println!("{:<34} {:>12} {:>10}", "variant", "median", "runs/s");
        for variant in [
            "serve_sqlite/drain",
            "fleet_postgres/drain_1_host",
            "fleet_postgres/drain_3_hosts",
            "graphile_worker/drain_1_worker",
            "graphile_worker/drain_3_workers",
        ] {
            println!(
                "{:<34} {:>12} {:>10}",
                variant,
                fmt_ms(self.median(variant, n)),
                fmt_rate(rate(variant))
            );
        }
        let latency = self.median("serve_sqlite/kick_to_start", KICK_SAMPLES);
        println!(
            "{:<34} {:>12} {:>10}",
            "serve_sqlite/kick_to_start",
            latency.map_or("n/a".to_string(), |s| format!("{:.3} ms", s * 1e3)),
            "(latency)"
        );
        if let Some(ms) = self.note_median("graphile enqueue_ms") {
            println!(
                "(graphile addJobs of one batch took {ms:.1} ms, median; not in the drain times)"
            );
        }
        if let Some(ms) = self.note_median("jobhost release_ms") {
            println!(
                "(jobhost's UPDATE releasing one batch took {ms:.1} ms, median; not in the drain times)"
            );
        }

        let jh1 = rate("fleet_postgres/drain_1_host");
        let jh3 = rate("fleet_postgres/drain_3_hosts");
        let gw1 = rate("graphile_worker/drain_1_worker");
        let gw3 = rate("graphile_worker/drain_3_workers");
        println!();
        println!("{:<52} {:>8}", "ratio (runs/s)", "");
        println!(
            "{:<52} {:>8}",
            "jobhost 1 host / graphile 1 worker",
            ratio(jh1, gw1)
        );
        println!(
            "{:<52} {:>8}",
            "jobhost 3 hosts / graphile 3 workers",
            ratio(jh3, gw3)
        );
        println!(
            "{:<52} {:>8}",
            "jobhost scaling, 3 hosts / 1 host",
            ratio(jh3, jh1)
        );
        println!(
            "{:<52} {:>8}",
            "graphile scaling, 3 workers / 1 worker",
            ratio(gw3, gw1)
        );
        println!(
            "{:<52} {:>8}",
            "jobhost Postgres 1 host / SQLite 1 host",
            ratio(jh1, rate("serve_sqlite/drain"))
        );
    }
}

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

// ---- serve_sqlite -------------------------------------------------------------------

fn bench_serve_sqlite(
    c: &mut Criterion,
    rt: &Runtime,
    noop: &Path,
    settings: &Settings,
    record: &Record,
) {
    let mut group = c.benchmark_group("serve_sqlite");
    let mut env: Option<Jobhost> = None;

    // Latency first: the group's throughput setting (runs/s) applies to the drain only.
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(KICK_SAMPLES)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    group.bench_function("kick_to_start", |b| {
        let env: &Jobhost = env.get_or_insert_with(|| rt.block_on(Jobhost::sqlite(noop, 1)));
        b.to_async(rt).iter_custom(|iters| async move {
            let total = env.kick_to_start(iters).await;
            record.sample("serve_sqlite/kick_to_start", total, iters);
            total
        });
    });

    configure_drain(&mut group, settings);
    let batch = settings.batch;
    group.bench_function("drain", |b| {
        let env: &Jobhost = env.get_or_insert_with(|| rt.block_on(Jobhost::sqlite(noop, 1)));
        b.to_async(rt).iter_custom(|iters| async move {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                total += env.drain(batch, record).await;
            }
            record.sample("serve_sqlite/drain", total, iters);
            total
        });
    });
    group.finish();
    if let Some(env) = env {
        rt.block_on(env.stop());
    }
}

// ---- fleet_postgres -----------------------------------------------------------------

fn bench_fleet_postgres(
    c: &mut Criterion,
    rt: &Runtime,
    noop: &Path,
    settings: &Settings,
    record: &Record,
) {
    let mut group = c.benchmark_group("fleet_postgres");
    configure_drain(&mut group, settings);
    let batch = settings.batch;
    let mut env: Option<Jobhost> = None;
    for (id, variant, hosts) in [
        ("drain_1_host", "fleet_postgres/drain_1_host", 1),
        ("drain_3_hosts", "fleet_postgres/drain_3_hosts", 3),
    ] {
        group.bench_function(id, |b| {
            let env = env.get_or_insert_with(|| rt.block_on(Jobhost::postgres(noop)));
            rt.block_on(env.scale_to(hosts));
            let env: &Jobhost = env;
            b.to_async(rt).iter_custom(|iters| async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += env.drain(batch, record).await;
                }
                record.sample(variant, total, iters);
                total
            });
        });
    }
    group.finish();
    if let Some(env) = env {
        rt.block_on(env.stop());
    }
}

// ---- jobhost hosts ------------------------------------------------------------------

/// One database, one home, and the `host serve` processes on them.
struct Jobhost {
    home: TempDir,
    db_url: String,
    manifest: PathBuf,
    store: Store,
    hosts: Vec<HostProcess>,
    http: reqwest::Client,
    tenant: String,
    /// The Postgres database, dropped at the end.
    database: Option<PgDatabase>,
    started: usize,
}

impl Jobhost {
    async fn sqlite(noop: &Path, hosts: usize) -> Jobhost {
        let home = tempfile::tempdir().expect("temp dir");
        let db_url = format!("sqlite://{}/jobhost.db", home.path().display());
        let mut env = Jobhost::open(home, db_url, None, noop).await;
        env.scale_to(hosts).await;
        env
    }

    async fn postgres(noop: &Path) -> Jobhost {
        let home = tempfile::tempdir().expect("temp dir");
        let database = PgDatabase::create().await;
        let db_url = database.url.clone();
        Jobhost::open(home, db_url, Some(database), noop).await
    }

    /// Writes the manifest; the first host registers the job and applies the migrations.
    async fn open(
        home: TempDir,
        db_url: String,
        database: Option<PgDatabase>,
        noop: &Path,
    ) -> Jobhost {
        let manifest = home.path().join("jobhost.toml");
        let component = toml::Value::String(noop.display().to_string());
        std::fs::write(
            &manifest,
            format!("[jobs.{JOB}]\ncomponent = {component}\n"),
        )
        .expect("write the manifest");
        let first = HostProcess::start(home.path(), &db_url, &manifest, 0).await;
        let store = Store::open(&db_url).await.expect("open the store");
        let job = store
            .get_job(JOB)
            .await
            .expect("read the job")
            .expect("host serve registered the job");
        Jobhost {
            home,
            db_url,
            manifest,
            store,
            hosts: vec![first],
            http: reqwest::Client::new(),
            tenant: job.tenant,
            database,
            started: 1,
        }
    }

    /// Starts or stops hosts until `n` are serving.
    async fn scale_to(&mut self, n: usize) {
        while self.hosts.len() > n {
            self.hosts.pop().expect("a host").stop().await;
        }
        while self.hosts.len() < n {
            let host =
                HostProcess::start(self.home.path(), &self.db_url, &self.manifest, self.started)
                    .await;
            self.started += 1;
            self.hosts.push(host);
        }
    }

    /// Queues `batch` runs, makes them due at once, and returns how long the hosts took
    /// to finish them (see the module comment for where the clock starts).
    async fn drain(&self, batch: usize, record: &Record) -> Duration {
        assert_eq!(
            self.count(NOT_DONE).await,
            0,
            "the previous batch is not done"
        );
        self.park(batch).await;
        // Let the hosts settle after the wake-ups the inserts caused (Postgres notifies on
        // every insert; the runs are not due, so they go back to waiting).
        tokio::time::sleep(Duration::from_millis(100)).await;
        let elapsed = match self.store.pool() {
            Pool::Postgres(_) => {
                let release = Instant::now();
                let due = self.store.now().await.expect("database clock");
                assert_eq!(self.release(due).await, batch as u64);
                let start = Instant::now();
                record.note("jobhost release_ms", (start - release).as_secs_f64() * 1e3);
                self.wait_done().await;
                start.elapsed()
            }
            Pool::Sqlite(_) => {
                let due = self.store.now().await.expect("database clock") + SQLITE_DUE_AHEAD_MS;
                assert_eq!(self.release(due).await, batch as u64);
                let due_at = UNIX_EPOCH + Duration::from_millis(due as u64);
                if let Ok(ahead) = due_at.duration_since(SystemTime::now()) {
                    tokio::time::sleep(ahead).await;
                }
                self.wait_done().await;
                SystemTime::now().duration_since(due_at).unwrap_or_default()
            }
        };
        assert_eq!(
            self.count(NOT_SUCCEEDED).await,
            0,
            "every run succeeded (see the host logs in {})",
            self.home.path().display()
        );
        elapsed
    }

    /// Inserts `batch` queued runs of distinct instances, due in a day.
    async fn park(&self, batch: usize) {
        let mut inserts = tokio::task::JoinSet::new();
        for i in 0..batch {
            let store = self.store.clone();
            let run = NewRun {
                id: new_run_id(),
                job: JOB.to_string(),
                instance: format!("i{i}"),
                tenant: self.tenant.clone(),
                origin: Origin::Kick,
                payload: "{}".to_string(),
                cursor: None,
                component_digest: None,
                scheduled_for: None,
                rerun_of: None,
                delay_ms: PARKED_MS,
            };
            inserts.spawn(async move { store.insert_run(&run).await.map(drop) });
        }
        while let Some(done) = inserts.join_next().await {
            done.expect("join").expect("insert a run");
        }
    }

    /// Makes every parked run due at `due` (database clock), in one statement.
    async fn release(&self, due: i64) -> u64 {
        match self.store.pool() {
            Pool::Sqlite(p) => sqlx::query(RELEASE_BATCH)
                .bind(due)
                .bind(JOB)
                .execute(p)
                .await
                .map(|r| r.rows_affected()),
            Pool::Postgres(p) => sqlx::query(RELEASE_BATCH)
                .bind(due)
                .bind(JOB)
                .execute(p)
                .await
                .map(|r| r.rows_affected()),
        }
        .expect("release the batch")
    }

    async fn count(&self, sql: &'static str) -> i64 {
        match self.store.pool() {
            Pool::Sqlite(p) => sqlx::query_scalar(sql).fetch_one(p).await,
            Pool::Postgres(p) => sqlx::query_scalar(sql).fetch_one(p).await,
        }
        .expect("count runs")
    }

    async fn wait_done(&self) {
        let start = Instant::now();
        while self.count(NOT_DONE).await > 0 {
            assert!(
                start.elapsed() < DRAIN_TIMEOUT,
                "the hosts did not drain the batch within {DRAIN_TIMEOUT:?} (logs in {})",
                self.home.path().display()
            );
            tokio::time::sleep(CHECK_EVERY).await;
        }
    }

    /// Kicks one instance `iters` times over HTTP, one after the other, and returns the
    /// summed time from queued to claimed (database clock).
    async fn kick_to_start(&self, iters: u64) -> Duration {
        let host = &self.hosts[0];
        let mut total_ms = 0i64;
        for _ in 0..iters {
            let response = self
                .http
                .post(format!(
                    "http://{}/jobs/{JOB}/kick?instance=latency",
                    host.addr
                ))
                .send()
                .await
                .expect("kick");
            assert_eq!(response.status().as_u16(), 202, "kick refused");
            let body: serde_json::Value = response.json().await.expect("kick body");
            assert_eq!(
                body["result"], "queued",
                "the previous kick was still running: {body}"
            );
            let id = body["run_id"].as_str().expect("run_id").to_string();
            let start = Instant::now();
            let run = loop {
                tokio::time::sleep(Duration::from_millis(2)).await;
                let run = self
                    .store
                    .get_run(&id)
                    .await
                    .expect("read the run")
                    .expect("the run");
                if run.finished_at.is_some() {
                    break run;
                }
                assert!(
                    start.elapsed() < DRAIN_TIMEOUT,
                    "the kicked run never finished: {run:?}"
                );
            };
            assert_eq!(run.status, "succeeded", "{run:?}");
            total_ms += run.started_at.expect("started") - run.created_at;
        }
        Duration::from_millis(total_ms.max(0) as u64)
    }

    async fn stop(self) {
        for host in self.hosts {
            host.stop().await;
        }
        self.store.close().await;
        if let Some(database) = self.database {
            database.drop_now().await;
        }
    }
}

/// A `host serve` child process, killed if dropped without `stop`.
struct HostProcess {
    child: Child,
    addr: String,
}

impl HostProcess {
    async fn start(home: &Path, db_url: &str, manifest: &Path, n: usize) -> HostProcess {
        let log = home.join(format!("serve-{n}.log"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_host"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--workers",
                &WORKERS.to_string(),
            ])
            .arg("--manifest")
            .arg(manifest)
            .env("JOBHOST_HOME", home)
            .env("JOBHOST_DB", db_url)
            .env_remove("JOBHOST_LOG")
            .current_dir(home)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(File::create(&log).expect("host log file"))
            .spawn()
            .expect("spawn host serve");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        // Reads the first line, then keeps the pipe drained.
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = tx.send(lines.next());
            for _ in lines {}
        });
        let line = tokio::task::spawn_blocking(move || rx.recv_timeout(START_TIMEOUT))
            .await
            .expect("join");
        let addr = match line {
            Ok(Some(Ok(line))) => line
                .trim()
                .strip_prefix("listening on ")
                .map(str::to_string),
            _ => None,
        };
        let Some(addr) = addr else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "host serve did not start; its log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        };
        HostProcess { child, addr }
    }

    /// SIGTERM (a graceful drain, nothing is running), then SIGKILL after 10 s.
    async fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---- Postgres databases -------------------------------------------------------------

fn postgres_admin_url() -> String {
    std::env::var("JOBHOST_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

/// A fresh database on the benchmark's Postgres server, dropped at the end (or, after a
/// panic, when this is dropped).
struct PgDatabase {
    name: String,
    url: String,
    dropped: bool,
}

impl PgDatabase {
    async fn create() -> PgDatabase {
        use sqlx::Connection;
        let admin = postgres_admin_url();
        let name = format!("jobhost_bench_{}", uuid::Uuid::now_v7().simple());
        let mut conn = sqlx::PgConnection::connect(&admin)
            .await
            .expect("connect to Postgres (set JOBHOST_TEST_POSTGRES)");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .expect("create the benchmark database");
        let _ = conn.close().await;
        let (base, _) = admin.rsplit_once('/').expect("a database URL");
        PgDatabase {
            url: format!("{base}/{name}"),
            name,
            dropped: false,
        }
    }

    async fn drop_now(mut self) {
        drop_database(&self.name).await;
        self.dropped = true;
    }
}

async fn drop_database(name: &str) {
    use sqlx::Connection;
    let Ok(mut conn) = sqlx::PgConnection::connect(&postgres_admin_url()).await else {
        eprintln!("serve benchmarks: cannot connect to drop database {name}");
        return;
    };
    let dropped = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )))
    .execute(&mut conn)
    .await;
    if let Err(e) = dropped {
        eprintln!("serve benchmarks: cannot drop database {name}: {e}");
    }
    let _ = conn.close().await;
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        if self.dropped {
            return;
        }
        let name = self.name.clone();
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(drop_database(&name));
            Some(())
        })
        .join();
    }
}

// ---- graphile_worker ----------------------------------------------------------------

fn bench_graphile(c: &mut Criterion, settings: &Settings, record: &Record) {
    let mut group = c.benchmark_group("graphile_worker");
    configure_drain(&mut group, settings);
    let batch = settings.batch;
    // Its own runtime: only for creating and dropping the database.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("start a tokio runtime");
    let mut env: Option<Result<Graphile, String>> = None;
    for (id, variant, workers) in [
        ("drain_1_worker", "graphile_worker/drain_1_worker", 1),
        ("drain_3_workers", "graphile_worker/drain_3_workers", 3),
    ] {
        group.bench_function(id, |b| {
            let env = env.get_or_insert_with(|| Graphile::start(&rt));
            let env = match env {
                Ok(env) => env,
                Err(message) => panic!("graphile-worker benchmarks: {message}"),
            };
            env.scale_to(workers);
            let env: &Graphile = env;
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += env.drain(batch, record);
                }
                record.sample(variant, total, iters);
                total
            });
        });
    }
    group.finish();
    if let Some(Ok(env)) = env {
        env.stop(&rt);
    }
}

/// graphile-worker's database and the `node worker.js` processes on it.
struct Graphile {
    dir: PathBuf,
    logs: TempDir,
    database: PgDatabase,
    workers: Vec<NodeWorker>,
    started: usize,
}

impl Graphile {
    fn start(rt: &Runtime) -> Result<Graphile, String> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("benches")
            .join("graphile");
        install_node_modules(&dir)?;
        let database = rt.block_on(PgDatabase::create());
        let setup = Command::new("node")
            .args(["enqueue.js", "--setup"])
            .current_dir(&dir)
            .env("DATABASE_URL", &database.url)
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("cannot run node: {e}"))?;
        if !setup.status.success() {
            return Err(format!(
                "`node enqueue.js --setup` failed: {}",
                setup.status
            ));
        }
        Ok(Graphile {
            dir,
            logs: tempfile::tempdir().expect("temp dir"),
            database,
            workers: Vec::new(),
            started: 0,
        })
    }

    fn scale_to(&mut self, n: usize) {
        while self.workers.len() > n {
            self.workers.pop().expect("a worker").stop();
        }
        while self.workers.len() < n {
            let worker = NodeWorker::start(
                &self.dir,
                &self.database.url,
                self.logs.path(),
                self.started,
            );
            self.started += 1;
            self.workers.push(worker);
        }
    }

    /// Enqueues a batch with `enqueue.js` and returns how long the workers took to drain
    /// it, from the moment `addJobs` resolved (the earliest worker's report).
    fn drain(&self, batch: usize, record: &Record) -> Duration {
        let mut enqueue = Command::new("node")
            .args(["enqueue.js", "--count", &batch.to_string()])
            .current_dir(&self.dir)
            .env("DATABASE_URL", &self.database.url)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn node enqueue.js");
        let mut line = String::new();
        BufReader::new(enqueue.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read enqueue.js output");
        let queued: serde_json::Value = serde_json::from_str(line.trim())
            .unwrap_or_else(|_| panic!("enqueue.js printed {line:?}"));
        let queued_at = queued["queued_at"].as_f64().expect("queued_at");
        record.note(
            "graphile enqueue_ms",
            queued["enqueue_ms"].as_f64().unwrap_or(f64::NAN),
        );
        let go = format!("{{\"queued_at\":{queued_at}}}\n");
        for worker in &self.workers {
            worker.send(&go);
        }
        let mut fastest = f64::INFINITY;
        let mut processed = 0;
        for worker in &self.workers {
            let report = worker.receive(DRAIN_TIMEOUT);
            fastest = fastest.min(report["elapsed_ms"].as_f64().expect("elapsed_ms"));
            processed += report["processed"].as_u64().expect("processed");
        }
        assert!(
            enqueue.wait().expect("wait for enqueue.js").success(),
            "enqueue.js failed"
        );
        assert_eq!(processed, batch as u64, "the workers ran every job once");
        Duration::from_secs_f64(fastest.max(0.0) / 1e3)
    }

    fn stop(self, rt: &Runtime) {
        for worker in self.workers {
            worker.stop();
        }
        rt.block_on(self.database.drop_now());
    }
}

/// `npm ci` (or `npm install`, without a lock file) when `node_modules` is missing.
fn install_node_modules(dir: &Path) -> Result<(), String> {
    if dir.join("node_modules").join("graphile-worker").is_dir() {
        return Ok(());
    }
    let args: &[&str] = if dir.join("package-lock.json").is_file() {
        &["ci", "--no-audit", "--no-fund"]
    } else {
        &["install", "--no-audit", "--no-fund"]
    };
    eprintln!(
        "serve benchmarks: running `npm {}` in {}",
        args.join(" "),
        dir.display()
    );
    let status = Command::new("npm")
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status()
        .map_err(|e| format!("cannot run npm (Node.js and npm are needed): {e}"))?;
    if !status.success() {
        return Err(format!(
            "`npm {}` failed in {}: {status}",
            args.join(" "),
            dir.display()
        ));
    }
    Ok(())
}

/// One `node worker.js` process: its stdin takes batches, its `@bench` lines come back
/// through `reports`; graphile-worker's own output goes to a log file.
struct NodeWorker {
    child: Child,
    stdin: Mutex<Option<ChildStdin>>,
    reports: Mutex<mpsc::Receiver<serde_json::Value>>,
}

impl NodeWorker {
    fn start(dir: &Path, db_url: &str, logs: &Path, n: usize) -> NodeWorker {
        let mut child = Command::new("node")
            .args(["worker.js", "--concurrency", &WORKERS.to_string()])
            .current_dir(dir)
            .env("DATABASE_URL", db_url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(File::create(logs.join(format!("worker-{n}.err"))).expect("log file"))
            .spawn()
            .expect("spawn node worker.js");
        let stdout = child.stdout.take().expect("stdout");
        let mut log = File::create(logs.join(format!("worker-{n}.log"))).expect("log file");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                match line.strip_prefix("@bench ") {
                    Some(json) => {
                        let value = serde_json::from_str(json).unwrap_or(serde_json::Value::Null);
                        if tx.send(value).is_err() {
                            break;
                        }
                    }
                    None => {
                        let _ = writeln!(log, "{line}");
                    }
                }
            }
        });
        let worker = NodeWorker {
            stdin: Mutex::new(child.stdin.take()),
            child,
            reports: Mutex::new(rx),
        };
        let ready = worker.receive(START_TIMEOUT);
        assert_eq!(ready["ready"], true, "worker.js did not start: {ready}");
        worker
    }

    fn send(&self, line: &str) {
        let mut stdin = self.stdin.lock().unwrap();
        let stdin = stdin.as_mut().expect("the worker's stdin is open");
        stdin
            .write_all(line.as_bytes())
            .expect("write to worker.js");
        stdin.flush().expect("flush worker.js stdin");
    }

    fn receive(&self, within: Duration) -> serde_json::Value {
        self.reports
            .lock()
            .unwrap()
            .recv_timeout(within)
            .unwrap_or_else(|e| panic!("no report from worker.js within {within:?}: {e}"))
    }

    /// Closes stdin: the worker stops gracefully; killed after 10 s.
    fn stop(mut self) {
        self.stdin.lock().unwrap().take();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for NodeWorker {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
