//! POSTs a JSON message to a mount. The host adds the mount's credential and an
//! idempotency key (the same for every attempt of this pass), and sends only while the
//! attempt holds its lease.
//!
//! Payload: `{"mount": "hooks", "path": "events", "message": {...}}`. Needs `links=<mount>`.

use jobhost_guest::{Context, Job, JobError, Outcome, links, log};
use serde::Deserialize;

#[derive(Deserialize)]
struct Payload {
    mount: String,
    #[serde(default)]
    path: String,
    #[serde(default)]
    message: serde_json::Value,
}

struct Notify;

impl Job for Notify {
    type Payload = Payload;

    fn run(ctx: Context<Payload>) -> Result<Outcome, JobError> {
        let p = &ctx.payload;
        let request = links::json("POST", &p.path, "notify", &p.message)?;
        let response = links::call(&p.mount, &request)?;
        log::info(&format!("{} answered {}", p.mount, response.status));
        if response.is_success() {
            Ok(Outcome::Done)
        } else {
            Err(JobError::failed(format!(
                "{} answered {}",
                p.mount, response.status
            )))
        }
    }
}

jobhost_guest::export_job!(Notify);
