//! The rows of jobs that start jobs: runs a guest's `jobs` calls queue (inside its
//! transaction or in a fenced write of the host's own), a run's result, a parent's wait,
//! and what the family sweep reads. What a call may start, and what a family's state
//! leads to, is decided in `capability::jobs` and `crate::runs::family`; this module only reads
//! and writes.
//!
//! Inside a guest's transaction the runs are inserted by the statements here (SQLite) or
//! by `jobhost_start_runs` (Postgres), which the job's role may call: they commit with the
//! guest's rows, fenced, or not at all. A run with a unique key (a start's `unique`, or
//! an earlier guest's `dedup-key`) follows the one unique rule of every start: on
//! SQLite `store::enqueue`'s, on Postgres `jobhost_enqueue_run`, which `jobhost_start_runs`
//! calls for each run after its parent's check.

use super::enqueue::EnqueueAnswer;
use super::error::Result;
use super::guest::GuestDbError;
use super::handle::Store;
use super::pool::Exclusive;
use super::queries::Queries;
use super::records::Fence;
use super::records::RunRecord;
use super::reports::report_if_dropped;
use crate::rules::enqueue::{Outcome, Unique};
use serde::Serialize;
use sqlx::{Connection, SqliteConnection};

/// The attempt whose call queues runs: they record it as their parent, and are queued
/// only while it runs its pass.
#[derive(Debug, Clone)]
pub struct ParentLink {
    pub run_id: String,
    pub generation: i64,
    pub pass: i64,
    pub attempt: i64,
}

/// A run a guest's call queues.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ChildRun {
    pub id: String,
    pub job: String,
    pub instance: String,
    pub tenant: String,
    /// `child`, `kick` or `event`.
    pub origin: &'static str,
    pub payload: String,
    /// Due this many milliseconds from now; negative for a run claimed ahead (priority).
    pub delay_ms: i64,
    pub trace_parent: Option<String>,
    pub parent_attempt: i64,
    /// 1: neither waited for nor cancelled with its parent.
    pub detached: i64,
    /// The event, for a run an `emit` queued.
    pub event: Option<String>,
    /// Attempts a pass of the run may use, when fewer than its job's.
    pub max_attempts: Option<u32>,
    /// Its unique key, by which it may join (or change) the run that holds the key.
    #[serde(skip)]
    pub unique: Option<Unique>,
}

/// Runs to queue for one parent, in one write.
#[derive(Debug, Clone)]
pub struct Enqueue {
    pub parent: ParentLink,
    pub runs: Vec<ChildRun>,
}

impl Enqueue {
    /// The runs as `jobhost_start_runs` reads them, each with its `unique` as
    /// `jobhost_enqueue_run` does.
    fn json(&self) -> String {
        let runs: Vec<serde_json::Value> = self
            .runs
            .iter()
            .map(|run| {
                let mut value = serde_json::to_value(run).expect("a run serialises");
                value["unique"] = run
                    .unique
                    .as_ref()
                    .map_or(serde_json::Value::Null, super::enqueue::unique_json);
                value
            })
            .collect();
        serde_json::Value::Array(runs).to_string()
    }

    fn any_attached(&self) -> bool {
        self.runs.iter().any(|r| r.detached == 0)
    }
}

crate::record! {
    /// A child's state, as its waiting parent reads it.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize)]
    pub struct ChildState {
        pub id: String,
        pub job: String,
        pub instance: String,
        pub status: String,
        pub last_code: Option<String>,
        pub result: Option<String>,
    }
}

crate::record! {
    /// A run the family sweep looks after (`family` = 1).
    #[derive(Debug, Clone)]
    pub struct FamilyRow {
        pub id: String,
        pub status: String,
        pub pass: i64,
        pub wait_pass: Option<i64>,
        pub wait_policy: Option<String>,
    }
}

