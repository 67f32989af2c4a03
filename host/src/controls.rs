//! The operator's controls on runs: cancel and retry now, one run or every run a filter
//! matches. The rules live here; the rows are written by `store::controls`, a batch of runs
//! in one transaction, and the API, the CLI and the page all come through here.
//!
//! - **Cancel** a queued or running run: it ends `cancelled` (code
//!   `cancelled_by_operator`), reported once, never retried. Its lease moves on in the
//!   cancelling transaction, so an attempt still running — on any host, frozen or not —
//!   can commit nothing afterwards; the host running it stops it at once
//!   ([`watch_cancels`]). A kick it had pending is queued, as at any run's end. On
//!   SQLite a guest's open write transaction holds the file's one write lock: a cancel
//!   through the host running the attempt stops it first (its transaction rolls back); a
//!   cancel from another process waits for that transaction to end (it is bounded by the
//!   host's transaction bound), and what it committed before the cancel stays.
//! - **Retry** a failed, crashed or cancelled run (a timeout is a failed run): a new run
//!   with the same payload, `retry_of` the original, resuming its last committed pass.
//!   A run is retried at most once, so a bulk retry sent twice changes nothing the second
//!   time.
//! - **By filter**: at most [`BULK_MAX`] runs per call, [`BATCH`] to a transaction, and
//!   the answer says whether more match; a call repeated after a failure touches only
//!   what is still to do.

use crate::failure::FailureCode;
use crate::metrics::Metrics;
use crate::runner::{Runner, new_run_id};
use crate::store::{
    CancelRequest, NewReport, NewRun, Origin, ReportKind, RetryRequest, RunFilter, RunRecord,
    RunStatus, Store, StoreError,
};
use std::time::Duration;

/// Most runs one action by filter touches; the caller repeats while `more`.
pub const BULK_MAX: i64 = 1000;
/// Runs acted on in one transaction.
pub const BATCH: usize = 100;
/// How often a serving host asks whether a run it is running was cancelled elsewhere.
pub const CANCEL_POLL: Duration = Duration::from_millis(250);

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("no run with id {0:?}")]
    UnknownRun(String),
    #[error("run {id} is {status}: only a queued or running run can be cancelled")]
    NotCancellable { id: String, status: String },
    #[error("run {id} is {status}: only a failed, crashed or cancelled run can be retried")]
    NotRetryable { id: String, status: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Who acts: the operator (every run) or a tenant (its own runs only; another's do not
/// exist for it).
#[derive(Debug, Clone, Copy)]
pub struct Actor<'a> {
    pub tenant: Option<&'a str>,
}

impl Actor<'_> {
    fn sees(&self, run: &RunRecord) -> bool {
        self.tenant.is_none_or(|own| own == run.tenant)
    }
}

/// How a run ended early ends: an operator's cancel, or what its family decided
/// (`crate::family`).
#[derive(Debug, Clone, Copy)]
pub struct Ending {
    pub status: RunStatus,
    pub code: FailureCode,
    pub report: ReportKind,
    /// Counted as an operator's action.
    pub by_operator: bool,
}

impl Ending {
    pub const OPERATOR_CANCEL: Ending = Ending {
        status: RunStatus::Cancelled,
        code: FailureCode::CancelledByOperator,
        report: ReportKind::Cancelled,
        by_operator: true,
    };
}

/// A retry queued now, or the one queued before.
#[derive(Debug)]
pub struct Retry {
    pub run: RunRecord,
    pub already: bool,
}

/// What an action by filter did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bulk {
    pub done: i64,
    /// More runs match: call again.
    pub more: bool,
}

pub struct Controls<'a> {
    pub store: &'a Store,
    pub metrics: &'a Metrics,
    /// This host's runner, to stop an attempt running here at once.
    pub runner: Option<&'a Runner>,
}

