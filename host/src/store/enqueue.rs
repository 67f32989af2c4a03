//! Queueing runs with options from outside (the API, `host start`), one or a batch in one
//! transaction: a run with a unique key under the key's row lock (migration 0030), one
//! without under its job and instance's lease row lock (it joins their live run), so two
//! enqueues of one key, on any hosts, are ordered and leave exactly the runs the rule
//! allows.
//!
//! On Postgres each item is `jobhost_enqueue_run`, the function an application's
//! `jobhost.enqueue` calls too (migration 0037): the rule is written once there, whoever
//! enqueues. On SQLite, where no application shares the transaction, what a held key
//! leads to is `rules::enqueue::decide`'s, and this module takes the locks, reads the
//! holder and writes what the rule answered; the store conformance tests hold the two
//! backends to the same outcomes.

use super::error::{Result, StoreError};
use super::handle::Store;
use super::pool::{Exclusive, Pool};
use super::queries::Queries;
use super::records::{NewRun, RunRecord};
use crate::rules::enqueue::{Holder, OnConflict, Outcome, Unique, While, decide};
use serde_json::json;
use sqlx::{Connection, SqliteConnection};

/// One item on Postgres: its outcome, the run it names, and whether the cap dropped it.
const ENQUEUE_RUN: &str = "SELECT outcome, run_id, dropped \
    FROM jobhost_enqueue_run(CAST($1 AS jsonb), CAST($2 AS jsonb))";

/// A run to queue, and its unique key if it has one.
#[derive(Debug, Clone)]
pub struct Enqueueing {
    pub run: NewRun,
    pub unique: Option<Unique>,
    /// The attempts a pass of the run it creates may use, if fewer than its job's.
    pub max_attempts: Option<u32>,
}

/// What an enqueue did, and the run it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnqueueAnswer {
    pub outcome: Outcome,
    pub run_id: String,
    /// The run it created, if its job's `max_per_tenant` recorded it skipped at once.
    pub dropped: bool,
}

impl Store {
    /// Queues `items` in one transaction, in their order: all, or (an error) none.
    pub async fn enqueue_runs(&self, items: &[Enqueueing]) -> Result<Vec<EnqueueAnswer>> {
        self.retrying(|| self.enqueue_runs_once(items)).await
    }

    async fn enqueue_runs_once(&self, items: &[Enqueueing]) -> Result<Vec<EnqueueAnswer>> {
        let q = self.q;
        // Locks are taken in one order (unique keys, then leases, each sorted), so two
        // batches over the same keys wait for each other instead of deadlocking.
        let mut order: Vec<usize> = (0..items.len()).collect();
        order.sort_by(|&a, &b| lock_of(&items[a]).cmp(&lock_of(&items[b])));
        let p = match &self.pool {
            Pool::Postgres(p) => return enqueue_on_postgres(p, items, &order).await,
            Pool::Sqlite(p) => p,
        };
        let mut conn = Exclusive::acquire(p).await?;
        let mut tx = conn.begin_with(self.dialect.begin_write).await?;
        let mut answers: Vec<Option<EnqueueAnswer>> = vec![None; items.len()];
        for index in order {
            let Enqueueing {
                run,
                unique,
                max_attempts,
            } = &items[index];
            // The run that answers, or `None`: queue `run`.
            let answered = match unique {
                Some(unique) => {
                    held_on_sqlite(
                        &mut tx,
                        q,
                        (&run.job, &run.tenant, &run.id),
                        unique,
                        &run.payload,
                        run.delay_ms,
                    )
                    .await?
                }
                None => {
                    for sql in [&q.ensure_lease, &q.lock_lease] {
                        sqlx::query(sql.as_str())
                            .bind(&run.job)
                            .bind(&run.instance)
                            .execute(&mut *tx)
                            .await?;
                    }
                    let live: Option<String> = sqlx::query_scalar(q.live_run.as_str())
                        .bind(&run.job)
                        .bind(&run.instance)
                        .fetch_optional(&mut *tx)
                        .await?;
                    live.map(|id| (Outcome::Joined, id))
                }
            };
            answers[index] = Some(match answered {
                Some((outcome, run_id)) => EnqueueAnswer {
                    outcome,
                    run_id,
                    dropped: false,
                },
                None => {
                    let queued: RunRecord =
                        super::runs::queue(&mut tx, q, q.queue_run.as_str(), run)
                            .await?
                            .ok_or(StoreError::Unreadable)?;
                    if let Some(n) = max_attempts {
                        sqlx::query(q.set_max_attempts.as_str())
                            .bind(&queued.id)
                            .bind(i64::from(*n))
                            .execute(&mut *tx)
                            .await?;
                    }
                    EnqueueAnswer {
                        outcome: Outcome::Created,
                        dropped: queued.dropped_by_limit(),
                        run_id: queued.id,
                    }
                }
            });
        }
        tx.commit().await?;
        conn.release();
        Ok(answers
            .into_iter()
            .map(|a| a.expect("every item answered"))
            .collect())
    }
}

