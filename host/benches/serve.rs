//! Benchmarks of `host serve` and of graphile-worker on the same Postgres server: how fast
//! real processes drain no-op runs, how long a kick waits for a worker, how a drain scales
//! with the backlog, and what a run costs the host in CPU, memory and database round trips.
//!
//! Run with `cargo bench -p jobhost --bench serve` (about 15 minutes on 2 cores); it ends
//! with a plain summary: medians, runs/s, the ratios to graphile-worker and the goals.
//! `JOBHOST_BENCH_QUICK=1` shrinks every size for a check that it all works (about a
//! minute).
//!
//! Settings (environment):
//! - `JOBHOST_BENCH_QUICK=1`: batches of 50, backlogs of 2 000, a curve of 200 and 2 000,
//!   50 kicks, a fan-out of 1 000 children, one repetition, 10 samples.
//! - `JOBHOST_BENCH_SAMPLES`: criterion samples per batch-mode variant (default 20; at
//!   least 10, criterion's minimum).
//! - `JOBHOST_BENCH_REPS`: timed repetitions of each backlog drain and fan-out (default 3;
//!   a drain one fewer, but at least one, above 50 000 runs).
//! - `JOBHOST_BENCH_CURVE`: the curve's backlog sizes, comma-separated (default 200, 10 000
//!   and 100 000; quick: 200 and 2 000).
//! - `JOBHOST_BENCH_PARTS`: the parts to run, comma-separated from `batch`, `latency`,
//!   `backlog`, `curve`, `trips`, `floor`, `fanout` (default all). Criterion's name filter
//!   (`-- jobhost`) selects within `batch`, the only part criterion samples.
//! - `JOBHOST_TEST_POSTGRES`: the Postgres server, as for the tests (default
//!   `postgres://postgres@127.0.0.1:5432/test`); each system gets a database
//!   `jobhost_bench_<uuid>` of its own there, dropped at the end.
//!
//! The processes: the release `host` binary (`CARGO_BIN_EXE_host`), `host serve --listen
//! 127.0.0.1:0 --workers W --manifest M` with one job, `noop` (the `noop` guest, built into
//! `target/wasm32-wasip2/guest/` first if missing), a home of its own and the default log
//! level (the fan-out's: its own manifest, below); graphile-worker 0.17 from
//! `benches/graphile/` (`npm ci` there first if
//! `node_modules` is missing), `node worker.js --concurrency W`, with its defaults (pool of
//! 10 connections: with 24 it warns that the pool is smaller than the concurrency) or with
//! its batching preset (`--batched`: a local queue of 500, completions batched without
//! delay). Everything shares the 2 cores with this process and Postgres.
//!
//! Drains, the same for both systems; done means the first check (every 5 ms, on the
//! benchmark's own connection) that finds no work left: `SELECT EXISTS` of a jobhost run
//! `queued` or `running`, or of any graphile-worker job (it deletes a job that succeeded,
//! and keeps a failed one). After each drain, outside the clock, every run must have
//! succeeded.
//! - batch: idle processes (4 workers each, 1 or 3 processes), listening, get a batch of
//!   200 runs made visible by one statement; the clock runs from that statement's return
//!   (it has committed and notified) to done. jobhost: the runs are inserted with the
//!   library (`Store::insert_run`, distinct instances) due in a day, then one `UPDATE`
//!   makes them due, which notifies the hosts as a kick does. graphile-worker: one
//!   `add_jobs` statement, the SQL function its `addJobs` calls. SQLite has no
//!   notifications, and a host finds rows another process wrote only at its next poll (1
//!   s): there the `UPDATE` makes the batch due 1.5 s ahead, at `T`; the host sees it at its
//!   next poll and waits for exactly `T`, and the clock runs from `T`. Criterion samples
//!   these (flat, one batch a sample after one warm-up batch; it warns that it cannot
//!   complete the samples in the measurement time, by design).
//! - backlog: 20 000 runs are queued in bulk (below) before any process starts; then the
//!   processes (1 or 3, 24 workers each) start at once. The clock runs from the first claim
//!   to done: jobhost's first `started_at` (stamped inside the claim), graphile-worker's
//!   first `job:start` event; process start-up before it (shown as `to 1st`) is not in it.
//!   One smaller untimed drain first, then `JOBHOST_BENCH_REPS` timed ones, each with fresh
//!   processes on emptied tables.
//! - curve: the backlog drain of jobhost alone, 1 host, at 200, 10 000 and 100 000 runs
//!   (`JOBHOST_BENCH_CURVE`: other sizes, comma-separated), each backlog queued two ways:
//!   `kicked` as below, and `inserted` as an operator's script, an import or an older
//!   version may queue one: one kick's row copied by a plain `INSERT`, every copy with a
//!   random (v4) id and the same due and creation time, instances `b0`….
//!
//! Bulk queueing, in one statement: jobhost runs shaped as `Store::insert_run` shapes a
//! kick's (origin `kick`, the job's payload, instances `b0`…, no component digest,
//! uuid-v7-like ids), one a millisecond up to now, as kicks would have queued them, in an
//! `INSERT … SELECT` over `generate_series` (Postgres) or a recursive CTE (SQLite); one
//! millisecond for all, which kicks never do, would make each SQLite claim sort every due
//! run of it. graphile-worker's jobs with one `add_jobs`. Then Postgres' tables are
//! `ANALYZE`d, as autovacuum would have done for a backlog that built up over time. Nothing
//! vacuums otherwise: the summary shows the server's `autovacuum` setting, and the load
//! average, since other work on the machine skews every number.
//!
//! Costs of a run:
//! - CPU: user + system time of the system's processes (hosts, or node workers; not
//!   Postgres) from `/proc/<pid>/stat`, per run: in batch mode over the drain's clock; in
//!   backlog modes from each process's start-up line (the host's `listening on`, printed as
//!   its dispatcher starts; the worker's `started`) to done.
//! - DB CPU (backlog drains on Postgres): user + system time of every `postgres` process
//!   on this machine from spawning the processes to done, per run (the benchmark's own
//!   checks included; a backend that exits within the window takes its time with it).
//! - RSS: the largest `VmHWM` (peak resident set) of a process, read at the end of a backlog
//!   drain (each process lives for one drain).
//! - round trips (`trips`): one 20 000-run backlog drain of one Postgres host whose database
//!   URL (with `sslmode=disable`) points at a TCP proxy in this process; the proxy parses
//!   what the host sends and counts simple queries (`Q`) and extended-protocol syncs (`S`),
//!   a round trip each, from the host's `listening on` to done (start-up counted apart).
//!   The proxy slows that drain; it is not in the throughput table.
//!
//! `floor`: what the Postgres server alone spends on a run when no process runs at all,
//! to tell the work the design requires from the work of the code around it. One session
//! drains 20 000 runs in SQL (a `DO` block), claiming and ending 250 at a time, a commit
//! for each claim and each ending, four ways, each measured as the server's CPU per run
//! (as in the backlog drains): `queue`, the rows a graphile-worker-style queue writes (a
//! job row locked and updated to claim it, deleted when done); `lean`, the rows jobhost's
//! invariants require on the leanest schema that keeps them (a narrow queue row with one
//! index, deleted at the end; a lease taken and released; an attempt row; the run's
//! history row, inserted at the end); `required`, the same rows on jobhost's schema (the
//! run row started and ended: no trigger, no check); `functions`, jobhost's own claim and
//! ending functions (`jobhost_claim_runs`, `jobhost_record_attempts`) called with what a
//! host sends. Not in it: the network, the processes, concurrency. Each workload is drained
//! once untimed, then `JOBHOST_BENCH_REPS` times, in turns, all in the one session: plans
//! a session keeps from one drain to the next count, as in a host's long-lived
//! connections (migration 0018 came from what this showed).
//!
//! `latency`: sequential kicks over one host's HTTP API (1 host, 4 workers, one instance,
//! each kick waited for until its run succeeded, 10 warm-up kicks first). Client-side: from
//! sending `POST /jobs/noop/kick` until this process, reading the run's status on its own
//! connection every 0.1 ms, first sees it no longer `queued` (so it includes the kick's own
//! answer, shown apart, and up to a poll's resolution). Database-side: the run's
//! `started_at - created_at`, whole milliseconds on the database clock.
//!
//! `fanout`: one parent starts 10 000 children (quick: 1 000) and waits for them, on
//! Postgres, 1 process (24 workers / concurrency 24), started on emptied
//! tables and idle (jobhost: `listening on`; graphile-worker: `ready`) before the parent is
//! queued. jobhost: `host serve` with the `family` guest (built first if missing) as the
//! jobs `family` (payload `{"children": N, "in_tx": false, "wait": "continue"}`) and
//! `family-child`; the parent's first pass queues its children with `jobs::enqueue_all`
//! in batches of 1 000 (each batch a write of its own), calls `wait-for-children` and
//! continues; the family sweep (every 250 ms) wakes it once every child ended, and its
//! second pass sums their results. graphile-worker (`worker.js`): a `parent` task sets a
//! counter row (`bench_fanin`, made by `setup.js`) to N and queues N `child` jobs with one
//! `add_jobs` statement, in one transaction; each `child` decrements the counter in one
//! statement that, for the child taking it to 0, also adds the `resume` job. The clock
//! runs from just before the parent is queued (jobhost: sending `POST /jobs/family/kick`;
//! graphile-worker: its `add_job` statement, from this process) to the resume starting:
//! jobhost's second pass's attempt `started_at` (stamped in its claim, whole ms on the
//! database clock), graphile-worker's `resume` task reporting its start. Done, for the
//! processes' CPU and the server's (as in the backlog drains, from the parent's queueing),
//! is the first check (every 5 ms) that sees the resume started: jobhost's parent claimed
//! in pass 2, graphile-worker's report. Shown beside it, not clocked: `enqueue`, jobhost's
//! first pass (its attempt's `started_at` to `finished_at`: the component's start, the ten
//! batches, the wait) and graphile-worker's `parent` task (start to commit); `last ->
//! resume`, from the last child's end (jobhost: its `finished_at`; graphile-worker: the
//! statement that took the counter to 0) to the resume. Afterwards, outside the clock:
//! every child succeeded, and the parent (jobhost) with the result `{"succeeded": N,
//! "sum": N(N-1)/2}` (49 995 000 for 10 000), or (graphile-worker) no job left (it keeps a
//! failed one), the counter at 0 and its total, which `resume` reports, N(N-1)/2. One
//! untimed fan-out of 100 children first (jobhost: the job `family-warm-up`), then
//! `JOBHOST_BENCH_REPS` timed ones, each with a fresh process.

#[path = "support/guests.rs"]
mod guests;

use criterion::{Criterion, SamplingMode, Throughput};
use jobhost::rules::job::JobSpec;
use jobhost::store::new_run_id;
use jobhost::store::{NewRun, Origin, Pool, Store};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::future::Future;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::runtime::Runtime;

/// The one job every host serves (and graphile-worker's one task).
const JOB: &str = "noop";
/// Workers per host, and graphile-worker's concurrency per process, in batch mode (and for
/// the kicks).
const BATCH_WORKERS: usize = 4;
/// The same in backlog mode and the curve.
const BACKLOG_WORKERS: usize = 24;
/// How often a drain checks for work left, for every system.
const CHECK_EVERY: Duration = Duration::from_millis(5);
/// Batch-mode runs are inserted due this far ahead: never, for the benchmark.
const PARKED_MS: i64 = 24 * 60 * 60 * 1000;
/// On SQLite a batch becomes due this far ahead: beyond the host's 1 s poll, so the host
/// has looked at the queue once more and waits for exactly that instant.
const SQLITE_DUE_AHEAD_MS: i64 = 1_500;
/// The untimed drain before a backlog variant's timed ones has at most this many runs.
const WARM_UP_RUNS: usize = 1_000;
/// Backlogs above this are drained one time fewer (they take minutes on Postgres).
const LONG_DRAIN: usize = 50_000;
/// Kicks before the measured ones.
const KICK_WARM_UP: usize = 10;
/// The pause between two looks at a kicked run's status.
const KICK_POLL: Duration = Duration::from_micros(100);
/// Nothing should come near these.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(600);
const START_TIMEOUT: Duration = Duration::from_secs(120);
/// The goals printed beside the results.
const SQLITE_GOAL_RUNS_PER_S: f64 = 10_000.0;
const POSTGRES_KICK_GOAL_MS: f64 = 5.0;
const SQLITE_KICK_GOAL_MS: f64 = 1.0;

/// Makes every parked run of the job due at `$1`. Setting `status` makes the Postgres
/// trigger notify the hosts, as a kick's insert does.
const RELEASE_BATCH: &str = "UPDATE jobhost_runs SET status = 'queued', next_attempt_at = $1 \
    WHERE status = 'queued' AND job = $2";
const JOBHOST_BUSY: &str =
    "SELECT EXISTS (SELECT 1 FROM jobhost_runs WHERE status IN ('queued', 'running'))";
const NOT_SUCCEEDED: &str = "SELECT COUNT(*) FROM jobhost_runs WHERE status <> 'succeeded'";
/// Runs, succeeded runs, and the first claim.
const BACKLOG_OUTCOME: &str = "SELECT COUNT(*), \
    COALESCE(SUM(CASE WHEN status = 'succeeded' THEN 1 ELSE 0 END), 0), MIN(started_at) \
    FROM jobhost_runs";
