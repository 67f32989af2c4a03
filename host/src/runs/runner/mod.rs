//! A run's life, one attempt at a time: a claim takes or moves on the lease and starts
//! the attempt; the pass runs in the sandbox; then the runner decides — finish, retry
//! after backoff, or queue the next pass — and hands that to the finisher, which records
//! the endings of many attempts at once (`finisher`). Every decision about a run is made
//! here; the store only writes it down.
//!
//! A run waiting for a retry or its next pass goes back to the queue with its lease
//! parked, so any host may pick it up when it is due, and a host that dies while a run
//! waits (or before its ending is recorded) loses nothing: surveillance finds it.

pub mod backoff;
mod finisher;
mod interrupts;
pub mod live;
mod starts;

use crate::queue::lease::LeaseTerms;
use crate::queue::pause::Pauses;
use crate::queue::quota::{OverQuota, QuotaBook, Quotas};
use crate::rules::failure::FailureCode;
use crate::rules::job::JobSpec;
use crate::runs::metrics::Metrics;
use crate::sandbox::capability::Capabilities;
use crate::sandbox::capability::context::{AttemptContext, HostServices};
use crate::sandbox::capability::steps::MAX_STEP_ERROR_BYTES;
use crate::sandbox::engine::attempt::{
    AttemptFailure, AttemptReport, AttemptSpec, CancelToken, Outcome, PassContext,
};
use crate::sandbox::engine::limits::FuelGauge;
use crate::sandbox::engine::output::AttemptLog;
use crate::sandbox::engine::{Engine, Loaded, MAX_LOG_BYTES};
use crate::sandbox::files::Files;
use crate::sandbox::journal::{
    self,
    file::{JournalFile, SealKey},
};
use crate::sandbox::links::Links;
use crate::store::guest::GuestDb;
use crate::store::{
    AttemptEnding, AttemptTerms, ClaimRequest, Claimed, GuestStart, Lease, NewReport, Origin,
    Recording, ReportKind, RunChange, RunRecord, RunStatus, Store, StoreError,
};
pub use finisher::Concluding;
use finisher::{Finisher, Handover};
pub use interrupts::Interrupts;
use starts::Starts;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::Instrument;

#[derive(Debug, Clone)]
pub struct RunnerSettings {
    pub lease: LeaseTerms,
    /// How long a guest write transaction may stay open.
    pub txn_bound: Duration,
    /// How long a queued run's parked lease outlasts its due time, for a host to claim it.
    pub claim_slack: Duration,
    /// How long a claimed run may wait for a worker: its lease's deadline leaves this much
    /// room, and an attempt never runs past the database's deadline however late it
    /// starts.
    pub start_within: Duration,
    /// Most endings handed to the finisher and not yet recorded: beyond that, a worker
    /// waits to hand over.
    pub finisher_backlog: usize,
    /// The tenants' limits per rolling hour.
    pub quotas: Quotas,
}

impl Default for RunnerSettings {
    fn default() -> Self {
        RunnerSettings {
            lease: LeaseTerms::default(),
            txn_bound: Duration::from_secs(5),
            claim_slack: Duration::from_secs(30),
            start_within: Duration::from_secs(2),
            finisher_backlog: 1024,
            quotas: Quotas::default(),
        }
    }
}

/// What an attempt of a run led to, once recorded.
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
    /// The run went back to the queue without starting (claimed ahead, not started in
    /// time, or the host is stopping).
    GivenBack,
    /// Another run held the lease.
    Skipped,
    /// The run stopped being ours (marked crashed meanwhile); only the attempt's row was
    /// recorded.
    Abandoned,
}

/// A claimed run that waited this long for a worker is read again before its guest
/// starts (`Runner::still_claimed`); one that waited less starts as claimed: reading each
/// would cost a drain of short runs a round trip per run.
const RECHECK_AFTER: Duration = Duration::from_millis(100);

pub struct Runner {
    store: Store,
    engine: Arc<Engine>,
    host_id: String,
    settings: RunnerSettings,
    metrics: Arc<Metrics>,
    /// What every attempt's capabilities share (`Capabilities::for_attempt`).
    services: HostServices,
    finisher: Finisher,
    /// Writes when each guest started (`starts`).
    starts: Starts,
    quotas: QuotaBook,
    interrupts: Interrupts,
    pauses: Pauses,
    /// The installation's key that seals each kept journal, read (or made) once.
    seal_key: tokio::sync::OnceCell<SealKey>,
}

/// A claimed run without a lease, resolved.
enum Resolved {
    Leased(Box<Claimed>),
    Done(Concluding),
}

