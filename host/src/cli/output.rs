//! Human and JSON renderings of what the CLI prints.

use crate::failure::FailureCode;
use crate::store::{AttemptRecord, RunRecord};
use serde_json::json;

pub fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S%.3fZ").to_string())
        .unwrap_or_else(|| ms.to_string())
}

fn duration_ms(run: &RunRecord) -> Option<i64> {
    Some(run.finished_at? - run.started_at?)
}

pub fn run_json(run: &RunRecord) -> serde_json::Value {
    json!({
        "run_id": run.id,
        "job": run.job,
        "instance": run.instance,
        "tenant": run.tenant,
        "origin": run.origin,
        "status": run.status,
        "attempts": run.attempts,
        "passes": run.pass,
        "code": run.last_code,
        "error": run.last_error,
        "cursor": run.cursor.as_deref().and_then(|c| serde_json::from_str::<serde_json::Value>(c).ok()),
        "created_at": time(run.created_at),
        "started_at": run.started_at.map(time),
        "finished_at": run.finished_at.map(time),
        "duration_ms": duration_ms(run),
        "component_digest": run.component_digest,
        "host": run.host,
    })
}

pub fn run_result(run: &RunRecord, as_json: bool) {
    if as_json {
        println!("{}", run_json(run));
        return;
    }
    let attempts = match run.attempts {
        1 => "1 attempt".to_string(),
        n => format!("{n} attempts"),
    };
    let took = duration_ms(run)
        .map(|ms| format!(" in {ms} ms"))
        .unwrap_or_default();
    print!("run {} of {}: {} after {attempts}{took}", run.id, run.job, run.status);
    if let Some(code) = &run.last_code
        && run.status != "succeeded"
    {
        print!(" ({code})");
    }
    println!();
    if run.status != "succeeded"
        && let Some(error) = &run.last_error
    {
        println!("  error: {error}");
    }
}

pub fn attempt_json(a: &AttemptRecord) -> serde_json::Value {
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

pub fn codes(as_json: bool) -> u8 {
    if as_json {
        let all: Vec<_> = FailureCode::ALL
            .iter()
            .map(|(code, doc)| json!({"code": code.as_str(), "meaning": doc, "retried": code.is_retryable()}))
            .collect();
        println!("{}", serde_json::Value::Array(all));
    } else {
        for (code, doc) in FailureCode::ALL {
            println!("{:<20} {doc}", code.as_str());
        }
    }
    0
}
