//! A mount's limits on its calls, across every host and job: `rate` (calls per period)
//! and `concurrency` (calls in flight), with `max_wait`, how long a call may wait for
//! them. The counters live in the database (`store::mount_limits`), so every host sharing
//! it keeps the same limits.
//!
//! A call takes a slot of the concurrency first, waiting for one while none is free, then
//! reserves its time of the rate and sleeps until it: calls leave spaced evenly, one per
//! `period / count`, so no period sees more than `count` (no burst). A call whose time is
//! further off than it may wait reserves nothing and is refused at once; one that found no
//! slot by then is refused then. Either way nothing was sent (`LinkError::RateLimited`).
//! A slot is freed as the call ends, or dropped (the deadline, a cancel); a host that
//! crashed mid-call leaves slots that expire once the call could no longer be running.

use super::LinkError;
use crate::rules::units::Rate;
use crate::store::Store;
use serde::{Deserialize, Serialize};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// How long a call may wait for its mount's limits unless the mount says (`max_wait`):
/// long enough to ride out a burst of a few hundred calls a second, short enough that a
/// job deferring its pass does better than waiting.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(5);
/// How long past its call's own bound a slot stays held, should its host stop freeing it.
const SLOT_GRACE: Duration = Duration::from_secs(5);
/// The first and the longest pause between two looks for a free slot.
const POLL_FIRST: Duration = Duration::from_millis(5);
const POLL_MAX: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountLimits {
    pub rate: Option<Rate>,
    pub concurrency: Option<NonZeroU32>,
    #[serde(with = "crate::rules::units::serde_duration")]
    pub max_wait: Duration,
}

impl Default for MountLimits {
    fn default() -> Self {
        MountLimits {
            rate: None,
            concurrency: None,
            max_wait: DEFAULT_MAX_WAIT,
        }
    }
}

/// What a mount's calls met at its limits on this host since it started (`/metrics`).
#[derive(Debug, Default)]
pub struct MountStats {
    waited: AtomicU64,
    wait_us: AtomicU64,
    refused: AtomicU64,
}

/// [`MountStats`] read once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MountCounts {
    /// Calls that waited for a slot or their time, then went.
    pub waited: u64,
    /// The time calls waited, those refused included.
    pub wait: Duration,
    /// Calls refused `rate-limited`.
    pub refused: u64,
}

impl MountStats {
    pub fn counts(&self) -> MountCounts {
        MountCounts {
            waited: self.waited.load(Ordering::Relaxed),
            wait: Duration::from_micros(self.wait_us.load(Ordering::Relaxed)),
            refused: self.refused.load(Ordering::Relaxed),
        }
    }