/// Applies `write` on a SQLite connection inside an open write transaction (a guest's,
/// fenced as it commits, or the host's own). Per run, what happened (a run whose id
/// exists already, queued by an earlier attempt of the pass, is `joined`); `None` when
/// the parent no longer runs its pass (nothing inserted).
pub(crate) async fn apply_sqlite(
    conn: &mut SqliteConnection,
    q: &'static Queries,
    write: &Enqueue,
) -> std::result::Result<Option<Vec<EnqueueAnswer>>, sqlx::Error> {
    let parent = &write.parent;
    let running: Option<i64> = sqlx::query_scalar(q.parent_running.as_str())
        .persistent(false)
        .bind(&parent.run_id)
        .bind(parent.generation)
        .bind(parent.pass)
        .fetch_optional(&mut *conn)
        .await?;
    if running.is_none() {
        return Ok(None);
    }
    let mut answers = Vec::with_capacity(write.runs.len());
    for run in &write.runs {
        let earlier: Option<i64> = sqlx::query_scalar(q.run_exists.as_str())
            .bind(&run.id)
            .fetch_optional(&mut *conn)
            .await?;
        let held = match (&run.unique, earlier) {
            (_, Some(_)) => Some((Outcome::Joined, run.id.clone())),
            (Some(unique), None) => {
                super::enqueue::held_on_sqlite(
                    conn,
                    q,
                    (&run.job, &run.tenant, &run.id),
                    unique,
                    &run.payload,
                    run.delay_ms,
                )
                .await?
            }
            (None, None) => None,
        };
        if let Some((outcome, run_id)) = held {
            answers.push(EnqueueAnswer {
                outcome,
                run_id,
                dropped: false,
            });
            continue;
        }
        let row: Option<RunRecord> = sqlx::query_as(q.insert_child_run.as_str())
            .bind(&run.id)
            .bind(&run.job)
            .bind(&run.instance)
            .bind(&run.tenant)
            .bind(run.origin)
            .bind(&run.payload)
            .bind(run.delay_ms)
            .bind(&run.trace_parent)
            .bind(&parent.run_id)
            .bind(run.parent_attempt)
            .bind(parent.pass)
            .bind(run.detached)
            .bind(&run.event)
            .fetch_optional(&mut *conn)
            .await?;
        // Dropped by its job's `max_per_tenant`: reported as an API start's would be.
        report_if_dropped::<sqlx::Sqlite>(&mut *conn, q, row.as_ref()).await?;
        if let (Some(n), Some(_)) = (run.max_attempts, &row) {
            sqlx::query(q.set_max_attempts.as_str())
                .bind(&run.id)
                .bind(i64::from(n))
                .execute(&mut *conn)
                .await?;
        }
        answers.push(EnqueueAnswer {
            outcome: match row {
                Some(_) => Outcome::Created,
                None => Outcome::Joined,
            },
            dropped: row.as_ref().is_some_and(RunRecord::dropped_by_limit),
            run_id: run.id.clone(),
        });
    }
    if write.any_attached() {
        sqlx::query(q.mark_family.as_str())
            .persistent(false)
            .bind(&parent.run_id)
            .execute(&mut *conn)
            .await?;
    }
    Ok(Some(answers))
}

/// The call that applies `write` on Postgres, in the calling transaction, and its
/// arguments: the parent, its generation and pass, the runs as JSON. It answers, as
/// JSON text, an array of `[outcome, run_id, dropped]` in the runs' order, or NULL.
pub(crate) const POSTGRES_ENQUEUE: &str =
    "SELECT CAST(jobhost_start_runs($1, $2, $3, CAST($4 AS jsonb)) AS text)";

