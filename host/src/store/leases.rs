//! The leases' rows: who holds a job's instance, at which generation, until when.

use super::error::Result;
use super::handle::Store;
use super::records::{Lease, LeaseRecord, LeaseRequest};

impl Store {
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

    /// Drops a lease `holder` took with [`Store::acquire_lease`] for one write of its own,
    /// so no row is left per write.
    pub async fn drop_lease(&self, job: &str, instance: &str, holder: &str) -> Result<()> {
        let q = &self.q.drop_lease;
        with_pool!(self.pool, p => sqlx::query(q.as_str()).bind(job).bind(instance).bind(holder).execute(p).await?.rows_affected());
        Ok(())
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
}
