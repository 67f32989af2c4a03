//! A long run in passes: each pass handles one page and returns `continue` with a cursor
//! naming the next, until the last page is done. Payload: `{"pages": n, "defer_ms": m}`;
//! with `defer_ms`, every odd pass asks to be run again after that delay instead (a
//! deferred pass keeps the cursor it was given).

use jobhost_guest::{Context, Job, JobError, Outcome, log};
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Deserialize)]
struct Payload {
    pages: u32,
    #[serde(default)]
    defer_ms: u64,
}

#[derive(Serialize, Deserialize, Default)]
struct Cursor {
    page: u32,
}

struct Pager;

impl Job for Pager {
    type Payload = Payload;

    fn run(ctx: Context<Payload>) -> Result<Outcome, JobError> {
        if ctx.payload.defer_ms > 0 && ctx.pass % 2 == 1 {
            log::info(&format!("pass {}: deferring", ctx.pass));
            return Ok(Outcome::Defer(Duration::from_millis(ctx.payload.defer_ms)));
        }
        let cursor: Cursor = match ctx.cursor {
            Some(value) => serde_json::from_value(value)?,
            None => Cursor::default(),
        };
        log::info(&format!(
            "pass {}: page {} of {}",
            ctx.pass,
            cursor.page + 1,
            ctx.payload.pages
        ));
        let next = cursor.page + 1;
        if next >= ctx.payload.pages {
            return Ok(Outcome::Done);
        }
        Ok(Outcome::Continue(serde_json::to_value(Cursor {
            page: next,
        })?))
    }
}

jobhost_guest::export_job!(Pager);
