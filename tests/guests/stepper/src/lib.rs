//! A test guest for `steps`: runs the scenario its payload names and logs (info) what it
//! saw, one line per step, for the host's end-to-end tests.
//!
//! - `{"scenario": "memo", "steps": n, "fail_after": f, "table": "step_effects"}`: steps
//!   `s0`..`s{n-1}`, each in a transaction of its own that inserts `(run_id, pass, "s{i}")`
//!   into `table` (default `step_effects`) and records `{"i", "attempt"}` with it. Logs
//!   `s{i}: done by attempt {a}`. Attempt 1 fails (`planned`) once `f` steps are done (none
//!   if `fail_after` is absent); the retry skips them. Ends `done`.
//! - `{"scenario": "reuse"}`: reaches step `again` twice; logs `reused: {reason}` and
//!   returns the refusal (unrecoverable), or fails `not refused` if the host allowed it.
//! - `{"scenario": "plain", "steps": n}`: steps `s0`..`s{n-1}` recorded on their own, with
//!   results `{"i": i}`; logs `s{i}: {result}`. Ends `done`.
//! - `{"scenario": "counters", "passes": p, "fail_first": false}`: each pass adds 2 to the
//!   counter `seen`, logs `pass {n}: seen {before} -> {after}` and, with `fail_first`, fails
//!   (`planned`) on its first attempt; continues (`{"pass": n}`) until pass `p`, then done.
//! - `{"scenario": "links", "mount": "svc", "calls": n, "pause_ms": 50}`: steps `call-{i}`,
//!   each a `POST effect` to `mount` with the step's name as body and as the call's `step`,
//!   recording `{"status", "attempt"}`; a non-2xx answer fails the step (unrecorded). Logs
//!   `call-{i}: {status} by attempt {a}`, sleeps `pause_ms` after each call. Ends `done`.
//! - `{"scenario": "bounds", "name_bytes": 1000, "result_bytes": 102400, "depth": 40}`
//!   (defaults): a step named by `name_bytes` bytes, one whose result is a string of
//!   `result_bytes` bytes, one whose result nests `depth` arrays deep. Logs `refused
//!   {name|result|depth}: {reason}` or `accepted {...}` for each. Ends `done`.
//! - `{"scenario": "retry", "fail_times": f, "attempts": a, "first_attempt_only": false}`:
//!   the step `flaky`, whose work fails its first `f` tries (with `first_attempt_only`,
//!   only in the run's first attempt), run with `step_with` for up to `a` tries 5 ms apart;
//!   logs `flaky: {tries} tries` when it succeeds, or fails the attempt with its error.
//! - `{"scenario": "bad_cursor", "depth": 40, "commit_pass": false}`: returns `continue`
//!   with a cursor nesting `depth` arrays deep; with `commit_pass`, ends the pass with it
//!   through `commit-pass` instead, logs `refused cursor: {reason}` and ends `done`. A
//!   pass that gets a cursor (the host kept it) logs `cursor kept` at warn and ends `done`.
//!
//! The component imports `db`, `links` and `steps`: its jobs need all three granted.

use jobhost_guest::steps::{self, PassEnd, StepError};
use jobhost_guest::{Context, HostError, Job, JobError, Outcome, db, links, log};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::time::Duration;

#[derive(Deserialize)]
#[serde(tag = "scenario", rename_all = "snake_case")]
enum Scenario {
    Memo {
        steps: u32,
        fail_after: Option<u32>,
        #[serde(default = "effects")]
        table: String,
    },
    Reuse,
    Plain {
        steps: u32,
    },
    Counters {
        passes: u32,
        #[serde(default)]
        fail_first: bool,
    },
    Links {
        mount: String,
        calls: u32,
        #[serde(default)]
        pause_ms: u64,
    },
    Bounds {
        #[serde(default = "name_bytes")]
        name_bytes: usize,
        #[serde(default = "result_bytes")]
        result_bytes: usize,
        #[serde(default = "depth")]
        depth: usize,
    },
    BadCursor {
        #[serde(default = "depth")]
        depth: usize,
        #[serde(default)]
        commit_pass: bool,
    },
    Retry {
        fail_times: u32,
        attempts: u32,
        #[serde(default)]
        first_attempt_only: bool,
    },
}

