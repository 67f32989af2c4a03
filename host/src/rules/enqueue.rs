//! What an enqueue may ask besides its job and payload — when it is due (`run_at` or
//! `delay`), its `priority`, its `max_attempts`, and `unique` — read and checked before
//! anything is written,
//! each refusal a fixed sentence naming the field; and the one rule of unique runs
//! ([`decide`]), which the SQLite store applies under the key's lock. The API, `host start`
//! and a guest's `jobs` calls all read their options here. On Postgres the rule is
//! `jobhost_enqueue_run` (`store::enqueue`), so an application's `jobhost.enqueue` in its
//! own transaction follows it too; the conformance tests hold both to the same outcomes.

use serde_json::{Map, Value};

/// The priority's bounds, in seconds of precedence.
pub const MAX_PRIORITY_S: i32 = 3600;
/// Longest delay a run may be queued with: a year.
pub const MAX_DELAY_MS: i64 = 365 * 24 * 3600 * 1000;
/// Furthest in the past a `run_at` may lie: a day (an older one is a mistake, not a
/// backlog to catch up).
pub const MAX_PAST_MS: i64 = 24 * 3600 * 1000;
/// Longest unique key (or a guest's dedup key or instance), in bytes, by the name rule.
pub const MAX_KEY_BYTES: usize = 200;
/// Most runs one batch (`POST /jobs/{job}/runs:batch`, a guest's `enqueue-all`) queues.
pub const MAX_BATCH: usize = 1000;

/// When a run is due, relative to the database's clock at the enqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Due {
    #[default]
    Now,
    /// This many milliseconds from now.
    Delay(i64),
    /// At this time (milliseconds since the Unix epoch).
    At(i64),
}

/// How long a unique key holds its run against another enqueue of the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum While {
    /// Until the run starts its first attempt.
    Queued,
    /// Until the run starts, and while an attempt of it runs (not while it waits for a
    /// retry, its next pass or its children).
    Active,
    /// Until the run ended, however it ends: retries, passes and waits included.
    UntilFinished,
    /// For this many milliseconds after the run was queued, whatever its state.
    Period(i64),
    /// For good, whatever the run's state: a guest's `dedup-key` (WIT `options`), one run
    /// per key as long as the run is kept. No start asks for it by name.
    Forever,
}

/// What an enqueue whose key is held does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnConflict {
    /// Answers with the run that holds the key (`joined`).
    #[default]
    Keep,
    /// Swaps the waiting run's payload for the new one (`replaced`).
    Replace,
    /// Moves the waiting run's due time to the new one's (`debounced`).
    Debounce,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unique {
    pub key: String,
    pub hold: While,
    pub on_conflict: OnConflict,
}

/// An enqueue's options, checked.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Options {
    pub due: Due,
    /// Seconds of precedence, -3600 to 3600 (see [`Options::claim_delay_ms`]).
    pub priority: i32,
    /// Attempts a pass of the run may use, fewer than its job's (see [`attempts_allowed`]).
    pub max_attempts: Option<u32>,
    pub unique: Option<Unique>,
}

impl Options {
    /// How many milliseconds after `now` the claim takes the run to be due: its due time
    /// moved `priority` seconds earlier. Claims take due runs of a tenant oldest due time
    /// first, tenants in turn, so a priority orders a tenant's own due runs and never lets
    /// one tenant overtake another's turn; a run with a priority may start up to that
    /// many seconds before its `run_at` or `delay`.
    pub fn claim_delay_ms(&self, now: i64) -> i64 {
        let due = match self.due {
            Due::Now => 0,
            Due::Delay(ms) => ms,
            Due::At(at) => at - now,
        };
        due - i64::from(self.priority) * 1000
    }

