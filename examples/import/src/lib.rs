//! Copies `import_source` into `import_items` in bounded passes, each row exactly once
//! however often an attempt is killed, and counts them in the run's counter `imported`.
//!
//! Payload: `{"page_size": 500, "pages_per_pass": 10, "pause_ms": 0}` (those are the
//! defaults), `pause_ms` being a sleep between pages. A pass copies up to `pages_per_pass`
//! pages of `page_size` rows, in id order, from the cursor `{"after": <last id copied>}`
//! (none: from the start), and ends with `continue` from where it stopped, or `done` at
//! the first page short of `page_size`. Needs `db.read=import_source`,
//! `db.write=import_items`, `steps` and the tables from `examples/migrations`.
//!
//! Why it is exact:
//! - Page `k` of a pass is the step `page-{k}`, recorded in the transaction that inserts
//!   its rows, so the rows and "page k is done" commit together or not at all. Its result,
//!   `{"last", "count"}`, tells a retried attempt where the page ended without reading it
//!   again, and the pages after it start from there.
//! - Each page commits on its own, except the pass's last, which commits with the pass's
//!   end ([`db::Transaction::commit_pass`]): the cursor can never get ahead of, or fall
//!   behind, the rows.
//! - Counter changes commit only with the pass's end, and a failed attempt's are dropped
//!   while its committed pages stay skipped; so every page adds its count, copied now or
//!   skipped, and the counter gains exactly the pass's rows when the pass commits.

use jobhost_guest::steps::{self, PassEnd};
use jobhost_guest::{Context, Job, JobError, Outcome, Value, db, log};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The most rows a page may read: the host's bound on one result.
const MAX_PAGE: i64 = 10_000;

#[derive(Deserialize)]
#[serde(default)]
struct Payload {
    page_size: i64,
    pages_per_pass: u32,
    pause_ms: u64,
}

impl Default for Payload {
    fn default() -> Self {
        Payload {
            page_size: 500,
            pages_per_pass: 10,
            pause_ms: 0,
        }
    }
}

#[derive(Serialize, Deserialize, Default)]
struct Cursor {
    /// The last id copied; none before the first.
    after: Option<i64>,
}

/// A page's recorded result.
#[derive(Serialize, Deserialize)]
struct Page {
    /// The id the next page starts after (the previous page's `last` if this one was empty).
    last: Option<i64>,
    count: i64,
}

struct Import;

impl Job for Import {
    type Payload = Payload;

    fn run(ctx: Context<Payload>) -> Result<Outcome, JobError> {
        let p = &ctx.payload;
        if !(1..=MAX_PAGE).contains(&p.page_size) || p.pages_per_pass < 1 {
            return Err(JobError::unrecoverable(format!(
                "page_size must be 1 to {MAX_PAGE}, pages_per_pass at least 1"
            )));
        }
        let mut after = match ctx.cursor {
            Some(cursor) => serde_json::from_value::<Cursor>(cursor)?.after,
            None => None,
        };
        let (mut copied, mut skipped) = (0, 0);
        let mut k = 0;
        loop {
            let tx = db::begin()?;
            let mut ran = false;
            let page = steps::step_in(&tx, &format!("page-{k}"), |tx| {
                ran = true;
                copy_page(tx, after, p.page_size, ctx.pass)
            })?;
            if ran {
                copied += page.count;
            } else {
                skipped += page.count;
            }
            let imported = steps::counter_add("imported", page.count)?;
            after = page.last;
            let exhausted = page.count < p.page_size;
            if exhausted || k + 1 == p.pages_per_pass {
                let end = if exhausted {
                    PassEnd::Done
                } else {
                    PassEnd::resume_from(&Cursor { after })?
                };
                let outcome = tx.commit_pass(end)?;
                log::info(&format!(
                    "pass {}: {} rows ({copied} copied, {skipped} from earlier attempts), \
                     {imported} imported in all{}",
                    ctx.pass,
                    copied + skipped,
                    if exhausted { ", done" } else { "" }
                ));
                return Ok(outcome);
            }
            tx.commit()?;
            std::thread::sleep(Duration::from_millis(p.pause_ms));
            k += 1;
        }
    }
}

/// Copies the next `size` source rows after `after` inside `tx`: the rows it inserts are
/// the rows it read, in one transaction.
fn copy_page(
    tx: &db::Transaction,
    after: Option<i64>,
    size: i64,
    pass: u32,
) -> Result<Page, JobError> {
    let rows = match after {
        Some(after) => tx.query(
            "SELECT id, value FROM import_source WHERE id > $1 ORDER BY id LIMIT $2",
            &[after.into(), size.into()],
        )?,
        None => tx.query(
            "SELECT id, value FROM import_source ORDER BY id LIMIT $1",
            &[size.into()],
        )?,
    };
    let mut last = after;
    for row in &rows.rows {
        let [Value::Integer(id), value @ Value::Text(_)] = row.as_slice() else {
            return Err(JobError::unrecoverable(
                "import_source has unexpected columns",
            ));
        };
        tx.execute(
            "INSERT INTO import_items (id, value, pass) VALUES ($1, $2, $3)",
            &[(*id).into(), value.clone(), pass.into()],
        )?;
        last = Some(*id);
    }
    Ok(Page {
        last,
        count: rows.rows.len() as i64,
    })
}

jobhost_guest::export_job!(Import);
