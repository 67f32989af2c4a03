//! The `floor` part: what the Postgres server alone spends on a run, drained in SQL with no
//! process running (see the benchmark's doc).

use crate::jobhost::{CLEAR_POSTGRES, QUEUE_POSTGRES};
use crate::postgres::PgDatabase;
use crate::procs::postgres_cpu;
use crate::report::Record;
use crate::settings::{JOB, Settings};
use crate::stats::fmt_duration;
use jobhost::store::Store;
use jobhost::store::new_run_id;
use std::time::Instant;

pub const FLOOR_RUNS: usize = 20_000;
pub const FLOOR_BATCH: usize = 250;

/// One of the floor's workloads: its name, what it writes, the statements that set it up
/// (on a database with jobhost's migrations) and queue `{runs}` runs — or, with
/// `jobhost_runs`, jobhost's own runs queued as the backlog's are after them; a run's id
/// is shaped as a v7 uuid, as jobhost's are, in `lean` too — the `DO` block that drains
/// them `{batch}` at a time, and how many runs it left undone.
pub struct Floor {
    pub name: &'static str,
    pub what: &'static str,
    pub setup: &'static str,
    pub jobhost_runs: bool,
    pub drain: &'static str,
    pub left: &'static str,
}

/// A floor workload's timed drains: the server's CPU per run (µs) and the runs/s of each.
pub struct FloorDrains {
    pub workload: &'static Floor,
    pub drains: Vec<(f64, f64)>,
}

pub const FLOOR_RUNS_LEFT: &str = "SELECT COUNT(*) FROM jobhost_runs WHERE status <> 'succeeded'";

pub static FLOORS: [Floor; 4] = [
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
pub fn floor_sql(template: &str) -> String {
    template
        .replace("{runs}", &FLOOR_RUNS.to_string())
        .replace("{batch}", &FLOOR_BATCH.to_string())
}

/// Queues the floor's runs in jobhost's empty tables as the backlog's are queued, and
/// analyses the tables.
pub async fn queue_floor_runs(conn: &mut sqlx::PgConnection) {
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
pub async fn run(s: &Settings, record: &Record) {
    use sqlx::Connection;
    record.enter("floor");
    let database = PgDatabase::create("jobhost_bench_").await;
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
