//! Human and JSON renderings of what the CLI prints.

use crate::rules::failure::FailureCode;
use crate::rules::guest_text::for_terminal;
use crate::rules::units::readable_ms;
use crate::service::views;
use crate::store::{AttemptRecord, RunRecord, RunStatus};
use serde_json::json;

pub fn run_result(run: &RunRecord, as_json: bool) {
    if as_json {
        println!("{}", views::run(run));
        return;
    }
    let attempts = match run.attempts {
        1 => "1 attempt".to_string(),
        n => format!("{n} attempts"),
    };
    let took = views::duration_ms(run)
        .map(|ms| format!(" in {}", readable_ms(ms.max(0) as u64)))
        .unwrap_or_default();
    print!(
        "run {} of {}: {} after {attempts}{took}",
        run.id,
        run.job,
        run.shown_status()
    );
    if let Some(code) = &run.last_code
        && run.status != "succeeded"
    {
        print!(" ({code})");
    }
    println!();
    if run.waiting_pass().is_some() && run.origin == crate::store::Origin::Manual.as_str() {
        println!(
            "  it waits for the runs it started, which `host serve` or `host drive` run; a `host run` run belongs to its process, so no host runs its next pass: to fan in, kick the job under `host serve`, and end this one with `host runs cancel {}`",
            run.id
        );
    } else if run.waiting_pass().is_some() {
        println!(
            "  it waits for the runs it started: `host serve` (or `host drive`) runs them, then its next pass"
        );
    } else if let Some(name) = run.waiting_signal() {
        let manual = run.origin == crate::store::Origin::Manual.as_str();
        println!(
            "  it waits for the signal {name:?} (`host runs signal {} {name}`){}",
            run.id,
            if manual {
                "; a `host run` run belongs to its process, so no host runs its next pass: run the job under `host serve` to wait for the outside"
            } else {
                ", then `host serve` (or `host drive`) runs its next pass"
            }
        );
    }
    if run.status != "succeeded"
        && let Some(error) = &run.last_error
    {
        println!("  error: {}", for_terminal(error));
    }
}

/// A run's counters and ledger, indented under the run; guest text made safe for a
/// terminal.
pub fn progress(run: &RunRecord, steps: &[crate::store::StepRecord]) {
    let view = views::run(run);
    if let Some(counters) = view["counters"].as_object().filter(|c| !c.is_empty()) {
        let counters: Vec<String> = counters.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!("  counters: {}", for_terminal(&counters.join(", ")));
    }
    if let Some(problem) = view["decode_error"].as_str() {
        println!("  decode error: {problem}");
    }
    if let Some(rerun) = &run.resumed_by {
        println!("  resumed by {rerun}, which took its ledger");
    }
    for step in steps {
        println!(
            "  step {} (pass {}): {}",
            for_terminal(&step.name),
            step.pass,
            for_terminal(&step.result)
        );
    }
}

/// The steps attempts failed in without recording them.
pub fn failed_steps(failed: &[crate::store::StepFailureRecord]) {
    for step in failed {
        let times = if step.attempts == 1 { "once" } else { "times" };
        let count = if step.attempts == 1 {
            String::new()
        } else {
            format!("{} ", step.attempts)
        };
        println!(
            "  step {} (pass {}) failed {count}{times}, last: {}{}",
            for_terminal(&step.name),
            step.pass,
            step.last_code,
            step.last_error
                .as_deref()
                .map(|e| format!(": {}", for_terminal(e)))
                .unwrap_or_default()
        );
    }
}

/// An attempt's log, indented under what was printed about it.
pub fn log(attempt: &AttemptRecord) {
    log_text(&attempt.log, attempt.log_truncated != 0);
}

/// A log's text, indented under what was printed about its attempt.
pub fn log_text(text: &str, truncated: bool) {
    for line in text.lines() {
        println!("    | {}", for_terminal(line));
    }
    if truncated {
        println!("    | (log truncated)");
    }
}

/// The exit code of a command that saw `run` end (`host run`, `host runs tail`): 0 when
/// it succeeded (or waits for the runs it started), 3 when skipped, 1 otherwise.
pub fn exit_code(run: &RunRecord) -> u8 {
    match run.status() {
        Some(RunStatus::Succeeded) => 0,
        Some(RunStatus::Skipped) => 3,
        Some(RunStatus::Queued) if run.waiting_pass().is_some() => 0,
        Some(RunStatus::Queued) if run.waiting_signal().is_some() => 0,
        _ => 1,
    }
}

pub fn codes(as_json: bool) -> u8 {
    if as_json {
        let all: Vec<_> = FailureCode::ALL
            .iter()
            .map(|(code, doc)| json!({"code": code.as_str(), "meaning": doc, "retried": code.retried()}))
            .collect();
        println!("{}", serde_json::Value::Array(all));
    } else {
        for (code, doc) in FailureCode::ALL {
            println!("{:<20} {doc}", code.as_str());
        }
    }
    0
}
