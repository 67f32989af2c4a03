//! The JSON shapes of runs, attempts and jobs, shared by the CLI and the HTTP API.

use crate::store::{
    AttemptRecord, AuditRecord, DeliveryAttemptRecord, DeliveryRecord, FileRecord, HostRecord,
    JobRecord, LeaseRecord, LiveLogRecord, PauseRecord, RunRecord, RunStatus, StepFailureRecord,
    StepRecord, TenantRecord, TokenRecord,
};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// Runs (or reports) one listing returns unless asked for another number: `host runs
/// list` and the API's `GET /runs` and `GET /reports` alike.
pub const DEFAULT_PAGE: i64 = 50;
/// Most one listing returns, whatever is asked: a page is one query's rows, held at once.
pub const MAX_PAGE: i64 = 500;

/// The size of a listing's page: `asked` (the default if not) within 1 and [`MAX_PAGE`].
pub fn page_size(asked: Option<i64>) -> i64 {
    asked.unwrap_or(DEFAULT_PAGE).clamp(1, MAX_PAGE)
}

pub fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_else(|| ms.to_string())
}

pub fn duration_ms(run: &RunRecord) -> Option<i64> {
    Some(run.finished_at? - run.started_at?)
}

/// Stored JSON text as a value; what does not decode (a row written by hand, or by an
/// older host) is shown as null and named in `problems`, never an error for the page.
fn decoded(text: Option<&str>, field: &str, problems: &mut Vec<String>) -> Value {
    match text.map(serde_json::from_str::<Value>) {
        None => Value::Null,
        Some(Ok(value)) => value,
        Some(Err(_)) => {
            problems.push(format!("{field}: not JSON"));
            Value::Null
        }
    }
}

fn decode_error(problems: Vec<String>) -> Option<String> {
    (!problems.is_empty()).then(|| problems.join("; "))
}

/// The largest cursor a list shows. A cursor may be 64 KiB of JSON, which parses to many
/// times that in memory; a larger one is only in `run_detail` (`cursor_omitted` here).
pub const LISTED_CURSOR_BYTES: usize = 4 << 10;

/// Whether `text` is JSON, checked without building it.
fn is_json(text: &str) -> bool {
    serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
}

/// A run as lists show it. Its payload (up to 256 KiB) is only in `run_detail`, and so is
/// a cursor over `LISTED_CURSOR_BYTES`; here they are only checked, so a page of runs stays
/// small.
pub fn run(run: &RunRecord) -> Value {
    shown(run_view(run, LISTED_CURSOR_BYTES))
}

/// A view as JSON: each view is a type, so `GET /openapi.json` describes what is sent.
fn shown(view: impl Serialize) -> Value {
    serde_json::to_value(view).expect("a view serialises")
}

/// A run as the API, the CLI and the console show it (`GET /runs`, `GET /runs/{id}`).
/// Times are RFC 3339 in UTC; JSON the run stored that does not decode is null, and
/// named in `decode_error`.
#[derive(Serialize, ToSchema)]
pub struct RunView {
    pub run_id: String,
    pub job: String,
    pub instance: String,
    pub tenant: String,
    /// What queued it: `schedule`, `kick`, `start`, `event`, `retry`, ...
    pub origin: String,
    /// `queued`, `waiting`, `claimed`, `running`, `succeeded`, `failed`, `crashed`,
    /// `cancelled`, `skipped` (a tenant is told `dropped` for `skipped` and `failed` for
    /// `crashed`).
    pub status: String,
    pub attempts: i64,
    /// The attempts a pass may use that its start asked for (null: its job's).
    pub max_attempts: Option<i64>,
    pub passes: i64,
    pub defers: i64,
    /// The last failure's fixed code (`docs/failure-codes.md`).
    pub code: Option<String>,
    pub error: Option<String>,
    /// The run's resumable cursor: any JSON.
    pub cursor: Value,
    pub cursor_omitted: bool,
    /// Any JSON the guest counted.
    pub counters: Value,
    pub decode_error: Option<String>,
    pub scheduled_for: Option<String>,
    pub rerun_of: Option<String>,
    pub resumed_by: Option<String>,
    pub created_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub next_attempt_at: Option<String>,
    pub duration_ms: Option<i64>,
    pub component_digest: Option<String>,
    /// The host running it (the operator's view only).
    #[schema(required = false)]
    pub host: Option<String>,
    pub trace_id: String,
    pub retry_of: Option<String>,
    pub retried_by: Option<String>,
    pub parent_run: Option<String>,
    pub parent_attempt: Option<i64>,
    pub detached: bool,
    pub event: Option<String>,
    /// While its pass waits for its children: the policy it waits by.
    pub waits_for: Option<String>,
    /// While it waits for a signal: the signal's name.
    pub waits_for_signal: Option<String>,
    pub signal_timeout_at: Option<String>,
    /// What the run's last pass returned: any JSON.
    pub result: Value,
}