impl Controls<'_> {
    async fn visible_run(&self, who: Actor<'_>, id: &str) -> Result<RunRecord, ControlError> {
        match self.store.get_run(id).await? {
            Some(run) if who.sees(&run) => Ok(run),
            _ => Err(ControlError::UnknownRun(id.to_string())),
        }
    }

    /// Cancels one run (see the module's rules).
    pub async fn cancel(&self, who: Actor<'_>, id: &str) -> Result<RunRecord, ControlError> {
        let run = self.visible_run(who, id).await?;
        let mut cancelled = self.cancel_batch(who, std::slice::from_ref(&run)).await?;
        match cancelled.pop().flatten() {
            Some(run) => Ok(run),
            None => {
                let now = self.store.get_run(&run.id).await?;
                Err(ControlError::NotCancellable {
                    id: run.id,
                    status: now.map_or_else(|| "gone".to_string(), |r| r.status),
                })
            }
        }
    }

    /// Cancels `runs` in one transaction: per run, as cancelled, or `None` if it was not
    /// cancellable (ended meanwhile).
    async fn cancel_batch(
        &self,
        who: Actor<'_>,
        runs: &[RunRecord],
    ) -> Result<Vec<Option<RunRecord>>, ControlError> {
        Ok(self.end_batch(who, runs, Ending::OPERATOR_CANCEL).await?)
    }

    /// Ends `runs` as a cancel does (fenced, in one transaction), with `ending`'s status
    /// and code: per run, as ended, or `None` if it had ended meanwhile.
    pub async fn end_batch(
        &self,
        who: Actor<'_>,
        runs: &[RunRecord],
        ending: Ending,
    ) -> Result<Vec<Option<RunRecord>>, StoreError> {
        let live: Vec<&RunRecord> = runs
            .iter()
            .filter(|run| run.status().is_some_and(|s| !s.is_terminal()))
            .collect();
        let mut payloads = std::collections::BTreeMap::new();
        for run in &live {
            if !payloads.contains_key(&run.job) {
                let payload = match self.store.get_job(&run.job).await? {
                    Some(job) => crate::kick::job_payload(&job),
                    None => run.payload.clone(),
                };
                payloads.insert(run.job.clone(), payload);
            }
        }
        let requests: Vec<CancelRequest<'_>> = live
            .iter()
            .map(|run| CancelRequest {
                run,
                tenant: who.tenant,
                status: ending.status.as_str(),
                code: ending.code.as_str(),
                follow_up: crate::kick::follow_up(run, payloads[&run.job].clone()),
                report: NewReport::about_run(ending.report, run, ending.code),
            })
            .collect();
        // An attempt running here is stopped first: on SQLite its open transaction holds
        // the one write lock the cancel needs. A stopped attempt writes nothing more; its
        // ending, if recorded before the cancel, ends the run itself, with the same status
        // and code (it was stopped with `ending`'s).
        let interrupted: Vec<bool> = live
            .iter()
            .map(|run| {
                self.runner
                    .is_some_and(|runner| runner.interrupts().interrupt(&run.id, ending.code))
            })
            .collect();
        let answers = self.store.cancel_runs(&requests).await?;
        let mut by_id = std::collections::BTreeMap::new();
        for ((run, answer), interrupted) in live.iter().zip(answers).zip(interrupted) {
            let cancelled = match answer {
                Some(cancelled) => Some(cancelled),
                None if interrupted => self
                    .store
                    .get_run(&run.id)
                    .await?
                    .filter(|now| now.status == ending.status.as_str()),
                None => None,
            };
            if cancelled.is_some() {
                if ending.by_operator {
                    self.metrics.control("cancel", &run.job, &run.tenant);
                }
                tracing::info!(
                    job = %run.job,
                    run_id = %run.id,
                    tenant = %run.tenant,
                    code = ending.code.as_str(),
                    was = %run.status,
                    "run ended early"
                );
            }
            by_id.insert(run.id.clone(), cancelled);
        }
        Ok(runs
            .iter()
            .map(|run| by_id.remove(&run.id).flatten())
            .collect())
    }

    /// Retries one run now (see the module's rules).
    pub async fn retry(&self, who: Actor<'_>, id: &str) -> Result<Retry, ControlError> {
        let run = self.visible_run(who, id).await?;
        if let Some(retry) = self.existing_retry(&run).await? {
            return Ok(retry);
        }
        if !retryable(&run) {
            return Err(ControlError::NotRetryable {
                id: run.id,
                status: run.status,
            });
        }
        if let Some(retry) = self
            .retry_batch(who, std::slice::from_ref(&run))
            .await?
            .pop()
            .flatten()
        {
            return Ok(Retry {
                run: retry,
                already: false,
            });
        }
        // Retried (or gone) meanwhile.
        match self.store.get_run(&run.id).await? {
            Some(now) => match self.existing_retry(&now).await? {
                Some(retry) => Ok(retry),
                None => Err(ControlError::NotRetryable {
                    id: now.id,
                    status: now.status,
                }),
            },
            None => Err(ControlError::UnknownRun(run.id)),
        }
    }

    /// Retries `runs` in one transaction: per run, its retry, or `None` if it was not
    /// retryable or retried already.
    async fn retry_batch(
        &self,
        who: Actor<'_>,
        runs: &[RunRecord],
    ) -> Result<Vec<Option<RunRecord>>, ControlError> {
        let requests: Vec<RetryRequest<'_>> = runs
            .iter()
            .map(|run| RetryRequest {
                original: run,
                tenant: who.tenant,
                run: NewRun {
                    id: new_run_id(),
                    job: run.job.clone(),
                    instance: run.instance.clone(),
                    tenant: run.tenant.clone(),
                    origin: Origin::Retry,
                    payload: run.payload.clone(),
                    cursor: run.cursor.clone(),
                    component_digest: None,
                    scheduled_for: run.scheduled_for,
                    rerun_of: None,
                    delay_ms: 0,
                    trace_parent: None,
                },
            })
            .collect();
        let answers = self.store.retry_runs(&requests).await?;
        for (run, retry) in runs.iter().zip(&answers) {
            if let Some(retry) = retry {
                self.metrics.control("retry", &run.job, &run.tenant);
                tracing::info!(job = %run.job, run_id = %run.id, retry = %retry.id, tenant = %run.tenant, "run retried");
            }
        }
        Ok(answers)
    }

    async fn existing_retry(&self, run: &RunRecord) -> Result<Option<Retry>, ControlError> {
        let Some(id) = &run.retried_by else {
            return Ok(None);
        };
        Ok(self
            .store
            .get_run(id)
            .await?
            .map(|run| Retry { run, already: true }))
    }

    /// How many runs an action by `filter` would touch, counted up to `cap`.
    pub async fn preview(
        &self,
        action: Action,
        filter: &RunFilter,
        cap: i64,
    ) -> Result<i64, ControlError> {
        match action.narrow(filter) {
            Some(narrowed) => Ok(self.store.count_matching_runs(&narrowed, cap).await?),
            None => Ok(0),
        }
    }

    /// Cancels or retries up to [`BULK_MAX`] of the runs `filter` matches, [`BATCH`] to a
    /// transaction.
    pub async fn apply(
        &self,
        who: Actor<'_>,
        action: Action,
        filter: &RunFilter,
    ) -> Result<Bulk, ControlError> {
        let Some(mut narrowed) = action.narrow(filter) else {
            return Ok(Bulk {
                done: 0,
                more: false,
            });
        };
        narrowed.tenant = who.tenant.map(str::to_string).or(narrowed.tenant);
        narrowed.before = None;
        narrowed.limit = BULK_MAX + 1;
        let runs = self.store.list_runs(&narrowed).await?;
        let more = runs.len() as i64 > BULK_MAX;
        let mut done = 0;
        for batch in runs[..runs.len().min(BULK_MAX as usize)].chunks(BATCH) {
            let acted = match action {
                Action::Cancel => self.cancel_batch(who, batch).await?,
                Action::Retry => self.retry_batch(who, batch).await?,
            };
            // A run that ended (or was retried) meanwhile is passed over.
            done += acted.iter().flatten().count() as i64;
        }
        Ok(Bulk { done, more })
    }
}

