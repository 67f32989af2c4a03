//! Payload search, newest first. On Postgres one statement, `payload::jsonb @> needle`,
//! served by the GIN index of migration 0038 over the runs whose payload is an object, and
//! cut off by the server at [`SEARCH_BOUND`]. SQLite has no such operator or index: the
//! newest [`SCAN_ROWS`] runs the other filters match are read a page at a time and each
//! payload tested by `rules::payload_match` (the same containment), so the search says
//! when it did not read them all.

use super::error::{Result, StoreError};
use super::handle::Store;
use super::pool::Pool;
use super::records::RunRecord;
use crate::rules::payload_match;
use serde_json::Value;
use std::time::Duration;

/// Longest a search may take; Postgres stops the statement there.
pub const SEARCH_BOUND: Duration = Duration::from_secs(5);
/// The Postgres side of [`SEARCH_BOUND`].
const STATEMENT_TIMEOUT: &str = "SET LOCAL statement_timeout = 5000";
/// Postgres' SQLSTATE for a statement stopped by its timeout.
const QUERY_CANCELED: &str = "57014";
/// Most runs a SQLite search reads.
pub const SCAN_ROWS: i64 = 10_000;
/// Runs read at a time on SQLite: a page of the largest payloads stays within memory.
const SCAN_PAGE: i64 = 100;

/// What a search found.
pub struct PayloadSearch {
    pub runs: Vec<RunRecord>,
    /// False if SQLite's scan stopped at [`SCAN_ROWS`] before the oldest run.
    pub complete: bool,
}

impl Store {
    /// The newest runs (at most `limit`) of `job` and `tenant` (any, if not given) whose
    /// payload contains `needle` (a JSON object).
    pub async fn search_payloads(
        &self,
        needle: &Value,
        job: Option<&str>,
        tenant: Option<&str>,
        limit: i64,
    ) -> Result<PayloadSearch> {
        let pool = match &self.reader {
            Pool::Postgres(pool) => pool,
            Pool::Sqlite(_) => {
                let scan = self.scan_payloads(needle, job, tenant, limit);
                return tokio::time::timeout(SEARCH_BOUND, scan)
                    .await
                    .map_err(|_| StoreError::TimedOut)?;
            }
        };
        let mut tx = pool.begin().await?;
        sqlx::query(STATEMENT_TIMEOUT).execute(&mut *tx).await?;
        let runs = sqlx::query_as(self.q.search_payloads.as_str())
            .bind(needle.to_string())
            .bind(job)
            .bind(tenant)
            .bind(limit)
            .fetch_all(&mut *tx)
            .await
            .map_err(|e| match &e {
                sqlx::Error::Database(db) if db.code().as_deref() == Some(QUERY_CANCELED) => {
                    StoreError::TimedOut
                }
                _ => StoreError::Database(e),
            })?;
        tx.rollback().await?;
        Ok(PayloadSearch {
            runs,
            complete: true,
        })
    }

    async fn scan_payloads(
        &self,
        needle: &Value,
        job: Option<&str>,
        tenant: Option<&str>,
        limit: i64,
    ) -> Result<PayloadSearch> {
        let q = &self.q.scan_payloads;
        let mut after: (i64, String) = (i64::MAX, String::new());
        let (mut read, mut found) = (0, Vec::new());
        loop {
            let page: Vec<(String, String, i64)> = with_pool!(self.reader, p => sqlx::query_as(q.as_str())
                .bind(job)
                .bind(tenant)
                .bind(after.0)
                .bind(&after.1)
                .bind(SCAN_PAGE.min(SCAN_ROWS - read))
                .fetch_all(p)
                .await?);
            read += page.len() as i64;
            let ended = (page.len() as i64) < SCAN_PAGE;
            if let Some((id, _, created_at)) = page.last() {
                after = (*created_at, id.clone());
            }
            found.extend(page.into_iter().filter_map(|(id, payload, _)| {
                serde_json::from_str::<Value>(&payload)
                    .is_ok_and(|p| payload_match::contains(&p, needle))
                    .then_some(id)
            }));
            if found.len() as i64 >= limit || ended || read >= SCAN_ROWS {
                let complete = ended || (found.len() as i64) >= limit;
                found.truncate(limit.max(0) as usize);
                let mut runs = Vec::with_capacity(found.len());
                for id in &found {
                    runs.extend(self.get_run(id).await?);
                }
                return Ok(PayloadSearch { runs, complete });
            }
        }
    }
}
