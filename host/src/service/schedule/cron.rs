//! Cron expressions, in a time zone.
//!
//! Standard five-field expressions (`min hour day-of-month month day-of-week`, with
//! day-of-week 0-7 where 0 and 7 are Sunday) are read as cron(8) reads them. Six and
//! seven fields (a leading seconds field, a trailing year) and the `@hourly`-style
//! shorthands follow the `cron` crate, whose numeric days of the week run 1 (Sunday) to 7.

use chrono::{DateTime, Offset, TimeZone, Utc};
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
    /// Matches wall-clock times: it is evaluated as if the zone were UTC, and each matching
    /// wall time is then placed on the zone's timeline (see [`Cron::instants`]).
    schedule: cron::Schedule,
    tz: Tz,
    /// The hour field names fixed hours (`30 1 * * *`, `@daily`), as opposed to every hour
    /// or a step (`* * * * *`, `0 */2 * * *`): it decides what a DST change does.
    fixed_hour: bool,
}

/// How far a zone's offset moves at a change of daylight saving time, at most (with room).
const MAX_SHIFT: chrono::TimeDelta = chrono::TimeDelta::hours(4);

const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

pub fn parse_tz(name: &str) -> Result<Tz, CronError> {
    Tz::from_str(name).map_err(|_| CronError::TimeZone(name.to_string()))
}

impl Cron {
    pub fn parse(expression: &str, tz: Tz) -> Result<Cron, CronError> {
        let invalid = || CronError::Expression(expression.to_string());
        let trimmed = expression.trim();
        let fields: Vec<&str> = trimmed.split_whitespace().collect();
        let hour_field = match fields.len() {
            _ if trimmed.starts_with('@') => {
                if trimmed.eq_ignore_ascii_case("@hourly") {
                    "*"
                } else {
                    "0"
                }
            }
            5 => fields[1],
            6 | 7 => fields[2],
            _ => return Err(invalid()),
        };
        let fixed_hour = !hour_field.contains(['*', '/']);
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
        let cron = Cron {
            schedule,
            tz,
            fixed_hour,
        };
        if cron.next_after(0).is_none() {
            return Err(CronError::Never(expression.to_string()));
        }
        Ok(cron)
    }

    /// The first fire time strictly after `ms` (epoch milliseconds).
    ///
    /// Always later than `ms`, whatever the zone does: a scheduler that moves a job's fire
    /// time from one value to the next can never go back and fire a tick again.
    pub fn next_after(&self, ms: i64) -> Option<i64> {
        let instant = DateTime::<Utc>::from_timestamp_millis(ms)?;
        let wall = instant.with_timezone(&self.tz).naive_local();
        let offset_at = |t: DateTime<Utc>| self.tz.offset_from_utc_datetime(&t.naive_utc());
        let steady = offset_at(instant - MAX_SHIFT) == offset_at(instant + MAX_SHIFT);
        if steady {
            // No change of offset nearby: wall times and instants run in step.
            let next = self.wall_times_after(wall).next()?;
            return self.instants(next).into_iter().find(|t| *t > ms);
        }
        // Near a change, wall times a little before `wall` can fall after `ms` (the clock
        // went back) and wall times in a gap belong elsewhere: look at every wall time
        // within the largest shift on either side and keep the earliest instant after `ms`.
        let mut best: Option<i64> = None;
        for candidate in self.wall_times_after(wall - MAX_SHIFT) {
            if candidate > wall + MAX_SHIFT && best.is_some() {
                break;
            }
            for t in self.instants(candidate) {
                if t > ms && best.is_none_or(|b| t < b) {
                    best = Some(t);
                }
            }
        }
        best
    }

