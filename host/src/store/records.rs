//! The rows the store reads and the arguments of its writes.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Queued,
    Running,
    Succeeded,
    Failed,
    Skipped,
    Crashed,
    /// Ended by an operator's cancel (code `cancelled_by_operator`).
    Cancelled,
}

/// How a queued run that sleeps until its children ended is shown (it is `queued` in
/// its row, with its lease parked).
pub const WAITING: &str = "waiting";

/// How a running run whose guest has not started is shown: a host claimed it ahead of a
/// free worker (it is `running` in its row, its lease taken, counted by every limit).
pub const CLAIMED: &str = "claimed";

impl RunStatus {
    pub const ALL: [RunStatus; 7] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::Skipped,
        RunStatus::Crashed,
        RunStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Skipped => "skipped",
            RunStatus::Crashed => "crashed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(text: &str) -> Option<RunStatus> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    pub fn is_terminal(self) -> bool {
        !matches!(self, RunStatus::Queued | RunStatus::Running)
    }
}

/// Why a run exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// `host run`.
    Manual,
    /// A cron tick.
    Cron,
    /// A kick (HTTP or `host kick`), or the follow-up of kicks that arrived during a run.
    Kick,
    /// A rerun of a crashed run.
    Rerun,
    /// A start (`host start`, `POST /jobs/{name}/runs`) that found no live run to join.
    Start,
    /// An event the job subscribes to (`POST /events/{name}`, `host emit`).
    Event,
    /// The first registration of a new version of a `run_on_boot` job.
    Boot,
    /// An operator's retry of an ended run (`retry_of` names it).
    Retry,
    /// Another run's `jobs.enqueue` (`parent_run` names it).
    Child,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Manual => "manual",
            Origin::Cron => "cron",
            Origin::Kick => "kick",
            Origin::Rerun => "rerun",
            Origin::Start => "start",
            Origin::Event => "event",
            Origin::Boot => "boot",
            Origin::Retry => "retry",
            Origin::Child => "child",
        }
    }
}

crate::record! {
    #[derive(Debug, Clone, Default, Serialize)]
    pub struct RunRecord {
        pub id: String,
        pub job: String,
        pub instance: String,
        pub tenant: String,
        pub origin: String,
        pub payload: String,
        pub status: String,
        pub pass: i64,
        pub cursor: Option<String>,
        pub counters: String,
        pub attempts: i64,
        pub failures: i64,
        pub generation: Option<i64>,
        pub host: Option<String>,
        pub last_code: Option<String>,
        pub last_error: Option<String>,
        pub component_digest: Option<String>,
        pub scheduled_for: Option<i64>,
        pub rerun_of: Option<String>,
        pub next_attempt_at: i64,
        pub created_at: i64,
        pub started_at: Option<i64>,
        pub finished_at: Option<i64>,
        pub updated_at: i64,
        /// 1 once a pass committed `done` with its writes: only the run's end is left to
        /// record.
        pub work_done: i64,
        /// How many passes ended `defer` (the job's `max_defers` bounds them).
        pub defers: i64,
        /// The `traceparent` it was queued with, if any (see `RunRecord::trace`).
        pub trace_parent: Option<String>,
        /// A crashed run's rerun, which took its ledger (migration 0020). Not read by claims,
        /// whose runs are running.
        pub resumed_by: Option<String>,
        /// The run this one retries (an operator's retry, migration 0022).
        pub retry_of: Option<String>,
        /// The retry an operator queued of this run, once.
        pub retried_by: Option<String>,
        /// The run whose `jobs` call queued this one, and its attempt (migration 0023).
        pub parent_run: Option<String>,
        pub parent_attempt: Option<i64>,
        /// The event that queued a run of origin `event`.
        pub event: Option<String>,
        /// 1: neither waited for nor cancelled with its parent.
        pub detached: i64,
        /// The pass that waits for its children, and how a failed child counts.
        pub wait_pass: Option<i64>,
        pub wait_policy: Option<String>,
        /// The JSON value the run hands a waiting parent.
        pub result: Option<String>,
        /// The signal the pass `signal_pass` waits for (migration 0033).
        pub signal_name: Option<String>,
        pub signal_pass: Option<i64>,
        /// When the current attempt's guest started (migration 0032); none while the run
        /// is claimed and waits for a worker. Not read by claims, which clear it.
        pub guest_started_at: Option<i64>,
        /// The attempts a pass may use that its start asked for, fewer than its job's
        /// (migration 0036). Not read by claims: the runner reads it when an attempt fails.
        pub max_attempts: Option<i64>,
    }
    missing_as_default: resumed_by, retry_of, retried_by, parent_run, parent_attempt, event,
        detached, wait_pass, wait_policy, result, signal_name, signal_pass, guest_started_at,
        max_attempts
}

