//! Queueing runs with options from outside (the API, `host start`), one or a batch in one
//! transaction: a run with a unique key under the key's row lock (migration 0030), one
//! without under its job and instance's lease row lock (it joins their live run). What a
//! held key leads to is `rules::enqueue::decide`'s; this module only takes the locks,
//! reads the holder and writes what the rule answered, so two enqueues of one key, on
//! any hosts, are ordered and leave exactly the runs the rule allows.

use super::error::{Result, StoreError};
use super::handle::Store;
use super::pool::Exclusive;
use super::records::{NewRun, RunRecord};
use crate::rules::enqueue::{Holder, Outcome, Unique, decide};
use sqlx::Connection;

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
        with_pool!(self.pool, p => {
            let mut conn = Exclusive::acquire(p).await?;
            let mut tx = conn.begin_with(self.dialect.begin_write).await?;
            let mut answers: Vec<Option<EnqueueAnswer>> = vec![None; items.len()];
            for index in order {
                let Enqueueing { run, unique, max_attempts } = &items[index];
                // The run that answers, or `None`: queue `run`.
                let answered = match unique {
                    Some(unique) => {
                        let named: String = sqlx::query_scalar(q.take_unique_key.as_str())
                            .bind(&run.job)
                            .bind(&run.tenant)
                            .bind(&unique.key)
                            .bind(&run.id)
                            .fetch_one(&mut *tx)
                            .await?;
                        let holder: Option<(String, Option<i64>, i64, i64)> = if named == run.id {
                            None
                        } else {
                            sqlx::query_as(q.unique_holder.as_str())
                                .bind(&named)
                                .fetch_optional(&mut *tx)
                                .await?
                        };
                        let now = holder.as_ref().map_or(0, |h| h.3);
                        let holder = holder.map(|(status, started_at, created_at, _)| Holder {
                            status,
                            started: started_at.is_some(),
                            created_at,
                        });
                        let changed = match decide(unique, holder.as_ref(), now) {
                            Outcome::Created => None,
                            Outcome::Joined => Some(Outcome::Joined),
                            Outcome::Replaced => {
                                let done = sqlx::query(q.replace_waiting.as_str())
                                    .bind(&named)
                                    .bind(&run.payload)
                                    .execute(&mut *tx)
                                    .await?
                                    .rows_affected();
                                Some(if done == 1 { Outcome::Replaced } else { Outcome::Joined })
                            }
                            Outcome::Debounced => {
                                let done = sqlx::query(q.debounce_waiting.as_str())
                                    .bind(&named)
                                    .bind(run.delay_ms)
                                    .execute(&mut *tx)
                                    .await?
                                    .rows_affected();
                                Some(if done == 1 { Outcome::Debounced } else { Outcome::Joined })
                            }
                        };
                        match changed {
                            Some(outcome) => Some((outcome, named)),
                            None => {
                                sqlx::query(q.name_unique_key.as_str())
                                    .bind(&run.job)
                                    .bind(&run.tenant)
                                    .bind(&unique.key)
                                    .bind(&run.id)
                                    .execute(&mut *tx)
                                    .await?;
                                None
                            }
                        }
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
            Ok(answers.into_iter().map(|a| a.expect("every item answered")).collect())
        })
    }
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