    /// Refuses a `max_attempts` over the job's own bound: a start may ask for fewer
    /// attempts than its job allows, never more (the job's `retries` is the operator's
    /// word on what a failure may cost).
    pub fn within_job(&self, job_retries: u32) -> Result<(), OptionError> {
        match self.max_attempts {
            Some(n) if n > job_retries.saturating_add(1) => {
                refuse("max_attempts", MAX_ATTEMPTS_BOUND)
            }
            _ => Ok(()),
        }
    }
}

/// A refusal of one option, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct OptionError {
    pub field: &'static str,
    pub reason: &'static str,
}

impl OptionError {
    /// The fixed reason a guest's `jobs` call is refused with (`invalid(...)`, listed in
    /// docs/failure-codes.md): the field, never the sentence.
    pub fn guest_reason(&self) -> &'static str {
        match self.field {
            "run_at" => "invalid-run-at",
            "delay" => "invalid-delay",
            "priority" => "invalid-priority",
            "max_attempts" => "invalid-max-attempts",
            "unique.key" => "invalid-key",
            "unique.while" => "invalid-hold",
            _ => "invalid-options",
        }
    }
}

fn refuse<T>(field: &'static str, reason: &'static str) -> Result<T, OptionError> {
    Err(OptionError { field, reason })
}

/// The option fields an enqueue body may carry beside `instance` and `payload`.
pub const FIELDS: [&str; 5] = ["run_at", "delay", "priority", "max_attempts", "unique"];

/// The refusal of a `max_attempts` outside its bound: at least 1, at most the job's own
/// attempts a pass (its `retries` + 1).
const MAX_ATTEMPTS_BOUND: &str = "an integer from 1 to the job's attempts a pass (its retries + 1)";

/// Reads the options of an enqueue body (an API request's, a `host start`'s), with the
/// database's clock `now` (milliseconds): fields outside [`FIELDS`] are the caller's.
pub fn from_json(body: &Map<String, Value>, now: i64) -> Result<Options, OptionError> {
    let due = match (body.get("run_at"), body.get("delay")) {
        (Some(_), Some(_)) => return refuse("run_at", "give run_at or delay, not both"),
        (Some(at), None) => Due::At(run_at(at, now)?),
        (None, Some(delay)) => Due::Delay(delay_ms(delay)?),
        (None, None) => Due::Now,
    };
    let priority = match body.get("priority") {
        None => 0,
        Some(p) => priority(p.as_i64())?,
    };
    let max_attempts = match body.get("max_attempts") {
        None => None,
        Some(n) => Some(max_attempts(n.as_u64())?),
    };
    let unique = body.get("unique").map(unique).transpose()?;
    Ok(Options {
        due,
        priority,
        max_attempts,
        unique,
    })
}

/// A guest's options as its `jobs` call gives them (WIT `start-options`, or an earlier
/// `options` whose `dedup-key` is a [`While::Forever`] key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    /// Milliseconds since the Unix epoch.
    pub run_at: Option<u64>,
    pub delay_ms: u64,
    pub priority: i32,
    pub max_attempts: Option<u32>,
    pub unique: Option<Unique>,
}

/// Checks a guest's options by the same bounds as [`from_json`], with the host's clock
/// `now` (milliseconds): a refusal names the field ([`OptionError::guest_reason`]).
pub fn from_guest(asked: &Asked, now: i64) -> Result<Options, OptionError> {
    let due = match (asked.run_at, asked.delay_ms) {
        (Some(_), 1..) => return refuse("run_at", "give run_at or delay, not both"),
        (Some(at), 0) => Due::At(run_at_ms(i64::try_from(at).unwrap_or(i64::MAX), now)?),
        (None, 0) => Due::Now,
        (None, ms) => Due::Delay(bounded_delay(i64::try_from(ms).ok())?),
    };
    let unique = match &asked.unique {
        None => None,
        Some(u) => Some(Unique {
            key: unique_key(Some(u.key.as_str()))?.to_string(),
            hold: match u.hold {
                While::Period(ms) => {
                    While::Period(period_ms(u64::try_from(ms).ok()).map_or_else(refuse_while, Ok)?)
                }
                hold => hold,
            },
            on_conflict: u.on_conflict,
        }),
    };
    Ok(Options {
        due,
        priority: priority(Some(i64::from(asked.priority)))?,
        max_attempts: asked
            .max_attempts
            .map(|n| max_attempts(Some(u64::from(n))))
            .transpose()?,
        unique,
    })
}