impl RunRecord {
    pub fn status(&self) -> Option<RunStatus> {
        RunStatus::parse(&self.status)
    }

    /// Recorded skipped as it was queued: its job's `max_per_tenant` was reached.
    pub fn dropped_by_limit(&self) -> bool {
        self.status() == Some(RunStatus::Skipped)
            && self.last_code.as_deref()
                == Some(crate::rules::failure::FailureCode::TenantLimit.as_str())
    }

    /// The pass whose children the run sleeps waiting for, if it does: the pass that
    /// asked to wait has ended and the next is queued (`crate::runs::family`).
    pub fn waiting_pass(&self) -> Option<i64> {
        let pass = self.wait_pass.filter(|p| *p < self.pass)?;
        (self.status == RunStatus::Queued.as_str() && self.wait_policy.is_some()).then_some(pass)
    }

    /// The try of its current pass the run is on (or, queued, will be on next): 1 plus the
    /// attempts of the pass that failed.
    pub fn current_try(&self) -> i64 {
        self.failures + 1
    }

    /// The signal the run sleeps waiting for, if it does: the pass that asked to wait
    /// has ended, the next is queued, and no signal woke it yet.
    pub fn waiting_signal(&self) -> Option<&str> {
        let name = self.signal_name.as_deref()?;
        (self.status == RunStatus::Queued.as_str() && self.signal_pass == Some(self.pass - 1))
            .then_some(name)
    }

    /// Claimed ahead of a free worker: `running` in its row, its guest not started.
    pub fn claimed(&self) -> bool {
        self.status == RunStatus::Running.as_str() && self.guest_started_at.is_none()
    }

    /// The status shown to people: a queued run that waits for its children or a signal
    /// is `waiting`, a running one whose guest has not started `claimed`.
    pub fn shown_status(&self) -> &str {
        if self.waiting_pass().is_some() || self.waiting_signal().is_some() {
            WAITING
        } else if self.claimed() {
            CLAIMED
        } else {
            &self.status
        }
    }

    /// The run's trace context: decided when it was queued, or derived from its id.
    pub fn trace(&self) -> crate::rules::trace::TraceParent {
        crate::rules::trace::TraceParent::of_run(self.trace_parent.as_deref(), &self.id)
    }
}

/// That the guest of a run's attempt (at the lease's `generation`) started `at` (the
/// database's clock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestStart {
    pub run_id: String,
    pub generation: i64,
    pub at: i64,
}

crate::record! {
    #[derive(Debug, Clone, Default, Serialize)]
    pub struct AttemptRecord {
        pub run_id: String,
        pub seq: i64,
        pub pass: i64,
        pub attempt: i64,
        pub generation: i64,
        pub host: String,
        pub status: String,
        pub outcome: Option<String>,
        pub code: Option<String>,
        pub fuel_used: Option<i64>,
        pub peak_memory: Option<i64>,
        pub duration_ms: Option<i64>,
        pub log: String,
        pub log_truncated: i64,
        pub started_at: i64,
        pub finished_at: Option<i64>,
    }
}

crate::record! {
    #[derive(Debug, Clone, Serialize)]
    pub struct JobRecord {
        pub name: String,
        pub tenant: String,
        pub component_path: String,
        pub component_digest: String,
        pub spec: String,
        pub schedule: Option<String>,
        pub next_fire_at: Option<i64>,
        pub registered_at: i64,
        pub updated_at: i64,
        pub last_success_at: Option<i64>,
        pub missed_reported_at: Option<i64>,
        pub per_tenant: i64,
        /// Set once no serving host registered the job within the orphan grace.
        pub orphaned_at: Option<i64>,
    }
}

