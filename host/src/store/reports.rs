//! The outbox of reports: written with the change they report, delivered later.

use super::error::Result;
use super::handle::Store;
use super::queries::Queries;
use super::records::{NewReport, ReportKind, ReportRecord, RunRecord};

impl Store {
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

/// Writes the `dropped` report of a run its job's `max_per_tenant` dropped as it was queued
/// (`queued`, the row the insert answered), on the connection of the queueing
/// transaction, so an API start's and a guest's are reported alike.
pub(super) async fn report_if_dropped<DB>(
    conn: &mut DB::Connection,
    q: &'static Queries,
    queued: Option<&RunRecord>,
) -> std::result::Result<(), sqlx::Error>
where
    DB: sqlx::Database,
    for<'e> &'e mut DB::Connection: sqlx::Executor<'e, Database = DB>,
    <DB as sqlx::Database>::Arguments: sqlx::IntoArguments<DB>,
    for<'a> &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> Option<&'a str>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    i64: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    if let Some(dropped) = queued.filter(|r| r.dropped_by_limit()) {
        let report = NewReport::about_run(
            ReportKind::Dropped,
            dropped,
            crate::rules::failure::FailureCode::TenantLimit,
        );
        bind_report(sqlx::query(q.insert_report.as_str()), &report)
            .execute(conn)
            .await?;
    }
    Ok(())
}
