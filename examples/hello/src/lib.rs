//! Logs a greeting and succeeds. Payload: `{"name": "...", "sleep_ms": n}` (both
//! optional; `sleep_ms` makes it take that long, to keep a run busy).

use jobhost_guest::{Context, Job, JobError, Outcome, log};
use serde::Deserialize;
use std::time::Duration;

#[derive(Deserialize)]
struct Payload {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    sleep_ms: u64,
}

struct Hello;

impl Job for Hello {
    type Payload = Payload;

    fn run(ctx: Context<Payload>) -> Result<Outcome, JobError> {
        let name = ctx.payload.name.as_deref().unwrap_or("world");
        log::info(&format!(
            "hello, {name}, from {} (run {}, tenant {})",
            ctx.job, ctx.run_id, ctx.tenant
        ));
        println!("attempt {} of pass {}", ctx.attempt, ctx.pass);
        if ctx.payload.sleep_ms > 0 {
            std::thread::sleep(Duration::from_millis(ctx.payload.sleep_ms));
        }
        Ok(Outcome::Done)
    }
}

jobhost_guest::export_job!(Hello);
