//! Runs the SQL its payload names, to probe what a job may and may not do.
//!
//! Payload: `{"read": ["SELECT ..."], "write": ["INSERT ..."], "commit": true}`. Reads
//! run outside a transaction; writes run in one transaction, committed unless `commit`
//! is false. The first refused statement fails the attempt with the host's error; the
//! log lists each statement's result.

use jobhost_guest::{Context, Job, JobError, Outcome, db, describe, log};
use serde::Deserialize;

#[derive(Deserialize)]
struct Payload {
    #[serde(default)]
    read: Vec<String>,
    #[serde(default)]
    write: Vec<String>,
    #[serde(default = "yes")]
    commit: bool,
}

fn yes() -> bool {
    true
}

struct Probe;

impl Job for Probe {
    type Payload = Payload;

    fn run(ctx: Context<Payload>) -> Result<Outcome, JobError> {
        for sql in &ctx.payload.read {
            match db::query(sql, &[]) {
                Ok(rows) => log::info(&format!("read ok: {} rows", rows.rows.len())),
                Err(e) => {
                    log::warn(&format!("read refused: {}", describe(&e)));
                    return Err(e.into());
                }
            }
        }
        if !ctx.payload.write.is_empty() {
            let tx = db::begin()?;
            for sql in &ctx.payload.write {
                match tx.execute(sql, &[]) {
                    Ok(n) => log::info(&format!("write ok: {n} rows")),
                    Err(e) => {
                        log::warn(&format!("write refused: {}", describe(&e)));
                        return Err(e.into());
                    }
                }
            }
            if ctx.payload.commit {
                tx.commit()?;
            }
        }
        Ok(Outcome::Done)
    }
}

jobhost_guest::export_job!(Probe);