/// A run with its cursor if that is at most `cursor_bytes` long.
fn run_view(run: &RunRecord, cursor_bytes: usize) -> RunView {
    let mut problems = Vec::new();
    if !is_json(&run.payload) {
        problems.push("payload: not JSON".to_string());
    }
    let omitted = run.cursor.as_deref().filter(|c| c.len() > cursor_bytes);
    let cursor = match omitted {
        Some(text) => {
            if !is_json(text) {
                problems.push("cursor: not JSON".to_string());
            }
            Value::Null
        }
        None => decoded(run.cursor.as_deref(), "cursor", &mut problems),
    };
    let counters = decoded(Some(&run.counters), "counters", &mut problems);
    let result = decoded(run.result.as_deref(), "result", &mut problems);
    RunView {
        run_id: run.id.clone(),
        job: run.job.clone(),
        instance: run.instance.clone(),
        tenant: run.tenant.clone(),
        origin: run.origin.clone(),
        status: run.shown_status().to_string(),
        attempts: run.attempts,
        max_attempts: run.max_attempts,
        passes: run.pass,
        defers: run.defers,
        code: run.last_code.clone(),
        error: run.last_error.clone(),
        cursor,
        cursor_omitted: omitted.is_some(),
        counters,
        decode_error: decode_error(problems),
        scheduled_for: run.scheduled_for.map(time),
        rerun_of: run.rerun_of.clone(),
        resumed_by: run.resumed_by.clone(),
        created_at: time(run.created_at),
        started_at: run.started_at.map(time),
        finished_at: run.finished_at.map(time),
        // A waiting run is due when its children ended, not at the time its row holds.
        next_attempt_at: (run.shown_status() == "queued").then(|| time(run.next_attempt_at)),
        duration_ms: duration_ms(run),
        component_digest: run.component_digest.clone(),
        host: run.host.clone(),
        trace_id: run.trace().trace_id(),
        retry_of: run.retry_of.clone(),
        retried_by: run.retried_by.clone(),
        parent_run: run.parent_run.clone(),
        parent_attempt: run.parent_attempt,
        detached: run.detached == 1,
        event: run.event.clone(),
        waits_for: run.waiting_pass().and_then(|_| run.wait_policy.clone()),
        // A run asleep until a signal comes, or its timeout (then due).
        waits_for_signal: run.waiting_signal().map(str::to_string),
        signal_timeout_at: run.waiting_signal().map(|_| time(run.next_attempt_at)),
        result,
    }
}

/// A pause of a job, a tenant or a lane.
#[derive(Serialize, ToSchema)]
pub struct PauseView {
    /// `job`, `tenant` or `lane`.
    pub scope: String,
    pub name: String,
    pub paused_at: String,
}

pub fn pause(p: &PauseRecord) -> Value {
    shown(PauseView {
        scope: p.scope.clone(),
        name: p.name.clone(),
        paused_at: time(p.paused_at),
    })
}

/// The most attached objects a run's detail lists.
pub const FILES_SHOWN: i64 = 100;

/// An object a run attached.
#[derive(Serialize, ToSchema)]
pub struct FileView {
    pub collection: String,
    pub name: String,
    pub size: i64,
    pub digest: String,
    pub status: String,
    pub attached_at: String,
}

pub fn file(f: &FileRecord) -> Value {
    shown(FileView {
        collection: f.collection.clone(),
        name: f.name.clone(),
        size: f.size,
        digest: f.digest.clone(),
        status: f.status.clone(),
        attached_at: time(f.created_at),
    })
}

