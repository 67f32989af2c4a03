//! The runs' rows: queueing (with its job's `max_per_tenant`), listings, schedule fires,
//! boot runs, and the lost runs surveillance marks crashed.

use super::controls::FilterBinds;
use super::error::Result;
use super::handle::Store;
use super::pool::{Exclusive, Pool};
use super::queries::Queries;
use super::records::*;
use super::reports::{bind_report, report_if_dropped};
use sqlx::Connection;
use std::time::Duration;

impl Store {
    /// Writes that guests started (`runs::runner::starts`): a run no longer running that
    /// attempt is left as it is.
    pub async fn mark_guests_started(&self, starts: &[GuestStart]) -> Result<()> {
        let triples: Vec<(&str, i64, i64)> = starts
            .iter()
            .map(|s| (s.run_id.as_str(), s.generation, s.at))
            .collect();
        let triples = serde_json::to_string(&triples).expect("starts serialise");
        let q = &self.q.mark_guests_started;
        with_pool!(self.pool, p => {
            sqlx::query(q.as_str()).bind(&triples).execute(p).await?;
        });
        Ok(())
    }

    pub async fn insert_run(&self, run: &NewRun) -> Result<RunRecord> {
        let q = &self.q.insert_run;
        Ok(
            with_pool!(self.pool, p => bind_new_run(sqlx::query_as(q.as_str()), run).fetch_one(p).await?),
        )
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

    /// Of queued run `id`: whether it waits for a `max_per_tenant` slot, and which claim
    /// limit holds it back now (`concurrency`, `rate`, `key`), if any; `None` if it is not
    /// queued.
    pub async fn run_hold(&self, id: &str) -> Result<Option<(bool, Option<String>)>> {
        let q = &self.q.run_hold;
        let row: Option<(i64, Option<String>)> = with_pool!(self.reader, p => sqlx::query_as(q.as_str()).bind(id).fetch_optional(p).await?);
        Ok(row.map(|(waiting, held)| (waiting != 0, held)))
    }

    /// Queued runs due after now, soonest first: a tenant's only, if given.
    pub async fn future_runs(&self, tenant: Option<&str>, limit: i64) -> Result<Vec<RunRecord>> {
        let q = &self.q.future_runs;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(tenant)
            .bind(limit)
            .fetch_all(p)
            .await?))
    }

    pub async fn get_run(&self, id: &str) -> Result<Option<RunRecord>> {
        let q = &self.q.get_run;
        Ok(
            with_pool!(self.reader, p => sqlx::query_as(q.as_str()).bind(id).fetch_optional(p).await?),
        )
    }

    /// The attempts a pass of run `id` may use that its start asked for, if any.
    pub async fn run_max_attempts(&self, id: &str) -> Result<Option<i64>> {
        let q = &self.q.max_attempts;
        let read: Option<Option<i64>> = self
            .retrying(|| async {
                Ok(with_pool!(self.reader, p => sqlx::query_scalar(q.as_str())
                    .bind(id).fetch_optional(p).await?))
            })
            .await?;
        Ok(read.flatten())
    }

    /// The status of each of `ids` that exists, in one statement: the runs clients wait
    /// for, however many clients wait.
    pub async fn run_states(&self, ids: &[String]) -> Result<Vec<(String, String)>> {
        let q = &self.q.run_states;
        let ids = serde_json::to_string(ids).expect("ids serialise");
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str()).bind(&ids).fetch_all(p).await?))
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

    /// Deletes the row of a kick claimed while its instance's lease was held, once the
    /// kick is folded into the holder's pending flag; `false` if it stays (a guest's pass
    /// started it, or it is no longer running).
    pub async fn forget_folded_kick(&self, id: &str) -> Result<bool> {
        let q = &self.q.forget_folded_kick;
        let done = with_pool!(self.pool, p => sqlx::query(q.as_str()).bind(id).execute(p).await?.rows_affected());
        Ok(done == 1)
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

    /// Due runs a claim limit holds back, by job and limit (`concurrency`, `rate`, `key`),
    /// among the [`HELD_COUNTED`] oldest due runs of jobs with limits: each is checked
    /// against its limit, so the count is bounded, not the backlog.
    pub async fn held_runs(&self) -> Result<Vec<(String, String, i64)>> {
        let q = &self.q.held_runs;
        Ok(
            with_pool!(self.reader, p => sqlx::query_as(q.as_str()).bind(HELD_COUNTED).fetch_all(p).await?),
        )
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
                for sql in [&q.resume_rerun, &q.move_ledger, &q.move_signals] {
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
pub(super) async fn queue<DB>(
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
    report_if_dropped::<DB>(&mut **tx, q, row.as_ref()).await?;
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

/// The most due runs of limited jobs [`Store::held_runs`] checks.
pub const HELD_COUNTED: i64 = 10_000;
