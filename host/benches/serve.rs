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
//!   `backlog`, `curve`, `trips`, `floor`, `fanout`, `limits` (default all). Criterion's name filter
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
//! - limits: the backlog drain of jobhost alone, 1 host, under each claim limit (issue 40),
//!   side by side, each on a database of its own: none, `concurrency = 12` (half the
//!   workers, so it binds), and `key_concurrency = 1` with the backlog's runs spread over
//!   1 000 keys (their `limit_key` set after the bulk insert, as a payload member with
//!   1 000 values would have set it). The summary shows each one's CPU per run (host and
//!   Postgres server) against the unlimited drain's. First, on each backend, the rate's
//!   accuracy: one host with a backlog of a job with `rate = "20/s"` runs for 60 s from its
//!   first start (also in a quick run); the starts its claims entered in the rate's window
//!   (kept apart by a trigger of the benchmark's, as the claim deletes the window's old
//!   rows) and its runs' `started_at` (when each guest started): how many a second over
//!   those 60 s, and the most in any one second.
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
//!
//! The code: this file is the benchmark's shape, its parts and their order. The rest is in
//! `support/serve/`: `settings`, the drivers `jobhost` and `graphile`, the child processes
//! and their CPU accounting (`procs`), the `counting_proxy`, the `floor`, the `stats` and
//! the `report`; the Postgres databases come from `tests/common/postgres.rs`, as the tests'.

#[path = "support/serve/counting_proxy.rs"]
mod counting_proxy;
#[path = "support/serve/floor.rs"]
mod floor;
#[path = "support/serve/graphile.rs"]
mod graphile;
#[path = "support/guests.rs"]
mod guests;
#[path = "support/serve/jobhost.rs"]
mod jobhost;
#[path = "../../tests/common/postgres.rs"]
mod postgres;
#[path = "support/serve/procs.rs"]
mod procs;
#[path = "support/serve/report.rs"]
mod report;
#[path = "support/serve/settings.rs"]
mod settings;
#[path = "support/serve/stats.rs"]
mod stats;

use crate::counting_proxy::CountingProxy;
use crate::graphile::Graphile;
use crate::jobhost::Jobhost;
use crate::report::{
    Context, Db, Drain, Fanout, Key, Limit, RATE_MEASURED, RATE_PER_S, Record, Shape, System,
    Variant, describe_postgres, load_average,
};
use crate::settings::{
    FANOUT_PARENT, FANOUT_WARM_UP, FANOUT_WARM_UP_JOB, LONG_DRAIN, Settings, WARM_UP_RUNS,
};
use crate::stats::fmt_duration;
use criterion::{Criterion, SamplingMode, Throughput};
use std::future::Future;
use std::path::Path;
use std::time::Duration;
use tokio::runtime::Runtime;

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
        rt.block_on(floor::run(&settings, &record));
    }
    if settings.runs("fanout") {
        fan_out(&rt, &family, &settings, &record, &mut envs);
    }
    if settings.runs("limits") {
        limits_mode(&rt, &noop, &settings, &record);
    }
    record.enter("the end");
    rt.block_on(envs.stop(&record));
    record.print_summary(&settings, &context);
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

/// The backlog drain of one host under each claim limit, side by side: none, a job-wide
/// `concurrency`, `key_concurrency = 1` over 1 000 keys; each on a database of
/// its own.
fn limits_mode(rt: &Runtime, noop: &Path, s: &Settings, record: &Record) {
    for db in [Db::Postgres, Db::Sqlite] {
        record.enter(format!("limits/{db}/rate"));
        let env = rt.block_on(Jobhost::limited(noop, db, Limit::Rate, record));
        // Twice what the rate starts in the time measured: the backlog never runs dry.
        let runs = 2 * RATE_PER_S * RATE_MEASURED.as_secs() as usize;
        let drain = rt.block_on(env.drain_rated(runs, record));
        eprintln!("limits/{db}/rate: claimed {}", drain.claimed.line());
        eprintln!("limits/{db}/rate: started {}", drain.started.line());
        record.rated.lock().unwrap().insert(db, drain);
        rt.block_on(env.stop(record));
        for limit in Limit::ALL {
            let env = rt.block_on(Jobhost::limited(noop, db, limit, record));
            let drains = &env;
            repeat(rt, s, record, Key::Limits(db, limit), s.backlog, move |n| {
                drains.drain_backlog(n, 1, record)
            });
            rt.block_on(env.stop(record));
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
