//! A parent that starts children and waits for them, and the children (one component,
//! two jobs: `family` and `family-child`, told apart by the job's name).
//!
//! The parent's payload: `{"children": n, "in_tx": bool, "fail_after": bool, "wait":
//! "fail" | "continue" | null, "failing": [i, ...], "wait_ms": m, "detached": bool,
//! "delay_ms": d, "job": "family-child", "busy_ms": b, "linger_ms": l}`. Its first pass waits
//! `wait_ms` (to be superseded meanwhile), then queues `n` runs of `job` (payload `{"n": i,
//! "fail": i in failing, "busy_ms": b}`), inside a transaction that also writes a `ledger`
//! row (`in_tx`) or each batch in a write of its own; with `fail_after` it then fails (the
//! transaction rolls back), outside a transaction `linger_ms` later (its children running
//! meanwhile). Children that do not fail are due `delay_ms` later. With `beside`
//! (`["enqueue", "kick", "emit", "result"]`) it makes those calls outside its open
//! transaction, after queueing in it, and logs how each was answered (`beside kick: ...`).
//! With `wait` the pass continues, waiting for its children; the next pass sums their
//! results into its own (`{"succeeded", "other", "sum"}`) and logs what started it.
//! Every pass first logs its place in the run (`pass P attempt A: final=... retries_left=...
//! started_by=... deferrals=...`).
//!
//! With `step`, the first pass then reaches the step `sample` (a pair, and a key that is a
//! number where a language has such keys) and logs what it got back (`step sample: ...`);
//! its first attempt then fails, so the next attempt gets the recorded value: the two lines
//! are the same, as a step's value reads the same on the first run and on a resume.
//!
//! With `start_key` it then starts two runs of `job` (WIT 0.1.7's `jobs.start`: an hour
//! later, one attempt, detached) under that unique key, held until finished, and logs what
//! each start answered (`started KEY: created then joined, one run: true`).
//!
//! With `forks`, each run of `job` it queues gets the payload it has itself, so each
//! queues `children` more in turn: with a `job` of its own, one child makes a chain, two a
//! fork bomb (for the host's bounds on queued runs and on a family's depth).
//!
//! A child takes `busy_ms`, then hands back `{"n": n}`, or, with `fail`, fails for good.
//! With the parent's `child_writes: w` (and `child_wait_ms: m`), each child first writes
//! `w` transactions of one `ledger` row each, holding each open `m` ms, the row's `n` the
//! wall-clock millisecond its transaction began.
//!
//! The Python and JavaScript examples `examples/python/family` and `examples/js/family` do
//! exactly this, so one test body checks all three languages (`tests/polyglot.rs`).

use jobhost_guest::jobs::{
    self, Hold, NewRun, OnConflict, Options, StartOptions, Unique, WaitPolicy,
};
use jobhost_guest::{Context, Job, JobError, Outcome, db, describe, log, run, steps};
use serde::Deserialize;
use serde_json::{Value, json};
use std::time::Duration;

#[derive(Deserialize)]
struct Payload {
    #[serde(default)]
    children: u64,
    #[serde(default)]
    in_tx: bool,
    #[serde(default)]
    fail_after: bool,
    #[serde(default)]
    wait: Option<String>,
    #[serde(default)]
    failing: Vec<u64>,
    #[serde(default)]
    wait_ms: u64,
    #[serde(default)]
    detached: bool,
    #[serde(default = "child_job")]
    job: String,
    /// A child's number, and whether it fails.
    #[serde(default)]
    n: u64,
    #[serde(default)]
    fail: bool,
    /// Children not failing are due this much later.
    #[serde(default)]
    delay_ms: u64,
    /// Calls made outside the open transaction, after queueing in it.
    #[serde(default)]
    beside: Vec<String>,
    /// The runs it queues get its own payload (and queue as many in turn).
    #[serde(default)]
    forks: bool,
    /// How long each child takes.
    #[serde(default)]
    busy_ms: u64,
    /// How long a parent failing after its own writes waits before it fails.
    #[serde(default)]
    linger_ms: u64,
    /// Transactions each child writes first (`writes` in a child's payload), each held
    /// open `wait_ms` (`child_wait_ms` in the parent's).
    #[serde(default)]
    child_writes: u64,
    #[serde(default)]
    child_wait_ms: u64,
    #[serde(default)]
    writes: u64,
    /// Reach the step `sample` in the first pass, failing its first attempt after it.
    #[serde(default)]
    step: bool,
    /// Start two runs of `job` under this unique key.
    #[serde(default)]
    start_key: Option<String>,
}

