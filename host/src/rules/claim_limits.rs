//! A job's claim-time limits as the manifest declares them: `rate`, `concurrency`, `key`,
//! `key_rate`, `key_concurrency` and `order = "fifo"`. They are stored with the job's
//! registration, so every host's claim (`store/claims/`) applies the same; here is only
//! what each means and which values are refused (`host check` names the line).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::num::NonZeroU32;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LimitError {
    #[error(
        "invalid rate {0:?}: write starts per period, e.g. \"60/min\", \"5/s\" or \"100/h\" (1 to 1000000 starts)"
    )]
    Rate(String),
    #[error(
        "invalid key {0:?}: use \"instance\", \"tenant\" or a JSON pointer into the payload such as \"/customer/id\" (non-empty members, `~` only as ~0 or ~1, no quote, backslash or control character, at most 256 bytes)"
    )]
    Key(String),
    #[error("{0} limits runs per key: it needs `key`")]
    NeedsKey(&'static str),
    #[error(
        "`sequential` and `concurrency` both limit the runs at once: use one (`concurrency = 1` is sequential)"
    )]
    SequentialAndConcurrency,
}

/// At most `starts` starts in any `period_ms` window (a sliding window, no extra burst).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Rate {
    pub starts: u32,
    pub period_ms: i64,
}

/// The most starts a rate may name per period: a window of that many start times is kept
/// per job or key (`jobhost_rate_starts`).
pub const MAX_RATE_STARTS: u32 = 1_000_000;

impl Rate {
    /// Read as every rate is (`rules::units::parse_rate`), bounded by the window kept.
    pub fn parse(text: &str) -> Result<Rate, LimitError> {
        let refused = || LimitError::Rate(text.to_string());
        let rate = crate::rules::units::parse_rate(text).map_err(|_| refused())?;
        if rate.count > MAX_RATE_STARTS {
            return Err(refused());
        }
        Ok(Rate {
            starts: rate.count,
            period_ms: rate.per.as_millis() as i64,
        })
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let period = match self.period_ms {
            1_000 => "s",
            60_000 => "min",
            _ => "h",
        };
        write!(f, "{}/{period}", self.starts)
    }
}

impl TryFrom<String> for Rate {
    type Error = LimitError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        Rate::parse(&text)
    }
}

impl From<Rate> for String {
    fn from(rate: Rate) -> String {
        rate.to_string()
    }
}

/// What the per-key limits count by: the run's instance, its tenant, or a member of its
/// payload. The run's key is computed once, as it is queued (`jobhost_runs.limit_key`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum LimitKey {
    Instance,
    Tenant,
    /// A JSON pointer (RFC 6901) naming object members only; a run whose payload has no
    /// string or number there has the key `""`.
    Pointer(String),
}

const MAX_POINTER: usize = 256;

impl LimitKey {
    pub fn parse(text: &str) -> Result<LimitKey, LimitError> {
        match text {
            "instance" => return Ok(LimitKey::Instance),
            "tenant" => return Ok(LimitKey::Tenant),
            _ => {}
        }
        let refused = || LimitError::Key(text.to_string());
        let rest = text.strip_prefix('/').ok_or_else(refused)?;
        if text.len() > MAX_POINTER {
            return Err(refused());
        }
        for member in rest.split('/') {
            let escapes_ok = member
                .match_indices('~')
                .all(|(at, _)| matches!(member.as_bytes().get(at + 1), Some(b'0' | b'1')));
            let chars_ok = !member
                .chars()
                .any(|c| c == '"' || c == '\\' || c.is_control());
            if member.is_empty() || !escapes_ok || !chars_ok {
                return Err(refused());
            }
        }
        Ok(LimitKey::Pointer(text.to_string()))
    }

    /// As stored with the job: `instance`, `tenant` or the pointer.
    pub fn as_str(&self) -> &str {
        match self {
            LimitKey::Instance => "instance",
            LimitKey::Tenant => "tenant",
            LimitKey::Pointer(pointer) => pointer,
        }
    }
}

impl TryFrom<String> for LimitKey {
    type Error = LimitError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        LimitKey::parse(&text)
    }
}

impl From<LimitKey> for String {
    fn from(key: LimitKey) -> String {
        key.as_str().to_string()
    }
}

/// `order`: the only one is `fifo` (per key, in queue order, one at a time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    Fifo,
}

/// The limits a claim applies to a job's runs, fleet-wide. A run over one stays queued,
/// using no attempt, lease or worker, until the limit allows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<NonZeroU32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<LimitKey>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_rate: Option<Rate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_concurrency: Option<NonZeroU32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<Order>,
}

