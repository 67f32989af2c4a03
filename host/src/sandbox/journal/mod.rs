//! The flight recorder: every host call an attempt makes, in call order, with what it
//! answered, so the attempt can be re-executed later from the journal alone (`replay`).
//!
//! A guest's only contact with the world is its imports. While recording, each
//! capability call (and each WASI clock reading and random draw, `wasi.rs`) appends what
//! it was asked — a short, bounded summary and a digest of the full arguments — and what
//! it answered, encoded whole. While replaying, the same calls are answered from the
//! journal in order: nothing live is reached, and a call that is not the journal's next
//! stops the replay where the two diverge. The guest cannot write to the journal: only
//! the host's side of a call appends, after the call, from the host's own values.

pub mod file;
pub mod replay;
pub mod wasi;

pub use crate::rules::record::{DEFAULT_LIMIT, MAX_LIMIT, RecordPolicy, Recorder};
use crate::sandbox::refusal::Refused;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// Most characters of a call's argument summary.
pub const SUMMARY_CHARS: usize = 120;
/// What one call costs the cap beyond its name, summary, code and answer: its digest,
/// timing and JSON keys as the journal is kept.
const CALL_OVERHEAD: u64 = 112;

/// One host call as the journal keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Call {
    /// The import, `interface.function` (`db.query`, `wall-clock.now`).
    pub call: String,
    /// Its arguments, shortened for people: never compared.
    pub args: String,
    /// The first 16 hex digits of the SHA-256 of the arguments' encoding: what a replay
    /// compares.
    pub digest: String,
    /// When the call started, in microseconds from the attempt's first call.
    #[serde(default)]
    pub at: u64,
    pub micros: u64,
    /// `ok`, or the host error's code the call answered.
    pub code: String,
    /// What the call answered, encoded (`postcard`); `None` for a call cut off in flight
    /// (the attempt was stopped during it).
    #[serde(with = "file::base64_opt")]
    pub answer: Option<Vec<u8>>,
    /// What the call noted about the attempt (a lost lease, a refusal, a committed end),
    /// when it changed: a replay notes the same, so the attempt ends with the same code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noticed: Option<Noticed>,
}

/// What host calls note about an attempt that decides its failure code.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Noticed {
    pub lease_lost: bool,
    pub unavailable: bool,
    pub refused: Option<Refused>,
    pub committed: Option<CommittedEnd>,
    pub waits_for_children: bool,
    /// The timeout of the signal the pass waits for (WIT 0.1.6; absent before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waits_for_signal: Option<u64>,
}

/// How a pass ended, committed with the guest's writes (`steps`' `finish`): a call's
/// [`Noticed`] carries it, so it is defined with the journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommittedEnd {
    Done,
    Continue { cursor: String },
}

/// Why a replay stopped before the guest ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Stop {
    /// The component asked for a call other than the journal's next.
    Diverged {
        /// 1-based.
        call: usize,
        /// The journal's call there: function and arguments.
        journal: String,
        /// What the component asked.
        asked: String,
    },
    /// The component asked for more calls than the journal holds.
    End { call: usize, asked: String },
    /// The journal's call was in flight when the original attempt was stopped.
    Cut { call: usize, journal: String },
    /// The journal was truncated at its cap: nothing after this call was kept.
    Truncated { call: usize },
    /// The guest ended with calls of the journal left: the original made more.
    Left { answered: usize, more: usize },
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Diverged {
                call,
                journal,
                asked,
            } => write!(
                f,
                "diverged at call {call}: the journal has {journal}, the component asked {asked}"
            ),
            Stop::End { call, asked } => write!(
                f,
                "the journal ends before call {call}: the component asked {asked}"
            ),
            Stop::Cut { call, journal } => write!(
                f,
                "call {call} ({journal}) was in flight when the original attempt was stopped"
            ),
            Stop::Truncated { call: 1 } => f.write_str(
                "the journal was truncated at its cap before its first call: nothing was kept",
            ),
            Stop::Truncated { call } => write!(
                f,
                "the journal was truncated at its cap after call {}: nothing later was kept",
                call - 1
            ),
            Stop::Left { answered, more } => write!(
                f,
                "the replay ended after call {answered}; the original made {more} more call{}",
                if *more == 1 { "" } else { "s" }
            ),
        }
    }
}