impl Runner {
    /// Starts the runner's finisher, which wakes `wake` when it queues a run (a
    /// follow-up) or a requeued run becomes due soon.
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
        wake: Arc<Notify>,
    ) -> Self {
        let finisher = Finisher::start(
            store.clone(),
            metrics.clone(),
            wake,
            settings.finisher_backlog,
        );
        let starts = Starts::start(store.clone());
        Runner {
            quotas: QuotaBook::new(settings.quotas.clone(), store.clone()),
            interrupts: Interrupts::default(),
            pauses: Pauses::new(store.clone()),
            services: HostServices {
                store: store.clone(),
                guest_db,
                files,
                links,
                txn_bound: settings.txn_bound,
            },
            store,
            engine,
            host_id,
            settings,
            metrics,
            finisher,
            starts,
            seal_key: tokio::sync::OnceCell::new(),
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn host_id(&self) -> &str {
        &self.host_id
    }

    pub fn settings(&self) -> &RunnerSettings {
        &self.settings
    }

    /// The fleet's usage against the tenants' quotas, as this host decides on it.
    pub fn quotas(&self) -> &QuotaBook {
        &self.quotas
    }

    /// The attempts running on this host, for an operator's cancel to stop.
    pub fn interrupts(&self) -> &Interrupts {
        &self.interrupts
    }

    /// What is paused and which tenants are disabled, as this host's claims see it.
    pub fn pauses(&self) -> &Pauses {
        &self.pauses
    }

    /// The terms this host starts attempts of `spec`'s job under.
    pub fn terms(&self, spec: &JobSpec, digest: &str) -> AttemptTerms {
        self.settings
            .lease
            .attempt(spec.limits.timeout, self.settings.start_within, digest)
    }

    /// Claims, leases and starts up to `limit` due runs of the jobs in `terms`, passing
    /// over the runs of tenants whose quota holds them.
    ///
    /// Nothing of a paused job, tenant or `lane` is claimed: a pause reaches this host's
    /// claims once [`Pauses`] has read it (at once for a pause made through this host).
    pub async fn claim(
        &self,
        lane: &str,
        terms: &BTreeMap<String, AttemptTerms>,
        limit: usize,
    ) -> Result<Vec<Claimed>, StoreError> {
        let pauses = self.pauses.current().await?;
        if pauses.lane(lane) {
            return Ok(Vec::new());
        }
        let mut unpaused = terms.clone();
        unpaused.retain(|job, _| !pauses.job(job));
        if unpaused.is_empty() {
            return Ok(Vec::new());
        }
        let mut paused = self.quotas.over(OverQuota::Wait).await?;
        paused.extend(pauses.paused_tenants());
        self.store
            .claim_runs(&ClaimRequest {
                host: &self.host_id,
                limit: i64::try_from(limit).unwrap_or(i64::MAX),
                run_id: None,
                terms: &unpaused,
                paused: &paused,
            })
            .await
    }

    /// Claims one run: a queued run (`host run`'s own), or one this host claimed without
    /// a lease. `None` if it is neither any more.
    pub async fn claim_one(
        &self,
        run_id: &str,
        spec: &JobSpec,
        digest: &str,
    ) -> Result<Option<Claimed>, StoreError> {
        let terms = BTreeMap::from([(spec.name.clone(), self.terms(spec, digest))]);
        let mut claimed = self
            .store
            .claim_runs(&ClaimRequest {
                host: &self.host_id,
                limit: 1,
                run_id: Some(run_id),
                terms: &terms,
                paused: &[],
            })
            .await?;
        Ok(claimed.pop())
    }

    /// Runs one attempt of a claimed run (status `running`) and hands what it led to to
    /// the finisher; the returned `Concluding` resolves once that is recorded. Setting
    /// `cancel` stops the attempt and puts the run back in the queue for any host.
    pub async fn attempt(
        &self,
        claimed: Claimed,
        spec: &JobSpec,
        loaded: &Loaded,
        cancel: CancelToken,
    ) -> Result<Concluding, StoreError> {
        let claimed = match claimed.lease {
            Some(_) => claimed,
            None => match self.without_lease(claimed, spec, &loaded.digest).await? {
                Resolved::Leased(claimed) => *claimed,
                Resolved::Done(concluding) => return Ok(concluding),
            },
        };
        let Claimed {
            run,
            lease,
            stamped_after,
            answered_at,
        } = claimed;
        let lease = lease.expect("resolved to a leased claim");
        if answered_at.elapsed() >= RECHECK_AFTER && !self.still_claimed(&run, &lease).await {
            return Ok(Concluding::ready(Ok(Step::Abandoned)));
        }
        if self.pauses.current().await?.tenant_disabled(&run.tenant) {
            return self
                .not_started(run, spec, lease, FailureCode::TenantDisabled)
                .await;
        }
        if self.quotas.fails(&run.tenant).await? {
            return self
                .not_started(run, spec, lease, FailureCode::QuotaExceeded)
                .await;
        }
        let timeout = spec.limits.timeout;
        // Never later than the database's deadline, however long the run waited for a
        // worker (the claim stamped `timeout + start_within` after `stamped_after`).
        let deadline =
            (Instant::now() + timeout).min(stamped_after + timeout + self.settings.start_within);
        // The lease expires `grace` after the deadline: until then, this host may still
        // record what happened (retrying if the database is briefly unreachable).
        let until = deadline + self.settings.lease.grace;
        let attempt = run.current_try();
        let span = crate::rules::trace::attempt_span(
            &run.trace(),
            &run.job,
            &run.id,
            &run.tenant,
            attempt,
            &spec.lane,
        );
        // The guest starts now: the run was claimed (its `updated_at`, the database's
        // clock) when the claim answered, and has waited for a worker since.
        let waited = Instant::now().saturating_duration_since(answered_at);
        let started_at = run.updated_at + i64::try_from(waited.as_millis()).unwrap_or(0);
        let mut report = if run.work_done == 1 {
            // The last pass committed `done` with its writes before its host stopped:
            // only the run's end is left to record, and the guest is not run again.
            AttemptReport::committed_done()
        } else {
            self.starts
                .started(GuestStart {
                    run_id: run.id.clone(),
                    generation: lease.generation,
                    at: started_at,
                })
                .await;
            let (_registered, stop) = self.interrupts.register(&run.id, &spec.lane);
            let log = AttemptLog::new(MAX_LOG_BYTES);
            let fuel_gauge = FuelGauge::default();
            let attempt_run = self
                .engine
                .run_attempt(AttemptSpec {
                    loaded,
                    cancel,
                    stop,
                    context: pass_context(&run, attempt),
                    record: spec.recorder.cap(),
                    memory: spec.limits.memory,
                    fuel: spec.limits.fuel,
                    deadline,
                    capabilities: Capabilities::for_attempt(&AttemptContext {
                        run: &run,
                        spec,
                        lease: &lease,
                        deadline,
                        attempt,
                        host: &self.services,
                    }),
                    log: log.clone(),
                    fuel_gauge: fuel_gauge.clone(),
                })
                .instrument(span.clone());
            let watched = live::Watched {
                log: &log,
                fuel: &fuel_gauge,
            };
            live::while_running(&self.store, watched, &run.id, run.attempts, attempt_run).await
        };
        let counters = report.counters.clone();
        self.note_failed_steps(&run, &report).await;
        self.keep_journal(&run, spec, loaded, attempt, &mut report)
            .await;
        let waits = report.waits_for_children;
        let signal_wait = report.waits_for_signal;
        let (ending, result) =
            span.in_scope(|| self.attempt_ending(&run, attempt, started_at, report));
        let allowed = self.attempts_allowed(&run, spec, &result).await;
        let decided = decide(&run, spec, allowed, result, counters);
        let decided = match (waits, signal_wait) {
            (true, _) => sleep_until_woken(&run, decided, CHILDREN_WAIT),
            (false, Some(timeout_ms)) => {
                sleep_until_woken(&run, decided, Duration::from_millis(timeout_ms))
            }
            (false, None) => decided,
        };
        let change = self.change(&run, spec, decided, true);
        self.hand_over(run, spec, lease, Some(ending), change, until)
            .await
    }

    /// The attempts a pass of `run` may use, read only when its attempt failed: its job's,
    /// or fewer if its start asked (`rules::enqueue::attempts_allowed`). A run whose bound
    /// cannot be read takes its job's, and the log says so.
    async fn attempts_allowed(
        &self,
        run: &RunRecord,
        spec: &JobSpec,
        result: &Result<Outcome, AttemptFailure>,
    ) -> u32 {
        let retries = spec.retry.retries;
        if result.is_ok() {
            return crate::rules::enqueue::attempts_allowed(retries, None);
        }
        let asked = match self.store.run_max_attempts(&run.id).await {
            Ok(asked) => asked,
            Err(e) => {
                tracing::warn!(run_id = %run.id, code = "driver_failed", error = %e, "could not read a failed run's max_attempts: its job's retries apply");
                None
            }
        };
        crate::rules::enqueue::attempts_allowed(retries, asked)
    }

    /// Whether a run claimed a while ago is still running the attempt it was claimed for:
    /// an operator's cancel, its family's end or surveillance may have ended it while it
    /// waited for a worker, and its guest must then not start (its lease has moved on, so
    /// nothing it did would commit, but it would run until told). A run that cannot be
    /// read is started: its lease still fences it.
    async fn still_claimed(&self, run: &RunRecord, lease: &Lease) -> bool {
        let now = match self.store.get_run(&run.id).await {
            Ok(now) => now,
            Err(e) => {
                tracing::warn!(run_id = %run.id, code = "driver_failed", error = %e, "could not read a claimed run again before its start");
                return true;
            }
        };
        let running = now.is_some_and(|now| {
            now.status() == Some(RunStatus::Running) && now.generation == Some(lease.generation)
        });
        if !running {
            tracing::info!(job = %run.job, run_id = %run.id, "a claimed run ended while it waited for a worker: not started");
        }
        running
    }

    /// Keeps the attempt's journal when its job's `record` says so: a failed attempt's
    /// by default. Diagnostic, like the failed steps: a failure to keep it is logged.
    async fn keep_journal(
        &self,
        run: &RunRecord,
        spec: &JobSpec,
        loaded: &Loaded,
        attempt: i64,
        report: &mut AttemptReport,
    ) {
        let Some((recorded, seed)) = report.journal.take() else {
            return;
        };
        let failed = report.result.is_err();
        if !spec.recorder.policy.keeps(failed) {
            return;
        }
        let (status, outcome, code) = ending_names(&report.result);
        let mut journal = JournalFile {
            format: journal::file::FORMAT.into(),
            version: journal::file::VERSION,
            job: run.job.clone(),
            tenant: run.tenant.clone(),
            run_id: run.id.clone(),
            seq: run.attempts,
            component: loaded.digest.clone(),
            context: pass_context(run, attempt),
            limits: journal::file::Limits {
                memory: spec.limits.memory,
                fuel: spec.limits.fuel,
                timeout_ms: spec.limits.timeout.as_millis() as u64,
                fuel_metered: self.engine.meters_fuel(),
            },
            insecure_seed: seed.to_string(),
            environment: Vec::new(),
            arguments: Vec::new(),
            stdin: String::new(),
            truncated: recorded.truncated,
            calls: recorded.calls,
            ending: journal::file::Ending {
                status: status.into(),
                outcome: outcome.map(Into::into),
                code: code.map(Into::into),
                fuel_used: report.fuel_used,
                log_digest: journal::file::log_digest(&report.log),
            },
            seal: None,
        };
        let key = self
            .seal_key
            .get_or_try_init(|| SealKey::kept_or_made(&self.store))
            .await;
        match key {
            Ok(key) => key.seal(&mut journal),
            // Kept unsealed: a replay says it cannot vouch for it.
            Err(error) => {
                tracing::warn!(run_id = %run.id, seq = run.attempts, code = "driver_failed", error = %error, "could not read the key that seals journals");
            }
        }
        if let Err(error) = journal.keep(&self.store).await {
            tracing::warn!(run_id = %run.id, seq = run.attempts, code = "driver_failed", error = %error, "could not keep the attempt's journal");
        }
    }

    /// Keeps, for each step a failed attempt reached without recording it, one more failed
    /// attempt and this failure (its code and its message, bounded and terminal-safe), so
    /// the run's ledger says where its attempts failed and how often. An attempt stopped
    /// by the host's shutdown did not fail. Diagnostic: a failure to note it is logged,
    /// and the attempt's ending recorded all the same.
    async fn note_failed_steps(&self, run: &RunRecord, report: &AttemptReport) {
        let Err(failure) = &report.result else {
            return;
        };
        if report.steps_reached.is_empty() || failure.code == FailureCode::Cancelled {
            return;
        }
        let message = failure.message.as_deref().map(|m| {
            let bounded = crate::rules::guest_text::for_storage(m, MAX_STEP_ERROR_BYTES);
            crate::rules::guest_text::for_terminal(&bounded).into_owned()
        });
        let noted = self
            .store
            .note_step_failures(
                &run.id,
                run.pass,
                &report.steps_reached,
                failure.code.as_str(),
                message.as_deref(),
            )
            .await;
        if let Err(e) = noted {
            tracing::warn!(run_id = %run.id, code = "driver_failed", error = %e, "could not note the steps the attempt failed in");
        }
    }

    /// Hands what a run's attempt (or a decision without one) led to to the finisher.
    async fn hand_over(
        &self,
        run: RunRecord,
        spec: &JobSpec,
        lease: Lease,
        attempt: Option<AttemptEnding>,
        change: RunChange,
        until: Instant,
    ) -> Result<Concluding, StoreError> {
        self.finisher
            .hand_over(Handover {
                recording: Recording {
                    run_id: run.id.clone(),
                    lease,
                    attempt,
                    change,
                },
                run,
                until,
                job_payload: spec.payload.to_string(),
                retry: spec.retry.clone(),
                limited: spec.flow.sequential || !spec.flow.limits.is_empty(),
            })
            .await
    }

    /// Ends a claimed run without running it, reported: its tenant is over a quota with
    /// policy `fail` (`failed`, `quota_exceeded`), or was disabled while the run waited
    /// (`skipped`, `tenant_disabled`).
    async fn not_started(
        &self,
        run: RunRecord,
        spec: &JobSpec,
        lease: Lease,
        code: FailureCode,
    ) -> Result<Concluding, StoreError> {
        let change = self.change(&run, spec, unstarted(&run, code), true);
        let until = Instant::now() + self.settings.lease.grace;
        tracing::info!(
            job = %run.job,
            run_id = %run.id,
            tenant = %run.tenant,
            code = code.as_str(),
            "run not started"
        );
        self.hand_over(run, spec, lease, None, change, until).await
    }

    /// Runs one attempt of a claimed run and waits until it is recorded.
    pub async fn step(
        &self,
        claimed: Claimed,
        spec: &JobSpec,
        loaded: &Loaded,
        cancel: CancelToken,
    ) -> Result<Step, StoreError> {
        self.attempt(claimed, spec, loaded, cancel)
            .await?
            .recorded()
            .await
    }

    /// Puts a claimed run that will not start here back in the queue, as it was.
    pub async fn give_back(&self, claimed: Claimed) -> Result<Concluding, StoreError> {
        let Some(lease) = claimed.lease else {
            // Claimed without a lease: nothing was started, nothing to park.
            self.store
                .skip_run(&claimed.run.id, "the host stopped before it could run")
                .await?;
            return Ok(Concluding::ready(Ok(Step::Skipped)));
        };
        let hold_ms = self
            .settings
            .lease
            .park_for(Duration::ZERO, self.settings.claim_slack);
        let until = Instant::now() + self.settings.lease.grace;
        self.finisher
            .hand_over(Handover {
                recording: Recording {
                    run_id: claimed.run.id.clone(),
                    lease,
                    attempt: None,
                    change: RunChange::GiveBack { hold_ms },
                },
                run: claimed.run,
                until,
                job_payload: String::new(),
                retry: crate::rules::job::RetryPolicy::default(),
                // Given back due at once: the dispatcher's next look at the queue finds it.
                limited: false,
            })
            .await
    }

    /// Waits until every ending handed over is recorded (or given up on), then stops the
    /// finisher: the last thing a host does before it exits.
    pub async fn flush(&self) {
        self.starts.close().await;
        self.finisher.close().await;
    }

    /// A claim that got no lease. A run that held one before (a retry, a later pass) lost
    /// it: that is recorded. A first attempt found another run holding it: a kick folds
    /// into the holder's pending flag (the holder queues one follow-up when it ends) and
    /// is no run of its own, so its row goes (one a guest's pass started stays, skipped);
    /// anything else is skipped; if the holder ended meanwhile, the lease is free: claim
    /// again.
    async fn without_lease(
        &self,
        claimed: Claimed,
        spec: &JobSpec,
        digest: &str,
    ) -> Result<Resolved, StoreError> {
        const TRIES: usize = 5;
        let run = claimed.run;
        if let Some(previous) = LeaseTerms::held_by(&run) {
            // A retry could not move the lease on: it moved on without this run.
            let decided = unstarted(&run, FailureCode::LeaseLost);
            let change = self.change(&run, spec, decided, false);
            let until = Instant::now() + self.settings.lease.grace;
            let concluding = self
                .hand_over(run, spec, previous, None, change, until)
                .await?;
            return Ok(Resolved::Done(concluding));
        }
        // A start (or a boot run) that raced a kick to the lease counts as a kick: it must
        // not be lost.
        let is_kick = [Origin::Kick, Origin::Start, Origin::Boot]
            .iter()
            .any(|origin| run.origin == origin.as_str());
        for _ in 0..TRIES {
            if !is_kick {
                break;
            }
            if self.store.set_pending(&run.job, &run.instance).await? {
                if self.store.forget_folded_kick(&run.id).await? {
                    tracing::debug!(job = %run.job, run_id = %run.id, "kick folded into the running run's pending flag");
                } else {
                    self.skip(
                        &run,
                        "the job was running: kick folded into its pending flag",
                    )
                    .await?;
                }
                return Ok(Resolved::Done(Concluding::ready(Ok(Step::Skipped))));
            }
            match self.claim_one(&run.id, spec, digest).await? {
                Some(claimed) if claimed.lease.is_some() => {
                    return Ok(Resolved::Leased(Box::new(claimed)));
                }
                Some(_) => {}
                None => return Ok(Resolved::Done(Concluding::ready(Ok(Step::Abandoned)))),
            }
        }
        self.skip(&run, "the job's lease was held by another run")
            .await?;
        Ok(Resolved::Done(Concluding::ready(Ok(Step::Skipped))))
    }

    async fn skip(&self, run: &RunRecord, reason: &str) -> Result<(), StoreError> {
        self.store.skip_run(&run.id, reason).await?;
        self.metrics
            .run_finished(&run.job, &run.tenant, RunStatus::Skipped.as_str(), None);
        tracing::debug!(job = %run.job, run_id = %run.id, "run skipped: lease held");
        Ok(())
    }

    /// The attempt's row, and its metrics and log line (failures at info, the rest at
    /// debug: a line per successful run would cost more than the run).
    fn attempt_ending(
        &self,
        run: &RunRecord,
        attempt: i64,
        started_at: i64,
        report: AttemptReport,
    ) -> (AttemptEnding, Result<Outcome, AttemptFailure>) {
        let (status, outcome, code) = ending_names(&report.result);
        self.metrics.attempt_finished(
            &run.job,
            &run.tenant,
            status,
            code,
            report.duration,
            report.fuel_used,
        );
        let duration_ms = report.duration.as_millis() as u64;
        if code.is_some() {
            tracing::info!(job = %run.job, run_id = %run.id, pass = run.pass, attempt, status, code, duration_ms, fuel_used = report.fuel_used, peak_memory = report.peak_memory, "attempt finished");
        } else {
            tracing::debug!(job = %run.job, run_id = %run.id, pass = run.pass, attempt, status, duration_ms, fuel_used = report.fuel_used, peak_memory = report.peak_memory, "attempt finished");
        }
        let ending = AttemptEnding {
            seq: run.attempts,
            pass: run.pass,
            attempt,
            host: self.host_id.clone(),
            status,
            outcome,
            code,
            fuel_used: Some(i64::try_from(report.fuel_used).unwrap_or(i64::MAX)),
            peak_memory: Some(report.peak_memory as i64),
            duration_ms: report.duration.as_millis() as i64,
            log: report.log,
            log_truncated: report.log_truncated,
            started_at,
        };
        (ending, report.result)
    }

    /// The row change `decided` makes to the run. `require_lease`: an ending only commits
    /// while the attempt still holds its lease.
    fn change(
        &self,
        run: &RunRecord,
        spec: &JobSpec,
        decided: Decided,
        require_lease: bool,
    ) -> RunChange {
        match decided {
            Decided::Requeue {
                delay,
                pass,
                cursor,
                counters,
                failures,
                defers,
                failure,
            } => RunChange::Requeue {
                delay_ms: i64::try_from(delay.as_millis()).unwrap_or(i64::MAX),
                hold_ms: self
                    .settings
                    .lease
                    .park_for(delay, self.settings.claim_slack),
                pass,
                cursor,
                counters,
                failures,
                defers,
                code: failure.code.map(FailureCode::as_str),
                error: failure.message,
            },
            Decided::Finish {
                failure,
                failures,
                counters,
            } => RunChange::Finish {
                require_lease,
                status: final_status(failure.code),
                code: failure.code.map(FailureCode::as_str),
                error: failure.message,
                cursor: run.cursor.clone(),
                counters,
                pass: run.pass,
                failures,
                follow_up: Some(Box::new(follow_up(
                    run,
                    spec.payload.to_string(),
                    &spec.retry,
                    final_status(failure.code),
                    failures,
                ))),
                report: failure.code.map(|code| {
                    let report = report_about(run, code);
                    Box::new(match &failure.reason {
                        Some(reason) => report.with_reason(reason),
                        None => report,
                    })
                }),
            },
        }
    }
}

/// An attempt's status, outcome and code as its row (and its journal) names them.
fn ending_names(
    result: &Result<Outcome, AttemptFailure>,
) -> (&'static str, Option<&'static str>, Option<&'static str>) {
    match result {
        Ok(outcome) => ("succeeded", Some(outcome.name()), None),
        Err(failure) if failure.code.cancels() => ("cancelled", None, Some(failure.code.as_str())),
        Err(failure) => ("failed", None, Some(failure.code.as_str())),
    }
}

/// The report a failed run's ending writes.
fn report_about(run: &RunRecord, code: FailureCode) -> NewReport {
    let kind = match code {
        FailureCode::LeaseLost => ReportKind::LeaseLost,
        code if code.cancels() => ReportKind::Cancelled,
        _ => ReportKind::RunFailed,
    };
    NewReport::about_run(kind, run, code)
}

/// How long a run that waits for its children sleeps: in effect for ever, since the
/// family sweep (`crate::runs::family`) makes it due once its children ended.
pub const CHILDREN_WAIT: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A pass that recorded a wait for its children, or for a signal, and ended with its next
/// pass queued (`continue` or `defer`) sleeps instead: for children until they ended (the
/// family sweep wakes it), for a signal until it comes (its send, or the sweep, wakes
/// it) or `sleep` — its timeout — passed. A failed attempt's wait is void: its retry
/// runs the pass again.
fn sleep_until_woken(run: &RunRecord, decided: Decided, sleep: Duration) -> Decided {
    match decided {
        Decided::Requeue {
            pass,
            cursor,
            counters,
            failures,
            defers,
            failure,
            ..
        } if failure.code.is_none() && pass > run.pass => Decided::Requeue {
            delay: sleep,
            pass,
            cursor,
            counters,
            failures,
            defers,
            failure,
        },
        other => other,
    }
}

/// The run a kick left pending while `run` ran, queued as it ends with `status` after
/// `failures` failed attempts in a row: after a failure it waits the job's backoff, as a
/// retry would, so a job kicked faster than it fails does not run again at kick rate.
pub(super) fn follow_up(
    run: &RunRecord,
    payload: String,
    retry: &crate::rules::job::RetryPolicy,
    status: RunStatus,
    failures: i64,
) -> crate::store::NewRun {
    let mut next = crate::queue::kick::follow_up(run, payload);
    if status == RunStatus::Failed {
        let failures = u32::try_from(failures.max(1)).unwrap_or(u32::MAX);
        let delay = backoff::delay(retry, failures, &mut rand::rng());
        next.delay_ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
    }
    next
}

/// The status a run ends with, by its failure code (none: it succeeded).
fn final_status(code: Option<FailureCode>) -> RunStatus {
    match code {
        None => RunStatus::Succeeded,
        Some(code) if code.cancels() => RunStatus::Cancelled,
        Some(FailureCode::TenantDisabled) => RunStatus::Skipped,
        Some(_) => RunStatus::Failed,
    }
}

/// What to do with a run after an attempt.
#[derive(Debug, PartialEq)]
enum Decided {
    /// Back to the queue: a retry after backoff, the next pass, or a cancelled attempt.
    Requeue {
        delay: Duration,
        pass: i64,
        cursor: Option<String>,
        /// The counters the pass leaves (JSON), `None`: unchanged.
        counters: Option<String>,
        failures: i64,
        /// The run's deferred passes, this one included.
        defers: i64,
        failure: Failure,
    },
    /// The run is over.
    Finish {
        failure: Failure,
        failures: i64,
        counters: Option<String>,
    },
}

/// The rules: an outcome ends the run or queues its next pass, and commits the pass's
/// counters with it; a `defer` is a pass that ends without using an attempt (the failures
/// start again from none, as after any pass), counted on the run, and the one past the
/// job's `max_defers` (by default `job::DEFAULT_MAX_DEFERS`) ends the run
/// `too_many_defers` with the pass's counters dropped; a
/// failure is retried after backoff while `allowed` attempts remain (its job's, or fewer
/// its start asked) and its code allows — unless a
/// refusal every attempt would meet alike caused it (a statement outside the grant) —,
/// and its counter changes are dropped with the rest of the attempt; a cancelled attempt (host
/// shutdown) is requeued without counting against the job.
fn decide(
    run: &RunRecord,
    spec: &JobSpec,
    allowed: u32,
    result: Result<Outcome, AttemptFailure>,
    counters: Option<String>,
) -> Decided {
    let requeue =
        |delay, pass, cursor: Option<String>, counters, failures, failure| Decided::Requeue {
            delay,
            pass,
            cursor,
            counters,
            failures,
            defers: run.defers,
            failure,
        };
    match result {
        Ok(Outcome::Done) => Decided::Finish {
            failure: Failure::none(),
            failures: 0,
            counters,
        },
        Ok(Outcome::Continue { cursor }) => requeue(
            Duration::ZERO,
            run.pass + 1,
            Some(cursor),
            counters,
            0,
            Failure::none(),
        ),
        Ok(Outcome::Defer { .. }) if run.defers >= i64::from(spec.flow.defers_allowed()) => {
            Decided::Finish {
                failure: Failure::code(FailureCode::TooManyDefers),
                failures: run.failures,
                counters: None,
            }
        }
        Ok(Outcome::Defer { delay }) => Decided::Requeue {
            delay,
            pass: run.pass + 1,
            cursor: run.cursor.clone(),
            counters,
            failures: 0,
            defers: run.defers + 1,
            failure: Failure::none(),
        },
        Err(f) if f.code == FailureCode::Cancelled => requeue(
            Duration::ZERO,
            run.pass,
            run.cursor.clone(),
            None,
            run.failures,
            Failure::code(FailureCode::Cancelled),
        ),
        Err(f) => {
            let failures = run.failures + 1;
            let failure = Failure {
                code: Some(f.code),
                message: f.message,
                reason: f.reason,
            };
            if f.code.is_retryable() && !f.deterministic && failures < i64::from(allowed) {
                let delay = backoff::delay(&spec.retry, failures as u32, &mut rand::rng());
                requeue(delay, run.pass, run.cursor.clone(), None, failures, failure)
            } else {
                Decided::Finish {
                    failure,
                    failures,
                    counters: None,
                }
            }
        }
    }
}

/// A claimed run that ends without an attempt, with `code`: its tenant over a quota with
/// policy `fail` (`quota_exceeded`) or disabled meanwhile (`tenant_disabled`), or a retry
/// whose lease moved on without it (`lease_lost`). No attempt ran, so none is counted, and
/// the counters stay as the last pass left them.
fn unstarted(run: &RunRecord, code: FailureCode) -> Decided {
    Decided::Finish {
        failure: Failure::code(code),
        failures: run.failures,
        counters: None,
    }
}

/// A failure code with the guest's own message, if any, and the host's reason for a
/// refusal.
#[derive(Debug, PartialEq)]
struct Failure {
    code: Option<FailureCode>,
    message: Option<String>,
    reason: Option<String>,
}

impl Failure {
    fn none() -> Self {
        Failure {
            code: None,
            message: None,
            reason: None,
        }
    }

    fn code(code: FailureCode) -> Self {
        Failure {
            code: Some(code),
            message: None,
            reason: None,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::job::{DEFAULT_MAX_DEFERS, Flow, RetryPolicy};

    /// A run in its third pass, after `failures` failed attempts of it.
    fn run(failures: i64, defers: i64) -> RunRecord {
        RunRecord {
            id: "r".into(),
            job: "demo".into(),
            instance: "default".into(),
            tenant: "acme".into(),
            origin: "kick".into(),
            payload: "{}".into(),
            status: "running".into(),
            pass: 3,
            cursor: Some("\"page-3\"".into()),
            counters: "{}".into(),
            attempts: failures + 1,
            failures,
            generation: Some(1),
            defers,
            ..RunRecord::default()
        }
    }

    /// A job with `retries` retries (backoff from 100 ms to 1 s) and `max_defers`.
    fn spec(retries: u32, max_defers: Option<u32>) -> JobSpec {
        JobSpec {
            name: "demo".into(),
            tenant: "acme".into(),
            component: "demo.wasm".into(),
            limits: Default::default(),
            retry: RetryPolicy {
                retries,
                backoff_base: Duration::from_millis(100),
                backoff_max: Duration::from_secs(1),
            },
            grants: Default::default(),
            actions: Default::default(),
            schedule: None,
            payload: serde_json::json!({}),
            per_tenant: false,
            on: Default::default(),
            on_where: Default::default(),
            run_on_boot: false,
            flow: Flow {
                max_defers,
                ..Flow::default()
            },
            lane: crate::rules::job::DEFAULT_LANE.into(),
            recorder: Default::default(),
            deliver: Default::default(),
        }
    }

    fn failed(code: FailureCode) -> Result<Outcome, AttemptFailure> {
        Err(AttemptFailure {
            code,
            message: Some("it broke".into()),
            reason: None,
            deterministic: false,
        })
    }

    const COUNTERS: &str = r#"{"rows":2}"#;

    fn decided(
        run: &RunRecord,
        spec: &JobSpec,
        result: Result<Outcome, AttemptFailure>,
    ) -> Decided {
        let allowed = crate::rules::enqueue::attempts_allowed(spec.retry.retries, None);
        decide(run, spec, allowed, result, Some(COUNTERS.into()))
    }

    /// The run ended with `code`, after `failures` failures, its pass's counters dropped.
    fn finished_with(code: FailureCode, failures: i64, message: Option<&str>) -> Decided {
        Decided::Finish {
            failure: Failure {
                code: Some(code),
                message: message.map(str::to_string),
                reason: None,
            },
            failures,
            counters: None,
        }
    }

    #[test]
    fn done_ends_the_run_succeeded_with_its_counters() {
        let decided = decided(&run(1, 0), &spec(2, None), Ok(Outcome::Done));
        assert_eq!(
            decided,
            Decided::Finish {
                failure: Failure::none(),
                failures: 0,
                counters: Some(COUNTERS.into()),
            }
        );
        assert_eq!(final_status(None), RunStatus::Succeeded);
    }

    #[test]
    fn continue_queues_the_next_pass_at_once_with_a_fresh_count_of_failures() {
        let next = Outcome::Continue {
            cursor: "\"page-4\"".into(),
        };
        assert_eq!(
            decided(&run(1, 2), &spec(2, None), Ok(next)),
            Decided::Requeue {
                delay: Duration::ZERO,
                pass: 4,
                cursor: Some("\"page-4\"".into()),
                counters: Some(COUNTERS.into()),
                failures: 0,
                defers: 2,
                failure: Failure::none(),
            }
        );
    }

    #[test]
    fn a_failure_with_retries_left_is_retried_after_backoff_in_the_same_pass() {
        let Decided::Requeue {
            delay,
            pass,
            cursor,
            counters,
            failures,
            defers,
            failure,
        } = decided(
            &run(1, 0),
            &spec(2, None),
            failed(FailureCode::HandlerFailed),
        )
        else {
            panic!("a second failure of three allowed is retried");
        };
        // The second failure waits between half of 200 ms and all of it.
        assert!(
            (Duration::from_millis(100)..=Duration::from_millis(200)).contains(&delay),
            "{delay:?}"
        );
        assert_eq!((pass, cursor.as_deref()), (3, Some("\"page-3\"")));
        assert_eq!((counters, failures, defers), (None, 2, 0));
        assert_eq!(failure.code, Some(FailureCode::HandlerFailed));
        assert_eq!(failure.message.as_deref(), Some("it broke"));
    }

    #[test]
    fn the_failure_that_uses_the_last_retry_ends_the_run_failed() {
        assert_eq!(
            decided(
                &run(2, 0),
                &spec(2, None),
                failed(FailureCode::HandlerFailed)
            ),
            finished_with(FailureCode::HandlerFailed, 3, Some("it broke"))
        );
        assert_eq!(
            final_status(Some(FailureCode::HandlerFailed)),
            RunStatus::Failed
        );
    }

    #[test]
    fn a_runs_own_max_attempts_ends_it_before_its_jobs_retries_are_used() {
        let allowed = crate::rules::enqueue::attempts_allowed(2, Some(2));
        let failed_twice = decide(
            &run(1, 0),
            &spec(2, None),
            allowed,
            failed(FailureCode::HandlerFailed),
            None,
        );
        assert_eq!(
            failed_twice,
            finished_with(FailureCode::HandlerFailed, 2, Some("it broke"))
        );
    }

    #[test]
    fn a_code_that_no_retry_could_fix_ends_the_run_with_retries_left() {
        for code in [
            FailureCode::Unrecoverable,
            FailureCode::CapabilityRefused,
            FailureCode::InvalidOutcome,
            FailureCode::InvalidDefer,
            FailureCode::StepReused,
        ] {
            assert_eq!(
                decided(&run(0, 0), &spec(5, None), failed(code)),
                finished_with(code, 1, Some("it broke")),
                "{code}"
            );
        }
    }

    #[test]
    fn a_refusal_every_attempt_would_meet_ends_the_run_with_retries_left() {
        let refused = |deterministic| {
            Err(AttemptFailure {
                code: FailureCode::QueryRefused,
                message: Some("it broke".into()),
                reason: Some("not-granted".into()),
                deterministic,
            })
        };
        assert!(matches!(
            decided(&run(0, 0), &spec(3, None), refused(true)),
            Decided::Finish { failures: 1, ref failure, .. }
                if failure.code == Some(FailureCode::QueryRefused)
                    && failure.reason.as_deref() == Some("not-granted")
        ));
        // A refusal of the moment (a rollback, a constraint on data that may change) is
        // retried like any failure.
        assert!(matches!(
            decided(&run(0, 0), &spec(3, None), refused(false)),
            Decided::Requeue { failures: 1, .. }
        ));
    }

    #[test]
    fn the_limits_of_an_attempt_are_retried_like_any_failure() {
        for code in [
            FailureCode::Timeout,
            FailureCode::OutOfFuel,
            FailureCode::MemoryLimit,
            FailureCode::ResourceLimit,
        ] {
            let retried = decided(&run(0, 0), &spec(1, None), failed(code));
            assert!(
                matches!(&retried, Decided::Requeue { failures: 1, failure, .. } if failure.code == Some(code)),
                "{code}: {retried:?}"
            );
            assert_eq!(
                decided(&run(1, 0), &spec(1, None), failed(code)),
                finished_with(code, 2, Some("it broke")),
                "{code}"
            );
        }
    }

    #[test]
    fn a_lost_lease_is_retried_while_retries_remain_then_ends_the_run() {
        let retried = decided(&run(0, 0), &spec(1, None), failed(FailureCode::LeaseLost));
        assert!(
            matches!(
                &retried,
                Decided::Requeue {
                    failures: 1,
                    counters: None,
                    ..
                }
            ),
            "{retried:?}"
        );
        assert_eq!(
            decided(&run(1, 0), &spec(1, None), failed(FailureCode::LeaseLost)),
            finished_with(FailureCode::LeaseLost, 2, Some("it broke"))
        );
        // A retry that finds its lease moved on ends the run without another attempt.
        assert_eq!(
            unstarted(&run(1, 0), FailureCode::LeaseLost),
            finished_with(FailureCode::LeaseLost, 1, None)
        );
    }

    #[test]
    fn a_run_over_quota_or_of_a_disabled_tenant_ends_without_an_attempt() {
        assert_eq!(
            unstarted(&run(1, 0), FailureCode::QuotaExceeded),
            finished_with(FailureCode::QuotaExceeded, 1, None)
        );
        assert_eq!(
            final_status(Some(FailureCode::QuotaExceeded)),
            RunStatus::Failed
        );
        assert_eq!(
            unstarted(&run(0, 0), FailureCode::TenantDisabled),
            finished_with(FailureCode::TenantDisabled, 0, None)
        );
        assert_eq!(
            final_status(Some(FailureCode::TenantDisabled)),
            RunStatus::Skipped
        );
    }

    #[test]
    fn a_defer_queues_the_next_pass_after_its_delay_and_counts_it() {
        let defer = Outcome::Defer {
            delay: Duration::from_secs(30),
        };
        assert_eq!(
            decided(&run(1, 2), &spec(0, Some(3)), Ok(defer)),
            Decided::Requeue {
                delay: Duration::from_secs(30),
                pass: 4,
                cursor: Some("\"page-3\"".into()),
                counters: Some(COUNTERS.into()),
                failures: 0,
                defers: 3,
                failure: Failure::none(),
            }
        );
    }

    #[test]
    fn the_defer_past_max_defers_ends_the_run_and_drops_its_counters() {
        let defer = || {
            Ok(Outcome::Defer {
                delay: Duration::from_secs(1),
            })
        };
        assert_eq!(
            decided(&run(0, 3), &spec(2, Some(3)), defer()),
            finished_with(FailureCode::TooManyDefers, 0, None)
        );
        assert_eq!(
            decided(&run(0, 0), &spec(2, Some(0)), defer()),
            finished_with(FailureCode::TooManyDefers, 0, None)
        );
    }

    #[test]
    fn without_max_defers_a_run_still_ends_after_the_default_cap() {
        let defer = || {
            Ok(Outcome::Defer {
                delay: Duration::from_secs(1),
            })
        };
        let last = i64::from(DEFAULT_MAX_DEFERS) - 1;
        assert!(matches!(
            decided(&run(0, last), &spec(0, None), defer()),
            Decided::Requeue { defers, .. } if defers == last + 1
        ));
        assert_eq!(
            decided(&run(0, last + 1), &spec(0, None), defer()),
            finished_with(FailureCode::TooManyDefers, 0, None)
        );
    }

    #[test]
    fn a_cancelled_attempt_is_requeued_at_once_without_counting_a_failure() {
        assert_eq!(
            decided(&run(1, 2), &spec(0, None), failed(FailureCode::Cancelled)),
            Decided::Requeue {
                delay: Duration::ZERO,
                pass: 3,
                cursor: Some("\"page-3\"".into()),
                counters: None,
                failures: 1,
                defers: 2,
                failure: Failure::code(FailureCode::Cancelled),
            }
        );
    }

    #[test]
    fn an_operators_cancel_ends_the_run_cancelled_with_retries_left() {
        assert_eq!(
            decided(
                &run(0, 0),
                &spec(3, None),
                failed(FailureCode::CancelledByOperator)
            ),
            finished_with(FailureCode::CancelledByOperator, 1, Some("it broke"))
        );
        assert_eq!(
            final_status(Some(FailureCode::CancelledByOperator)),
            RunStatus::Cancelled
        );
    }

    #[test]
    fn an_attempt_stopped_by_its_family_ends_with_the_familys_status_code_and_report() {
        let parent_failed = failed(FailureCode::ParentFailed);
        assert_eq!(
            ending_names(&parent_failed),
            ("cancelled", None, Some("parent_failed"))
        );
        assert_eq!(
            decided(&run(0, 0), &spec(3, None), parent_failed),
            finished_with(FailureCode::ParentFailed, 1, Some("it broke"))
        );
        assert_eq!(
            final_status(Some(FailureCode::ParentFailed)),
            RunStatus::Cancelled
        );
        let report = report_about(&run(0, 0), FailureCode::ParentFailed);
        assert_eq!(report.kind, ReportKind::Cancelled);
        let child_failed = failed(FailureCode::ChildFailed);
        assert_eq!(
            ending_names(&child_failed),
            ("failed", None, Some("child_failed"))
        );
        assert_eq!(
            final_status(Some(FailureCode::ChildFailed)),
            RunStatus::Failed
        );
    }
}