fn effects() -> String {
    "step_effects".into()
}

fn name_bytes() -> usize {
    1000
}

fn result_bytes() -> usize {
    100 * 1024
}

fn depth() -> usize {
    40
}

/// What a step that did work records: which attempt did it.
#[derive(Serialize, Deserialize)]
struct Mark {
    i: u32,
    attempt: u32,
}

#[derive(Serialize, Deserialize)]
struct Index {
    i: u32,
}

#[derive(Serialize, Deserialize)]
struct Call {
    status: u16,
    attempt: u32,
}

struct Stepper;

impl Job for Stepper {
    type Payload = Scenario;

    fn run(ctx: Context<Scenario>) -> Result<Outcome, JobError> {
        match &ctx.payload {
            Scenario::Memo {
                steps,
                fail_after,
                table,
            } => memo(&ctx, *steps, *fail_after, table),
            Scenario::Reuse => reuse(),
            Scenario::Plain { steps } => plain(*steps),
            Scenario::Counters { passes, fail_first } => counters(&ctx, *passes, *fail_first),
            Scenario::Links {
                mount,
                calls,
                pause_ms,
            } => calls_through(&ctx, mount, *calls, Duration::from_millis(*pause_ms)),
            Scenario::Bounds {
                name_bytes,
                result_bytes,
                depth,
            } => bounds(*name_bytes, *result_bytes, *depth),
            Scenario::BadCursor { depth, commit_pass } => bad_cursor(&ctx, *depth, *commit_pass),
            Scenario::Retry {
                fail_times,
                attempts,
                first_attempt_only,
            } => {
                let failing = !*first_attempt_only || ctx.attempt == 1;
                retry(if failing { *fail_times } else { 0 }, *attempts)
            }
        }
    }
}

fn memo<P>(
    ctx: &Context<P>,
    steps: u32,
    fail_after: Option<u32>,
    table: &str,
) -> Result<Outcome, JobError> {
    let fail_at = fail_after.filter(|_| ctx.attempt == 1);
    for i in 0..steps {
        if fail_at == Some(i) {
            return Err(JobError::failed("planned"));
        }
        let name = format!("s{i}");
        let tx = db::begin()?;
        let mark = steps::step_in(&tx, &name, |tx| {
            tx.execute(
                &format!("INSERT INTO {table} (run_id, pass, name) VALUES ($1, $2, $3)"),
                &[
                    ctx.run_id.as_str().into(),
                    ctx.pass.into(),
                    name.as_str().into(),
                ],
            )?;
            Ok(Mark {
                i,
                attempt: ctx.attempt,
            })
        })?;
        tx.commit()?;
        log::info(&format!("{name}: done by attempt {}", mark.attempt));
    }
    if fail_at.is_some_and(|f| f >= steps) {
        return Err(JobError::failed("planned"));
    }
    Ok(Outcome::Done)
}

fn reuse() -> Result<Outcome, JobError> {
    steps::step("again", || Ok(1))?;
    match steps::step("again", || Ok(2)) {
        Ok(_) => Err(JobError::failed("not refused")),
        Err(e) => {
            if let StepError::Host(host) = &e {
                log::info(&format!("reused: {}", reason(host)));
            }
            Err(e.into())
        }
    }
}

fn plain(steps: u32) -> Result<Outcome, JobError> {
    for i in 0..steps {
        let name = format!("s{i}");
        let result = steps::step(&name, || Ok(Index { i }))?;
        log::info(&format!("{name}: {}", serde_json::to_string(&result)?));
    }
    Ok(Outcome::Done)
}