/// An attempt of a run, recorded when it ended, with its bounded log.
#[derive(Serialize, ToSchema)]
pub struct AttemptView {
    pub seq: i64,
    pub pass: i64,
    pub attempt: i64,
    pub generation: i64,
    /// The host it ran on (the operator's view only).
    #[schema(required = false)]
    pub host: String,
    pub status: String,
    pub outcome: Option<String>,
    pub code: Option<String>,
    pub fuel_used: Option<i64>,
    pub peak_memory: Option<i64>,
    pub duration_ms: Option<i64>,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub log: String,
    pub log_truncated: bool,
    /// The run's trace (in a run's detail).
    #[schema(required = false)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

fn attempt_view(a: &AttemptRecord) -> AttemptView {
    AttemptView {
        seq: a.seq,
        pass: a.pass,
        attempt: a.attempt,
        generation: a.generation,
        host: a.host.clone(),
        status: a.status.clone(),
        outcome: a.outcome.clone(),
        code: a.code.clone(),
        fuel_used: a.fuel_used,
        peak_memory: a.peak_memory,
        duration_ms: a.duration_ms,
        started_at: time(a.started_at),
        finished_at: a.finished_at.map(time),
        log: a.log.clone(),
        log_truncated: a.log_truncated != 0,
        trace_id: None,
    }
}

pub fn attempt(a: &AttemptRecord) -> Value {
    shown(attempt_view(a))
}

/// A delivery of a run's ending to a webhook (never its secret or URL): its state, tries
/// and the last answer, the receiver's text bounded and escaped when it was stored.
#[derive(Serialize, ToSchema)]
pub struct DeliveryView {
    pub id: i64,
    pub run_id: String,
    pub job: String,
    pub tenant: String,
    pub webhook: String,
    /// The run's ending: `succeeded`, `failed`, `cancelled`, `crashed` or `skipped`.
    pub ending: String,
    /// `pending`, `delivered` or `failed` (given up).
    pub state: String,
    pub attempts: i64,
    pub next_try_at: Option<String>,
    pub last_status: Option<i64>,
    pub last_error: Option<String>,
    pub after_run: Option<String>,
    pub created_at: String,
    pub delivered_at: Option<String>,
}

pub fn delivery(d: &DeliveryRecord) -> Value {
    shown(DeliveryView {
        id: d.id,
        run_id: d.run_id.clone(),
        job: d.job.clone(),
        tenant: d.tenant.clone(),
        webhook: d.webhook.clone(),
        ending: d.ending.clone(),
        state: d.state.clone(),
        attempts: d.attempts,
        next_try_at: (d.state == "pending").then(|| time(d.next_try_at)),
        last_status: d.last_status,
        last_error: d.last_error.clone(),
        after_run: d.after_run.clone(),
        created_at: time(d.created_at),
        delivered_at: d.delivered_at.map(time),
    })
}

/// One attempt at a delivery: the receiver's HTTP status, if it answered.
#[derive(Serialize, ToSchema)]
pub struct DeliveryAttemptView {
    pub host: String,
    pub status_code: Option<i64>,
    pub error: Option<String>,
    pub duration_ms: i64,
    pub at: String,
}

pub fn delivery_attempt(a: &DeliveryAttemptRecord) -> Value {
    shown(DeliveryAttemptView {
        host: a.host.clone(),
        status_code: a.status_code,
        error: a.error.clone(),
        duration_ms: a.duration_ms,
        at: time(a.at),
    })
}

/// The attempt a running run is in, before it is recorded.
#[derive(Serialize, ToSchema)]
pub struct LiveAttemptView {
    pub seq: i64,
    pub pass: i64,
    pub attempt: i64,
    pub generation: Option<i64>,
    /// The host running it (the operator's view only).
    #[schema(required = false)]
    pub host: Option<String>,
    /// `claimed` until its guest starts, then `running`.
    pub status: String,
    pub started_at: Option<String>,
    pub running_ms: Option<i64>,
    pub log: String,
    pub log_truncated: bool,
    /// The fuel it burnt so far: null until written, and where its host does not meter fuel.
    pub fuel_used: Option<i64>,
}

/// The attempt a running run is in, as the database knows it: its number, pass and try
/// and the host holding it (the run's row); since when and the log lines it wrote so far
/// (its live log, which its host writes every `runner::live::FLUSH_EVERY` once it has run
/// that long: until then `started_at` is null and the log empty), and the fuel it burnt
/// so far (null until written, and where its host does not meter fuel). Null when the run is
/// not in an attempt, or its current attempt is recorded already (`attempts`, the last
/// ones); a live log another attempt left (its host crashed) is not this one's.
pub fn live_attempt(
    run: &RunRecord,
    attempts: &[AttemptRecord],
    live: Option<&LiveLogRecord>,
) -> Value {
    shown(live_attempt_view(run, attempts, live))
}

fn live_attempt_view(
    run: &RunRecord,
    attempts: &[AttemptRecord],
    live: Option<&LiveLogRecord>,
) -> Option<LiveAttemptView> {
    let in_attempt = run.status() == Some(RunStatus::Running) && run.generation.is_some();
    if !in_attempt || attempts.iter().any(|a| a.seq == run.attempts) {
        return None;
    }
    let live = live.filter(|l| l.seq == run.attempts);
    let status = if run.claimed() {
        crate::store::CLAIMED
    } else {
        "running"
    };
    Some(LiveAttemptView {
        seq: run.attempts,
        pass: run.pass,
        attempt: run.current_try(),
        generation: run.generation,
        host: run.host.clone(),
        status: status.to_string(),
        started_at: live.map(|l| time(l.started_at)),
        running_ms: live.map(|l| l.running_ms.max(0)),
        log: live.map_or("", |l| l.log.as_str()).to_string(),
        log_truncated: live.is_some_and(|l| l.log_truncated != 0),
        fuel_used: live.and_then(|l| l.fuel_used),
    })
}

/// A recorded step of a run's ledger.
#[derive(Serialize, ToSchema)]
pub struct StepView {
    pub pass: i64,
    pub name: String,
    /// What the step returned: any JSON.
    pub result: Value,
    pub generation: i64,
    pub recorded_at: String,
    pub decode_error: Option<String>,
}

fn step_view(s: &StepRecord) -> StepView {
    let mut problems = Vec::new();
    let result = decoded(Some(&s.result), "result", &mut problems);
    StepView {
        pass: s.pass,
        name: s.name.clone(),
        result,
        generation: s.generation,
        recorded_at: time(s.recorded_at),
        decode_error: decode_error(problems),
    }
}

/// The most attempts a run's detail shows: its last ones (a run that continues pass after
/// pass may have any number).
pub const ATTEMPTS_SHOWN: i64 = 100;

/// A run in detail: its view with its payload, last attempts, live attempt, ledger and
/// what `GET /runs/{id}` adds (`service::http`).
#[derive(Serialize, ToSchema)]
pub struct RunDetail {
    #[serde(flatten)]
    pub run: RunView,
    /// Any JSON: the run's payload.
    pub payload: Value,
    pub attempt_records: Vec<AttemptView>,
    pub live_attempt: Option<LiveAttemptView>,
    pub earlier_attempts_omitted: bool,
    pub steps: Vec<StepView>,
    pub failed_steps: Vec<FailedStepView>,
}

/// A run with its last attempts (`ATTEMPTS_SHOWN` of them; `earlier_attempts_omitted` says
/// whether it had more) and its ledger (the steps its current pass recorded; after a
/// failure, the evidence of how far the last pass got). Each attempt names the run's
/// trace, which its log lines, its span and its calls belong to; and the attempt it is in
/// while it runs (`live_attempt`).
pub fn run_detail(
    r: &RunRecord,
    attempts: &[AttemptRecord],
    live: Option<&LiveLogRecord>,
    steps: &[StepRecord],
    failed_steps: &[StepFailureRecord],
) -> Value {
    shown(run_detail_view(r, attempts, live, steps, failed_steps))
}

/// [`run_detail`] as its type.
pub fn run_detail_view(
    r: &RunRecord,
    attempts: &[AttemptRecord],
    live: Option<&LiveLogRecord>,
    steps: &[StepRecord],
    failed_steps: &[StepFailureRecord],
) -> RunDetail {
    let trace_id = r.trace().trace_id();
    let attempt_records = attempts
        .iter()
        .map(|a| AttemptView {
            trace_id: Some(trace_id.clone()),
            ..attempt_view(a)
        })
        .collect();
    RunDetail {
        run: run_view(r, usize::MAX),
        payload: decoded(Some(&r.payload), "payload", &mut Vec::new()),
        attempt_records,
        live_attempt: live_attempt_view(r, attempts, live),
        // Attempts are numbered from 1 without gaps: a first one shown past 1 had others before.
        earlier_attempts_omitted: attempts.first().is_some_and(|a| a.seq > 1),
        steps: steps.iter().map(step_view).collect(),
        failed_steps: failed_steps.iter().map(failed_step_view).collect(),
    }
}

/// The kicks folded into `run` while it holds its instance's lease (running, or parked
/// for its retry or next pass): 1 if its lease's pending flag is set, a follow-up run
/// queued when it ends; kicks fold into one.
pub fn kicks_pending(run: &RunRecord, lease: Option<&LeaseRecord>) -> i64 {
    let holds = |l: &&LeaseRecord| l.holder.is_some() && Some(l.generation) == run.generation;
    let live = !run.status().is_some_and(RunStatus::is_terminal);
    i64::from(live && lease.filter(holds).is_some_and(|l| l.pending != 0))
}

/// A step attempts failed in without recording it (every pass's; a step recorded later
/// is in `steps` too): how many, and the last one's failure.
#[derive(Serialize, ToSchema)]
pub struct FailedStepView {
    pub pass: i64,
    pub name: String,
    pub failed_attempts: i64,
    pub last_code: String,
    pub last_error: Option<String>,
    pub last_failed_at: String,
}

fn failed_step_view(s: &StepFailureRecord) -> FailedStepView {
    FailedStepView {
        pass: s.pass,
        name: s.name.clone(),
        failed_attempts: s.attempts,
        last_code: s.last_code.clone(),
        last_error: s.last_error.clone(),
        last_failed_at: time(s.failed_at),
    }
}

/// A job's default instance's lease.
#[derive(Serialize, ToSchema)]
pub struct LeaseView {
    pub held: bool,
    /// The host holding it (the operator's view only).
    #[schema(required = false)]
    pub holder: Option<String>,
    pub generation: i64,
    pub expires_at: Option<String>,
    /// A kick folded into the running run: it runs once more when it ends.
    pub pending: bool,
}

/// A job as registered, with its schedule and lease (`GET /jobs`, `GET /jobs/{name}`).
#[derive(Serialize, ToSchema)]
pub struct JobView {
    pub name: String,
    pub tenant: String,
    pub per_tenant: bool,
    pub orphaned: bool,
    pub orphaned_at: Option<String>,
    pub schedule: Option<String>,
    pub next_fire_at: Option<String>,
    /// Not told to a tenant of a per-tenant job (it is every tenant's children's).
    #[schema(required = false)]
    pub last_success_at: Option<String>,
    pub registered_at: String,
    /// The component's path (the operator's view only).
    #[schema(required = false)]
    pub component: String,
    pub component_digest: String,
    /// Not told to a tenant of a per-tenant job.
    #[schema(required = false)]
    pub lease: Option<LeaseView>,
    /// Whether a pause holds its runs (`GET /jobs`, `GET /jobs/{name}`).
    #[schema(required = false)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// The pauses that hold it (the operator's view only).
    #[schema(required = false)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pauses: Option<Vec<PauseScope>>,
    #[schema(required = false)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lane: Option<String>,
    /// What its definition says (`job_settings`; `GET /jobs/{name}` only): any JSON object,
    /// or null for a definition that does not parse.
    #[schema(required = false, value_type = Option<Object>)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settings: Option<Value>,
}

/// What a pause names: `job`, `tenant` or `lane`, and its name.
#[derive(Serialize, ToSchema)]
pub struct PauseScope {
    pub scope: String,
    pub name: String,
}

/// A job with its default instance's lease, as of the database's time `now`.
pub fn job_view(job: &JobRecord, lease: Option<&LeaseRecord>, now: i64) -> JobView {
    let lease = lease.map(|l| {
        let held = l.holder.is_some() && l.expires_at > now;
        LeaseView {
            held,
            holder: if held { l.holder.clone() } else { None },
            generation: l.generation,
            expires_at: held.then(|| time(l.expires_at)),
            pending: l.pending != 0,
        }
    });
    JobView {
        name: job.name.clone(),
        tenant: job.tenant.clone(),
        per_tenant: job.per_tenant != 0,
        orphaned: job.orphaned_at.is_some(),
        orphaned_at: job.orphaned_at.map(time),
        schedule: job.schedule.clone(),
        next_fire_at: job.next_fire_at.map(time),
        last_success_at: job.last_success_at.map(time),
        registered_at: time(job.registered_at),
        component: job.component_path.clone(),
        component_digest: job.component_digest.clone(),
        lease,
        paused: None,
        pauses: None,
        lane: None,
        settings: None,
    }
}

/// What a job's definition says, as registered (its manifest entry), read-only: lane,
/// limits, retries, grants, flow, recorder, events. Not its component's path (the host's)
/// nor its webhooks (the operator's routing). Null for a definition that does not parse.
pub fn job_settings(spec: &str) -> Value {
    const SHOWN: [&str; 10] = [
        "lane",
        "limits",
        "retry",
        "grants",
        "actions",
        "flow",
        "recorder",
        "on",
        "on_where",
        "run_on_boot",
    ];
    match serde_json::from_str::<Value>(spec) {
        Ok(Value::Object(mut all)) => {
            all.retain(|k, _| SHOWN.contains(&k.as_str()));
            Value::Object(all)
        }
        _ => Value::Null,
    }
}

/// Every job with the lease of its default instance (`job_view`).
pub fn jobs(jobs: &[JobRecord], leases: &[LeaseRecord], now: i64) -> Vec<Value> {
    job_views(jobs, leases, now)
        .into_iter()
        .map(shown)
        .collect()
}

/// [`jobs`] as their type.
pub fn job_views(jobs: &[JobRecord], leases: &[LeaseRecord], now: i64) -> Vec<JobView> {
    jobs.iter()
        .map(|j| {
            let lease = leases
                .iter()
                .find(|l| l.job == j.name && l.instance == crate::queue::kick::DEFAULT_INSTANCE);
            job_view(j, lease, now)
        })
        .collect()
}

/// A registered tenant.
#[derive(Serialize, ToSchema)]
pub struct TenantView {
    pub name: String,
    pub active: bool,
    pub created_at: String,
    pub updated_at: String,
}

pub fn tenant(t: &TenantRecord) -> Value {
    shown(TenantView {
        name: t.name.clone(),
        active: t.active != 0,
        created_at: time(t.created_at),
        updated_at: time(t.updated_at),
    })
}

/// A token of the API (never its secret, which only its creation's answer shows).
#[derive(Serialize, ToSchema)]
pub struct TokenView {
    pub id: String,
    pub tenant: Option<String>,
    pub label: String,
    pub created_at: String,
    pub revoked_at: Option<String>,
    /// `operator`, `read_only` or `tenant`.
    pub kind: String,
    pub expires_at: Option<String>,
    pub expired: bool,
}

pub fn token(t: &TokenRecord) -> Value {
    shown(token_view(t))
}

/// [`token`] as its type.
pub fn token_view(t: &TokenRecord) -> TokenView {
    TokenView {
        id: t.id.clone(),
        tenant: t.tenant.clone(),
        label: t.label.clone(),
        created_at: time(t.created_at),
        revoked_at: t.revoked_at.map(time),
        kind: token_kind(t.tenant.as_deref(), t.read_only != 0).to_string(),
        expires_at: t.expires_at.map(time),
        expired: t.expired != 0,
    }
}

/// What a token may do, in one word: `operator`, `read_only` or `tenant`.
pub fn token_kind(tenant: Option<&str>, read_only: bool) -> &'static str {
    match (tenant, read_only) {
        (Some(_), _) => "tenant",
        (None, true) => "read_only",
        (None, false) => "operator",
    }
}