crate::record! {
    #[derive(Debug, Clone, Serialize)]
    pub struct LeaseRecord {
        pub job: String,
        pub instance: String,
        pub generation: i64,
        pub holder: Option<String>,
        pub deadline_at: i64,
        pub expires_at: i64,
        pub pending: i64,
        pub updated_at: i64,
    }
}

impl LeaseRecord {
    pub(crate) fn into_lease(self) -> Lease {
        Lease {
            job: self.job,
            instance: self.instance,
            generation: self.generation,
            holder: self.holder.unwrap_or_default(),
            deadline_at: self.deadline_at,
            expires_at: self.expires_at,
        }
    }
}

/// One generation of a lease, as held by its holder (a run).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lease {
    pub job: String,
    pub instance: String,
    pub generation: i64,
    pub holder: String,
    /// Writes fenced by this generation must commit before this instant (database clock).
    pub deadline_at: i64,
    /// After this instant another holder may take the lease.
    pub expires_at: i64,
}

impl Lease {
    /// The fence of the writes this generation's holder makes.
    pub fn fence(&self) -> Fence {
        Fence {
            job: self.job.clone(),
            instance: self.instance.clone(),
            generation: self.generation,
            holder: self.holder.clone(),
        }
    }
}

crate::record! {
    /// A run marked running whose lease its host no longer renews.
    #[derive(Debug, Clone, Serialize)]
    pub struct LostRun {
        pub id: String,
        pub job: String,
        pub instance: String,
        pub generation: Option<i64>,
    }
}

pub struct Crash<'a> {
    pub run: &'a LostRun,
    pub stale_ms: i64,
    pub rerun: Option<NewRun>,
    /// Queued only if the lost run's lease had kicks pending.
    pub follow_up: Option<NewRun>,
    pub report: NewReport,
}

crate::record! {
    #[derive(Debug, Clone, Serialize)]
    pub struct ReportRecord {
        pub id: i64,
        pub kind: String,
        pub job: String,
        pub run_id: Option<String>,
        pub code: Option<String>,
        pub body: String,
        pub created_at: i64,
        pub logged_at: Option<i64>,
        pub webhook_attempts: i64,
        pub next_try_at: i64,
        pub delivered_at: Option<i64>,
    }
}

crate::record! {
    /// A registered tenant (`jobhost_tenants`).
    #[derive(Debug, Clone, Serialize, PartialEq, Eq)]
    pub struct TenantRecord {
        pub name: String,
        pub active: i64,
        pub created_at: i64,
        pub updated_at: i64,
    }
}

crate::record! {
    /// An API token as listed: never its secret, nor the secret's hash.
    #[derive(Debug, Clone, Serialize, PartialEq, Eq)]
    pub struct TokenRecord {
        pub id: String,
        pub tenant: Option<String>,
        pub label: String,
        pub created_at: i64,
        pub revoked_at: Option<i64>,
        /// 1 for a read-only token.
        pub read_only: i64,
        pub expires_at: Option<i64>,
        /// 1 once `expires_at` has passed, in database time.
        pub expired: i64,
    }
}

crate::record! {
    /// What checking a presented token needs: the stored hash and whom it speaks for.
    #[derive(Debug, Clone)]
    pub struct TokenCheck {
        pub secret_hash: String,
        pub tenant: Option<String>,
        /// 0 if the token's tenant is disabled or no longer registered.
        pub tenant_active: i64,
        pub label: String,
        /// 1 for a read-only token.
        pub read_only: i64,
        /// 1 once its expiry has passed, in database time.
        pub expired: i64,
    }
}

crate::record! {
    /// One row of the audit log (`jobhost_audit`).
    #[derive(Debug, Clone, Serialize, PartialEq, Eq)]
    pub struct AuditRecord {
        pub id: i64,
        pub at: i64,
        pub actor: String,
        pub token_id: Option<String>,
        pub label: String,
        pub tenant: Option<String>,
        pub action: String,
        pub object: String,
        pub run_id: Option<String>,
        pub result: String,
    }
}

