//! `host drive`: one bounded sweep of due runs, for operators without a long-running
//! host (a Kubernetes CronJob, a systemd timer).
//!
//! It reads due runs in claim order, a page at a time, and passes over those whose job
//! is not loaded here (they stay queued for a host that has it, and never starve the
//! others) and those of tenants their quota holds; it claims each of the rest by id and runs up to `max_passes` passes of it,
//! one attempt at a time, through the same runner, leases and fences as `host serve`, so
//! the two can share a database.

use crate::queue::quota::OverQuota;
use crate::runs::runner::{Runner, Step};
use crate::sandbox::engine::attempt::CancelToken;
use crate::service::catalog::Catalog;
use crate::store::{RunRecord, RunStatus, Store, StoreError};
use serde::Serialize;

/// Candidates read per page.
const PAGE: i64 = 200;

#[derive(Debug, Clone, Copy)]
pub struct DriveLimits {
    /// Most runs attempted.
    pub runs: usize,
    /// Most passes of each run.
    pub max_passes: u32,
    /// Most candidates looked at (due runs, including those of jobs not loaded here).
    pub scan: usize,
}

/// What happened to one run of the sweep.
#[derive(Debug, Clone, Serialize)]
pub struct DrivenRun {
    pub run_id: String,
    pub job: String,
    /// `completed`, `advanced` (queued for its next pass), `retrying`, `failed` or
    /// `skipped` (its lease was held by another run).
    pub result: &'static str,
    pub passes: u32,
    pub status: String,
    pub code: Option<String>,
}

/// Shown a run after each of its passes (`host drive`'s progress line).
pub type OnPass<'a> = &'a (dyn Fn(&RunRecord) + Send + Sync);

#[derive(Debug, Clone, Default, Serialize)]
pub struct DriveReport {
    pub scanned: usize,
    pub attempted: usize,
    pub advanced: usize,
    pub completed: usize,
    pub retrying: usize,
    pub failed: usize,
    pub skipped: usize,
    pub runs: Vec<DrivenRun>,
}

/// Runs one sweep. `stop` set to true ends it before the next claim (the attempt in
/// flight runs to its end).
/// `on_pass` is shown each run as it stands after each of its passes.
pub async fn drive(
    store: &Store,
    runner: &Runner,
    catalog: &Catalog,
    limits: DriveLimits,
    cancel: CancelToken,
    on_pass: Option<OnPass<'_>>,
) -> Result<DriveReport, StoreError> {
    let mut report = DriveReport::default();
    let mut after = (i64::MIN, String::new());
    // A run requeued for its next pass is due again, later in claim order: it is not
    // driven twice in one sweep.
    let mut driven = std::collections::HashSet::new();
    while report.attempted < limits.runs && report.scanned < limits.scan && !*cancel.borrow() {
        let page = PAGE.min((limits.scan - report.scanned) as i64);
        let candidates = store.due_candidates(&after, page).await?;
        let Some(last) = candidates.last() else {
            break;
        };
        after = (last.next_attempt_at, last.position.clone());
        // Runs of tenants their quota holds, and of paused jobs, tenants and lanes, stay
        // queued, as a serving host's claim leaves them.
        let paused = runner.quotas().over(OverQuota::Wait).await?;
        let pauses = runner.pauses().current().await?;
        for candidate in candidates {
            report.scanned += 1;
            if report.attempted >= limits.runs || *cancel.borrow() {
                break;
            }
            if paused.contains(&candidate.tenant) {
                continue;
            }
            let Some(job) = catalog.get(&candidate.job) else {
                continue;
            };
            if !pauses
                .holding(&job.spec.name, &candidate.tenant, &job.spec.lane)
                .is_empty()
            {
                continue;
            }
            if !driven.insert(candidate.id.clone()) {
                continue;
            }
            let Some(driven) =
                drive_run(store, runner, &job, &candidate.id, limits, &cancel, on_pass).await?
            else {
                continue;
            };
            report.attempted += 1;
            match driven.result {
                "completed" => report.completed += 1,
                "advanced" => report.advanced += 1,
                "retrying" => report.retrying += 1,
                "skipped" => report.skipped += 1,
                _ => report.failed += 1,
            }
            report.runs.push(driven);
        }
    }
    crate::runs::controls::write_recorded_cancels_here(store).await;
    Ok(report)
}

/// Claims one run and runs its passes; `None` if another host claimed it first.
async fn drive_run(
    store: &Store,
    runner: &Runner,
    job: &crate::service::catalog::CatalogJob,
    run_id: &str,
    limits: DriveLimits,
    cancel: &CancelToken,
    on_pass: Option<OnPass<'_>>,
) -> Result<Option<DrivenRun>, StoreError> {
    let Some(loaded) = &job.loaded else {
        return Ok(None);
    };
    let digest = &job.digest;
    let Some(mut claimed) = runner.claim_one(run_id, &job.spec, digest).await? else {
        return Ok(None);
    };
    let mut passes = 0;
    let last = loop {
        let step = runner
            .step(claimed, &job.spec, loaded, cancel.clone())
            .await?;
        passes += 1;
        if let Some(on_pass) = on_pass
            && let Some(now) = store.get_run(run_id).await?
        {
            on_pass(&now);
        }
        let next_pass = matches!(step, Step::Requeued { delay } if delay.is_zero());
        if !next_pass || passes >= limits.max_passes || *cancel.borrow() {
            break step;
        }
        match runner.claim_one(run_id, &job.spec, digest).await? {
            Some(next) => claimed = next,
            None => break step,
        }
    };
    let run = store.get_run(run_id).await?;
    let (status, code) = run
        .as_ref()
        .map(|r| (r.status.clone(), r.last_code.clone()))
        .unwrap_or_default();
    let result = match (&last, run.as_ref().and_then(|r| r.status())) {
        (Step::Skipped, _) => "skipped",
        (_, Some(RunStatus::Succeeded)) => "completed",
        (_, Some(RunStatus::Queued)) if code.is_some() => "retrying",
        (_, Some(RunStatus::Queued)) => "advanced",
        _ => "failed",
    };
    Ok(Some(DrivenRun {
        run_id: run_id.to_string(),
        job: job.spec.name.clone(),
        result,
        passes,
        status,
        code,
    }))
}