/// The recorder or the player of one attempt, shared by the capability impls and the
/// WASI clocks and generators (which live in the WASI context). `off` holds nothing.
#[derive(Clone, Default)]
pub struct Journal {
    tape: Option<Arc<Mutex<Tape>>>,
}

enum Tape {
    Recording(Recording),
    Replaying(Replaying),
}

struct Recording {
    started: Instant,
    calls: Vec<Call>,
    bytes: u64,
    limit: u64,
    truncated: bool,
}

struct Replaying {
    calls: Vec<Call>,
    /// Whether the journal was cut at its cap (its last call is not the attempt's last).
    truncated: bool,
    next: usize,
    stop: Option<Stop>,
    /// Called once, as the replay stops (`Journal::on_stop`).
    on_stop: Option<Box<dyn FnOnce() + Send>>,
}

/// What a recorded call's journal holds once the attempt ended.
#[derive(Debug, Default)]
pub struct Recorded {
    pub calls: Vec<Call>,
    pub truncated: bool,
}

/// How a host call proceeds: live and unrecorded, live and recorded, or answered.
pub enum Begun {
    Off,
    Record(Pending),
    Replay(Answer),
}

/// A recorded call in flight: its place in the journal and when it started.
pub struct Pending {
    index: Option<usize>,
    started: Instant,
}

/// A replayed call's answer, or `None` once the replay stopped (the caller gives the
/// guest a placeholder; the attempt is stopped at its next tick).
pub struct Answer {
    pub answer: Option<(Vec<u8>, Option<Noticed>)>,
}

impl Journal {
    /// Records nothing.
    pub fn off() -> Journal {
        Journal { tape: None }
    }

    /// Records up to `limit` bytes; past it the journal is kept truncated.
    pub fn recording(limit: u64) -> Journal {
        Journal {
            tape: Some(Arc::new(Mutex::new(Tape::Recording(Recording {
                started: Instant::now(),
                calls: Vec::new(),
                bytes: 0,
                limit,
                truncated: false,
            })))),
        }
    }

    /// Answers calls from `calls`, in order.
    pub fn replaying(calls: Vec<Call>, truncated: bool) -> Journal {
        Journal {
            tape: Some(Arc::new(Mutex::new(Tape::Replaying(Replaying {
                calls,
                truncated,
                next: 0,
                stop: None,
                on_stop: None,
            })))),
        }
    }

    /// Calls `f` once, when the replay stops: from then on the guest is answered
    /// placeholders until its next tick stops it, and what it does meanwhile is not the
    /// attempt's (the replay closes its log here).
    pub fn on_stop(&self, f: impl FnOnce() + Send + 'static) {
        if let Some(mut tape) = self.lock()
            && let Tape::Replaying(replaying) = &mut *tape
        {
            replaying.on_stop = Some(Box::new(f));
        }
    }