    /// A call that waited `wait`, then went (or was refused).
    fn waited(&self, wait: Duration, refused: bool) {
        let us = u64::try_from(wait.as_micros()).unwrap_or(u64::MAX);
        self.wait_us.fetch_add(us, Ordering::Relaxed);
        let counter = if refused { &self.refused } else { &self.waited };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// A call let through its mount's limits; it holds its slot until [`Admitted::end`] (or
/// until it is dropped).
#[must_use]
pub struct Admitted {
    slot: Option<Slot>,
}

impl Admitted {
    /// The call ended: its slot is free for the next.
    pub async fn end(mut self) {
        if let Some(mut slot) = self.slot.take() {
            slot.free().await;
        }
    }
}

struct Slot {
    store: Store,
    mount: String,
    number: i64,
    holder: String,
    freed: bool,
}

impl Slot {
    async fn free(&mut self) {
        self.freed = true;
        if let Err(error) = self
            .store
            .free_mount_slot(&self.mount, self.number, &self.holder)
            .await
        {
            // It expires by itself: the limit is only stricter meanwhile.
            tracing::warn!(code = "driver_failed", mount = %self.mount, error = %error, "a mount's slot was not freed");
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.freed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut slot = Slot {
            store: self.store.clone(),
            mount: std::mem::take(&mut self.mount),
            number: self.number,
            holder: std::mem::take(&mut self.holder),
            freed: false,
        };
        self.freed = true;
        runtime.spawn(async move { slot.free().await });
    }
}

/// Lets one call of `mount` through its limits, waiting while they hold it, until the
/// earlier of `max_wait` from now and `deadline` (the attempt's); `call_bound` is how long
/// the call itself may then take. `Err(RateLimited)` when the limits held it longer.
pub async fn admit(
    store: &Store,
    mount: &str,
    limits: &MountLimits,
    stats: &MountStats,
    deadline: Instant,
    call_bound: Duration,
) -> Result<Admitted, LinkError> {
    if limits.rate.is_none() && limits.concurrency.is_none() {
        return Ok(Admitted { slot: None });
    }
    let start = Instant::now();
    let until = start
        .checked_add(limits.max_wait)
        .map_or(deadline, |waited| deadline.min(waited));
    let refused = |stats: &MountStats| {
        stats.waited(start.elapsed(), true);
        Err(LinkError::RateLimited)
    };
    let mut admitted = Admitted { slot: None };
    // Whether the call waited at all: one that found a slot and its time free did not.
    let mut slept = false;
    if let Some(concurrency) = limits.concurrency {
        let holder = crate::store::new_run_id();
        let hold = limits
            .max_wait
            .saturating_add(call_bound)
            .saturating_add(SLOT_GRACE);
        let hold_ms = i64::try_from(hold.as_millis()).unwrap_or(i64::MAX);
        let mut pause = POLL_FIRST;
        loop {
            let taken = store
                .take_mount_slot(mount, i64::from(concurrency.get()), &holder, hold_ms)
                .await?;
            if let Some(number) = taken {
                admitted.slot = Some(Slot {
                    store: store.clone(),
                    mount: mount.to_string(),
                    number,
                    holder,
                    freed: false,
                });
                break;
            }
            if Instant::now() + pause > until {
                return refused(stats);
            }
            tokio::time::sleep(pause).await;
            slept = true;
            pause = (pause * 2).min(POLL_MAX);
        }
    }
    if let Some(rate) = limits.rate {
        let micros = |d: Duration| i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
        let left = until.saturating_duration_since(Instant::now());
        let reserved = store
            .reserve_mount_call(mount, micros(rate.interval()), micros(left))
            .await?;
        match reserved {
            Some(wait_us) if wait_us > 0 => {
                tokio::time::sleep(Duration::from_micros(wait_us.unsigned_abs())).await;
                slept = true;
            }
            Some(_) => {}
            None => {
                if let Some(mut slot) = admitted.slot.take() {
                    slot.free().await;
                }
                return refused(stats);
            }
        }
    }
    if slept {
        stats.waited(start.elapsed(), false);
    }
    Ok(admitted)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn store(dir: &std::path::Path) -> Store {
        Store::open(&format!("sqlite://{}/t.db", dir.display()))
            .await
            .unwrap()
    }

    fn limits(rate: Option<&str>, concurrency: Option<u32>, max_wait_ms: u64) -> MountLimits {
        MountLimits {
            rate: rate.map(|r| crate::rules::units::parse_rate(r).unwrap()),
            concurrency: concurrency.and_then(NonZeroU32::new),
            max_wait: Duration::from_millis(max_wait_ms),
        }
    }

    #[tokio::test]
    async fn a_call_waits_for_a_slot_until_max_wait_then_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path()).await;
        let stats = MountStats::default();
        let one = limits(None, Some(1), 100);
        let far = Instant::now() + Duration::from_secs(60);
        let bound = Duration::from_secs(1);
        let first = admit(&store, "api", &one, &stats, far, bound)
            .await
            .unwrap();
        let begun = Instant::now();
        let second = admit(&store, "api", &one, &stats, far, bound).await;
        assert!(matches!(second, Err(LinkError::RateLimited)));
        assert!(
            begun.elapsed() >= Duration::from_millis(50),
            "it waited first"
        );
        // The attempt's deadline bounds the wait too.
        let soon = Instant::now() + Duration::from_millis(10);
        let long = limits(None, Some(1), 60_000);
        let third = admit(&store, "api", &long, &stats, soon, bound).await;
        assert!(matches!(third, Err(LinkError::RateLimited)));
        first.end().await;
        let fourth = admit(&store, "api", &one, &stats, far, bound)
            .await
            .unwrap();
        drop(fourth);
        // A dropped call frees its slot too (a task does, as it drops).
        tokio::time::sleep(Duration::from_millis(200)).await;
        admit(&store, "api", &one, &stats, far, bound)
            .await
            .unwrap()
            .end()
            .await;
        let counts = stats.counts();
        assert_eq!((counts.waited, counts.refused), (0, 2), "{counts:?}");
    }

    #[tokio::test]
    async fn a_rate_spaces_calls_and_refuses_at_once_what_would_wait_too_long() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path()).await;
        let stats = MountStats::default();
        let far = Instant::now() + Duration::from_secs(60);
        let bound = Duration::from_secs(1);
        let paced = limits(Some("10/s"), None, 1_000);
        admit(&store, "api", &paced, &stats, far, bound)
            .await
            .unwrap()
            .end()
            .await;
        let begun = Instant::now();
        admit(&store, "api", &paced, &stats, far, bound)
            .await
            .unwrap()
            .end()
            .await;
        assert!(
            begun.elapsed() >= Duration::from_millis(80),
            "the second waited its turn"
        );
        let slow = limits(Some("1/h"), None, 1_000);
        admit(&store, "slow", &slow, &stats, far, bound)
            .await
            .unwrap()
            .end()
            .await;
        let begun = Instant::now();
        let refused = admit(&store, "slow", &slow, &stats, far, bound).await;
        assert!(matches!(refused, Err(LinkError::RateLimited)));
        assert!(
            begun.elapsed() < Duration::from_millis(500),
            "refused without waiting"
        );
        let counts = stats.counts();
        assert_eq!((counts.waited, counts.refused), (1, 1), "{counts:?}");
        // Without limits, nothing is read or written.
        let none = MountLimits::default();
        admit(&store, "free", &none, &stats, far, bound)
            .await
            .unwrap()
            .end()
            .await;
        assert_eq!(stats.counts().waited, 1);
    }
}
