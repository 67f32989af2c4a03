//! Claims and endings of attempts, many per round trip: the rule that decides which runs a
//! host takes and what an attempt's end writes, for both backends, behind one trait
//! ([`Claims`]).
//!
//! A claim locks due runs (skipping rows other hosts are claiming), takes or moves on each
//! run's lease to a new generation with its deadline, and starts the attempt — for a whole
//! batch of runs at once. An ending (`Recording`) writes down what an attempt led to — the
//! run finished, queued again, or given back unstarted — conditioned on the run still
//! running at the attempt's generation, and on the lease where the ending needs it; the
//! host's finisher sends many at once, and learns per run whether it was recorded.
//!
//! On Postgres each batch is one call of a function (`postgres`), whose current text is
//! one file of `migrations/postgres/functions` (embedded below, applied by `migrate` as a
//! repeatable migration); on SQLite the writer thread (`sqlite`) runs the same steps in
//! one transaction, with the statements in `statements` (only those the store's other
//! writes share stay in `store::queries`). A kick goes the same way, so that on SQLite it
//! joins the writer's batches. What to record is decided by the runner; this module only
//! writes it.

mod postgres;
pub(crate) mod sqlite;
mod statements;

use super::{Lease, NewReport, NewRun, Pool, Result, RunRecord, RunStatus, Store};
use postgres::PostgresClaims;
pub(crate) use postgres::QueuedTenants;
use serde::Serialize;
use std::collections::BTreeMap;
use tokio::time::Instant;

/// The claim and ending writes of one backend: the store calls both through it.
pub(crate) trait Claims {
    /// Claims, leases and starts runs (see [`ClaimRequest`]) in one transaction.
    async fn claim(&self, request: &ClaimRequest<'_>) -> Result<Vec<ClaimedRow>>;
    /// Writes down the ends of attempts (finished, requeued, given back), one answer per
    /// item, in the order given.
    async fn record(&self, items: &[Recording]) -> Vec<Result<Recorded>>;
    /// A kick in one transaction (see [`Store::kick_run`]): the holder's pending flag set
    /// while the instance's lease is held (`None`), else `run` queued.
    async fn kick(&self, run: &NewRun) -> Result<Option<RunRecord>>;
}

/// Embeds `migrations/postgres/functions/<file>.sql` files; a test checks the list against
/// the folder. They apply in this (the file names') order.
macro_rules! functions {
    ($($file:literal),* $(,)?) => {
        &[$(($file, include_str!(concat!("../../../../migrations/postgres/functions/", $file, ".sql")))),*]
    };
}

/// The current text of every Postgres function (the claim's, the endings', the enqueue's,
/// the files' bookkeeping, the fence, the triggers'), by file name.
pub(crate) const POSTGRES_FUNCTIONS: &[(&str, &str)] = functions!(
    "active_runs",
    "app_enqueue",
    "attach_file",
    "attempt_logs_kept",
    "claim_runs",
    "end_pass",
    "enqueue_run",
    "fence",
    "file_garbage_usage",
    "files_bookkeeping",
    "held_back",
    "mark_file",
    "notify_work",
    "record_attempts",
    "record_attempts_one_by_one",
    "record_step",
    "remove_file",
    "run_limit_key",
    "runs_changed",
    "runs_queued_ended",
    "start_runs",
);

/// How an attempt of one job is started: its lease's deadline and expiry (from the moment
/// the claim stamps them) and the component that runs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttemptTerms {
    pub deadline_ms: i64,
    pub expires_ms: i64,
    pub digest: String,
}

/// What a host claims.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRequest<'a> {
    pub host: &'a str,
    pub limit: i64,
    /// One run instead of the most overdue: a `host run`'s own (queued), or a run this
    /// host claimed without a lease, trying again for it.
    pub run_id: Option<&'a str>,
    /// The jobs this host runs. A run of another job is claimed without a lease.
    pub terms: &'a BTreeMap<String, AttemptTerms>,
    /// Tenants whose runs are passed over: held by their quota (`quota`).
    pub paused: &'a [String],
}

/// A run a claim moved to `running`.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// As claimed: with a lease, the attempt's generation and number (`attempts`) are
    /// the new ones; without, the run is as it was, but `running`.
    pub run: RunRecord,
    /// The lease of the attempt, if the claim could take it.
    pub lease: Option<Lease>,
    /// An instant before the database stamped the lease's deadline: counted from here,
    /// the host stops an attempt no later than the database stops its writes.
    pub stamped_after: Instant,
    /// When the claim's answer came back, after the database stamped the run's
    /// `updated_at`: how long the run waited for a worker counts from here.
    pub answered_at: Instant,
}

/// A claimed run as the database returns it: the run's columns, and its lease's.
#[derive(Debug)]
pub(crate) struct ClaimedRow {
    pub run: RunRecord,
    pub lease_deadline_at: Option<i64>,
    pub lease_expires_at: Option<i64>,
}

impl<'r, R: sqlx::Row> sqlx::FromRow<'r, R> for ClaimedRow
where
    RunRecord: sqlx::FromRow<'r, R>,
    &'r str: sqlx::ColumnIndex<R>,
    Option<i64>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    fn from_row(row: &'r R) -> sqlx::Result<Self> {
        Ok(ClaimedRow {
            run: RunRecord::from_row(row)?,
            lease_deadline_at: row.try_get("lease_deadline_at")?,
            lease_expires_at: row.try_get("lease_expires_at")?,
        })
    }
}

