//! A long run's progress on the terminal, pass by pass: its pass, counters, cursor and
//! time so far. On a terminal one line is rewritten in place; otherwise each pass is a
//! plain line; with `--json`, nothing (stdout is for the result). Written to stderr.
//! Counters and cursor come from the guest: made safe for a terminal and shortened.

use crate::rules::guest_text::for_terminal;
use crate::store::RunRecord;
use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::Instant;

/// Longest progress line, in characters.
const WIDTH: usize = 120;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Live,
    Lines,
    Off,
}

pub struct Progress {
    mode: Mode,
    started: Instant,
    /// A live line is on screen and must be ended before anything else is printed.
    open: Mutex<bool>,
}

impl Progress {
    pub fn new(json: bool) -> Progress {
        let mode = if json {
            Mode::Off
        } else if std::io::stderr().is_terminal() {
            Mode::Live
        } else {
            Mode::Lines
        };
        Progress {
            mode,
            started: Instant::now(),
            open: Mutex::new(false),
        }
    }

    /// Shows `run` as it stands after a pass.
    pub fn pass(&self, run: &RunRecord) {
        if self.mode == Mode::Off {
            return;
        }
        let line = describe(
            &run.job,
            run.pass,
            run.failures,
            &run.counters,
            run.cursor.as_deref(),
            self.started.elapsed().as_secs_f64(),
        );
        let mut stderr = std::io::stderr().lock();
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let _ = match self.mode {
            Mode::Live => {
                *open = true;
                write!(stderr, "\r\x1b[2K{line}")
            }
            _ => writeln!(stderr, "{line}"),
        };
        let _ = stderr.flush();
    }

    /// Ends a live line, before the result is printed.
    pub fn finish(&self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if *open {
            eprintln!();
            *open = false;
        }
    }
}

fn describe(
    job: &str,
    pass: i64,
    failures: i64,
    counters: &str,
    cursor: Option<&str>,
    elapsed: f64,
) -> String {
    let mut line = format!("{job} pass {pass}");
    if failures > 0 {
        line.push_str(&format!(" (retry {failures})"));
    }
    let counters = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(counters)
        .unwrap_or_default();
    if !counters.is_empty() {
        let shown: Vec<String> = counters.iter().map(|(k, v)| format!("{k}={v}")).collect();
        line.push_str(&format!(" · {}", shown.join(" ")));
    }
    if let Some(cursor) = cursor {
        line.push_str(&format!(" · cursor {cursor}"));
    }
    let elapsed = format!(" · {elapsed:.1} s");
    let safe = for_terminal(&line);
    let room = WIDTH.saturating_sub(elapsed.len());
    let mut shown: String = safe.chars().take(room).collect();
    if safe.chars().count() > room {
        shown.pop();
        shown.push('…');
    }
    shown + &elapsed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_is_one_bounded_line_safe_for_a_terminal() {
        let line = describe(
            "import",
            3,
            0,
            r#"{"rows":120}"#,
            Some(r#"{"page":4}"#),
            2.04,
        );
        assert_eq!(
            line,
            "import pass 3 · rows=120 · cursor {\"page\":4} · 2.0 s"
        );
        let cursor = format!("\"\x1b[2J{}\"", "x".repeat(500));
        let hostile = describe("import", 3, 1, "{}", Some(&cursor), 1.0);
        assert!(!hostile.contains('\x1b'), "{hostile:?}");
        assert!(hostile.chars().count() <= WIDTH, "{}", hostile.len());
        assert!(hostile.ends_with("… · 1.0 s"), "{hostile}");
    }
}