const RUN_STATUS: &str = "SELECT status FROM jobhost_runs WHERE id = $1";
const CLEAR_POSTGRES: &str =
    "TRUNCATE jobhost_runs, jobhost_attempts, jobhost_leases, jobhost_reports";
const CLEAR_SQLITE: &str = "DELETE FROM jobhost_runs; DELETE FROM jobhost_attempts; \
    DELETE FROM jobhost_leases; DELETE FROM jobhost_reports";
/// `$1` runs as `insert_run` writes a kick's, one a millisecond up to now: `$2` an id
/// prefix (the first 24 characters of a v7 uuid; the row number makes the last 12), `$3`
/// job, `$4` tenant, `$5` payload.
const QUEUE_POSTGRES: &str = "INSERT INTO jobhost_runs (id, job, instance, tenant, origin, \
    payload, status, next_attempt_at, created_at, updated_at) \
    SELECT $2 || lpad(to_hex(i), 12, '0'), $3, 'b' || i, $4, 'kick', $5, 'queued', \
    t.at - $1 + i, t.at - $1 + i, t.at - $1 + i \
    FROM generate_series(0, $1 - 1) AS i, \
    (SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT) AS at) AS t";
const QUEUE_SQLITE: &str = "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n \
    WHERE i + 1 < $1) \
    INSERT INTO jobhost_runs (id, job, instance, tenant, origin, payload, status, \
    next_attempt_at, created_at, updated_at) \
    SELECT $2 || printf('%012x', i), $3, 'b' || i, $4, 'kick', $5, 'queued', \
    t.at - $1 + i, t.at - $1 + i, t.at - $1 + i \
    FROM n, (SELECT CAST(unixepoch('subsec') * 1000 AS BIGINT) AS at) AS t";
/// `$1` copies of the one queued run, as a plain `INSERT` of an operator's would make them:
/// random v4 ids, its times, instances `b0`….
const COPY_POSTGRES: &str = "INSERT INTO jobhost_runs (id, job, instance, tenant, origin, \
    payload, status, next_attempt_at, created_at, updated_at) \
    SELECT CAST(gen_random_uuid() AS TEXT), r.job, 'b' || i, r.tenant, r.origin, r.payload, \
    r.status, r.next_attempt_at, r.created_at, r.updated_at \
    FROM generate_series(0, $1 - 1) AS i, (SELECT * FROM jobhost_runs LIMIT 1) AS r";
const COPY_SQLITE: &str = "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n \
    WHERE i + 1 < $1) \
    INSERT INTO jobhost_runs (id, job, instance, tenant, origin, payload, status, \
    next_attempt_at, created_at, updated_at) \
    SELECT lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' \
        || substr(hex(randomblob(2)), 2) || '-' || substr('89AB', 1 + abs(random()) % 4, 1) \
        || substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6))), \
    r.job, 'b' || i, r.tenant, r.origin, r.payload, r.status, r.next_attempt_at, \
    r.created_at, r.updated_at \
    FROM n, (SELECT * FROM jobhost_runs LIMIT 1) AS r";
const ONLY_RUN: &str = "SELECT id FROM jobhost_runs";
const DROP_RUN: &str = "DELETE FROM jobhost_runs WHERE id = $1";
/// `$1` no-op jobs, in the statement graphile-worker's `addJobs` runs.
const GRAPHILE_ADD_JOBS: &str = "SELECT COUNT(*) FROM graphile_worker.add_jobs(ARRAY(\
    SELECT json_populate_record(NULL::graphile_worker.job_spec, \
    '{\"identifier\": \"noop\", \"payload\": {}}'::json) FROM generate_series(1, $1)), false)";
const GRAPHILE_BUSY: &str = "SELECT EXISTS (SELECT 1 FROM graphile_worker._private_jobs)";

/// The fan-out's parent job (the `family` guest), the one of its untimed warm-up, and
/// their children's job.
const FANOUT_PARENT: &str = "family";
const FANOUT_WARM_UP_JOB: &str = "family-warm-up";
const FANOUT_CHILD: &str = "family-child";
/// Children of the untimed fan-out before the timed ones.
const FANOUT_WARM_UP: usize = 100;
/// The parent's status, pass, result, and end.
const PARENT_STATE: &str =
    "SELECT status, pass, result, finished_at FROM jobhost_runs WHERE id = $1";
/// The parent's attempts: pass, start and end.
const PARENT_ATTEMPTS: &str = "SELECT pass, started_at, finished_at FROM jobhost_attempts \
    WHERE run_id = $1 ORDER BY seq";
/// Children, succeeded children, and the last child's end.
const CHILDREN_OUTCOME: &str = "SELECT COUNT(*), \
    COALESCE(SUM(CASE WHEN status = 'succeeded' THEN 1 ELSE 0 END), 0), MAX(finished_at) \
    FROM jobhost_runs WHERE parent_run = $1";
/// graphile-worker's fan-out parent, for `$1` children.
const GRAPHILE_ADD_PARENT: &str =
    "SELECT graphile_worker.add_job('parent', json_build_object('children', $1::int))";
const GRAPHILE_FANIN: &str = "SELECT remaining, total FROM bench_fanin WHERE id = 1";

/// Runs `$body` with `$p` bound to the store's sqlx pool, whichever backend it is.
macro_rules! on_pool {
    ($store:expr, $p:ident => $body:expr) => {
        match $store.pool() {
            Pool::Sqlite($p) => $body,
            Pool::Postgres($p) => $body,
        }
    };
}

fn main() {
    let (noop, family) = match guests::locate_or_build(&["noop", "family"]) {
        Ok(mut found) => (found.remove(0), found.remove(0)),
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
    let context = Context {
        server: rt.block_on(describe_postgres()),
        load_before: load_average(),
    };

    if settings.runs("batch") {
        batch_mode(&mut c, &rt, &noop, &settings, &record);
        c.final_summary();
    }
    // Only criterion's part knows how to list its benchmarks.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let mut envs = Envs::default();
    if settings.runs("latency") {
        kick_latency(&rt, &noop, &settings, &record, &mut envs);
    }
    if settings.runs("backlog") {
        backlog_mode(&rt, &noop, &settings, &record, &mut envs);
    }
    if settings.runs("curve") {
        backlog_curve(&rt, &noop, &settings, &record, &mut envs);
    }
    if settings.runs("trips") {
        round_trips(&rt, &noop, &settings, &record, &mut envs);
    }
    if settings.runs("floor") {
        rt.block_on(floor(&settings, &record));
    }
    if settings.runs("fanout") {
        fan_out(&rt, &family, &settings, &record, &mut envs);
    }
    record.enter("the end");
    rt.block_on(envs.stop(&record));
    record.print_summary(&settings, &context);
}

/// Where the numbers were taken, for the summary.
struct Context {
    server: String,
    load_before: String,
}

/// The Postgres server's version and the settings that matter to a drain.
async fn describe_postgres() -> String {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&postgres_admin_url())
        .await
        .expect("connect to Postgres (set JOBHOST_TEST_POSTGRES)");
    let (version, autovacuum, synchronous_commit): (String, String, String) = sqlx::query_as(
        "SELECT current_setting('server_version'), current_setting('autovacuum'), \
         current_setting('synchronous_commit')",
    )
    .fetch_one(&mut conn)
    .await
    .expect("read the server's settings");
    let _ = conn.close().await;
    format!("Postgres {version} (autovacuum {autovacuum}, synchronous_commit {synchronous_commit})")
}

/// The 1, 5 and 15 minute load averages: other work on the machine skews every number.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

// ---- settings -----------------------------------------------------------------------

struct Settings {
    quick: bool,
    parts: Vec<String>,
    batch: usize,
    samples: usize,
    backlog: usize,
    curve: Vec<usize>,
    reps: usize,
    kicks: usize,
    /// The fan-out's children.
    fanout: usize,
}

impl Settings {
    fn from_env() -> Settings {
        let quick = std::env::var("JOBHOST_BENCH_QUICK").is_ok_and(|v| v == "1");
        let number = |name: &str, default: usize| match std::env::var(name) {
            Ok(v) => v
                .parse()
                .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
            Err(_) => default,
        };
        let samples = number("JOBHOST_BENCH_SAMPLES", if quick { 10 } else { 20 });
        assert!(
            samples >= 10,
            "JOBHOST_BENCH_SAMPLES must be at least 10 (criterion's minimum)"
        );
        let reps = number("JOBHOST_BENCH_REPS", if quick { 1 } else { 3 });
        let curve = match std::env::var("JOBHOST_BENCH_CURVE") {
            Ok(v) => v
                .split(',')
                .map(|n| {
                    n.trim()
                        .parse()
                        .unwrap_or_else(|_| panic!("JOBHOST_BENCH_CURVE: {n:?} is not a number"))
                })
                .collect(),
            Err(_) if quick => vec![200, 2_000],
            Err(_) => vec![200, 10_000, 100_000],
        };
        assert!(reps >= 1, "JOBHOST_BENCH_REPS must be at least 1");
        let parts: Vec<String> = std::env::var("JOBHOST_BENCH_PARTS")
            .unwrap_or_else(|_| "batch,latency,backlog,curve,trips,floor,fanout".to_string())
            .split(',')
            .map(|p| p.trim().to_string())
            .collect();
        for part in &parts {
            assert!(
                [
                    "batch", "latency", "backlog", "curve", "trips", "floor", "fanout"
                ]
                .contains(&part.as_str()),
                "JOBHOST_BENCH_PARTS: unknown part {part:?}"
            );
        }
        Settings {
            quick,
            parts,
            batch: if quick { 50 } else { 200 },
            samples,
            backlog: if quick { 2_000 } else { 20_000 },
            curve,
            reps,
            kicks: if quick { 50 } else { 300 },
            fanout: if quick { 1_000 } else { 10_000 },
        }
    }

    fn runs(&self, part: &str) -> bool {
        self.parts.iter().any(|p| p == part)
    }
}

// ---- what is measured ---------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Db {
    Postgres,
    Sqlite,
}

impl fmt::Display for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Db::Postgres => "postgres",
            Db::Sqlite => "sqlite",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum System {
    JobhostPostgres,
    JobhostSqlite,
    Graphile,
    GraphileBatched,
}

/// A system and how many processes of it run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Variant {
    system: System,
    procs: usize,
}

impl Variant {
    /// The variants in the order of the summary.
    const ALL: [Variant; 7] = [
        Variant::of(System::JobhostPostgres, 1),
        Variant::of(System::JobhostPostgres, 3),
        Variant::of(System::Graphile, 1),
        Variant::of(System::Graphile, 3),
        Variant::of(System::GraphileBatched, 1),
        Variant::of(System::GraphileBatched, 3),
        Variant::of(System::JobhostSqlite, 1),
    ];

    const fn of(system: System, procs: usize) -> Variant {
        Variant { system, procs }
    }

    fn label(self) -> &'static str {
        match self.system {
            System::JobhostPostgres => "jobhost postgres",
            System::JobhostSqlite => "jobhost sqlite",
            System::Graphile => "graphile-worker",
            System::GraphileBatched => "graphile-worker batched",
        }
    }

    /// Criterion's name for it.
    fn id(self) -> String {
        let system = match self.system {
            System::JobhostPostgres => "jobhost_postgres",
            System::JobhostSqlite => "jobhost_sqlite",
            System::Graphile => "graphile",
            System::GraphileBatched => "graphile_batched",
        };
        let unit = match self.system {
            System::JobhostPostgres | System::JobhostSqlite => "host",
            System::Graphile | System::GraphileBatched => "worker",
        };
        let plural = if self.procs == 1 { "" } else { "s" };
        format!("{system}_{}_{unit}{plural}", self.procs)
    }
}

/// How a backlog was queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Shape {
    /// As kicks queue runs: time-ordered (v7-like) ids, one a millisecond.
    Kicked,
    /// One kick's row copied by a plain `INSERT`: random (v4) ids, one due and creation
    /// time for all.
    Inserted,
}

impl Shape {
    const ALL: [Shape; 2] = [Shape::Kicked, Shape::Inserted];
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Shape::Kicked => "kicked",
            Shape::Inserted => "inserted",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Batch(Variant),
    Backlog(Variant),
    Curve(Db, Shape, usize),
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Batch(v) => write!(f, "batch/{}", v.id()),
            Key::Backlog(v) => write!(f, "backlog/{}", v.id()),
            Key::Curve(db, shape, runs) => write!(f, "curve/{db}/{shape}/{runs}"),
        }
    }
}

/// A system that drains a batch of runs made visible at once (batch mode).
trait DrainsBatches {
    async fn drain_batch(&self, batch: usize) -> Drain;
}

impl DrainsBatches for Jobhost {
    async fn drain_batch(&self, batch: usize) -> Drain {
        Jobhost::drain_batch(self, batch).await
    }
}

impl DrainsBatches for Graphile {
    async fn drain_batch(&self, batch: usize) -> Drain {
        Graphile::drain_batch(self, batch).await
    }
}

