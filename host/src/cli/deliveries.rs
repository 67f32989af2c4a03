//! `host deliveries`: the delivered endings (newest first, by run or by state), one with
//! its attempts, and the retry of one given up.

use super::failure::Failure;
use super::global::Global;
use crate::rules::guest_text::for_terminal;
use crate::service::views::{self, time};
use crate::store::{DeliveryFilter, DeliveryRecord, DeliveryState, Store};
use clap::Subcommand;

/// Attempts `host deliveries show` prints, the newest.
const ATTEMPTS_SHOWN: i64 = 50;

#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct DeliveriesArgs {
    #[command(subcommand)]
    action: Option<DeliveriesAction>,
    /// Only the deliveries of this run.
    #[arg(long)]
    run: Option<String>,
    /// Only those in this state: pending, delivered or failed (given up).
    #[arg(long, value_parser = parse_state)]
    status: Option<DeliveryState>,
    /// How many, newest first (at most 500).
    #[arg(long, default_value_t = views::DEFAULT_PAGE)]
    limit: i64,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand, Debug)]
pub enum DeliveriesAction {
    /// One delivery with its attempts.
    Show {
        id: i64,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Send a delivery that was given up (failed) again, with a new retry window.
    Retry {
        id: i64,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

impl DeliveriesArgs {
    /// The delivery this command sends again, if it is a retry: the one change it makes.
    pub fn retried(&self) -> Option<i64> {
        match self.action {
            Some(DeliveriesAction::Retry { id, .. }) => Some(id),
            _ => None,
        }
    }
}

fn parse_state(text: &str) -> Result<DeliveryState, String> {
    DeliveryState::parse(text)
        .ok_or_else(|| "use pending, delivered or failed (given up)".to_string())
}

pub async fn deliveries(global: &Global, args: DeliveriesArgs) -> Result<u8, Failure> {
    let store = Store::open(&global.db_url(None)).await?;
    let code = match args.action {
        None => {
            let found = store
                .list_deliveries(&DeliveryFilter {
                    run_id: args.run.as_deref(),
                    state: args.status,
                    tenant: None,
                    before: None,
                    limit: views::page_size(Some(args.limit)),
                })
                .await?;
            if args.json {
                let all: Vec<_> = found.iter().map(views::delivery).collect();
                println!("{}", serde_json::Value::Array(all));
            } else if found.is_empty() {
                println!("no deliveries");
            } else {
                for d in &found {
                    println!("{}", line(d));
                }
            }
            0
        }
        Some(DeliveriesAction::Show { id, json }) => {
            let Some(d) = store.get_delivery(id).await? else {
                store.close().await;
                return Err(Failure::usage(format!("no delivery {id}")));
            };
            let attempts = store.delivery_attempts(id, ATTEMPTS_SHOWN).await?;
            if json {
                let mut view = views::delivery(&d);
                view["attempt_records"] = attempts.iter().map(views::delivery_attempt).collect();
                println!("{view}");
            } else {
                println!("{}", line(&d));
                for a in &attempts {
                    let answer = match a.status_code {
                        Some(code) => format!("HTTP {code}"),
                        None => "no answer".to_string(),
                    };
                    let error = a.error.as_deref().map(|e| format!(": {}", for_terminal(e)));
                    println!(
                        "  {} {answer} in {} ms from {}{}",
                        time(a.at),
                        a.duration_ms,
                        a.host,
                        error.unwrap_or_default()
                    );
                }
            }
            0
        }
        Some(DeliveriesAction::Retry { id, json }) => match store.retry_delivery(id).await? {
            Some(d) if json => {
                println!("{}", views::delivery(&d));
                0
            }
            Some(d) => {
                println!("delivery {} to {} is pending again", d.id, d.webhook);
                0
            }
            None => {
                let state = store.get_delivery(id).await?.map(|d| d.state);
                store.close().await;
                return Err(Failure::usage(match state {
                    None => format!("no delivery {id}"),
                    Some(state) => format!(
                        "delivery {id} is {state}: only a delivery given up (failed) is retried"
                    ),
                }));
            }
        },
    };
    store.close().await;
    Ok(code)
}

/// One delivery on a line: id, state, run, ending, webhook, tries and the last answer.
pub(super) fn line(d: &DeliveryRecord) -> String {
    let last = match (&d.last_status, &d.last_error) {
        (_, Some(error)) => format!("  last: {}", for_terminal(error)),
        (Some(code), None) => format!("  last: HTTP {code}"),
        (None, None) => String::new(),
    };
    let when = match DeliveryState::parse(&d.state) {
        Some(DeliveryState::Pending) => format!(" next {}", time(d.next_try_at)),
        Some(DeliveryState::Delivered) => d
            .delivered_at
            .map(|t| format!(" at {}", time(t)))
            .unwrap_or_default(),
        _ => String::new(),
    };
    format!(
        "{:>6}  {:<9} run {} {} → {}  {} {}{when}{last}",
        d.id,
        d.state,
        d.run_id,
        d.ending,
        d.webhook,
        d.attempts,
        if d.attempts == 1 { "try" } else { "tries" },
    )
}