impl ClaimLimits {
    /// The rules between the fields (each field's own are its type's): the per-key
    /// limits need a key.
    pub fn validate(&self) -> Result<(), LimitError> {
        if self.key.is_none() {
            if self.key_rate.is_some() {
                return Err(LimitError::NeedsKey("key_rate"));
            }
            if self.key_concurrency.is_some() {
                return Err(LimitError::NeedsKey("key_concurrency"));
            }
            if self.order.is_some() {
                return Err(LimitError::NeedsKey("order = \"fifo\""));
            }
        }
        Ok(())
    }

    pub fn fifo(&self) -> bool {
        self.order == Some(Order::Fifo)
    }

    pub fn is_empty(&self) -> bool {
        *self == ClaimLimits::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_starts_per_second_minute_or_hour() {
        assert_eq!(
            Rate::parse("60/min"),
            Ok(Rate {
                starts: 60,
                period_ms: 60_000
            })
        );
        assert_eq!(Rate::parse("5/s").unwrap().period_ms, 1_000);
        assert_eq!(Rate::parse("100/h").unwrap().period_ms, 3_600_000);
        for text in ["60/min", "5/s", "100/h"] {
            assert_eq!(Rate::parse(text).unwrap().to_string(), text);
        }
        for bad in [
            "0/s",
            "-1/s",
            "60",
            "60/m",
            "60/day",
            "/s",
            "x/s",
            "1.5/s",
            "1000001/s",
            "",
        ] {
            assert_eq!(Rate::parse(bad), Err(LimitError::Rate(bad.into())), "{bad}");
        }
    }

    #[test]
    fn keys_are_instance_tenant_or_a_pointer() {
        assert_eq!(LimitKey::parse("instance"), Ok(LimitKey::Instance));
        assert_eq!(LimitKey::parse("tenant"), Ok(LimitKey::Tenant));
        for good in ["/customer", "/a/b", "/a~1b", "/m~0n", "/0"] {
            assert_eq!(
                LimitKey::parse(good),
                Ok(LimitKey::Pointer(good.into())),
                "{good}"
            );
        }
        let long = format!("/{}", "a".repeat(MAX_POINTER));
        for bad in [
            "",
            "customer",
            "/",
            "/a//b",
            "/a/",
            "/a~2",
            "/a~",
            "/a\"b",
            "/a\\b",
            "/a\nb",
            long.as_str(),
        ] {
            assert_eq!(
                LimitKey::parse(bad),
                Err(LimitError::Key(bad.into())),
                "{bad}"
            );
        }
    }

    #[test]
    fn per_key_limits_need_a_key() {
        let one = NonZeroU32::new(1);
        let no_key = ClaimLimits {
            key_concurrency: one,
            ..ClaimLimits::default()
        };
        assert_eq!(
            no_key.validate(),
            Err(LimitError::NeedsKey("key_concurrency"))
        );
        let fifo = ClaimLimits {
            order: Some(Order::Fifo),
            ..ClaimLimits::default()
        };
        assert_eq!(
            fifo.validate(),
            Err(LimitError::NeedsKey("order = \"fifo\""))
        );
        let rate = ClaimLimits {
            key_rate: Some(Rate::parse("1/s").unwrap()),
            ..ClaimLimits::default()
        };
        assert_eq!(rate.validate(), Err(LimitError::NeedsKey("key_rate")));
        let keyed = ClaimLimits {
            key: Some(LimitKey::Tenant),
            key_concurrency: one,
            order: Some(Order::Fifo),
            ..ClaimLimits::default()
        };
        assert_eq!(keyed.validate(), Ok(()));
        assert!(keyed.fifo());
    }

    #[test]
    fn limits_round_trip_through_the_stored_definition() {
        let limits = ClaimLimits {
            rate: Some(Rate::parse("20/s").unwrap()),
            concurrency: NonZeroU32::new(4),
            key: Some(LimitKey::parse("/customer").unwrap()),
            key_rate: Some(Rate::parse("5/min").unwrap()),
            key_concurrency: NonZeroU32::new(1),
            order: Some(Order::Fifo),
        };
        let json = serde_json::to_string(&limits).unwrap();
        assert_eq!(
            serde_json::from_str::<ClaimLimits>(&json).unwrap(),
            limits,
            "{json}"
        );
        assert_eq!(
            serde_json::from_str::<ClaimLimits>("{}").unwrap(),
            ClaimLimits::default()
        );
    }
}
