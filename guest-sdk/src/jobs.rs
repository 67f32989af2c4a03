//! Starting other jobs, and waiting for them.
//!
//! [`enqueue`] queues a run of a job the manifest granted (`grants.jobs`); [`enqueue_in`]
//! does it inside the job's database transaction, so the rows and the runs commit
//! together, fenced by the attempt's lease, or not at all. [`start`] (WIT 0.1.7) does the
//! same with the options of a start from the API — a time ([`StartOptions::run_at`]),
//! [`StartOptions::max_attempts`], a [`Unique`] key — and answers what it did
//! ([`Outcome`]). [`kick`] and [`emit`] start
//! runs as `host kick` and an event do. A pass that started children can
//! [`wait_for_children`]: when it returns [`crate::Outcome::Continue`], the run sleeps
//! until every child it started ended, and its next pass reads how with
//! [`crate::run::children`].
//!
//! ```no_run
//! use jobhost_guest::{Context, Job, JobError, Outcome, db, jobs, run};
//! # struct Parent;
//! impl Job for Parent {
//!     type Payload = serde_json::Value;
//!
//!     fn run(ctx: Context<Self::Payload>) -> Result<Outcome, JobError> {
//!         if ctx.pass == 1 {
//!             let tx = db::begin()?;
//!             for n in 0..10 {
//!                 jobs::enqueue_in(&tx, "thumbnail", &serde_json::json!({ "n": n }), &jobs::Options::default())?;
//!             }
//!             tx.commit()?; // the ten runs exist now, or never
//!             jobs::wait_for_children(jobs::WaitPolicy::Fail)?;
//!             return Ok(Outcome::Continue(serde_json::json!({})));
//!         }
//!         let done = run::children()?.into_iter().filter(|c| c.status == "succeeded").count();
//!         jobhost_guest::log::info(&format!("{done} thumbnails"));
//!         Ok(Outcome::Done)
//!     }
//! }
//! ```

use crate::HostError;
use crate::bindings::jobhost::job::jobs as raw;
use crate::db::Transaction;
use serde::Serialize;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use raw::{Enqueued, OnConflict, Outcome, Started, WaitPolicy};

/// How a run is queued; the default: due now, an instance of its own, attached to its
/// parent (waited for, and cancelled with it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// Runs of one job and instance never overlap.
    pub instance: Option<String>,
    pub delay: Duration,
    /// Claimed as though due this many seconds earlier (-3600 to 3600).
    pub priority: i32,
    /// One run per job, tenant and key, for good (a [`Unique`] key that never stops
    /// holding: [`start`] chooses how long).
    pub dedup_key: Option<String>,
    /// Neither waited for nor cancelled with its parent.
    pub detached: bool,
}

impl Options {
    fn raw(&self) -> raw::Options {
        raw::Options {
            instance: self.instance.clone(),
            delay_ms: self.delay.as_millis().try_into().unwrap_or(u64::MAX),
            priority: self.priority,
            dedup_key: self.dedup_key.clone(),
            detached: self.detached,
        }
    }
}

fn payload_text<P: Serialize>(payload: &P) -> Result<String, HostError> {
    serde_json::to_string(payload).map_err(|_| HostError::Invalid("invalid-payload".into()))
}

/// Queues a run of `job` with `payload`, in a fenced write of its own.
pub fn enqueue<P: Serialize>(
    job: &str,
    payload: &P,
    options: &Options,
) -> Result<Enqueued, HostError> {
    raw::enqueue(job, &payload_text(payload)?, &options.raw())
}

/// Queues a run of `job` inside `tx`: it exists once `tx` commits, and never otherwise.
pub fn enqueue_in<P: Serialize>(
    tx: &Transaction,
    job: &str,
    payload: &P,
    options: &Options,
) -> Result<Enqueued, HostError> {
    raw::enqueue_in(tx.raw(), job, &payload_text(payload)?, &options.raw())
}

/// One run of a batch: its job, payload and options.
pub struct NewRun<'a, P> {
    pub job: &'a str,
    pub payload: P,
    pub options: Options,
}

