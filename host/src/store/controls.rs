//! The operator's controls as rows: pauses, a fenced cancel and a retry, each one
//! transaction. Who may do what to which runs, and what follows, is decided in
//! `crate::runs::controls`; this module only reads and writes.

use super::cancel_book::CancelMark;
use super::error::Result;
use super::handle::Store;
use super::pool::Exclusive;
use super::records::{FileRecord, NewReport, NewRun, PauseRecord, RunFilter, RunRecord};
use super::reports::bind_report;
use super::runs::bind_new_run;
use sqlx::{AssertSqlSafe, Connection};

/// SQLite's `SQLITE_BUSY`: a write lock not had in time.
const SQLITE_BUSY: i32 = 5;

/// The run filter's parameters `$1`..`$9` (`queries::RUN_FILTER`), in order.
pub(crate) struct FilterBinds {
    pub job: Option<String>,
    pub statuses: Option<String>,
    pub since: Option<i64>,
    pub until: Option<i64>,
    pub tenant: Option<String>,
    pub code: Option<String>,
    pub instance: Option<String>,
    pub text: Option<String>,
    pub unretried: i64,
}

impl FilterBinds {
    pub(crate) fn of(filter: &RunFilter) -> FilterBinds {
        let statuses = (!filter.statuses.is_empty()).then(|| {
            let names: Vec<&str> = filter.statuses.iter().map(|s| s.as_str()).collect();
            serde_json::to_string(&names).expect("statuses serialise")
        });
        FilterBinds {
            job: filter.job.clone(),
            statuses,
            since: filter.since,
            until: filter.until,
            tenant: filter.tenant.clone(),
            code: filter.code.clone(),
            instance: filter.instance.clone(),
            // SQLite's `lower` changes ASCII letters only: there, an error's other capitals
            // match only themselves.
            text: filter.error_text.as_deref().map(str::to_lowercase),
            unretried: i64::from(filter.unretried),
        }
    }
}

/// Binds a [`FilterBinds`] as `$1`..`$9` of `query`.
macro_rules! bind_filter {
    ($query:expr, $f:expr) => {
        $query
            .bind($f.job.as_deref())
            .bind($f.statuses.as_deref())
            .bind($f.since)
            .bind($f.until)
            .bind($f.tenant.as_deref())
            .bind($f.code.as_deref())
            .bind($f.instance.as_deref())
            .bind($f.text.as_deref())
            .bind($f.unretried)
    };
}

/// A cancel of `run` (as read before), if it is still queued or running and, with
/// `tenant`, that tenant's: it ends with `status` and `code`.
pub struct CancelRequest<'a> {
    pub run: &'a RunRecord,
    pub tenant: Option<&'a str>,
    pub status: &'static str,
    pub code: &'static str,
    /// Queued only if the run's lease had kicks pending.
    pub follow_up: NewRun,
    pub report: NewReport,
}

/// A retry of `original`, if it ended failed, crashed or cancelled, was not retried
/// before and, with `tenant`, is that tenant's.
pub struct RetryRequest<'a> {
    pub original: &'a RunRecord,
    pub tenant: Option<&'a str>,
    pub run: NewRun,
}

impl Store {
    /// The pauses, and the tenants that are disabled.
    pub async fn pause_state(&self) -> Result<(Vec<PauseRecord>, Vec<String>)> {
        let q = &self.q.list_pauses;
        let pauses = with_pool!(self.reader, p => sqlx::query_as(q.as_str()).fetch_all(p).await?);
        Ok((pauses, self.disabled_tenants().await?))
    }

    /// Pauses `scope`/`name`; `false` if it was paused already.
    pub async fn pause(&self, scope: &str, name: &str) -> Result<bool> {
        let q = &self.q.pause;
        let added = with_pool!(self.pool, p => sqlx::query(q.as_str())
            .bind(scope).bind(name).execute(p).await?.rows_affected());
        Ok(added == 1)
    }

    /// Resumes `scope`/`name`; `false` if it was not paused.
    pub async fn unpause(&self, scope: &str, name: &str) -> Result<bool> {
        let q = &self.q.unpause;
        let removed = with_pool!(self.pool, p => sqlx::query(q.as_str())
            .bind(scope).bind(name).execute(p).await?.rows_affected());
        Ok(removed == 1)
    }

