//! Delivered endings (webhooks): which endings a job may route, how a job's `deliver`
//! is checked, and the signature every delivery carries.
//!
//! A delivery is signed as Stripe signs its events: `Jobhost-Signature: t=T,v1=HEX`, where
//! `T` is the Unix time in seconds the request was sent and `HEX` the lower-case hex of
//! HMAC-SHA256, keyed with the webhook's secret, over `T`, a `.` and the body's bytes. A
//! receiver computes the same over the bytes it received, compares in constant time, and
//! refuses a `T` further than [`REPLAY_WINDOW_SECS`] from its clock, so a captured request
//! cannot be replayed later.

use hmac::{Hmac, KeyInit, Mac};
use sha2_hmac::Sha256;
use std::collections::{BTreeMap, BTreeSet};

/// How far a signature's time may be from the receiver's clock (five minutes, Stripe's).
pub const REPLAY_WINDOW_SECS: i64 = 300;

/// The header a delivery's signature travels in.
pub const SIGNATURE_HEADER: &str = "jobhost-signature";

/// A run's ending a job may deliver: every status a run ends in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Ending {
    Succeeded,
    Failed,
    Cancelled,
    Crashed,
    Skipped,
}

impl Ending {
    pub const ALL: [Ending; 5] = [
        Ending::Succeeded,
        Ending::Failed,
        Ending::Cancelled,
        Ending::Crashed,
        Ending::Skipped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Ending::Succeeded => "succeeded",
            Ending::Failed => "failed",
            Ending::Cancelled => "cancelled",
            Ending::Crashed => "crashed",
            Ending::Skipped => "skipped",
        }
    }

    pub fn parse(text: &str) -> Option<Ending> {
        Self::ALL.into_iter().find(|e| e.as_str() == text)
    }
}

impl serde::Serialize for Ending {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Ending {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Ending::parse(&text).ok_or_else(|| serde::de::Error::custom(unknown_ending(&text)))
    }
}

/// A job's routes: each webhook (by name) and the endings delivered to it.
pub type Routes = BTreeMap<String, BTreeSet<Ending>>;

fn unknown_ending(text: &str) -> String {
    let known: Vec<&str> = Ending::ALL.iter().map(|e| e.as_str()).collect();
    format!(
        "unknown ending {:?} (known: {})",
        crate::rules::guest_text::for_terminal(&crate::rules::guest_text::for_storage(text, 64)),
        known.join(", ")
    )
}

/// A manifest's `deliver = { WEBHOOK = ["ENDING", ...] }`, checked against the webhooks
/// it declares: every problem, each naming its key (`deliver.NAME`).
pub fn routes(
    deliver: &BTreeMap<String, Vec<String>>,
    declared: &dyn Fn(&str) -> bool,
) -> Result<Routes, Vec<String>> {
    let mut routes = Routes::new();
    let mut problems = Vec::new();
    for (webhook, endings) in deliver {
        let key = format!("deliver.{webhook}");
        if !declared(webhook) {
            problems.push(format!(
                "{key}: webhook {webhook:?} is not declared ([webhooks.{webhook}])"
            ));
            continue;
        }
        if endings.is_empty() {
            problems.push(format!(
                "{key}: name at least one ending, or leave the webhook out"
            ));
        }
        let mut set = BTreeSet::new();
        for text in endings {
            match Ending::parse(text) {
                Some(ending) => {
                    set.insert(ending);
                }
                None => problems.push(format!("{key}: {}", unknown_ending(text))),
            }
        }
        routes.insert(webhook.clone(), set);
    }
    if problems.is_empty() {
        Ok(routes)
    } else {
        Err(problems)
    }
}

/// The signature header's value for `body` sent at `timestamp` (Unix seconds).
pub fn signature(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    format!(
        "t={timestamp},v1={}",
        hex::encode(mac(secret, timestamp, body))
    )
}

fn mac(secret: &[u8], timestamp: i64, body: &[u8]) -> [u8; 32] {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().into()
}

/// Why a signature was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the signature header is not `t=TIME,v1=HEX`")]
    Malformed,
    #[error("the signature's time is outside the replay window")]
    Stale,
    #[error("the signature does not match the body")]
    Mismatch,
}

/// What a receiver does with a delivery (`docs/operating.md` shows it in Python): the
/// header parsed, its time within the window of `now` (Unix seconds), any `v1` matching.
pub fn verify(secret: &[u8], header: &str, body: &[u8], now: i64) -> Result<(), SignatureError> {
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", t)) => timestamp = t.parse::<i64>().ok(),
            Some(("v1", v)) => {
                signatures.push(hex::decode(v).map_err(|_| SignatureError::Malformed)?)
            }
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or(SignatureError::Malformed)?;
    if signatures.is_empty() {
        return Err(SignatureError::Malformed);
    }
    if (now - timestamp).abs() > REPLAY_WINDOW_SECS {
        return Err(SignatureError::Stale);
    }
    let expected = mac(secret, timestamp, body);
    let matches = signatures.iter().any(|s| {
        bool::from(subtle::ConstantTimeEq::ct_eq(
            s.as_slice(),
            expected.as_slice(),
        ))
    });
    if matches {
        Ok(())
    } else {
        Err(SignatureError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_and_any_change_is_refused() {
        let body = br#"{"run_id":"r1","status":"failed"}"#;
        let header = signature(b"s3cret", 1_700_000_000, body);
        assert!(header.starts_with("t=1700000000,v1="));
        assert_eq!(verify(b"s3cret", &header, body, 1_700_000_100), Ok(()));
        assert_eq!(
            verify(b"other", &header, body, 1_700_000_000),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(b"s3cret", &header, b"{}", 1_700_000_000),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(
                b"s3cret",
                &header,
                body,
                1_700_000_000 + REPLAY_WINDOW_SECS + 1
            ),
            Err(SignatureError::Stale)
        );
        for bad in ["", "t=1", "v1=00", "t=x,v1=00", "t=1,v1=zz"] {
            assert_eq!(
                verify(b"s3cret", bad, body, 1),
                Err(SignatureError::Malformed),
                "{bad}"
            );
        }
    }

    /// The HMAC is the standard one: RFC 4231's test case 2 (key "Jefe").
    #[test]
    fn the_mac_is_rfc_4231_hmac_sha256() {
        let mut mac = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // And the signed text is `T.body`.
        let header = signature(b"Jefe", 12, b"ab");
        let mut by_hand = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
        by_hand.update(b"12.ab");
        assert_eq!(
            header,
            format!("t=12,v1={}", hex::encode(by_hand.finalize().into_bytes()))
        );
    }

    #[test]
    fn routes_name_declared_webhooks_and_known_endings() {
        let declared = |w: &str| w == "ops";
        let ok = BTreeMap::from([("ops".to_string(), vec!["failed".into(), "crashed".into()])]);
        assert_eq!(
            routes(&ok, &declared).unwrap()["ops"],
            BTreeSet::from([Ending::Failed, Ending::Crashed])
        );
        let bad = BTreeMap::from([
            ("ops".to_string(), vec!["finished".into()]),
            ("nope".to_string(), vec!["failed".into()]),
            ("ops2".to_string(), vec![]),
        ]);
        let problems = routes(&bad, &|w| w != "nope").unwrap_err();
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].starts_with("deliver.nope: webhook \"nope\" is not declared"));
        assert!(
            problems[1].starts_with("deliver.ops: unknown ending \"finished\" (known: succeeded")
        );
        assert!(problems[2].starts_with("deliver.ops2: name at least one ending"));
    }
}