fn raw_runs<P: Serialize>(runs: &[NewRun<'_, P>]) -> Result<Vec<raw::NewRun>, HostError> {
    runs.iter()
        .map(|run| {
            Ok(raw::NewRun {
                job: run.job.to_string(),
                payload: payload_text(&run.payload)?,
                options: run.options.raw(),
            })
        })
        .collect()
}

/// Queues up to 1000 runs in one fenced write: all of them, or none.
pub fn enqueue_all<P: Serialize>(runs: &[NewRun<'_, P>]) -> Result<Vec<Enqueued>, HostError> {
    raw::enqueue_all(&raw_runs(runs)?)
}

/// Queues up to 1000 runs inside `tx`.
pub fn enqueue_all_in<P: Serialize>(
    tx: &Transaction,
    runs: &[NewRun<'_, P>],
) -> Result<Vec<Enqueued>, HostError> {
    raw::enqueue_all_in(tx.raw(), &raw_runs(runs)?)
}

/// How long a unique key holds the run it names against another start of the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Until the run starts its first attempt.
    Queued,
    /// Until it starts, and while an attempt of it runs.
    Active,
    /// Until it ended, however it ends.
    UntilFinished,
    /// For this long after the run was queued (up to a year), whatever its state.
    Period(Duration),
}

/// One run per job, tenant and key while the key holds; a start whose key is held does
/// as `on_conflict` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unique {
    /// 1 to 200 bytes of characters that show as themselves.
    pub key: String,
    pub hold: Hold,
    pub on_conflict: OnConflict,
}

/// How a run is started (WIT 0.1.7); the default: due now, an instance of its own, its
/// job's attempts, attached to its parent. Checked as an API start's options are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartOptions {
    /// Runs of one job and instance never overlap.
    pub instance: Option<String>,
    /// Due at this time (at most a day past, a year ahead); not with a `delay`.
    pub run_at: Option<SystemTime>,
    /// Due this long from now (at most a year).
    pub delay: Duration,
    /// Claimed as though due this many seconds earlier (-3600 to 3600).
    pub priority: i32,
    /// Attempts a pass may use: 1 to its job's (`retries` + 1).
    pub max_attempts: Option<u32>,
    pub unique: Option<Unique>,
    /// Neither waited for nor cancelled with its parent.
    pub detached: bool,
}

fn millis(d: Duration) -> u64 {
    d.as_millis().try_into().unwrap_or(u64::MAX)
}

impl StartOptions {
    fn raw(&self) -> raw::StartOptions {
        raw::StartOptions {
            instance: self.instance.clone(),
            // A time before the epoch is as far past as the host refuses.
            run_at: self
                .run_at
                .map(|at| at.duration_since(UNIX_EPOCH).map_or(0, millis)),
            delay_ms: millis(self.delay),
            priority: self.priority,
            max_attempts: self.max_attempts,
            unique: self.unique.as_ref().map(|u| raw::Unique {
                key: u.key.clone(),
                hold: match u.hold {
                    Hold::Queued => raw::Hold::Queued,
                    Hold::Active => raw::Hold::Active,
                    Hold::UntilFinished => raw::Hold::UntilFinished,
                    Hold::Period(d) => raw::Hold::Period(millis(d)),
                },
                on_conflict: u.on_conflict,
            }),
            detached: self.detached,
        }
    }
}

/// Starts a run of `job` with `payload`, in a fenced write of its own; answers the run
/// and what happened (`Created`, `Joined`, `Replaced`, `Debounced`, or `Dropped` by its
/// job's `max_per_tenant`).
pub fn start<P: Serialize>(
    job: &str,
    payload: &P,
    options: &StartOptions,
) -> Result<Started, HostError> {
    raw::start(job, &payload_text(payload)?, &options.raw())
}

/// Starts a run of `job` inside `tx`: it (or its change to a held run) exists once `tx`
/// commits, and never otherwise.
pub fn start_in<P: Serialize>(
    tx: &Transaction,
    job: &str,
    payload: &P,
    options: &StartOptions,
) -> Result<Started, HostError> {
    raw::start_in(tx.raw(), job, &payload_text(payload)?, &options.raw())
}

/// One run of a batch of starts.
pub struct NewStart<'a, P> {
    pub job: &'a str,
    pub payload: P,
    pub options: StartOptions,
}

fn raw_starts<P: Serialize>(runs: &[NewStart<'_, P>]) -> Result<Vec<raw::NewStart>, HostError> {
    runs.iter()
        .map(|run| {
            Ok(raw::NewStart {
                job: run.job.to_string(),
                payload: payload_text(&run.payload)?,
                options: run.options.raw(),
            })
        })
        .collect()
}

/// Starts up to 1000 runs in one fenced write: all of them, or none.
pub fn start_all<P: Serialize>(runs: &[NewStart<'_, P>]) -> Result<Vec<Started>, HostError> {
    raw::start_all(&raw_starts(runs)?)
}

/// Starts up to 1000 runs inside `tx`.
pub fn start_all_in<P: Serialize>(
    tx: &Transaction,
    runs: &[NewStart<'_, P>],
) -> Result<Vec<Started>, HostError> {
    raw::start_all_in(tx.raw(), &raw_starts(runs)?)
}

/// Kicks `job`; returns the id of the run it queued.
pub fn kick(job: &str) -> Result<String, HostError> {
    raw::kick(job)
}

/// Kicks `job` inside `tx`.
pub fn kick_in(tx: &Transaction, job: &str) -> Result<String, HostError> {
    raw::kick_in(tx.raw(), job)
}

/// Emits `event` with `payload`; returns how many runs it queued.
pub fn emit<P: Serialize>(event: &str, payload: &P) -> Result<u32, HostError> {
    raw::emit(event, &payload_text(payload)?)
}

/// Emits `event` inside `tx`.
pub fn emit_in<P: Serialize>(tx: &Transaction, event: &str, payload: &P) -> Result<u32, HostError> {
    raw::emit_in(tx.raw(), event, &payload_text(payload)?)
}

/// Makes this pass's `Continue` (or `Defer`) wait until every child it started ended.
pub fn wait_for_children(policy: WaitPolicy) -> Result<(), HostError> {
    raw::wait_for_children(policy)
}