/// Criterion's sample of `iters` batch drains: their clocked time, each recorded.
async fn timed_batches(
    env: &impl DrainsBatches,
    batch: usize,
    iters: u64,
    record: &Record,
    variant: Variant,
) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let drain = env.drain_batch(batch).await;
        total += drain.elapsed;
        record.drain(Key::Batch(variant), drain);
    }
    total
}

/// One drain.
#[derive(Clone, Copy)]
struct Drain {
    runs: usize,
    elapsed: Duration,
    /// CPU time of the system's processes (see the module comment for the window).
    cpu: Duration,
    /// CPU time of the Postgres server's processes over the same window (backlog drains
    /// on Postgres).
    db_cpu: Option<Duration>,
    /// The largest peak RSS of a process, in KiB (backlog drains).
    peak_rss_kib: Option<u64>,
    /// From spawning the processes to the first claim (backlog drains).
    to_first_claim: Option<Duration>,
}

/// One kick: from sending it to its answer and to seeing its run claimed, and the run's
/// own `started_at - created_at`.
struct Kick {
    answered: Duration,
    client: Duration,
    db_ms: i64,
}

/// What the counting proxy saw.
#[derive(Clone, Copy)]
struct Counted {
    connections: u64,
    queries: u64,
    syncs: u64,
}

impl std::ops::Sub for Counted {
    type Output = Counted;
    fn sub(self, earlier: Counted) -> Counted {
        Counted {
            connections: self.connections - earlier.connections,
            queries: self.queries - earlier.queries,
            syncs: self.syncs - earlier.syncs,
        }
    }
}

struct Trips {
    runs: usize,
    start_up: Counted,
    drain: Counted,
    elapsed: Duration,
}

/// One fan-out: a parent, its children, and the parent's resume.
struct Fanout {
    children: usize,
    /// From just before the parent is queued to its resume's start.
    resumed: Duration,
    /// The parent's first pass (jobhost) or task (graphile-worker), which queues the
    /// children.
    enqueued: Duration,
    /// From the last child's end to the resume's start.
    last_to_resume: Option<Duration>,
    /// CPU time of the process, from queueing the parent to seeing the resume.
    cpu: Duration,
    /// CPU time of the Postgres server's processes over the same window.
    db_cpu: Duration,
}

/// Everything measured, for the summary.
#[derive(Default)]
struct Record {
    drains: Mutex<BTreeMap<Key, Vec<Drain>>>,
    kicks: Mutex<BTreeMap<Db, Vec<Kick>>>,
    trips: Mutex<Option<Trips>>,
    floor: Mutex<Vec<FloorDrains>>,
    fanouts: Mutex<BTreeMap<System, Vec<Fanout>>>,
    /// What runs now (a criterion benchmark, a backlog drain...), for the log lines.
    phase: Mutex<String>,
    /// WARN and ERROR lines of the processes' logs, by system: how many in each phase, and
    /// the first few distinct ones (numbers aside), with their phase.
    logs: Mutex<BTreeMap<&'static str, Logged>>,
}

#[derive(Default)]
struct Logged {
    by_phase: BTreeMap<String, usize>,
    /// Phase and line.
    first: Vec<(String, String)>,
}

impl Record {
    fn drain(&self, key: Key, drain: Drain) {
        self.drains
            .lock()
            .unwrap()
            .entry(key)
            .or_default()
            .push(drain);
    }

    fn enter(&self, phase: impl fmt::Display) {
        *self.phase.lock().unwrap() = phase.to_string();
    }

    fn log_lines(&self, system: &'static str, lines: Vec<String>) {
        let phase = self.phase.lock().unwrap().clone();
        let mut logs = self.logs.lock().unwrap();
        let logged = logs.entry(system).or_default();
        if !lines.is_empty() {
            *logged.by_phase.entry(phase.clone()).or_default() += lines.len();
        }
        let shape = |line: &str| line.replace(|c: char| c.is_ascii_digit(), "#");
        for line in lines {
            if logged.first.len() < 5 && !logged.first.iter().any(|(_, l)| shape(l) == shape(&line))
            {
                logged.first.push((phase.clone(), line));
            }
        }
    }

    /// The summary of the last `keep` drains of `key` (batch mode's first is criterion's
    /// warm-up).
    fn stats(&self, key: Key, keep: usize) -> Option<Stats> {
        let drains = self.drains.lock().unwrap();
        let all = drains.get(&key)?;
        Stats::of(&all[all.len().saturating_sub(keep)..])
    }

    fn print_summary(&self, s: &Settings, context: &Context) {
        println!();
        println!(
            "==== serve benchmarks: summary ({} run) ====",
            if s.quick { "quick" } else { "full" }
        );
        println!(
            "{} cores; {}; load average before {}, after {}",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            context.server,
            context.load_before,
            load_average()
        );
        if s.runs("batch") {
            self.print_mode(s, "batch");
        }
        if s.runs("backlog") {
            self.print_mode(s, "backlog");
        }
        if s.runs("latency") {
            self.print_latency(s);
        }
        if s.runs("curve") {
            self.print_curve(s);
        }
        if let Some(trips) = &*self.trips.lock().unwrap() {
            print_trips(trips);
        }
        self.print_floor();
        if s.runs("fanout") {
            self.print_fanout(s);
        }
        self.print_logs();
    }

    fn print_mode(&self, s: &Settings, mode: &str) {
        let batch = mode == "batch";
        println!();
        if batch {
            println!(
                "batch: {} runs made due at once to idle, listening processes ({BATCH_WORKERS} \
                 workers / concurrency {BATCH_WORKERS} each); clock: from the return of the \
                 statement that queues them to the first check that finds none left; n: \
                 criterion samples",
                s.batch
            );
        } else {
            println!(
                "backlog: {} runs queued before the processes start ({BACKLOG_WORKERS} workers \
                 / concurrency {BACKLOG_WORKERS} each); clock: from the first claim to the first \
                 check that finds none left; 'to 1st': spawn to first claim, not clocked",
                s.backlog
            );
        }
        println!(
            "{:<24} {:>5} {}  comparison",
            "system",
            "procs",
            Stats::HEADER
        );
        let keep = if batch { s.samples } else { s.reps };
        let key = |v: Variant| {
            if batch {
                Key::Batch(v)
            } else {
                Key::Backlog(v)
            }
        };
        let rate = |system: System, procs: usize| {
            self.stats(key(Variant::of(system, procs)), keep)
                .map(|st| st.runs_per_s)
        };
        for v in Variant::ALL {
            let Some(st) = self.stats(key(v), keep) else {
                println!("{:<24} {:>5} (not run)", v.label(), v.procs);
                continue;
            };
            let comparison = match v.system {
                System::JobhostPostgres => format!(
                    "{} graphile, {} graphile batched",
                    times(Some(st.runs_per_s), rate(System::Graphile, v.procs)),
                    times(Some(st.runs_per_s), rate(System::GraphileBatched, v.procs)),
                ),
                System::JobhostSqlite => format!(
                    "{} the goal of {SQLITE_GOAL_RUNS_PER_S:.0} runs/s",
                    times(Some(st.runs_per_s), Some(SQLITE_GOAL_RUNS_PER_S))
                ),
                System::Graphile | System::GraphileBatched => String::new(),
            };
            println!(
                "{:<24} {:>5} {}  {comparison}",
                v.label(),
                v.procs,
                st.columns()
            );
        }
        println!(
            "CPU: user + system time of the system's own processes (hosts or node workers, \
             not Postgres) per run; DB: the Postgres server's processes, spawn to done \
             (backlog drains); RSS: largest peak of one process"
        );
    }

    fn print_latency(&self, s: &Settings) {
        println!();
        println!(
            "kick -> start: {} sequential kicks over the host's HTTP API (1 host, \
             {BATCH_WORKERS} workers), after {KICK_WARM_UP} warm-up kicks",
            s.kicks
        );
        println!(
            "{:<9} {:>11} {:>11} {:>16} {:>11} {:>7} {:>7}",
            "backend", "client p50", "client p99", "goal p50", "answer p50", "db p50", "db p99"
        );
        let kicks = self.kicks.lock().unwrap();
        for db in [Db::Sqlite, Db::Postgres] {
            let Some(kicks) = kicks.get(&db).filter(|k| !k.is_empty()) else {
                println!("{db:<9} (not run)");
                continue;
            };
            let sorted = |values: Vec<f64>| {
                let mut values = values;
                values.sort_by(f64::total_cmp);
                values
            };
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            let client = sorted(kicks.iter().map(|k| ms(k.client)).collect());
            let answered = sorted(kicks.iter().map(|k| ms(k.answered)).collect());
            let db_ms = sorted(kicks.iter().map(|k| k.db_ms as f64).collect());
            let goal = match db {
                Db::Postgres => POSTGRES_KICK_GOAL_MS,
                Db::Sqlite => SQLITE_KICK_GOAL_MS,
            };
            let p50 = percentile(&client, 0.50);
            let verdict = if p50 <= goal { "met" } else { "missed" };
            println!(
                "{db:<9} {:>8.3} ms {:>8.3} ms {:>16} {:>8.3} ms {:>4.0} ms {:>4.0} ms",
                p50,
                percentile(&client, 0.99),
                format!("<= {goal:.0} ms: {verdict}"),
                percentile(&answered, 0.50),
                percentile(&db_ms, 0.50),
                percentile(&db_ms, 0.99),
            );
        }
        println!(
            "client: from sending the kick until this process first sees the run no longer \
             queued (one query every {} µs); answer: until the kick's HTTP answer; db: \
             started_at - created_at, whole ms",
            KICK_POLL.as_micros()
        );
    }

    fn print_curve(&self, s: &Settings) {
        println!();
        println!(
            "backlog curve: jobhost, 1 host, {BACKLOG_WORKERS} workers, the backlog queued \
             before it starts; clock as in backlog mode"
        );
        println!(
            "{:<9} {:<8} {:>8} {}",
            "backend",
            "queued",
            "backlog",
            Stats::HEADER
        );
        for db in [Db::Postgres, Db::Sqlite] {
            for shape in Shape::ALL {
                for &runs in &s.curve {
                    let Some(st) = self.stats(Key::Curve(db, shape, runs), s.reps) else {
                        println!("{db:<9} {shape:<8} {runs:>8} (not run)");
                        continue;
                    };
                    println!("{db:<9} {shape:<8} {runs:>8} {}", st.columns());
                }
            }
        }
        println!(
            "queued: kicked, time-ordered ids a millisecond apart; inserted, one kick's row \
             copied by a plain INSERT (random v4 ids, one due time)"
        );
    }

    fn print_logs(&self) {
        println!();
        for (system, logged) in self.logs.lock().unwrap().iter() {
            if logged.by_phase.is_empty() {
                println!("{system} logs: no WARN or ERROR line");
                continue;
            }
            let phases: Vec<String> = logged
                .by_phase
                .iter()
                .map(|(phase, n)| format!("{n} in {phase}"))
                .collect();
            println!(
                "{system} logs: WARN/ERROR lines: {}; the first distinct ones:",
                phases.join(", ")
            );
            for (phase, line) in &logged.first {
                println!("  [{phase}] {line}");
            }
        }
    }

    fn print_fanout(&self, s: &Settings) {
        println!();
        println!(
            "fan-out: one parent queues {} children and waits for them; 1 process \
             ({BACKLOG_WORKERS} workers / concurrency {BACKLOG_WORKERS}), Postgres; clock: from \
             queueing the parent (jobhost: the kick's request; graphile-worker: add_job) to its \
             resume starting; medians",
            s.fanout
        );
        println!(
            "{:<24} {:>3} {:>11} {:>10} {:>11} {:>11} {:>10} {:>9}  comparison",
            "system",
            "n",
            "to resume",
            "children/s",
            "enqueue",
            "last->res.",
            "CPU µs/ch.",
            "DB µs/ch."
        );
        let fanouts = self.fanouts.lock().unwrap();
        let summary = |system: System| {
            let all = fanouts.get(&system).filter(|f| !f.is_empty())?;
            let median_ms = |f: &dyn Fn(&Fanout) -> Option<Duration>| -> Option<Duration> {
                let values: Vec<f64> = all.iter().filter_map(f).map(|d| d.as_secs_f64()).collect();
                (!values.is_empty()).then(|| Duration::from_secs_f64(median(values)))
            };
            let children: usize = all.iter().map(|f| f.children).sum();
            let per_child = |d: Duration| d.as_secs_f64() * 1e6 / children as f64;
            let resumed = median_ms(&|f| Some(f.resumed)).expect("a fan-out");
            Some((
                all.len(),
                resumed,
                all[0].children as f64 / resumed.as_secs_f64(),
                median_ms(&|f| Some(f.enqueued)).expect("a fan-out"),
                median_ms(&|f| f.last_to_resume),
                per_child(all.iter().map(|f| f.cpu).sum()),
                per_child(all.iter().map(|f| f.db_cpu).sum()),
            ))
        };
        let graphile_rate = summary(System::Graphile).map(|row| row.2);
        for (system, label) in [
            (System::JobhostPostgres, "jobhost postgres"),
            (System::Graphile, "graphile-worker"),
        ] {
            let Some((n, resumed, rate, enqueued, last, cpu, db)) = summary(system) else {
                println!("{label:<24} (not run)");
                continue;
            };
            let comparison = match system {
                System::JobhostPostgres => {
                    format!("{} graphile", times(Some(rate), graphile_rate))
                }
                _ => String::new(),
            };
            println!(
                "{label:<24} {n:>3} {:>11} {rate:>10.0} {:>11} {:>11} {cpu:>10.1} {db:>9.1}  \
                 {comparison}",
                fmt_duration(resumed),
                fmt_duration(enqueued),
                last.map_or("-".to_string(), fmt_duration),
            );
        }
        println!(
            "enqueue (not clocked): jobhost, the parent's first pass (start, the children in \
             enqueue_all calls of 1000, the wait); graphile-worker, the parent task (counter row and \
             one add_jobs, one transaction). last->res.: from the last child's end to the \
             resume (jobhost: the family sweep wakes the parent, every 250 ms; \
             graphile-worker: the last child adds it). CPU: the process's, DB: the Postgres \
             server's, from queueing the parent to seeing the resume, per child"
        );
    }

