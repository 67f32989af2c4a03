//! The rows retention deletes: finished runs older than the cut-off with their attempts,
//! ledgers, journals, live logs and settled deliveries, delivered reports, audit rows, orphaned jobs whose runs are all gone, and the leases
//! of instances idle since the cut-off; and the rates' window rows no window holds. What
//! is old enough, and when, is `retention`'s.

use super::controls::FilterBinds;
use super::error::Result;
use super::handle::Store;
use super::pool::Exclusive;
use super::records::RunFilter;
use sqlx::Connection;

/// What one batch deleted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pruned {
    pub runs: u64,
    pub reports: u64,
    /// Orphaned jobs whose history was gone.
    pub jobs: u64,
    /// Leases of instances idle since the cut-off, with no queued or running run.
    pub leases: u64,
    /// Audit rows older than the cut-off.
    pub audit: u64,
    /// Rows of the rates' windows no window holds any more.
    pub rate_starts: u64,
}

/// Deletes the runs `$ids` (a list of ids) in transaction `$tx` with every row that hangs
/// off them; how many runs. Retention and a purge delete runs alike.
macro_rules! delete_runs {
    ($q:expr, $tx:expr, $ids:expr) => {{
        let ids = serde_json::to_string($ids).expect("ids serialise");
        for sql in [
            &$q.prune_attempts,
            &$q.prune_steps,
            &$q.prune_step_failures,
            &$q.prune_journals,
            &$q.prune_live_logs,
            &$q.prune_delivery_attempts,
            &$q.prune_deliveries,
            &$q.prune_signals,
        ] {
            sqlx::query(sql.as_str())
                .bind(&ids)
                .execute(&mut *$tx)
                .await?;
        }
        sqlx::query($q.prune_runs.as_str())
            .bind(&ids)
            .execute(&mut *$tx)
            .await?
            .rows_affected()
    }};
}

impl Store {
    /// How many runs `filter` matches that a purge would delete (ended, their endings
    /// delivered), counted up to `cap`.
    pub async fn count_purgeable(&self, filter: &RunFilter, cap: i64) -> Result<i64> {
        let q = &self.q.count_purgeable;
        let f = FilterBinds::of(filter);
        Ok(
            with_pool!(self.reader, p => bind_filter!(sqlx::query_scalar(q.as_str()), f)
            .bind(cap)
            .fetch_one(p)
            .await?),
        )
    }

    /// Deletes up to `limit` of the runs `filter` matches that ended (and delivered their
    /// endings), oldest first, with every row of theirs, in one transaction; how many.
    pub async fn purge_runs(&self, filter: &RunFilter, limit: i64) -> Result<u64> {
        let q = self.q;
        let f = FilterBinds::of(filter);
        with_pool!(self.pool, p => {
            let mut conn = Exclusive::acquire(p).await?;
            let mut tx = conn.begin_with(self.dialect.begin_write).await?;
            let ids: Vec<String> = bind_filter!(sqlx::query_scalar(q.purgeable_runs.as_str()), f)
                .bind(limit)
                .fetch_all(&mut *tx)
                .await?;
            let runs = delete_runs!(q, tx, &ids);
            tx.commit().await?;
            conn.release();
            Ok(runs)
        })
    }

    /// Deletes up to `limit` finished runs created more than `older_than_ms` ago (never a
    /// queued or running one) with their attempts and steps, and up to `limit` delivered
    /// reports and audit rows as old, in one transaction.
    pub async fn prune(&self, older_than_ms: i64, limit: i64) -> Result<Pruned> {
        self.retrying(|| self.prune_once(older_than_ms, limit))
            .await
    }

    /// Deletes up to `limit` rows of the rates' windows that no window holds any more
    /// (the claim drops them only for the jobs and keys it claims); how many.
    pub async fn prune_rate_starts(&self, limit: i64) -> Result<u64> {
        let q = &self.q.prune_rate_starts;
        Ok(with_pool!(self.pool, p => sqlx::query(q.as_str())
            .bind(limit)
            .execute(p)
            .await?
            .rows_affected()))
    }

    async fn prune_once(&self, older_than_ms: i64, limit: i64) -> Result<Pruned> {
        let q = self.q;
        with_pool!(self.pool, p => {
            let mut conn = Exclusive::acquire(p).await?;
            let mut tx = conn.begin_with(self.dialect.begin_write).await?;
            let ids: Vec<String> = sqlx::query_scalar(q.old_runs.as_str())
                .bind(older_than_ms)
                .bind(limit)
                .fetch_all(&mut *tx)
                .await?;
            let runs = delete_runs!(q, tx, &ids);
            let reports = sqlx::query(q.prune_reports.as_str())
                .bind(older_than_ms)
                .bind(limit)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            sqlx::query(q.prune_orphan_leases.as_str())
                .bind(older_than_ms)
                .execute(&mut *tx)
                .await?;
            let leases = sqlx::query(q.prune_idle_leases.as_str())
                .bind(older_than_ms)
                .bind(limit)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            let jobs = sqlx::query(q.prune_orphans.as_str())
                .bind(older_than_ms)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            let audit = sqlx::query(q.prune_audit.as_str())
                .bind(older_than_ms)
                .bind(limit)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            tx.commit().await?;
            conn.release();
            Ok(Pruned {
                runs,
                reports,
                jobs,
                leases,
                audit,
                rate_starts: 0,
            })
        })
    }
}