/// What Postgres answered per run of `write` (`None`: the parent no longer ran its pass),
/// or `Err` for an answer that does not read as one per run.
pub(crate) fn answers_of(
    write: &Enqueue,
    answered: Option<String>,
) -> std::result::Result<Option<Vec<EnqueueAnswer>>, ()> {
    let Some(text) = answered else {
        return Ok(None);
    };
    let rows: Vec<(String, String, bool)> = serde_json::from_str(&text).map_err(|_| ())?;
    if rows.len() != write.runs.len() {
        return Err(());
    }
    rows.into_iter()
        .map(|(outcome, run_id, dropped)| {
            let outcome = match outcome.as_str() {
                "created" => Outcome::Created,
                "joined" => Outcome::Joined,
                "replaced" => Outcome::Replaced,
                "debounced" => Outcome::Debounced,
                _ => return Err(()),
            };
            Ok(EnqueueAnswer {
                outcome,
                run_id,
                dropped,
            })
        })
        .collect::<std::result::Result<Vec<_>, ()>>()
        .map(Some)
}

/// The arguments of [`POSTGRES_ENQUEUE`].
pub(crate) fn postgres_arguments(write: &Enqueue) -> (String, i64, i64, String) {
    let parent = &write.parent;
    (
        parent.run_id.clone(),
        parent.generation,
        parent.pass,
        write.json(),
    )
}

impl Store {
    /// Queues `write`'s runs in a transaction of its own, fenced by the attempt's lease.
    /// `Err(LeaseLost)` when the lease was lost or the parent no longer runs its pass
    /// (nothing queued).
    pub async fn enqueue_fenced(
        &self,
        fence: &Fence,
        write: &Enqueue,
    ) -> std::result::Result<Vec<EnqueueAnswer>, GuestDbError> {
        let queued = self
            .retrying(|| self.enqueue_fenced_once(fence, write))
            .await
            .map_err(|_| GuestDbError::Unavailable)?;
        queued.ok_or(GuestDbError::LeaseLost)
    }

    async fn enqueue_fenced_once(
        &self,
        fence: &Fence,
        write: &Enqueue,
    ) -> Result<Option<Vec<EnqueueAnswer>>> {
        let q = self.q;
        match &self.pool {
            super::pool::Pool::Sqlite(p) => {
                let mut conn = Exclusive::acquire(p).await?;
                let mut tx = conn.begin_with(self.dialect.begin_write).await?;
                let held = bind_fence(sqlx::query(q.fence.as_str()), fence)
                    .fetch_optional(&mut *tx)
                    .await?;
                let inserted = match held {
                    Some(_) => apply_sqlite(&mut tx, q, write).await?,
                    None => None,
                };
                match inserted {
                    Some(_) => tx.commit().await?,
                    None => tx.rollback().await?,
                }
                conn.release();
                Ok(inserted)
            }
            super::pool::Pool::Postgres(p) => {
                let (parent, generation, pass, runs) = postgres_arguments(write);
                let answered = self
                    .fenced_postgres(p, fence, async |conn| {
                        sqlx::query_scalar::<_, Option<String>>(POSTGRES_ENQUEUE)
                            .bind(&parent)
                            .bind(generation)
                            .bind(pass)
                            .bind(&runs)
                            .fetch_one(conn)
                            .await
                    })
                    .await?;
                match answered {
                    None => Ok(None),
                    Some(answered) => {
                        answers_of(write, answered).map_err(|()| super::StoreError::Unreadable)
                    }
                }
            }
        }
    }

    /// Sets run `run_id`'s result while its attempt at `generation` runs, fenced by the
    /// attempt's lease: false when the lease was lost (nothing set).
    pub async fn set_result_fenced(
        &self,
        fence: &Fence,
        run_id: &str,
        value: &str,
    ) -> Result<bool> {
        let sql = self.q.set_result.as_str();
        self.fenced_run_update(fence, sql, run_id, value).await
    }

    /// Records that run `run_id`'s pass waits for its children with `policy`, fenced.
    pub async fn wait_for_children_fenced(
        &self,
        fence: &Fence,
        run_id: &str,
        policy: &str,
    ) -> Result<bool> {
        let sql = self.q.wait_for_children.as_str();
        self.fenced_run_update(fence, sql, run_id, policy).await
    }