fn retry(fail_times: u32, attempts: u32) -> Result<Outcome, JobError> {
    let mut tries = 0;
    let policy = steps::Retry {
        attempts,
        backoff: Duration::from_millis(5),
    };
    let done = steps::step_with("flaky", policy, || {
        tries += 1;
        if tries <= fail_times {
            Err(JobError::failed(format!("try {tries} failed")))
        } else {
            Ok(tries)
        }
    })?;
    log::info(&format!("flaky: {done} tries"));
    Ok(Outcome::Done)
}

fn counters<P>(ctx: &Context<P>, passes: u32, fail_first: bool) -> Result<Outcome, JobError> {
    let before = ctx.counters.get("seen").copied().unwrap_or(0);
    let after = steps::counter_add("seen", 2)?;
    log::info(&format!("pass {}: seen {before} -> {after}", ctx.pass));
    if fail_first && ctx.attempt == 1 {
        return Err(JobError::failed("planned"));
    }
    if ctx.pass < passes {
        Ok(Outcome::Continue(json!({ "pass": ctx.pass })))
    } else {
        Ok(Outcome::Done)
    }
}

fn calls_through<P>(
    ctx: &Context<P>,
    mount: &str,
    calls: u32,
    pause: Duration,
) -> Result<Outcome, JobError> {
    for i in 0..calls {
        let name = format!("call-{i}");
        let call = steps::step(&name, || {
            let request = links::Request {
                method: "POST".into(),
                path: "effect".into(),
                headers: Vec::new(),
                body: name.as_bytes().to_vec(),
                step: name.clone(),
                action: None,
            };
            let response = links::call(mount, &request)?;
            if !response.is_success() {
                return Err(JobError::failed(format!(
                    "{name}: {mount} answered {}",
                    response.status
                )));
            }
            Ok(Call {
                status: response.status,
                attempt: ctx.attempt,
            })
        })?;
        log::info(&format!(
            "{name}: {} by attempt {}",
            call.status, call.attempt
        ));
        std::thread::sleep(pause);
    }
    Ok(Outcome::Done)
}

fn bounds(name_bytes: usize, result_bytes: usize, depth: usize) -> Result<Outcome, JobError> {
    report("name", steps::step(&"n".repeat(name_bytes), || Ok(())))?;
    report(
        "result",
        steps::step("big", || Ok("x".repeat(result_bytes))),
    )?;
    report("depth", steps::step("deep", || Ok(nested(depth))))?;
    Ok(Outcome::Done)
}

/// Logs whether the host took a step; anything but the host's refusal fails the attempt.
fn report<T>(what: &str, result: Result<T, StepError>) -> Result<(), JobError> {
    match result {
        Ok(_) => log::info(&format!("accepted {what}")),
        Err(StepError::Host(e)) => log::info(&format!("refused {what}: {}", reason(&e))),
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

fn bad_cursor<P>(ctx: &Context<P>, depth: usize, commit_pass: bool) -> Result<Outcome, JobError> {
    if ctx.cursor.is_some() {
        log::warn("cursor kept");
        return Ok(Outcome::Done);
    }
    let cursor = nested(depth);
    if !commit_pass {
        return Ok(Outcome::Continue(cursor));
    }
    match db::begin()?.commit_pass(PassEnd::Continue(cursor)) {
        Ok(outcome) => Ok(outcome),
        Err(e) => {
            log::info(&format!("refused cursor: {}", reason(&e)));
            Ok(Outcome::Done)
        }
    }
}

/// `[[...[]...]]`, `depth` arrays deep.
fn nested(depth: usize) -> Value {
    (1..depth).fold(json!([]), |inner, _| json!([inner]))
}

/// A host error's fixed reason, or its case when it has none.
fn reason(e: &HostError) -> &str {
    match e {
        HostError::Invalid(r) | HostError::CapabilityRefused(r) | HostError::QueryRefused(r) => r,
        HostError::LeaseLost => "lease-lost",
        HostError::Unavailable => "unavailable",
    }
}

jobhost_guest::export_job!(Stepper);
