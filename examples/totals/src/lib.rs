//! Sums the `invoices` table per customer and logs the totals, stamped with the time and
//! a random batch id (so its log differs every run: a replay must reproduce it anyway).
//!
//! The bug this example carries on purpose: an invoice whose `amount` is NULL panics at
//! `expect` — a failure that depends on one tenant's data at one moment. `host replay RUN`
//! shows the panic and its frames again from the journal alone; the `fixed` feature
//! (`tests/guests/totals-fixed`) is the rebuilt component that gets past it. Payload:
//! `{"customer": "acme"}` (optional) sums only that customer. Needs `db.read=invoices`
//! and the table from `examples/migrations`.

use jobhost_guest::{Context, Job, JobError, Outcome, db, log};
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Deserialize)]
struct Payload {
    customer: Option<String>,
}

struct Totals;

impl Job for Totals {
    type Payload = Payload;

    fn run(ctx: Context<Payload>) -> Result<Outcome, JobError> {
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default();
        let batch = random_batch();
        log::info(&format!("batch {batch:016x} started at {started}"));
        let rows = match &ctx.payload.customer {
            Some(customer) => db::query(
                "SELECT id, customer, amount FROM invoices WHERE customer = $1 ORDER BY id",
                &[customer.as_str().into()],
            )?,
            None => db::query("SELECT id, customer, amount FROM invoices ORDER BY id", &[])?,
        };
        let mut totals: BTreeMap<String, i64> = BTreeMap::new();
        for row in &rows.rows {
            let customer = row[1].as_str().unwrap_or("?").to_string();
            *totals.entry(customer).or_default() += amount(&row[2]);
        }
        for (customer, total) in &totals {
            log::info(&format!("{customer}: {total}"));
        }
        Ok(Outcome::Done)
    }
}

/// An invoice's amount.
#[cfg(not(feature = "fixed"))]
fn amount(cell: &db::Value) -> i64 {
    cell.as_i64().expect("every invoice has an amount")
}

/// An invoice's amount: one not set yet counts as nothing.
#[cfg(feature = "fixed")]
fn amount(cell: &db::Value) -> i64 {
    cell.as_i64().unwrap_or(0)
}

/// A batch id from WASI's random source: the standard library seeds a hasher's keys
/// from it.
fn random_batch() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(0);
    hasher.finish()
}

jobhost_guest::export_job!(Totals);
