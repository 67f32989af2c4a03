//! The JSON shapes of runs, attempts and jobs, shared by the CLI and the HTTP API.

use crate::store::{
    AttemptRecord, AuditRecord, DeliveryAttemptRecord, DeliveryRecord, FileRecord, JobRecord,
    LeaseRecord, LiveLogRecord, PauseRecord, RunRecord, RunStatus, StepFailureRecord, StepRecord,
    TenantRecord, TokenRecord,
};
use serde_json::{Value, json};

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

fn decode_error(problems: Vec<String>) -> Value {
    if problems.is_empty() {
        Value::Null
    } else {
        Value::String(problems.join("; "))
    }
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
    run_view(run, LISTED_CURSOR_BYTES)
}

/// A run with its cursor if that is at most `cursor_bytes` long.
fn run_view(run: &RunRecord, cursor_bytes: usize) -> Value {
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
    json!({
        "run_id": run.id,
        "job": run.job,
        "instance": run.instance,
        "tenant": run.tenant,
        "origin": run.origin,
        "status": run.shown_status(),
        "attempts": run.attempts,
        // The attempts a pass may use that its start asked for (none: its job's).
        "max_attempts": run.max_attempts,
        "passes": run.pass,
        "defers": run.defers,
        "code": run.last_code,
        "error": run.last_error,
        "cursor": cursor,
        "cursor_omitted": omitted.is_some(),
        "counters": counters,
        "decode_error": decode_error(problems),
        "scheduled_for": run.scheduled_for.map(time),
        "rerun_of": run.rerun_of,
        "resumed_by": run.resumed_by,
        "created_at": time(run.created_at),
        "started_at": run.started_at.map(time),
        "finished_at": run.finished_at.map(time),
        // A waiting run is due when its children ended, not at the time its row holds.
        "next_attempt_at": (run.shown_status() == "queued").then(|| time(run.next_attempt_at)),
        "duration_ms": duration_ms(run),
        "component_digest": run.component_digest,
        "host": run.host,
        "trace_id": run.trace().trace_id(),
        "retry_of": run.retry_of,
        "retried_by": run.retried_by,
        "parent_run": run.parent_run,
        "parent_attempt": run.parent_attempt,
        "detached": run.detached == 1,
        "event": run.event,
        "waits_for": run.waiting_pass().map(|_| run.wait_policy.as_deref()),
        // A run asleep until a signal comes, or its timeout (then due).
        "waits_for_signal": run.waiting_signal(),
        "signal_timeout_at": run.waiting_signal().map(|_| time(run.next_attempt_at)),
        "result": result,
    })
}

/// A pause of a job, a tenant or a lane.
pub fn pause(p: &PauseRecord) -> Value {
    json!({"scope": p.scope, "name": p.name, "paused_at": time(p.paused_at)})
}

/// The most attached objects a run's detail lists.
pub const FILES_SHOWN: i64 = 100;

/// An object a run attached.
pub fn file(f: &FileRecord) -> Value {
    json!({
        "collection": f.collection,
        "name": f.name,
        "size": f.size,
        "digest": f.digest,
        "status": f.status,
        "attached_at": time(f.created_at),
    })
}

pub fn attempt(a: &AttemptRecord) -> Value {
    json!({
        "seq": a.seq,
        "pass": a.pass,
        "attempt": a.attempt,
        "generation": a.generation,
        "host": a.host,
        "status": a.status,
        "outcome": a.outcome,
        "code": a.code,
        "fuel_used": a.fuel_used,
        "peak_memory": a.peak_memory,
        "duration_ms": a.duration_ms,
        "started_at": time(a.started_at),
        "finished_at": a.finished_at.map(time),
        "log": a.log,
        "log_truncated": a.log_truncated != 0,
    })
}

/// A delivery of a run's ending to a webhook (never its secret or URL): its state, tries
/// and the last answer, the receiver's text bounded and escaped when it was stored.
pub fn delivery(d: &DeliveryRecord) -> Value {
    json!({
        "id": d.id,
        "run_id": d.run_id,
        "job": d.job,
        "tenant": d.tenant,
        "webhook": d.webhook,
        "ending": d.ending,
        "state": d.state,
        "attempts": d.attempts,
        "next_try_at": (d.state == "pending").then(|| time(d.next_try_at)),
        "last_status": d.last_status,
        "last_error": d.last_error,
        "after_run": d.after_run,
        "created_at": time(d.created_at),
        "delivered_at": d.delivered_at.map(time),
    })
}