    fn lock(&self) -> Option<MutexGuard<'_, Tape>> {
        self.tape
            .as_ref()
            .map(|tape| tape.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    /// Starts a call: `args` is encoded for its digest and shortened for its summary only
    /// when the journal is on.
    pub fn begin<A: Serialize + std::fmt::Debug + ?Sized>(&self, call: &str, args: &A) -> Begun {
        let Some(mut tape) = self.lock() else {
            return Begun::Off;
        };
        match &mut *tape {
            // Past its cap a journal keeps nothing more: nothing more is encoded.
            Tape::Recording(recording) if recording.truncated => Begun::Record(Pending {
                index: None,
                started: Instant::now(),
            }),
            Tape::Recording(recording) => {
                let at = recording.started.elapsed().as_micros() as u64;
                let index = recording.push(Call {
                    call: call.to_string(),
                    args: summary(args),
                    digest: digest(args),
                    at,
                    micros: 0,
                    // Set when the call ends; one that never does is cut (`take`).
                    code: String::new(),
                    answer: None,
                    noticed: None,
                });
                Begun::Record(Pending {
                    index,
                    started: Instant::now(),
                })
            }
            Tape::Replaying(replaying) => Begun::Replay(Answer {
                answer: replaying.answer(call, args),
            }),
        }
    }

    /// Ends a recorded call with what it answered (`code`: `ok` or the error's code).
    pub fn end<R: Serialize>(
        &self,
        pending: Pending,
        result: &R,
        code: Cow<'static, str>,
        noticed: Option<Noticed>,
    ) {
        let Some(index) = pending.index else {
            return;
        };
        let Some(mut tape) = self.lock() else {
            return;
        };
        let Tape::Recording(recording) = &mut *tape else {
            return;
        };
        let answer = postcard::to_stdvec(result).expect("host values encode");
        recording.answer(
            index,
            answer,
            code,
            pending.started.elapsed().as_micros() as u64,
            noticed,
        );
    }

    /// Whether this journal is replaying and its next call is `call`: how a generator
    /// tells a journal that kept each of its draws from one that kept its seed.
    pub fn replays_next(&self, call: &str) -> bool {
        let Some(tape) = self.lock() else {
            return false;
        };
        match &*tape {
            Tape::Replaying(replaying) => replaying
                .calls
                .get(replaying.next)
                .is_some_and(|next| next.call == call),
            Tape::Recording(_) => false,
        }
    }

    /// A whole call at once, for the WASI clocks and generators: live when recording
    /// (`live` is called and its value kept), answered when replaying (`None` once the
    /// replay stopped), live and unrecorded when off.
    pub fn value<A, R>(&self, call: &str, args: &A, live: impl FnOnce() -> R) -> Option<R>
    where
        A: Serialize + std::fmt::Debug + ?Sized,
        R: Serialize + DeserializeOwned,
    {
        match self.begin(call, args) {
            Begun::Off => Some(live()),
            Begun::Record(pending) => {
                let value = live();
                self.end(pending, &value, Cow::Borrowed("ok"), None);
                Some(value)
            }
            Begun::Replay(Answer { answer }) => {
                answer.and_then(|(bytes, _)| self.decode(call, &bytes))
            }
        }
    }

    /// A replayed answer, decoded; one that does not decode (a journal edited by hand, or
    /// of another host version) stops the replay as a divergence.
    pub fn decode<R: DeserializeOwned>(&self, call: &str, bytes: &[u8]) -> Option<R> {
        match postcard::from_bytes(bytes) {
            Ok(value) => Some(value),
            Err(_) => {
                if let Some(mut tape) = self.lock()
                    && let Tape::Replaying(replaying) = &mut *tape
                {
                    let at = replaying.next;
                    replaying.halt(Stop::Diverged {
                        call: at,
                        journal: format!("{call} with an answer this host cannot read"),
                        asked: call.to_string(),
                    });
                }
                None
            }
        }
    }

    /// Why the replay stopped, if it did.
    pub fn stopped(&self) -> Option<Stop> {
        match self.lock().as_deref() {
            Some(Tape::Replaying(replaying)) => replaying.stop.clone(),
            _ => None,
        }
    }

    /// How many of the journal's calls a replay answered, and how many it holds.
    pub fn progress(&self) -> (usize, usize) {
        match self.lock().as_deref() {
            Some(Tape::Replaying(replaying)) => (replaying.next, replaying.calls.len()),
            _ => (0, 0),
        }
    }

    /// The calls recorded so far, taken: for the attempt's end.
    pub fn take(&self) -> Recorded {
        match self.lock().as_deref_mut() {
            Some(Tape::Recording(recording)) => {
                for call in recording.calls.iter_mut().filter(|c| c.answer.is_none()) {
                    call.code = "cut".into();
                }
                Recorded {
                    calls: std::mem::take(&mut recording.calls),
                    truncated: recording.truncated,
                }
            }
            _ => Recorded::default(),
        }
    }
}

impl Recording {
    /// Appends a call, or marks the journal truncated when it would pass the cap.
    fn push(&mut self, call: Call) -> Option<usize> {
        if self.truncated {
            return None;
        }
        let cost = call_cost(&call);
        if self.bytes + cost > self.limit {
            self.truncated = true;
            return None;
        }
        self.bytes += cost;
        self.calls.push(call);
        Some(self.calls.len() - 1)
    }

