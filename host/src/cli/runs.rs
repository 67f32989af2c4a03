//! `host runs list` and `host runs show`.

use super::output;
use super::{Failure, Global};
use crate::store::{RunFilter, RunStatus, Store};
use crate::units::parse_duration;
use crate::views::{self, time};
use clap::Subcommand;
use std::time::Duration;

/// Most runs one listing returns.
pub const MAX_LIMIT: i64 = 500;

#[derive(Subcommand, Debug)]
pub enum RunsCommand {
    /// The most recent runs, newest first.
    List {
        #[arg(long)]
        job: Option<String>,
        #[arg(long, value_parser = parse_status)]
        status: Option<RunStatus>,
        /// Only runs created within this long, e.g. 1h.
        #[arg(long, value_parser = parse_duration)]
        since: Option<Duration>,
        #[arg(long, default_value_t = 20)]
        limit: i64,
        #[arg(long)]
        json: bool,
    },
    /// One run with its attempts and their logs.
    Show {
        id: String,
        #[arg(long)]
        json: bool,
    },
}

fn parse_status(text: &str) -> Result<RunStatus, String> {
    RunStatus::parse(text).ok_or_else(|| {
        let all: Vec<_> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
        format!("unknown status {text:?} (one of: {})", all.join(", "))
    })
}

pub async fn runs(global: &Global, cmd: RunsCommand) -> Result<u8, Failure> {
    let store = Store::open(&global.db_url(None)).await?;
    let code = match cmd {
        RunsCommand::List {
            job,
            status,
            since,
            limit,
            json,
        } => {
            let since = match since {
                Some(d) => Some(store.now().await? - d.as_millis() as i64),
                None => None,
            };
            let runs = store
                .list_runs(&RunFilter {
                    job,
                    statuses: status.into_iter().collect(),
                    since,
                    limit: limit.clamp(1, MAX_LIMIT),
                    ..Default::default()
                })
                .await?;
            if json {
                let all: Vec<_> = runs.iter().map(views::run).collect();
                println!("{}", serde_json::Value::Array(all));
            } else if runs.is_empty() {
                println!("no runs");
            } else {
                println!(
                    "{:<36}  {:<20}  {:<9}  {:>8}  {:<18}  CREATED",
                    "RUN", "JOB", "STATUS", "ATTEMPTS", "CODE"
                );
                for r in &runs {
                    println!(
                        "{:<36}  {:<20}  {:<9}  {:>8}  {:<18}  {}",
                        r.id,
                        r.job,
                        r.status,
                        r.attempts,
                        r.last_code.as_deref().unwrap_or("-"),
                        time(r.created_at)
                    );
                }
            }
            0
        }
        RunsCommand::Show { id, json } => {
            let Some(run) = store.get_run(&id).await? else {
                return Err(Failure::usage(format!("no run with id {id:?}")));
            };
            let attempts = store.list_attempts(&id, views::ATTEMPTS_SHOWN).await?;
            let steps = store.run_steps(&id).await?;
            if json {
                println!("{}", views::run_detail(&run, &attempts, &steps));
            } else {
                output::run_result(&run, false);
                println!("  trace {}", run.trace().trace_id());
                output::progress(&run, &steps);
                for a in &attempts {
                    println!(
                        "  attempt {} (pass {}, try {}, generation {}): {}{} in {} ms, fuel {}, peak memory {}",
                        a.seq,
                        a.pass,
                        a.attempt,
                        a.generation,
                        a.status,
                        a.code
                            .as_deref()
                            .map(|c| format!(" ({c})"))
                            .unwrap_or_default(),
                        a.duration_ms.unwrap_or(0),
                        a.fuel_used.unwrap_or(0),
                        crate::units::format_size(a.peak_memory.unwrap_or(0) as u64),
                    );
                    output::log(a);
                }
            }
            0
        }
    };
    store.close().await;
    Ok(code)
}