pub fn delivery_attempt(a: &DeliveryAttemptRecord) -> Value {
    json!({
        "host": a.host,
        "status_code": a.status_code,
        "error": a.error,
        "duration_ms": a.duration_ms,
        "at": time(a.at),
    })
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
    let in_attempt = run.status() == Some(RunStatus::Running) && run.generation.is_some();
    if !in_attempt || attempts.iter().any(|a| a.seq == run.attempts) {
        return Value::Null;
    }
    let live = live.filter(|l| l.seq == run.attempts);
    json!({
        "seq": run.attempts,
        "pass": run.pass,
        "attempt": run.current_try(),
        "generation": run.generation,
        "host": run.host,
        "status": if run.claimed() { crate::store::CLAIMED } else { "running" },
        "started_at": live.map(|l| time(l.started_at)),
        "running_ms": live.map(|l| l.running_ms.max(0)),
        "log": live.map_or("", |l| l.log.as_str()),
        "log_truncated": live.is_some_and(|l| l.log_truncated != 0),
        "fuel_used": live.and_then(|l| l.fuel_used),
    })
}

/// A recorded step of a run's ledger.
pub fn step(s: &StepRecord) -> Value {
    let mut problems = Vec::new();
    let result = decoded(Some(&s.result), "result", &mut problems);
    json!({
        "pass": s.pass,
        "name": s.name,
        "result": result,
        "generation": s.generation,
        "recorded_at": time(s.recorded_at),
        "decode_error": decode_error(problems),
    })
}

/// The most attempts a run's detail shows: its last ones (a run that continues pass after
/// pass may have any number).
pub const ATTEMPTS_SHOWN: i64 = 100;

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
    let mut value = run_view(r, usize::MAX);
    value["payload"] = decoded(Some(&r.payload), "payload", &mut Vec::new());
    let trace_id = r.trace().trace_id();
    let views = attempts.iter().map(|a| {
        let mut view = attempt(a);
        view["trace_id"] = trace_id.clone().into();
        view
    });
    value["attempt_records"] = Value::Array(views.collect());
    value["live_attempt"] = live_attempt(r, attempts, live);
    // Attempts are numbered from 1 without gaps: a first one shown past 1 had others before.
    value["earlier_attempts_omitted"] = attempts.first().is_some_and(|a| a.seq > 1).into();
    value["steps"] = Value::Array(steps.iter().map(step).collect());
    value["failed_steps"] = Value::Array(failed_steps.iter().map(failed_step).collect());
    value
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
pub fn failed_step(s: &StepFailureRecord) -> Value {
    json!({
        "pass": s.pass,
        "name": s.name,
        "failed_attempts": s.attempts,
        "last_code": s.last_code,
        "last_error": s.last_error,
        "last_failed_at": time(s.failed_at),
    })
}

pub fn job(job: &JobRecord, lease: Option<&LeaseRecord>, now: i64) -> Value {
    let lease = lease.map(|l| {
        let held = l.holder.is_some() && l.expires_at > now;
        json!({
            "held": held,
            "holder": if held { l.holder.clone() } else { None },
            "generation": l.generation,
            "expires_at": held.then(|| time(l.expires_at)),
            "pending": l.pending != 0,
        })
    });
    json!({
        "name": job.name,
        "tenant": job.tenant,
        "per_tenant": job.per_tenant != 0,
        "orphaned": job.orphaned_at.is_some(),
        "orphaned_at": job.orphaned_at.map(time),
        "schedule": job.schedule,
        "next_fire_at": job.next_fire_at.map(time),
        "last_success_at": job.last_success_at.map(time),
        "registered_at": time(job.registered_at),
        "component": job.component_path,
        "component_digest": job.component_digest,
        "lease": lease,
    })
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

/// Every job with the lease of its default instance.
pub fn jobs(jobs: &[JobRecord], leases: &[LeaseRecord], now: i64) -> Vec<Value> {
    jobs.iter()
        .map(|j| {
            let lease = leases
                .iter()
                .find(|l| l.job == j.name && l.instance == crate::queue::kick::DEFAULT_INSTANCE);
            job(j, lease, now)
        })
        .collect()
}

pub fn tenant(t: &TenantRecord) -> Value {
    json!({
        "name": t.name,
        "active": t.active != 0,
        "created_at": time(t.created_at),
        "updated_at": time(t.updated_at),
    })
}

pub fn token(t: &TokenRecord) -> Value {
    json!({
        "id": t.id,
        "tenant": t.tenant,
        "label": t.label,
        "created_at": time(t.created_at),
        "revoked_at": t.revoked_at.map(time),
        "kind": token_kind(t.tenant.as_deref(), t.read_only != 0),
        "expires_at": t.expires_at.map(time),
        "expired": t.expired != 0,
    })
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

/// A change made to a run, as its detail shows it. A tenant is told that an operator
/// acted, not which token.
pub fn run_action(a: &AuditRecord, to_tenant: bool) -> Value {
    let who = if to_tenant && a.tenant.is_none() {
        "operator".to_string()
    } else {
        who(a)
    };
    json!({"at": time(a.at), "action": a.action, "who": who, "result": a.result})
}

pub fn audit(a: &AuditRecord) -> Value {
    json!({
        "id": a.id,
        "at": time(a.at),
        "actor": a.actor,
        "token_id": a.token_id,
        "label": a.label,
        "tenant": a.tenant,
        "who": who(a),
        "action": a.action,
        "object": a.object,
        "run_id": a.run_id,
        "result": a.result,
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

#[cfg(test)]
mod tests {
    use super::*;

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
