//! The jobhost driver: a database and a home, the `host serve` processes on them, and each
//! way the benchmarks queue and drain runs, kick, and fan out through them.

use crate::counting_proxy::CountingProxy;
use crate::guests;
use crate::postgres::PgDatabase;
use crate::procs::{Proc, postgres_cpu, total_cpu, usage_since, wait_drained};
use crate::report::{
    Drain, Fanout, Kick, LIMIT_KEYS, Limit, RATE_MEASURED, RateDrain, RateFigures, Record, Shape,
    Trips,
};
use crate::settings::{
    BACKLOG_WORKERS, BATCH_WORKERS, CHECK_EVERY, DRAIN_TIMEOUT, FANOUT_CHILD, FANOUT_PARENT,
    FANOUT_WARM_UP, FANOUT_WARM_UP_JOB, JOB, KICK_POLL, KICK_WARM_UP, PARKED_MS,
    SQLITE_DUE_AHEAD_MS, START_TIMEOUT,
};
use jobhost::rules::job::JobSpec;
use jobhost::store::new_run_id;
use jobhost::store::{NewRun, Origin, Pool, Store};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tempfile::TempDir;

/// Makes every parked run of the job due at `$1`. Setting `status` makes the Postgres
/// trigger notify the hosts, as a kick's insert does.
pub const RELEASE_BATCH: &str = "UPDATE jobhost_runs SET status = 'queued', next_attempt_at = $1 \
    WHERE status = 'queued' AND job = $2";
pub const JOBHOST_BUSY: &str =
    "SELECT EXISTS (SELECT 1 FROM jobhost_runs WHERE status IN ('queued', 'running'))";
pub const NOT_SUCCEEDED: &str = "SELECT COUNT(*) FROM jobhost_runs WHERE status <> 'succeeded'";
/// Runs, succeeded runs, and the first claim.
pub const BACKLOG_OUTCOME: &str = "SELECT COUNT(*), \
    COALESCE(SUM(CASE WHEN status = 'succeeded' THEN 1 ELSE 0 END), 0), MIN(started_at) \
    FROM jobhost_runs";
pub const RUN_STATUS: &str = "SELECT status FROM jobhost_runs WHERE id = $1";
pub const CLEAR_POSTGRES: &str =
    "TRUNCATE jobhost_runs, jobhost_attempts, jobhost_leases, jobhost_reports";
pub const CLEAR_SQLITE: &str = "DELETE FROM jobhost_runs; DELETE FROM jobhost_attempts; \
    DELETE FROM jobhost_leases; DELETE FROM jobhost_reports";
/// `$1` runs as `insert_run` writes a kick's, one a millisecond up to now: `$2` an id
/// prefix (the first 24 characters of a v7 uuid; the row number makes the last 12), `$3`
/// job, `$4` tenant, `$5` payload.
pub const QUEUE_POSTGRES: &str = "INSERT INTO jobhost_runs (id, job, instance, tenant, origin, \
    payload, status, next_attempt_at, created_at, updated_at) \
    SELECT $2 || lpad(to_hex(i), 12, '0'), $3, 'b' || i, $4, 'kick', $5, 'queued', \
    t.at - $1 + i, t.at - $1 + i, t.at - $1 + i \
    FROM generate_series(0, $1 - 1) AS i, \
    (SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT) AS at) AS t";
pub const QUEUE_SQLITE: &str = "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n \
    WHERE i + 1 < $1) \
    INSERT INTO jobhost_runs (id, job, instance, tenant, origin, payload, status, \
    next_attempt_at, created_at, updated_at) \
    SELECT $2 || printf('%012x', i), $3, 'b' || i, $4, 'kick', $5, 'queued', \
    t.at - $1 + i, t.at - $1 + i, t.at - $1 + i \
    FROM n, (SELECT CAST(unixepoch('subsec') * 1000 AS BIGINT) AS at) AS t";
/// Keeps each start a claim enters in a job's rate window (the claim deletes the window's
/// old rows as it goes) in `bench_starts`, for the rate drain.
pub const KEEP_STARTS_POSTGRES: &str = "CREATE TABLE IF NOT EXISTS bench_starts (at BIGINT NOT NULL); \
    TRUNCATE bench_starts; \
    CREATE OR REPLACE FUNCTION bench_keep_start() RETURNS trigger LANGUAGE plpgsql AS \
    $$ BEGIN INSERT INTO bench_starts (at) VALUES (NEW.at); RETURN NULL; END $$; \
    CREATE OR REPLACE TRIGGER bench_keep_start AFTER INSERT ON jobhost_rate_starts \
    FOR EACH ROW WHEN (NEW.scope = 0) EXECUTE FUNCTION bench_keep_start()";
