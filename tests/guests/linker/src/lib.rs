//! A test guest for `links` (`tests/links.rs`): makes the call its payload describes —
//! `{mount, method, path, headers, body, step, action}` — `calls` times, after waiting
//! `wait_ms`, and logs each answer. With `fail_first`, its first attempt fails after the
//! call, so the retry makes it again. A refused call fails the attempt with the host's
//! error. With `send`, it calls through `links::send`, and a call the mount's limits
//! refused (`rate-limited`) ends the pass with a defer of `defer_ms`.

use jobhost_guest::{Context, Job, JobError, Outcome, links, log};
use serde::Deserialize;
use std::time::Duration;

#[derive(Deserialize)]
struct Payload {
    mount: String,
    #[serde(default = "get")]
    method: String,
    #[serde(default)]
    path: String,
    #[serde(default)]
    headers: Vec<(String, String)>,
    #[serde(default)]
    body: String,
    #[serde(default)]
    step: String,
    action: Option<String>,
    #[serde(default = "one")]
    calls: usize,
    #[serde(default)]
    wait_ms: u64,
    #[serde(default)]
    fail_first: bool,
    #[serde(default)]
    send: bool,
    #[serde(default = "one_second")]
    defer_ms: u64,
}

fn one_second() -> u64 {
    1000
}

fn get() -> String {
    "GET".into()
}

fn one() -> usize {
    1
}

struct Linker;

impl Job for Linker {
    type Payload = Payload;

    fn run(ctx: Context<Payload>) -> Result<Outcome, JobError> {
        let p = &ctx.payload;
        std::thread::sleep(Duration::from_millis(p.wait_ms));
        for _ in 0..p.calls {
            let request = links::Request {
                method: p.method.clone(),
                path: p.path.clone(),
                headers: p.headers.clone(),
                body: p.body.as_bytes().to_vec(),
                step: p.step.clone(),
                action: p.action.clone(),
            };
            let response = if p.send {
                match links::send(&p.mount, &request) {
                    Err(links::CallError::RateLimited) => {
                        log::info("rate-limited: deferring the pass");
                        return Ok(Outcome::Defer(Duration::from_millis(p.defer_ms.max(1))));
                    }
                    answer => answer?,
                }
            } else {
                links::call(&p.mount, &request)?
            };
            log::info(&format!(
                "status {} body {}",
                response.status,
                String::from_utf8_lossy(&response.body)
            ));
        }
        if p.fail_first && ctx.attempt == 1 {
            return Err(JobError::failed("failing the first attempt on purpose"));
        }
        Ok(Outcome::Done)
    }
}

jobhost_guest::export_job!(Linker);
