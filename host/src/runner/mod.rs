//! A run's life, one attempt at a time: take or renew the lease, run the pass in the
//! sandbox, record the attempt, then decide — finish, retry after backoff, or queue the
//! next pass. Every decision about a run is made here; the store only writes it down.
//!
//! A run waiting for a retry or its next pass goes back to the queue with its lease
//! parked, so any host may pick it up when it is due, and a host that dies while a run
//! waits loses nothing.

pub mod backoff;

use crate::capability::db::DbSession;
use crate::capability::files::FilesSession;
use crate::capability::links::LinksSession;
use crate::engine::attempt::{AttemptReport, AttemptSpec, CancelToken, Outcome, PassContext};
use crate::engine::{Engine, Loaded};
use crate::failure::FailureCode;
use crate::files::{Files, Uploader};
use crate::job::JobSpec;
use crate::lease::LeaseTerms;
use crate::links::{Caller, Links};
use crate::metrics::Metrics;
use crate::store::guest::{Access, Fence, GuestDb};
use crate::store::{
    AttemptEnd, BeginAttempt, Finish, FinishResult, Lease, NewReport, Origin, ReportKind, Requeue,
    RunRecord, RunStatus, Started, Store, StoreError,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

#[derive(Debug, Clone)]
pub struct RunnerSettings {
    pub lease: LeaseTerms,
    /// How long a guest write transaction may stay open.
    pub txn_bound: Duration,
    /// How long a queued run's parked lease outlasts its due time, for a host to claim it.
    pub claim_slack: Duration,
}

impl Default for RunnerSettings {
    fn default() -> Self {
        RunnerSettings {
            lease: LeaseTerms::default(),
            txn_bound: Duration::from_secs(5),
            claim_slack: Duration::from_secs(30),
        }
    }
}

/// What one call of [`Runner::step`] did to a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The run ended with this status (and failure code).
    Finished {
        status: RunStatus,
        code: Option<FailureCode>,
        follow_up: Option<String>,
    },
    /// The run is queued again, due after `delay`.
    Requeued { delay: Duration },
    /// Another run held the lease.
    Skipped,
    /// The run stopped being ours (marked crashed meanwhile); nothing was recorded.
    Abandoned,
}

pub struct Runner {
    store: Store,
    engine: Arc<Engine>,
    guest_db: GuestDb,
    host_id: String,
    settings: RunnerSettings,
    metrics: Arc<Metrics>,
    files: Arc<Files>,
    links: Arc<Links>,
}

