//! Retention: the history older than the operator's `--retention` is deleted — finished
//! runs with their attempts, logs and ledgers, delivered reports, and the leases of
//! instances nothing has held since — once per period
//! across the fleet, under a lease of its own (like surveillance), in bounded batches so
//! a large backlog of history never holds a long transaction. A queued or running run is
//! never touched, however old.

use crate::queue::lease::fleet_turn;
use crate::store::{Pruned, Store, StoreError};
use std::time::Duration;

const CHORE: &str = "jobhost:retention";
/// Rows of each kind deleted per transaction.
const BATCH: i64 = 500;
/// Most batches per period (the rest wait for the next).
const BATCHES: usize = 20;

pub struct Retention {
    pub store: Store,
    pub host_id: String,
    pub interval: Duration,
    /// History older than this is deleted.
    pub keep: Duration,
}

impl Retention {
    /// Deletes what is past the retention age, if this host holds this period's lease;
    /// what it deleted.
    pub async fn prune(&self) -> Result<Pruned, StoreError> {
        let mut total = Pruned::default();
        if !fleet_turn(&self.store, CHORE, &self.host_id, self.interval).await? {
            return Ok(total);
        }
        let keep_ms = i64::try_from(self.keep.as_millis()).unwrap_or(i64::MAX);
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
        if total != Pruned::default() {
            tracing::info!(
                runs = total.runs,
                reports = total.reports,
                jobs = total.jobs,
                leases = total.leases,
                audit = total.audit,
                "pruned history past the retention age"
            );
        }
        Ok(total)
    }
}
