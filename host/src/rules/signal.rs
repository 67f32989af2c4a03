//! The rules of a signal (a run waiting for the outside, `run.wait-for-signal`): its name,
//! the id its sender gives, its payload's bounds, a wait's timeout, and how many unread
//! signals a run keeps. The API, `host runs signal` and the `run` capability check the
//! same rules here before anything is written.

use crate::rules::json_rule::{JsonLimits, JsonRefusal};

/// A signal's payload: JSON by the queue-safety rule, at most 64 KiB.
pub const PAYLOAD: JsonLimits = JsonLimits {
    max_bytes: 64 * 1024,
    max_depth: 32,
};
/// Longest signal id a sender may give.
pub const MAX_ID_BYTES: usize = 128;
/// Longest wait for a signal: a year (and a day).
pub const MAX_WAIT_MS: u64 = 366 * 24 * 3600 * 1000;
/// Most signals a run keeps unread: past it a send is refused (`too_many_signals`), so a
/// sender cannot grow a run's rows without bound.
pub const MAX_UNREAD: i64 = 1000;

/// Why a signal is refused before anything is read or written; each names its field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignalRefusal {
    #[error(
        "name: 1-64 lowercase letters, digits and . _ -, starting with a letter or digit (like a job's name)"
    )]
    Name,
    #[error("id: 1-128 ASCII letters, digits and . _ : -")]
    Id,
    #[error("payload: {0}")]
    Payload(JsonRefusal),
}

impl SignalRefusal {
    /// The fixed reason a guest is told (`invalid(<code>)`).
    pub fn code(&self) -> &'static str {
        match self {
            SignalRefusal::Name => "invalid-signal-name",
            SignalRefusal::Id => "invalid-signal-id",
            SignalRefusal::Payload(refusal) => refusal.code(),
        }
    }
}

/// Whether a run in `status` takes signals: one that has not ended (queued, running, or
/// waiting) may still read them.
pub fn takes_signals(status: &str) -> bool {
    status == "queued" || status == "running"
}

/// A signal's name follows the job name rule: it is part of a URL path, and shown as
/// written.
pub fn check_name(name: &str) -> Result<(), SignalRefusal> {
    crate::rules::job::validate_name(name).map_err(|_| SignalRefusal::Name)
}

/// A sender's id for a signal: what makes a repeated send the same signal.
pub fn check_id(id: &str) -> Result<(), SignalRefusal> {
    let ok = (1..=MAX_ID_BYTES).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b));
    if ok { Ok(()) } else { Err(SignalRefusal::Id) }
}

/// A payload as stored: canonical JSON within [`PAYLOAD`].
pub fn check_payload(text: &[u8]) -> Result<String, SignalRefusal> {
    crate::rules::json_rule::canonical(text, PAYLOAD).map_err(SignalRefusal::Payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_ids_and_payloads_outside_the_rule_are_refused_naming_the_field() {
        assert!(check_name("approval").is_ok());
        for bad in [
            "",
            "Approval",
            "a/b",
            "a b",
            "-x",
            "a".repeat(65).as_str(),
            "é",
        ] {
            assert_eq!(check_name(bad), Err(SignalRefusal::Name), "{bad:?}");
        }
        assert!(check_id("9f1c-2:a.B_c").is_ok());
        for bad in ["", "a b", "a\0", "ü", "a".repeat(MAX_ID_BYTES + 1).as_str()] {
            assert_eq!(check_id(bad), Err(SignalRefusal::Id), "{bad:?}");
        }
        assert_eq!(
            check_payload(br#"{ "ok" : true }"#).unwrap(),
            r#"{"ok":true}"#
        );
        let huge = format!("\"{}\"", "x".repeat(PAYLOAD.max_bytes));
        let refused = check_payload(huge.as_bytes()).unwrap_err();
        assert_eq!(refused.code(), "too-large");
        assert!(refused.to_string().starts_with("payload: "), "{refused}");
        assert_eq!(
            check_payload(b"{\"a\":NaN}").unwrap_err().code(),
            "non-finite"
        );
        assert_eq!(check_payload(b"{\"a\":").unwrap_err().code(), "not-json");
        assert_eq!(check_payload(b"\xff").unwrap_err().code(), "not-utf8");
    }
}