/// An action by filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Cancel,
    Retry,
}

impl Action {
    /// The filter narrowed to the runs the action applies to; `None` if it names only
    /// statuses the action does not apply to.
    fn narrow(self, filter: &RunFilter) -> Option<RunFilter> {
        let applies: &[RunStatus] = match self {
            Action::Cancel => &[RunStatus::Queued, RunStatus::Running],
            Action::Retry => &[RunStatus::Failed, RunStatus::Crashed, RunStatus::Cancelled],
        };
        let mut narrowed = filter.clone();
        narrowed.statuses = if filter.statuses.is_empty() {
            applies.to_vec()
        } else {
            filter
                .statuses
                .iter()
                .copied()
                .filter(|s| applies.contains(s))
                .collect()
        };
        narrowed.unretried = self == Action::Retry;
        (!narrowed.statuses.is_empty()).then_some(narrowed)
    }
}

fn retryable(run: &RunRecord) -> bool {
    matches!(
        run.status(),
        Some(RunStatus::Failed | RunStatus::Crashed | RunStatus::Cancelled)
    )
}

/// Stops the attempts this host runs whose runs were cancelled through another host (or
/// another process): asks every [`CANCEL_POLL`] while any attempt runs, until `stop`.
pub async fn watch_cancels(
    runner: std::sync::Arc<Runner>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(CANCEL_POLL) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let running = runner.interrupts().running();
        if running.is_empty() {
            continue;
        }
        match runner.store().cancelled_among(&running).await {
            Ok(cancelled) => {
                for (id, code) in cancelled {
                    // Stopped with the code its run was ended with: an operator's cancel,
                    // or its parent's failure.
                    let code = code
                        .as_deref()
                        .and_then(FailureCode::parse)
                        .filter(|c| c.ends_from_outside())
                        .unwrap_or(FailureCode::CancelledByOperator);
                    if runner.interrupts().interrupt(&id, code) {
                        tracing::info!(run_id = %id, code = code.as_str(), "stopping a cancelled run's attempt");
                    }
                }
            }
            Err(e) => {
                tracing::warn!(code = "driver_failed", error = %e, "could not check for cancelled runs");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_action_by_filter_touches_only_the_statuses_it_applies_to() {
        let all = RunFilter::default();
        let cancel = Action::Cancel.narrow(&all).unwrap();
        assert_eq!(cancel.statuses, [RunStatus::Queued, RunStatus::Running]);
        assert!(!cancel.unretried);
        let retry = Action::Retry.narrow(&all).unwrap();
        assert_eq!(
            retry.statuses,
            [RunStatus::Failed, RunStatus::Crashed, RunStatus::Cancelled]
        );
        assert!(retry.unretried, "a run is retried once");
        let failed = RunFilter {
            statuses: vec![RunStatus::Failed, RunStatus::Queued],
            ..Default::default()
        };
        assert_eq!(
            Action::Retry.narrow(&failed).unwrap().statuses,
            [RunStatus::Failed]
        );
        let succeeded = RunFilter {
            statuses: vec![RunStatus::Succeeded],
            ..Default::default()
        };
        assert!(Action::Cancel.narrow(&succeeded).is_none());
    }
}