    fn answer(
        &mut self,
        index: usize,
        answer: Vec<u8>,
        code: Cow<'static, str>,
        micros: u64,
        noticed: Option<Noticed>,
    ) {
        let cost = answer_cost(&answer, &code, noticed.as_ref());
        if self.truncated || self.bytes + cost > self.limit {
            // The call stays, cut: a replay stops at it, as at the journal's end.
            self.truncated = true;
            self.calls.truncate(index + 1);
            return;
        }
        self.bytes += cost;
        let call = &mut self.calls[index];
        call.answer = Some(answer);
        call.code = code.into_owned();
        call.micros = micros;
        call.noticed = noticed;
    }
}

impl Replaying {
    /// Stops the replay, for the first reason only.
    fn halt(&mut self, stop: Stop) {
        if self.stop.is_some() {
            return;
        }
        self.stop = Some(stop);
        if let Some(on_stop) = self.on_stop.take() {
            on_stop();
        }
    }

    fn answer<A: Serialize + std::fmt::Debug + ?Sized>(
        &mut self,
        call: &str,
        args: &A,
    ) -> Option<(Vec<u8>, Option<Noticed>)> {
        if self.stop.is_some() {
            return None;
        }
        let number = self.next + 1;
        let asked = || format!("{call}({})", summary(args));
        let Some(recorded) = self.calls.get(self.next) else {
            self.halt(if self.truncated {
                Stop::Truncated { call: number }
            } else {
                Stop::End {
                    call: number,
                    asked: asked(),
                }
            });
            return None;
        };
        if recorded.call != call || recorded.digest != digest(args) {
            self.halt(Stop::Diverged {
                call: number,
                journal: format!("{}({})", recorded.call, recorded.args),
                asked: asked(),
            });
            return None;
        }
        let Some(answer) = &recorded.answer else {
            self.halt(if self.truncated && number == self.calls.len() {
                Stop::Truncated { call: number }
            } else {
                Stop::Cut {
                    call: number,
                    journal: format!("{}({})", recorded.call, recorded.args),
                }
            });
            return None;
        };
        self.next += 1;
        Some((answer.clone(), recorded.noticed.clone()))
    }
}

/// What a call costs the cap as it is kept: the journal's cap bounds the kept text, so a
/// summary counts twice (JSON may escape every character of it) and an answer as its
/// base64.
fn call_cost(call: &Call) -> u64 {
    (call.call.len() + 2 * call.args.len()) as u64 + CALL_OVERHEAD
}

/// What a call's answer adds to its cost: the answer as base64, its code, and what it
/// noted (a refusal's reason, escaped).
fn answer_cost(answer: &[u8], code: &str, noticed: Option<&Noticed>) -> u64 {
    let base64 = answer.len().div_ceil(3) * 4;
    let noticed = noticed.map_or(0, |n| {
        64 + n.refused.as_ref().map_or(0, |r| 2 * r.reason.len() + 32)
            + match &n.committed {
                Some(CommittedEnd::Continue { cursor }) => 2 * cursor.len() + 32,
                _ => 16,
            }
    });
    (base64 + 2 * code.len() + noticed) as u64
}

/// A journal's calls for people (the page's timeline): function, short arguments,
/// duration and result code, in order, never what a call answered; at most `max` calls,
/// the rest counted.
pub fn timeline(journal: &file::JournalFile, recorded_at: i64, max: usize) -> serde_json::Value {
    let calls: Vec<serde_json::Value> = journal
        .calls
        .iter()
        .take(max)
        .enumerate()
        .map(|(n, call)| {
            serde_json::json!({
                "n": n + 1,
                "call": call.call,
                "args": call.args,
                "at": call.at,
                "micros": call.micros,
                "code": call.code,
            })
        })
        .collect();
    serde_json::json!({
        "run_id": journal.run_id,
        "attempt": journal.seq,
        "job": journal.job,
        "component": journal.component,
        "recorded_at": recorded_at,
        "replayable": journal.replayable(),
        "total": journal.calls.len(),
        "calls": calls,
        "ending": journal.ending,
    })
}

/// The first 16 hex digits of the SHA-256 of the arguments' encoding.
pub fn digest<A: Serialize + ?Sized>(args: &A) -> String {
    let bytes = postcard::to_stdvec(args).expect("host values encode");
    hex::encode(&Sha256::digest(&bytes)[..8])
}

/// The arguments for people: their debug form, at most [`SUMMARY_CHARS`] characters,
/// formatting stopped there (a 1 MiB blob is not formatted whole), control characters
/// escaped.
pub fn summary<A: std::fmt::Debug + ?Sized>(args: &A) -> String {
    use std::fmt::Write as _;
    /// The text so far and its length in characters.
    struct Bounded(String, usize);
    impl std::fmt::Write for Bounded {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            for c in s.chars() {
                if self.1 >= SUMMARY_CHARS {
                    self.0.push('…');
                    return Err(std::fmt::Error);
                }
                if c.is_control() {
                    let escaped = c.escape_default();
                    self.1 += escaped.len();
                    self.0.extend(escaped);
                } else {
                    self.1 += 1;
                    self.0.push(c);
                }
            }
            Ok(())
        }
    }
    let mut out = Bounded(String::with_capacity(SUMMARY_CHARS + 8), 0);
    let _ = write!(out, "{args:?}");
    out.0
}

