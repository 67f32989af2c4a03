//! Resumable passes: memoised steps, counters, and a pass's end committed with its writes.
//!
//! A pass whose attempt fails (an error, its deadline, its host dying) runs again from the
//! top. A *step* names a unit of work inside the pass; once its result is recorded, a later
//! attempt of the same pass that reaches the same name gets the result back and does not
//! do the work again:
//!
//! - [`step`] records the result in a fenced transaction of its own, after the work: for
//!   work outside the database, such as a [`links`](crate::links) call. A crash between
//!   the work and the record repeats the work, so such effects are at least once; pass the
//!   step's name as the call's `step` and the service sees the same `Idempotency-Key`.
//! - [`step_in`] records it inside a database transaction: the rows the work wrote and
//!   "this step is done" commit together, so the work takes effect exactly once.
//! - [`step_with`] is [`step`] retrying the work within the attempt.
//!
//! A name may be reached once per attempt (again is refused: [`StepError::is_reused`]),
//! and must name the same work on every attempt of the pass (`page-{k}`, not a clock
//! reading). The ledger of steps belongs to the pass: the next pass starts with none.
//!
//! [`counter_add`] changes belong to the pass too: they commit with the pass's end and are
//! dropped when the attempt fails, while that attempt's recorded steps are kept. To keep
//! a counter exact, add a step's share whether it ran or was skipped.
//!
//! [`Transaction::commit_pass`](crate::db::Transaction::commit_pass) commits the pass's
//! last writes with its end and counters: once it succeeds, the pass is over, even if the
//! host dies before the handler returns.
//!
//! ```no_run
//! use jobhost_guest::steps::{self, PassEnd};
//! use jobhost_guest::{Context, Job, JobError, Outcome, db};
//!
//! struct Mirror;
//!
//! impl Job for Mirror {
//!     type Payload = ();
//!
//!     fn run(_ctx: Context<()>) -> Result<Outcome, JobError> {
//!         let tx = db::begin()?;
//!         // Skipped, with its recorded result, if an earlier attempt committed it.
//!         let copied: u64 = steps::step_in(&tx, "copy", |tx| {
//!             Ok(tx.execute("INSERT INTO dst SELECT * FROM src", &[])?)
//!         })?;
//!         steps::counter_add("copied", copied as i64)?;
//!         Ok(tx.commit_pass(PassEnd::Done)?)
//!     }
//! }
//!
//! jobhost_guest::export_job!(Mirror);
//! ```

use crate::bindings::jobhost::job::steps as raw;
use crate::db::Transaction;
use crate::{HostError, JobError, Outcome, describe, log};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt;
use std::time::Duration;

/// The reason the host gives for a name reached twice in one attempt.
const STEP_REUSED: &str = "step-reused";

/// Runs step `name`: the result an earlier attempt of this pass recorded, decoded, without
/// calling `f`; otherwise `f`'s result, recorded in a fenced transaction of its own.
/// A failing `f` records nothing, so the retry runs it again.
pub fn step<T, F>(name: &str, f: F) -> Result<T, StepError>
where
    T: Serialize + DeserializeOwned,
    F: FnOnce() -> Result<T, JobError>,
{
    if let Some(recorded) = start(name)? {
        return Ok(recorded);
    }
    let (json, value) = as_recorded(f().map_err(StepError::Failed)?)?;
    raw::record(name, &json)?;
    Ok(value)
}

/// Runs step `name` inside `tx`: as [`step`], but `f` writes through `tx` and the result is
/// recorded in it, so both commit when `tx` commits ([`Transaction::commit`] or
/// [`Transaction::commit_pass`]) and neither otherwise. On a recorded result `f` is not
/// called and nothing is written.
pub fn step_in<T, F>(tx: &Transaction, name: &str, f: F) -> Result<T, StepError>
where
    T: Serialize + DeserializeOwned,
    F: FnOnce(&Transaction) -> Result<T, JobError>,
{
    if let Some(recorded) = start(name)? {
        return Ok(recorded);
    }
    let (json, value) = as_recorded(f(tx).map_err(StepError::Failed)?)?;
    raw::record_in(tx.raw(), name, &json)?;
    Ok(value)
}

/// Runs step `name` as [`step`] does, trying `f` up to `retry.attempts` times within this
/// attempt: a step's name is reached once per attempt, so retrying it means retrying
/// inside it.
pub fn step_with<T, F>(name: &str, retry: Retry, mut f: F) -> Result<T, StepError>
where
    T: Serialize + DeserializeOwned,
    F: FnMut() -> Result<T, JobError>,
{
    step(name, || retry.run(name, &mut f))
}

/// How [`step_with`] retries: up to `attempts` tries in all (at least one), sleeping
/// `backoff` after the first failure and twice as long after each next one.
///
/// Only [`JobError::Failed`] is retried. The sleeps count against the attempt's deadline:
/// the host stops an attempt at its deadline wherever it is, and a step stopped that way
/// is not recorded, so the pass's next attempt runs it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    pub attempts: u32,
    pub backoff: Duration,
}

impl Retry {
    fn run<T>(
        self,
        name: &str,
        f: &mut impl FnMut() -> Result<T, JobError>,
    ) -> Result<T, JobError> {
        let mut tries = 1;
        let mut delay = self.backoff;
        loop {
            match f() {
                Err(JobError::Failed(message)) if tries < self.attempts => {
                    log::debug(&format!(
                        "step {name}: try {tries} failed ({message}), again in {delay:?}"
                    ));
                    // Maps to wasi:clocks' monotonic clock: no busy wait, no extra import.
                    std::thread::sleep(delay);
                    delay = delay.saturating_mul(2);
                    tries += 1;
                }
                other => return other,
            }
        }
    }
}

