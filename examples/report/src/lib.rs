//! A tenant's report, using all three capabilities: reads the run's ledger rows (`db`),
//! writes them as a CSV object into a collection (`files`), and tells a service it is
//! ready (`links`) — each effect fenced by the attempt's lease.
//!
//! Payload: `{"collection": "reports", "name": "ledger.csv", "notify": "hooks"}` (`notify`
//! optional). Needs `db.read=ledger`, `files.write=<collection>` and, to notify,
//! `links=<mount>`.

use jobhost_guest::{Context, Job, JobError, Outcome, db, files, links, log};
use serde::Deserialize;

#[derive(Deserialize)]
struct Payload {
    #[serde(default = "reports")]
    collection: String,
    #[serde(default = "csv")]
    name: String,
    notify: Option<String>,
}

fn reports() -> String {
    "reports".into()
}

fn csv() -> String {
    "ledger.csv".into()
}

struct Report;

impl Job for Report {
    type Payload = Payload;

    fn run(ctx: Context<Payload>) -> Result<Outcome, JobError> {
        let rows = db::query(
            "SELECT run_id, attempt, n FROM ledger ORDER BY run_id, n",
            &[],
        )?;
        let mut csv = String::from("run_id,attempt,n\n");
        for row in &rows.rows {
            let text = |v: &db::Value| match v {
                db::Value::Integer(i) => i.to_string(),
                db::Value::Text(t) => t.replace([',', '\n'], " "),
                _ => String::new(),
            };
            let line: Vec<String> = row.iter().map(text).collect();
            csv.push_str(&line.join(","));
            csv.push('\n');
        }
        let object = files::put(&ctx.payload.collection, &ctx.payload.name, csv.as_bytes())?;
        log::info(&format!(
            "wrote {} ({} rows, {} bytes, sha256 {})",
            object.name,
            rows.rows.len(),
            object.size,
            object.digest
        ));
        if let Some(mount) = &ctx.payload.notify {
            let body = serde_json::json!({
                "report": object.name,
                "digest": object.digest,
                "tenant": ctx.tenant,
            });
            let response = links::call(mount, &links::json("POST", "reports", "notify", &body)?)?;
            if !response.is_success() {
                return Err(JobError::failed(format!(
                    "notify answered {}",
                    response.status
                )));
            }
        }
        Ok(Outcome::Done)
    }
}

jobhost_guest::export_job!(Report);