fn child_job() -> String {
    "family-child".into()
}

/// Runs queued per call: the host takes at most 1000.
const BATCH: u64 = 1000;

struct Family;

impl Job for Family {
    type Payload = Payload;

    fn run(ctx: Context<Payload>) -> Result<Outcome, JobError> {
        if ctx.job.ends_with("child") {
            return child(&ctx);
        }
        let info = run::info();
        log::info(&format!(
            "pass {} attempt {}: final={} retries_left={} started_by={:?} deferrals={}",
            ctx.pass,
            ctx.attempt,
            info.final_attempt,
            info.retries_left,
            info.started_by,
            info.deferrals
        ));
        if ctx.pass > 1 {
            return sum_up();
        }
        if ctx.payload.step {
            let sample: Value =
                steps::step("sample", || Ok(json!({"pair": [1, "a"], "3": "three"})))?;
            log::info(&format!("step sample: {sample}"));
            if ctx.attempt == 1 {
                return Err(JobError::failed("failing after the step"));
            }
        }
        start_children(&ctx)?;
        if let Some(key) = &ctx.payload.start_key {
            start_twice(key, &ctx.payload.job)?;
        }
        match ctx.payload.wait.as_deref() {
            Some(policy) => {
                let policy = if policy == "fail" {
                    WaitPolicy::Fail
                } else {
                    WaitPolicy::Continue
                };
                jobs::wait_for_children(policy)?;
                Ok(Outcome::Continue(json!({})))
            }
            None => Ok(Outcome::Done),
        }
    }
}

fn child(ctx: &Context<Payload>) -> Result<Outcome, JobError> {
    let payload = &ctx.payload;
    log::info(&format!(
        "child {}: started_by={:?}",
        payload.n,
        run::info().started_by
    ));
    for _ in 0..payload.writes {
        let began = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let tx = db::begin()?;
        tx.execute(
            "INSERT INTO ledger (run_id, attempt, n) VALUES ($1, $2, $3)",
            &[ctx.run_id.as_str().into(), ctx.attempt.into(), began.into()],
        )?;
        std::thread::sleep(Duration::from_millis(payload.wait_ms));
        tx.commit()?;
    }
    std::thread::sleep(Duration::from_millis(payload.busy_ms));
    if payload.fail {
        return Err(JobError::unrecoverable(format!(
            "child {} fails",
            payload.n
        )));
    }
    run::set_result(&json!({ "n": payload.n }))?;
    Ok(Outcome::Done)
}

