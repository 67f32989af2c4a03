//! Live logs: while an attempt runs, the log lines it wrote so far reach the database
//! every [`FLUSH_EVERY`], so `host runs show` and `tail`, the API and the console of any
//! host of the fleet see a running run as it goes.
//!
//! What it costs the hot path is bounded: an attempt that ends within its first
//! [`FLUSH_EVERY`] writes nothing (it only raced a timer). A longer one gets a task that
//! writes the run's row once (when it started), then at most once per [`FLUSH_EVERY`], only
//! when complete lines were added, appending only those; the whole is bounded as the
//! attempt's log is (`engine::MAX_LOG_BYTES`). The task deletes the row when the attempt
//! ends; the runner does not wait for it.

use crate::sandbox::engine::output::AttemptLog;
use crate::store::Store;
use std::future::Future;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// How often a running attempt's new lines are written.
pub const FLUSH_EVERY: Duration = Duration::from_millis(250);

/// Runs `attempt` (attempt `seq` of run `run_id`, which writes to `log`) and, if it is
/// still running after [`FLUSH_EVERY`], keeps its live log until it ends.
pub(super) async fn while_running<F: Future>(
    store: &Store,
    log: &AttemptLog,
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
                log: log.clone(),
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
    run_id: String,
    seq: i64,
    started: Instant,
}

/// What the database holds of the live log, as far as this host knows.
#[derive(Default)]
struct Written {
    /// Bytes of the attempt's log read at the last write.
    raw: usize,
    /// The text written, in bytes and in characters (the database's `length`).
    bytes: usize,
    chars: i64,
    truncated: bool,
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
    /// appends the lines completed since the last write, if any.
    async fn write(&self, written: &mut Option<Written>) -> Result<(), crate::store::StoreError> {
        let raw = self.log.written();
        if written.as_ref().is_some_and(|w| w.raw == raw) {
            return Ok(());
        }
        let (text, truncated) = self.log.complete_lines();
        let now = Written {
            raw,
            bytes: text.len(),
            chars: text.chars().count() as i64,
            truncated,
        };
        let appended = match written.as_ref() {
            Some(w) if w.bytes == now.bytes && w.truncated == now.truncated => true,
            Some(w) => match text.get(w.bytes..) {
                Some(lines) => {
                    self.store
                        .append_live_log(&self.run_id, self.seq, lines, truncated, w.chars)
                        .await?
                }
                None => false,
            },
            None => false,
        };
        if !appended {
            let elapsed = self.started.elapsed().as_millis() as i64;
            self.store
                .put_live_log(&self.run_id, self.seq, &text, truncated, elapsed)
                .await?;
        }
        *written = Some(now);
        Ok(())
    }
}