/// What a replayed call gives the guest once the replay stopped: the attempt is stopped
/// at its next tick, so only its type matters.
pub trait Placeholder {
    fn placeholder() -> Self;
}

impl Placeholder for () {
    fn placeholder() -> Self {}
}

/// Wraps a capability call: recorded, replayed or live. `$state` is the attempt's shared
/// piece (`Attempt`: the journal, and the signals whose change is recorded with the
/// answer); `$args` are references to what the call was given (taken before `$live` moves
/// them); `$live` is the call's body, an async block whose value the call returns.
#[macro_export]
#[doc(hidden)]
macro_rules! journaled {
    ($state:expr, $call:literal, $args:expr, $live:expr) => {{
        // `begin`'s answer borrows nothing: the live call below may take `$state` again
        // and the journal is reached through it after the call, not cloned for each.
        let begun = $state.journal.begin($call, &$args);
        match begun {
            $crate::sandbox::journal::Begun::Off => $live.await,
            $crate::sandbox::journal::Begun::Record(pending) => {
                let before = $state.noticed_mark();
                let result = $live.await;
                let noticed = $state.noticed_since(before);
                $state.journal.end(
                    pending,
                    &result,
                    $crate::sandbox::journal::CodeOf::code_of(&result),
                    noticed,
                );
                result
            }
            $crate::sandbox::journal::Begun::Replay(answer) => $state.replayed($call, answer),
        }
    }};
    // A call that makes a resource: the journal keeps whether it did (or its error);
    // a replay makes an empty one (`None` behind the handle).
    ($state:expr, $call:literal, $args:expr, resource $live:expr) => {{
        let begun = $state.journal.begin($call, &$args);
        match begun {
            $crate::sandbox::journal::Begun::Off => $live.await.map(Some),
            $crate::sandbox::journal::Begun::Record(pending) => {
                let before = $state.noticed_mark();
                let result = $live.await;
                let noticed = $state.noticed_since(before);
                let made = result.as_ref().map(|_| ()).map_err(Clone::clone);
                $state.journal.end(
                    pending,
                    &made,
                    $crate::sandbox::journal::CodeOf::code_of(&made),
                    noticed,
                );
                result.map(Some)
            }
            $crate::sandbox::journal::Begun::Replay(answer) => $state
                .replayed::<Result<(), _>>($call, answer)
                .map(|()| None),
        }
    }};
}

/// The code a call's answer is journaled with: `ok`, or the host error's code and its
/// fixed reason.
pub trait CodeOf {
    fn code_of(&self) -> Cow<'static, str>;
}

