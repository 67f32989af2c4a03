//! The operator's controls on runs: cancel and retry now, one run or every run a filter
//! matches. The rules live here; the rows are written by `store::controls`, a batch of runs
//! in one transaction, and the API, the CLI and the page all come through here.
//!
//! - **Cancel** a queued or running run: it ends `cancelled` (code
//!   `cancelled_by_operator`), reported once, never retried. Its lease moves on in the
//!   cancelling transaction, so an attempt still running — on any host, frozen or not —
//!   can commit nothing afterwards; the host running it stops it at once
//!   ([`watch_cancels`]). A kick it had pending is queued, as at any run's end. On
//!   SQLite a guest's open write transaction holds the file's one write lock, so the
//!   cancel is first recorded in the cancel book beside the database, which the fence
//!   reads: from then on nothing the attempt writes commits, and the call waits for the
//!   lock at most [`CANCEL_WAIT`] before it answers; the row is then written by whichever
//!   process gets the lock first ([`write_recorded_cancels`]). What the attempt committed
//!   before the cancel stays.
//! - **Retry** a failed, crashed or cancelled run (a timeout is a failed run): a new run
//!   with the same payload, `retry_of` the original, resuming its last committed pass.
//!   A run is retried at most once, so a bulk retry sent twice changes nothing the second
//!   time.
//! - **By filter**: at most [`BULK_MAX`] runs per call, [`BATCH`] to a transaction, and
//!   the answer says whether more match; a call repeated after a failure touches only
//!   what is still to do.

use crate::rules::failure::FailureCode;
use crate::runs::metrics::Metrics;
use crate::runs::runner::Runner;
use crate::store::new_run_id;
use crate::store::{
    CancelMark, CancelRequest, NewReport, NewRun, Origin, ReportKind, RetryRequest, RunFilter,
    RunRecord, RunStatus, Store, StoreError,
};
use std::time::Duration;

/// Most runs one action by filter touches; the caller repeats while `more`.
pub const BULK_MAX: i64 = 1000;
/// Runs acted on in one transaction.
pub const BATCH: usize = 100;
/// How often a serving host asks whether a run it is running was cancelled elsewhere.
pub const CANCEL_POLL: Duration = Duration::from_millis(250);
/// How long a cancel on SQLite waits for the write lock before it answers with the cancel
/// recorded in the cancel book (a guest's transaction may hold the lock for its bound).
pub const CANCEL_WAIT: Duration = Duration::from_millis(750);

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
/// (`crate::runs::family`).
#[derive(Debug, Clone, Copy)]
pub struct Ending {
    pub status: RunStatus,
    pub code: FailureCode,
    pub report: ReportKind,
    /// Counted as an operator's action.
    pub by_operator: bool,
}

impl Ending {
    /// This ending of `run` as the cancel book records it.
    fn mark(&self, run: &str, tenant: Option<&str>) -> CancelMark {
        CancelMark {
            run_id: run.to_string(),
            tenant: tenant.map(str::to_string),
            status: self.status.as_str().to_string(),
            code: self.code.as_str().to_string(),
            report: self.report.as_str().to_string(),
            by_operator: self.by_operator,
        }
    }