impl Runner {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Store,
        engine: Arc<Engine>,
        guest_db: GuestDb,
        host_id: String,
        settings: RunnerSettings,
        metrics: Arc<Metrics>,
        files: Arc<Files>,
        links: Arc<Links>,
    ) -> Self {
        Runner {
            store,
            engine,
            guest_db,
            host_id,
            settings,
            metrics,
            files,
            links,
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn host_id(&self) -> &str {
        &self.host_id
    }

    /// Runs one attempt of a run this host claimed (status `running`). Setting `cancel`
    /// stops the attempt and puts the run back in the queue for any host to resume.
    pub async fn step(
        &self,
        run: &RunRecord,
        spec: &JobSpec,
        loaded: &Loaded,
        cancel: CancelToken,
    ) -> Result<Step, StoreError> {
        let timeout = spec.limits.timeout;
        let terms = &self.settings.lease;
        let previous = LeaseTerms::held_by(run);
        let attempt = run.failures + 1;
        let begin = BeginAttempt {
            run_id: &run.id,
            host: &self.host_id,
            component_digest: &loaded.digest,
            pass: run.pass,
            attempt,
        };
        let started = match &previous {
            None => self.start_first(run, &begin, timeout).await?,
            Some(previous) => {
                self.store
                    .start_attempt(&terms.next(previous, timeout), &begin)
                    .await?
            }
        };
        let (lease, seq, stamped_after) = match (started, &previous) {
            (
                Started::Attempt {
                    lease,
                    seq,
                    stamped_after,
                },
                _,
            ) => (lease, seq, stamped_after),
            (Started::LeaseUnavailable, Some(previous)) => {
                // A retry could not renew: the lease moved on without this run.
                let ending = Ending::Finish {
                    failure: Failure::code(FailureCode::LeaseLost),
                    failures: run.failures,
                };
                let until = Instant::now() + terms.grace;
                return self
                    .conclude(run, spec, previous, ending, None, until)
                    .await;
            }
            (Started::LeaseUnavailable, None) => return Ok(Step::Skipped),
            (Started::RunGone, _) => return Ok(Step::Abandoned),
        };
        // Counted from before the database stamped the lease's deadline: the host stops
        // the attempt no later than the database stops its writes.
        let deadline = stamped_after + timeout;
        // The lease expires `grace` after the deadline: until then, this host may still
        // record what happened (retrying if the database is briefly unreachable).
        let until = deadline + terms.grace;
        let report = self
            .engine
            .run_attempt(AttemptSpec {
                loaded,
                cancel,
                context: pass_context(run, attempt),
                memory: spec.limits.memory,
                fuel: spec.limits.fuel,
                deadline,
                db: self.db_session(spec, &lease, deadline),
                files: self.files_session(run, spec, &lease),
                links: self.links_session(run, spec, &lease, deadline),
            })
            .await;
        let end = self.attempt_end(run, seq, attempt, &report);
        let ending = decide(run, spec, report.result.clone());
        self.conclude(run, spec, &lease, ending, Some(end), until)
            .await
    }

    /// Retries a write while the database is unreachable, until the attempt's lease would
    /// have expired anyway (after that, surveillance reports the run instead).
    async fn persist<T, F, Fut>(&self, until: Instant, mut write: F) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        let mut pause = Duration::from_millis(100);
        loop {
            match write().await {
                Err(e) if e.is_unavailable() && Instant::now() + pause < until => {
                    tracing::warn!(code = "driver_failed", error = %e, "database unreachable; retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
                result => return result,
            }
        }
    }

    fn db_session(&self, spec: &JobSpec, lease: &Lease, deadline: Instant) -> Option<DbSession> {
        let grant = spec.grants.db.clone()?;
        Some(DbSession {
            db: self.guest_db.clone(),
            access: Access {
                grant: Arc::new(grant),
                fence: fence_of(lease),
                deadline,
            },
            txn_bound: self.settings.txn_bound,
        })
    }

    fn files_session(
        &self,
        run: &RunRecord,
        spec: &JobSpec,
        lease: &Lease,
    ) -> Option<FilesSession> {
        let grant = spec.grants.files.clone()?;
        Some(FilesSession {
            files: self.files.clone(),
            grant: Arc::new(grant),
            uploader: Uploader {
                tenant: run.tenant.clone(),
                run_id: run.id.clone(),
                attach_by: lease.deadline_at,
            },
            fence: fence_of(lease),
        })
    }

    fn links_session(
        &self,
        run: &RunRecord,
        spec: &JobSpec,
        lease: &Lease,
        deadline: Instant,
    ) -> Option<LinksSession> {
        let grant = spec.grants.links.clone()?;
        Some(LinksSession {
            links: self.links.clone(),
            grant: Arc::new(grant),
            caller: Caller {
                job: run.job.clone(),
                tenant: run.tenant.clone(),
                run_id: run.id.clone(),
                pass: run.pass,
                fence: fence_of(lease),
                deadline,
                lease_deadline_ms: lease.deadline_at,
                actions: Arc::new(spec.actions.clone()),
                traceparent: None,
            },
        })
    }

    /// The attempt's record (written with the run's next state), and its metrics and log.
    fn attempt_end<'a>(
        &self,
        run: &'a RunRecord,
        seq: i64,
        attempt: i64,
        report: &'a AttemptReport,
    ) -> AttemptEnd<'a> {
        let (status, outcome, code) = match &report.result {
            Ok(outcome) => ("succeeded", Some(outcome.name()), None),
            Err(failure) => ("failed", None, Some(failure.code.as_str())),
        };
        self.metrics
            .attempt_finished(&run.job, status, code, report.duration, report.fuel_used);
        tracing::info!(
            job = %run.job,
            run_id = %run.id,
            pass = run.pass,
            attempt,
            status,
            code,
            duration_ms = report.duration.as_millis() as u64,
            fuel_used = report.fuel_used,
            peak_memory = report.peak_memory,
            "attempt finished"
        );
        AttemptEnd {
            run_id: &run.id,
            seq,
            status,
            outcome,
            code,
            fuel_used: Some(i64::try_from(report.fuel_used).unwrap_or(i64::MAX)),
            peak_memory: Some(report.peak_memory as i64),
            duration_ms: report.duration.as_millis() as i64,
            log: &report.log,
            log_truncated: report.log_truncated,
        }
    }

    /// Writes down what `decide` chose, with the attempt that led to it. If the database
    /// refuses to record it (something the guest handed back it will not store), the run
    /// ends `record_failed` instead, with the guest's output dropped: a run is never left
    /// half-recorded, and the failure is not blamed on a crashed host.
    async fn conclude(
        &self,
        run: &RunRecord,
        spec: &JobSpec,
        lease: &Lease,
        ending: Ending,
        attempt: Option<AttemptEnd<'_>>,
        until: Instant,
    ) -> Result<Step, StoreError> {
        match self.record(run, spec, lease, ending, attempt, until).await {
            Err(e) if !e.is_unavailable() => {
                tracing::warn!(job = %run.job, run_id = %run.id, code = "record_failed", error = %e, "the database refused the attempt's record; recording a fixed failure instead");
                let code = FailureCode::RecordFailed;
                let attempt = attempt.map(|a| AttemptEnd {
                    status: "failed",
                    outcome: None,
                    code: Some(code.as_str()),
                    log: "",
                    log_truncated: true,
                    ..a
                });
                let ending = Ending::Finish {
                    failure: Failure::code(code),
                    failures: run.failures + 1,
                };
                self.record(run, spec, lease, ending, attempt, until).await
            }
            other => other,
        }
    }

    async fn record(
        &self,
        run: &RunRecord,
        spec: &JobSpec,
        lease: &Lease,
        ending: Ending,
        attempt: Option<AttemptEnd<'_>>,
        until: Instant,
    ) -> Result<Step, StoreError> {
        match ending {
            Ending::Requeue {
                delay,
                pass,
                cursor,
                failures,
                failure,
            } => {
                let requeue = Requeue {
                    run_id: &run.id,
                    attempt,
                    lease,
                    delay_ms: delay.as_millis() as i64,
                    hold_ms: self
                        .settings
                        .lease
                        .park_for(delay, self.settings.claim_slack),
                    pass,
                    cursor: cursor.as_deref(),
                    failures,
                    last_code: failure.code.map(FailureCode::as_str),
                    last_error: failure.message.as_deref(),
                };
                let requeued = self
                    .persist(until, || self.store.requeue_run(&requeue))
                    .await?;
                Ok(if requeued {
                    Step::Requeued { delay }
                } else {
                    Step::Abandoned
                })
            }
            Ending::Finish { failure, failures } => {
                let status = if failure.code.is_some() {
                    RunStatus::Failed
                } else {
                    RunStatus::Succeeded
                };
                let args = finish_args(run, spec, lease, status, &failure, failures, true, attempt);
                let mut result = self.persist(until, || self.store.finish_run(&args)).await?;
                let (mut status, mut code) = (status, failure.code);
                if result == FinishResult::LeaseLost {
                    // The lease moved on under this run: whatever it returned, record the
                    // loss — on the attempt as on the run, one ending, one code.
                    let lost = Failure::code(FailureCode::LeaseLost);
                    let attempt = attempt.map(|a| AttemptEnd {
                        status: "failed",
                        outcome: None,
                        code: Some(FailureCode::LeaseLost.as_str()),
                        ..a
                    });
                    let args = finish_args(
                        run,
                        spec,
                        lease,
                        RunStatus::Failed,
                        &lost,
                        failures,
                        false,
                        attempt,
                    );
                    result = self.persist(until, || self.store.finish_run(&args)).await?;
                    (status, code) = (RunStatus::Failed, lost.code);
                }
                let FinishResult::Finished { follow_up } = result else {
                    return Ok(Step::Abandoned);
                };
                let code_text = code.map(FailureCode::as_str);
                self.metrics
                    .run_finished(&run.job, status.as_str(), code_text);
                tracing::info!(job = %run.job, run_id = %run.id, status = status.as_str(), code = code_text, "run finished");
                Ok(Step::Finished {
                    status,
                    code,
                    follow_up,
                })
            }
        }
    }

    /// Starts a run's first attempt, or ends the run `skipped` (and reports
    /// `LeaseUnavailable`) because another run holds the lease. A kick is not lost to a
    /// held lease: it sets the holder's pending flag, and the holder queues one follow-up
    /// when it ends. If the holder ends between the two steps, the lease is free: retry.
    async fn start_first(
        &self,
        run: &RunRecord,
        begin: &BeginAttempt<'_>,
        timeout: Duration,
    ) -> Result<Started, StoreError> {
        const TRIES: usize = 5;
        let op = self.settings.lease.first(run, timeout);
        let is_kick = run.origin == Origin::Kick.as_str();
        for _ in 0..TRIES {
            let started = self.store.start_attempt(&op, begin).await?;
            if started != Started::LeaseUnavailable {
                return Ok(started);
            }
            if !is_kick {
                break;
            }
            if self.store.set_pending(&run.job, &run.instance).await? {
                self.skip(
                    run,
                    "the job was running: kick folded into its pending flag",
                )
                .await?;
                return Ok(Started::LeaseUnavailable);
            }
        }
        self.skip(run, "the job's lease was held by another run")
            .await?;
        Ok(Started::LeaseUnavailable)
    }

    async fn skip(&self, run: &RunRecord, reason: &str) -> Result<(), StoreError> {
        self.store.skip_run(&run.id, reason).await?;
        self.metrics
            .run_finished(&run.job, RunStatus::Skipped.as_str(), None);
        tracing::info!(job = %run.job, run_id = %run.id, "run skipped: lease held");
        Ok(())
    }
}