pub const KEEP_STARTS_SQLITE: &str = "CREATE TABLE IF NOT EXISTS bench_starts (at BIGINT NOT NULL); \
    DELETE FROM bench_starts; \
    CREATE TRIGGER IF NOT EXISTS bench_keep_start AFTER INSERT ON jobhost_rate_starts \
    WHEN NEW.scope = 0 BEGIN INSERT INTO bench_starts (at) VALUES (NEW.at); END";
pub const CLAIMED_AT: &str = "SELECT at FROM bench_starts ORDER BY at";
pub const STARTED_AT: &str =
    "SELECT started_at FROM jobhost_runs WHERE started_at IS NOT NULL ORDER BY started_at";
/// `$1` copies of the one queued run, as a plain `INSERT` of an operator's would make them:
/// random v4 ids, its times, instances `b0`….
pub const COPY_POSTGRES: &str = "INSERT INTO jobhost_runs (id, job, instance, tenant, origin, \
    payload, status, next_attempt_at, created_at, updated_at) \
    SELECT CAST(gen_random_uuid() AS TEXT), r.job, 'b' || i, r.tenant, r.origin, r.payload, \
    r.status, r.next_attempt_at, r.created_at, r.updated_at \
    FROM generate_series(0, $1 - 1) AS i, (SELECT * FROM jobhost_runs LIMIT 1) AS r";
pub const COPY_SQLITE: &str = "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n \
    WHERE i + 1 < $1) \
    INSERT INTO jobhost_runs (id, job, instance, tenant, origin, payload, status, \
    next_attempt_at, created_at, updated_at) \
    SELECT lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' \
        || substr(hex(randomblob(2)), 2) || '-' || substr('89AB', 1 + abs(random()) % 4, 1) \
        || substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6))), \
    r.job, 'b' || i, r.tenant, r.origin, r.payload, r.status, r.next_attempt_at, \
    r.created_at, r.updated_at \
    FROM n, (SELECT * FROM jobhost_runs LIMIT 1) AS r";
pub const ONLY_RUN: &str = "SELECT id FROM jobhost_runs";
pub const DROP_RUN: &str = "DELETE FROM jobhost_runs WHERE id = $1";

/// The parent's status, pass, result, and end.
pub const PARENT_STATE: &str =
    "SELECT status, pass, result, finished_at FROM jobhost_runs WHERE id = $1";
/// The parent's attempts: pass, start and end.
pub const PARENT_ATTEMPTS: &str = "SELECT pass, started_at, finished_at FROM jobhost_attempts \
    WHERE run_id = $1 ORDER BY seq";
/// Children, succeeded children, and the last child's end.
pub const CHILDREN_OUTCOME: &str = "SELECT COUNT(*), \
    COALESCE(SUM(CASE WHEN status = 'succeeded' THEN 1 ELSE 0 END), 0), MAX(finished_at) \
    FROM jobhost_runs WHERE parent_run = $1";

/// Runs `$body` with `$p` bound to the store's sqlx pool, whichever backend it is.
macro_rules! on_pool {
    ($store:expr, $p:ident => $body:expr) => {
        match $store.pool() {
            Pool::Sqlite($p) => $body,
            Pool::Postgres($p) => $body,
        }
    };
}

/// The manifest of the one job `noop`.
pub fn noop_manifest(noop: &Path) -> String {
    let component = toml::Value::String(noop.display().to_string());
    format!("[jobs.{JOB}]\ncomponent = {component}\n")
}

