//! The rows of orphaned jobs' waiting runs: which there are, and ending them. That they
//! end, and how, is `crate::service::registration`'s; this module only reads and writes.

use super::error::Result;
use super::handle::Store;
use super::pool::Exclusive;
use super::records::{NewReport, RunRecord};
use super::reports::bind_report;
use sqlx::Connection;

/// An end of a run waiting in an orphaned job's queue, with `status` and `code`.
pub struct OrphanEnding<'a> {
    pub run: &'a RunRecord,
    pub status: &'static str,
    pub code: &'static str,
    pub report: NewReport,
}

impl Store {
    /// Up to `limit` runs waiting in the queues of orphaned jobs (queued, retrying,
    /// delayed, waiting for children; never a `host run`'s), in lease key order.
    pub async fn orphaned_waiting_runs(&self, limit: i64) -> Result<Vec<RunRecord>> {
        let q = &self.q.orphaned_waiting_runs;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(limit).fetch_all(p).await?))
    }

    /// Ends `batch`'s runs in one transaction, each only while it still waits and its job
    /// is still orphaned: a lease it holds parked is released (at the next generation, as
    /// a cancel's), and its report written. Per request, the run as ended, or `None`.
    pub async fn end_orphaned_runs(
        &self,
        batch: &[OrphanEnding<'_>],
    ) -> Result<Vec<Option<RunRecord>>> {
        self.retrying(|| self.end_orphaned_runs_once(batch)).await
    }

    async fn end_orphaned_runs_once(
        &self,
        batch: &[OrphanEnding<'_>],
    ) -> Result<Vec<Option<RunRecord>>> {
        let q = self.q;
        let mut answers = Vec::with_capacity(batch.len());
        with_pool!(self.pool, p => {
            let mut conn = Exclusive::acquire(p).await?;
            let mut tx = conn.begin_with(self.dialect.begin_write).await?;
            for e in batch {
                let run = e.run;
                let lease: Option<(Option<String>, i64)> = sqlx::query_as(q.lease_holder.as_str())
                    .bind(&run.job)
                    .bind(&run.instance)
                    .fetch_optional(&mut *tx)
                    .await?;
                let ended: Option<RunRecord> = sqlx::query_as(q.end_orphaned_run.as_str())
                    .bind(&run.id)
                    .bind(e.status)
                    .bind(e.code)
                    .fetch_optional(&mut *tx)
                    .await?;
                if ended.is_some() {
                    if lease.is_some_and(|(holder, _)| holder.as_deref() == Some(run.id.as_str())) {
                        sqlx::query(q.fence_off_lease.as_str())
                            .bind(&run.job)
                            .bind(&run.instance)
                            .bind(&run.id)
                            .execute(&mut *tx)
                            .await?;
                    }
                    bind_report(sqlx::query(q.insert_report.as_str()), &e.report)
                        .execute(&mut *tx)
                        .await?;
                }
                answers.push(ended);
            }
            tx.commit().await?;
            conn.release();
            Ok(answers)
        })
    }
}
