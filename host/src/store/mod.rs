//! The persistence port: every row the host reads and writes, on SQLite or Postgres.
//!
//! One implementation serves both backends: the statements are written once (see
//! [`queries`]) and run on whichever pool the URL selected. This module only reads and
//! writes rows; what the rows mean — when to retry, who may take a lease — is decided by
//! `lease` and `runner`. Compound writes that must be atomic (finishing a run and
//! releasing its lease, say) are single methods here, each one transaction.

#[macro_use]
mod pool;
mod cancel_book;
pub mod claims;
mod connect;
mod error_class;
pub mod family;
mod files;
pub mod guest;
mod journals;
pub mod migrate;
mod orphans;
mod pg_statement;
mod pg_wire;
pub mod postgres_guest;
mod probe;
mod queries;
pub mod records;
mod resumable;
mod retention;
pub mod row;
pub mod scratch;
pub mod sqlite_guest;
mod tenants;
#[macro_use]
mod controls;

pub use cancel_book::CancelMark;
pub use claims::{
    AttemptEnding, AttemptTerms, ClaimRequest, Claimed, Recorded, Recording, RunChange,
};
pub use connect::claim_for_serving;
#[cfg(test)]
pub(crate) use connect::open_sqlite;
pub(crate) use connect::sqlite_options;
use controls::FilterBinds;
pub use controls::{CancelRequest, RetryRequest};
use error_class::describe_sqlite;
pub use error_class::{ErrorClass, describe};
pub use journals::{JournalRecord, JournalRow};
pub use orphans::OrphanEnding;
use pool::Exclusive;
pub use pool::{Backend, Pool};
pub use records::*;
pub use retention::Pruned;

use queries::{Dialect, Queries};
use sqlx::Connection;
use std::path::Path;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

pub(crate) static SQLITE_QUERIES: LazyLock<Queries> =
    LazyLock::new(|| Queries::render(&queries::SQLITE));
