//! The rows of the hosts' heartbeats. Who counts as alive is the API's
//! (`service::http::hosts`), from the time each row was last written.

use super::error::Result;
use super::handle::Store;
use super::records::HostRecord;

impl Store {
    /// Writes host `host_id`'s heartbeat: its version and lanes (JSON), seen now; `first`
    /// on its first beat, which also deletes the rows of hosts not seen for `forget_ms`.
    pub async fn beat_host(
        &self,
        host_id: &str,
        version: &str,
        lanes: &str,
        first: bool,
        forget_ms: i64,
    ) -> Result<()> {
        let (beat, prune) = (&self.q.beat_host, &self.q.prune_hosts);
        with_pool!(self.pool, p => sqlx::query(beat.as_str())
            .bind(host_id)
            .bind(version)
            .bind(lanes)
            .bind(i64::from(first))
            .execute(p)
            .await
            .map(|_| ()))?;
        if first {
            with_pool!(self.pool, p => sqlx::query(prune.as_str())
                .bind(forget_ms)
                .execute(p)
                .await
                .map(|_| ()))?;
        }
        Ok(())
    }

    /// Marks host `host_id` stopped cleanly.
    pub async fn host_stopped(&self, host_id: &str) -> Result<()> {
        let q = &self.q.host_stopped;
        with_pool!(self.pool, p => sqlx::query(q.as_str())
            .bind(host_id)
            .execute(p)
            .await
            .map(|_| ()))?;
        Ok(())
    }

    /// Every host's last heartbeat, by id, at most `limit`.
    pub async fn list_hosts(&self, limit: i64) -> Result<Vec<HostRecord>> {
        let q = &self.q.list_hosts;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str()).bind(limit).fetch_all(p).await?))
    }
}