fn priority(p: Option<i64>) -> Result<i32, OptionError> {
    p.filter(|p| (-i64::from(MAX_PRIORITY_S)..=i64::from(MAX_PRIORITY_S)).contains(p))
        .map(|p| p as i32)
        .map_or_else(
            || refuse("priority", "an integer of seconds from -3600 to 3600"),
            Ok,
        )
}

fn max_attempts(n: Option<u64>) -> Result<u32, OptionError> {
    n.and_then(|n| u32::try_from(n).ok())
        .filter(|n| *n >= 1)
        .map_or_else(|| refuse("max_attempts", MAX_ATTEMPTS_BOUND), Ok)
}

/// How many attempts a pass of a run may use: its job's `retries` + 1, or the run's own
/// `max_attempts` (stored with the run) when that is fewer. The runner's retries and a
/// guest's `run.info` both count by it.
pub fn attempts_allowed(job_retries: u32, max_attempts: Option<i64>) -> u32 {
    let job = job_retries.saturating_add(1);
    match max_attempts.and_then(|n| u32::try_from(n).ok()) {
        Some(n) if (1..job).contains(&n) => n,
        _ => job,
    }
}

fn run_at(value: &Value, now: i64) -> Result<i64, OptionError> {
    let Some(at) = value
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
    else {
        return refuse("run_at", "an RFC 3339 time, e.g. 2026-12-06T12:00:00Z");
    };
    run_at_ms(at.timestamp_millis(), now)
}

fn run_at_ms(at: i64, now: i64) -> Result<i64, OptionError> {
    if at < now - MAX_PAST_MS {
        return refuse("run_at", "more than a day in the past");
    }
    if at > now + MAX_DELAY_MS {
        return refuse("run_at", "more than a year ahead");
    }
    Ok(at)
}

fn delay_ms(value: &Value) -> Result<i64, OptionError> {
    bounded_delay(
        value
            .as_str()
            .and_then(|t| super::units::parse_duration(t).ok())
            .and_then(|d| i64::try_from(d.as_millis()).ok()),
    )
}

fn bounded_delay(ms: Option<i64>) -> Result<i64, OptionError> {
    ms.filter(|ms| *ms <= MAX_DELAY_MS).map_or_else(
        || refuse("delay", "a duration of at most a year, e.g. 30s, 10m, 2h"),
        Ok,
    )
}

fn unique(value: &Value) -> Result<Unique, OptionError> {
    let Some(fields) = value.as_object() else {
        return refuse("unique", "an object with key, while and on_conflict");
    };
    if fields
        .keys()
        .any(|k| !["key", "while", "on_conflict"].contains(&k.as_str()))
    {
        return refuse("unique", "only key, while and on_conflict");
    }
    let key = unique_key(fields.get("key").and_then(Value::as_str))?;
    let hold = match fields.get("while") {
        None => While::UntilFinished,
        Some(w) => w
            .as_str()
            .and_then(parse_while)
            .map_or_else(refuse_while, Ok)?,
    };
    let on_conflict = match fields.get("on_conflict") {
        None => OnConflict::Keep,
        Some(c) => c.as_str().and_then(parse_on_conflict).map_or_else(
            || refuse("unique.on_conflict", "keep, replace or debounce"),
            Ok,
        )?,
    };
    Ok(Unique {
        key: key.to_string(),
        hold,
        on_conflict,
    })
}