    /// The ending a recorded cancel asks for; `None` for one this host cannot read.
    fn of_mark(mark: &CancelMark) -> Option<Ending> {
        Some(Ending {
            status: RunStatus::parse(&mark.status)?,
            code: FailureCode::parse(&mark.code)?,
            report: ReportKind::parse(&mark.report)?,
            by_operator: mark.by_operator,
        })
    }

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
    ///
    /// On SQLite the cancel is first recorded in the cancel book, which needs no write
    /// lock: from then on nothing the attempt writes commits. The cancel's transaction
    /// then waits for the write lock at most [`CANCEL_WAIT`]; if a guest's transaction
    /// still holds it, the answer is the run as the recorded cancel will end it, and the
    /// transaction is written by whichever process gets the lock first
    /// ([`write_recorded_cancels`]).
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
        let payloads = job_payloads(self.store, &live).await?;
        let requests = cancel_requests(&live, who.tenant, ending, &payloads);
        let ids: Vec<String> = live.iter().map(|run| run.id.clone()).collect();
        self.store
            .record_cancels(
                live.iter()
                    .map(|run| ending.mark(&run.id, who.tenant))
                    .collect(),
            )
            .await?;
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
        let answers = match self
            .store
            .cancel_runs_within(&requests, CANCEL_WAIT)
            .await?
        {
            Some(answers) => {
                forget(self.store, ids).await;
                answers
            }
            None => recorded_endings(self.store, &live, ending).await?,
        };
        let mut by_id = std::collections::BTreeMap::new();
        for ((run, answer), interrupted) in live.iter().zip(answers).zip(interrupted) {
            // Ended meanwhile: by its stopped attempt, or, for a cancel recorded in the
            // cancel book, by the process that wrote it first.
            let cancelled = match answer {
                Some(cancelled) => Some(cancelled),
                None if interrupted || self.store.records_cancels() => self
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

/// The payload of each job of `runs`, for the follow-up of kicks a run had pending.
async fn job_payloads(
    store: &Store,
    runs: &[&RunRecord],
) -> Result<std::collections::BTreeMap<String, String>, StoreError> {
    let mut payloads = std::collections::BTreeMap::new();
    for run in runs {
        if !payloads.contains_key(&run.job) {
            let payload = match store.get_job(&run.job).await? {
                Some(job) => crate::queue::kick::job_payload(&job),
                None => run.payload.clone(),
            };
            payloads.insert(run.job.clone(), payload);
        }
    }
    Ok(payloads)
}

fn cancel_requests<'a>(
    runs: &[&'a RunRecord],
    tenant: Option<&'a str>,
    ending: Ending,
    payloads: &std::collections::BTreeMap<String, String>,
) -> Vec<CancelRequest<'a>> {
    runs.iter()
        .map(|run| CancelRequest {
            run,
            tenant,
            status: ending.status.as_str(),
            code: ending.code.as_str(),
            follow_up: crate::queue::kick::follow_up(run, payloads[&run.job].clone()),
            report: NewReport::about_run(ending.report, run, ending.code),
        })
        .collect()
}

/// Forgets the recorded cancels of `runs`, now written: one left behind (this failing) is
/// found written, and forgotten, by the next [`write_recorded_cancels`].
async fn forget(store: &Store, runs: Vec<String>) {
    if let Err(e) = store.forget_cancels(runs).await {
        tracing::warn!(code = "driver_failed", error = %e, "could not clear the cancel book");
    }
}

/// Per run, as its recorded cancel will end it, or `None` if it ended before the cancel
/// (then its record is forgotten): what a cancel answers when its transaction could not
/// get the write lock in time. Nothing but that cancel ends a run once it is recorded.
async fn recorded_endings(
    store: &Store,
    runs: &[&RunRecord],
    ending: Ending,
) -> Result<Vec<Option<RunRecord>>, StoreError> {
    let mut answers = Vec::with_capacity(runs.len());
    let mut ended = Vec::new();
    for run in runs {
        let now = store.get_run(&run.id).await?;
        answers.push(match now {
            Some(mut now) if now.status().is_some_and(|s| !s.is_terminal()) => {
                now.status = ending.status.as_str().to_string();
                now.last_code = Some(ending.code.as_str().to_string());
                Some(now)
            }
            Some(now)
                if now.status == ending.status.as_str()
                    && now.last_code.as_deref() == Some(ending.code.as_str()) =>
            {
                Some(now)
            }
            _ => {
                ended.push(run.id.clone());
                None
            }
        });
    }
    forget(store, ended).await;
    Ok(answers)
}

/// Writes the cancels recorded in the cancel book (SQLite) that are not in the database
/// yet, each as its recorder asked, and forgets them: those of runs that ended before
/// their cancel too. Waits for the write lock. Returns how many runs it ended.
pub async fn write_recorded_cancels(store: &Store) -> Result<usize, StoreError> {
    // The recorded cancels by what they ask for (their runs' ids set aside).
    let mut groups: Vec<(CancelMark, Vec<String>)> = Vec::new();
    for mut mark in store.recorded_cancels().await? {
        let id = std::mem::take(&mut mark.run_id);
        match groups.iter_mut().find(|(asked, _)| *asked == mark) {
            Some((_, ids)) => ids.push(id),
            None => groups.push((mark, vec![id])),
        }
    }
    let mut ended = 0;
    for (mark, ids) in groups {
        let Some(ending) = Ending::of_mark(&mark) else {
            tracing::warn!(code = "driver_failed", status = %mark.status, failure = %mark.code, "a recorded cancel names an ending this host does not know");
            continue;
        };
        let mut runs = Vec::with_capacity(ids.len());
        for id in &ids {
            if let Some(run) = store.get_run(id).await?
                && run.status().is_some_and(|s| !s.is_terminal())
            {
                runs.push(run);
            }
        }
        for batch in runs.chunks(BATCH) {
            let live: Vec<&RunRecord> = batch.iter().collect();
            let payloads = job_payloads(store, &live).await?;
            let requests = cancel_requests(&live, mark.tenant.as_deref(), ending, &payloads);
            ended += store.cancel_runs(&requests).await?.iter().flatten().count();
        }
        forget(store, ids).await;
    }
    Ok(ended)
}

/// [`write_recorded_cancels`] on SQLite, logging a failure: for `host run` and `host
/// drive`, which end attempts such a cancel stopped and may be the only process left to
/// write it.
pub async fn write_recorded_cancels_here(store: &Store) {
    if store.records_cancels()
        && let Err(e) = write_recorded_cancels(store).await
    {
        tracing::warn!(code = "driver_failed", error = %e, "could not write the recorded cancels");
    }
}

/// Stops the attempts this host runs whose runs were cancelled through another host (or
/// another process): asks every [`CANCEL_POLL`] while any attempt runs, until `stop`. On
/// SQLite it also writes the cancels other processes recorded but could not write
/// ([`write_recorded_cancels`]), once the attempts they stop have let go of the lock.
pub async fn watch_cancels(
    runner: std::sync::Arc<Runner>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(CANCEL_POLL) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let store = runner.store();
        let recorded = match store.recorded_cancels().await {
            Ok(recorded) => recorded,
            Err(e) => {
                tracing::warn!(code = "driver_failed", error = %e, "could not read the cancel book");
                Vec::new()
            }
        };
        let running = runner.interrupts().running();
        if !running.is_empty() {
            let cancelled = match store.cancelled_among(&running).await {
                Ok(cancelled) => cancelled,
                Err(e) => {
                    tracing::warn!(code = "driver_failed", error = %e, "could not check for cancelled runs");
                    Vec::new()
                }
            };
            let recorded = recorded
                .iter()
                .map(|mark| (mark.run_id.clone(), Some(mark.code.clone())));
            for (id, code) in cancelled.into_iter().chain(recorded) {
                // Stopped with the code its run was ended with: an operator's cancel, or
                // its parent's failure.
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
        if !recorded.is_empty()
            && let Err(e) = write_recorded_cancels(store).await
        {
            tracing::warn!(code = "driver_failed", error = %e, "could not write the recorded cancels");
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
