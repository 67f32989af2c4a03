//! What an attempt knows about its run, the children its previous pass waited for, the
//! value it hands a waiting parent, and the signals it waits for and reads.

use crate::HostError;
use crate::bindings::jobhost::job::run as raw;
use serde::Serialize;

pub use raw::{Child, RunInfo as Info, StartedBy};

/// This attempt's place in its run: whether it is the last attempt, the retries left,
/// what started the run, how often it deferred.
pub fn info() -> Info {
    raw::info()
}

/// Every child the previous pass started and waited for (read a page at a time).
pub fn children() -> Result<Vec<Child>, HostError> {
    let mut all = Vec::new();
    let mut cursor = None;
    loop {
        let page = raw::children(cursor.as_deref(), 1000)?;
        all.extend(page.children);
        match page.next {
            Some(next) => cursor = Some(next),
            None => return Ok(all),
        }
    }
}

/// Hands `value` to a parent that waits for this run (at most 4 KiB of JSON).
pub fn set_result<T: Serialize>(value: &T) -> Result<(), HostError> {
    let text =
        serde_json::to_string(value).map_err(|_| HostError::Invalid("invalid-result".into()))?;
    raw::set_result(&text)
}

pub use raw::{ReceivedSignal, SignalState};

/// Makes this pass's [`crate::Outcome::Continue`] (or `Defer`) wait for the signal `name`
/// (WIT 0.1.6): the run sleeps, holding no worker and using no attempt, until the signal
/// is sent (`POST /runs/{id}/signals/{name}`, `host runs signal`) — or was sent already —
/// or `timeout` (at most a year) after the pass ended. The next pass reads it with
/// [`signal`]. A pass waits for one thing: not also for its children.
pub fn wait_for_signal(name: &str, timeout: std::time::Duration) -> Result<(), HostError> {
    let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    raw::wait_for_signal(name, timeout_ms)
}

/// Where the signal `name` stands for this pass, its payload decoded.
#[derive(Debug, Clone, PartialEq)]
pub enum Signal<T> {
    /// It came: every attempt of this pass reads this same one (a later pass, the next).
    Received { id: String, payload: T },
    /// The previous pass waited for it, and the wait's timeout came first.
    TimedOut,
    /// Not received, and the previous pass did not wait for it.
    Pending,
}

/// The signal `name` for this pass (WIT 0.1.6): the first one sent and not read by an
/// earlier pass, its payload decoded as `T` (a payload that does not decode is refused
/// `invalid("invalid-signal-payload")`); or whether the previous pass's wait timed out.
pub fn signal<T: serde::de::DeserializeOwned>(name: &str) -> Result<Signal<T>, HostError> {
    Ok(match raw::signal(name)? {
        SignalState::Received(received) => Signal::Received {
            payload: serde_json::from_str(&received.payload)
                .map_err(|_| HostError::Invalid("invalid-signal-payload".into()))?,
            id: received.id,
        },
        SignalState::TimedOut => Signal::TimedOut,
        SignalState::Pending => Signal::Pending,
    })
}