    /// Runs created since `since` that ended, as (bucket start, status, count), the
    /// buckets `bucket_ms` wide by when the runs ended.
    pub async fn ended_by_bucket(
        &self,
        since: i64,
        bucket_ms: i64,
        tenant: Option<&str>,
    ) -> Result<Vec<(i64, String, i64)>> {
        let q = &self.q.ended_by_bucket;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(since).bind(bucket_ms).bind(tenant).fetch_all(p).await?))
    }

    /// Failed and crashed runs created since `since`, as (bucket start, code, count), the
    /// buckets `bucket_ms` wide by when the runs ended.
    pub async fn failures_by_bucket(
        &self,
        since: i64,
        bucket_ms: i64,
        tenant: Option<&str>,
    ) -> Result<Vec<(i64, String, i64)>> {
        let q = &self.q.failures_by_bucket;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(since).bind(bucket_ms).bind(tenant).fetch_all(p).await?))
    }

    /// Failed and crashed runs created since `since`, as (job, code, count, last ended).
    pub async fn failures_by_job(
        &self,
        since: i64,
        tenant: Option<&str>,
    ) -> Result<Vec<(String, String, i64, i64)>> {
        let q = &self.q.failures_by_job;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(since).bind(tenant).fetch_all(p).await?))
    }

    /// The newest `limit` ended runs of `job` created since `since`, as (ended at,
    /// status, duration in ms).
    pub async fn job_endings(
        &self,
        job: &str,
        since: i64,
        tenant: Option<&str>,
        limit: i64,
    ) -> Result<Vec<(i64, String, Option<i64>)>> {
        let q = &self.q.job_endings;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(job).bind(since).bind(tenant).bind(limit).fetch_all(p).await?))
    }

    /// Queued runs, running runs, the newest run's creation time, and when a live log
    /// last changed.
    pub async fn live_counts(&self) -> Result<(i64, i64, i64, i64)> {
        let q = &self.q.live_counts;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str()).fetch_one(p).await?))
    }

    /// Up to `limit` objects that run `id` attached, the latest first.
    pub async fn run_files(&self, id: &str, limit: i64) -> Result<Vec<FileRecord>> {
        let q = &self.q.run_files;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(id).bind(limit).fetch_all(p).await?))
    }

    /// Records cancels in the cancel book, on SQLite: from then on no write of their runs'
    /// attempts commits (`store::cancel_book`). Nothing on Postgres, whose cancel
    /// transaction never waits for a guest's.
    pub async fn record_cancels(&self, marks: Vec<CancelMark>) -> Result<()> {
        match &self.cancels {
            Some(book) if !marks.is_empty() => book.mark(marks).await,
            _ => Ok(()),
        }
    }

    /// The cancels recorded in the cancel book and not yet written (none on Postgres).
    pub async fn recorded_cancels(&self) -> Result<Vec<CancelMark>> {
        match &self.cancels {
            Some(book) => book.marks().await,
            None => Ok(Vec::new()),
        }
    }

    /// Forgets the recorded cancels of `runs`: written, or their runs ended before them.
    pub async fn forget_cancels(&self, runs: Vec<String>) -> Result<()> {
        match &self.cancels {
            Some(book) if !runs.is_empty() => book.clear(runs).await,
            _ => Ok(()),
        }
    }

    /// Whether a cancel is first recorded in the cancel book (SQLite).
    pub fn records_cancels(&self) -> bool {
        self.cancels.is_some()
    }

    /// The runs among `ids` that are cancelled, with their codes.
    pub async fn cancelled_among(&self, ids: &[String]) -> Result<Vec<(String, Option<String>)>> {
        let q = &self.q.cancelled_among;
        let ids = serde_json::to_string(ids).expect("ids serialise");
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str()).bind(&ids).fetch_all(p).await?))
    }

    /// Cancels queued or running runs, fenced, in one transaction: for each, its lease (if
    /// it holds it) is released at the next generation with its deadline now — so no write
    /// of an attempt still running commits afterwards, on any host —, a running attempt's
    /// row is recorded, the run ends `cancelled`, the follow-up of kicks it had pending is
    /// queued and the report written. Per request, the run as cancelled, or `None` if it was
    /// not cancellable. Leases are locked in key order, as every transaction locks them.
    pub async fn cancel_runs(&self, batch: &[CancelRequest<'_>]) -> Result<Vec<Option<RunRecord>>> {
        self.retrying(|| self.cancel_runs_once(batch, None)).await
    }

    /// [`Store::cancel_runs`] if it gets the write lock within `wait`, on SQLite (the
    /// pool's connection and then SQLite's lock, each waited for no longer); `None` if it
    /// did not, with nothing written. On Postgres, as `cancel_runs`.
    pub async fn cancel_runs_within(
        &self,
        batch: &[CancelRequest<'_>],
        wait: std::time::Duration,
    ) -> Result<Option<Vec<Option<RunRecord>>>> {
        let written = self
            .retrying(|| self.cancel_runs_once(batch, Some(wait)))
            .await;
        match written {
            Ok(answers) => Ok(Some(answers)),
            Err(e)
                if self.records_cancels()
                    && e.class() == super::error_class::ErrorClass::Locked =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    async fn cancel_runs_once(
        &self,
        batch: &[CancelRequest<'_>],
        wait: Option<std::time::Duration>,
    ) -> Result<Vec<Option<RunRecord>>> {
        let q = self.q;
        let mut order: Vec<usize> = (0..batch.len()).collect();
        order.sort_by(|&a, &b| {
            let key = |c: &CancelRequest<'_>| {
                (c.run.job.clone(), c.run.instance.clone(), c.run.id.clone())
            };
            key(&batch[a]).cmp(&key(&batch[b]))
        });
        let mut answers: Vec<Option<RunRecord>> = vec![None; batch.len()];
        let started = tokio::time::Instant::now();
        let bounded = wait.filter(|_| self.records_cancels());
        with_pool!(self.pool, p => {
            let mut conn = match bounded {
                Some(wait) => tokio::time::timeout(wait, Exclusive::acquire(p))
                    .await
                    .map_err(|_| super::error::StoreError::Sqlite { code: SQLITE_BUSY })??,
                None => Exclusive::acquire(p).await?,
            };
            // SQLite waits for its lock in its busy handler, on the connection's thread:
            // bounded there, a cancel that did not get it leaves nothing behind. (Dropped
            // unreleased, the connection is closed, its default timeout with it.)
            if let Some(wait) = bounded {
                let left = wait.saturating_sub(started.elapsed()).as_millis().max(1);
                sqlx::query(AssertSqlSafe(format!("PRAGMA busy_timeout = {left}")))
                    .execute(&mut *conn)
                    .await?;
            }
            let mut tx = conn.begin_with(self.dialect.begin_write).await?;
            for &i in &order {
                let (c, run) = (&batch[i], batch[i].run);
                let lease: Option<(Option<String>, i64)> = sqlx::query_as(q.lease_holder.as_str())
                    .bind(&run.job)
                    .bind(&run.instance)
                    .fetch_optional(&mut *tx)
                    .await?;
                sqlx::query(q.record_cancelled_attempt.as_str())
                    .bind(&run.id)
                    .bind(c.tenant)
                    .bind(c.code)
                    .execute(&mut *tx)
                    .await?;
                let cancelled: Option<RunRecord> = sqlx::query_as(q.cancel_run.as_str())
                    .bind(&run.id)
                    .bind(c.tenant)
                    .bind(c.status)
                    .bind(c.code)
                    .fetch_optional(&mut *tx)
                    .await?;
                if cancelled.is_none() {
                    continue;
                }
                let pending = lease
                    .filter(|(holder, _)| holder.as_deref() == Some(run.id.as_str()))
                    .map(|(_, pending)| pending);
                if pending.is_some() {
                    sqlx::query(q.fence_off_lease.as_str())
                        .bind(&run.job)
                        .bind(&run.instance)
                        .bind(&run.id)
                        .execute(&mut *tx)
                        .await?;
                }
                if pending == Some(1) {
                    let _: RunRecord = bind_new_run(sqlx::query_as(q.insert_run.as_str()), &c.follow_up)
                        .fetch_one(&mut *tx)
                        .await?;
                }
                bind_report(sqlx::query(q.insert_report.as_str()), &c.report).execute(&mut *tx).await?;
                answers[i] = cancelled;
            }
            tx.commit().await?;
            if bounded.is_some() {
                let default = super::pool::SQLITE_BUSY_TIMEOUT.as_millis();
                sqlx::query(AssertSqlSafe(format!("PRAGMA busy_timeout = {default}")))
                    .execute(&mut *conn)
                    .await?;
            }
            conn.release();
            Ok(answers)
        })
    }

    /// Queues retries of ended runs, in one transaction, each once: the original names
    /// it, and it resumes the original's last committed pass (pass, counters, cursor, and
    /// that pass's ledger, which moves to it). Per request, the retry, or `None` if the
    /// original was not retryable or retried already.
    pub async fn retry_runs(&self, batch: &[RetryRequest<'_>]) -> Result<Vec<Option<RunRecord>>> {
        self.retrying(|| self.retry_runs_once(batch)).await
    }

    async fn retry_runs_once(&self, batch: &[RetryRequest<'_>]) -> Result<Vec<Option<RunRecord>>> {
        let q = self.q;
        let mut answers = Vec::with_capacity(batch.len());
        with_pool!(self.pool, p => {
            let mut conn = Exclusive::acquire(p).await?;
            let mut tx = conn.begin_with(self.dialect.begin_write).await?;
            for r in batch {
                let marked = sqlx::query(q.mark_retried.as_str())
                    .bind(&r.original.id)
                    .bind(&r.run.id)
                    .bind(r.tenant)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if marked != 1 {
                    answers.push(None);
                    continue;
                }
                let _: RunRecord = bind_new_run(sqlx::query_as(q.insert_run.as_str()), &r.run)
                    .fetch_one(&mut *tx)
                    .await?;
                let retry: RunRecord = sqlx::query_as(q.resume_retry.as_str())
                    .bind(&r.run.id)
                    .bind(&r.original.id)
                    .fetch_one(&mut *tx)
                    .await?;
                for sql in [&q.move_ledger, &q.move_signals] {
                    sqlx::query(sql.as_str())
                        .bind(&r.run.id)
                        .bind(&r.original.id)
                        .execute(&mut *tx)
                        .await?;
                }
                answers.push(Some(retry));
            }
            tx.commit().await?;
            conn.release();
            Ok(answers)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_text_is_searched_in_lower_case() {
        let filter = RunFilter {
            error_text: Some("Row 3 %_".into()),
            ..Default::default()
        };
        assert_eq!(FilterBinds::of(&filter).text.as_deref(), Some("row 3 %_"));
    }
}
