//! Parsing of the human units operators type: durations (`30s`, `10m`, `1h`, `250ms`),
//! sizes (`64MiB`, `512KiB`, `1GiB`, or plain bytes) and rates (`25/s`, `60/min`, `100/h`);
//! and the readable forms the CLI prints for a person (`1.1 MiB`, `2.4 s`, `1.2M` fuel) —
//! JSON keeps the numbers.

use std::time::Duration;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UnitError {
    #[error("invalid duration {0:?}: use a number with a unit, e.g. 250ms, 30s, 10m, 1h, 2d")]
    Duration(String),
    #[error("invalid duration {0:?}: it must be longer than zero")]
    ZeroDuration(String),
    #[error("invalid size {0:?}: use a number with a unit, e.g. 512KiB, 64MiB, 1GiB (or bytes)")]
    Size(String),
    #[error("invalid rate {0:?}: use a count over zero per s, min or h, e.g. 25/s, 60/min, 100/h")]
    Rate(String),
}

/// A number of events per period, as operators write it: `25/s`, `60/min`, `100/h`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub count: u32,
    pub per: Duration,
}

impl Rate {
    /// The time between two events spaced evenly at this rate.
    pub fn interval(&self) -> Duration {
        self.per / self.count
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let unit = match self.per.as_secs() {
            1 => "s",
            60 => "min",
            _ => "h",
        };
        write!(f, "{}/{unit}", self.count)
    }
}

/// A rate: a count over zero (a rate of nothing would refuse everything), per `s`, `min`
/// or `h`.
pub fn parse_rate(text: &str) -> Result<Rate, UnitError> {
    let err = || UnitError::Rate(text.to_string());
    let (count, unit) = text.split_once('/').ok_or_else(err)?;
    let count: u32 = count.trim().parse().map_err(|_| err())?;
    let per = match unit.trim() {
        "s" => Duration::from_secs(1),
        "min" => Duration::from_secs(60),
        "h" => Duration::from_secs(3600),
        _ => return Err(err()),
    };
    if count == 0 {
        return Err(err());
    }
    Ok(Rate { count, per })
}

fn split_number(text: &str) -> Option<(u64, &str)> {
    let text = text.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    if digits == 0 {
        return None;
    }
    let number = text[..digits].parse().ok()?;
    Some((number, text[digits..].trim()))
}

pub fn parse_duration(text: &str) -> Result<Duration, UnitError> {
    let err = || UnitError::Duration(text.to_string());
    let (n, unit) = split_number(text).ok_or_else(err)?;
    let millis_per_unit: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(err()),
    };
    let millis = n.checked_mul(millis_per_unit).ok_or_else(err)?;
    Ok(Duration::from_millis(millis))
}

/// A duration that must not be zero: a time limit of nothing would refuse everything.
pub fn parse_positive_duration(text: &str) -> Result<Duration, UnitError> {
    match parse_duration(text)? {
        Duration::ZERO => Err(UnitError::ZeroDuration(text.to_string())),
        d => Ok(d),
    }
}

pub fn parse_size(text: &str) -> Result<u64, UnitError> {
    let err = || UnitError::Size(text.to_string());
    let (n, unit) = split_number(text).ok_or_else(err)?;
    let multiplier: u64 = match unit {
        "" | "B" => 1,
        "KiB" | "K" | "KB" => 1 << 10,
        "MiB" | "M" | "MB" => 1 << 20,
        "GiB" | "G" | "GB" => 1 << 30,
        _ => return Err(err()),
    };
    n.checked_mul(multiplier).ok_or_else(err)
}

/// Formats a duration the way `parse_duration` reads it (the largest exact unit).
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis() as u64;
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// Formats bytes with a binary unit when exact.
pub fn format_size(bytes: u64) -> String {
    for (unit, size) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{}{unit}", bytes / size);
        }
    }
    format!("{bytes}B")
}

/// Bytes as a person reads them: `512 B`, `12.3 KiB`, `1.1 MiB`, `2.0 GiB`.
pub fn readable_size(bytes: u64) -> String {
    for (unit, size) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if bytes >= size {
            return format!("{:.1} {unit}", bytes as f64 / size as f64);
        }
    }
    format!("{bytes} B")
}

