//! What an attempt knows about its run, the children its previous pass waited for, and
//! the value it hands a waiting parent.

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