    /// The floor's table, and the backlog drains' database CPU beside it when they ran.
    fn print_floor(&self) {
        let floor = self.floor.lock().unwrap();
        if floor.is_empty() {
            return;
        }
        println!(
            "floor: the Postgres server's CPU per run with no process running ({FLOOR_RUNS} runs \
             in SQL, batches of {FLOOR_BATCH}, a commit per claim and per ending; medians)"
        );
        println!("workload     µs/run   runs/s  what");
        for FloorDrains { workload, drains } in floor.iter() {
            let mut us: Vec<f64> = drains.iter().map(|d| d.0).collect();
            let mut rate: Vec<f64> = drains.iter().map(|d| d.1).collect();
            us.sort_by(f64::total_cmp);
            rate.sort_by(f64::total_cmp);
            println!(
                "{:<10} {:>8.1} {:>8.0}  {}",
                workload.name,
                percentile(&us, 0.5),
                percentile(&rate, 0.5),
                workload.what
            );
        }
        for variant in [
            Variant::of(System::JobhostPostgres, 1),
            Variant::of(System::GraphileBatched, 1),
        ] {
            if let Some(db) = self
                .stats(Key::Backlog(variant), usize::MAX)
                .and_then(|s| s.db_cpu_us_per_run)
            {
                println!(
                    "beside it, the backlog drain of {} (1 process): {db:.1} µs/run",
                    variant.label()
                );
            }
        }
    }
}

fn print_trips(trips: &Trips) {
    let per_run = |n: u64| n as f64 / trips.runs as f64;
    let drain = trips.drain;
    println!();
    println!(
        "postgres round trips: 1 host, {BACKLOG_WORKERS} workers, a {}-run backlog, through a \
         counting proxy (that drain took {}, slowed by the proxy)",
        trips.runs,
        fmt_duration(trips.elapsed)
    );
    println!(
        "  drain (listening -> done): {} simple queries + {} syncs = {:.2} round trips per run, \
         over {} new connections",
        drain.queries,
        drain.syncs,
        per_run(drain.queries + drain.syncs),
        drain.connections
    );
    println!(
        "  start-up (spawn -> listening): {} simple queries + {} syncs, {} connections",
        trips.start_up.queries, trips.start_up.syncs, trips.start_up.connections
    );
}

/// The medians (and totals) of some drains of one key.
struct Stats {
    n: usize,
    median: Duration,
    runs_per_s: f64,
    cpu_us_per_run: f64,
    db_cpu_us_per_run: Option<f64>,
    peak_rss_kib: Option<u64>,
    to_first_claim: Option<Duration>,
}

impl Stats {
    /// The names of [`Stats::columns`], aligned with them.
    const HEADER: &str = "  n      median   runs/s CPU µs/run DB µs/run RSS MiB   to 1st";

    /// One row of a table: samples, median, rate, CPU, database CPU, RSS, time to the
    /// first claim.
    fn columns(&self) -> String {
        format!(
            "{:>3} {:>11} {:>8.0} {:>10.1} {:>9} {:>7} {:>8}",
            self.n,
            fmt_duration(self.median),
            self.runs_per_s,
            self.cpu_us_per_run,
            self.db_cpu_us_per_run
                .map_or("-".to_string(), |us| format!("{us:.1}")),
            self.peak_rss_kib
                .map_or("-".to_string(), |k| format!("{:.0}", k as f64 / 1024.0)),
            self.to_first_claim.map_or("-".to_string(), fmt_duration),
        )
    }

    fn of(drains: &[Drain]) -> Option<Stats> {
        let first = drains.first()?;
        let median_of = |values: Vec<f64>| {
            let mut values = values;
            values.sort_by(f64::total_cmp);
            let mid = values.len() / 2;
            if values.len() % 2 == 1 {
                values[mid]
            } else {
                (values[mid - 1] + values[mid]) / 2.0
            }
        };
        let median = median_of(drains.iter().map(|d| d.elapsed.as_secs_f64()).collect());
        let runs: usize = drains.iter().map(|d| d.runs).sum();
        let cpu: f64 = drains.iter().map(|d| d.cpu.as_secs_f64()).sum();
        let to_first: Vec<f64> = drains
            .iter()
            .filter_map(|d| d.to_first_claim.map(|t| t.as_secs_f64()))
            .collect();
        Some(Stats {
            n: drains.len(),
            median: Duration::from_secs_f64(median),
            runs_per_s: first.runs as f64 / median,
            cpu_us_per_run: cpu * 1e6 / runs as f64,
            db_cpu_us_per_run: drains
                .iter()
                .map(|d| d.db_cpu.map(|c| c.as_secs_f64()))
                .sum::<Option<f64>>()
                .map(|db| db * 1e6 / runs as f64),
            peak_rss_kib: drains.iter().filter_map(|d| d.peak_rss_kib).max(),
            to_first_claim: (!to_first.is_empty())
                .then(|| Duration::from_secs_f64(median_of(to_first))),
        })
    }
}

/// The nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// The median of some values (at least one).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

fn times(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => format!("{:.2}x", a / b),
        _ => "n/a x".to_string(),
    }
}

fn fmt_duration(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms < 10_000.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{:.2} s", ms / 1e3)
    }
}

// ---- batch mode (criterion) ----------------------------------------------------------

fn batch_mode(c: &mut Criterion, rt: &Runtime, noop: &Path, s: &Settings, record: &Record) {
    let mut group = c.benchmark_group("batch");
    // Flat sampling, one batch per sample, one warm-up batch: criterion's warm-up stops
    // after the first call that takes longer than the warm-up time, and a flat sample gets
    // a single iteration when the measurement time is below one iteration per sample.
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(s.samples)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_millis(10))
        .throughput(Throughput::Elements(s.batch as u64));
    let batch = s.batch;

    let mut fleet: Option<Jobhost> = None;
    for hosts in [1, 3] {
        let variant = Variant::of(System::JobhostPostgres, hosts);
        group.bench_function(variant.id(), |b| {
            record.enter(Key::Batch(variant));
            let env = fleet.get_or_insert_with(|| rt.block_on(Jobhost::postgres(noop, record)));
            rt.block_on(env.scale_to(hosts, record));
            let env: &Jobhost = env;
            b.to_async(rt)
                .iter_custom(|iters| timed_batches(env, batch, iters, record, variant));
        });
    }
    if let Some(env) = fleet.take() {
        rt.block_on(env.stop(record));
    }

    let mut graphile: Option<Graphile> = None;
    for batched in [false, true] {
        for procs in [1, 3] {
            let system = if batched {
                System::GraphileBatched
            } else {
                System::Graphile
            };
            let variant = Variant::of(system, procs);
            group.bench_function(variant.id(), |b| {
                record.enter(Key::Batch(variant));
                let env = graphile.get_or_insert_with(|| rt.block_on(Graphile::start()));
                rt.block_on(env.scale_to(procs, batched, record));
                let env: &Graphile = env;
                b.to_async(rt)
                    .iter_custom(|iters| timed_batches(env, batch, iters, record, variant));
            });
        }
    }
    if let Some(env) = graphile.take() {
        rt.block_on(env.stop(record));
    }

    let mut sqlite: Option<Jobhost> = None;
    let variant = Variant::of(System::JobhostSqlite, 1);
    group.bench_function(variant.id(), |b| {
        record.enter(Key::Batch(variant));
        let env = sqlite.get_or_insert_with(|| rt.block_on(Jobhost::sqlite(noop, record)));
        rt.block_on(env.scale_to(1, record));
        let env: &Jobhost = env;
        b.to_async(rt)
            .iter_custom(|iters| timed_batches(env, batch, iters, record, variant));
    });
    group.finish();
    if let Some(env) = sqlite {
        rt.block_on(env.stop(record));
    }
}

// ---- the parts outside criterion ----------------------------------------------------

/// The databases of the parts outside criterion, made on first use; no process runs on
/// them between drains.
#[derive(Default)]
struct Envs {
    postgres: Option<Jobhost>,
    sqlite: Option<Jobhost>,
    graphile: Option<Graphile>,
}

impl Envs {
    fn jobhost(&mut self, rt: &Runtime, noop: &Path, db: Db, record: &Record) -> &mut Jobhost {
        let slot = match db {
            Db::Postgres => &mut self.postgres,
            Db::Sqlite => &mut self.sqlite,
        };
        slot.get_or_insert_with(|| match db {
            Db::Postgres => rt.block_on(Jobhost::postgres(noop, record)),
            Db::Sqlite => rt.block_on(Jobhost::sqlite(noop, record)),
        })
    }

    fn graphile(&mut self, rt: &Runtime) -> &mut Graphile {
        self.graphile
            .get_or_insert_with(|| rt.block_on(Graphile::start()))
    }

    async fn stop(self, record: &Record) {
        for env in [self.postgres, self.sqlite].into_iter().flatten() {
            env.stop(record).await;
        }
        if let Some(env) = self.graphile {
            env.stop(record).await;
        }
    }
}

fn kick_latency(rt: &Runtime, noop: &Path, s: &Settings, record: &Record, envs: &mut Envs) {
    for db in [Db::Sqlite, Db::Postgres] {
        record.enter(format_args!("latency/{db}"));
        let env = envs.jobhost(rt, noop, db, record);
        rt.block_on(env.scale_to(1, record));
        let kicks = rt.block_on(env.kicks(s.kicks));
        rt.block_on(env.scale_to(0, record));
        eprintln!("latency/{db}: {} kicks", kicks.len());
        record.kicks.lock().unwrap().insert(db, kicks);
    }
}

/// One untimed drain of at most `WARM_UP_RUNS`, then `s.reps` timed drains of `runs` (one
/// fewer, but at least one, above `LONG_DRAIN`).
fn repeat<F, Fut>(rt: &Runtime, s: &Settings, record: &Record, key: Key, runs: usize, drain: F)
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Drain>,
{
    let reps = if runs > LONG_DRAIN {
        (s.reps - 1).max(1)
    } else {
        s.reps
    };
    record.enter(key);
    rt.block_on(drain(runs.min(WARM_UP_RUNS)));
    for rep in 1..=reps {
        let d = rt.block_on(drain(runs));
        eprintln!(
            "{key} ({rep}/{reps}): {runs} runs in {} ({:.0} runs/s), {:.1} µs CPU per run",
            fmt_duration(d.elapsed),
            runs as f64 / d.elapsed.as_secs_f64(),
            d.cpu.as_secs_f64() * 1e6 / runs as f64
        );
        record.drain(key, d);
    }
}

fn backlog_mode(rt: &Runtime, noop: &Path, s: &Settings, record: &Record, envs: &mut Envs) {
    let runs = s.backlog;
    for (db, system, counts) in [
        (Db::Postgres, System::JobhostPostgres, &[1, 3][..]),
        (Db::Sqlite, System::JobhostSqlite, &[1][..]),
    ] {
        let env: &Jobhost = envs.jobhost(rt, noop, db, record);
        for &hosts in counts {
            let key = Key::Backlog(Variant::of(system, hosts));
            repeat(rt, s, record, key, runs, move |n| {
                env.drain_backlog(n, hosts, record)
            });
        }
    }
    let env: &Graphile = envs.graphile(rt);
    for batched in [false, true] {
        let system = if batched {
            System::GraphileBatched
        } else {
            System::Graphile
        };
        for procs in [1, 3] {
            let key = Key::Backlog(Variant::of(system, procs));
            repeat(rt, s, record, key, runs, move |n| {
                env.drain_backlog(n, procs, batched, record)
            });
        }
    }
}

fn backlog_curve(rt: &Runtime, noop: &Path, s: &Settings, record: &Record, envs: &mut Envs) {
    for db in [Db::Postgres, Db::Sqlite] {
        let env: &Jobhost = envs.jobhost(rt, noop, db, record);
        for shape in Shape::ALL {
            for &runs in &s.curve {
                repeat(rt, s, record, Key::Curve(db, shape, runs), runs, move |n| {
                    env.drain_shaped(n, shape, 1, record)
                });
            }
        }
    }
}

fn round_trips(rt: &Runtime, noop: &Path, s: &Settings, record: &Record, envs: &mut Envs) {
    record.enter("trips");
    let env: &Jobhost = envs.jobhost(rt, noop, Db::Postgres, record);
    let trips = rt.block_on(async {
        let proxy = CountingProxy::start().await;
        env.drain_counted(s.backlog, &proxy, record).await
    });
    *record.trips.lock().unwrap() = Some(trips);
}

