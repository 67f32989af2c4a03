//! Fails its first `fail_times` attempts, then succeeds. Payload: `{"fail_times": k}`.

use jobhost_guest::{Context, Job, JobError, Outcome, log};
use serde::Deserialize;

#[derive(Deserialize)]
struct Payload {
    fail_times: u32,
}

struct Flaky;

impl Job for Flaky {
    type Payload = Payload;

    fn run(ctx: Context<Payload>) -> Result<Outcome, JobError> {
        if ctx.attempt <= ctx.payload.fail_times {
            return Err(JobError::failed(format!(
                "flaky: failing attempt {} of {}",
                ctx.attempt, ctx.payload.fail_times
            )));
        }
        log::info(&format!("succeeded on attempt {}", ctx.attempt));
        Ok(Outcome::Done)
    }
}

jobhost_guest::export_job!(Flaky);
