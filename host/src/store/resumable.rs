//! The rows of resumable runs: a pass's step ledger and its end (`ProgressWrite`), a job
//! and instance's live run, and the candidates of a bounded sweep (`host drive`).
//!
//! A `ProgressWrite` commits inside a guest's transaction (on SQLite by the statements
//! here, on Postgres by the functions of migration 0005, which the job's role may call),
//! or — a step recorded on its own — in a fenced transaction of the host's own.

use super::error::Result;
use super::handle::Store;
use super::queries::Queries;
use super::records::Fence;
use super::records::{DueCandidate, ProgressWrite, StepFailureRecord, StepRecord};
use sqlx::SqliteConnection;

/// Applies a `ProgressWrite` on a SQLite connection inside an open write transaction (a
/// guest's, which checks the lease as it commits). Whether it changed a row.
pub(crate) async fn apply_sqlite(
    conn: &mut SqliteConnection,
    q: &'static Queries,
    write: &ProgressWrite,
) -> std::result::Result<bool, sqlx::Error> {
    let changed = match write {
        ProgressWrite::Step {
            run_id,
            pass,
            name,
            result,
            generation,
        } => sqlx::query(q.record_step.as_str())
            .persistent(false)
            .bind(run_id)
            .bind(pass)
            .bind(name)
            .bind(result)
            .bind(generation)
            .execute(&mut *conn)
            .await?
            .rows_affected(),
        ProgressWrite::EndPass {
            run_id,
            generation,
            pass,
            cursor,
            counters,
            done,
        } => sqlx::query(q.end_pass.as_str())
            .persistent(false)
            .bind(run_id)
            .bind(generation)
            .bind(pass)
            .bind(cursor)
            .bind(counters)
            .bind(i64::from(*done))
            .execute(&mut *conn)
            .await?
            .rows_affected(),
    };
    Ok(changed == 1)
}

impl Store {
    /// The live (queued or running) run of `job` and `instance`, if any.
    pub async fn live_run(&self, job: &str, instance: &str) -> Result<Option<String>> {
        let q = &self.q.live_run;
        Ok(with_pool!(self.reader, p => sqlx::query_scalar(q.as_str())
            .bind(job).bind(instance).fetch_optional(p).await?))
    }

    /// Due runs in claim order after `after` (a due time and a [`DueCandidate::position`];
    /// `(i64::MIN, "")` for the first page): a page of candidates for a bounded sweep, read
    /// without claiming them.
    pub async fn due_candidates(
        &self,
        after: &(i64, String),
        limit: i64,
    ) -> Result<Vec<DueCandidate>> {
        let q = &self.q.due_candidates;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(after.0)
            .bind(after.1.as_str())
            .bind(limit)
            .fetch_all(p)
            .await?))
    }

    /// The results recorded in a pass's ledger, by step name.
    pub async fn pass_steps(&self, run_id: &str, pass: i64) -> Result<Vec<(String, String)>> {
        let q = &self.q.pass_steps;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(run_id)
            .bind(pass)
            .fetch_all(p)
            .await?))
    }

    /// A run's ledger, for operators: the steps its current (or last) pass recorded.
    pub async fn run_steps(&self, run_id: &str) -> Result<Vec<StepRecord>> {
        let q = &self.q.run_steps;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(run_id)
            .fetch_all(p)
            .await?))
    }

    /// Notes that an attempt of `run_id`'s pass `pass` failed (`code`, `message`) after
    /// reaching `names`: each one it did not record counts one more failed attempt, with
    /// this failure its last.
    pub async fn note_step_failures(
        &self,
        run_id: &str,
        pass: i64,
        names: &[String],
        code: &str,
        message: Option<&str>,
    ) -> Result<()> {
        let q = &self.q.note_step_failure;
        for name in names {
            with_pool!(self.pool, p => {
                sqlx::query(q.as_str())
                    .bind(run_id)
                    .bind(pass)
                    .bind(name)
                    .bind(code)
                    .bind(message)
                    .execute(p)
                    .await?;
            });
        }
        Ok(())
    }

    /// The steps of a run that attempts failed in without recording them, every pass's.
    pub async fn run_step_failures(&self, run_id: &str) -> Result<Vec<StepFailureRecord>> {
        let q = &self.q.run_step_failures;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(run_id)
            .fetch_all(p)
            .await?))
    }

    /// Records a step's result in a transaction of its own, fenced by the attempt's
    /// lease: false when the lease was lost (nothing recorded).
    pub async fn record_step_fenced(
        &self,
        fence: &Fence,
        run_id: &str,
        pass: i64,
        name: &str,
        result: &str,
    ) -> Result<bool> {
        self.retrying(|| self.record_step_fenced_once(fence, run_id, pass, name, result))
            .await
    }

    async fn record_step_fenced_once(
        &self,
        fence: &Fence,
        run_id: &str,
        pass: i64,
        name: &str,
        result: &str,
    ) -> Result<bool> {
        let q = self.q;
        let p = match &self.pool {
            // One statement with the lease check inside: SQLite's write lock makes the
            // check and the insert one step.
            super::pool::Pool::Sqlite(p) => {
                let recorded = sqlx::query(q.record_step_fenced.as_str())
                    .bind(&fence.job)
                    .bind(&fence.instance)
                    .bind(fence.generation)
                    .bind(&fence.holder)
                    .bind(run_id)
                    .bind(pass)
                    .bind(name)
                    .bind(result)
                    .execute(p)
                    .await?
                    .rows_affected();
                return Ok(recorded == 1);
            }
            super::pool::Pool::Postgres(p) => p,
        };
        let recorded = self
            .fenced_postgres(p, fence, async |conn| {
                sqlx::query(q.record_step.as_str())
                    .bind(run_id)
                    .bind(pass)
                    .bind(name)
                    .bind(result)
                    .bind(fence.generation)
                    .execute(conn)
                    .await
            })
            .await?;
        Ok(recorded.is_some())
    }
}