static POSTGRES_QUERIES: LazyLock<Queries> = LazyLock::new(|| Queries::render(&queries::POSTGRES));

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The text is a fixed description of the failure's kind, never the driver's message
    /// (which can quote a URL or a statement).
    #[error("database error: {}", describe(.0))]
    Database(#[from] sqlx::Error),
    #[error("unsupported database URL: use sqlite://PATH or postgres://USER@HOST/DB")]
    UnsupportedUrl,
    #[error("cannot create the database directory {path}: {source}")]
    CreateDir {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read migrations in {path}: {source}")]
    MigrationDir {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("invalid migration {0}: name files NNNN_name.sql, one version each")]
    MigrationName(String),
    #[error("{scope} migration {name} was changed after it was applied")]
    MigrationChanged { scope: &'static str, name: String },
    #[error("migration {name} failed: {}", describe(.source))]
    MigrationFailed { name: String, source: sqlx::Error },
    /// The database could not be opened; the text says why in words, naming the file or
    /// the server, user and database, never a password.
    #[error("{0}")]
    Open(String),
    /// A statement of the SQLite writer failed (its SQLite code only).
    #[error("database error: {}", describe_sqlite(*.code))]
    Sqlite { code: i32 },
    #[error("database error: the SQLite writer stopped")]
    WriterStopped,
    /// A batch could not reach the database; each of its items gets this.
    #[error("database error: the database could not be reached")]
    Unreachable,
    #[error("database error: an answer the host cannot read")]
    Unreadable,
}

impl StoreError {
    /// What the error means, by the code of the backend that returned it
    /// (`error_class`).
    pub fn class(&self) -> ErrorClass {
        match self {
            StoreError::Database(e) | StoreError::MigrationFailed { source: e, .. } => {
                error_class::of(e)
            }
            StoreError::Sqlite { code } => error_class::of_sqlite(*code),
            StoreError::WriterStopped | StoreError::Unreachable => ErrorClass::Unavailable,
            _ => ErrorClass::Other,
        }
    }

    /// Whether SQLite's write lock stayed held by another process for the whole busy
    /// timeout (on SQLite, one process serves a file; see `docs/architecture.md`).
    pub fn is_locked(&self) -> bool {
        self.class() == ErrorClass::Locked
    }

    /// Whether the database could not be reached or failed mid-statement (as opposed to a
    /// refused statement): the runner turns this into `driver_failed`.
    pub fn is_unavailable(&self) -> bool {
        self.class() == ErrorClass::Unavailable
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// How long SQLite waits for the write lock before giving up. Guest transactions are
/// bounded well below this (see `capability::db`), so a busy job delays host writes, it
/// does not fail them.
pub const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone)]
pub struct Store {
    /// Writes (and, on Postgres, everything).
    pool: Pool,
    /// Reads. On SQLite a pool of its own: the writer is a single connection, so the
    /// host's writers queue in the pool instead of sleeping in SQLite's busy handler,
    /// while reads go on in parallel (WAL).
    reader: Pool,
    /// On SQLite, lease checks answered on the calling thread (see `probe`).
    probe: Option<Arc<probe::SqliteProbe>>,
    /// On SQLite, the writer of claims and endings (see `claims::sqlite`).
    writer: Option<Arc<claims::sqlite::SqliteWriter>>,
    /// On SQLite, the cancels recorded but not yet written (see `cancel_book`).
    cancels: Option<Arc<cancel_book::CancelBook>>,
    backend: Backend,
    dialect: &'static Dialect,
    pub(crate) q: &'static Queries,
    url: String,
    /// On Postgres, the tenants with queued runs as last read, and when: the fair claim's
    /// tenants (`claims::QueuedTenants`).
    queued_tenants: Arc<claims::QueuedTenants>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the URL: it can carry a password.
        f.debug_struct("Store")
            .field("backend", &self.backend)
            .finish()
    }
}

impl Store {
    /// Opens (creating, for SQLite) the database and applies the host's migrations.
    pub async fn open(url: &str) -> Result<Store> {
        let backend = Backend::from_url(url).ok_or(StoreError::UnsupportedUrl)?;
        let cancels = match backend {
            Backend::Sqlite => Some(cancel_book::CancelBook::open(&connect::sqlite_path(url)?)?),
            Backend::Postgres => None,
        };
        let (pool, reader) = match &cancels {
            Some(book) => {
                let writer = Pool::Sqlite(connect::open_sqlite(url, 1, book).await?);
                (
                    writer,
                    Pool::Sqlite(connect::open_sqlite(url, 4, book).await?),
                )
            }
            None => {
                let pool = Pool::Postgres(connect::open_postgres(url).await?);
                (pool.clone(), pool)
            }
        };
        let (dialect, q) = match backend {
            Backend::Sqlite => (&queries::SQLITE, &*SQLITE_QUERIES),
            Backend::Postgres => (&queries::POSTGRES, &*POSTGRES_QUERIES),
        };
        let host = migrate::host_migrations(backend);
        let functions = migrate::host_repeatables(backend);
        migrate::apply(&pool, dialect, migrate::Scope::Host, &host, &functions).await?;
        let (probe, writer) = match &cancels {
            Some(book) => {
                let options = connect::sqlite_options(url)?;
                let path = options.get_filename();
                (
                    probe::SqliteProbe::open(path, book).map(Arc::new),
                    Some(Arc::new(claims::sqlite::SqliteWriter::open(path, q, book)?)),
                )
            }
            None => (None, None),
        };
        Ok(Store {
            pool,
            reader,
            probe,
            writer,
            cancels,
            backend,
            dialect,
            q,
            url: url.to_string(),
            queued_tenants: Arc::default(),
        })
    }

    /// Runs a compound write again when Postgres aborted it for a deadlock or a
    /// serialization failure: the transaction rolled back, so running it again is safe.
    async fn retrying<T, F, Fut>(&self, mut write: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        const TRIES: u32 = 5;
        let mut tries = 0;
        loop {
            match write().await {
                Err(e) if tries < TRIES && e.class() == ErrorClass::Conflict => {
                    tries += 1;
                    let pause = rand::random_range(1..=10 * u64::from(tries));
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
                result => return result,
            }
        }
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The SQLite store's cancel book.
    pub(crate) fn cancel_book(&self) -> &Arc<cancel_book::CancelBook> {
        self.cancels
            .as_ref()
            .expect("a SQLite store opens its cancel book")
    }

    fn writer(&self) -> &claims::sqlite::SqliteWriter {
        self.writer
            .as_deref()
            .expect("a SQLite store opens its writer")
    }

    /// The URL the store was opened with: for opening further connections (guest access,
    /// notifications), never for printing.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Applies the operator's migrations from `dir`; returns the names applied now.
    pub async fn migrate_operator(&self, dir: &Path) -> Result<Vec<String>> {
        let migrations = migrate::read_dir(dir)?;
        migrate::apply(
            &self.pool,
            self.dialect,
            migrate::Scope::Operator,
            &migrations,
            &[],
        )
        .await
    }

    /// Whether the operator's schema has a table or view named `name`.
    pub async fn table_exists(&self, name: &str) -> Result<bool> {
        let q = self.dialect.table_exists;
        let n: i64 =
            with_pool!(self.reader, p => sqlx::query_scalar(q).bind(name).fetch_one(p).await?);
        Ok(n > 0)
    }

    /// The database's clock, in milliseconds since the epoch: the one clock every host
    /// sharing the database agrees on.
    pub async fn now(&self) -> Result<i64> {
        let q = &self.q.now;
        Ok(with_pool!(self.reader, p => sqlx::query_scalar(q.as_str()).fetch_one(p).await?))
    }

    pub async fn close(&self) {
        with_pool!(self.pool, p => p.close().await);
        with_pool!(self.reader, p => p.close().await);
    }

    // ---- jobs -------------------------------------------------------------------------

    pub async fn upsert_job(&self, job: &JobUpsert<'_>) -> Result<JobRecord> {
        let q = &self.q.upsert_job;
        Ok(with_pool!(self.pool, p => sqlx::query_as(q.as_str())
            .bind(job.name)
            .bind(job.tenant)
            .bind(job.component_path)
            .bind(job.component_digest)
            .bind(job.spec)
            .bind(job.schedule)
            .bind(job.next_fire_at)
            .bind(i64::from(job.per_tenant))
            .bind(i64::from(job.sequential))
            .bind(job.max_per_tenant.map(i64::from))
            .bind(job.max_per_tenant.map(|_| job.over_limit.as_str()))
            .fetch_one(p)
            .await?))
    }

    pub async fn get_job(&self, name: &str) -> Result<Option<JobRecord>> {
        let q = &self.q.get_job;
        if let Some(found) = self.point_read(q, name, probe::job) {
            return Ok(found);
        }
        Ok(
            with_pool!(self.reader, p => sqlx::query_as(q.as_str()).bind(name).fetch_optional(p).await?),
        )
    }

    /// A point read on the calling thread, on SQLite (see `probe`); `None`: ask the pool.
    pub(crate) fn point_read<T>(
        &self,
        sql: &str,
        key: &str,
        row: fn(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Option<Option<T>> {
        self.probe.as_ref()?.point_read(sql, key, row)
    }

    pub async fn list_jobs(&self) -> Result<Vec<JobRecord>> {
        let q = &self.q.list_jobs;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str()).fetch_all(p).await?))
    }

    // ---- runs -------------------------------------------------------------------------

    pub async fn insert_run(&self, run: &NewRun) -> Result<RunRecord> {
        let q = &self.q.insert_run;
        Ok(
            with_pool!(self.pool, p => bind_new_run(sqlx::query_as(q.as_str()), run).fetch_one(p).await?),
        )
    }

    /// A kick's one transaction: while a run holds the instance's lease the kick folds
    /// into its pending flag (`None`); otherwise the run is queued under its job's
    /// `max_per_tenant`, and comes back skipped with code `tenant_limit` if it was over
    /// the cap with policy `skip`, reported in the same transaction. On SQLite the writer
    /// thread runs the same statements (`SqliteWriter::kick`).
    pub async fn kick_run(&self, run: &NewRun) -> Result<Option<RunRecord>> {
        let p = match &self.pool {
            Pool::Sqlite(_) => return self.writer().kick(run).await,
            Pool::Postgres(p) => p,
        };
        self.retrying(|| async {
            let q = self.q;
            let mut conn = Exclusive::acquire(p).await?;
            let mut tx = conn.begin_with(self.dialect.begin_write).await?;
            let pending = sqlx::query(q.set_pending.as_str())
                .bind(&run.job)
                .bind(&run.instance)
                .execute(&mut *tx)
                .await?
                .rows_affected()
                == 1;
            let queued = if pending {
                None
            } else {
                let queued = queue(&mut tx, q, q.queue_run.as_str(), run).await?;
                Some(queued.ok_or(StoreError::Unreadable)?)
            };
            tx.commit().await?;
            conn.release();
            Ok(queued)
        })
        .await
    }

    /// Milliseconds until the earliest queued run of `jobs` is due (negative if
    /// overdue), if one is queued.
    pub async fn next_due_in(&self, jobs: &[&str]) -> Result<Option<i64>> {
        let q = &self.q.next_due_in;
        let jobs = serde_json::to_string(jobs).expect("names serialise");
        Ok(
            with_pool!(self.reader, p => sqlx::query_scalar(q.as_str()).bind(&jobs).fetch_one(p).await?),
        )
    }

    pub async fn get_run(&self, id: &str) -> Result<Option<RunRecord>> {
        let q = &self.q.get_run;
        Ok(
            with_pool!(self.reader, p => sqlx::query_as(q.as_str()).bind(id).fetch_optional(p).await?),
        )
    }

    pub async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>> {
        let q = &self.q.list_runs;
        let (after_created, after_id) = match &filter.before {
            Some((created, id)) => (*created, id.as_str()),
            None => (i64::MAX, ""),
        };
        let filtered = FilterBinds::of(filter);
        Ok(
            with_pool!(self.reader, p => bind_filter!(sqlx::query_as(q.as_str()), filtered)
            .bind(after_created)
            .bind(after_id)
            .bind(filter.limit)
            .fetch_all(p)
            .await?),
        )
    }

    /// How many runs `filter` matches (its paging aside), counted up to `cap`.
    pub async fn count_matching_runs(&self, filter: &RunFilter, cap: i64) -> Result<i64> {
        let q = &self.q.count_matching_runs;
        let filtered = FilterBinds::of(filter);
        Ok(
            with_pool!(self.reader, p => bind_filter!(sqlx::query_scalar(q.as_str()), filtered)
            .bind(cap)
            .fetch_one(p)
            .await?),
        )
    }

    /// How many runs there are, by status and last failure code (empty for none).
    pub async fn count_runs(&self) -> Result<Vec<(String, String, i64)>> {
        let q = &self.q.count_runs;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str()).fetch_all(p).await?))
    }

    /// Ends a running run as `skipped` (its lease was held by another run).
    pub async fn skip_run(&self, id: &str, reason: &str) -> Result<bool> {
        let q = &self.q.skip_run;
        let done = with_pool!(self.pool, p => sqlx::query(q.as_str()).bind(id).bind(reason).execute(p).await?.rows_affected());
        Ok(done == 1)
    }

    /// The last `limit` attempts of a run, in order. A run that continues pass after pass
    /// has no bound on its attempts, so no reader takes them all.
    pub async fn list_attempts(&self, run_id: &str, limit: i64) -> Result<Vec<AttemptRecord>> {
        let q = &self.q.list_attempts;
        let mut attempts: Vec<AttemptRecord> = with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(run_id)
            .bind(limit)
            .fetch_all(p)
            .await?);
        attempts.reverse();
        Ok(attempts)
    }

    /// Due queued runs and the oldest one's wait (ms), by tenant and job.
    pub async fn queue_lag_by_tenant_and_job(&self) -> Result<Vec<(String, String, i64, i64)>> {
        let q = &self.q.queue_lag_by_tenant_and_job;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str()).fetch_all(p).await?))
    }

    /// What each tenant's attempts that ended in the last `window_ms` used.
    pub async fn tenant_usage(&self, window_ms: i64) -> Result<Vec<TenantUsage>> {
        let q = &self.q.tenant_usage;
        Ok(
            with_pool!(self.reader, p => sqlx::query_as(q.as_str()).bind(window_ms).fetch_all(p).await?),
        )
    }

    /// Runs waiting for a slot now; all slot waits and all guest defers of kept runs.
    pub async fn deferrals(&self) -> Result<(i64, i64, i64)> {
        let q = &self.q.deferrals;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str()).fetch_one(p).await?))
    }

    /// Waiting and overdue runs: how many are due now, and how late the oldest is (ms).
    pub async fn queue_lag(&self) -> Result<(i64, i64)> {
        let q = &self.q.queue_lag;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str()).fetch_one(p).await?))
    }

    /// Advances a job's schedule from `expected` to `next` and queues the runs it fired
    /// (none, one, or a fan-out's children) — all or nothing, and only if no other host
    /// advanced it first. A run whose id is queued already is left as it is.
    pub async fn fire_schedule(
        &self,
        job: &str,
        expected: Option<i64>,
        next: Option<i64>,
        runs: &[NewRun],
    ) -> Result<bool> {
        self.retrying(|| self.fire_schedule_once(job, expected, next, runs))
            .await
    }

    async fn fire_schedule_once(
        &self,
        job: &str,
        expected: Option<i64>,
        next: Option<i64>,
        runs: &[NewRun],
    ) -> Result<bool> {
        let q = self.q;
        with_pool!(self.pool, p => {
            let mut conn = Exclusive::acquire(p).await?;
            let mut tx = conn.begin_with(self.dialect.begin_write).await?;
            let advanced = sqlx::query(q.advance_schedule.as_str())
                .bind(job)
                .bind(expected)
                .bind(next)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if advanced != 1 {
                tx.rollback().await?;
                conn.release();
                return Ok(false);
            }
            insert_once(&mut tx, q, runs).await?;
            tx.commit().await?;
            conn.release();
            Ok(true)
        })
    }

    /// Registers `serving` (the names a serving host's manifest has) as served now, and
    /// restores any of them that was orphaned.
    pub async fn serve_jobs(&self, serving: &[String]) -> Result<()> {
        let q = &self.q.serve_jobs;
        let names = serde_json::to_string(serving).expect("names serialise");
        with_pool!(self.pool, p => {
            sqlx::query(q.as_str()).bind(&names).execute(p).await?;
        });
        Ok(())
    }

    /// Marks orphaned the jobs nothing registered for `grace`; how many it marked.
    pub async fn mark_orphans(&self, grace: Duration) -> Result<u64> {
        let q = &self.q.mark_orphans;
        let grace = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
        Ok(
            with_pool!(self.pool, p => sqlx::query(q.as_str()).bind(grace).execute(p).await?.rows_affected()),
        )
    }

    /// Queues the boot runs of `job`'s version `digest` if no registration of that
    /// version queued them yet (fleet-wide, in one transaction); whether it did.
    pub async fn boot_once(&self, job: &str, digest: &str, runs: &[NewRun]) -> Result<bool> {
        self.retrying(|| self.boot_once_tx(job, digest, runs)).await
    }

    async fn boot_once_tx(&self, job: &str, digest: &str, runs: &[NewRun]) -> Result<bool> {
        let q = self.q;
        with_pool!(self.pool, p => {
            let mut conn = Exclusive::acquire(p).await?;
            let mut tx = conn.begin_with(self.dialect.begin_write).await?;
            let taken = sqlx::query(q.take_boot.as_str())
                .bind(job)
                .bind(digest)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if taken == 1 {
                insert_once(&mut tx, q, runs).await?;
            }
            tx.commit().await?;
            conn.release();
            Ok(taken == 1)
        })
    }

    /// Queues runs whose ids may have been queued before, in one transaction, leaving
    /// those alone; says of each whether it was queued now.
    pub async fn insert_runs_once(&self, runs: &[NewRun]) -> Result<Vec<bool>> {
        self.retrying(|| self.insert_runs_once_tx(runs)).await
    }

    async fn insert_runs_once_tx(&self, runs: &[NewRun]) -> Result<Vec<bool>> {
        let q = self.q;
        with_pool!(self.pool, p => {
            let mut conn = Exclusive::acquire(p).await?;
            let mut tx = conn.begin_with(self.dialect.begin_write).await?;
            let inserted = insert_once(&mut tx, q, runs).await?;
            tx.commit().await?;
            conn.release();
            Ok(inserted)
        })
    }

    /// Runs marked running whose lease is gone or expired (not renewed by their host),
    /// untouched for at least `stale_ms`.
    pub async fn lost_runs(&self, stale_ms: i64) -> Result<Vec<LostRun>> {
        let q = &self.q.lost_runs;
        Ok(
            with_pool!(self.reader, p => sqlx::query_as(q.as_str()).bind(stale_ms).fetch_all(p).await?),
        )
    }

    /// The database's plan for [`Store::lost_runs`], a line a step: `EXPLAIN ANALYZE`'s
    /// (Postgres, with the rows each step read) or `EXPLAIN QUERY PLAN`'s (SQLite). Only
    /// for checking that surveillance reads no more than the runs hosts hold (a test).
    #[doc(hidden)]
    pub async fn lost_runs_plan(&self, stale_ms: i64) -> Result<Vec<String>> {
        let q = &self.q.lost_runs;
        Ok(match &self.reader {
            Pool::Postgres(p) => {
                sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                    "EXPLAIN (ANALYZE, COSTS OFF) {q}"
                )))
                .bind(stale_ms)
                .fetch_all(p)
                .await?
            }
            Pool::Sqlite(p) => {
                let steps: Vec<(i64, i64, i64, String)> =
                    sqlx::query_as(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {q}")))
                        .bind(stale_ms)
                        .fetch_all(p)
                        .await?;
                steps.into_iter().map(|(_, _, _, detail)| detail).collect()
            }
        })
    }

    /// How many reruns a crashed run (by its first run's id) already had.
    pub async fn count_reruns(&self, root: &str) -> Result<i64> {
        let q = &self.q.count_reruns;
        Ok(
            with_pool!(self.reader, p => sqlx::query_scalar(q.as_str()).bind(root).fetch_one(p).await?),
        )
    }

    /// Marks a lost run `crashed` (if it still is lost), frees its lease, and queues what
    /// the caller decided: a rerun, the follow-up of kicks it had pending, a report.
    pub async fn mark_crashed(&self, c: &Crash<'_>) -> Result<bool> {
        self.retrying(|| self.mark_crashed_once(c)).await
    }

    async fn mark_crashed_once(&self, c: &Crash<'_>) -> Result<bool> {
        let q = self.q;
        with_pool!(self.pool, p => {
            let mut conn = Exclusive::acquire(p).await?;
            let mut tx = conn.begin_with(self.dialect.begin_write).await?;
            // The lease before the run, as everywhere: one lock order, no deadlock.
            let lease: Option<(Option<String>, i64)> = sqlx::query_as(q.lease_holder.as_str())
                .bind(&c.run.job)
                .bind(&c.run.instance)
                .fetch_optional(&mut *tx)
                .await?;
            sqlx::query(q.record_crashed_attempt.as_str())
                .bind(&c.run.id)
                .execute(&mut *tx)
                .await?;
            let marked = sqlx::query(q.mark_crashed.as_str())
                .bind(&c.run.id)
                .bind(c.stale_ms)
                .bind(c.rerun.as_ref().map(|r| r.id.as_str()))
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if marked != 1 {
                tx.rollback().await?;
                conn.release();
                return Ok(false);
            }
            let pending = lease
                .filter(|(holder, _)| holder.as_deref() == Some(c.run.id.as_str()))
                .map(|(_, pending)| pending);
            sqlx::query(q.release_lost_lease.as_str())
                .bind(&c.run.job)
                .bind(&c.run.instance)
                .bind(&c.run.id)
                .execute(&mut *tx)
                .await?;
            let follow_up = c.follow_up.as_ref().filter(|_| pending == Some(1));
            for run in c.rerun.iter().chain(follow_up) {
                let _: RunRecord = bind_new_run(sqlx::query_as(q.insert_run.as_str()), run)
                    .fetch_one(&mut *tx)
                    .await?;
            }
            if let Some(rerun) = &c.rerun {
                // The rerun resumes the crashed run's pass: its counters, and the steps
                // that pass already recorded, which it does not do again. They move to it:
                // one ledger, kept by the newest run.
                for sql in [&q.resume_rerun, &q.move_ledger] {
                    sqlx::query(sql.as_str())
                        .bind(&rerun.id)
                        .bind(&c.run.id)
                        .execute(&mut *tx)
                        .await?;
                }
            }
            bind_report(sqlx::query(q.insert_report.as_str()), &c.report).execute(&mut *tx).await?;
            tx.commit().await?;
            conn.release();
            Ok(true)
        })
    }

    /// Records that a job's schedule was reported missed, once: only if the last report
    /// is still `previous`.
    pub async fn mark_missed(
        &self,
        job: &str,
        previous: Option<i64>,
        report: &NewReport,
    ) -> Result<bool> {
        self.retrying(|| self.mark_missed_once(job, previous, report))
            .await
    }

    async fn mark_missed_once(
        &self,
        job: &str,
        previous: Option<i64>,
        report: &NewReport,
    ) -> Result<bool> {
        let q = self.q;
        with_pool!(self.pool, p => {
            let mut conn = Exclusive::acquire(p).await?;
            let mut tx = conn.begin_with(self.dialect.begin_write).await?;
            let marked = sqlx::query(q.mark_missed.as_str())
                .bind(job)
                .bind(previous)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if marked != 1 {
                tx.rollback().await?;
                conn.release();
                return Ok(false);
            }
            bind_report(sqlx::query(q.insert_report.as_str()), report).execute(&mut *tx).await?;
            tx.commit().await?;
            conn.release();
            Ok(true)
        })
    }

    // ---- leases -----------------------------------------------------------------------

    /// Takes the lease if it is free or expired, at the next generation (for leases that
    /// guard no attempt, such as surveillance's; attempts use `start_attempt`).
    pub async fn acquire_lease(&self, a: &LeaseRequest<'_>) -> Result<Option<Lease>> {
        let q = &self.q.acquire_lease;
        let row: Option<LeaseRecord> = with_pool!(self.pool, p => sqlx::query_as(q.as_str())
            .bind(a.job)
            .bind(a.instance)
            .bind(a.holder)
            .bind(a.deadline_ms)
            .bind(a.expires_ms)
            .fetch_optional(p)
            .await?);
        Ok(row.map(LeaseRecord::into_lease))
    }

    /// Takes the turn of the fleet chore `chore` for `holder` unless a host took it less
    /// than `hold_ms` ago (see `lease::fleet_turn`).
    pub async fn take_turn(&self, chore: &str, holder: &str, hold_ms: i64) -> Result<bool> {
        let q = &self.q.take_turn;
        let row: Option<LeaseRecord> = with_pool!(self.pool, p => sqlx::query_as(q.as_str())
            .bind(chore)
            .bind(holder)
            .bind(hold_ms)
            .fetch_optional(p)
            .await?);
        Ok(row.is_some())
    }

    /// Sets the pending flag of a lease that is held and unexpired.
    pub async fn set_pending(&self, job: &str, instance: &str) -> Result<bool> {
        let q = &self.q.set_pending;
        let n = with_pool!(self.pool, p => sqlx::query(q.as_str()).bind(job).bind(instance).execute(p).await?.rows_affected());
        Ok(n == 1)
    }

    pub async fn get_lease(&self, job: &str, instance: &str) -> Result<Option<LeaseRecord>> {
        let q = &self.q.get_lease;
        Ok(
            with_pool!(self.reader, p => sqlx::query_as(q.as_str()).bind(job).bind(instance).fetch_optional(p).await?),
        )
    }

    /// The lease of every job's instance `instance` (listings of jobs show the default
    /// one's).
    pub async fn instance_leases(&self, instance: &str) -> Result<Vec<LeaseRecord>> {
        let q = &self.q.instance_leases;
        Ok(
            with_pool!(self.reader, p => sqlx::query_as(q.as_str()).bind(instance).fetch_all(p).await?),
        )
    }

    /// The fence statement for a guest write transaction: it returns a row only while the
    /// lease is held at `generation` and before its deadline (database clock). On Postgres
    /// it also locks the lease row until the transaction ends.
    pub fn fence_sql(&self) -> &'static str {
        self.q.fence.as_str()
    }

    // ---- reports ----------------------------------------------------------------------

    pub async fn insert_report(&self, report: &NewReport) -> Result<()> {
        let q = &self.q.insert_report;
        with_pool!(self.pool, p => bind_report(sqlx::query(q.as_str()), report).execute(p).await.map(drop)?);
        Ok(())
    }

    /// Records `report` unless the outbox already holds the same one (kind, job and
    /// body); whether it was recorded now.
    pub async fn insert_report_once(&self, report: &NewReport) -> Result<bool> {
        let q = &self.q.insert_report_once;
        let inserted = with_pool!(self.pool, p => bind_report(sqlx::query(q.as_str()), report).execute(p).await?.rows_affected());
        Ok(inserted > 0)
    }

    /// Takes up to `limit` undelivered reports for delivery, hiding them from other hosts
    /// for `claim_ms`.
    pub async fn claim_reports(&self, limit: i64, claim_ms: i64) -> Result<Vec<ReportRecord>> {
        let q = &self.q.claim_reports;
        Ok(
            with_pool!(self.pool, p => sqlx::query_as(q.as_str()).bind(limit).bind(claim_ms).fetch_all(p).await?),
        )
    }

    pub async fn report_logged(&self, id: i64) -> Result<()> {
        let q = &self.q.report_logged;
        with_pool!(self.pool, p => sqlx::query(q.as_str()).bind(id).execute(p).await.map(drop)?);
        Ok(())
    }

    /// Marks a report delivered, counting `attempts` webhook attempts it took.
    pub async fn report_delivered(&self, id: i64, attempts: i64) -> Result<()> {
        let q = &self.q.report_delivered;
        with_pool!(self.pool, p => sqlx::query(q.as_str()).bind(id).bind(attempts).execute(p).await.map(drop)?);
        Ok(())
    }

    /// Counts a failed webhook attempt and schedules the next after `delay_ms`.
    pub async fn report_retry(&self, id: i64, delay_ms: i64) -> Result<()> {
        let q = &self.q.report_retry;
        with_pool!(self.pool, p => sqlx::query(q.as_str()).bind(id).bind(delay_ms).execute(p).await.map(drop)?);
        Ok(())
    }

    /// The newest reports, of one job and of one tenant's runs and jobs if given.
    pub async fn list_reports(
        &self,
        job: Option<&str>,
        tenant: Option<&str>,
        limit: i64,
    ) -> Result<Vec<ReportRecord>> {
        let q = &self.q.list_reports;
        Ok(
            with_pool!(self.reader, p => sqlx::query_as(q.as_str()).bind(job).bind(limit).bind(tenant).fetch_all(p).await?),
        )
    }
}

