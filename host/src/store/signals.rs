//! The rows of signals (migration 0033): a signal stored as it is sent, under its run's
//! row lock, waking the run if it waits for it; a pass's wait recorded, fenced; a pass
//! taking the first unread signal of a name, fenced; and the sweep's wake of a run whose
//! signal came while its waiting pass still ran. What a signal may be is
//! `rules::signal`'s; what a wait leads to is the runner's.

use super::error::Result;
use super::handle::Store;
use super::pool::Exclusive;
use super::records::Fence;
use crate::rules::signal::MAX_UNREAD;
use sqlx::Connection;

/// A signal to store.
#[derive(Debug, Clone)]
pub struct NewSignal<'a> {
    pub run_id: &'a str,
    /// A tenant sends only to its own runs; `None`: the operator.
    pub tenant: Option<&'a str>,
    pub name: &'a str,
    pub signal_id: &'a str,
    /// Canonical JSON (`rules::signal::check_payload`).
    pub payload: &'a str,
}

/// What a send found, and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signalled {
    /// Stored; `woke`: the run waited for it and is due now.
    Sent { woke: bool },
    /// The same id, name and payload were stored before: nothing changed.
    Duplicate,
    /// No such run (or, for a tenant, not one of its own).
    UnknownRun,
    /// The run has ended (its status): nothing will read a signal.
    Ended(String),
    /// The id was used before for another name or payload: nothing changed.
    IdReused,
    /// The run keeps `MAX_UNREAD` unread signals already: nothing changed.
    TooMany,
}

/// A signal as a pass reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadSignal {
    pub signal_id: String,
    pub payload: String,
}

impl Store {
    /// Stores `signal` in one transaction under its run's row lock (Postgres: `FOR
    /// UPDATE`; SQLite: its one writer), so it is ordered with the ending of the pass that
    /// waits for it: a send before that ending is found by the sweep
    /// ([`Store::wake_signalled`]), one after it wakes the run here.
    pub async fn send_signal(&self, signal: &NewSignal<'_>) -> Result<Signalled> {
        self.retrying(|| self.send_signal_once(signal)).await
    }

    async fn send_signal_once(&self, signal: &NewSignal<'_>) -> Result<Signalled> {
        let q = self.q;
        with_pool!(self.pool, p => {
            let mut conn = Exclusive::acquire(p).await?;
            let mut tx = conn.begin_with(self.dialect.begin_write).await?;
            let status: Option<String> = sqlx::query_scalar(q.signal_target.as_str())
                .bind(signal.run_id)
                .bind(signal.tenant)
                .fetch_optional(&mut *tx)
                .await?;
            let existing: Option<(String, String)> = match status {
                Some(_) => sqlx::query_as(q.stored_signal.as_str())
                    .bind(signal.run_id)
                    .bind(signal.signal_id)
                    .fetch_optional(&mut *tx)
                    .await?,
                None => None,
            };
            let unread: i64 = match (&status, &existing) {
                (Some(_), None) => sqlx::query_scalar(q.unread_signals.as_str())
                    .bind(signal.run_id)
                    .bind(MAX_UNREAD)
                    .fetch_one(&mut *tx)
                    .await?,
                _ => 0,
            };
            let answer = match (status, existing) {
                (None, _) => Signalled::UnknownRun,
                (Some(_), Some((name, payload))) => {
                    if name == signal.name && payload == signal.payload {
                        Signalled::Duplicate
                    } else {
                        Signalled::IdReused
                    }
                }
                (Some(status), None) if !crate::rules::signal::takes_signals(&status) => {
                    Signalled::Ended(status)
                }
                (Some(_), None) if unread >= MAX_UNREAD => Signalled::TooMany,
                (Some(_), None) => {
                    sqlx::query(q.insert_signal.as_str())
                        .bind(signal.run_id)
                        .bind(signal.signal_id)
                        .bind(signal.name)
                        .bind(signal.payload)
                        .execute(&mut *tx)
                        .await?;
                    let woke = sqlx::query(q.wake_for_signal.as_str())
                        .bind(signal.run_id)
                        .bind(signal.name)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                    Signalled::Sent { woke: woke == 1 }
                }
            };
            tx.commit().await?;
            conn.release();
            Ok(answer)
        })
    }

    /// Records that run `run_id`'s pass waits for the signal `name`, fenced.
    pub async fn wait_for_signal_fenced(
        &self,
        fence: &Fence,
        run_id: &str,
        name: &str,
    ) -> Result<bool> {
        let sql = self.q.wait_for_signal.as_str();
        self.fenced_run_update(fence, sql, run_id, name).await
    }

    /// The signal `name` pass `pass` of run `run_id` reads: the one it took before (an
    /// earlier attempt of the pass), else the first unread one, taken for the pass in a
    /// write fenced by `fence` (and the run still at that pass). `Ok(None)`: none.
    /// `Err` of a lost lease is told apart by [`Store::holds_pass`].
    pub async fn take_signal(
        &self,
        fence: &Fence,
        run_id: &str,
        pass: i64,
        name: &str,
    ) -> Result<Option<ReadSignal>> {
        let q = self.q;
        let taken: Option<(String, String)> = with_pool!(self.reader, p =>
            sqlx::query_as(q.taken_signal.as_str())
                .bind(run_id)
                .bind(name)
                .bind(pass)
                .fetch_optional(p)
                .await?);
        if let Some((signal_id, payload)) = taken {
            return Ok(Some(ReadSignal { signal_id, payload }));
        }
        let taken: Option<(String, String)> = self
            .retrying(|| async {
                Ok(
                    with_pool!(self.pool, p => sqlx::query_as(q.take_signal.as_str())
                    .bind(fence.job.as_str())
                    .bind(fence.instance.as_str())
                    .bind(fence.generation)
                    .bind(fence.holder.as_str())
                    .bind(run_id)
                    .bind(pass)
                    .bind(name)
                    .fetch_optional(p)
                    .await?),
                )
            })
            .await?;
        Ok(taken.map(|(signal_id, payload)| ReadSignal { signal_id, payload }))
    }

    /// Whether the attempt of `fence` still runs pass `pass` of run `run_id`.
    pub async fn holds_pass(&self, fence: &Fence, run_id: &str, pass: i64) -> Result<bool> {
        let q = self.q;
        let held: Option<i64> = with_pool!(self.pool, p => sqlx::query_scalar(q.holds_pass.as_str())
            .bind(fence.job.as_str())
            .bind(fence.instance.as_str())
            .bind(fence.generation)
            .bind(fence.holder.as_str())
            .bind(run_id)
            .bind(pass)
            .fetch_optional(p)
            .await?);
        Ok(held.is_some())
    }

    /// Makes due now every run (up to `limit`) that sleeps waiting for a signal already
    /// stored: one sent while the waiting pass still ran (or before it waited). Reads the
    /// unread signals only (a partial index), not the waiting runs, and writes only when
    /// it found some. Returns how many it woke.
    pub async fn wake_signalled(&self, limit: i64) -> Result<u64> {
        let q = self.q;
        let ids: Vec<String> = with_pool!(self.reader, p => sqlx::query_scalar(q.signalled_runs.as_str())
            .bind(limit).fetch_all(p).await?);
        if ids.is_empty() {
            return Ok(0);
        }
        let ids = serde_json::to_string(&ids).expect("ids serialise");
        Ok(
            with_pool!(self.pool, p => sqlx::query(q.wake_signalled.as_str())
            .bind(&ids).execute(p).await?.rows_affected()),
        )
    }
}