fn unique_key(key: Option<&str>) -> Result<&str, OptionError> {
    key.filter(|k| super::name_rule::is_name(k, MAX_KEY_BYTES))
        .map_or_else(
            || {
                refuse(
                    "unique.key",
                    "1-200 bytes of characters that show as themselves: no controls or invisible marks",
                )
            },
            Ok,
        )
}

fn refuse_while<T>() -> Result<T, OptionError> {
    refuse(
        "unique.while",
        "queued, active, until-finished, or a period such as 1h",
    )
}

/// A `while` as written: a state, or a period over zero of at most a year.
pub fn parse_while(text: &str) -> Option<While> {
    Some(match text {
        "queued" => While::Queued,
        "active" => While::Active,
        "until-finished" => While::UntilFinished,
        period => While::Period(period_ms(
            super::units::parse_positive_duration(period)
                .ok()
                .and_then(|d| u64::try_from(d.as_millis()).ok()),
        )?),
    })
}

/// A period of a `while`: over zero, at most a year.
fn period_ms(ms: Option<u64>) -> Option<i64> {
    ms.and_then(|ms| i64::try_from(ms).ok())
        .filter(|ms| (1..=MAX_DELAY_MS).contains(ms))
}

pub fn parse_on_conflict(text: &str) -> Option<OnConflict> {
    Some(match text {
        "keep" => OnConflict::Keep,
        "replace" => OnConflict::Replace,
        "debounce" => OnConflict::Debounce,
        _ => return None,
    })
}

/// What happened to an enqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A new run was queued.
    Created,
    /// The run that holds the key (or, without `unique`, the live run of the job and
    /// instance) is the answer; nothing changed.
    Joined,
    /// The waiting run that holds the key took the new payload.
    Replaced,
    /// The waiting run that holds the key took the new due time.
    Debounced,
}

/// The run a unique key names, as the rule reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub status: String,
    /// It started an attempt once.
    pub started: bool,
    pub created_at: i64,
}

impl Holder {
    /// Queued and never started: a replace or a debounce may still change it.
    pub fn waiting(&self) -> bool {
        self.status == "queued" && !self.started
    }
}

