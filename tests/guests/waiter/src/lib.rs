//! A run that waits for the outside (WIT 0.1.6's signals), for `tests/signals.rs`.
//!
//! Its payload: `{"signal": "approval", "rounds": r, "timeout_ms": t, "linger_ms": l,
//! "fail_reading_once": bool}`. Each of its first `r` passes (default 1) lingers `l` ms
//! (so a signal can be sent while it runs), then waits for `signal` with timeout `t`
//! (default an hour) and continues. Each later pass reads the signal — twice, to show a
//! pass reads one signal whatever it asks — logs what it read (`read: ...`), and adds it
//! to the cursor; with `fail_reading_once` the first attempt of a reading pass then
//! fails, so its retry reads again (the same signal). The last pass hands back every
//! reading with `run.set-result`: `[{"state": "received", "id": ..., "payload": ...},
//! {"state": "timed-out"}, ...]`.

use jobhost_guest::run::{self, Signal};
use jobhost_guest::{Context, Job, JobError, Outcome, log};
use serde::Deserialize;
use serde_json::{Value, json};
use std::time::Duration;

#[derive(Deserialize)]
struct Payload {
    signal: String,
    #[serde(default = "one")]
    rounds: u32,
    #[serde(default = "an_hour")]
    timeout_ms: u64,
    #[serde(default)]
    linger_ms: u64,
    #[serde(default)]
    fail_reading_once: bool,
}

fn one() -> u32 {
    1
}

fn an_hour() -> u64 {
    3_600_000
}

struct Waiter;

impl Job for Waiter {
    type Payload = Payload;

    fn run(ctx: Context<Payload>) -> Result<Outcome, JobError> {
        let p = &ctx.payload;
        let mut readings = match &ctx.cursor {
            Some(Value::Array(readings)) => readings.clone(),
            _ => Vec::new(),
        };
        if ctx.pass > 1 {
            let first = reading(run::signal::<Value>(&p.signal)?);
            let again = reading(run::signal::<Value>(&p.signal)?);
            if first != again {
                return Err(JobError::Unrecoverable(format!(
                    "one pass read two signals: {first} then {again}"
                )));
            }
            log::info(&format!("read: {first}"));
            if p.fail_reading_once && ctx.attempt == 1 {
                return Err(JobError::Failed("failing once after reading".into()));
            }
            readings.push(first);
        }
        if ctx.pass > p.rounds {
            run::set_result(&readings)?;
            return Ok(Outcome::Done);
        }
        std::thread::sleep(Duration::from_millis(p.linger_ms));
        run::wait_for_signal(&p.signal, Duration::from_millis(p.timeout_ms))?;
        Ok(Outcome::Continue(Value::Array(readings)))
    }
}

fn reading(signal: Signal<Value>) -> Value {
    match signal {
        Signal::Received { id, payload } => {
            json!({"state": "received", "id": id, "payload": payload})
        }
        Signal::TimedOut => json!({"state": "timed-out"}),
        Signal::Pending => json!({"state": "pending"}),
    }
}

jobhost_guest::export_job!(Waiter);