/// Most actions a run's detail shows (its newest).
pub const ACTIONS_SHOWN: i64 = 50;

/// Who made an audited change, in words: `cli alice`, `token 1a2b… (on-call)`.
pub fn who(a: &AuditRecord) -> String {
    match (&a.token_id, a.label.is_empty()) {
        (Some(id), true) => format!("token {id}"),
        (Some(id), false) => format!("token {id} ({})", a.label),
        (None, _) => format!("{} {}", a.actor, a.label),
    }
}

/// A change made to a run, as its detail shows it.
#[derive(Serialize, ToSchema)]
pub struct RunActionView {
    pub at: String,
    pub action: String,
    pub who: String,
    pub result: String,
}

/// A change made to a run, as its detail shows it. A tenant is told that an operator
/// acted, not which token.
pub fn run_action(a: &AuditRecord, to_tenant: bool) -> Value {
    let who = if to_tenant && a.tenant.is_none() {
        "operator".to_string()
    } else {
        who(a)
    };
    shown(RunActionView {
        at: time(a.at),
        action: a.action.clone(),
        who,
        result: a.result.clone(),
    })
}

/// A row of the audit log.
#[derive(Serialize, ToSchema)]
pub struct AuditView {
    pub id: i64,
    pub at: String,
    /// `token` or `cli`.
    pub actor: String,
    pub token_id: Option<String>,
    pub label: String,
    pub tenant: Option<String>,
    pub who: String,
    /// The fixed action, e.g. `run.cancel`.
    pub action: String,
    pub object: String,
    pub run_id: Option<String>,
    /// `ok`, or the answer's fixed error code.
    pub result: String,
}

