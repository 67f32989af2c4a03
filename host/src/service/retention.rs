//! Retention: the history older than the operator's `--retention` is deleted — finished
//! runs with their attempts, logs and ledgers, delivered reports, audit rows, and the leases of
//! instances nothing has held since — once per period
//! across the fleet, under a lease of its own (like surveillance), in bounded batches so
//! a large backlog of history never holds a long transaction. A queued or running run is
//! never touched, however old. The rows of the rates' windows that no window holds any
//! more go the same way, whether or not history is kept: a claim drops them only for the
//! job and keys it claims, so a job no longer claimed, or keys started once, would leave
//! them for ever.

use crate::queue::lease::fleet_turn;
use crate::store::{Pruned, Store, StoreError};
use std::time::Duration;

const CHORE: &str = "jobhost:retention";
/// Most runs one purge by filter (`POST /runs/purge`, `host runs purge`) deletes in one
/// transaction: a large purge is a loop of these.
pub const PURGE_BATCH: i64 = 1_000;
/// Rows of each kind deleted per transaction.
const BATCH: i64 = 500;
/// Most batches per period (the rest wait for the next).
const BATCHES: usize = 20;

pub struct Retention {
    pub store: Store,
    pub host_id: String,
    pub interval: Duration,
    /// History older than this is deleted; none: history is kept for ever.
    pub keep: Option<Duration>,
}

impl Retention {
    /// Deletes what is past the retention age, if this host holds this period's lease;
    /// what it deleted.
    pub async fn prune(&self) -> Result<Pruned, StoreError> {
        let mut total = Pruned::default();
        if !fleet_turn(&self.store, CHORE, &self.host_id, self.interval).await? {
            return Ok(total);
        }
        for _ in 0..BATCHES {
            let pruned = self.store.prune_rate_starts(BATCH).await?;
            total.rate_starts += pruned;
            if pruned < BATCH as u64 {
                break;
            }
        }
        if let Some(keep) = self.keep {
            self.prune_history(keep, &mut total).await?;
        }
        if total != Pruned::default() {
            tracing::info!(
                runs = total.runs,
                reports = total.reports,
                jobs = total.jobs,
                leases = total.leases,
                audit = total.audit,
                rate_starts = total.rate_starts,
                "pruned history past the retention age and the rates' expired windows"
            );
        }
        Ok(total)
    }

    async fn prune_history(&self, keep: Duration, total: &mut Pruned) -> Result<(), StoreError> {
        let keep_ms = i64::try_from(keep.as_millis()).unwrap_or(i64::MAX);
        for _ in 0..BATCHES {
            let pruned = self.store.prune(keep_ms, BATCH).await?;
            total.runs += pruned.runs;
            total.reports += pruned.reports;
            total.jobs += pruned.jobs;
            total.leases += pruned.leases;
            total.audit += pruned.audit;
            if [pruned.runs, pruned.reports, pruned.leases, pruned.audit]
                .iter()
                .all(|&n| n < BATCH as u64)
            {
                break;
            }
        }
        Ok(())
    }
}
