//! The rows of the audit log: one written per change asked for, read newest first,
//! deleted by retention. Who may read which rows is the API's (`service::http::audit`).

use super::error::Result;
use super::handle::Store;
use super::pool::{Pool, SQLITE_BUSY_TIMEOUT};
use super::records::{AuditFilter, AuditRecord, NewAudit};
use sqlx::AssertSqlSafe;
use std::time::Duration;

macro_rules! bind_audit {
    ($query:expr, $row:expr) => {
        $query
            .bind($row.actor)
            .bind($row.token_id.as_deref())
            .bind(&$row.label)
            .bind($row.tenant.as_deref())
            .bind($row.action)
            .bind(&$row.object)
            .bind($row.run_id.as_deref())
            .bind(&$row.result)
    };
}

impl Store {
    pub async fn insert_audit(&self, row: &NewAudit) -> Result<()> {
        let q = &self.q.insert_audit;
        with_pool!(self.pool, p => bind_audit!(sqlx::query(q.as_str()), row)
            .execute(p)
            .await
            .map(|_| ()))?;
        Ok(())
    }

    /// [`Store::insert_audit`], waiting for SQLite's write lock at most `wait`: an error
    /// that `is_locked` if a guest's transaction held it longer (a command that answered
    /// at once, as a cancel does, is not held up by its audit row). Postgres takes no
    /// such lock.
    pub async fn insert_audit_within(&self, row: &NewAudit, wait: Duration) -> Result<()> {
        let Pool::Sqlite(pool) = &self.pool else {
            return self.insert_audit(row).await;
        };
        let busy = |ms: u128| AssertSqlSafe(format!("PRAGMA busy_timeout = {ms}"));
        let mut conn = pool.acquire().await?;
        sqlx::query(busy(wait.as_millis().max(1)))
            .execute(&mut *conn)
            .await?;
        let written = bind_audit!(sqlx::query(self.q.insert_audit.as_str()), row)
            .execute(&mut *conn)
            .await;
        sqlx::query(busy(SQLITE_BUSY_TIMEOUT.as_millis()))
            .execute(&mut *conn)
            .await?;
        written?;
        Ok(())
    }

    /// The rows `filter` matches, newest first.
    pub async fn list_audit(&self, filter: &AuditFilter) -> Result<Vec<AuditRecord>> {
        let q = &self.q.list_audit;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(filter.since)
            .bind(filter.action.as_deref())
            .bind(filter.tenant.as_deref())
            .bind(filter.run_id.as_deref())
            .bind(filter.limit)
            .fetch_all(p)
            .await?))
    }
}