/// Adds `delta` to the run's counter `name`; returns its value including this attempt's
/// changes so far. The change commits with the pass's end, and is dropped if the attempt
/// fails.
pub fn counter_add(name: &str, delta: i64) -> Result<i64, HostError> {
    raw::counter_add(name, delta)
}

/// How a pass ends, for [`Transaction::commit_pass`].
#[derive(Debug, Clone, PartialEq)]
pub enum PassEnd {
    /// The run is complete.
    Done,
    /// Run another pass, which gets this cursor.
    Continue(serde_json::Value),
}

impl PassEnd {
    /// Another pass, resuming from `cursor`.
    pub fn resume_from<C: Serialize>(cursor: &C) -> Result<PassEnd, serde_json::Error> {
        serde_json::to_value(cursor).map(PassEnd::Continue)
    }
}

impl From<PassEnd> for Outcome {
    fn from(end: PassEnd) -> Self {
        match end {
            PassEnd::Done => Outcome::Done,
            PassEnd::Continue(cursor) => Outcome::Continue(cursor),
        }
    }
}

/// Commits `tx` with the pass's end and counter changes (see
/// [`Transaction::commit_pass`]).
pub(crate) fn commit_pass(
    tx: crate::bindings::jobhost::job::db::Transaction,
    end: &PassEnd,
) -> Result<(), HostError> {
    let end = match end {
        PassEnd::Done => raw::PassEnd::Done,
        PassEnd::Continue(cursor) => raw::PassEnd::Continue(cursor.to_string()),
    };
    raw::commit_pass(tx, &end)
}

/// Why a step gave no result.
#[derive(Debug)]
pub enum StepError {
    /// The host refused a call: the name was reached before in this attempt
    /// ([`StepError::is_reused`]), a name or result past the host's bounds, or `lease-lost`
    /// (not recorded).
    Host(HostError),
    /// The recorded result does not decode as the step's type: the job's code changed it
    /// between attempts, or (on the first run, before recording) the type's JSON does not
    /// decode as itself, as a NaN float's `null` does not.
    Decode(serde_json::Error),
    /// The result does not encode as JSON (a map with non-string keys, say); the work was
    /// done but not recorded.
    Encode(serde_json::Error),
    /// The work failed; nothing was recorded.
    Failed(JobError),
}

impl StepError {
    /// Whether the host refused the step because its name was reached before in this
    /// attempt: a bug in the job, which no retry fixes.
    pub fn is_reused(&self) -> bool {
        matches!(self, StepError::Host(HostError::Invalid(reason)) if reason == STEP_REUSED)
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepError::Host(e) => f.write_str(&describe(e)),
            StepError::Decode(e) => write!(f, "recorded step result does not decode: {e}"),
            StepError::Encode(e) => write!(f, "step result does not encode as JSON: {e}"),
            StepError::Failed(JobError::Failed(m) | JobError::Unrecoverable(m)) => f.write_str(m),
        }
    }
}

impl std::error::Error for StepError {}

impl From<HostError> for StepError {
    fn from(e: HostError) -> Self {
        StepError::Host(e)
    }
}

impl From<StepError> for JobError {
    /// A reused name is unrecoverable (every retry reaches it again); the work's own error
    /// keeps its kind; anything else fails the attempt.
    fn from(e: StepError) -> Self {
        match e {
            e if e.is_reused() => JobError::Unrecoverable(e.to_string()),
            StepError::Failed(e) => e,
            e => JobError::Failed(e.to_string()),
        }
    }
}

/// Reaches `name`: its recorded result, decoded, if an earlier attempt recorded one.
fn start<T: DeserializeOwned>(name: &str) -> Result<Option<T>, StepError> {
    raw::start(name)?
        .map(|json| serde_json::from_str(&json).map_err(StepError::Decode))
        .transpose()
}

/// The JSON to record for `value`, and the value read back from it: the first run returns
/// what a replay would decode, so a type whose JSON form loses something (a skipped
/// field, a float the JSON cannot hold) behaves the same on every attempt, and one that
/// does not decode fails before anything is recorded.
fn as_recorded<T: Serialize + DeserializeOwned>(value: T) -> Result<(String, T), StepError> {
    let json = serde_json::to_string(&value).map_err(StepError::Encode)?;
    let read_back = serde_json::from_str(&json).map_err(StepError::Decode)?;
    Ok((json, read_back))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use std::collections::BTreeMap;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Page {
        next: Option<String>,
        /// Work of this attempt only, never recorded.
        #[serde(skip)]
        scratch: u32,
        scores: BTreeMap<String, f64>,
    }

    #[test]
    fn the_first_run_returns_what_a_replay_decodes() {
        let page = Page {
            next: Some("p2".into()),
            scratch: 7,
            scores: BTreeMap::from([("a".into(), 0.1 + 0.2)]),
        };
        let (json, first) = as_recorded(page).unwrap();
        let replayed: Page = serde_json::from_str(&json).unwrap();
        assert_eq!(first, replayed);
        assert_eq!(
            first.scratch, 0,
            "a skipped field is not kept on the first run either"
        );
        assert_eq!(first.scores["a"], 0.1 + 0.2);
    }

    #[test]
    fn a_value_no_replay_could_decode_fails_before_it_is_recorded() {
        // NaN encodes as `null`, which no f64 decodes: a replay would fail, so the first
        // run does too, rather than returning NaN once and failing every attempt after.
        assert!(matches!(as_recorded(f64::NAN), Err(StepError::Decode(_))));
        assert_eq!(as_recorded(1.5f64).unwrap(), ("1.5".to_string(), 1.5));
    }
}