/// The unique rule: what an enqueue of `unique` does when its key names `holder` (`None`:
/// no run, or one retention deleted), at the database's time `now`.
pub fn decide(unique: &Unique, holder: Option<&Holder>, now: i64) -> Outcome {
    let Some(holder) = holder else {
        return Outcome::Created;
    };
    let holds = match unique.hold {
        While::Queued => holder.waiting(),
        While::Active => holder.waiting() || holder.status == "running",
        While::UntilFinished => matches!(holder.status.as_str(), "queued" | "running"),
        While::Period(ms) => holder.created_at > now - ms,
        While::Forever => true,
    };
    match (holds, unique.on_conflict) {
        (false, _) => Outcome::Created,
        (true, OnConflict::Replace) if holder.waiting() => Outcome::Replaced,
        (true, OnConflict::Debounce) if holder.waiting() => Outcome::Debounced,
        (true, _) => Outcome::Joined,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: i64 = 1_800_000_000_000;

    fn options(body: Value) -> Result<Options, OptionError> {
        from_json(body.as_object().unwrap(), NOW)
    }

    fn field_of(body: Value) -> &'static str {
        options(body).unwrap_err().field
    }

    #[test]
    fn every_option_is_read_and_checked() {
        let read = options(json!({
            "delay": "30s", "priority": 10,
            "unique": {"key": "order-7", "while": "1h", "on_conflict": "debounce"}
        }))
        .unwrap();
        assert_eq!(read.due, Due::Delay(30_000));
        assert_eq!(read.claim_delay_ms(NOW), 20_000);
        assert_eq!(
            read.unique,
            Some(Unique {
                key: "order-7".into(),
                hold: While::Period(3_600_000),
                on_conflict: OnConflict::Debounce
            })
        );
        let attempts = options(json!({"max_attempts": 2})).unwrap();
        assert_eq!(attempts.max_attempts, Some(2));
        assert_eq!(attempts.within_job(1), Ok(()));
        assert_eq!(attempts.within_job(0).unwrap_err().field, "max_attempts");
        let at = options(json!({"run_at": "2027-01-15T08:00:00Z"})).unwrap();
        assert_eq!(at.due, Due::At(NOW));
        assert_eq!(
            options(json!({"unique": {"key": "k"}})).unwrap().unique,
            Some(Unique {
                key: "k".into(),
                hold: While::UntilFinished,
                on_conflict: OnConflict::Keep
            })
        );
    }

    #[test]
    fn each_bad_option_is_refused_naming_its_field() {
        assert_eq!(field_of(json!({"run_at": "yesterday"})), "run_at");
        assert_eq!(
            field_of(json!({"run_at": "2027-01-13T07:00:00Z"})),
            "run_at"
        );
        assert_eq!(
            field_of(json!({"run_at": "2029-01-15T08:00:00Z"})),
            "run_at"
        );
        assert_eq!(
            field_of(json!({"run_at": "2027-01-15T08:00:00Z", "delay": "1s"})),
            "run_at"
        );
        assert_eq!(field_of(json!({"delay": "soon"})), "delay");
        assert_eq!(field_of(json!({"delay": "400d"})), "delay");
        assert_eq!(field_of(json!({"priority": 3601})), "priority");
        assert_eq!(field_of(json!({"priority": "high"})), "priority");
        assert_eq!(field_of(json!({"max_attempts": 0})), "max_attempts");
        assert_eq!(field_of(json!({"max_attempts": -1})), "max_attempts");
        assert_eq!(field_of(json!({"max_attempts": "2"})), "max_attempts");
        assert_eq!(field_of(json!({"max_attempts": 1.5})), "max_attempts");
        assert_eq!(field_of(json!({"unique": "k"})), "unique");
        assert_eq!(field_of(json!({"unique": {"key": "k", "x": 1}})), "unique");
        assert_eq!(
            field_of(json!({"unique": {"key": "a\u{202e}b"}})),
            "unique.key"
        );
        assert_eq!(field_of(json!({"unique": {}})), "unique.key");
        assert_eq!(
            field_of(json!({"unique": {"key": "k", "while": "forever"}})),
            "unique.while"
        );
        assert_eq!(
            field_of(json!({"unique": {"key": "k", "while": "0s"}})),
            "unique.while"
        );
        assert_eq!(
            field_of(json!({"unique": {"key": "k", "on_conflict": "merge"}})),
            "unique.on_conflict"
        );
    }

    fn guest(asked: Asked) -> Result<Options, &'static str> {
        from_guest(&asked, NOW).map_err(|e| e.guest_reason())
    }

    fn asked() -> Asked {
        Asked {
            run_at: None,
            delay_ms: 0,
            priority: 0,
            max_attempts: None,
            unique: None,
        }
    }

    #[test]
    fn a_guests_options_are_checked_by_the_same_bounds_each_refusal_a_fixed_reason() {
        let at = (NOW + 60_000) as u64;
        let read = guest(Asked {
            run_at: Some(at),
            priority: -10,
            max_attempts: Some(2),
            unique: Some(Unique {
                key: "k".into(),
                hold: While::Period(1),
                on_conflict: OnConflict::Replace,
            }),
            ..asked()
        })
        .unwrap();
        assert_eq!(read.due, Due::At(NOW + 60_000));
        assert_eq!(read.claim_delay_ms(NOW), 70_000);
        assert_eq!(read.max_attempts, Some(2));
        let key = |key: &str, hold| Asked {
            unique: Some(Unique {
                key: key.into(),
                hold,
                on_conflict: OnConflict::Keep,
            }),
            ..asked()
        };
        let year = MAX_DELAY_MS as u64;
        for (bad, reason) in [
            (
                Asked {
                    run_at: Some(1),
                    ..asked()
                },
                "invalid-run-at",
            ),
            (
                Asked {
                    run_at: Some(at + year),
                    ..asked()
                },
                "invalid-run-at",
            ),
            (
                Asked {
                    run_at: Some(at),
                    delay_ms: 1,
                    ..asked()
                },
                "invalid-run-at",
            ),
            (
                Asked {
                    delay_ms: year + 1,
                    ..asked()
                },
                "invalid-delay",
            ),
            (
                Asked {
                    priority: 3601,
                    ..asked()
                },
                "invalid-priority",
            ),
            (
                Asked {
                    max_attempts: Some(0),
                    ..asked()
                },
                "invalid-max-attempts",
            ),
            (key("", While::Queued), "invalid-key"),
            (key("k", While::Period(0)), "invalid-hold"),
            (key("k", While::Period(MAX_DELAY_MS + 1)), "invalid-hold"),
        ] {
            assert_eq!(guest(bad.clone()), Err(reason), "{bad:?}");
        }
        assert_eq!(
            guest(key("k", While::Forever))
                .unwrap()
                .unique
                .unwrap()
                .hold,
            While::Forever
        );
    }

    #[test]
    fn a_runs_max_attempts_only_lowers_its_jobs_bound() {
        assert_eq!(attempts_allowed(3, None), 4);
        assert_eq!(attempts_allowed(3, Some(2)), 2);
        assert_eq!(attempts_allowed(3, Some(1)), 1);
        assert_eq!(attempts_allowed(3, Some(9)), 4, "never more than the job's");
        assert_eq!(attempts_allowed(3, Some(0)), 4, "a bad row counts as none");
        assert_eq!(attempts_allowed(u32::MAX, None), u32::MAX);
    }

    fn holder(status: &str, started: bool, age_ms: i64) -> Holder {
        Holder {
            status: status.into(),
            started,
            created_at: NOW - age_ms,
        }
    }

    fn decided(hold: While, on_conflict: OnConflict, h: Option<&Holder>) -> Outcome {
        let unique = Unique {
            key: "k".into(),
            hold,
            on_conflict,
        };
        decide(&unique, h, NOW)
    }

    #[test]
    fn each_while_holds_its_key_for_the_states_it_names() {
        use Outcome::*;
        let waiting = holder("queued", false, 0);
        let running = holder("running", true, 0);
        let between = holder("queued", true, 0);
        let ended = holder("succeeded", true, 0);
        let cases = [
            (While::Queued, [Joined, Created, Created, Created]),
            (While::Active, [Joined, Joined, Created, Created]),
            (While::UntilFinished, [Joined, Joined, Joined, Created]),
            (While::Period(60_000), [Joined, Joined, Joined, Joined]),
        ];
        for (hold, expected) in cases {
            let got = [&waiting, &running, &between, &ended]
                .map(|h| decided(hold, OnConflict::Keep, Some(h)));
            assert_eq!(got, expected, "{hold:?}");
        }
        let ended_long_ago = holder("succeeded", true, 10 * 24 * 3_600_000);
        assert_eq!(
            decided(While::Forever, OnConflict::Keep, Some(&ended_long_ago)),
            Joined,
            "a dedup key holds for good"
        );
        let old = holder("succeeded", true, 61_000);
        assert_eq!(
            decided(While::Period(60_000), OnConflict::Keep, Some(&old)),
            Created
        );
        assert_eq!(decided(While::Active, OnConflict::Keep, None), Created);
    }

    #[test]
    fn replace_and_debounce_change_only_a_run_that_has_not_started() {
        let waiting = holder("queued", false, 0);
        let running = holder("running", true, 0);
        for (policy, changed) in [
            (OnConflict::Replace, Outcome::Replaced),
            (OnConflict::Debounce, Outcome::Debounced),
        ] {
            assert_eq!(decided(While::Active, policy, Some(&waiting)), changed);
            assert_eq!(
                decided(While::Active, policy, Some(&running)),
                Outcome::Joined
            );
        }
    }
}