/// What to do with a run after an attempt.
enum Ending {
    /// Back to the queue: a retry after backoff, the next pass, or a cancelled attempt.
    Requeue {
        delay: Duration,
        pass: i64,
        cursor: Option<String>,
        failures: i64,
        failure: Failure,
    },
    /// The run is over.
    Finish { failure: Failure, failures: i64 },
}

/// The rules: an outcome ends the run or queues its next pass; a failure is retried
/// after backoff while retries remain and its code allows; a cancelled attempt (host
/// shutdown) is requeued without counting against the job.
fn decide(
    run: &RunRecord,
    spec: &JobSpec,
    result: Result<Outcome, crate::engine::attempt::AttemptFailure>,
) -> Ending {
    let requeue = |delay, pass, cursor: Option<String>, failures, failure| Ending::Requeue {
        delay,
        pass,
        cursor,
        failures,
        failure,
    };
    match result {
        Ok(Outcome::Done) => Ending::Finish {
            failure: Failure::none(),
            failures: 0,
        },
        Ok(Outcome::Continue { cursor }) => requeue(
            Duration::ZERO,
            run.pass + 1,
            Some(cursor),
            0,
            Failure::none(),
        ),
        Ok(Outcome::Defer { delay }) => {
            requeue(delay, run.pass + 1, run.cursor.clone(), 0, Failure::none())
        }
        Err(f) if f.code == FailureCode::Cancelled => requeue(
            Duration::ZERO,
            run.pass,
            run.cursor.clone(),
            run.failures,
            Failure::code(FailureCode::Cancelled),
        ),
        Err(f) => {
            let failures = run.failures + 1;
            let failure = Failure {
                code: Some(f.code),
                message: f.message,
            };
            let allowed = i64::from(spec.retry.retries) + 1;
            if f.code.is_retryable() && failures < allowed {
                let delay = backoff::delay(&spec.retry, failures as u32, &mut rand::rng());
                requeue(delay, run.pass, run.cursor.clone(), failures, failure)
            } else {
                Ending::Finish { failure, failures }
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn finish_args<'a>(
    run: &'a RunRecord,
    spec: &JobSpec,
    lease: &'a Lease,
    status: RunStatus,
    failure: &'a Failure,
    failures: i64,
    require_lease: bool,
    attempt: Option<AttemptEnd<'a>>,
) -> Finish<'a> {
    Finish {
        run_id: &run.id,
        attempt,
        lease,
        require_lease,
        status,
        code: failure.code.map(FailureCode::as_str),
        error: failure.message.as_deref(),
        cursor: run.cursor.as_deref(),
        pass: run.pass,
        failures,
        follow_up: Some(crate::kick::follow_up(run, spec.payload.to_string())),
        report: failure.code.map(|code| {
            let kind = if code == FailureCode::LeaseLost {
                ReportKind::LeaseLost
            } else {
                ReportKind::RunFailed
            };
            NewReport::about_run(kind, run, code)
        }),
    }
}

/// A failure code with the guest's own message, if any.
struct Failure {
    code: Option<FailureCode>,
    message: Option<String>,
}

impl Failure {
    fn none() -> Self {
        Failure {
            code: None,
            message: None,
        }
    }

    fn code(code: FailureCode) -> Self {
        Failure {
            code: Some(code),
            message: None,
        }
    }
}

fn pass_context(run: &RunRecord, attempt: i64) -> PassContext {
    let counters: std::collections::BTreeMap<String, i64> =
        serde_json::from_str(&run.counters).unwrap_or_default();
    PassContext {
        job: run.job.clone(),
        run_id: run.id.clone(),
        instance: run.instance.clone(),
        tenant: run.tenant.clone(),
        attempt: attempt as u32,
        pass: run.pass as u32,
        payload: run.payload.clone(),
        cursor: run.cursor.clone(),
        counters: counters.into_iter().collect(),
    }
}

/// The fence of an attempt's writes: its lease generation.
fn fence_of(lease: &Lease) -> Fence {
    Fence {
        job: lease.job.clone(),
        instance: lease.instance.clone(),
        generation: lease.generation,
        holder: lease.holder.clone(),
    }
}

/// A new, time-ordered run id.
pub fn new_run_id() -> String {
    uuid::Uuid::now_v7().to_string()
}