/// The fan-out: jobhost on a database of its own, then graphile-worker; one untimed
/// fan-out of `FANOUT_WARM_UP` children each, then `s.reps` timed ones.
fn fan_out(rt: &Runtime, family: &Path, s: &Settings, record: &Record, envs: &mut Envs) {
    let report = |system: &str, f: &Fanout, rep: usize| {
        eprintln!(
            "fanout/{system} ({rep}/{}): {} children, resumed after {} ({:.0} children/s), \
             enqueued in {}, last child -> resume {}",
            s.reps,
            f.children,
            fmt_duration(f.resumed),
            f.children as f64 / f.resumed.as_secs_f64(),
            fmt_duration(f.enqueued),
            f.last_to_resume.map_or("-".to_string(), fmt_duration),
        );
    };
    record.enter("fanout/jobhost");
    let env = rt.block_on(Jobhost::family(family, s.fanout, record));
    rt.block_on(env.fan_out(FANOUT_WARM_UP_JOB, FANOUT_WARM_UP, record));
    for rep in 1..=s.reps {
        let f = rt.block_on(env.fan_out(FANOUT_PARENT, s.fanout, record));
        report("jobhost", &f, rep);
        record
            .fanouts
            .lock()
            .unwrap()
            .entry(System::JobhostPostgres)
            .or_default()
            .push(f);
    }
    rt.block_on(env.stop(record));
    record.enter("fanout/graphile");
    let env: &Graphile = envs.graphile(rt);
    rt.block_on(env.fan_out(FANOUT_WARM_UP, record));
    for rep in 1..=s.reps {
        let f = rt.block_on(env.fan_out(s.fanout, record));
        report("graphile", &f, rep);
        record
            .fanouts
            .lock()
            .unwrap()
            .entry(System::Graphile)
            .or_default()
            .push(f);
    }
}

// ---- jobhost ------------------------------------------------------------------------

/// The manifest of the one job `noop`.
fn noop_manifest(noop: &Path) -> String {
    let component = toml::Value::String(noop.display().to_string());
    format!("[jobs.{JOB}]\ncomponent = {component}\n")
}

/// The fan-out's manifest: the parents `family` (`children` children) and
/// `family-warm-up` (`FANOUT_WARM_UP`), and `family-child`. One component is parent and
/// child, so every job has the grants it imports (the `ledger` table, from the examples'
/// migrations, is written only with `in_tx`, which the fan-out leaves off).
fn family_manifest(family: &Path, children: usize) -> String {
    let component = toml::Value::String(family.display().to_string());
    let migrations = guests::workspace_dir()
        .join("examples")
        .join("migrations")
        .canonicalize()
        .expect("examples/migrations");
    let migrations = toml::Value::String(migrations.display().to_string());
    let grants = format!(
        "component = {component}\ngrants.db = {{ write = [\"ledger\"] }}\n\
         grants.jobs = [\"{FANOUT_CHILD}\"]\nretries = 0\n"
    );
    let parent = |name: &str, children: usize| {
        format!(
            "[jobs.{name}]\n{grants}timeout = \"600s\"\n\
             payload = {{ children = {children}, in_tx = false, wait = \"continue\" }}\n"
        )
    };
    format!(
        "[host]\nmigrations = {migrations}\n\n{}\n{}\n[jobs.{FANOUT_CHILD}]\n{grants}",
        parent(FANOUT_PARENT, children),
        parent(FANOUT_WARM_UP_JOB, FANOUT_WARM_UP),
    )
}

/// One database, one home, and the `host serve` processes on them.
struct Jobhost {
    home: TempDir,
    db_url: String,
    manifest: PathBuf,
    store: Store,
    tenant: String,
    /// The payload of the job's kicks.
    payload: String,
    /// Batch mode's long-lived hosts (backlog drains start their own).
    hosts: Vec<Proc>,
    http: reqwest::Client,
    /// An operator's API token for the kicks.
    token: String,
    /// The Postgres database, dropped at the end.
    database: Option<PgDatabase>,
}

impl Jobhost {
    async fn sqlite(noop: &Path, record: &Record) -> Jobhost {
        let home = tempfile::tempdir().expect("temp dir");
        let db_url = format!("sqlite://{}/jobhost.db", home.path().display());
        Jobhost::open(home, db_url, None, &noop_manifest(noop), JOB, record).await
    }

    async fn postgres(noop: &Path, record: &Record) -> Jobhost {
        let home = tempfile::tempdir().expect("temp dir");
        let database = PgDatabase::create().await;
        let db_url = database.url.clone();
        Jobhost::open(
            home,
            db_url,
            Some(database),
            &noop_manifest(noop),
            JOB,
            record,
        )
        .await
    }

    /// The fan-out's database (Postgres) and manifest: `family` with `children` children
    /// and `family-warm-up` with [`FANOUT_WARM_UP`], both of `family-child`.
    async fn family(family: &Path, children: usize, record: &Record) -> Jobhost {
        let home = tempfile::tempdir().expect("temp dir");
        let database = PgDatabase::create().await;
        let db_url = database.url.clone();
        let manifest = family_manifest(family, children);
        Jobhost::open(
            home,
            db_url,
            Some(database),
            &manifest,
            FANOUT_PARENT,
            record,
        )
        .await
    }

    /// Writes the manifest; a first host registers the jobs, applies the migrations and
    /// fills the compile cache, then stops. `job`'s tenant and payload are the kicks'.
    async fn open(
        home: TempDir,
        db_url: String,
        database: Option<PgDatabase>,
        manifest_text: &str,
        job: &str,
        record: &Record,
    ) -> Jobhost {
        let manifest = home.path().join("jobhost.toml");
        std::fs::write(&manifest, manifest_text).expect("write the manifest");
        let first = spawn_host(home.path(), &manifest, &db_url, BATCH_WORKERS);
        first.report("listening", START_TIMEOUT).await;
        first.stop(record).await;
        let store = Store::open(&db_url).await.expect("open the store");
        let job = store
            .get_job(job)
            .await
            .expect("read the job")
            .expect("host serve registered the job");
        let spec: JobSpec = serde_json::from_str(&job.spec).expect("the job's spec");
        let operator = jobhost::rules::tenant::issue();
        store
            .insert_token(&operator.id, &operator.secret_hash, None, "bench")
            .await
            .expect("create an API token");
        Jobhost {
            home,
            db_url,
            manifest,
            store,
            tenant: job.tenant,
            payload: spec.payload.to_string(),
            hosts: Vec::new(),
            http: reqwest::Client::new(),
            token: operator.token,
            database,
        }
    }

    fn spawn_host(&self, workers: usize, db_url: &str) -> Proc {
        spawn_host(self.home.path(), &self.manifest, db_url, workers)
    }

    /// Starts or stops batch mode's hosts until `n` serve.
    async fn scale_to(&mut self, n: usize, record: &Record) {
        while self.hosts.len() > n {
            self.hosts.pop().expect("a host").stop(record).await;
        }
        while self.hosts.len() < n {
            let host = self.spawn_host(BATCH_WORKERS, &self.db_url);
            host.report("listening", START_TIMEOUT).await;
            self.hosts.push(host);
        }
    }

    async fn busy(&self) -> bool {
        on_pool!(self.store, p => sqlx::query_scalar(JOBHOST_BUSY).fetch_one(p).await)
            .expect("check for runs left")
    }