crate::record! {
    /// A serving host's last heartbeat (`jobhost_hosts`).
    #[derive(Debug, Clone, Serialize, PartialEq, Eq)]
    pub struct HostRecord {
        pub host_id: String,
        pub version: String,
        /// JSON `[{"lane", "workers", "busy"}]`, as the host wrote it.
        pub lanes: String,
        pub started_at: i64,
        pub seen_at: i64,
        pub stopped_at: Option<i64>,
    }
}

/// A token's row as written: never its secret, only the secret's hash.
pub struct NewTokenRow<'a> {
    pub id: &'a str,
    pub secret_hash: &'a str,
    pub tenant: Option<&'a str>,
    pub label: &'a str,
    pub read_only: bool,
    pub expires_in_ms: Option<i64>,
}

/// An audit row to write: who asked for which change, and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAudit {
    /// `token` or `cli`.
    pub actor: &'static str,
    pub token_id: Option<String>,
    /// The token's label, or the OS user of a CLI command.
    pub label: String,
    /// The acting token's tenant.
    pub tenant: Option<String>,
    /// A fixed action name (`run.cancel`).
    pub action: &'static str,
    pub object: String,
    /// The run the change started or acted on.
    pub run_id: Option<String>,
    /// `ok`, or the fixed error code of the refusal.
    pub result: String,
}

/// Which audit rows to read: newest first, before `(at, id)` of `before`.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub since: Option<i64>,
    pub action: Option<String>,
    pub tenant: Option<String>,
    pub run_id: Option<String>,
    pub limit: i64,
}

pub struct JobUpsert<'a> {
    pub name: &'a str,
    pub tenant: &'a str,
    pub component_path: &'a str,
    pub component_digest: &'a str,
    pub spec: &'a str,
    pub schedule: Option<&'a str>,
    /// Used only when the job is new or its schedule changed.
    pub next_fire_at: Option<i64>,
    pub per_tenant: bool,
    /// Its runs run one at a time (the claim reads it from the job's row).
    pub sequential: bool,
    /// Its cap on queued and running runs per tenant, and what a run over it does (the
    /// statement that queues runs reads them from the job's row).
    pub max_per_tenant: Option<u32>,
    pub over_limit: crate::rules::job::OverLimit,
    /// Its claim limits (the claim reads them from the job's row).
    pub limits: &'a crate::rules::claim_limits::ClaimLimits,
}

/// A new, time-ordered run id: the id of every run a [`NewRun`] queues.
pub fn new_run_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRun {
    pub id: String,
    pub job: String,
    pub instance: String,
    pub tenant: String,
    pub origin: Origin,
    pub payload: String,
    pub cursor: Option<String>,
    pub component_digest: Option<String>,
    pub scheduled_for: Option<i64>,
    pub rerun_of: Option<String>,
    /// Due this many milliseconds from now (database clock).
    pub delay_ms: i64,
    /// The trace it belongs to; `None` for a run whose trace derives from its id.
    pub trace_parent: Option<crate::rules::trace::TraceParent>,
}

/// The lease generation a transaction is fenced by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub job: String,
    pub instance: String,
    pub generation: i64,
    pub holder: String,
}

pub struct LeaseRequest<'a> {
    pub job: &'a str,
    pub instance: &'a str,
    pub holder: &'a str,
    pub deadline_ms: i64,
    pub expires_ms: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportKind {
    RunFailed,
    Crashed,
    Missed,
    LeaseLost,
    /// A run its job's `max_per_tenant` refused (policy `skip`).
    Dropped,
    /// A path under a local collection that the host refused to follow.
    PathRefused,
    /// An operator cancelled a run.
    Cancelled,
}

impl ReportKind {
    /// The kind named `text`, as [`ReportKind::as_str`] names it.
    pub fn parse(text: &str) -> Option<ReportKind> {
        [
            ReportKind::RunFailed,
            ReportKind::Crashed,
            ReportKind::Missed,
            ReportKind::LeaseLost,
            ReportKind::Dropped,
            ReportKind::PathRefused,
            ReportKind::Cancelled,
        ]
        .into_iter()
        .find(|kind| kind.as_str() == text)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ReportKind::RunFailed => "run_failed",
            ReportKind::Crashed => "crashed",
            ReportKind::Missed => "missed",
            ReportKind::LeaseLost => "lease_lost",
            ReportKind::Dropped => "dropped",
            ReportKind::PathRefused => "path_refused",
            ReportKind::Cancelled => "cancelled",
        }
    }
}

