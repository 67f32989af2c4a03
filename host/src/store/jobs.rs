//! The jobs' rows: registered definitions, read on SQLite on the calling thread.

use super::error::Result;
use super::handle::Store;
use super::probe;
use super::records::{JobRecord, JobUpsert};

impl Store {
    pub async fn upsert_job(&self, job: &JobUpsert<'_>) -> Result<JobRecord> {
        let q = &self.q.upsert_job;
        let limits = job.limits;
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
            .bind(limits.concurrency.map(|n| i64::from(n.get())))
            .bind(limits.rate.map(|r| i64::from(r.starts)))
            .bind(limits.rate.map(|r| r.period_ms))
            .bind(limits.key.as_ref().map(|k| k.as_str()))
            .bind(limits.key_concurrency.map(|n| i64::from(n.get())))
            .bind(limits.key_rate.map(|r| i64::from(r.starts)))
            .bind(limits.key_rate.map(|r| r.period_ms))
            .bind(i64::from(limits.fifo()))
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

    /// Records that a serving host is compiling `digest` for `job` (`None`: nothing is
    /// compiled for it), so its queued runs are shown waiting for it.
    pub async fn set_compiling(&self, job: &str, digest: Option<&str>) -> Result<()> {
        let q = &self.q.set_compiling;
        with_pool!(self.pool, p => {
            sqlx::query(q.as_str()).bind(job).bind(digest).execute(p).await?;
        });
        Ok(())
    }

    /// Records that the compile of `digest` for `job` ended, unless a later one began.
    pub async fn compiled(&self, job: &str, digest: &str) -> Result<()> {
        let q = &self.q.compiled;
        with_pool!(self.pool, p => {
            sqlx::query(q.as_str()).bind(job).bind(digest).execute(p).await?;
        });
        Ok(())
    }

    /// Whether a serving host is compiling `job`'s registered component now.
    pub async fn job_compiling(&self, job: &str) -> Result<bool> {
        let q = &self.q.job_compiling;
        let found: Option<(i32,)> = with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(job)
            .fetch_optional(p)
            .await?);
        Ok(found.is_some())
    }

    pub async fn list_jobs(&self) -> Result<Vec<JobRecord>> {
        let q = &self.q.list_jobs;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str()).fetch_all(p).await?))
    }
}
