//! Several hosts on one Postgres database: work is shared, nothing runs twice at once,
//! nothing is lost when a host dies, a frozen host cannot commit late, and a host that
//! loses the database fails its attempt and recovers.

use crate::common;

use common::{Backend, Home, Server};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

async fn fleet_home() -> Home {
    Home::new(Backend::Postgres).await
}

/// How many rows of `table` the transaction `tx` has read so far, by index or by scan.
async fn rows_read(tx: &mut sqlx::PgConnection, table: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT COALESCE(idx_tup_fetch, 0) + COALESCE(seq_tup_read, 0) \
         FROM pg_stat_xact_user_tables WHERE relname = $1",
    )
    .bind(table)
    .fetch_one(tx)
    .await
    .unwrap()
}

async fn start_hosts(home: &Home, n: usize, args: &[&str]) -> Vec<Server> {
    let mut hosts = Vec::new();
    for _ in 0..n {
        hosts.push(home.serve(args).await);
    }
    hosts
}

jobhost::record! {
    #[derive(Debug)]
    struct AttemptRow {
        job: String,
        instance: String,
        generation: i64,
        host: String,
        status: String,
        started_at: i64,
        finished_at: Option<i64>,
    }
}

async fn attempts(home: &Home) -> Vec<AttemptRow> {
    let store = home.store().await;
    let jobhost::store::Pool::Postgres(pool) = store.pool() else {
        unreachable!()
    };
    sqlx::query_as(
        "SELECT r.job, r.instance, a.generation, a.host, a.status, a.started_at, a.finished_at \
         FROM jobhost_attempts a JOIN jobhost_runs r ON r.id = a.run_id ORDER BY a.started_at",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// No two attempts of one job instance overlap, and their generations rise with time.
fn assert_no_overlap(all: &[AttemptRow]) {
    let mut by_key: BTreeMap<(&str, &str), Vec<&AttemptRow>> = BTreeMap::new();
    for a in all {
        by_key.entry((&a.job, &a.instance)).or_default().push(a);
    }
    for (key, list) in by_key {
        for w in list.windows(2) {
            let end = w[0].finished_at.unwrap_or(i64::MAX);
            assert!(
                end <= w[1].started_at || w[0].status == "running",
                "{key:?}: attempts overlap: {:?} and {:?}",
                w[0],
                w[1]
            );
            assert!(
                w[0].generation < w[1].generation,
                "{key:?}: generations out of order: {w:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hosts_share_the_work_and_lose_nothing_when_one_dies() {
    let home = fleet_home().await;
    let m = home.manifest(
        "",
        r#"
        [jobs.unit]
        component = "{guest:hello}"
        timeout = "5s"
        payload = { sleep_ms = 300 }
    "#,
    );
    let manifest = m.to_str().unwrap();
    let args = [
        "--manifest",
        manifest,
        "--workers",
        "3",
        "--lease-grace",
        "1s",
        "--surveillance-interval",
        "1s",
    ];
    let mut hosts = start_hosts(&home, 3, &args).await;
    const INSTANCES: usize = 45;
    for i in 0..INSTANCES {
        let (code, kicked) = hosts[i % 3]
            .post(&format!("/jobs/unit/kick?instance=i{i}"))
            .await;
        assert_eq!((code, kicked["result"].as_str()), (202, Some("queued")));
    }
    // Kill one host while it is running something.
    let victim = hosts.remove(1);
    let its_runs = format!(
        "SELECT COUNT(*) FROM jobhost_runs WHERE status = 'running' AND host LIKE '%-{}'",
        victim.child.id()
    );
    let started = Instant::now();
    while home.scalar(&its_runs).await == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the victim never ran anything"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    victim.signal("KILL");
    let _ = victim.wait_exit(Duration::from_secs(5)).await;

    // Every instance ends with exactly one successful run.
    let runs = hosts[0]
        .wait_runs("unit", Duration::from_secs(90), |runs| {
            let done: std::collections::HashSet<&str> = runs
                .iter()
                .filter(|r| r["status"] == "succeeded")
                .map(|r| r["instance"].as_str().unwrap())
                .collect();
            done.len() == INSTANCES
                && !runs.iter().any(|r| {
                    ["running", "claimed", "queued"]
                        .contains(&r["status"].as_str().unwrap_or_default())
                })
        })
        .await;
    let mut succeeded: HashMap<&str, usize> = HashMap::new();
    for r in runs.iter().filter(|r| r["status"] == "succeeded") {
        *succeeded
            .entry(r["instance"].as_str().unwrap())
            .or_default() += 1;
    }
    assert!(
        succeeded.values().all(|n| *n == 1),
        "an instance succeeded twice: {succeeded:?}"
    );
    // What the dead host held was reported crashed and rerun, once each.
    let crashed: Vec<&Value> = runs.iter().filter(|r| r["status"] == "crashed").collect();
    assert!(
        !crashed.is_empty(),
        "the killed host's runs are reported crashed"
    );
    for c in &crashed {
        let reruns: Vec<&Value> = runs
            .iter()
            .filter(|r| r["rerun_of"] == c["run_id"])
            .collect();
        assert_eq!(reruns.len(), 1, "crashed run {c} has reruns {reruns:?}");
    }
    assert_eq!(runs.len(), INSTANCES + crashed.len(), "no run queued twice");
    let all = attempts(&home).await;
    assert_no_overlap(&all);
    let hosts_used: std::collections::HashSet<&str> = all.iter().map(|a| a.host.as_str()).collect();
    assert!(hosts_used.len() >= 2, "the work was spread: {hosts_used:?}");
    // Surveillance ran once per period across the fleet: one crash report per crash.
    let crash_reports = home
        .scalar("SELECT COUNT(*) FROM jobhost_reports WHERE kind = 'crashed'")
        .await;
    assert_eq!(crash_reports as usize, crashed.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_host_cannot_commit_after_its_lease_moved_on() {
    let home = fleet_home().await;
    let m = home.manifest(
        "",
        r#"
        [jobs.ledger]
        component = "{guest:ledger}"
        timeout = "3s"
        payload = { rows = 3, wait_ms = 1500 }
        grants.db = { write = ["ledger"] }
    "#,
    );
    let manifest = m.to_str().unwrap();
    let args = [
        "--manifest",
        manifest,
        "--lease-grace",
        "1s",
        "--surveillance-interval",
        "1s",
        "--txn-timeout",
        "10s",
    ];
    let zombie = home.serve(&args).await;
    zombie.post("/jobs/ledger/kick").await;
    // Freeze the host once its guest has written its rows and waits inside the transaction.
    let started = Instant::now();
    while home
        .scalar("SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND usename LIKE 'jobhost_job_ledger_%' AND state = 'idle in transaction'")
        .await
        == 0
    {
        assert!(started.elapsed() < Duration::from_secs(10), "the guest never opened its transaction");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    zombie.signal("STOP");
    let frozen = home.scalar("SELECT COUNT(*) FROM jobhost_runs").await;
    assert_eq!(frozen, 1);
    // Another host finds the lease expired, reports the run crashed and reruns it.
    let other = home.serve(&args).await;
    let runs = other
        .wait_runs("ledger", Duration::from_secs(30), |runs| {
            runs.iter().any(|r| r["status"] == "crashed")
                && runs.iter().any(|r| r["status"] == "succeeded")
        })
        .await;
    zombie.signal("CONT");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let crashed = runs.iter().find(|r| r["status"] == "crashed").unwrap();
    let rerun = runs.iter().find(|r| r["status"] == "succeeded").unwrap();
    let old = crashed["run_id"].as_str().unwrap();
    let new = rerun["run_id"].as_str().unwrap();
    assert_eq!(
        home.scalar(&format!(
            "SELECT COUNT(*) FROM ledger WHERE run_id = '{old}'"
        ))
        .await,
        0,
        "the old generation committed"
    );
    assert_eq!(
        home.scalar(&format!(
            "SELECT COUNT(*) FROM ledger WHERE run_id = '{new}'"
        ))
        .await,
        3
    );
    // The woken zombie did not overwrite what the fleet recorded.
    let store = home.store().await;
    assert_eq!(store.get_run(old).await.unwrap().unwrap().status, "crashed");
    drop(zombie);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_loses_the_database_fails_the_attempt_and_recovers() {
    let home = fleet_home().await;
    let proxy = common::proxy::Proxy::start("127.0.0.1:5432").await;
    let (base, db) = home.db_url.rsplit_once('/').unwrap();
    let (_, host_part) = base.rsplit_once('@').unwrap();
    let via_proxy = home
        .db_url
        .replace(host_part, &format!("127.0.0.1:{}", proxy.port));
    assert!(via_proxy.ends_with(db));
    let m = home.manifest(
        "",
        r#"
        [jobs.ledger]
        component = "{guest:ledger}"
        timeout = "10s"
        retries = 1
        backoff = "100ms"
        payload = { rows = 3, wait_ms = 1500 }
        grants.db = { write = ["ledger"] }
    "#,
    );
    let server = home
        .serve_with_db(
            &via_proxy,
            &["--manifest", m.to_str().unwrap(), "--lease-grace", "15s"],
        )
        .await;
    server.post("/jobs/ledger/kick").await;
    let started = Instant::now();
    while home
        .scalar("SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND usename LIKE 'jobhost_job_ledger_%' AND state = 'idle in transaction'")
        .await
        == 0
    {
        assert!(started.elapsed() < Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    proxy.cut();
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.restore();
    let store = home.store().await;
    let started = Instant::now();
    let run = loop {
        let runs = store
            .list_runs(&jobhost::store::RunFilter {
                limit: 5,
                ..Default::default()
            })
            .await
            .unwrap();
        if runs[0].status == "succeeded" {
            break runs[0].clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the host did not recover: {runs:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let attempts = store.list_attempts(&run.id, 100).await.unwrap();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[0].status, "failed");
    assert_eq!(attempts[0].code.as_deref(), Some("driver_failed"));
    assert_eq!(attempts[1].status, "succeeded");
    assert_eq!(
        home.scalar(&format!(
            "SELECT COUNT(*) FROM ledger WHERE run_id = '{}' AND attempt = 1",
            run.id
        ))
        .await,
        0
    );
    assert_eq!(
        home.scalar(&format!(
            "SELECT COUNT(*) FROM ledger WHERE run_id = '{}' AND attempt = 2",
            run.id
        ))
        .await,
        3
    );
    let logs = home.server_logs();
    assert!(!logs.contains("postgres://"), "no database URL in logs");
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_starting_together_migrate_once() {
    let home = fleet_home().await;
    let m = common::migrations();
    let migrating: Vec<std::process::Child> = (0..4)
        .map(|_| {
            home.host()
                .args(["migrate", "--migrations", m.to_str().unwrap()])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in migrating {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Each migration applied once: the host's and the operator's.
    let sql_files = |dir: std::path::PathBuf| {
        std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "sql")
            })
            .count() as i64
    };
    assert_eq!(
        home.scalar("SELECT COUNT(*) FROM jobhost_migrations WHERE scope = 'host'")
            .await,
        sql_files(common::workspace().join("migrations/postgres"))
    );
    assert_eq!(
        home.scalar("SELECT COUNT(*) FROM jobhost_migrations WHERE scope = 'operator'")
            .await,
        sql_files(common::migrations())
    );
    assert_eq!(home.scalar("SELECT COUNT(*) FROM secrets").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_migration_sets_build_the_same_schema() {
    let sqlite = Home::new(Backend::Sqlite).await;
    let postgres = Home::new(Backend::Postgres).await;
    let sqlite_store = sqlite.store().await;
    let postgres_store = postgres.store().await;
    let jobhost::store::Pool::Sqlite(s) = sqlite_store.pool() else {
        unreachable!()
    };
    let jobhost::store::Pool::Postgres(p) = postgres_store.pool() else {
        unreachable!()
    };
    let sqlite_columns: Vec<(String, String)> = sqlx::query_as(
        "SELECT m.name, c.name FROM sqlite_master m, pragma_table_info(m.name) c \
         WHERE m.type = 'table' AND m.name LIKE 'jobhost_%' ORDER BY m.name, c.cid",
    )
    .fetch_all(s)
    .await
    .unwrap();
    let postgres_columns: Vec<(String, String)> = sqlx::query_as(
        "SELECT table_name::text, column_name::text FROM information_schema.columns \
         WHERE table_schema = current_schema() AND table_name LIKE 'jobhost_%' \
         ORDER BY table_name, ordinal_position",
    )
    .fetch_all(p)
    .await
    .unwrap();
    assert!(sqlite_columns.len() > 50);
    assert_eq!(sqlite_columns, postgres_columns);
}

/// A backlog queued faster than autovacuum analyses the runs table (a fan-out, a burst of
/// kicks, a host starting on a full queue) leaves the planner believing almost nothing is
/// queued. A claim must still take its batch straight from the claim index, not read and
/// sort every queued run: the rows it reads are counted by the database itself, in the
/// claim's own transaction on a connection that did nothing before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_reads_one_batch_of_a_backlog_the_statistics_do_not_know() {
    use sqlx::Connection;
    const BACKLOG: i64 = 5_000;
    const BATCH: i32 = 10;
    let home = fleet_home().await;
    home.store().await.close().await;
    let mut setup = sqlx::PgConnection::connect(&home.db_url).await.unwrap();
    sqlx::raw_sql(
        "ALTER TABLE jobhost_runs SET (autovacuum_enabled = false); ANALYZE jobhost_runs",
    )
    .execute(&mut setup)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO jobhost_runs (id, job, instance, tenant, origin, payload, status, \
         next_attempt_at, created_at, updated_at) \
         SELECT 'r' || i, 'noop', 'i' || i, 'default', 'kick', '{}', 'queued', i, i, i \
         FROM generate_series(1, $1) AS i",
    )
    .bind(BACKLOG)
    .execute(&mut setup)
    .await
    .unwrap();
    setup.close().await.unwrap();

    // Both ways a claim chooses: the most overdue runs of any tenant, and an equal share
    // of each tenant the host last saw with queued runs.
    for tenants in ["{}", "{default,other}"] {
        let mut claimer = sqlx::PgConnection::connect(&home.db_url).await.unwrap();
        let mut tx = claimer.begin().await.unwrap();
        let claimed: Vec<(String,)> = sqlx::query_as(
            "SELECT id FROM jobhost_claim_runs('h', $1, \
             '{\"noop\": {\"deadline_ms\": 60000, \"expires_ms\": 60000, \"digest\": \"d\"}}', \
             NULL, '{}', CAST($2 AS TEXT[]))",
        )
        .bind(BATCH)
        .bind(tenants)
        .fetch_all(&mut *tx)
        .await
        .unwrap();
        let read = rows_read(&mut tx, "jobhost_runs").await;
        tx.rollback().await.unwrap();
        claimer.close().await.unwrap();
        let ids: Vec<&str> = claimed.iter().map(|(id,)| id.as_str()).collect();
        let oldest: Vec<String> = (1..=BATCH).map(|i| format!("r{i}")).collect();
        assert_eq!(
            ids, oldest,
            "the batch is the most overdue runs, in order ({tenants})"
        );
        assert!(
            read < 20 * i64::from(BATCH),
            "a claim of {BATCH} ({tenants}) read {read} rows of a backlog of {BACKLOG}"
        );
    }
}

/// An ending's item, in the JSON form an earlier host sends: the first attempt of run
/// `run_id` (job `noop`) succeeded, at lease generation `generation` held by the run.
fn succeeded_finish(
    idx: usize,
    run_id: &str,
    instance: &str,
    generation: i64,
    started_at: i64,
) -> Value {
    json!({
        "idx": idx, "kind": "finish", "run_id": run_id, "job": "noop",
        "instance": instance, "generation": generation, "holder": run_id,
        "seq": 1, "a_pass": 1, "a_attempt": 1, "a_host": "h", "a_status": "succeeded",
        "a_outcome": "ok", "a_duration_ms": 1, "a_log": "", "a_log_truncated": 0,
        "a_started_at": started_at, "require_lease": true, "status": "succeeded",
        "pass": 1, "failures": 0
    })
}

/// A claim locks only its own batch's leases, whatever its session planned before. A
/// session that has claimed more than five times, when its plans are made anew (here after
/// an `ANALYZE` of an empty lease table), could keep a plan made for any batch, taken
/// while the lease table was small: it read every lease for each claim. Then the lease
/// table grows to 5 000 rows, and a claim of ten must still read about ten leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_locks_only_its_own_leases_whatever_it_planned_before() {
    use sqlx::Connection;
    const BATCH: i64 = 10;
    let home = fleet_home().await;
    home.store().await.close().await;
    let mut setup = sqlx::PgConnection::connect(&home.db_url).await.unwrap();
    let mut claimer = sqlx::PgConnection::connect(&home.db_url).await.unwrap();
    let queue = |from: i64, to: i64| {
        sqlx::query(
            "INSERT INTO jobhost_runs (id, job, instance, tenant, origin, payload, status, \
             next_attempt_at, created_at, updated_at) \
             SELECT 'c' || i, 'noop', 'c' || i, 'default', 'kick', '{}', 'queued', i, i, i \
             FROM generate_series($1, $2) AS i",
        )
        .bind(from)
        .bind(to)
    };
    let terms = json!({"noop": {"deadline_ms": 60_000, "expires_ms": 90_000, "digest": "d"}});
    let claim = "SELECT id FROM jobhost_claim_runs('h', CAST($1 AS INTEGER), CAST($2 AS JSONB), \
                 NULL, '{}', ARRAY['default'])";
    // Seven claims: the session's plans have been made five times and more.
    queue(1, 7 * BATCH).execute(&mut setup).await.unwrap();
    for _ in 0..7 {
        let claimed: Vec<(String,)> = sqlx::query_as(claim)
            .bind(BATCH)
            .bind(terms.to_string())
            .fetch_all(&mut claimer)
            .await
            .unwrap();
        assert_eq!(claimed.len(), BATCH as usize);
    }
    // Plans made anew with an empty lease table, by the next claim.
    sqlx::raw_sql(
        "TRUNCATE jobhost_runs, jobhost_leases; ANALYZE jobhost_runs; ANALYZE jobhost_leases",
    )
    .execute(&mut setup)
    .await
    .unwrap();
    queue(1_000, 1_000 + BATCH - 1)
        .execute(&mut setup)
        .await
        .unwrap();
    let claimed: Vec<(String,)> = sqlx::query_as(claim)
        .bind(BATCH)
        .bind(terms.to_string())
        .fetch_all(&mut claimer)
        .await
        .unwrap();
    assert_eq!(claimed.len(), BATCH as usize);
    // The lease table grows; the next claim must read its own leases only.
    sqlx::query(
        "INSERT INTO jobhost_leases (job, instance, generation, holder, deadline_at, \
         expires_at, pending, updated_at) \
         SELECT 'noop', 'other' || i, 1, NULL, 0, 0, 0, 0 FROM generate_series(1, 5000) AS i",
    )
    .execute(&mut setup)
    .await
    .unwrap();
    queue(2_000, 2_000 + BATCH - 1)
        .execute(&mut setup)
        .await
        .unwrap();
    setup.close().await.unwrap();
    let mut tx = claimer.begin().await.unwrap();
    let claimed: Vec<(String,)> = sqlx::query_as(claim)
        .bind(BATCH)
        .bind(terms.to_string())
        .fetch_all(&mut *tx)
        .await
        .unwrap();
    let read = rows_read(&mut tx, "jobhost_leases").await;
    tx.commit().await.unwrap();
    assert_eq!(claimed.len(), BATCH as usize);
    assert!(
        read < 20 * BATCH,
        "a claim of {BATCH} read {read} lease rows of the 5 010 there are"
    );
    claimer.close().await.unwrap();
}

/// The same for an ending: with the planner believing no run is running (a drain that
/// started after the last `ANALYZE`), the statement that checks and ends the batch's runs
/// must still be driven by the batch, one run read by its key per item, not read every
/// running run for each item. A run no longer running (surveillance marked it crashed
/// while its lease was still held) is not ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ending_reads_only_its_own_runs_whatever_the_statistics_say() {
    use sqlx::Connection;
    const RUNNING: i64 = 5_000;
    const BATCH: usize = 10;
    let home = fleet_home().await;
    home.store().await.close().await;
    let mut setup = sqlx::PgConnection::connect(&home.db_url).await.unwrap();
    sqlx::raw_sql(
        "ALTER TABLE jobhost_runs SET (autovacuum_enabled = false); ANALYZE jobhost_runs",
    )
    .execute(&mut setup)
    .await
    .unwrap();
    for statement in [
        "INSERT INTO jobhost_runs (id, job, instance, tenant, origin, payload, status, \
         generation, host, attempts, started_at, next_attempt_at, created_at, updated_at) \
         SELECT 'e' || i, 'noop', 'i' || i, 'default', 'kick', '{}', 'running', 1, 'h', 1, \
         i, i, i, i FROM generate_series(1, $1) AS i",
        "INSERT INTO jobhost_leases (job, instance, generation, holder, deadline_at, \
         expires_at, pending, updated_at) \
         SELECT 'noop', 'i' || i, 1, 'e' || i, 9e15, 9e15, 0, i \
         FROM generate_series(1, $1) AS i",
        "UPDATE jobhost_runs SET status = 'crashed' WHERE id = 'e' || ($1 - 1)",
    ] {
        sqlx::query(statement)
            .bind(RUNNING)
            .execute(&mut setup)
            .await
            .unwrap();
    }
    setup.close().await.unwrap();

    // The last item is the crashed run's.
    let items: Vec<Value> = (0..BATCH)
        .map(|idx| {
            let n = if idx + 1 == BATCH {
                RUNNING as usize - 1
            } else {
                idx * 400 + 7
            };
            succeeded_finish(idx, &format!("e{n}"), &format!("i{n}"), 1, n as i64)
        })
        .collect();
    let mut ender = sqlx::PgConnection::connect(&home.db_url).await.unwrap();
    let mut tx = ender.begin().await.unwrap();
    let answers: Vec<(String,)> = sqlx::query_as(
        "SELECT result FROM jobhost_record_attempts(CAST($1 AS JSONB)) ORDER BY idx",
    )
    .bind(Value::Array(items).to_string())
    .fetch_all(&mut *tx)
    .await
    .unwrap();
    let read = rows_read(&mut tx, "jobhost_runs").await;
    tx.commit().await.unwrap();
    let mut expected = vec![("finished".to_string(),); BATCH - 1];
    expected.push(("not_running".to_string(),));
    assert_eq!(answers, expected);
    assert!(
        read < 20 * BATCH as i64,
        "an ending of {BATCH} read {read} rows of {RUNNING} running runs"
    );
    let ended: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM jobhost_runs WHERE status = 'succeeded'")
            .fetch_one(&mut ender)
            .await
            .unwrap();
    assert_eq!(
        ended,
        BATCH as i64 - 1,
        "exactly the batch's running runs ended"
    );
    ender.close().await.unwrap();
}

/// A host of an earlier version sends its endings as JSON while the fleet upgrades: the
/// JSON form still records them as the array form does, each on its own conditions (a
/// finish whose lease moved on records nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_earlier_hosts_endings_in_json_are_recorded_as_before() {
    use sqlx::Connection;
    let home = fleet_home().await;
    home.store().await.close().await;
    let mut db = sqlx::PgConnection::connect(&home.db_url).await.unwrap();
    sqlx::query(
        "INSERT INTO jobhost_runs (id, job, instance, tenant, origin, payload, status, \
         next_attempt_at, created_at, updated_at) \
         SELECT 'j' || i, 'noop', 'i' || i, 'default', 'kick', '{}', 'queued', i, i, i \
         FROM generate_series(1, 3) AS i",
    )
    .execute(&mut db)
    .await
    .unwrap();
    let claimed: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT id, generation, updated_at FROM jobhost_claim_runs('h', 3, \
         '{\"noop\": {\"deadline_ms\": 60000, \"expires_ms\": 60000, \"digest\": \"d\"}}', \
         NULL, '{}', '{}') ORDER BY id",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    assert_eq!(claimed.len(), 3);
    let items: Vec<Value> = claimed
        .iter()
        .enumerate()
        .map(|(idx, (id, generation, started_at))| {
            // The third names a generation its lease never had.
            let generation = if idx == 2 {
                generation + 1
            } else {
                *generation
            };
            succeeded_finish(idx, id, &id.replacen('j', "i", 1), generation, *started_at)
        })
        .collect();
    let answers: Vec<(i32, String)> = sqlx::query_as(
        "SELECT idx, result FROM jobhost_record_attempts(CAST($1 AS JSONB)) ORDER BY idx",
    )
    .bind(Value::Array(items).to_string())
    .fetch_all(&mut db)
    .await
    .unwrap();
    assert_eq!(
        answers,
        [
            (0, "finished".to_string()),
            (1, "finished".to_string()),
            (2, "lease_lost".to_string())
        ]
    );
    let runs: Vec<(String, String)> =
        sqlx::query_as("SELECT id, status FROM jobhost_runs ORDER BY id")
            .fetch_all(&mut db)
            .await
            .unwrap();
    let statuses: Vec<(&str, &str)> = runs.iter().map(|(i, s)| (i.as_str(), s.as_str())).collect();
    assert_eq!(
        statuses,
        [("j1", "succeeded"), ("j2", "succeeded"), ("j3", "running")]
    );
    let attempts: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobhost_attempts")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(attempts, 2, "the lost lease's attempt records nothing");
    let held: Vec<(String,)> =
        sqlx::query_as("SELECT holder FROM jobhost_leases WHERE holder IS NOT NULL")
            .fetch_all(&mut db)
            .await
            .unwrap();
    assert_eq!(held, [("j3".to_string(),)]);
    db.close().await.unwrap();
}

/// Endings waiting in a host's finisher are not yet recorded: a host killed with a full
/// backlog loses none that it acknowledged (logged as finished, which it does only once
/// recorded) and records none twice — the rest are runs surveillance reports crashed and
/// reruns, once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_killed_with_endings_unrecorded_loses_none_it_acknowledged() {
    const RUNS: usize = 1_200;
    let home = fleet_home().await;
    let m = home.manifest(
        "",
        r#"
        [jobs.unit]
        component = "{guest:noop}"
        timeout = "20s"
    "#,
    );
    let manifest = m.to_str().unwrap();
    let args = [
        "--manifest",
        manifest,
        "--workers",
        "8",
        "--lease-grace",
        "1s",
        "--surveillance-interval",
        "1s",
    ];
    // A slow database for endings only: every attempt row takes 2 ms to insert, so the
    // finisher records about two batches a second.
    home.exec(
        "CREATE FUNCTION slow_attempt() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN PERFORM pg_sleep(0.002); RETURN NEW; END $$; \
         CREATE TRIGGER slow_attempt BEFORE INSERT ON jobhost_attempts \
         FOR EACH ROW EXECUTE FUNCTION slow_attempt();",
    )
    .await;
    let store = home.store().await;
    for i in 0..RUNS {
        common::queue_run(&store, "unit", &format!("i{i}"), 0).await;
    }
    // Endings cannot be recorded at all at first: the finisher's backlog (1 024) fills
    // and the workers wait on it, while claims go on.
    let mut blocker = {
        use sqlx::Connection;
        sqlx::PgConnection::connect(&home.db_url).await.unwrap()
    };
    sqlx::raw_sql("BEGIN; LOCK TABLE jobhost_attempts IN EXCLUSIVE MODE")
        .execute(&mut blocker)
        .await
        .unwrap();
    let victim = home
        .serve_logging("info,jobhost::runs::runner=debug", &args)
        .await;
    let running = "SELECT COUNT(*) FROM jobhost_runs WHERE status = 'running'";
    let started = Instant::now();
    let mut last = (0, Instant::now());
    loop {
        let now = home.scalar(running).await;
        if now != last.0 {
            last = (now, Instant::now());
        } else if now > 1_024 && last.1.elapsed() > Duration::from_millis(500) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the backlog never filled: {now} runs running"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !home.server_logs().contains("run finished"),
        "nothing is acknowledged before it is recorded"
    );
    // Let the finisher record, and kill the host in the middle of it: once a hundred
    // endings are acknowledged (the first batch or two of a backlog of over a thousand).
    sqlx::raw_sql("COMMIT").execute(&mut blocker).await.unwrap();
    let started = Instant::now();
    while home.server_logs().matches("run finished").count() < 100 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the victim never acknowledged an ending"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    victim.signal("KILL");
    let _ = victim.wait_exit(Duration::from_secs(5)).await;
    let acknowledged: std::collections::HashSet<String> = home
        .server_logs()
        .lines()
        .filter(|l| l.contains("run finished"))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|f| f.strip_prefix("run_id="))
                .map(str::to_string)
        })
        .collect();
    assert!(!acknowledged.is_empty());
    home.exec("DROP TRIGGER slow_attempt ON jobhost_attempts")
        .await;

    let survivor = home.serve(&args).await;
    let done = "SELECT COUNT(*) FROM jobhost_runs WHERE status IN ('queued', 'running')";
    let started = Instant::now();
    while home.scalar(done).await > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "the fleet did not finish the runs"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(survivor);

    let jobhost::store::Pool::Postgres(pool) = store.pool() else {
        unreachable!()
    };
    let runs: Vec<(String, String, Option<String>)> =
        sqlx::query_as("SELECT id, status, rerun_of FROM jobhost_runs")
            .fetch_all(pool)
            .await
            .unwrap();
    let attempts: Vec<(String, String)> =
        sqlx::query_as("SELECT run_id, status FROM jobhost_attempts")
            .fetch_all(pool)
            .await
            .unwrap();
    let mut attempts_of: HashMap<&str, Vec<&str>> = HashMap::new();
    for (run, status) in &attempts {
        attempts_of.entry(run).or_default().push(status);
    }
    let reruns: HashMap<&str, usize> =
        runs.iter()
            .filter_map(|(_, _, of)| of.as_deref())
            .fold(HashMap::new(), |mut n, of| {
                *n.entry(of).or_default() += 1;
                n
            });
    // Every acknowledged ending stands: succeeded, one attempt, never rerun.
    for id in &acknowledged {
        let (_, status, _) = runs.iter().find(|(r, _, _)| r == id).expect("a run");
        assert_eq!(status, "succeeded", "acknowledged run {id}");
        assert_eq!(
            attempts_of.get(id.as_str()),
            Some(&vec!["succeeded"]),
            "run {id}"
        );
        assert!(
            !reruns.contains_key(id.as_str()),
            "acknowledged run {id} was rerun"
        );
    }
    // The first runs ended once each: recorded by the victim, or reported crashed and
    // rerun once; never both.
    let first: Vec<_> = runs.iter().filter(|(_, _, of)| of.is_none()).collect();
    assert_eq!(first.len(), RUNS);
    let mut crashed = 0;
    for (id, status, _) in &first {
        let recorded = attempts_of.get(id.as_str()).cloned().unwrap_or_default();
        match status.as_str() {
            "succeeded" => {
                assert_eq!(recorded, vec!["succeeded"], "run {id}");
                assert!(
                    !reruns.contains_key(id.as_str()),
                    "succeeded run {id} was rerun"
                );
            }
            "crashed" => {
                crashed += 1;
                assert_eq!(recorded, vec!["crashed"], "run {id}");
                assert_eq!(reruns.get(id.as_str()), Some(&1), "crashed run {id}");
            }
            other => panic!("run {id} ended {other}"),
        }
    }
    assert!(crashed > 0, "the victim died with endings unrecorded");
    for (id, status, of) in &runs {
        if of.is_some() {
            assert_eq!(status, "succeeded", "rerun {id}");
        }
    }
    assert!(
        !home.server_logs().contains("postgres://"),
        "no database URL in logs"
    );
}
