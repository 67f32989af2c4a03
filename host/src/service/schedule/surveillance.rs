//! The periodic check of every job: runs whose host stopped renewing their lease are
//! marked `crashed` (once) and rerun; schedules that have not succeeded within twice
//! their period are reported missed (once per period).
//!
//! One host of the fleet runs each check: it first takes a lease of its own, for less
//! than the interval, so the check happens once per period whoever's timer fires first.

use super::cron::Cron;
use crate::rules::failure::FailureCode;
use crate::service::catalog::Catalog;
use crate::store::new_run_id;
use crate::store::{Crash, LostRun, NewReport, NewRun, Origin, ReportKind, Store, StoreError};
use std::sync::Arc;
use std::time::Duration;

const CHORE: &str = "jobhost:surveillance";

/// Whether a schedule counts as missed at `now`: no success for twice its period, and
/// not already reported within the last period.
pub fn is_missed(now: i64, last_ok: i64, period: i64, reported_at: Option<i64>) -> bool {
    now - last_ok > 2 * period && reported_at.is_none_or(|r| now - r >= period)
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Findings {
    /// Whether this host ran the check (another host may hold this period's lease).
    pub ran: bool,
    pub crashed: usize,
    pub missed: usize,
}

pub struct Surveillance {
    pub store: Store,
    /// The jobs this host serves (their payloads for follow-up runs); none for a sweep by
    /// a command that serves nothing.
    pub catalog: Option<Arc<Catalog>>,
    pub host_id: String,
    pub interval: Duration,
    /// A run counts as lost only once it was untouched this long past its lease.
    pub stale: Duration,
    /// Reruns a crashed run gets (counted from its first run).
    pub max_reruns: i64,
}

impl Surveillance {
    pub async fn check(&self) -> Result<Findings, StoreError> {
        if !crate::queue::lease::fleet_turn(&self.store, CHORE, &self.host_id, self.interval)
            .await?
        {
            return Ok(Findings::default());
        }
        let crashed = self.find_crashed(false).await?;
        let missed = self.find_missed().await?;
        Ok(Findings {
            ran: true,
            crashed,
            missed,
        })
    }

    /// Marks every lost run crashed (see [`Surveillance::check`]) without taking the
    /// fleet's surveillance lease: for a command that runs once (`host run`), so that what
    /// a dead `host run` left in the queue never stays there with no one responsible.
    /// Only manual runs are swept: the runs of serving hosts are their surveillance's.
    pub async fn sweep_crashed(&self) -> Result<usize, StoreError> {
        self.find_crashed(true).await
    }

    /// Marks each lost run on its own: one that cannot be marked (its rows refused, the
    /// database gone mid-way) is reported and left for the next check, and never keeps the
    /// others from being found: every run held past its lease by no host is found.
    async fn find_crashed(&self, only_manual: bool) -> Result<usize, StoreError> {
        let stale_ms = self.stale.as_millis() as i64;
        let mut crashed = 0;
        for lost in self.store.lost_runs(stale_ms).await? {
            match self.mark_lost(&lost, stale_ms, only_manual).await {
                Ok(marked) => crashed += usize::from(marked),
                Err(e) => tracing::warn!(
                    job = %lost.job,
                    run_id = %lost.id,
                    code = "driver_failed",
                    error = %e,
                    "a lost run could not be marked crashed; the next check tries again"
                ),
            }
        }
        Ok(crashed)
    }

    /// Marks one lost run crashed, queueing its rerun; whether it was still lost.
    async fn mark_lost(
        &self,
        lost: &LostRun,
        stale_ms: i64,
        only_manual: bool,
    ) -> Result<bool, StoreError> {
        let Some(run) = self.store.get_run(&lost.id).await? else {
            return Ok(false);
        };
        if only_manual && run.origin != Origin::Manual.as_str() {
            return Ok(false);
        }
        let root = run.rerun_of.clone().unwrap_or_else(|| run.id.clone());
        // A manual run's caller (`host run`) is gone with its host: nobody waits for a
        // rerun, and no serving host may know its job. It is reported, not rerun.
        let manual = run.origin == Origin::Manual.as_str();
        let rerun = if !manual && self.store.count_reruns(&root).await? < self.max_reruns {
            Some(NewRun {
                id: new_run_id(),
                job: run.job.clone(),
                instance: run.instance.clone(),
                tenant: run.tenant.clone(),
                origin: Origin::Rerun,
                payload: run.payload.clone(),
                // Resume from the last pass that committed its cursor.
                cursor: run.cursor.clone(),
                component_digest: None,
                scheduled_for: run.scheduled_for,
                rerun_of: Some(root),
                delay_ms: 0,
                // The same work, resumed: the same trace.
                trace_parent: Some(run.trace()),
            })
        } else {
            None
        };
        let payload = self
            .catalog
            .as_ref()
            .and_then(|c| c.get(&run.job))
            .map_or_else(|| run.payload.clone(), |j| j.spec.payload.to_string());
        let follow_up = crate::queue::kick::follow_up(&run, payload);
        let marked = self
            .store
            .mark_crashed(&Crash {
                run: lost,
                stale_ms,
                rerun,
                follow_up: Some(follow_up),
                report: NewReport::about_run(ReportKind::Crashed, &run, FailureCode::Crashed),
            })
            .await?;
        if marked {
            tracing::warn!(job = %run.job, run_id = %run.id, code = "crashed", "run crashed: its host stopped renewing the lease");
        }
        Ok(marked)
    }

    async fn find_missed(&self) -> Result<usize, StoreError> {
        let now = self.store.now().await?;
        let mut missed = 0;
        // Jobs that are not meant to fire are not missing their schedule.
        let disabled = self.store.disabled_tenants().await?;
        for record in self.store.list_jobs().await? {
            if record.orphaned_at.is_some() || disabled.contains(&record.tenant) {
                continue;
            }
            let Some(cron) = self
                .catalog
                .as_ref()
                .and_then(|c| c.get(&record.name))
                .and_then(|j| j.cron.clone())
            else {
                continue;
            };
            let Some(period) = period(&cron, now) else {
                continue;
            };
            let last_ok = record.last_success_at.unwrap_or(record.registered_at);
            if !is_missed(now, last_ok, period, record.missed_reported_at) {
                continue;
            }
            let report = NewReport {
                kind: ReportKind::Missed,
                job: record.name.clone(),
                run_id: None,
                code: Some("missed".to_string()),
                body: serde_json::json!({
                    "kind": ReportKind::Missed.as_str(),
                    "job": record.name,
                    "code": "missed",
                    "period_ms": period,
                    "last_success_at": record.last_success_at,
                    // What a job that never succeeded is missed counting from: without it,
                    // such a report could not say since when.
                    "first_seen_at": record.registered_at,
                })
                .to_string(),
            };
            if self
                .store
                .mark_missed(&record.name, record.missed_reported_at, &report)
                .await?
            {
                tracing::warn!(job = %record.name, code = "missed", last_success_at = record.last_success_at, first_seen_at = record.registered_at, "schedule missed: no success within twice its period");
                missed += 1;
            }
        }
        Ok(missed)
    }
}

fn period(cron: &Cron, now: i64) -> Option<i64> {
    cron.period_after(now).filter(|p| *p > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missed_after_twice_the_period_then_once_per_period() {
        let period = 60_000;
        assert!(!is_missed(100_000, 0, period, None));
        assert!(is_missed(130_000, 0, period, None));
        assert!(!is_missed(150_000, 0, period, Some(130_000)));
        assert!(is_missed(190_000, 0, period, Some(130_000)));
        assert!(!is_missed(190_000, 150_000, period, None));
    }
}