pub fn audit(a: &AuditRecord) -> Value {
    shown(AuditView {
        id: a.id,
        at: time(a.at),
        actor: a.actor.clone(),
        token_id: a.token_id.clone(),
        label: a.label.clone(),
        tenant: a.tenant.clone(),
        who: who(a),
        action: a.action.clone(),
        object: a.object.clone(),
        run_id: a.run_id.clone(),
        result: a.result.clone(),
    })
}

/// What a tenant's token sees of a job or run view: no host paths or host ids, and the
/// statuses a tenant is told (`dropped` for a run the host skipped, `failed` for one
/// that crashed). One place, so each API answer to a tenant goes through it.
pub fn for_tenant(mut view: Value) -> Value {
    if let Some(object) = view.as_object_mut() {
        for key in ["component", "host", "pauses"] {
            object.remove(key);
        }
        // A per-tenant job's last success and lease are every tenant's children's: when
        // another tenant's child last succeeded is not this tenant's to know (its own
        // children are its runs).
        if object.get("per_tenant") == Some(&Value::Bool(true)) {
            object.remove("last_success_at");
            object.remove("lease");
        }
        if let Some(lease) = object.get_mut("lease").and_then(Value::as_object_mut) {
            lease.remove("holder");
        }
        if let Some(status) = object.get("status").and_then(Value::as_str) {
            let told = tenant_status(status);
            object.insert("status".into(), told.into());
        }
        if let Some(live) = object
            .get_mut("live_attempt")
            .and_then(Value::as_object_mut)
        {
            live.remove("host");
        }
        if let Some(attempts) = object
            .get_mut("attempt_records")
            .and_then(Value::as_array_mut)
        {
            for attempt in attempts {
                if let Some(attempt) = attempt.as_object_mut() {
                    attempt.remove("host");
                }
            }
        }
    }
    view
}

