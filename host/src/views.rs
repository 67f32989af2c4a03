//! The JSON shapes of runs, attempts and jobs, shared by the CLI and the HTTP API.

use crate::store::{AttemptRecord, JobRecord, LeaseRecord, RunRecord, StepRecord};
use serde_json::{Value, json};

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

/// A run as lists show it. Its payload (up to 256 KiB) is only in `run_detail`; here it is
/// only checked, so a page of runs stays small.
pub fn run(run: &RunRecord) -> Value {
    let mut problems = Vec::new();
    if serde_json::from_str::<serde::de::IgnoredAny>(&run.payload).is_err() {
        problems.push("payload: not JSON".to_string());
    }
    let cursor = decoded(run.cursor.as_deref(), "cursor", &mut problems);
    let counters = decoded(Some(&run.counters), "counters", &mut problems);
    json!({
        "run_id": run.id,
        "job": run.job,
        "instance": run.instance,
        "tenant": run.tenant,
        "origin": run.origin,
        "status": run.status,
        "attempts": run.attempts,
        "passes": run.pass,
        "defers": run.defers,
        "code": run.last_code,
        "error": run.last_error,
        "cursor": cursor,
        "counters": counters,
        "decode_error": decode_error(problems),
        "scheduled_for": run.scheduled_for.map(time),
        "rerun_of": run.rerun_of,
        "created_at": time(run.created_at),
        "started_at": run.started_at.map(time),
        "finished_at": run.finished_at.map(time),
        "next_attempt_at": (run.status == "queued").then(|| time(run.next_attempt_at)),
        "duration_ms": duration_ms(run),
        "component_digest": run.component_digest,
        "host": run.host,
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

/// A run with its attempts and its ledger (the steps its current pass recorded; after a
/// failure, the evidence of how far the last pass got).
pub fn run_detail(r: &RunRecord, attempts: &[AttemptRecord], steps: &[StepRecord]) -> Value {
    let mut value = run(r);
    value["payload"] = decoded(Some(&r.payload), "payload", &mut Vec::new());
    value["attempt_records"] = Value::Array(attempts.iter().map(attempt).collect());
    value["steps"] = Value::Array(steps.iter().map(step).collect());
    value
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
        "schedule": job.schedule,
        "next_fire_at": job.next_fire_at.map(time),
        "last_success_at": job.last_success_at.map(time),
        "registered_at": time(job.registered_at),
        "component": job.component_path,
        "component_digest": job.component_digest,
        "lease": lease,
    })
}

/// Every job with the lease of its default instance.
pub fn jobs(jobs: &[JobRecord], leases: &[LeaseRecord], now: i64) -> Vec<Value> {
    jobs.iter()
        .map(|j| {
            let lease = leases
                .iter()
                .find(|l| l.job == j.name && l.instance == crate::kick::DEFAULT_INSTANCE);
            job(j, lease, now)
        })
        .collect()
}