impl CodeOf for () {
    fn code_of(&self) -> Cow<'static, str> {
        Cow::Borrowed("ok")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(journal: &Journal, call: &str, args: &(u32, &str), answer: i64) {
        let Begun::Record(pending) = journal.begin(call, args) else {
            panic!("recording");
        };
        journal.end(pending, &answer, Cow::Borrowed("ok"), None);
    }

    #[test]
    fn a_replay_answers_in_order_and_stops_where_the_calls_diverge() {
        let journal = Journal::recording(DEFAULT_LIMIT);
        recorded(&journal, "db.query", &(1, "select 1"), 10);
        recorded(&journal, "db.query", &(2, "select 2"), 20);
        let recorded = journal.take();
        assert_eq!(recorded.calls.len(), 2);
        assert!(!recorded.truncated);

        let replay = Journal::replaying(recorded.calls.clone(), false);
        assert_eq!(
            replay.value("db.query", &(1u32, "select 1"), || -> i64 {
                panic!("live")
            }),
            Some(10)
        );
        assert_eq!(
            replay.value("db.query", &(2u32, "select 3"), || -> i64 {
                panic!("live")
            }),
            None
        );
        let Some(Stop::Diverged { call, journal, .. }) = replay.stopped() else {
            panic!("diverged");
        };
        assert_eq!(call, 2);
        assert!(journal.contains("select 2"), "{journal}");
        // Once stopped, nothing more is answered, even the journal's own next call.
        assert_eq!(
            replay.value("db.query", &(2u32, "select 2"), || -> i64 {
                panic!("live")
            }),
            None
        );

        let short = Journal::replaying(recorded.calls, false);
        for (n, answer) in [(1u32, 10), (2, 20)] {
            let sql = format!("select {n}");
            let got = short.value("db.query", &(n, sql.as_str()), || -> i64 { panic!() });
            assert_eq!(got, Some(answer));
        }
        assert_eq!(short.value("db.query", &(3u32, "x"), || 0i64), None);
        assert!(matches!(short.stopped(), Some(Stop::End { call: 3, .. })));
    }

    #[test]
    fn a_journal_stops_growing_at_its_cap_and_says_it_was_truncated() {
        let journal = Journal::recording(400);
        for n in 0..100 {
            recorded(&journal, "wall-clock.now", &(n, "x"), i64::from(n));
        }
        let recorded = journal.take();
        assert!(recorded.truncated);
        // The cap bounds the journal as it is kept.
        let kept = serde_json::to_string(&recorded.calls).unwrap().len();
        assert!(kept <= 400, "{kept} bytes kept");
        assert!(!recorded.calls.is_empty() && recorded.calls.len() < 100);

        let replay = Journal::replaying(recorded.calls.clone(), true);
        for n in 0..recorded.calls.len() as u32 {
            assert!(replay.value("wall-clock.now", &(n, "x"), || 0i64).is_some());
        }
        let next = recorded.calls.len() as u32;
        assert_eq!(replay.value("wall-clock.now", &(next, "x"), || 0i64), None);
        assert!(matches!(replay.stopped(), Some(Stop::Truncated { .. })));
    }

    #[test]
    fn one_answer_past_the_cap_is_kept_as_a_call_cut_off() {
        let journal = Journal::recording(300);
        let Begun::Record(pending) = journal.begin("files.read", &(0u32, "a")) else {
            panic!("recording");
        };
        journal.end(pending, &vec![7u8; 10_000], Cow::Borrowed("ok"), None);
        let recorded = journal.take();
        assert!(recorded.truncated);
        assert_eq!(recorded.calls.len(), 1);
        assert_eq!(recorded.calls[0].answer, None);
    }

    #[test]
    fn a_summary_is_bounded_and_escapes_control_characters() {
        let blob = vec![0u8; 1 << 20];
        let text = summary(&("\u{1b}[2J\0", &blob));
        assert!(text.chars().count() <= SUMMARY_CHARS + 1, "{text}");
        assert!(!text.chars().any(|c| c.is_control()), "{text:?}");
    }

    #[test]
    fn an_off_journal_calls_live_and_keeps_nothing() {
        let journal = Journal::off();
        assert_eq!(journal.value("random.bytes", &4u64, || 9u8), Some(9));
        assert!(journal.take().calls.is_empty());
    }
}
