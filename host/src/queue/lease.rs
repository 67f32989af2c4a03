//! The lease protocol: who may run a job's instance, and which attempt's writes commit.
//!
//! A lease is a row per (job, instance) with a generation, a holder (the run), a deadline
//! and an expiry, all in database time:
//!
//! - **acquire** takes a free or expired lease at the next generation (a run's first
//!   attempt, when a host claims it);
//! - **renew** moves a held lease to the next generation with a fresh deadline (a later
//!   attempt's claim): every attempt has its own generation, so nothing an earlier attempt
//!   still has in flight can commit once a retry started;
//! - **fence**: every guest write commits in one transaction with a check that the lease
//!   is still at the attempt's generation and before its deadline (see `store::guest`);
//! - **park** keeps the lease while a run waits in the queue (backoff, next pass), with no
//!   deadline (nothing may commit meanwhile) and an expiry after its due time;
//! - **release** frees it, only at the holder's generation.
//!
//! The deadline is the attempt's timeout; the expiry adds `grace`, the time the host has
//! after a deadline to record the outcome before another host may take the lease (and
//! surveillance reports the run `crashed`).

use crate::store::{AttemptTerms, Lease, RunRecord, Store, StoreError};
use std::time::Duration;

/// Takes this period's turn of a fleet-wide chore (surveillance, collecting objects,
/// retention), so the chore runs once per period whichever host's timer fires first.
/// Whether this host has the turn.
///
/// A host takes the turn when no host took it within 0.9 × its *own* `interval`: the
/// chore runs as often as the host with the shortest interval asks, and a host with a
/// long interval that dies holding the turn keeps no other host waiting past its own.
pub async fn fleet_turn(
    store: &Store,
    chore: &str,
    host: &str,
    interval: Duration,
) -> Result<bool, StoreError> {
    store
        .take_turn(chore, host, (ms(interval) * 9 / 10).max(1))
        .await
}

#[derive(Debug, Clone, Copy)]
pub struct LeaseTerms {
    /// Time after an attempt's deadline before its lease expires.
    pub grace: Duration,
}

impl Default for LeaseTerms {
    fn default() -> Self {
        LeaseTerms {
            grace: Duration::from_secs(5),
        }
    }
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl LeaseTerms {
    /// The terms of an attempt of a job with `timeout`, claimed up to `start_within`
    /// before it starts: the deadline leaves that much room, so however late in that
    /// window the attempt starts, the host's deadline (counted from the start) is not
    /// later than the database's.
    pub fn attempt(&self, timeout: Duration, start_within: Duration, digest: &str) -> AttemptTerms {
        AttemptTerms {
            deadline_ms: ms(timeout + start_within),
            expires_ms: ms(timeout + start_within + self.grace),
            digest: digest.to_string(),
        }
    }

    /// The lease a run held for its previous attempt, as recorded on the run.
    pub fn held_by(run: &RunRecord) -> Option<Lease> {
        run.generation.map(|generation| Lease {
            job: run.job.clone(),
            instance: run.instance.clone(),
            generation,
            holder: run.id.clone(),
            deadline_at: 0,
            expires_at: 0,
        })
    }

    /// How long a parked lease stays held for a run due after `delay`: long enough for a
    /// host to claim the run and renew it.
    pub fn park_for(&self, delay: Duration, claim_slack: Duration) -> i64 {
        ms(delay + claim_slack + self.grace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_short_interval_takes_a_turn_a_long_one_still_holds() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&format!("sqlite://{}/t.db", dir.path().display()))
            .await
            .unwrap();
        let chore = "jobhost:test";
        assert!(
            fleet_turn(&store, chore, "slow", Duration::from_secs(60))
                .await
                .unwrap()
        );
        // Within the holder's own hold and the asker's: nobody else takes it.
        assert!(
            !fleet_turn(&store, chore, "fast", Duration::from_secs(60))
                .await
                .unwrap()
        );
        // A host with a shorter interval takes it once its own hold has passed since the
        // turn was taken, however long the holder meant to keep it.
        let taken_at = store.now().await.unwrap();
        while store.now().await.unwrap() - taken_at < 10 {
            tokio::task::yield_now().await;
        }
        assert!(
            fleet_turn(&store, chore, "fast", Duration::from_millis(10))
                .await
                .unwrap()
        );
        // And it runs once per its period: the slow host does not take it back at once.
        assert!(
            !fleet_turn(&store, chore, "slow", Duration::from_secs(60))
                .await
                .unwrap()
        );
    }
}