    /// Queues `batch` runs due in a day, makes them due at once, and returns how long the
    /// hosts took to finish them (see the module comment for where the clock starts).
    async fn drain_batch(&self, batch: usize) -> Drain {
        assert!(!self.busy().await, "the previous batch is not done");
        self.park(batch).await;
        // Let the hosts settle after the wake-ups the inserts caused (Postgres notifies on
        // every insert; the runs are not due, so they go back to waiting).
        tokio::time::sleep(Duration::from_millis(100)).await;
        let cpu_before: Duration;
        let start = match self.store.pool() {
            Pool::Postgres(_) => {
                let due = self.store.now().await.expect("database clock");
                cpu_before = total_cpu(&self.hosts);
                assert_eq!(self.release(due).await, batch as u64);
                SystemTime::now()
            }
            Pool::Sqlite(_) => {
                let due = self.store.now().await.expect("database clock") + SQLITE_DUE_AHEAD_MS;
                assert_eq!(self.release(due).await, batch as u64);
                let due_at = UNIX_EPOCH + Duration::from_millis(due as u64);
                if let Ok(ahead) = due_at.duration_since(SystemTime::now()) {
                    tokio::time::sleep(ahead).await;
                }
                cpu_before = total_cpu(&self.hosts);
                due_at
            }
        };
        let done = wait_drained(|| self.busy(), &self.hosts).await;
        let cpu = total_cpu(&self.hosts).saturating_sub(cpu_before);
        let failed: i64 =
            on_pool!(self.store, p => sqlx::query_scalar(NOT_SUCCEEDED).fetch_one(p).await)
                .expect("count the runs");
        assert_eq!(failed, 0, "every run succeeded");
        Drain {
            runs: batch,
            elapsed: done.duration_since(start).unwrap_or_default(),
            cpu,
            db_cpu: None,
            peak_rss_kib: None,
            to_first_claim: None,
        }
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
                payload: self.payload.clone(),
                cursor: None,
                component_digest: None,
                scheduled_for: None,
                rerun_of: None,
                delay_ms: PARKED_MS,
                trace_parent: None,
            };
            inserts.spawn(async move { store.insert_run(&run).await.map(drop) });
        }
        while let Some(done) = inserts.join_next().await {
            done.expect("join").expect("insert a run");
        }
    }

    /// Makes every parked run due at `due` (database clock), in one statement.
    async fn release(&self, due: i64) -> u64 {
        on_pool!(self.store, p => sqlx::query(RELEASE_BATCH)
            .bind(due)
            .bind(JOB)
            .execute(p)
            .await
            .map(|r| r.rows_affected()))
        .expect("release the batch")
    }

    /// Empties the run tables, then queues `runs` runs due now, shaped as `shape` says.
    async fn queue_shaped(&self, runs: usize, shape: Shape) {
        if shape == Shape::Kicked {
            return self.queue_backlog(runs).await;
        }
        self.queue_backlog(1).await;
        let (copy, runs) = (
            match self.store.pool() {
                Pool::Postgres(_) => COPY_POSTGRES,
                Pool::Sqlite(_) => COPY_SQLITE,
            },
            runs as i64,
        );
        let copied = on_pool!(self.store, p => async {
            let original: String = sqlx::query_scalar(ONLY_RUN)
                .fetch_one(p)
                .await
                .expect("read the run");
            let copied = sqlx::query(copy)
                .bind(runs)
                .execute(p)
                .await
                .expect("copy the run")
                .rows_affected();
            sqlx::query(DROP_RUN)
                .bind(original)
                .execute(p)
                .await
                .expect("drop the original");
            copied
        }
        .await);
        assert_eq!(copied, runs as u64);
        if let Pool::Postgres(p) = self.store.pool() {
            sqlx::raw_sql("ANALYZE jobhost_runs")
                .execute(p)
                .await
                .expect("analyze");
        }
    }

    /// Empties the run tables, then queues `runs` runs due now, in one statement.
    async fn queue_backlog(&self, runs: usize) {
        let prefix = &new_run_id()[..24];
        let runs = runs as i64;
        let queued = match self.store.pool() {
            Pool::Postgres(p) => {
                sqlx::raw_sql(CLEAR_POSTGRES)
                    .execute(p)
                    .await
                    .expect("empty the tables");
                let queued = sqlx::query(QUEUE_POSTGRES)
                    .bind(runs)
                    .bind(prefix)
                    .bind(JOB)
                    .bind(&self.tenant)
                    .bind(&self.payload)
                    .execute(p)
                    .await
                    .expect("queue the backlog")
                    .rows_affected();
                sqlx::raw_sql("ANALYZE jobhost_runs")
                    .execute(p)
                    .await
                    .expect("analyze");
                queued
            }
            Pool::Sqlite(p) => {
                sqlx::raw_sql(CLEAR_SQLITE)
                    .execute(p)
                    .await
                    .expect("empty the tables");
                sqlx::query(QUEUE_SQLITE)
                    .bind(runs)
                    .bind(prefix)
                    .bind(JOB)
                    .bind(&self.tenant)
                    .bind(&self.payload)
                    .execute(p)
                    .await
                    .expect("queue the backlog")
                    .rows_affected()
            }
        };
        assert_eq!(queued, runs as u64);
    }

    /// That all `runs` runs succeeded; returns the first claim (database clock).
    async fn check_backlog(&self, runs: usize) -> SystemTime {
        let (total, succeeded, first): (i64, i64, Option<i64>) =
            on_pool!(self.store, p => sqlx::query_as(BACKLOG_OUTCOME).fetch_one(p).await)
                .expect("read the outcome");
        assert_eq!(
            (total, succeeded),
            (runs as i64, runs as i64),
            "every run succeeded (host logs in {})",
            self.home.path().display()
        );
        UNIX_EPOCH + Duration::from_millis(first.expect("a first claim") as u64)
    }

    /// Queues `runs` runs, starts `hosts` hosts at once and times them from the first
    /// claim to done.
    async fn drain_backlog(&self, runs: usize, hosts: usize, record: &Record) -> Drain {
        self.drain_shaped(runs, Shape::Kicked, hosts, record).await
    }

    /// [`Jobhost::drain_backlog`] of a backlog queued as `shape` says.
    async fn drain_shaped(
        &self,
        runs: usize,
        shape: Shape,
        hosts: usize,
        record: &Record,
    ) -> Drain {
        self.queue_shaped(runs, shape).await;
        let db_before = postgres_cpu();
        let spawned = SystemTime::now();
        let procs: Vec<Proc> = (0..hosts)
            .map(|_| self.spawn_host(BACKLOG_WORKERS, &self.db_url))
            .collect();
        let done = wait_drained(|| self.busy(), &procs).await;
        let db_cpu = self
            .database
            .is_some()
            .then(|| postgres_cpu().saturating_sub(db_before));
        let (cpu, peak_rss_kib) = usage_since(&procs, "listening").await;
        for host in procs {
            host.stop(record).await;
        }
        let first = self.check_backlog(runs).await;
        Drain {
            runs,
            elapsed: done.duration_since(first).unwrap_or_default(),
            cpu,
            db_cpu,
            peak_rss_kib: Some(peak_rss_kib),
            to_first_claim: Some(first.duration_since(spawned).unwrap_or_default()),
        }
    }

    /// A backlog drain of one host whose database connections go through `proxy`.
    async fn drain_counted(&self, runs: usize, proxy: &CountingProxy, record: &Record) -> Trips {
        self.queue_backlog(runs).await;
        let host = self.spawn_host(BACKLOG_WORKERS, &proxy.url(&self.db_url));
        host.report("listening", START_TIMEOUT).await;
        let listening = proxy.counted();
        let done = wait_drained(|| self.busy(), std::slice::from_ref(&host)).await;
        let drained = proxy.counted();
        host.stop(record).await;
        let first = self.check_backlog(runs).await;
        Trips {
            runs,
            start_up: listening,
            drain: drained - listening,
            elapsed: done.duration_since(first).unwrap_or_default(),
        }
    }

    /// Kicks one instance over the first host's HTTP API, `KICK_WARM_UP + n` times, one
    /// after the other, each waited for until its run succeeded.
    async fn kicks(&self, n: usize) -> Vec<Kick> {
        let listening = self.hosts[0].report("listening", START_TIMEOUT).await;
        let addr = listening.value["listening"].as_str().expect("an address");
        let url = format!("http://{addr}/jobs/{JOB}/kick?instance=latency");
        let mut kicks = Vec::with_capacity(n);
        for i in 0..KICK_WARM_UP + n {
            let sent = Instant::now();
            let response = self
                .http
                .post(&url)
                .bearer_auth(&self.token)
                .send()
                .await
                .expect("kick");
            assert_eq!(response.status().as_u16(), 202, "kick refused");
            let body: Value = response.json().await.expect("kick body");
            let answered = sent.elapsed();
            assert_eq!(
                body["result"], "queued",
                "the previous kick was still running: {body}"
            );
            let id = body["run_id"].as_str().expect("run_id");
            loop {
                let status: String = on_pool!(self.store, p => sqlx::query_scalar(RUN_STATUS)
                    .bind(id)
                    .fetch_one(p)
                    .await)
                .expect("read the run's status");
                if status != "queued" {
                    break;
                }
                assert!(
                    sent.elapsed() < DRAIN_TIMEOUT,
                    "the kicked run never started"
                );
                // Finer than tokio's timer (1 ms); blocking this thread that briefly is
                // harmless, and back-to-back queries would take a core from the host.
                std::thread::sleep(KICK_POLL);
            }
            let client = sent.elapsed();
            let run = loop {
                let run = self
                    .store
                    .get_run(id)
                    .await
                    .expect("read the run")
                    .expect("the run");
                if run.finished_at.is_some() {
                    break run;
                }
                assert!(
                    sent.elapsed() < DRAIN_TIMEOUT,
                    "the kicked run never finished: {run:?}"
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
            };
            assert_eq!(run.status, "succeeded", "{run:?}");
            if i >= KICK_WARM_UP {
                kicks.push(Kick {
                    answered,
                    client,
                    db_ms: run.started_at.expect("started") - run.created_at,
                });
            }
        }
        kicks
    }

    /// Empties the run tables, starts one host, kicks `job` (a `family` parent of
    /// `children` children) over its HTTP API and times it to the parent's second pass;
    /// checks the children and the parent's result once it ended.
    async fn fan_out(&self, job: &str, children: usize, record: &Record) -> Fanout {
        let Pool::Postgres(p) = self.store.pool() else {
            unreachable!("the fan-out runs on Postgres")
        };
        sqlx::raw_sql(CLEAR_POSTGRES)
            .execute(p)
            .await
            .expect("empty the tables");
        let host = self.spawn_host(BACKLOG_WORKERS, &self.db_url);
        let listening = host.report("listening", START_TIMEOUT).await;
        let addr = listening.value["listening"].as_str().expect("an address");
        let url = format!("http://{addr}/jobs/{job}/kick");
        let db_before = postgres_cpu();
        let cpu_before = host.cpu();
        let kicked = SystemTime::now();
        let response = self
            .http
            .post(&url)
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("kick");
        assert_eq!(response.status().as_u16(), 202, "kick refused");
        let body: Value = response.json().await.expect("kick body");
        assert_eq!(body["result"], "queued", "{body}");
        let id = body["run_id"].as_str().expect("run_id");
        let state = || async move {
            let state: (String, i64, Option<String>, Option<i64>) = sqlx::query_as(PARENT_STATE)
                .bind(id)
                .fetch_one(p)
                .await
                .expect("read the parent");
            state
        };
        // Done: the first check that sees the parent claimed for its second pass (or
        // ended, should it not get there).
        let start = Instant::now();
        loop {
            let (status, pass, _, finished) = state().await;
            if (pass >= 2 && status != "queued") || finished.is_some() {
                break;
            }
            host.check_alive();
            assert!(
                start.elapsed() < DRAIN_TIMEOUT,
                "the parent did not resume within {DRAIN_TIMEOUT:?}"
            );
            tokio::time::sleep(CHECK_EVERY).await;
        }
        let cpu = host.cpu().saturating_sub(cpu_before);
        let db_cpu = postgres_cpu().saturating_sub(db_before);
        let (status, result) = loop {
            let (status, _, result, finished) = state().await;
            if finished.is_some() {
                break (status, result);
            }
            host.check_alive();
            assert!(
                start.elapsed() < DRAIN_TIMEOUT,
                "the parent did not end within {DRAIN_TIMEOUT:?}"
            );
            tokio::time::sleep(CHECK_EVERY).await;
        };
        host.stop(record).await;
        let logs = self.home.path().display();
        assert_eq!(
            status, "succeeded",
            "the parent succeeded (host logs in {logs})"
        );
        let n = children as u64;
        let result: Value = serde_json::from_str(&result.expect("the parent's result"))
            .expect("the result is JSON");
        assert_eq!(
            (result["succeeded"].as_u64(), result["sum"].as_u64()),
            (Some(n), Some(n * n.saturating_sub(1) / 2)),
            "the parent's result: {result}"
        );
        let (total, succeeded, last_end): (i64, i64, Option<i64>) =
            sqlx::query_as(CHILDREN_OUTCOME)
                .bind(id)
                .fetch_one(p)
                .await
                .expect("count the children");
        assert_eq!(
            (total, succeeded),
            (children as i64, children as i64),
            "every child succeeded (host logs in {logs})"
        );
        let attempts: Vec<(i64, i64, Option<i64>)> = sqlx::query_as(PARENT_ATTEMPTS)
            .bind(id)
            .fetch_all(p)
            .await
            .expect("read the parent's attempts");
        let first = attempts
            .iter()
            .find(|a| a.0 == 1)
            .expect("the parent's first pass");
        let second = attempts
            .iter()
            .find(|a| a.0 == 2)
            .expect("the parent's second pass");
        let at = |ms: i64| UNIX_EPOCH + Duration::from_millis(ms as u64);
        let ms = |ms: i64| Duration::from_millis(ms.max(0) as u64);
        Fanout {
            children,
            resumed: at(second.1).duration_since(kicked).unwrap_or_default(),
            enqueued: ms(first.2.expect("the first pass ended") - first.1),
            last_to_resume: last_end.map(|end| ms(second.1 - end)),
            cpu,
            db_cpu,
        }
    }

    async fn stop(mut self, record: &Record) {
        self.scale_to(0, record).await;
        self.store.close().await;
        if let Some(database) = self.database {
            database.drop_now().await;
        }
    }
}

fn spawn_host(home: &Path, manifest: &Path, db_url: &str, workers: usize) -> Proc {
    let mut command = Command::new(env!("CARGO_BIN_EXE_host"));
    command
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--workers",
            &workers.to_string(),
        ])
        .arg("--manifest")
        .arg(manifest)
        .env("JOBHOST_HOME", home)
        .env("JOBHOST_DB", db_url)
        .env_remove("JOBHOST_LOG")
        .current_dir(home);
    Proc::spawn(command, "jobhost", home, |line| {
        line.strip_prefix("listening on ")
            .map(|addr| json!({ "listening": addr.trim() }))
    })
}

/// Checks every `CHECK_EVERY` until `busy` finds no work left; returns when it did.
async fn wait_drained<F, Fut>(busy: F, procs: &[Proc]) -> SystemTime
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while busy().await {
        for p in procs {
            p.check_alive();
        }
        assert!(
            start.elapsed() < DRAIN_TIMEOUT,
            "not drained within {DRAIN_TIMEOUT:?}"
        );
        tokio::time::sleep(CHECK_EVERY).await;
    }
    SystemTime::now()
}

fn total_cpu(procs: &[Proc]) -> Duration {
    procs.iter().map(Proc::cpu).sum()
}

/// The processes' CPU time now, less what each had used when it printed `key`, and the
/// largest peak RSS among them (KiB).
async fn usage_since(procs: &[Proc], key: &str) -> (Duration, u64) {
    let now: Vec<Duration> = procs.iter().map(Proc::cpu).collect();
    let mut cpu = Duration::ZERO;
    let mut peak = 0;
    for (p, now) in procs.iter().zip(now) {
        cpu += now.saturating_sub(p.report(key, START_TIMEOUT).await.cpu);
        peak = peak.max(p.peak_rss_kib());
    }
    (cpu, peak)
}

// ---- graphile-worker ----------------------------------------------------------------

/// graphile-worker's database, the benchmark's connection to it, and batch mode's
/// long-lived `node worker.js` processes (backlog drains start their own).
struct Graphile {
    dir: PathBuf,
    logs: TempDir,
    database: PgDatabase,
    pool: sqlx::PgPool,
    workers: Vec<Proc>,
    batched: bool,
}

impl Graphile {
    async fn start() -> Graphile {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("benches")
            .join("graphile");
        if let Err(message) = install_node_modules(&dir) {
            panic!("graphile-worker benchmarks: {message}");
        }
        let database = PgDatabase::create().await;
        let setup = tokio::process::Command::new("node")
            .arg("setup.js")
            .current_dir(&dir)
            .env("DATABASE_URL", &database.url)
            .stderr(Stdio::inherit())
            .output()
            .await
            .expect("run node setup.js");
        assert!(
            setup.status.success(),
            "`node setup.js` failed: {}",
            setup.status
        );
        let pool = sqlx::PgPool::connect(&database.url)
            .await
            .expect("connect to graphile-worker's database");
        Graphile {
            dir,
            logs: tempfile::tempdir().expect("temp dir"),
            database,
            pool,
            workers: Vec::new(),
            batched: false,
        }
    }

    fn spawn_worker(&self, concurrency: usize, batched: bool) -> Proc {
        let mut command = Command::new("node");
        command
            .args(["worker.js", "--concurrency", &concurrency.to_string()])
            .current_dir(&self.dir)
            .env("DATABASE_URL", &self.database.url);
        if batched {
            command.arg("--batched");
        }
        Proc::spawn(command, "graphile-worker", self.logs.path(), |line| {
            line.strip_prefix("@bench ")
                .and_then(|json| serde_json::from_str(json).ok())
        })
    }

    /// Starts or stops batch mode's workers until `n` of the flavour run, idle and
    /// listening.
    async fn scale_to(&mut self, n: usize, batched: bool, record: &Record) {
        if batched != self.batched {
            for worker in self.workers.drain(..) {
                worker.stop(record).await;
            }
            self.batched = batched;
        }
        while self.workers.len() > n {
            self.workers.pop().expect("a worker").stop(record).await;
        }
        while self.workers.len() < n {
            let worker = self.spawn_worker(BATCH_WORKERS, batched);
            worker.report("ready", START_TIMEOUT).await;
            self.workers.push(worker);
        }
    }

    async fn busy(&self) -> bool {
        sqlx::query_scalar(GRAPHILE_BUSY)
            .fetch_one(&self.pool)
            .await
            .expect("check for jobs left")
    }

    async fn add_jobs(&self, count: usize) {
        let added: i64 = sqlx::query_scalar(GRAPHILE_ADD_JOBS)
            .bind(count as i64)
            .fetch_one(&self.pool)
            .await
            .expect("add the jobs");
        assert_eq!(added, count as i64);
    }