/// The status a tenant is told for a run's status.
pub fn tenant_status(status: &str) -> &str {
    match status {
        "skipped" => "dropped",
        "crashed" => "failed",
        other => other,
    }
}

/// The run statuses a tenant's status filter stands for.
pub fn tenant_statuses(told: &str) -> Option<Vec<RunStatus>> {
    Some(match told {
        "queued" => vec![RunStatus::Queued],
        "running" => vec![RunStatus::Running],
        "succeeded" => vec![RunStatus::Succeeded],
        "failed" => vec![RunStatus::Failed, RunStatus::Crashed],
        "dropped" => vec![RunStatus::Skipped],
        "cancelled" => vec![RunStatus::Cancelled],
        _ => return None,
    })
}

/// How often a serving host writes its heartbeat (`jobhost_hosts`).
pub const HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(5);
/// A host missing this many beats in a row is not alive: one slow write is not a death.
const ALIVE_BEATS: i64 = 3;
/// Most hosts listed (`GET /hosts`, `host hosts`): a fleet, not a crowd.
pub const HOSTS_SHOWN: i64 = 200;

/// The fleet as its heartbeats tell it.
#[derive(Serialize, ToSchema)]
pub struct HostList {
    pub hosts: Vec<HostView>,
    pub heartbeat_ms: i64,
    /// The database's time, which `seen_at` is compared with.
    pub now: String,
    /// `now` in ms, for the CLI's "seen 2s ago".
    #[serde(skip)]
    pub now_ms: i64,
}

