//! Cron expressions, in a time zone.
//!
//! Standard five-field expressions (`min hour day-of-month month day-of-week`, with
//! day-of-week 0-7 where 0 and 7 are Sunday) are read as cron(8) reads them. Six and
//! seven fields (a leading seconds field, a trailing year) and the `@hourly`-style
//! shorthands follow the `cron` crate, whose numeric days of the week run 1 (Sunday) to 7.

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use std::str::FromStr;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CronError {
    #[error(
        "invalid cron expression {0:?}: use five fields (min hour dom month dow), six with seconds, or @hourly/@daily/..."
    )]
    Expression(String),
    #[error("unknown time zone {0:?}: use an IANA name such as UTC or Europe/Paris")]
    TimeZone(String),
    #[error("cron expression {0:?} never fires")]
    Never(String),
}

#[derive(Debug, Clone)]
pub struct Cron {
    schedule: cron::Schedule,
    tz: Tz,
}

const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

pub fn parse_tz(name: &str) -> Result<Tz, CronError> {
    Tz::from_str(name).map_err(|_| CronError::TimeZone(name.to_string()))
}

impl Cron {
    pub fn parse(expression: &str, tz: Tz) -> Result<Cron, CronError> {
        let invalid = || CronError::Expression(expression.to_string());
        let trimmed = expression.trim();
        let fields: Vec<&str> = trimmed.split_whitespace().collect();
        let native = match fields.len() {
            _ if trimmed.starts_with('@') => trimmed.to_string(),
            5 => {
                let dow = standard_days_of_week(fields[4]).ok_or_else(invalid)?;
                format!(
                    "0 {} {} {} {} {dow}",
                    fields[0], fields[1], fields[2], fields[3]
                )
            }
            6 | 7 => trimmed.to_string(),
            _ => return Err(invalid()),
        };
        let schedule = cron::Schedule::from_str(&native).map_err(|_| invalid())?;
        let cron = Cron { schedule, tz };
        if cron.next_after(0).is_none() {
            return Err(CronError::Never(expression.to_string()));
        }
        Ok(cron)
    }

    /// The first fire time strictly after `ms` (epoch milliseconds).
    pub fn next_after(&self, ms: i64) -> Option<i64> {
        let after: DateTime<Tz> = self
            .tz
            .from_utc_datetime(&DateTime::<Utc>::from_timestamp_millis(ms)?.naive_utc());
        self.schedule
            .after(&after)
            .next()
            .map(|t| t.timestamp_millis())
    }

    /// The interval between the fire times that follow `ms`: the schedule's period there.
    pub fn period_after(&self, ms: i64) -> Option<i64> {
        let first = self.next_after(ms)?;
        Some(self.next_after(first)? - first)
    }
}

/// Rewrites a cron(8) day-of-week field (0-7, 0 and 7 Sunday, ranges, steps, names) as
/// an explicit list of day names, which means the same to the `cron` crate.
fn standard_days_of_week(field: &str) -> Option<String> {
    if field == "*" || field == "?" {
        return Some(field.to_string());
    }
    let day = |text: &str| -> Option<usize> {
        match text.parse::<usize>() {
            Ok(n) if n <= 7 => Some(n % 7),
            Ok(_) => None,
            Err(_) => DAY_NAMES.iter().position(|d| d.eq_ignore_ascii_case(text)),
        }
    };
    let mut days = [false; 7];
    for item in field.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => (range, step.parse::<usize>().ok().filter(|s| *s > 0)?),
            None => (item, 1),
        };
        let (start, end) = match range {
            "*" => (0, 6),
            _ => match range.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (
                        day(a)?,
                        b.parse::<usize>()
                            .ok()
                            .filter(|n| *n <= 7)
                            .or_else(|| day(b))?,
                    );
                    (a, if b < a { b + 7 } else { b })
                }
                None => {
                    let a = day(range)?;
                    (a, if step > 1 { 6 } else { a })
                }
            },
        };
        for d in (start..=end).step_by(step) {
            days[d % 7] = true;
        }
    }
    let names: Vec<&str> = (0..7).filter(|d| days[*d]).map(|d| DAY_NAMES[d]).collect();
    (!names.is_empty()).then(|| names.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> i64 {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .timestamp_millis()
    }

    #[test]
    fn standard_days_of_week_mean_what_cron8_means() {
        assert_eq!(standard_days_of_week("1-5").unwrap(), "MON,TUE,WED,THU,FRI");
        assert_eq!(standard_days_of_week("0").unwrap(), "SUN");
        assert_eq!(standard_days_of_week("7").unwrap(), "SUN");
        assert_eq!(standard_days_of_week("5-7").unwrap(), "SUN,FRI,SAT");
        assert_eq!(standard_days_of_week("*/2").unwrap(), "SUN,TUE,THU,SAT");
        assert_eq!(standard_days_of_week("mon,wed").unwrap(), "MON,WED");
        assert!(standard_days_of_week("8").is_none());
        assert!(standard_days_of_week("x").is_none());
    }

    #[test]
    fn five_fields_fire_on_the_minute() {
        let c = Cron::parse("*/15 9 * * 1", Tz::UTC).unwrap();
        // 2026-11-29 is a Sunday: the next is Monday 09:00.
        assert_eq!(
            c.next_after(at("2026-11-29T12:00:00Z")),
            Some(at("2026-11-30T09:00:00Z"))
        );
        assert_eq!(
            c.next_after(at("2026-11-30T09:00:00Z")),
            Some(at("2026-11-30T09:15:00Z"))
        );
        assert_eq!(
            c.period_after(at("2026-11-30T09:01:00Z")),
            Some(15 * 60_000)
        );
    }

    #[test]
    fn seconds_fields_and_time_zones() {
        let c = Cron::parse("*/2 * * * * *", Tz::UTC).unwrap();
        assert_eq!(
            c.next_after(at("2026-11-29T12:00:01Z")),
            Some(at("2026-11-29T12:00:02Z"))
        );
        let paris = Cron::parse("0 9 * * *", parse_tz("Europe/Paris").unwrap()).unwrap();
        assert_eq!(
            paris.next_after(at("2026-11-29T00:00:00Z")),
            Some(at("2026-11-29T08:00:00Z"))
        );
        assert!(Cron::parse("@hourly", Tz::UTC).is_ok());
    }

    #[test]
    fn bad_expressions_are_refused() {
        for bad in [
            "",
            "* * *",
            "61 * * * *",
            "* * * * 9",
            "nonsense here please now x",
            "* * 31 2 *",
        ] {
            assert!(Cron::parse(bad, Tz::UTC).is_err(), "{bad:?}");
        }
        assert!(matches!(parse_tz("Mars/Base"), Err(CronError::TimeZone(_))));
    }
}