impl ClaimedRow {
    pub(crate) fn into_claimed(self, stamped_after: Instant, answered_at: Instant) -> Claimed {
        let lease = match (
            self.lease_deadline_at,
            self.lease_expires_at,
            self.run.generation,
        ) {
            (Some(deadline_at), Some(expires_at), Some(generation)) => Some(Lease {
                job: self.run.job.clone(),
                instance: self.run.instance.clone(),
                generation,
                holder: self.run.id.clone(),
                deadline_at,
                expires_at,
            }),
            _ => None,
        };
        Claimed {
            run: self.run,
            lease,
            stamped_after,
            answered_at,
        }
    }
}

/// The row of an attempt that ended (written when it ends: a running attempt is its
/// run's status, host and generation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptEnding {
    pub seq: i64,
    pub pass: i64,
    pub attempt: i64,
    pub host: String,
    pub status: &'static str,
    pub outcome: Option<&'static str>,
    pub code: Option<&'static str>,
    pub fuel_used: Option<i64>,
    pub peak_memory: Option<i64>,
    pub duration_ms: i64,
    pub log: String,
    pub log_truncated: bool,
    /// When its guest started (the database's clock, reckoned from the claim's).
    pub started_at: i64,
}

/// What an attempt led to, for one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recording {
    pub run_id: String,
    /// The lease the attempt held (its generation fences everything below).
    pub lease: Lease,
    pub attempt: Option<AttemptEnding>,
    pub change: RunChange,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunChange {
    /// The run is over: its lease released, the follow-up queued if a kick set the lease's
    /// pending flag meanwhile. With `require_lease`, nothing changes unless the lease is
    /// still held at the attempt's generation.
    Finish {
        require_lease: bool,
        status: RunStatus,
        code: Option<&'static str>,
        error: Option<String>,
        cursor: Option<String>,
        /// The run's counters after the pass (JSON), `None`: unchanged.
        counters: Option<String>,
        pass: i64,
        failures: i64,
        follow_up: Option<Box<NewRun>>,
        report: Option<Box<NewReport>>,
    },
    /// Back to the queue after `delay_ms` (a retry, the next pass, a cancelled attempt),
    /// the lease parked for `hold_ms` so no other run takes it meanwhile.
    Requeue {
        delay_ms: i64,
        hold_ms: i64,
        pass: i64,
        cursor: Option<String>,
        /// The run's counters after the pass (JSON), `None`: unchanged.
        counters: Option<String>,
        failures: i64,
        /// The run's passes that ended `defer`, this one included.
        defers: i64,
        code: Option<&'static str>,
        error: Option<String>,
    },
    /// A claimed run that never started goes back to the queue as it was (its attempt
    /// count taken back), the lease parked for `hold_ms`.
    GiveBack { hold_ms: i64 },
}

/// Whether a `Recording` was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    Finished {
        follow_up: Option<String>,
    },
    Requeued,
    /// The lease was no longer held at the attempt's generation: nothing changed.
    LeaseLost,
    /// The run was no longer running at that generation (marked crashed meanwhile): only
    /// the attempt's row was written.
    NotRunning,
}

impl Recording {
    /// Items are applied in lease order, so two batches take lease locks in one order.
    fn lock_key(&self) -> (&str, &str) {
        (&self.lease.job, &self.lease.instance)
    }
}

impl Store {
    /// A host's notification said a run was queued for `tenant` (Postgres): the next
    /// claim takes it in turn (see [`QueuedTenants`]).
    pub fn queued_tenant_notified(&self, tenant: &str) {
        self.queued_tenants.notify(tenant);
    }

    /// Claims, leases and starts runs (see [`ClaimRequest`]), in one round trip.
    pub async fn claim_runs(&self, request: &ClaimRequest<'_>) -> Result<Vec<Claimed>> {
        let stamped_after = Instant::now();
        let rows = match &self.pool {
            Pool::Postgres(pool) => PostgresClaims { store: self, pool }.claim(request).await?,
            Pool::Sqlite(_) => self.writer().claim(request).await?,
        };
        let answered_at = Instant::now();
        Ok(rows
            .into_iter()
            .map(|row| row.into_claimed(stamped_after, answered_at))
            .collect())
    }

    /// A kick's one transaction: while a run holds the instance's lease the kick folds
    /// into its pending flag (`None`); otherwise the run is queued under its job's
    /// `max_per_tenant`, and comes back skipped with code `tenant_limit` if it was over
    /// the cap with policy `skip`, reported in the same transaction.
    pub async fn kick_run(&self, run: &NewRun) -> Result<Option<RunRecord>> {
        match &self.pool {
            Pool::Postgres(pool) => PostgresClaims { store: self, pool }.kick(run).await,
            Pool::Sqlite(_) => self.writer().kick(run).await,
        }
    }

    /// Writes down the ends of attempts, one answer per item, in the order given.
    pub async fn record_attempts(&self, items: &[Recording]) -> Vec<Result<Recorded>> {
        match &self.pool {
            Pool::Postgres(pool) => PostgresClaims { store: self, pool }.record(items).await,
            Pool::Sqlite(_) => self.writer().record(items).await,
        }
    }
}