/// A host as its heartbeats tell it.
#[derive(Serialize, ToSchema)]
pub struct HostView {
    pub host: String,
    /// `alive` (seen within 3 beats), `silent` or `stopped`.
    pub state: &'static str,
    pub alive: bool,
    pub version: String,
    /// Its lanes as it wrote them: `lane`, `workers`, `busy` each.
    #[schema(value_type = Vec<Object>)]
    pub lanes: Vec<Value>,
    pub workers: Workers,
    pub started_at: String,
    pub seen_at: String,
    /// `seen_at` in ms.
    #[serde(skip)]
    pub seen_ms: i64,
    pub stopped_at: Option<String>,
    /// It is the host that answers.
    pub this_host: bool,
}

/// A host's workers over all its lanes.
#[derive(Serialize, ToSchema)]
pub struct Workers {
    pub busy: u64,
    pub total: u64,
}

/// The hosts `store::list_hosts` read, at the database's time `now`, each alive if seen
/// within [`ALIVE_BEATS`] beats; `this_host` is the id of the host that asks, if it is one.
pub fn hosts(records: &[HostRecord], now: i64, this_host: Option<&str>) -> HostList {
    let alive_after = now - ALIVE_BEATS * HEARTBEAT.as_millis() as i64;
    let hosts = records
        .iter()
        .map(|h| {
            let lanes: Vec<Value> = serde_json::from_str(&h.lanes).unwrap_or_default();
            let sum = |key: &str| lanes.iter().filter_map(|l| l[key].as_u64()).sum::<u64>();
            let state = match h.stopped_at {
                Some(_) => "stopped",
                None if h.seen_at >= alive_after => "alive",
                None => "silent",
            };
            HostView {
                host: h.host_id.clone(),
                state,
                alive: state == "alive",
                version: h.version.clone(),
                workers: Workers {
                    busy: sum("busy"),
                    total: sum("workers"),
                },
                lanes,
                started_at: time(h.started_at),
                seen_at: time(h.seen_at),
                seen_ms: h.seen_at,
                stopped_at: h.stopped_at.map(time),
                this_host: Some(h.host_id.as_str()) == this_host,
            }
        })
        .collect();
    HostList {
        hosts,
        heartbeat_ms: HEARTBEAT.as_millis() as i64,
        now: time(now),
        now_ms: now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_kick_is_pending_on_the_run_that_holds_the_lease_until_it_ends() {
        let run = |status: &str| RunRecord {
            status: status.into(),
            generation: Some(3),
            ..RunRecord::default()
        };
        let lease = |generation, pending| LeaseRecord {
            job: "j".into(),
            instance: "default".into(),
            generation,
            holder: Some("host-1".into()),
            deadline_at: 0,
            expires_at: 0,
            pending,
            updated_at: 0,
        };
        assert_eq!(kicks_pending(&run("running"), Some(&lease(3, 1))), 1);
        assert_eq!(kicks_pending(&run("queued"), Some(&lease(3, 1))), 1);
        assert_eq!(kicks_pending(&run("running"), Some(&lease(3, 0))), 0);
        // Another generation's holder, or a run that ended, has none of it.
        assert_eq!(kicks_pending(&run("running"), Some(&lease(4, 1))), 0);
        assert_eq!(kicks_pending(&run("succeeded"), Some(&lease(3, 1))), 0);
        assert_eq!(kicks_pending(&run("running"), None), 0);
    }

    #[test]
    fn a_running_runs_live_attempt_is_its_current_one_only() {
        let run = |status: &str| RunRecord {
            status: status.into(),
            generation: Some(3),
            attempts: 2,
            pass: 1,
            failures: 1,
            host: Some("host-1".into()),
            ..RunRecord::default()
        };
        let live = |seq| LiveLogRecord {
            run_id: "r".into(),
            seq,
            log: "[info] so far\n".into(),
            started_at: 1_000,
            running_ms: 250,
            ..LiveLogRecord::default()
        };
        // Claimed ahead of a worker, its guest not started: the attempt says so.
        let claimed = live_attempt(&run("running"), &[], None);
        assert_eq!(
            (claimed["status"].clone(), claimed["seq"].clone()),
            ("claimed".into(), 2.into())
        );
        let started = RunRecord {
            guest_started_at: Some(900),
            ..run("running")
        };
        let shown = live_attempt(&started, &[], Some(&live(2)));
        assert_eq!(shown["status"], "running");
        assert_eq!(shown["seq"], 2);
        assert_eq!(shown["attempt"], 2);
        assert_eq!(shown["host"], "host-1");
        assert_eq!(shown["log"], "[info] so far\n");
        assert_eq!(shown["running_ms"], 250);
        // Another attempt's row (its host crashed) is not this one's log.
        let stale = live_attempt(&run("running"), &[], Some(&live(1)));
        assert_eq!(
            (stale["seq"].clone(), stale["log"].clone()),
            (2.into(), "".into())
        );
        assert!(stale["started_at"].is_null());
        // Not running, or its attempt recorded already: none.
        assert!(live_attempt(&run("queued"), &[], Some(&live(2))).is_null());
        let recorded = AttemptRecord {
            seq: 2,
            ..AttemptRecord::default()
        };
        assert!(live_attempt(&run("running"), &[recorded], Some(&live(2))).is_null());
        // A tenant is not told which host runs it.
        let told = for_tenant(json!({"live_attempt": shown}));
        assert!(told["live_attempt"].get("host").is_none(), "{told}");
    }

    #[test]
    fn a_page_is_fifty_unless_asked_and_never_over_five_hundred() {
        assert_eq!(page_size(None), 50);
        assert_eq!(page_size(Some(7)), 7);
        assert_eq!(page_size(Some(0)), 1);
        assert_eq!(page_size(Some(-3)), 1);
        assert_eq!(page_size(Some(100_000)), 500);
    }

    #[test]
    fn a_tenant_view_drops_host_details_and_tells_five_statuses() {
        let view = json!({
            "name": "x", "component": "/srv/jobs/x.wasm", "host": "box-1",
            "lease": {"held": true, "holder": "box-1"},
            "status": "skipped",
            "attempt_records": [{"seq": 1, "host": "box-1", "log": "mine"}],
        });
        let told = for_tenant(view);
        assert_eq!(
            told,
            json!({
                "name": "x", "lease": {"held": true}, "status": "dropped",
                "attempt_records": [{"seq": 1, "log": "mine"}],
            })
        );
        for status in RunStatus::ALL {
            let told = tenant_status(status.as_str());
            let back = tenant_statuses(told).expect("a told status filters");
            assert!(back.contains(&status), "{told}");
        }
        assert_eq!(tenant_statuses("crashed"), None);
        let per_tenant = json!({"name": "fan", "per_tenant": true, "last_success_at": "t", "lease": {"held": false}});
        assert_eq!(
            for_tenant(per_tenant),
            json!({"name": "fan", "per_tenant": true})
        );
    }
}