/// The fan-out's manifest: the parents `family` (`children` children) and
/// `family-warm-up` (`FANOUT_WARM_UP`), and `family-child`. One component is parent and
/// child, so every job has the grants it imports (the `ledger` table, from the examples'
/// migrations, is written only with `in_tx`, which the fan-out leaves off).
pub fn family_manifest(family: &Path, children: usize) -> String {
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
pub struct Jobhost {
    pub home: TempDir,
    pub db_url: String,
    pub manifest: PathBuf,
    pub store: Store,
    pub tenant: String,
    /// The payload of the job's kicks.
    pub payload: String,
    /// Batch mode's long-lived hosts (backlog drains start their own).
    pub hosts: Vec<Proc>,
    pub http: reqwest::Client,
    /// An operator's API token for the kicks.
    pub token: String,
    /// The Postgres database, dropped at the end.
    pub database: Option<PgDatabase>,
    /// The job counts by key: a queued backlog's runs are spread over [`LIMIT_KEYS`].
    pub keyed: bool,
}

impl Jobhost {
    pub async fn sqlite(noop: &Path, record: &Record) -> Jobhost {
        let home = tempfile::tempdir().expect("temp dir");
        let db_url = format!("sqlite://{}/jobhost.db", home.path().display());
        Jobhost::open(home, db_url, None, &noop_manifest(noop), JOB, record).await
    }

    pub async fn postgres(noop: &Path, record: &Record) -> Jobhost {
        let home = tempfile::tempdir().expect("temp dir");
        let database = PgDatabase::create("jobhost_bench_").await;
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

    /// The noop job under claim limit `limit` (the limits drains), on a database of its own.
    pub async fn limited(
        noop: &Path,
        db: crate::report::Db,
        limit: Limit,
        record: &Record,
    ) -> Jobhost {
        let home = tempfile::tempdir().expect("temp dir");
        let manifest = format!("{}{}", noop_manifest(noop), limit.manifest_lines());
        let (db_url, database) = match db {
            crate::report::Db::Sqlite => (
                format!("sqlite://{}/jobhost.db", home.path().display()),
                None,
            ),
            crate::report::Db::Postgres => {
                let database = PgDatabase::create("jobhost_bench_").await;
                (database.url.clone(), Some(database))
            }
        };
        let mut env = Jobhost::open(home, db_url, database, &manifest, JOB, record).await;
        env.keyed = limit == Limit::KeyConcurrency;
        env
    }

    /// The fan-out's database (Postgres) and manifest: `family` with `children` children
    /// and `family-warm-up` with [`FANOUT_WARM_UP`], both of `family-child`.
    pub async fn family(family: &Path, children: usize, record: &Record) -> Jobhost {
        let home = tempfile::tempdir().expect("temp dir");
        let database = PgDatabase::create("jobhost_bench_").await;
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
    pub async fn open(
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
            .insert_token(&jobhost::store::NewTokenRow {
                id: &operator.id,
                secret_hash: &operator.secret_hash,
                tenant: None,
                label: "bench",
                read_only: false,
                expires_in_ms: None,
            })
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
            keyed: false,
        }
    }

    pub fn spawn_host(&self, workers: usize, db_url: &str) -> Proc {
        spawn_host(self.home.path(), &self.manifest, db_url, workers)
    }

    /// Starts or stops batch mode's hosts until `n` serve.
    pub async fn scale_to(&mut self, n: usize, record: &Record) {
        while self.hosts.len() > n {
            self.hosts.pop().expect("a host").stop(record).await;
        }
        while self.hosts.len() < n {
            let host = self.spawn_host(BATCH_WORKERS, &self.db_url);
            host.report("listening", START_TIMEOUT).await;
            self.hosts.push(host);
        }
    }

    pub async fn busy(&self) -> bool {
        on_pool!(self.store, p => sqlx::query_scalar(JOBHOST_BUSY).fetch_one(p).await)
            .expect("check for runs left")
    }

    /// Queues `batch` runs due in a day, makes them due at once, and returns how long the
    /// hosts took to finish them (where the clock starts: the doc at the top of serve.rs).
    pub async fn drain_batch(&self, batch: usize) -> Drain {
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
    pub async fn park(&self, batch: usize) {
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
    pub async fn release(&self, due: i64) -> u64 {
        on_pool!(self.store, p => sqlx::query(RELEASE_BATCH)
            .bind(due)
            .bind(JOB)
            .execute(p)
            .await
            .map(|r| r.rows_affected()))
        .expect("release the batch")
    }

    /// Empties the run tables, then queues `runs` runs due now, shaped as `shape` says.
    pub async fn queue_shaped(&self, runs: usize, shape: Shape) {
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
    pub async fn queue_backlog(&self, runs: usize) {
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
                if self.keyed {
                    // The keys a payload member with LIMIT_KEYS values would have given
                    // (the queued payload is one for all), then the table as autovacuum
                    // would leave it.
                    sqlx::query(sqlx::AssertSqlSafe(format!(
                        "UPDATE jobhost_runs SET limit_key = \
                         CAST(abs(hashtext(id)) % {LIMIT_KEYS} AS TEXT)"
                    )))
                    .execute(p)
                    .await
                    .expect("spread the keys");
                    sqlx::raw_sql("VACUUM jobhost_runs")
                        .execute(p)
                        .await
                        .expect("vacuum");
                }
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
                let queued = sqlx::query(QUEUE_SQLITE)
                    .bind(runs)
                    .bind(prefix)
                    .bind(JOB)
                    .bind(&self.tenant)
                    .bind(&self.payload)
                    .execute(p)
                    .await
                    .expect("queue the backlog")
                    .rows_affected();
                if self.keyed {
                    sqlx::query(sqlx::AssertSqlSafe(format!(
                        "UPDATE jobhost_runs SET limit_key = CAST(rowid % {LIMIT_KEYS} AS TEXT)"
                    )))
                    .execute(p)
                    .await
                    .expect("spread the keys");
                }
                queued
            }
        };
        assert_eq!(queued, runs as u64);
    }

    /// That all `runs` runs succeeded; returns the first claim (database clock).
    pub async fn check_backlog(&self, runs: usize) -> SystemTime {
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
    pub async fn drain_backlog(&self, runs: usize, hosts: usize, record: &Record) -> Drain {
        self.drain_shaped(runs, Shape::Kicked, hosts, record).await
    }

    /// [`Jobhost::drain_backlog`] of a backlog queued as `shape` says.
    pub async fn drain_shaped(
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

    /// Queues `runs` runs of the rated job (`Limit::Rate`), starts one host, lets it run
    /// `RATE_MEASURED` from the first start (and two seconds more), stops it, and reads
    /// the starts: as the claims entered them in the rate's window, and as the runs show
    /// them.
    pub async fn drain_rated(&self, runs: usize, record: &Record) -> RateDrain {
        self.queue_backlog(runs).await;
        match self.store.pool() {
            Pool::Postgres(p) => sqlx::raw_sql(KEEP_STARTS_POSTGRES)
                .execute(p)
                .await
                .map(drop),
            Pool::Sqlite(p) => sqlx::raw_sql(KEEP_STARTS_SQLITE).execute(p).await.map(drop),
        }
        .expect("keep the starts");
        let host = self.spawn_host(BACKLOG_WORKERS, &self.db_url);
        let claimed_at = || async {
            on_pool!(self.store, p => sqlx::query_scalar::<_, i64>(CLAIMED_AT).fetch_all(p).await)
                .expect("read the starts")
        };
        let waiting = Instant::now();
        while claimed_at().await.is_empty() {
            assert!(waiting.elapsed() < START_TIMEOUT, "no run started");
            tokio::time::sleep(CHECK_EVERY).await;
        }
        tokio::time::sleep(RATE_MEASURED + Duration::from_secs(2)).await;
        host.stop(record).await;
        let started: Vec<i64> =
            on_pool!(self.store, p => sqlx::query_scalar(STARTED_AT).fetch_all(p).await)
                .expect("read the runs' starts");
        RateDrain {
            claimed: RateFigures::of(&claimed_at().await),
            started: RateFigures::of(&started),
        }
    }

    /// A backlog drain of one host whose database connections go through `proxy`.
    pub async fn drain_counted(
        &self,
        runs: usize,
        proxy: &CountingProxy,
        record: &Record,
    ) -> Trips {
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

    /// Sends one kick (`url`, a host's `POST /jobs/<job>/kick`) as the operator; its answer,
    /// which must be an accepted kick's.
    async fn kick(&self, url: &str) -> Value {
        let response = self
            .http
            .post(url)
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("kick");
        assert_eq!(response.status().as_u16(), 202, "kick refused");
        response.json().await.expect("kick body")
    }

    /// Kicks one instance over the first host's HTTP API, `KICK_WARM_UP + n` times, one
    /// after the other, each waited for until its run succeeded.
    pub async fn kicks(&self, n: usize) -> Vec<Kick> {
        let listening = self.hosts[0].report("listening", START_TIMEOUT).await;
        let addr = listening.value["listening"].as_str().expect("an address");
        let url = format!("http://{addr}/jobs/{JOB}/kick?instance=latency");
        let mut kicks = Vec::with_capacity(n);
        for i in 0..KICK_WARM_UP + n {
            let sent = Instant::now();
            let body = self.kick(&url).await;
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
    pub async fn fan_out(&self, job: &str, children: usize, record: &Record) -> Fanout {
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
        let body = self.kick(&url).await;
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

    pub async fn stop(mut self, record: &Record) {
        self.scale_to(0, record).await;
        self.store.close().await;
        if let Some(database) = self.database {
            database.drop_now().await;
        }
    }
}

pub fn spawn_host(home: &Path, manifest: &Path, db_url: &str, workers: usize) -> Proc {
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
