//! Live logs: while an attempt runs, the log lines it wrote so far and the fuel it burnt
//! reach the database every [`FLUSH_EVERY`], so `host runs show` and `tail`, the API and
//! the console of any host of the fleet see a running run as it goes.
//!
//! What it costs the hot path is bounded: an attempt that ends within its first
//! [`FLUSH_EVERY`] writes nothing (it only raced a timer). A longer one gets a task that
//! writes the run's row once (when it started), then at most once per [`FLUSH_EVERY`] when
//! complete lines were added, appending only those, and at most once per [`FUEL_EVERY`]
//! when only its fuel moved; the whole is bounded as the attempt's log is
//! (`engine::MAX_LOG_BYTES`). The task deletes the row when the attempt ends; the runner
//! does not wait for it.

use crate::sandbox::engine::limits::FuelGauge;
use crate::sandbox::engine::output::AttemptLog;
use crate::store::Store;
use std::future::Future;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// How often a running attempt's new lines are written.
pub const FLUSH_EVERY: Duration = Duration::from_millis(250);
/// How often a running attempt's fuel so far is written when it logged nothing new: a
/// busy guest that logs nothing costs the database a write a second, not four.
pub const FUEL_EVERY: Duration = Duration::from_secs(1);

/// What a running attempt shows as it goes: its log and the fuel it burnt so far.
pub(super) struct Watched<'a> {
    pub log: &'a AttemptLog,
    pub fuel: &'a FuelGauge,
}

/// Runs `attempt` (attempt `seq` of run `run_id`, which writes to `watched`) and, if it
/// is still running after [`FLUSH_EVERY`], keeps its live log until it ends.
pub(super) async fn while_running<F: Future>(
    store: &Store,
    watched: Watched<'_>,
    run_id: &str,
    seq: i64,
    attempt: F,
) -> F::Output {
    let started = Instant::now();
    tokio::pin!(attempt);
    tokio::select! {
        ended = &mut attempt => ended,
        () = tokio::time::sleep(FLUSH_EVERY) => {
            let (stop, stopped) = oneshot::channel();
            let writer = Writer {
                store: store.clone(),
                log: watched.log.clone(),
                fuel: watched.fuel.clone(),
                run_id: run_id.to_string(),
                seq,
                started,
            };
            tokio::spawn(writer.run(stopped));
            let ended = attempt.await;
            // The task deletes the row once its write in flight (if any) is done.
            let _ = stop.send(());
            ended
        }
    }
}

/// One attempt's live log, as its host last wrote it.
struct Writer {
    store: Store,
    log: AttemptLog,
    fuel: FuelGauge,
    run_id: String,
    seq: i64,
    started: Instant,
}

/// What the database holds of the live log, as far as this host knows.
struct Written {
    /// Bytes of the attempt's log read at the last write.
    raw: usize,
    /// The text written, in bytes and in characters (the database's `length`).
    bytes: usize,
    chars: i64,
    truncated: bool,
    /// The fuel written, and when.
    fuel: Option<u64>,
    at: Instant,
}

impl Writer {
    /// Writes at once, then every [`FLUSH_EVERY`] until `stopped`; then deletes the row.
    /// A failed write is logged and tried again whole at the next turn: the live log is
    /// a view, never a reason for the attempt to fail.
    async fn run(self, mut stopped: oneshot::Receiver<()>) {
        let mut written: Option<Written> = None;
        loop {
            if let Err(error) = self.write(&mut written).await {
                written = None;
                tracing::warn!(run_id = %self.run_id, seq = self.seq, code = "driver_failed", error = %error, "could not write the attempt's live log");
            }
            tokio::select! {
                () = tokio::time::sleep(FLUSH_EVERY) => {}
                _ = &mut stopped => break,
            }
        }
        if let Err(error) = self.store.drop_live_log(&self.run_id, self.seq).await {
            tracing::warn!(run_id = %self.run_id, seq = self.seq, code = "driver_failed", error = %error, "could not delete the attempt's live log");
        }
    }

    /// Puts the row (the first time, or after a write whose outcome is unknown), or
    /// appends the lines completed since the last write, if any, with the fuel so far.
    async fn write(&self, written: &mut Option<Written>) -> Result<(), crate::store::StoreError> {
        let raw = self.log.written();
        let fuel = self.fuel.used();
        let fuel_due = |w: &Written| w.fuel != fuel && w.at.elapsed() >= FUEL_EVERY;
        if written
            .as_ref()
            .is_some_and(|w| w.raw == raw && !fuel_due(w))
        {
            return Ok(());
        }
        let (text, truncated) = self.log.complete_lines();
        let fuel_column = fuel.map(|f| i64::try_from(f).unwrap_or(i64::MAX));
        let mut now = Written {
            raw,
            bytes: text.len(),
            chars: text.chars().count() as i64,
            truncated,
            fuel,
            at: Instant::now(),
        };
        let appended = match written.as_ref() {
            Some(w) if w.bytes == now.bytes && w.truncated == now.truncated && !fuel_due(w) => {
                // No complete line yet, and the fuel can wait: the row stands as written.
                (now.fuel, now.at) = (w.fuel, w.at);
                true
            }
            Some(w) => match text.get(w.bytes..) {
                Some(lines) => {
                    self.store
                        .append_live_log(
                            &self.run_id,
                            self.seq,
                            lines,
                            truncated,
                            w.chars,
                            fuel_column,
                        )
                        .await?
                }
                None => false,
            },
            None => false,
        };
        if !appended {
            let elapsed = self.started.elapsed().as_millis() as i64;
            self.store
                .put_live_log(
                    &self.run_id,
                    self.seq,
                    &text,
                    truncated,
                    elapsed,
                    fuel_column,
                )
                .await?;
        }
        *written = Some(now);
        Ok(())
    }
}