/// Queues `runs` with `insert_run_once` in a transaction, leaving ids already queued
/// alone; whether each was queued now (or dropped by its job's `max_per_tenant`).
/// One loop for every statement that queues runs with derived ids (schedule fires, boot
/// runs, events).
async fn insert_once<DB>(
    tx: &mut sqlx::Transaction<'_, DB>,
    q: &'static Queries,
    runs: &[NewRun],
) -> Result<Vec<bool>>
where
    DB: sqlx::Database,
    for<'e> &'e mut DB::Connection: sqlx::Executor<'e, Database = DB>,
    RunRecord: for<'r> sqlx::FromRow<'r, DB::Row> + Send + Unpin,
    <DB as sqlx::Database>::Arguments: sqlx::IntoArguments<DB>,
    for<'a> &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> Option<&'a str>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    Option<i64>: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    Option<String>: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    i64: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    let mut inserted = Vec::with_capacity(runs.len());
    for run in runs {
        let queued = queue(tx, q, q.insert_run_once.as_str(), run).await?;
        inserted.push(queued.is_some());
    }
    Ok(inserted)
}

/// Queues one run with `sql` (`queue_run` or `insert_run_once`) and, if its job's
/// `max_per_tenant` dropped it, writes its report in the same transaction.
async fn queue<DB>(
    tx: &mut sqlx::Transaction<'_, DB>,
    q: &'static Queries,
    sql: &'static str,
    run: &NewRun,
) -> Result<Option<RunRecord>>
where
    DB: sqlx::Database,
    for<'e> &'e mut DB::Connection: sqlx::Executor<'e, Database = DB>,
    RunRecord: for<'r> sqlx::FromRow<'r, DB::Row> + Send + Unpin,
    <DB as sqlx::Database>::Arguments: sqlx::IntoArguments<DB>,
    for<'a> &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> Option<&'a str>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    Option<i64>: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    Option<String>: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    i64: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    let row: Option<RunRecord> = bind_new_run(sqlx::query_as(sql), run)
        .fetch_optional(&mut **tx)
        .await?;
    if let Some(dropped) = row.as_ref().filter(|r| r.dropped_by_limit()) {
        let report = NewReport::about_run(
            ReportKind::Dropped,
            dropped,
            crate::rules::failure::FailureCode::TenantLimit,
        );
        bind_report(sqlx::query(q.insert_report.as_str()), &report)
            .execute(&mut **tx)
            .await?;
    }
    Ok(row)
}