/// Milliseconds as a person reads them: `830 ms`, `2.4 s`, `3 min 5 s`, `2 h 10 min`.
pub fn readable_ms(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1_000.0),
        60_000..3_600_000 => format!("{} min {} s", ms / 60_000, ms % 60_000 / 1_000),
        _ => format!("{} h {} min", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

/// A large count (fuel) as a person reads it: `9 999`, `12.3k`, `1.1M`, `4.2G`.
pub fn readable_count(n: u64) -> String {
    for (unit, size) in [("G", 1_000_000_000u64), ("M", 1_000_000), ("k", 1_000)] {
        if n >= size.max(10_000) {
            return format!("{:.1}{unit}", n as f64 / size as f64);
        }
    }
    n.to_string()
}

/// Serde helpers so manifests can write `timeout = "30s"`.
pub mod serde_duration {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format_duration(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        super::parse_duration(&text).map_err(D::Error::custom)
    }
}

/// Serde helpers so manifests can write `memory = "64MiB"`.
pub mod serde_size {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(bytes: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format_size(*bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Size {
            Bytes(u64),
            Text(String),
        }
        match Size::deserialize(d)? {
            Size::Bytes(n) => Ok(n),
            Size::Text(text) => super::parse_size(&text).map_err(D::Error::custom),
        }
    }
}

/// A manifest writes a rate as text: `rate = "25/s"`.
impl serde::Serialize for Rate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Rate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Rate, D::Error> {
        let text = <String as serde::Deserialize>::deserialize(d)?;
        parse_rate(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rates_are_counts_over_zero_per_second_minute_or_hour() {
        let rate = parse_rate("25/s").unwrap();
        assert_eq!(rate.interval(), Duration::from_millis(40));
        assert_eq!(rate.to_string(), "25/s");
        assert_eq!(
            parse_rate("60/min").unwrap().interval(),
            Duration::from_secs(1)
        );
        assert_eq!(parse_rate(" 100 / h ").unwrap().to_string(), "100/h");
        for bad in [
            "0/s",
            "-1/s",
            "25",
            "25/d",
            "x/s",
            "/s",
            "1.5/s",
            "99999999999/s",
        ] {
            assert_eq!(parse_rate(bad), Err(UnitError::Rate(bad.into())), "{bad}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration(" 2d "), Ok(Duration::from_secs(172_800)));
        for bad in [
            "",
            "s",
            "30",
            "30x",
            "-1s",
            "1.5s",
            "99999999999999999999s",
            "30 seconds",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be refused");
        }
        assert_eq!(
            parse_positive_duration("0s"),
            Err(UnitError::ZeroDuration("0s".into()))
        );
        assert_eq!(parse_positive_duration("1ms"), Ok(Duration::from_millis(1)));
        assert_eq!(format_duration(Duration::from_secs(90)), "90s");
        assert_eq!(format_duration(Duration::from_secs(3600)), "1h");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
    }

    #[test]
    fn readable_forms_are_short_and_round() {
        assert_eq!(readable_size(512), "512 B");
        assert_eq!(readable_size(1_115_000), "1.1 MiB");
        assert_eq!(readable_size(64 << 20), "64.0 MiB");
        assert_eq!(readable_size(3 << 30), "3.0 GiB");
        assert_eq!(readable_ms(830), "830 ms");
        assert_eq!(readable_ms(2_449), "2.4 s");
        assert_eq!(readable_ms(185_000), "3 min 5 s");
        assert_eq!(readable_ms(7_800_000), "2 h 10 min");
        assert_eq!(readable_count(9_999), "9999");
        assert_eq!(readable_count(12_345), "12.3k");
        assert_eq!(readable_count(1_114_896), "1.1M");
        assert_eq!(readable_count(4_200_000_000), "4.2G");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("4096"), Ok(4096));
        for bad in ["", "MiB", "64XB", "-1", "1.5MiB"] {
            assert!(parse_size(bad).is_err(), "{bad:?} should be refused");
        }
        assert_eq!(format_size(64 << 20), "64MiB");
        assert_eq!(format_size(1000), "1000B");
    }

    proptest! {
        #![proptest_config(crate::rules::fuzzing::config(2000))]

        /// Any text either parses or gets a one-line error; what parses formats back to
        /// the same value.
        #[test]
        fn units_parse_or_refuse_in_one_line(text in crate::rules::fuzzing::text()) {
            match parse_duration(&text) {
                Ok(d) => prop_assert_eq!(parse_duration(&format_duration(d)), Ok(d)),
                Err(e) => prop_assert!(!e.to_string().contains('\n')),
            }
            match parse_size(&text) {
                Ok(n) => prop_assert_eq!(parse_size(&format_size(n)), Ok(n)),
                Err(e) => prop_assert!(!e.to_string().contains('\n')),
            }
        }

        #[test]
        fn durations_round_trip(ms in 0u64..u64::MAX / 86_400_000) {
            let d = Duration::from_millis(ms);
            prop_assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }
    }
}
