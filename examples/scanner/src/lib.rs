//! A collection's scan job: reads each file waiting for a verdict and marks it clean, or
//! rejected if it contains the payload's `reject` marker. Files are visible to their
//! tenant only once marked clean.
//!
//! Payload: `{"collection": "uploads", "reject": "EICAR"}`. Needs `files.scan=<collection>`.

use jobhost_guest::files::{self, Verdict};
use jobhost_guest::{Context, Job, JobError, Outcome, log};
use serde::Deserialize;

#[derive(Deserialize)]
struct Payload {
    collection: String,
    #[serde(default = "marker")]
    reject: String,
}

fn marker() -> String {
    "EICAR".into()
}

struct Scanner;

impl Job for Scanner {
    type Payload = Payload;

    fn run(ctx: Context<Payload>) -> Result<Outcome, JobError> {
        let p = &ctx.payload;
        for file in files::scan::pending(&p.collection, 100)? {
            let mut content = Vec::with_capacity(file.size as usize);
            while (content.len() as u64) < file.size {
                let chunk = files::scan::read(
                    &p.collection,
                    &file.id,
                    content.len() as u64,
                    files::CHUNK as u64,
                )?;
                if chunk.is_empty() {
                    break;
                }
                content.extend_from_slice(&chunk);
            }
            let infected = content
                .windows(p.reject.len().max(1))
                .any(|w| w == p.reject.as_bytes());
            let verdict = if infected {
                Verdict::Rejected
            } else {
                Verdict::Clean
            };
            files::scan::mark(&p.collection, &file.id, verdict)?;
            log::info(&format!("{} of {}: {verdict:?}", file.name, file.tenant));
        }
        Ok(Outcome::Done)
    }
}

jobhost_guest::export_job!(Scanner);