    async fn drain_batch(&self, batch: usize) -> Drain {
        assert!(!self.busy().await, "the previous batch is not done");
        let cpu_before = total_cpu(&self.workers);
        self.add_jobs(batch).await;
        let start = SystemTime::now();
        let done = wait_drained(|| self.busy(), &self.workers).await;
        Drain {
            runs: batch,
            elapsed: done.duration_since(start).unwrap_or_default(),
            cpu: total_cpu(&self.workers).saturating_sub(cpu_before),
            db_cpu: None,
            peak_rss_kib: None,
            to_first_claim: None,
        }
    }

    /// Queues `runs` jobs, starts `procs` workers at once and times them from the first
    /// job's start to done.
    async fn drain_backlog(
        &self,
        runs: usize,
        procs: usize,
        batched: bool,
        record: &Record,
    ) -> Drain {
        assert!(!self.busy().await, "the previous backlog is not done");
        self.add_jobs(runs).await;
        sqlx::raw_sql("ANALYZE graphile_worker._private_jobs")
            .execute(&self.pool)
            .await
            .expect("analyze");
        let db_before = postgres_cpu();
        let spawned = SystemTime::now();
        let workers: Vec<Proc> = (0..procs)
            .map(|_| self.spawn_worker(BACKLOG_WORKERS, batched))
            .collect();
        let done = wait_drained(|| self.busy(), &workers).await;
        let db_cpu = Some(postgres_cpu().saturating_sub(db_before));
        let (cpu, peak_rss_kib) = usage_since(&workers, "started").await;
        let first = workers
            .iter()
            .filter_map(|w| w.found("first_job_at"))
            .filter_map(|r| r.value["first_job_at"].as_f64())
            .min_by(f64::total_cmp)
            .expect("a first job");
        for worker in workers {
            worker.stop(record).await;
        }
        let first = UNIX_EPOCH + Duration::from_secs_f64(first / 1e3);
        Drain {
            runs,
            elapsed: done.duration_since(first).unwrap_or_default(),
            cpu,
            db_cpu,
            peak_rss_kib: Some(peak_rss_kib),
            to_first_claim: Some(first.duration_since(spawned).unwrap_or_default()),
        }
    }

    /// Starts one worker, adds the `parent` job of `children` children and times it to
    /// the `resume` job's start; checks the counter and that no job is left once done.
    async fn fan_out(&self, children: usize, record: &Record) -> Fanout {
        assert!(!self.busy().await, "the previous fan-out is not done");
        let worker = self.spawn_worker(BACKLOG_WORKERS, false);
        worker.report("ready", START_TIMEOUT).await;
        let db_before = postgres_cpu();
        let cpu_before = worker.cpu();
        let added = SystemTime::now();
        sqlx::query(GRAPHILE_ADD_PARENT)
            .bind(children as i32)
            .execute(&self.pool)
            .await
            .expect("add the parent");
        let resumed = worker.report("resumed_at", DRAIN_TIMEOUT).await;
        let cpu = worker.cpu().saturating_sub(cpu_before);
        let db_cpu = postgres_cpu().saturating_sub(db_before);
        wait_drained(|| self.busy(), std::slice::from_ref(&worker)).await;
        let parent = worker.found("enqueued_ms").expect("the parent's report");
        let last_child = worker
            .found("last_child_at")
            .expect("the last child's report");
        worker.stop(record).await;
        let n = children as i64;
        let (remaining, total): (i32, i64) = sqlx::query_as(GRAPHILE_FANIN)
            .fetch_one(&self.pool)
            .await
            .expect("read the counter");
        assert_eq!(
            (remaining, total, resumed.value["total"].as_i64()),
            (0, n * (n - 1) / 2, Some(n * (n - 1) / 2)),
            "every child counted, and the resume saw their total"
        );
        let at = |report: &Report, key: &str| {
            let ms = report.value[key].as_f64().expect("a time");
            UNIX_EPOCH + Duration::from_secs_f64(ms / 1e3)
        };
        let resumed_at = at(&resumed, "resumed_at");
        Fanout {
            children,
            resumed: resumed_at.duration_since(added).unwrap_or_default(),
            enqueued: Duration::from_secs_f64(
                parent.value["enqueued_ms"].as_f64().expect("a duration") / 1e3,
            ),
            last_to_resume: Some(
                resumed_at
                    .duration_since(at(&last_child, "last_child_at"))
                    .unwrap_or_default(),
            ),
            cpu,
            db_cpu,
        }
    }

    async fn stop(self, record: &Record) {
        for worker in self.workers {
            worker.stop(record).await;
        }
        self.pool.close().await;
        self.database.drop_now().await;
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

// ---- child processes ----------------------------------------------------------------

/// A line a process printed for the benchmark, and the process's CPU time when it came.
#[derive(Clone)]
struct Report {
    value: Value,
    cpu: Duration,
}

/// A child process (a host or a graphile-worker), its stderr and other output in log
/// files; killed if dropped before `stop`.
struct Proc {
    system: &'static str,
    child: Mutex<std::process::Child>,
    pid: u32,
    reports: Arc<Mutex<Vec<Report>>>,
    logs: [PathBuf; 2],
}

impl Proc {
    /// Spawns `command`; the lines of its stdout that `parse` turns into a value become
    /// reports, the others go to the log.
    fn spawn(
        mut command: Command,
        system: &'static str,
        log_dir: &Path,
        parse: fn(&str) -> Option<Value>,
    ) -> Proc {
        static SPAWNED: AtomicUsize = AtomicUsize::new(0);
        let n = SPAWNED.fetch_add(1, Ordering::Relaxed);
        let logs = [
            log_dir.join(format!("process-{n}.err")),
            log_dir.join(format!("process-{n}.out")),
        ];
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(File::create(&logs[0]).expect("log file"))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {command:?}: {e}"));
        let pid = child.id();
        let stdout = child.stdout.take().expect("stdout");
        let mut out = File::create(&logs[1]).expect("log file");
        let reports = Arc::new(Mutex::new(Vec::new()));
        let sink = reports.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                match parse(&line) {
                    Some(value) => sink.lock().unwrap().push(Report {
                        value,
                        cpu: cpu_time(pid),
                    }),
                    None => {
                        let _ = writeln!(out, "{line}");
                    }
                }
            }
        });
        Proc {
            system,
            child: Mutex::new(child),
            pid,
            reports,
            logs,
        }
    }

    /// The first report that has `key`, if it came.
    fn found(&self, key: &str) -> Option<Report> {
        let reports = self.reports.lock().unwrap();
        reports.iter().find(|r| r.value.get(key).is_some()).cloned()
    }

    /// The first report that has `key`, waited for.
    async fn report(&self, key: &str, within: Duration) -> Report {
        let start = Instant::now();
        loop {
            if let Some(report) = self.found(key) {
                return report;
            }
            self.check_alive();
            assert!(
                start.elapsed() < within,
                "no {key:?} from {} within {within:?}; its logs:\n{}",
                self.system,
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn check_alive(&self) {
        if let Ok(Some(status)) = self.child.lock().unwrap().try_wait() {
            panic!(
                "a {} process exited ({status}); its logs:\n{}",
                self.system,
                self.log_text()
            );
        }
    }

    fn cpu(&self) -> Duration {
        cpu_time(self.pid)
    }

    /// `VmHWM`, the peak resident set, in KiB.
    fn peak_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .expect("read /proc/<pid>/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in /proc/<pid>/status")
    }

    fn log_text(&self) -> String {
        self.logs
            .iter()
            .map(|path| std::fs::read_to_string(path).unwrap_or_default())
            .collect()
    }

    /// SIGTERM (both systems stop gracefully on it), then SIGKILL after 10 s; the WARN and
    /// ERROR lines of its logs go to the record.
    async fn stop(self, record: &Record) {
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own child,
        // not yet reaped.
        unsafe {
            libc::kill(self.pid as libc::pid_t, libc::SIGTERM);
        }
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.lock().unwrap().try_wait() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let lines: Vec<String> = self
            .log_text()
            .lines()
            .filter_map(|line| {
                let at = line.find("WARN").or_else(|| line.find("ERROR"))?;
                Some(line[at..].chars().take(200).collect())
            })
            .collect();
        record.log_lines(self.system, lines);
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let child = self.child.get_mut().unwrap();
        if let Ok(None) = child.try_wait() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// User + system CPU time of the Postgres server's processes on this machine (a backend
/// that exits within a window takes its time with it: the hosts and workers keep theirs).
fn postgres_cpu() -> Duration {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Duration::ZERO;
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim_end() == "postgres")
        })
        .filter_map(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .map(|stat| stat_cpu(&stat))
        })
        .sum()
}

/// User + system CPU time of a process, from `/proc/<pid>/stat`.
fn cpu_time(pid: u32) -> Duration {
    stat_cpu(&std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/<pid>/stat"))
}

/// User + system CPU time from the text of a `/proc/<pid>/stat`.
fn stat_cpu(stat: &str) -> Duration {
    // Fields after the command name (in parentheses; it may hold spaces) start at the
    // third, the state: utime and stime, the 14th and 15th, are the 12th and 13th here.
    let after_name = &stat[stat.rfind(')').expect("a command name") + 1..];
    let fields: Vec<u64> = after_name
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|f| f.parse().expect("clock ticks"))
        .collect();
    // SAFETY: sysconf has no preconditions.
    let ticks_per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Duration::from_secs_f64(fields.iter().sum::<u64>() as f64 / ticks_per_s)
}

// ---- the floor ----------------------------------------------------------------------

const FLOOR_RUNS: usize = 20_000;
const FLOOR_BATCH: usize = 250;

/// One of the floor's workloads: its name, what it writes, the statements that set it up
/// (on a database with jobhost's migrations) and queue `{runs}` runs — or, with
/// `jobhost_runs`, jobhost's own runs queued as the backlog's are after them; a run's id
/// is shaped as a v7 uuid, as jobhost's are, in `lean` too — the `DO` block that drains
/// them `{batch}` at a time, and how many runs it left undone.
struct Floor {
    name: &'static str,
    what: &'static str,
    setup: &'static str,
    jobhost_runs: bool,
    drain: &'static str,
    left: &'static str,
}

/// A floor workload's timed drains: the server's CPU per run (µs) and the runs/s of each.
struct FloorDrains {
    workload: &'static Floor,
    drains: Vec<(f64, f64)>,
}

const FLOOR_RUNS_LEFT: &str = "SELECT COUNT(*) FROM jobhost_runs WHERE status <> 'succeeded'";