crate::record! {
    /// What one tenant's attempts used in a window (quotas, metrics, the API).
    #[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
    pub struct TenantUsage {
        pub tenant: String,
        pub fuel_used: i64,
        pub wall_ms: i64,
        pub attempts: i64,
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewReport {
    pub kind: ReportKind,
    pub job: String,
    pub run_id: Option<String>,
    pub code: Option<String>,
    /// The JSON the sinks deliver (fixed schema, fixed codes only).
    pub body: String,
}

impl NewReport {
    /// A report about one run: its job, instance, id, trace id and a fixed code, never
    /// free text.
    pub fn about_run(
        kind: ReportKind,
        run: &RunRecord,
        code: crate::rules::failure::FailureCode,
    ) -> Self {
        NewReport {
            kind,
            job: run.job.clone(),
            run_id: Some(run.id.clone()),
            code: Some(code.as_str().to_string()),
            body: serde_json::json!({
                "kind": kind.as_str(),
                "job": run.job,
                "instance": run.instance,
                "run_id": run.id,
                "trace_id": run.trace().trace_id(),
                "code": code.as_str(),
            })
            .to_string(),
        }
    }

    /// The report with a refusal's reason: host-written text (`sandbox::refusal`),
    /// never the guest's.
    pub fn with_reason(mut self, reason: &str) -> Self {
        let mut body: serde_json::Value =
            serde_json::from_str(&self.body).expect("a report's body is JSON");
        body["reason"] = reason.into();
        self.body = body.to_string();
        self
    }

    /// A report about the host's own storage, by one of its chores (`job`): no run, and
    /// `details` (fixed fields, host-made values) beside the kind, job and code.
    pub fn about_storage(
        kind: ReportKind,
        job: &str,
        code: crate::rules::failure::FailureCode,
        details: serde_json::Value,
    ) -> Self {
        let mut body = serde_json::json!({
            "kind": kind.as_str(),
            "job": job,
            "code": code.as_str(),
        });
        if let (Some(body), serde_json::Value::Object(details)) = (body.as_object_mut(), details) {
            body.extend(details);
        }
        NewReport {
            kind,
            job: job.to_string(),
            run_id: None,
            code: Some(code.as_str().to_string()),
            body: body.to_string(),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    pub job: Option<String>,
    /// Any of these statuses; all if empty.
    pub statuses: Vec<RunStatus>,
    /// Only this tenant's runs.
    pub tenant: Option<String>,
    pub since: Option<i64>,
    pub until: Option<i64>,
    /// Only runs whose last failure code is this.
    pub code: Option<String>,
    pub instance: Option<String>,
    /// Only runs whose last error contains this text, in any case.
    pub error_text: Option<String>,
    /// Only runs no operator retried yet (a bulk retry sent twice retries each once).
    pub unretried: bool,
    /// Keyset paging: only runs older than this (created_at, id).
    pub before: Option<(i64, String)>,
    pub limit: i64,
}

crate::record! {
    /// A pause of a job, a tenant or a lane (`jobhost_pauses`).
    #[derive(Debug, Clone, Serialize, PartialEq, Eq)]
    pub struct PauseRecord {
        pub scope: String,
        pub name: String,
        pub paused_at: i64,
    }
}

crate::record! {
    /// A named object of a collection (`jobhost_files`).
    #[derive(Debug, Clone, Serialize, PartialEq, Eq)]
    pub struct FileRecord {
        pub tenant: String,
        pub collection: String,
        pub name: String,
        pub object_key: String,
        pub size: i64,
        pub digest: String,
        /// `clean` (visible), `pending` (waiting for its scan) or `rejected`.
        pub status: String,
        pub run_id: String,
        pub created_at: i64,
    }
}

crate::record! {
    /// A file waiting for its collection's scan job.
    #[derive(Debug, Clone, Serialize, PartialEq, Eq)]
    pub struct PendingFile {
        pub object_key: String,
        pub tenant: String,
        pub name: String,
        pub size: i64,
    }
}

crate::record! {
    /// An object the collector may delete: an upload never attached, or one no name points
    /// at any more.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct DeadObject {
        pub object_key: String,
        pub collection: String,
    }
}

/// A change to what names point at, committed in a fenced transaction: the host's own,
/// or a guest's (so it commits with the guest's writes or not at all).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileWrite {
    /// Points `name` at an uploaded object (the key it pointed at, if any, becomes
    /// garbage) and forgets the upload.
    Attach {
        tenant: String,
        collection: String,
        name: String,
        object_key: String,
        size: i64,
        digest: String,
        status: &'static str,
        run_id: String,
        /// The tenant's quota in the collection, counting this file and not the one it
        /// replaces: over it, nothing changes ([`FileWritten::OverQuota`]).
        max_objects: i64,
        max_bytes: i64,
    },
    /// Removes `name` (its key becomes garbage).
    Remove {
        tenant: String,
        collection: String,
        name: String,
    },
    /// Gives a file waiting for its scan a verdict.
    Mark {
        collection: String,
        object_key: String,
        status: &'static str,
    },
}

/// A change to a run's progress that commits with the guest's writes (inside its
/// transaction) or in a fenced transaction of the host's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProgressWrite {
    /// A step's result, recorded in the pass's ledger.
    Step {
        run_id: String,
        pass: i64,
        name: String,
        result: String,
        generation: i64,
    },
    /// The pass's end: the next pass's cursor, or that the run is done; and its counters.
    EndPass {
        run_id: String,
        generation: i64,
        pass: i64,
        cursor: Option<String>,
        counters: String,
        done: bool,
    },
}

crate::record! {
    /// A due run a bounded sweep (`host drive`) may claim, read without claiming it.
    #[derive(Debug, Clone)]
    pub struct DueCandidate {
        pub id: String,
        pub job: String,
        pub next_attempt_at: i64,
        pub tenant: String,
        /// Its place among the runs due at the same time, in claim order: where the next page
        /// of candidates starts.
        pub position: String,
    }
}

crate::record! {
    /// A step that attempts reached and failed in without recording it.
    #[derive(Debug, Clone, Serialize)]
    pub struct StepFailureRecord {
        pub pass: i64,
        pub name: String,
        /// How many attempts failed after reaching it without recording it.
        pub attempts: i64,
        /// The last such attempt's failure code, and its message, bounded and
        /// terminal-safe.
        pub last_code: String,
        pub last_error: Option<String>,
        pub failed_at: i64,
    }
}

crate::record! {
    /// A step of a run's ledger, as operators see it.
    #[derive(Debug, Clone, Serialize)]
    pub struct StepRecord {
        pub pass: i64,
        pub name: String,
        pub result: String,
        pub generation: i64,
        pub recorded_at: i64,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileWritten {
    Attached {
        created_at: i64,
    },
    /// Whether there was a row to change.
    Changed(bool),
    /// An attach refused: the tenant's files in the collection would pass its quota.
    OverQuota,
}

crate::record! {
    /// A key that signs per-attempt tokens.
    #[derive(Debug, Clone)]
    pub struct SigningKeyRecord {
        pub kid: String,
        /// The Ed25519 private key's seed, hex.
        pub seed: String,
        pub public_key: String,
        pub created_at: i64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_run_is_shown_claimed_until_its_guest_started_and_a_sleeping_one_waiting() {
        let run = |status: &str, guest_started_at| RunRecord {
            status: status.into(),
            guest_started_at,
            pass: 2,
            ..RunRecord::default()
        };
        assert_eq!(run("running", None).shown_status(), CLAIMED);
        assert!(run("running", None).claimed());
        assert_eq!(run("running", Some(5)).shown_status(), "running");
        // Only a running run: an ended one keeps its status whatever its last attempt did.
        assert_eq!(run("succeeded", None).shown_status(), "succeeded");
        assert_eq!(run("queued", None).shown_status(), "queued");
        let sleeping = RunRecord {
            wait_pass: Some(1),
            wait_policy: Some("all".into()),
            ..run("queued", None)
        };
        assert_eq!(sleeping.shown_status(), WAITING);
    }
}