fn start_children(ctx: &Context<Payload>) -> Result<(), JobError> {
    let p = &ctx.payload;
    std::thread::sleep(Duration::from_millis(p.wait_ms));
    let options = |n: &u64| Options {
        detached: p.detached,
        delay: match p.failing.contains(n) {
            true => Duration::ZERO,
            false => Duration::from_millis(p.delay_ms),
        },
        ..Options::default()
    };
    let batches: Vec<Vec<NewRun<'_, Value>>> = (0..p.children)
        .collect::<Vec<_>>()
        .chunks(BATCH as usize)
        .map(|chunk| {
            chunk
                .iter()
                .map(|n| NewRun {
                    job: p.job.as_str(),
                    payload: match p.forks {
                        true => json!({ "children": p.children, "job": p.job, "forks": true,
                            "detached": p.detached }),
                        false => json!({
                            "n": n,
                            "fail": p.failing.contains(n),
                            "busy_ms": p.busy_ms,
                            "writes": p.child_writes,
                            "wait_ms": p.child_wait_ms,
                        }),
                    },
                    options: options(n),
                })
                .collect()
        })
        .collect();
    if p.in_tx {
        let tx = db::begin()?;
        tx.execute(
            "INSERT INTO ledger (run_id, attempt, n) VALUES ($1, $2, $3)",
            &[ctx.run_id.as_str().into(), ctx.attempt.into(), 0i64.into()],
        )?;
        for batch in &batches {
            jobs::enqueue_all_in(&tx, batch)?;
        }
        for call in &p.beside {
            beside(call, &p.job);
        }
        if p.fail_after {
            return Err(JobError::failed(
                "failing after queueing, before the commit",
            ));
        }
        tx.commit()?;
    } else {
        for batch in &batches {
            jobs::enqueue_all(batch)?;
        }
        if p.fail_after {
            std::thread::sleep(Duration::from_millis(p.linger_ms));
            return Err(JobError::failed("failing after queueing"));
        }
    }
    log::info(&format!("started {} runs of {}", p.children, p.job));
    Ok(())
}

/// Starts two runs of `job` under unique `key` and logs what each start answered.
fn start_twice(key: &str, job: &str) -> Result<(), JobError> {
    let options = StartOptions {
        delay: Duration::from_secs(3600),
        max_attempts: Some(1),
        detached: true,
        unique: Some(Unique {
            key: key.to_string(),
            hold: Hold::UntilFinished,
            on_conflict: OnConflict::Keep,
        }),
        ..StartOptions::default()
    };
    let first = jobs::start(job, &json!({ "n": 0 }), &options)?;
    let again = jobs::start(job, &json!({ "n": 1 }), &options)?;
    let word = |outcome| match outcome {
        jobs::Outcome::Created => "created",
        jobs::Outcome::Joined => "joined",
        jobs::Outcome::Replaced => "replaced",
        jobs::Outcome::Debounced => "debounced",
        jobs::Outcome::Dropped => "dropped",
    };
    log::info(&format!(
        "started {key}: {} then {}, one run: {}",
        word(first.outcome),
        word(again.outcome),
        first.run_id == again.run_id
    ));
    Ok(())
}

/// Makes `call` outside the open transaction and logs its answer.
fn beside(call: &str, job: &str) {
    let answer = match call {
        "enqueue" => jobs::enqueue(job, &json!({"n": 0}), &Options::default()).map(|r| r.run_id),
        "kick" => jobs::kick(job),
        "emit" => jobs::emit("nudge", &json!({})).map(|n| n.to_string()),
        "result" => run::set_result(&json!({"beside": true})).map(|()| String::new()),
        _ => Ok("unknown call".into()),
    };
    let answer = answer.map_or_else(|e| describe(&e), |ok| format!("ok {ok}"));
    log::info(&format!("beside {call}: {answer}"));
}

fn sum_up() -> Result<Outcome, JobError> {
    let children = run::children()?;
    let mut succeeded = 0;
    let mut sum = 0;
    for c in &children {
        if c.status == "succeeded" {
            succeeded += 1;
        }
        let n = c
            .result
            .as_deref()
            .and_then(|r| serde_json::from_str::<Value>(r).ok())
            .and_then(|v| v["n"].as_u64())
            .unwrap_or(0);
        sum += n;
    }
    let other = children.len() - succeeded;
    log::info(&format!(
        "children: {succeeded} succeeded, {other} other, sum {sum}"
    ));
    run::set_result(&json!({ "succeeded": succeeded, "other": other, "sum": sum }))?;
    Ok(Outcome::Done)
}

jobhost_guest::export_job!(Family);