pub(super) fn bind_new_run<'q, DB, O>(
    query: sqlx::query::QueryAs<'q, DB, O, <DB as sqlx::Database>::Arguments>,
    run: &'q NewRun,
) -> sqlx::query::QueryAs<'q, DB, O, <DB as sqlx::Database>::Arguments>
where
    DB: sqlx::Database,
    for<'a> &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> Option<&'a str>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    Option<i64>: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    Option<String>: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    i64: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    query
        .bind(run.id.as_str())
        .bind(run.job.as_str())
        .bind(run.instance.as_str())
        .bind(run.tenant.as_str())
        .bind(run.origin.as_str())
        .bind(run.payload.as_str())
        .bind(run.cursor.as_deref())
        .bind(run.component_digest.as_deref())
        .bind(run.scheduled_for)
        .bind(run.rerun_of.as_deref())
        .bind(run.delay_ms)
        .bind(run.trace_parent.map(|t| t.to_string()))
}

pub(super) fn bind_report<'q, DB>(
    query: sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments>,
    report: &'q NewReport,
) -> sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments>
where
    DB: sqlx::Database,
    for<'a> &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> Option<&'a str>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    query
        .bind(report.kind.as_str())
        .bind(report.job.as_str())
        .bind(report.run_id.as_deref())
        .bind(report.code.as_deref())
        .bind(report.body.as_str())
}