    /// The schedule's wall times strictly after `wall`, in order.
    fn wall_times_after(
        &self,
        wall: chrono::NaiveDateTime,
    ) -> impl Iterator<Item = chrono::NaiveDateTime> + '_ {
        self.schedule
            .after(&Utc.from_utc_datetime(&wall))
            .map(|t| t.naive_utc())
    }

    /// The instants at which a matching wall time fires. A wall time the clock passes
    /// twice (the hour repeated when daylight saving ends) fires twice for a schedule that
    /// runs every hour or more often, so it keeps its pace, and once, at its first
    /// occurrence, for a fixed hour. A wall time the clock skips (the hour lost when
    /// daylight saving starts) fires, for a fixed hour, at the instant it would have had
    /// under the offset before the change, so a daily job is not lost that day.
    fn instants(&self, wall: chrono::NaiveDateTime) -> Vec<i64> {
        use chrono::LocalResult;
        match self.tz.from_local_datetime(&wall) {
            LocalResult::Single(t) => vec![t.timestamp_millis()],
            LocalResult::Ambiguous(first, second) => {
                if self.fixed_hour {
                    vec![first.timestamp_millis()]
                } else {
                    vec![first.timestamp_millis(), second.timestamp_millis()]
                }
            }
            LocalResult::None if self.fixed_hour => {
                let before = self
                    .tz
                    .offset_from_local_datetime(&(wall - MAX_SHIFT))
                    .earliest()
                    .map(|o| o.fix());
                before
                    .map(|offset| (wall - offset).and_utc().timestamp_millis())
                    .into_iter()
                    .collect()
            }
            LocalResult::None => Vec::new(),
        }
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
    use proptest::prelude::*;

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

    /// The instants in 2026 at which a zone's offset changes.
    fn transitions(tz: Tz) -> Vec<i64> {
        let start = at("2026-01-01T00:00:00Z");
        let hour = 3_600_000;
        let offset = |ms: i64| {
            tz.offset_from_utc_datetime(
                &DateTime::<Utc>::from_timestamp_millis(ms)
                    .unwrap()
                    .naive_utc(),
            )
            .fix()
        };
        (0..365 * 24)
            .map(|h| start + h * hour)
            .filter(|t| offset(*t) != offset(t + hour))
            .map(|t| {
                // Down to the minute.
                (0..60)
                    .map(|m| t + m * 60_000)
                    .find(|m| offset(*m) != offset(t))
                    .unwrap_or(t + hour)
            })
            .collect()
    }

    #[test]
    fn around_every_dst_change_the_next_fire_time_is_later_and_each_tick_fires_once() {
        let zones = [
            "America/New_York",
            "Europe/Berlin",
            "Australia/Sydney",
            "Australia/Lord_Howe",
            "America/Santiago",
        ];
        let minute = 60_000;
        for zone in zones {
            let tz = parse_tz(zone).unwrap();
            let changes = transitions(tz);
            assert_eq!(changes.len(), 2, "{zone}: {changes:?}");
            for change in changes {
                let (from, to) = (change - 3 * 60 * minute, change + 3 * 60 * minute);
                for expr in ["* * * * *", "*/15 * * * *", "0 * * * *", "@hourly"] {
                    let c = Cron::parse(expr, tz).unwrap();
                    for t in (from..to).step_by(minute as usize) {
                        let next = c.next_after(t).unwrap();
                        assert!(next > t, "{zone} {expr}: next after {t} is {next}");
                    }
                    // An every-hour-or-more schedule keeps its pace in real time, the
                    // repeated hour included (an hourly job in a zone that shifts by half
                    // an hour can only keep it to within the shift).
                    let fires = fire_times(&c, from, to);
                    let period = c.period_after(from - 10 * 60 * minute).unwrap();
                    let shift = shift_at(tz, change);
                    for w in fires.windows(2) {
                        let off = (w[1] - w[0] - period).abs();
                        assert!(
                            off == 0 || (period > shift && off <= shift),
                            "{zone} {expr}: {w:?}"
                        );
                    }
                }
                for expr in ["30 1 * * *", "30 2 * * *", "0 3 * * *", "45 23 * * *"] {
                    let c = Cron::parse(expr, tz).unwrap();
                    for t in (from..to).step_by(minute as usize) {
                        let next = c.next_after(t).unwrap();
                        assert!(next > t, "{zone} {expr}: next after {t} is {next}");
                    }
                    // A fixed time fires once on every local day, even when the wall
                    // clock passes it twice or skips it.
                    let day = 24 * 60 * minute;
                    let days: Vec<chrono::NaiveDate> =
                        fire_times(&c, change - 2 * day, change + 2 * day)
                            .into_iter()
                            .map(|t| {
                                DateTime::<Utc>::from_timestamp_millis(t)
                                    .unwrap()
                                    .with_timezone(&tz)
                                    .date_naive()
                            })
                            .collect();
                    assert!(days.len() >= 3, "{zone} {expr}: {days:?}");
                    for w in days.windows(2) {
                        assert_eq!(w[0].succ_opt(), Some(w[1]), "{zone} {expr}: {days:?}");
                    }
                }
            }
        }
    }

    /// How far the zone's offset moves at `change`, in milliseconds.
    fn shift_at(tz: Tz, change: i64) -> i64 {
        let offset = |ms: i64| {
            tz.offset_from_utc_datetime(
                &DateTime::<Utc>::from_timestamp_millis(ms)
                    .unwrap()
                    .naive_utc(),
            )
            .fix()
            .local_minus_utc() as i64
        };
        (offset(change) - offset(change - 3_600_000)).abs() * 1000
    }

    /// What a scheduler moving from fire time to fire time fires within `[from, to)`.
    fn fire_times(c: &Cron, from: i64, to: i64) -> Vec<i64> {
        let mut fires = Vec::new();
        let mut t = from;
        while let Some(next) = c.next_after(t) {
            if next >= to {
                break;
            }
            assert!(next > t);
            fires.push(next);
            t = next;
        }
        fires
    }

    #[test]
    fn a_fixed_time_in_the_skipped_hour_still_fires_that_day() {
        let ny = parse_tz("America/New_York").unwrap();
        let c = Cron::parse("30 2 * * *", ny).unwrap();
        // 2026-03-08: clocks go from 02:00 EST straight to 03:00 EDT.
        assert_eq!(
            c.next_after(at("2026-03-08T05:00:00Z")),
            Some(at("2026-03-08T07:30:00Z"))
        );
        // 2026-11-01: 01:30 happens twice; a fixed 01:30 fires at the first.
        let c = Cron::parse("30 1 * * *", ny).unwrap();
        assert_eq!(
            c.next_after(at("2026-11-01T04:00:00Z")),
            Some(at("2026-11-01T05:30:00Z"))
        );
        assert_eq!(
            c.next_after(at("2026-11-01T05:30:00Z")),
            Some(at("2026-11-02T06:30:00Z"))
        );
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

    proptest! {
        #![proptest_config(crate::rules::fuzzing::config(1000))]

        /// Any expression parses or is refused in one line; a parsed one always moves on.
        #[test]
        fn cron_expressions_parse_or_refuse(
            expression in prop_oneof![
                crate::rules::fuzzing::text(),
                prop::collection::vec("(\\*|[0-9]{1,2}|[0-9]{1,2}-[0-9]{1,2}|\\*/[0-9]{1,2}|MON|jan)", 5..=7)
                    .prop_map(|f| f.join(" ")),
            ],
            at in 0i64..4_102_444_800_000,
            zone in prop::sample::select(vec!["UTC", "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu"]),
        ) {
            match Cron::parse(&expression, parse_tz(zone).unwrap()) {
                Ok(cron) => {
                    if let Some(next) = cron.next_after(at) {
                        prop_assert!(next > at);
                    }
                }
                Err(e) => prop_assert!(!e.to_string().contains('\n')),
            }
        }
    }
}
