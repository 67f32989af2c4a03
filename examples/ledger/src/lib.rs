//! Writes `rows` rows into the `ledger` table in one transaction (or in each of
//! `transactions`, one after another).
//!
//! Payload: `{"rows": n, "wait_ms": m, "wait_at": "commit" | "begin", "transactions": t,
//! "stamp": false}`. With `wait_ms`, it waits that long before committing (`wait_at =
//! "commit"`, the default: inside the open transaction) or before opening the transaction
//! (`"begin"`), to outlive its deadline or its lease. A row's `n` is its place in its
//! transaction, or with `stamp` the wall-clock millisecond its transaction began (so a
//! test can tell which transactions began after some moment). Needs `db.write=ledger` and
//! the table from `examples/migrations`.

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
    #[serde(default = "one")]
    transactions: u32,
    #[serde(default)]
    stamp: bool,
}

fn one() -> u32 {
    1
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
        let p = &ctx.payload;
        let wait = Duration::from_millis(p.wait_ms);
        for _ in 0..p.transactions {
            if p.wait_at == WaitAt::Begin {
                std::thread::sleep(wait);
            }
            // Only when asked: a clock read is a host call, and would change every
            // ledger journal the replay tests compare against.
            let began = p.stamp.then(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as i64)
            });
            let tx = db::begin()?;
            for n in 0..p.rows {
                let n = began.unwrap_or(n);
                tx.execute(
                    "INSERT INTO ledger (run_id, attempt, n) VALUES ($1, $2, $3)",
                    &[ctx.run_id.as_str().into(), ctx.attempt.into(), n.into()],
                )?;
            }
            if p.wait_at == WaitAt::Commit {
                std::thread::sleep(wait);
            }
            tx.commit()?;
            log::info(&format!("committed {} rows", p.rows));
        }
        Ok(Outcome::Done)
    }
}

jobhost_guest::export_job!(Ledger);
