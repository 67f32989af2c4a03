//! `host runs tail ID`: follows a run until it ends — each change of its status, the log
//! lines of its attempts as they are written (the live log any host of the fleet writes,
//! `runs::runner::live`), each attempt's ending — by reading the database every [`LOOK_EVERY`].
//! Guest text is bounded per line and escaped for the terminal (`rules::guest_text`).

use super::failure::Failure;
use super::output;
use crate::rules::guest_text::{for_storage_cut, for_terminal};
use crate::rules::units::{readable_count, readable_ms};
use crate::service::views;
use crate::store::{AttemptRecord, RunRecord, RunStatus, Store};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// How often the run is read again.
pub const LOOK_EVERY: Duration = Duration::from_millis(250);
/// The most of one log line shown, in bytes: the rest is elided, said with its size.
pub const LINE_SHOWN: usize = 2048;
/// The attempts read each look, the last ones: more than end between two looks.
const ATTEMPTS_READ: i64 = 5;

/// Follows run `id` until it ends; the exit code is the ending's (`output::exit_code`).
pub async fn tail(store: &Store, id: &str, as_json: bool) -> Result<u8, Failure> {
    let mut follow = Follow {
        as_json,
        ..Follow::default()
    };
    loop {
        let Some(run) = store.get_run(id).await? else {
            return Err(Failure::usage(format!("no run with id {id:?}")));
        };
        let attempts = store.list_attempts(id, ATTEMPTS_READ).await?;
        let live = store.live_log(id).await?;
        follow.look(
            &run,
            &attempts,
            &views::live_attempt(&run, &attempts, live.as_ref()),
        );
        if run.status().is_some_and(RunStatus::is_terminal) {
            follow.end(&run);
            return Ok(output::exit_code(&run));
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

/// The line that says which attempt a running run is in, and for how long so far.
pub fn live_header(live: &Value) -> String {
    let running = match live["running_ms"].as_i64() {
        Some(ms) => format!(" for {}", readable_ms(ms.max(0) as u64)),
        None => String::new(),
    };
    let host = match live["host"].as_str() {
        Some(host) => format!(" on {host}"),
        None => String::new(),
    };
    let fuel = match live["fuel_used"].as_u64() {
        Some(fuel) => format!(", fuel so far {}", readable_count(fuel)),
        None => String::new(),
    };
    format!(
        "attempt {} (pass {}, try {}, generation {}): running{host}{running}{fuel}",
        live["seq"], live["pass"], live["attempt"], live["generation"]
    )
}

/// What was shown of the run so far.
#[derive(Default)]
struct Follow {
    as_json: bool,
    looked: bool,
    /// The status last shown, with the attempt a running run was in.
    status: Option<(String, i64)>,
    /// Bytes of each attempt's log shown.
    shown: BTreeMap<i64, usize>,
    /// The attempts whose ending was shown.
    ended: BTreeSet<i64>,
}

impl Follow {
    fn look(&mut self, run: &RunRecord, attempts: &[AttemptRecord], live: &Value) {
        let first = !self.looked;
        self.looked = true;
        let newest = attempts.last().map(|a| a.seq);
        for a in attempts {
            if self.ended.contains(&a.seq) {
                continue;
            }
            // At the first look, only the current attempt's log: earlier ones are ended.
            if !first || (live.is_null() && Some(a.seq) == newest) {
                self.lines(a.seq, &a.log, true);
            }
            self.attempt_ended(a);
        }
        // An ending is shown by `end`.
        let ended = run.status().is_some_and(RunStatus::is_terminal);
        let shown = (run.shown_status().to_string(), run.attempts);
        if !ended && self.status.as_ref() != Some(&shown) {
            self.status_changed(run, live);
            self.status = Some(shown);
        }
        if let Some(seq) = live["seq"].as_i64() {
            self.lines(seq, live["log"].as_str().unwrap_or_default(), false);
        }
    }

    fn status_changed(&self, run: &RunRecord, live: &Value) {
        if self.as_json {
            let mut attempt = live.clone();
            if let Some(fields) = attempt.as_object_mut() {
                fields.remove("log");
            }
            let event =
                json!({"event": "status", "status": run.shown_status(), "attempt": attempt});
            println!("{event}");
        } else if live.is_null() {
            let next = match (run.shown_status(), &run.next_attempt_at) {
                ("queued", at) => format!(", next attempt at {}", views::time(*at)),
                _ => String::new(),
            };
            println!("== {}{next}", run.shown_status());
        } else {
            println!("== {}", live_header(live));
        }
    }

    /// Shows the lines of attempt `seq`'s log past those shown: `text` is the whole log
    /// so far (each read extends the last); `last` if it will not grow (its final line
    /// may then have no newline).
    fn lines(&mut self, seq: i64, text: &str, last: bool) {
        let from = self.shown.get(&seq).copied().unwrap_or(0);
        let Some(new) = text.get(from..) else {
            return;
        };
        let complete = if last {
            new.len()
        } else {
            new.rfind('\n').map_or(0, |i| i + 1)
        };
        for line in new[..complete].lines() {
            let (kept, cut) = for_storage_cut(line, LINE_SHOWN);
            let more = line.len() - kept.len();
            if self.as_json {
                let event = json!({"event": "log", "seq": seq, "line": kept, "cut_bytes": more});
                println!("{event}");
            } else if cut {
                println!("{} … ({more} bytes more)", for_terminal(&kept));
            } else {
                println!("{}", for_terminal(&kept));
            }
        }
        self.shown.insert(seq, from + complete);
    }

    fn attempt_ended(&mut self, a: &AttemptRecord) {
        self.ended.insert(a.seq);
        if self.as_json {
            let mut attempt = views::attempt(a);
            if let Some(fields) = attempt.as_object_mut() {
                fields.remove("log");
            }
            println!("{}", json!({"event": "attempt", "attempt": attempt}));
            return;
        }
        if a.log_truncated != 0 && self.shown.contains_key(&a.seq) {
            println!("(log truncated)");
        }
        println!(
            "== attempt {} (pass {}, try {}): {}{} in {}",
            a.seq,
            a.pass,
            a.attempt,
            a.status,
            a.code
                .as_deref()
                .map(|c| format!(" ({c})"))
                .unwrap_or_default(),
            readable_ms(a.duration_ms.unwrap_or(0).max(0) as u64),
        );
    }

    fn end(&self, run: &RunRecord) {
        if self.as_json {
            let event =
                json!({"event": "end", "run": views::run(run), "exit": output::exit_code(run)});
            println!("{event}");
        } else {
            output::run_result(run, false);
        }
    }
}