/// The unique rule on SQLite (`decide`), inside the caller's write transaction, for run
/// `id` of `job` and `tenant`: takes the key, and answers the run that holds it (joined,
/// or the waiting run it replaced or debounced), or `None` when the key now names `id`,
/// which the caller queues. A guest's `jobs` starts (`store::family`) apply it too.
pub(super) async fn held_on_sqlite(
    conn: &mut SqliteConnection,
    q: &'static Queries,
    (job, tenant, id): (&str, &str, &str),
    unique: &Unique,
    payload: &str,
    delay_ms: i64,
) -> std::result::Result<Option<(Outcome, String)>, sqlx::Error> {
    let named: String = sqlx::query_scalar(q.take_unique_key.as_str())
        .bind(job)
        .bind(tenant)
        .bind(&unique.key)
        .bind(id)
        .fetch_one(&mut *conn)
        .await?;
    let holder: Option<(String, Option<i64>, i64, i64)> = if named == id {
        None
    } else {
        sqlx::query_as(q.unique_holder.as_str())
            .bind(&named)
            .fetch_optional(&mut *conn)
            .await?
    };
    let now = holder.as_ref().map_or(0, |h| h.3);
    let holder = holder.map(|(status, started_at, created_at, _)| Holder {
        status,
        started: started_at.is_some(),
        created_at,
    });
    let outcome = match decide(unique, holder.as_ref(), now) {
        Outcome::Created => None,
        Outcome::Joined => Some(Outcome::Joined),
        held @ (Outcome::Replaced | Outcome::Debounced) => {
            let update = match held {
                Outcome::Replaced => sqlx::query(q.replace_waiting.as_str())
                    .bind(&named)
                    .bind(payload),
                _ => sqlx::query(q.debounce_waiting.as_str())
                    .bind(&named)
                    .bind(delay_ms),
            };
            let done = update.execute(&mut *conn).await?.rows_affected();
            Some(if done == 1 { held } else { Outcome::Joined })
        }
    };
    if outcome.is_none() {
        sqlx::query(q.name_unique_key.as_str())
            .bind(job)
            .bind(tenant)
            .bind(&unique.key)
            .bind(id)
            .execute(&mut *conn)
            .await?;
    }
    Ok(outcome.map(|outcome| (outcome, named)))
}

/// The Postgres enqueue: each item through `jobhost_enqueue_run`, in lock order, in one
/// transaction.
async fn enqueue_on_postgres(
    p: &sqlx::PgPool,
    items: &[Enqueueing],
    order: &[usize],
) -> Result<Vec<EnqueueAnswer>> {
    let mut conn = Exclusive::acquire(p).await?;
    let mut tx = conn.begin().await?;
    let mut answers: Vec<Option<EnqueueAnswer>> = vec![None; items.len()];
    for &index in order {
        let Enqueueing {
            run,
            unique,
            max_attempts,
        } = &items[index];
        let (outcome, run_id, dropped): (String, String, bool) = sqlx::query_as(ENQUEUE_RUN)
            .bind(run_json(run, *max_attempts).to_string())
            .bind(unique.as_ref().map(|u| unique_json(u).to_string()))
            .fetch_one(&mut *tx)
            .await?;
        let outcome = match outcome.as_str() {
            "created" => Outcome::Created,
            "joined" => Outcome::Joined,
            "replaced" => Outcome::Replaced,
            "debounced" => Outcome::Debounced,
            _ => return Err(StoreError::Unreadable),
        };
        answers[index] = Some(EnqueueAnswer {
            outcome,
            run_id,
            dropped,
        });
    }
    tx.commit().await?;
    conn.release();
    Ok(answers
        .into_iter()
        .map(|a| a.expect("every item answered"))
        .collect())
}

/// A run as `jobhost_enqueue_run` reads it.
fn run_json(run: &NewRun, max_attempts: Option<u32>) -> serde_json::Value {
    json!({
        "id": run.id,
        "job": run.job,
        "instance": run.instance,
        "tenant": run.tenant,
        "origin": run.origin.as_str(),
        "payload": run.payload,
        "delay_ms": run.delay_ms,
        "trace_parent": run.trace_parent.map(|t| t.to_string()),
        "max_attempts": max_attempts,
    })
}

/// A unique key as `jobhost_enqueue_run` reads it.
pub(super) fn unique_json(unique: &Unique) -> serde_json::Value {
    let (hold, period_ms) = match unique.hold {
        While::Queued => ("queued", None),
        While::Active => ("active", None),
        While::UntilFinished => ("until-finished", None),
        While::Period(ms) => ("period", Some(ms)),
        While::Forever => ("forever", None),
    };
    json!({
        "key": unique.key,
        "while": hold,
        "period_ms": period_ms,
        "on_conflict": match unique.on_conflict {
            OnConflict::Keep => "keep",
            OnConflict::Replace => "replace",
            OnConflict::Debounce => "debounce",
        },
    })
}

/// The row an item locks first: its unique key's, or its job and instance's lease.
fn lock_of(item: &Enqueueing) -> (u8, &str, &str, &str) {
    match &item.unique {
        Some(u) => (
            0,
            item.run.job.as_str(),
            item.run.tenant.as_str(),
            u.key.as_str(),
        ),
        None => (1, item.run.job.as_str(), item.run.instance.as_str(), ""),
    }
}