    /// One update of the running run `$5` at generation `$3` with value `$6`, in one
    /// statement with the lease check (`$1`..`$4`) inside.
    pub(super) async fn fenced_run_update(
        &self,
        fence: &Fence,
        sql: &'static str,
        run_id: &str,
        value: &str,
    ) -> Result<bool> {
        self.retrying(|| async {
            let changed = with_pool!(self.pool, p => bind_fence(sqlx::query(sql), fence)
                .bind(run_id)
                .bind(value)
                .execute(p)
                .await?
                .rows_affected());
            Ok(changed == 1)
        })
        .await
    }

    /// A page of run `parent`'s attached children started by its pass `pass`, in id
    /// order after `after`.
    pub async fn children(
        &self,
        parent: &str,
        pass: i64,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<ChildState>> {
        let q = &self.q.children_page;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(parent).bind(pass).bind(after.unwrap_or("")).bind(limit)
            .fetch_all(p).await?))
    }

    /// How run `parent`'s attached children started by pass `pass` stand: (status,
    /// count).
    pub async fn children_tally(&self, parent: &str, pass: i64) -> Result<Vec<(String, i64)>> {
        let q = &self.q.children_tally;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(parent).bind(pass).fetch_all(p).await?))
    }

    /// Tenant `tenant`'s queued runs, counted up to `tenant_cap`, and job `job`'s for it,
    /// up to `job_cap`.
    pub async fn queued_counts(
        &self,
        tenant: &str,
        job: &str,
        tenant_cap: u64,
        job_cap: u64,
    ) -> Result<(i64, i64)> {
        let q = &self.q.queued_counts;
        let cap = |c: u64| i64::try_from(c).unwrap_or(i64::MAX);
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(tenant).bind(job).bind(cap(tenant_cap)).bind(cap(job_cap))
            .fetch_one(p).await?))
    }

    /// How many ancestors run `id` has, counted up to `most` and one more.
    pub async fn family_depth(&self, id: &str, most: i64) -> Result<i64> {
        let q = &self.q.family_depth;
        Ok(with_pool!(self.reader, p => sqlx::query_scalar(q.as_str())
            .bind(id).bind(most).fetch_one(p).await?))
    }

    /// Each tenant's queued runs.
    pub async fn queued_by_tenant(&self) -> Result<Vec<(String, i64)>> {
        let q = &self.q.queued_by_tenant;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str()).fetch_all(p).await?))
    }

    /// Up to `limit` runs the family sweep looks after.
    pub async fn family_rows(&self, limit: i64) -> Result<Vec<FamilyRow>> {
        let q = &self.q.family_rows;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(limit).fetch_all(p).await?))
    }

    /// Up to `limit` unfinished attached children of run `parent`, of any pass.
    pub async fn unfinished_children(&self, parent: &str, limit: i64) -> Result<Vec<RunRecord>> {
        let q = &self.q.unfinished_children;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(parent).bind(limit).fetch_all(p).await?))
    }

    /// Wakes the waiting run `id` (its next pass due now); false if it was not waiting.
    pub async fn wake_parent(&self, id: &str) -> Result<bool> {
        let q = &self.q.wake_parent;
        let changed = with_pool!(self.pool, p => sqlx::query(q.as_str())
            .bind(id).execute(p).await?.rows_affected());
        Ok(changed == 1)
    }

    /// Leaves run `id` to itself: it ended, and, if it takes its children with it (it
    /// failed, crashed or was cancelled), none is left unfinished — as the row is now, not
    /// as the sweep read it.
    pub async fn family_settled(&self, id: &str) -> Result<()> {
        let q = &self.q.family_settled;
        with_pool!(self.pool, p => {
            sqlx::query(q.as_str()).bind(id).execute(p).await?;
        });
        Ok(())
    }
}

/// Binds an attempt's fence as `$1`..`$4`.
fn bind_fence<'q, DB>(
    query: sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments>,
    fence: &'q Fence,
) -> sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments>
where
    DB: sqlx::Database,
    for<'a> &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    i64: for<'a> sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    query
        .bind(fence.job.as_str())
        .bind(fence.instance.as_str())
        .bind(fence.generation)
        .bind(fence.holder.as_str())
}
