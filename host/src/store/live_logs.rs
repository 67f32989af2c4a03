//! The rows of live logs: what a running attempt logged so far, one row per run, written
//! in batches by the host that runs it (`runs::runner::live` decides when and what) and
//! read by every host, so a run is seen live whichever host of the fleet runs it.

use super::error::Result;
use super::handle::Store;

crate::record! {
    /// A running attempt's log so far. `running_ms` is the database's clock less
    /// `started_at`, read with the row; `fuel_used`, the fuel burnt so far, is null where
    /// the host does not meter fuel.
    #[derive(Debug, Clone, Default)]
    pub struct LiveLogRecord {
        pub run_id: String,
        pub seq: i64,
        pub log: String,
        pub log_truncated: i64,
        pub started_at: i64,
        pub updated_at: i64,
        pub running_ms: i64,
        pub fuel_used: Option<i64>,
    }
}

impl Store {
    /// Starts the live log of attempt `seq` of run `run_id`, which started `elapsed_ms`
    /// ago, with `log` and the fuel burnt so far (replacing another attempt's).
    pub async fn put_live_log(
        &self,
        run_id: &str,
        seq: i64,
        log: &str,
        truncated: bool,
        elapsed_ms: i64,
        fuel_used: Option<i64>,
    ) -> Result<()> {
        let q = &self.q.put_live_log;
        with_pool!(self.pool, p => {
            sqlx::query(q.as_str())
                .bind(run_id)
                .bind(seq)
                .bind(log)
                .bind(i64::from(truncated))
                .bind(elapsed_ms)
                .bind(fuel_used)
                .execute(p)
                .await?;
        });
        Ok(())
    }

    /// Appends `lines` (none, to update only the fuel) to the live log of attempt `seq` of
    /// run `run_id` if it holds `written_chars` characters, what its host last wrote, and
    /// sets the fuel burnt so far; `false` if it did not (a write whose outcome was lost,
    /// another attempt's row), for the host to put it whole.
    pub async fn append_live_log(
        &self,
        run_id: &str,
        seq: i64,
        lines: &str,
        truncated: bool,
        written_chars: i64,
        fuel_used: Option<i64>,
    ) -> Result<bool> {
        let q = &self.q.append_live_log;
        let changed = with_pool!(self.pool, p => sqlx::query(q.as_str())
            .bind(run_id)
            .bind(seq)
            .bind(lines)
            .bind(i64::from(truncated))
            .bind(written_chars)
            .bind(fuel_used)
            .execute(p)
            .await?
            .rows_affected());
        Ok(changed == 1)
    }

    /// The live log of run `run_id`, whichever attempt wrote it.
    pub async fn live_log(&self, run_id: &str) -> Result<Option<LiveLogRecord>> {
        let q = &self.q.live_log;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(run_id)
            .fetch_optional(p)
            .await?))
    }

    /// Deletes the live log of attempt `seq` of run `run_id` (its own log is the
    /// attempt's row now).
    pub async fn drop_live_log(&self, run_id: &str, seq: i64) -> Result<()> {
        let q = &self.q.drop_live_log;
        with_pool!(self.pool, p => {
            sqlx::query(q.as_str()).bind(run_id).bind(seq).execute(p).await?;
        });
        Ok(())
    }
}
