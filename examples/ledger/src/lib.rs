//! Writes `rows` rows into the `ledger` table in one transaction.
//!
//! Payload: `{"rows": n, "wait_ms": m, "wait_at": "commit" | "begin"}`. With `wait_ms`, it
//! waits that long before committing (`wait_at = "commit"`, the default: inside the open
//! transaction) or before opening the transaction (`"begin"`), to outlive its deadline or
//! its lease. Needs `db.write=ledger` and the table from `examples/migrations`.

use jobhost_guest::{Context, Job, JobError, Outcome, db, log};
use serde::Deserialize;
use std::time::Duration;

#[derive(Deserialize)]
struct Payload {
    rows: i64,
    #[serde(default)]
    wait_ms: u64,
    #[serde(default)]
    wait_at: WaitAt,
}

#[derive(Deserialize, Default, PartialEq)]
#[serde(rename_all = "lowercase")]
enum WaitAt {
    #[default]
    Commit,
    Begin,
}

struct Ledger;

impl Job for Ledger {
    type Payload = Payload;

    fn run(ctx: Context<Payload>) -> Result<Outcome, JobError> {
        let wait = Duration::from_millis(ctx.payload.wait_ms);
        if ctx.payload.wait_at == WaitAt::Begin {
            std::thread::sleep(wait);
        }
        let tx = db::begin()?;
        for n in 0..ctx.payload.rows {
            tx.execute(
                "INSERT INTO ledger (run_id, attempt, n) VALUES ($1, $2, $3)",
                &[ctx.run_id.as_str().into(), ctx.attempt.into(), n.into()],
            )?;
        }
        if ctx.payload.wait_at == WaitAt::Commit {
            std::thread::sleep(wait);
        }
        tx.commit()?;
        log::info(&format!("committed {} rows", ctx.payload.rows));
        Ok(Outcome::Done)
    }
}

jobhost_guest::export_job!(Ledger);
