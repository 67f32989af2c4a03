//! Time-driven work: cron schedules that queue runs, and the surveillance that finds
//! crashed runs and missed schedules.
//!
//! The decisions are pure functions of the current time (the database's clock, passed
//! in), so tests drive them with any clock they like; the loops only read the clock, call
//! them and write down what they decided.

pub mod cron;
pub mod surveillance;

use crate::service::catalog::Catalog;
use crate::service::manifest::CatchUp;
use crate::store::new_run_id;
use crate::store::{NewRun, Origin, Store, StoreError};
use cron::Cron;
use std::sync::Arc;
use tokio::sync::Notify;

/// What a job's schedule calls for at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The next fire time is still ahead.
    Wait,
    /// The job has no fire time yet: start counting from now.
    Start { next: Option<i64> },
    /// Queue a run for the tick `scheduled_for`, and move on to `next`.
    Fire {
        scheduled_for: i64,
        next: Option<i64>,
        catch_up: bool,
    },
    /// Ticks were missed and the policy is not to catch up: move on to `next`.
    Skip { next: Option<i64> },
}

pub fn decide(cron: &Cron, next_fire_at: Option<i64>, now: i64, policy: CatchUp) -> Decision {
    let Some(due) = next_fire_at else {
        return Decision::Start {
            next: cron.next_after(now),
        };
    };
    if due > now {
        return Decision::Wait;
    }
    let next = cron.next_after(now);
    // More than one tick passed since `due`: the host was down (or far behind). Queue at
    // most one run for all of them.
    let missed_several = cron.next_after(due).is_some_and(|t| t <= now);
    match (missed_several, policy) {
        (false, _) => Decision::Fire {
            scheduled_for: due,
            next,
            catch_up: false,
        },
        (true, CatchUp::One) => Decision::Fire {
            scheduled_for: due,
            next,
            catch_up: true,
        },
        (true, CatchUp::None) => Decision::Skip { next },
    }
}

pub struct Scheduler {
    store: Store,
    catalog: Arc<Catalog>,
    policy: CatchUp,
    wake: Arc<Notify>,
}

impl Scheduler {
    pub fn new(store: Store, catalog: Arc<Catalog>, policy: CatchUp, wake: Arc<Notify>) -> Self {
        Scheduler {
            store,
            catalog,
            policy,
            wake,
        }
    }

    /// Applies every scheduled job's decision at `now`. Returns the earliest next fire
    /// time. Several hosts may tick at once: each step is a compare-and-set on the job's
    /// fire time, so a tick queues one run fleet-wide.
    pub async fn tick(&self, now: i64) -> Result<Option<i64>, StoreError> {
        let mut earliest: Option<i64> = None;
        let mut fired = false;
        let disabled = self.store.disabled_tenants().await?;
        for record in self.store.list_jobs().await? {
            let Some(job) = self.catalog.get(&record.name) else {
                continue;
            };
            let Some(cron) = &job.cron else { continue };
            if record.orphaned_at.is_some() {
                continue;
            }
            let expected = record.next_fire_at;
            let decision = match decide(cron, expected, now, self.policy) {
                Decision::Fire { next, .. } if disabled.contains(&record.tenant) => {
                    tracing::info!(job = %job.spec.name, tenant = %record.tenant, "tenant disabled: skipping a scheduled fire");
                    Decision::Skip { next }
                }
                decision => decision,
            };
            let (next, runs) = match decision {
                Decision::Wait => {
                    earliest = min_some(earliest, expected);
                    continue;
                }
                Decision::Start { next } | Decision::Skip { next } => (next, Vec::new()),
                Decision::Fire {
                    scheduled_for,
                    next,
                    catch_up,
                } => {
                    if catch_up {
                        tracing::info!(job = %job.spec.name, scheduled_for, "catching up one missed tick");
                    }
                    let run = NewRun {
                        id: new_run_id(),
                        job: job.spec.name.clone(),
                        instance: crate::queue::kick::DEFAULT_INSTANCE.into(),
                        tenant: job.spec.tenant.clone(),
                        origin: Origin::Cron,
                        payload: job.spec.payload.to_string(),
                        cursor: None,
                        component_digest: Some(job.digest.clone()),
                        scheduled_for: Some(scheduled_for),
                        rerun_of: None,
                        delay_ms: 0,
                        // A fire starts a trace; a fan-out's children share it.
                        trace_parent: Some(crate::rules::trace::TraceParent::start()),
                    };
                    if job.spec.per_tenant {
                        let tenants = self.store.active_tenants().await?;
                        let occasion = crate::queue::fan_out::tick_occasion(scheduled_for);
                        (
                            next,
                            crate::queue::fan_out::children(&run, &occasion, &tenants),
                        )
                    } else {
                        (next, vec![run])
                    }
                }
            };
            if self
                .store
                .fire_schedule(&record.name, expected, next, &runs)
                .await?
                && !runs.is_empty()
            {
                fired = true;
            }
            earliest = min_some(earliest, next);
        }
        if fired {
            self.wake.notify_one();
        }
        Ok(earliest)
    }
}

fn min_some(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono_tz::Tz;

    const MIN: i64 = 60_000;

    fn every_minute() -> Cron {
        Cron::parse("* * * * *", Tz::UTC).unwrap()
    }

    #[test]
    fn starts_counting_then_fires_on_time() {
        let c = every_minute();
        let now = 100 * MIN + 5_000;
        assert_eq!(
            decide(&c, None, now, CatchUp::One),
            Decision::Start {
                next: Some(101 * MIN)
            }
        );
        assert_eq!(
            decide(&c, Some(101 * MIN), now, CatchUp::One),
            Decision::Wait
        );
        assert_eq!(
            decide(&c, Some(101 * MIN), 101 * MIN + 10, CatchUp::One),
            Decision::Fire {
                scheduled_for: 101 * MIN,
                next: Some(102 * MIN),
                catch_up: false
            }
        );
    }

    #[test]
    fn after_downtime_fires_once_or_skips_by_policy() {
        let c = every_minute();
        let back = 600 * MIN + 30_000; // ten hours later
        assert_eq!(
            decide(&c, Some(101 * MIN), back, CatchUp::One),
            Decision::Fire {
                scheduled_for: 101 * MIN,
                next: Some(601 * MIN),
                catch_up: true
            }
        );
        assert_eq!(
            decide(&c, Some(101 * MIN), back, CatchUp::None),
            Decision::Skip {
                next: Some(601 * MIN)
            }
        );
        // After that one decision the job is caught up: the next tick is in the future.
        assert_eq!(
            decide(&c, Some(601 * MIN), back, CatchUp::One),
            Decision::Wait
        );
    }
}
