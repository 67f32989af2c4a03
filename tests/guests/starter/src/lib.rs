//! Starts with options from a guest (WIT 0.1.7's `jobs.start`), for `tests/enqueue.rs`.
//!
//! Its payload: `{"starts": [{"job", "payload", "run_at_ms", "delay_ms", "priority",
//! "max_attempts", "key", "hold", "on_conflict", "detached"}], "call": "start" |
//! "start-in" | "start-all" | "start-all-in" | "enqueue", "linger_ms": l, "fail": bool}`.
//! It lingers `l` ms (so a test can supersede it meanwhile), then makes `call` with
//! `starts` (`hold`: `queued`, `active`, `until-finished`, or a number of milliseconds;
//! `enqueue` is the earlier call, one run at a time, with `key` as its `dedup-key`), and
//! hands back what each start answered with `run.set-result`: `[{"run_id", "outcome"}]`
//! (`outcome` `duplicate` or `new` for `enqueue`), or `{"error": ...}` when the call was
//! refused (the run still succeeds). A run with `fail` (a started one) fails every
//! attempt, so its attempts can be counted.

use jobhost_guest::jobs::{self, Hold, NewStart, OnConflict, Options, StartOptions, Unique};
use jobhost_guest::{Context, HostError, Job, JobError, Outcome, db, describe, run};
use serde::Deserialize;
use serde_json::{Value, json};
use std::time::{Duration, SystemTime};

#[derive(Deserialize)]
struct Payload {
    #[serde(default)]
    starts: Vec<Asked>,
    #[serde(default)]
    call: String,
    #[serde(default)]
    linger_ms: u64,
    #[serde(default)]
    fail: bool,
}

#[derive(Deserialize)]
struct Asked {
    job: String,
    #[serde(default)]
    payload: Value,
    run_at_ms: Option<u64>,
    #[serde(default)]
    delay_ms: u64,
    #[serde(default)]
    priority: i32,
    max_attempts: Option<u32>,
    key: Option<String>,
    hold: Option<Value>,
    on_conflict: Option<String>,
    #[serde(default)]
    detached: bool,
}

impl Asked {
    fn options(&self) -> StartOptions {
        StartOptions {
            instance: None,
            run_at: self
                .run_at_ms
                .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms)),
            delay: Duration::from_millis(self.delay_ms),
            priority: self.priority,
            max_attempts: self.max_attempts,
            unique: self.key.clone().map(|key| Unique {
                key,
                hold: match &self.hold {
                    Some(Value::Number(ms)) => {
                        Hold::Period(Duration::from_millis(ms.as_u64().unwrap_or(0)))
                    }
                    Some(Value::String(s)) if s == "queued" => Hold::Queued,
                    Some(Value::String(s)) if s == "active" => Hold::Active,
                    _ => Hold::UntilFinished,
                },
                on_conflict: match self.on_conflict.as_deref() {
                    Some("replace") => OnConflict::Replace,
                    Some("debounce") => OnConflict::Debounce,
                    _ => OnConflict::Keep,
                },
            }),
            detached: self.detached,
        }
    }
}

struct Starter;

impl Job for Starter {
    type Payload = Payload;

    fn run(ctx: Context<Payload>) -> Result<Outcome, JobError> {
        let p = &ctx.payload;
        if p.fail {
            return Err(JobError::failed("failing, as asked"));
        }
        std::thread::sleep(Duration::from_millis(p.linger_ms));
        let answers = match make(p) {
            Ok(answers) => json!(answers),
            Err(e) => json!({ "error": describe(&e) }),
        };
        run::set_result(&answers)?;
        Ok(Outcome::Done)
    }
}

fn started(answer: jobs::Started) -> Value {
    let outcome = match answer.outcome {
        jobs::Outcome::Created => "created",
        jobs::Outcome::Joined => "joined",
        jobs::Outcome::Replaced => "replaced",
        jobs::Outcome::Debounced => "debounced",
        jobs::Outcome::Dropped => "dropped",
    };
    json!({ "run_id": answer.run_id, "outcome": outcome })
}

fn make(p: &Payload) -> Result<Vec<Value>, HostError> {
    let batch: Vec<NewStart<'_, &Value>> = p
        .starts
        .iter()
        .map(|s| NewStart {
            job: s.job.as_str(),
            payload: &s.payload,
            options: s.options(),
        })
        .collect();
    let answers = match p.call.as_str() {
        "start-all" => jobs::start_all(&batch)?,
        "start-all-in" => {
            let tx = db::begin()?;
            let answers = jobs::start_all_in(&tx, &batch)?;
            tx.commit()?;
            answers
        }
        "enqueue" => {
            let mut answers = Vec::new();
            for s in &p.starts {
                let options = Options {
                    delay: Duration::from_millis(s.delay_ms),
                    dedup_key: s.key.clone(),
                    ..Options::default()
                };
                let e = jobs::enqueue(&s.job, &s.payload, &options)?;
                let outcome = if e.duplicate { "duplicate" } else { "new" };
                answers.push(json!({ "run_id": e.run_id, "outcome": outcome }));
            }
            return Ok(answers);
        }
        call => {
            let mut answers = Vec::new();
            for start in &batch {
                answers.push(if call == "start-in" {
                    let tx = db::begin()?;
                    let answer = jobs::start_in(&tx, start.job, &start.payload, &start.options)?;
                    tx.commit()?;
                    answer
                } else {
                    jobs::start(start.job, &start.payload, &start.options)?
                });
            }
            answers
        }
    };
    Ok(answers.into_iter().map(started).collect())
}

jobhost_guest::export_job!(Starter);
