//! The rows of the audit log: one written per change asked for, read newest first,
//! deleted by retention. Who may read which rows is the API's (`service::http::audit`).

use super::error::Result;
use super::handle::Store;
use super::records::{AuditFilter, AuditRecord, NewAudit};

impl Store {
    pub async fn insert_audit(&self, row: &NewAudit) -> Result<()> {
        let q = &self.q.insert_audit;
        with_pool!(self.pool, p => sqlx::query(q.as_str())
            .bind(row.actor)
            .bind(row.token_id.as_deref())
            .bind(&row.label)
            .bind(row.tenant.as_deref())
            .bind(row.action)
            .bind(&row.object)
            .bind(row.run_id.as_deref())
            .bind(&row.result)
            .execute(p)
            .await
            .map(|_| ()))?;
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
