//! Logs a greeting and succeeds. Payload: `{"name": "..."}` (optional).

use jobhost_guest::{Context, Job, JobError, Outcome, log};
use serde::Deserialize;

#[derive(Deserialize)]
struct Payload {
    #[serde(default)]
    name: Option<String>,
}

struct Hello;

impl Job for Hello {
    type Payload = Payload;

    fn run(ctx: Context<Payload>) -> Result<Outcome, JobError> {
        let name = ctx.payload.name.as_deref().unwrap_or("world");
        log::info(&format!("hello, {name}, from {} (run {})", ctx.job, ctx.run_id));
        println!("attempt {} of pass {}", ctx.attempt, ctx.pass);
        Ok(Outcome::Done)
    }
}

jobhost_guest::export_job!(Hello);