static FLOORS: [Floor; 4] = [
    Floor {
        name: "queue",
        what: "a queue row locked and updated to claim it, deleted when done",
        setup: "DROP TABLE IF EXISTS floor_jobs; \
            CREATE TABLE floor_jobs (id BIGINT PRIMARY KEY, task TEXT NOT NULL, \
            payload TEXT NOT NULL, run_at BIGINT NOT NULL, attempts INT NOT NULL DEFAULT 0, \
            locked_at BIGINT, locked_by TEXT, created_at BIGINT NOT NULL, \
            updated_at BIGINT NOT NULL); \
            CREATE INDEX floor_jobs_main ON floor_jobs (run_at, id) WHERE locked_at IS NULL; \
            INSERT INTO floor_jobs (id, task, payload, run_at, created_at, updated_at) \
            SELECT i, 'noop', '{}', i, i, i FROM generate_series(1, {runs}) AS i; \
            ANALYZE floor_jobs",
        jobhost_runs: false,
        left: "SELECT COUNT(*) FROM floor_jobs",
        drain: "DO $$ DECLARE v BIGINT[]; BEGIN LOOP \
            WITH c AS (SELECT id FROM floor_jobs WHERE locked_at IS NULL \
                ORDER BY run_at, id LIMIT {batch} FOR UPDATE SKIP LOCKED), \
            u AS (UPDATE floor_jobs j SET locked_at = 1, locked_by = 'w', \
                attempts = j.attempts + 1, updated_at = 2 FROM c WHERE j.id = c.id \
                RETURNING j.*) \
            SELECT array_agg(id) INTO v FROM u; \
            EXIT WHEN v IS NULL; \
            COMMIT; \
            DELETE FROM floor_jobs WHERE id = ANY (v); \
            COMMIT; \
            END LOOP; END $$",
    },
    Floor {
        name: "lean",
        what: "the rows of `required`, on the leanest schema that keeps them: a narrow \
            queue row (one index) deleted at the end, the history row inserted then",
        setup: "DROP TABLE IF EXISTS floor_queue, floor_leases, floor_history, \
            floor_attempts; \
            CREATE TABLE floor_queue (id TEXT PRIMARY KEY, job TEXT NOT NULL, \
            instance TEXT NOT NULL, tenant TEXT NOT NULL, payload TEXT NOT NULL, \
            next_attempt_at BIGINT NOT NULL, status TEXT NOT NULL, generation BIGINT, \
            host TEXT, started_at BIGINT, created_at BIGINT NOT NULL); \
            CREATE INDEX floor_queue_claim ON floor_queue (next_attempt_at, id) \
            WHERE status = 'queued'; \
            CREATE TABLE floor_leases (LIKE jobhost_leases INCLUDING ALL); \
            CREATE TABLE floor_history (id TEXT PRIMARY KEY, job TEXT NOT NULL, \
            instance TEXT NOT NULL, tenant TEXT NOT NULL, status TEXT NOT NULL, \
            created_at BIGINT NOT NULL, started_at BIGINT, finished_at BIGINT); \
            CREATE INDEX floor_history_job ON floor_history (job, created_at); \
            CREATE INDEX floor_history_created ON floor_history (created_at); \
            CREATE INDEX floor_history_tenant ON floor_history (tenant, created_at); \
            CREATE TABLE floor_attempts (LIKE jobhost_attempts INCLUDING ALL); \
            INSERT INTO floor_queue (id, job, instance, tenant, payload, next_attempt_at, \
            status, created_at) \
            SELECT '019ae4c2-7d10-7a3b-8c4d-' || lpad(to_hex(i), 12, '0'), 'noop', 'b' || i, \
            'default', '{}', i, \
            'queued', i FROM generate_series(1, {runs}) AS i; \
            ANALYZE floor_queue",
        jobhost_runs: false,
        left: "SELECT COUNT(*) FROM floor_queue",
        drain: "DO $$ DECLARE v TEXT[]; BEGIN LOOP \
            v := ARRAY(SELECT q.id FROM floor_queue q WHERE q.status = 'queued' \
                ORDER BY q.next_attempt_at, q.id LIMIT {batch} FOR UPDATE SKIP LOCKED); \
            EXIT WHEN cardinality(v) = 0; \
            INSERT INTO floor_leases (job, instance, generation, holder, deadline_at, \
                expires_at, pending, updated_at) \
            SELECT q.job, q.instance, 1, q.id, 5, 6, 0, 3 FROM floor_queue q \
            WHERE q.id = ANY (v) ON CONFLICT (job, instance) DO NOTHING; \
            UPDATE floor_queue q SET status = 'running', host = 'h', generation = 1, \
                started_at = 3 WHERE q.id = ANY (v); \
            COMMIT; \
            INSERT INTO floor_attempts (run_id, seq, pass, attempt, generation, host, \
                status, outcome, started_at, finished_at) \
            SELECT x, 1, 1, 1, 1, 'h', 'succeeded', 'ok', 3, 4 FROM unnest(v) x; \
            INSERT INTO floor_history (id, job, instance, tenant, status, created_at, \
                started_at, finished_at) \
            SELECT q.id, q.job, q.instance, q.tenant, 'succeeded', q.created_at, \
                q.started_at, 4 FROM floor_queue q WHERE q.id = ANY (v); \
            UPDATE floor_leases l SET holder = NULL, deadline_at = 4, expires_at = 4, \
                updated_at = 4 \
            FROM floor_queue q WHERE q.id = ANY (v) AND l.job = q.job \
                AND l.instance = q.instance; \
            DELETE FROM floor_queue WHERE id = ANY (v); \
            COMMIT; \
            END LOOP; END $$",
    },
    Floor {
        name: "required",
        what: "a run's lease taken and released, its row started and ended, its attempt",
        setup: "ALTER TABLE jobhost_runs DISABLE TRIGGER USER; \
            ALTER TABLE jobhost_attempts DISABLE TRIGGER USER",
        jobhost_runs: true,
        left: FLOOR_RUNS_LEFT,
        drain: "DO $$ DECLARE v TEXT[]; BEGIN LOOP \
            v := ARRAY(SELECT r.id FROM jobhost_runs r WHERE r.status = 'queued' \
                AND r.origin <> 'manual' \
                AND r.next_attempt_at <= EXTRACT(EPOCH FROM clock_timestamp()) * 1000 \
                ORDER BY r.next_attempt_at, r.id LIMIT {batch} FOR UPDATE SKIP LOCKED); \
            EXIT WHEN cardinality(v) = 0; \
            INSERT INTO jobhost_leases (job, instance, generation, holder, deadline_at, \
                expires_at, pending, updated_at) \
            SELECT r.job, r.instance, 1, r.id, 5, 6, 0, 3 FROM jobhost_runs r \
            WHERE r.id = ANY (v) ON CONFLICT (job, instance) DO NOTHING; \
            UPDATE jobhost_runs r SET status = 'running', host = 'h', generation = 1, \
                attempts = 1, started_at = 3, updated_at = 3 WHERE r.id = ANY (v); \
            COMMIT; \
            INSERT INTO jobhost_attempts (run_id, seq, pass, attempt, generation, host, \
                status, outcome, started_at, finished_at) \
            SELECT x, 1, 1, 1, 1, 'h', 'succeeded', 'ok', 3, 4 FROM unnest(v) x; \
            UPDATE jobhost_runs r SET status = 'succeeded', finished_at = 4, updated_at = 4 \
            WHERE r.id = ANY (v); \
            UPDATE jobhost_leases l SET holder = NULL, deadline_at = 4, expires_at = 4, \
                updated_at = 4 \
            FROM jobhost_runs r WHERE r.id = ANY (v) AND l.job = r.job \
                AND l.instance = r.instance; \
            COMMIT; \
            END LOOP; END $$",
    },
    Floor {
        name: "functions",
        what: "jobhost's claim and ending functions, given what a host sends",
        setup: "ALTER TABLE jobhost_runs ENABLE TRIGGER USER; \
            ALTER TABLE jobhost_attempts ENABLE TRIGGER USER",
        jobhost_runs: true,
        left: FLOOR_RUNS_LEFT,
        drain: "DO $$ DECLARE v jobhost_attempt_item[]; BEGIN LOOP \
            SELECT array_agg(ROW(c.n, 'finish', c.id, c.job, c.instance, c.generation, c.id, \
                1, c.pass, c.attempts, 'h', 'succeeded', 'ok', NULL, 100, 65536, 1, '', 0, \
                c.started_at, true, 'succeeded', NULL, NULL, NULL, NULL, 1, 0, 0, NULL, NULL, \
                NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, \
                NULL)::jobhost_attempt_item) \
            INTO v \
            FROM (SELECT c.*, row_number() OVER () AS n FROM jobhost_claim_runs('h', {batch}, \
                '{\"noop\": {\"deadline_ms\": 60000, \"expires_ms\": 90000, \
                \"digest\": \"d\"}}'::jsonb, NULL, '{}', ARRAY['default']) c) c; \
            EXIT WHEN v IS NULL; \
            COMMIT; \
            PERFORM * FROM jobhost_record_attempts(v); \
            COMMIT; \
            END LOOP; END $$",
    },
];

/// A floor statement with its tokens filled in.
fn floor_sql(template: &str) -> String {
    template
        .replace("{runs}", &FLOOR_RUNS.to_string())
        .replace("{batch}", &FLOOR_BATCH.to_string())
}

/// Queues the floor's runs in jobhost's empty tables as the backlog's are queued, and
/// analyses the tables.
async fn queue_floor_runs(conn: &mut sqlx::PgConnection) {
    sqlx::raw_sql(CLEAR_POSTGRES)
        .execute(&mut *conn)
        .await
        .expect("empty the tables");
    sqlx::query(QUEUE_POSTGRES)
        .bind(FLOOR_RUNS as i64)
        .bind(&new_run_id()[..24])
        .bind(JOB)
        .bind("default")
        .bind("{}")
        .execute(&mut *conn)
        .await
        .expect("queue the floor's runs");
    sqlx::raw_sql("ANALYZE jobhost_runs; ANALYZE jobhost_leases; ANALYZE jobhost_attempts")
        .execute(&mut *conn)
        .await
        .expect("analyse the tables");
}

/// The `floor` part: each workload drained `s.reps` times (after one untimed drain), in
/// turns, on one database with jobhost's migrations; every run must have ended.
async fn floor(s: &Settings, record: &Record) {
    use sqlx::Connection;
    record.enter("floor");
    let database = PgDatabase::create().await;
    Store::open(&database.url)
        .await
        .expect("apply jobhost's migrations")
        .close()
        .await;
    let mut conn = sqlx::PgConnection::connect(&database.url)
        .await
        .expect("connect to the floor's database");
    for rep in 0..=s.reps {
        for workload in &FLOORS {
            sqlx::raw_sql(sqlx::AssertSqlSafe(floor_sql(workload.setup)))
                .execute(&mut conn)
                .await
                .expect("set the workload up");
            if workload.jobhost_runs {
                queue_floor_runs(&mut conn).await;
            }
            let (cpu, began) = (postgres_cpu(), Instant::now());
            sqlx::raw_sql(sqlx::AssertSqlSafe(floor_sql(workload.drain)))
                .execute(&mut conn)
                .await
                .expect("drain the workload");
            let (elapsed, cpu) = (began.elapsed(), postgres_cpu().saturating_sub(cpu));
            let left: i64 = sqlx::query_scalar(workload.left)
                .fetch_one(&mut conn)
                .await
                .expect("count what is left");
            assert_eq!(left, 0, "the {} workload left runs undone", workload.name);
            let us = cpu.as_secs_f64() * 1e6 / FLOOR_RUNS as f64;
            let rate = FLOOR_RUNS as f64 / elapsed.as_secs_f64();
            eprintln!(
                "floor/{} ({rep}/{}): {FLOOR_RUNS} runs in {} ({rate:.0} runs/s), {us:.1} µs \
                 server CPU per run",
                workload.name,
                s.reps,
                fmt_duration(elapsed)
            );
            if rep > 0 {
                let mut floor = record.floor.lock().unwrap();
                match floor.iter_mut().find(|f| f.workload.name == workload.name) {
                    Some(f) => f.drains.push((us, rate)),
                    None => floor.push(FloorDrains {
                        workload,
                        drains: vec![(us, rate)],
                    }),
                }
            }
        }
    }
    let _ = conn.close().await;
    database.drop_now().await;
}

// ---- the counting proxy -------------------------------------------------------------

/// A TCP proxy in front of the Postgres server that counts what its clients send: simple
/// queries (`Q`) and extended-protocol syncs (`S`), each a round trip.
struct CountingProxy {
    addr: SocketAddr,
    counts: Arc<Counts>,
    accept: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Counts {
    connections: AtomicU64,
    queries: AtomicU64,
    syncs: AtomicU64,
}

impl CountingProxy {
    async fn start() -> CountingProxy {
        let server = url::Url::parse(&postgres_admin_url()).expect("a Postgres URL");
        let upstream = format!(
            "{}:{}",
            server.host_str().expect("a Postgres host"),
            server.port().unwrap_or(5432)
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let counts = Arc::new(Counts::default());
        let shared = counts.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                shared.connections.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(relay(client, upstream.clone(), shared.clone()));
            }
        });
        CountingProxy {
            addr,
            counts,
            accept,
        }
    }

    /// `db_url` through the proxy, without TLS (the proxy reads the protocol).
    fn url(&self, db_url: &str) -> String {
        let mut url = url::Url::parse(db_url).expect("a Postgres URL");
        url.set_host(Some(&self.addr.ip().to_string()))
            .expect("a host");
        url.set_port(Some(self.addr.port())).expect("a port");
        url.query_pairs_mut().append_pair("sslmode", "disable");
        url.to_string()
    }

    fn counted(&self) -> Counted {
        Counted {
            connections: self.counts.connections.load(Ordering::Relaxed),
            queries: self.counts.queries.load(Ordering::Relaxed),
            syncs: self.counts.syncs.load(Ordering::Relaxed),
        }
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Relays one connection, counting the client's messages on the way.
async fn relay(client: tokio::net::TcpStream, upstream: String, counts: Arc<Counts>) {
    let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let back = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
    });
    let mut frontend = Frontend::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match client_read.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        frontend.feed(&buf[..n], &counts);
        if server_write.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = server_write.shutdown().await;
    let _ = back.await;
}

/// The client's side of the Postgres protocol, as far as counting needs: untyped packets
/// (length, code) until the start-up message (an SSL or GSS request may come first), then
/// typed messages (type byte, length).
#[derive(Default)]
struct Frontend {
    started: bool,
    header: Vec<u8>,
    /// Bytes of the current message's body still to pass.
    skip: usize,
}

impl Frontend {
    const SSL_REQUEST: u32 = 80_877_103;
    const GSSENC_REQUEST: u32 = 80_877_104;

    fn feed(&mut self, mut data: &[u8], counts: &Counts) {
        while !data.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(data.len());
                self.skip -= n;
                data = &data[n..];
                continue;
            }
            let want = if self.started { 5 } else { 8 };
            let n = (want - self.header.len()).min(data.len());
            self.header.extend_from_slice(&data[..n]);
            data = &data[n..];
            if self.header.len() < want {
                return;
            }
            let word = |at: usize| {
                u32::from_be_bytes(self.header[at..at + 4].try_into().expect("four bytes"))
            };
            if self.started {
                match self.header[0] {
                    b'Q' => counts.queries.fetch_add(1, Ordering::Relaxed),
                    b'S' => counts.syncs.fetch_add(1, Ordering::Relaxed),
                    _ => 0,
                };
                self.skip = (word(1) as usize).saturating_sub(4);
            } else {
                let code = word(4);
                self.skip = (word(0) as usize).saturating_sub(8);
                self.started = code != Self::SSL_REQUEST && code != Self::GSSENC_REQUEST;
            }
            self.header.clear();
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
