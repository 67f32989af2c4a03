//! `host test`'s cases: what an author writes next to a job (`tests.toml`), and how a
//! finished run is held against it. Running each case on a database of its own is
//! `cli::cases`'s part; this module reads cases and compares (objects in `files`,
//! requests to mounts in `links`, which also serves a case's canned responses).
//!
//! ```toml
//! [[case]]
//! name = "records every item"
//! payload = { items = ["a", "b"] }
//! seed = ["INSERT INTO demo_items (run_id, item) VALUES ('old', 'z')"]
//! [case.expect]
//! status = "succeeded"            # or "failed"; with `code`, the failure code
//! attempts = 1
//! log = ["recording 2 items"]     # lines the last attempt's log contains
//! rows = { "SELECT item FROM demo_items ORDER BY item" = [["a"], ["b"], ["z"]] }
//! counters = { recorded = 2 }     # the run's counters afterwards, those named
//! [case.limits]                   # in place of the manifest's
//! timeout = "5s"
//! ```
//!
//! A case may also give the job other grants (`grants`, as in the manifest) or other
//! migrations (`migrations = "dir"`), place objects in collections and answer its calls
//! to mounts (see [`files`] and [`links`]).
//!
//! A case may instead replay a recorded attempt (`journal = "FILE"`, a journal `host runs
//! export` wrote): the job's component is run against the journal's answers, with nothing
//! live, and must reach what `expect` says (`status`, `code`, `error`, `log`) without its
//! calls diverging from the journal's — so a failure fixed once stays fixed. With
//! `expect.past_failure = true` it must instead get past the call where the attempt
//! failed: a fix that changes a later call still passes.

pub mod files;
pub mod links;

use crate::rules::grants::Grants;
use crate::store::RunRecord;
use files::{ExpectedFile, Placed};
use links::{Canned, ExpectedRequest};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// How a NULL cell is written in an expected row (TOML has no null).
pub const NULL: &str = "<null>";

#[derive(Debug, thiserror::Error)]
pub enum CasesError {
    #[error("the cases file is not valid: {0}")]
    Invalid(String),
    #[error("the cases file has no [[case]]")]
    Empty,
    #[error("two cases are named {0:?}: each name must be unique")]
    Duplicate(String),
    #[error("case {case:?}: {problem}")]
    Case { case: String, problem: String },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CasesFile {
    #[serde(rename = "case", default)]
    cases: Vec<Case>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    pub name: String,
    /// The manifest's job to run (default: its only job).
    pub job: Option<String>,
    /// The run's payload (default: the job's own from the manifest).
    pub payload: Option<toml::Value>,
    /// Statements run after the migrations, before the run.
    #[serde(default)]
    pub seed: Vec<String>,
    /// The job's grants in this case, in place of the manifest's.
    pub grants: Option<Grants>,
    /// The operator migrations applied first, in place of the manifest's (relative to
    /// the cases file).
    pub migrations: Option<PathBuf>,
    /// Objects placed before the run, by `"collection/name"`.
    #[serde(default)]
    pub files: BTreeMap<String, Placed>,
    /// Canned responses, by mount.
    #[serde(default)]
    pub links: BTreeMap<String, Vec<Canned>>,
    /// Limits for this case, in place of the manifest's.
    #[serde(default)]
    pub limits: CaseLimits,
    /// A journal to replay instead of a run (relative to the cases file).
    pub journal: Option<PathBuf>,
    #[serde(default)]
    pub expect: Expect,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseLimits {
    /// Each attempt's deadline, e.g. `"2s"`.
    pub timeout: Option<String>,
    /// The memory cap, e.g. `"32MiB"`.
    pub memory: Option<String>,
    /// The fuel budget per attempt.
    pub fuel: Option<u64>,
    /// Retries after a failed attempt.
    pub retries: Option<u32>,
    /// The first retry's delay, e.g. `"1s"` (doubling, as the manifest's `backoff`); by
    /// default a case retries at once: waiting out the backoff checks nothing.
    pub backoff: Option<String>,
}

impl CaseLimits {
    /// `spec` with these limits in place of its own, retried at once unless the case
    /// gives a `backoff`.
    pub fn apply(&self, spec: &mut crate::rules::job::JobSpec) -> Result<(), String> {
        use crate::rules::units::{parse_duration, parse_size};
        match &self.backoff {
            Some(backoff) => {
                spec.retry.backoff_base =
                    parse_duration(backoff).map_err(|e| format!("limits.backoff: {e}"))?;
            }
            None => {
                spec.retry.backoff_base = std::time::Duration::ZERO;
                spec.retry.backoff_max = std::time::Duration::ZERO;
            }
        }
        if let Some(timeout) = &self.timeout {
            spec.limits.timeout =
                parse_duration(timeout).map_err(|e| format!("limits.timeout: {e}"))?;
        }
        if let Some(memory) = &self.memory {
            spec.limits.memory = parse_size(memory).map_err(|e| format!("limits.memory: {e}"))?;
        }
        if let Some(fuel) = self.fuel {
            spec.limits.fuel = Some(fuel);
        }
        if let Some(retries) = self.retries {
            spec.retry.retries = retries;
        }
        spec.validate().map_err(|e| e.to_string())
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// The run's final status (default `succeeded`, unless a `code` is expected).
    pub status: Option<String>,
    /// The failure code it ended with.
    pub code: Option<String>,
    /// Text its error contains.
    pub error: Option<String>,
    pub attempts: Option<i64>,
    pub passes: Option<i64>,
    /// Lines the last attempt's log contains.
    #[serde(default)]
    pub log: Vec<String>,
    /// The run's counters afterwards (only those named).
    #[serde(default)]
    pub counters: BTreeMap<String, i64>,
    /// The cursor the run ended with.
    pub cursor: Option<toml::Value>,
    /// A query, and the rows it must return afterwards (in order).
    #[serde(default)]
    pub rows: BTreeMap<String, Vec<Vec<toml::Value>>>,
    /// Objects afterwards, by `"collection/name"`.
    #[serde(default)]
    pub files: BTreeMap<String, ExpectedFile>,
    /// Every request each mount got, in order.
    #[serde(default)]
    pub requests: BTreeMap<String, Vec<ExpectedRequest>>,
    /// A journal case: the component gets past the call where the recorded attempt
    /// failed — it ends, or asks past the journal's end, having had the same answers —
    /// which is what a replay can honestly check of a fix that changes a later call.
    #[serde(default)]
    pub past_failure: bool,
}

impl Case {
    /// The payload as the JSON text a run is given.
    pub fn payload_json(&self) -> Option<String> {
        self.payload
            .as_ref()
            .map(|p| serde_json::to_string(p).expect("TOML values are JSON"))
    }

    /// What the TOML cannot say wrong but the case can: objects not named
    /// `collection/name`, a canned response or an expectation that cannot hold.
    fn validate(&self) -> Result<(), String> {
        if self.journal.is_some() {
            let live = [
                (self.payload.is_some(), "payload"),
                (!self.seed.is_empty(), "seed"),
                (self.grants.is_some(), "grants"),
                (self.migrations.is_some(), "migrations"),
                (!self.files.is_empty(), "files"),
                (!self.links.is_empty(), "links"),
                (!self.expect.rows.is_empty(), "expect.rows"),
                (!self.expect.files.is_empty(), "expect.files"),
                (!self.expect.requests.is_empty(), "expect.requests"),
                (!self.expect.counters.is_empty(), "expect.counters"),
                (self.expect.cursor.is_some(), "expect.cursor"),
            ];
            if let Some((_, key)) = live.iter().find(|(given, _)| *given) {
                return Err(format!(
                    "`{key}` cannot go with `journal`: a journal case replays the recorded answers, and nothing is read or written"
                ));
            }
        }
        if self.expect.past_failure && self.journal.is_none() {
            return Err(
                "`expect.past_failure` needs `journal`: it is what a replay of a failed attempt says"
                    .into(),
            );
        }
        for key in self.files.keys().chain(self.expect.files.keys()) {
            files::split(key)?;
        }
        for (key, expected) in &self.expect.files {
            expected
                .validate()
                .map_err(|e| format!("expect.files.{key:?}: {e}"))?;
        }
        for (mount, canned) in &self.links {
            for (n, c) in canned.iter().enumerate() {
                c.validate()
                    .map_err(|e| format!("links.{mount}, response {}: {e}", n + 1))?;
            }
        }
        for (mount, wanted) in &self.expect.requests {
            for (n, w) in wanted.iter().enumerate() {
                w.validate()
                    .map_err(|e| format!("expect.requests.{mount}, request {}: {e}", n + 1))?;
            }
        }
        Ok(())
    }
}

/// Reads a cases file: every case named once.
pub fn parse(text: &str) -> Result<Vec<Case>, CasesError> {
    let file: CasesFile =
        toml::from_str(text).map_err(|e| CasesError::Invalid(e.message().to_string()))?;
    if file.cases.is_empty() {
        return Err(CasesError::Empty);
    }
    let mut seen = std::collections::BTreeSet::new();
    for case in &file.cases {
        if !seen.insert(case.name.as_str()) {
            return Err(CasesError::Duplicate(case.name.clone()));
        }
        case.validate().map_err(|problem| CasesError::Case {
            case: case.name.clone(),
            problem,
        })?;
    }
    Ok(file.cases)
}

/// One way a run did not match its case.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Mismatch {
    pub what: String,
    pub expected: String,
    pub actual: String,
}

/// What a finished run showed: its record, its last attempt's log, each expected
/// query's rows as JSON cells, each expected object, and the requests each mount got.
pub struct Observed<'a> {
    pub run: &'a RunRecord,
    pub log: &'a str,
    pub rows: &'a BTreeMap<String, Result<Vec<Vec<Value>>, String>>,
    pub files: &'a BTreeMap<String, Result<Option<files::Found>, String>>,
    pub requests: &'a BTreeMap<String, Vec<links::Recorded>>,
}

/// Every way `observed` differs from `expect`; none means the case passed.
pub fn check(expect: &Expect, observed: &Observed<'_>) -> Vec<Mismatch> {
    let mut mismatches = Vec::new();
    let mut differ = |what: &str, expected: String, actual: String| {
        if expected != actual {
            mismatches.push(Mismatch {
                what: what.to_string(),
                expected,
                actual,
            });
        }
    };
    let run = observed.run;
    let status = match (&expect.status, &expect.code) {
        (Some(status), _) => Some(status.clone()),
        // Getting past the failure may end in a call the journal cannot answer.
        (None, None) if expect.past_failure => None,
        (None, None) => Some("succeeded".to_string()),
        (None, Some(_)) => None,
    };
    if let Some(status) = status {
        differ("status", status, run.status.clone());
    }
    if let Some(code) = &expect.code {
        let actual = run.last_code.clone().unwrap_or_else(|| "(none)".into());
        differ("code", code.clone(), actual);
    }
    if let Some(error) = &expect.error {
        let actual = run.last_error.clone().unwrap_or_default();
        if !actual.contains(error.as_str()) {
            differ("error contains", error.clone(), actual);
        }
    }
    if let Some(attempts) = expect.attempts {
        differ("attempts", attempts.to_string(), run.attempts.to_string());
    }
    if let Some(passes) = expect.passes {
        differ("passes", passes.to_string(), run.pass.to_string());
    }
    if !expect.counters.is_empty() {
        let actual: BTreeMap<String, i64> = serde_json::from_str(&run.counters).unwrap_or_default();
        for (name, value) in &expect.counters {
            let found = actual
                .get(name)
                .map_or("(none)".to_string(), i64::to_string);
            differ(&format!("counter {name}"), value.to_string(), found);
        }
    }
    if let Some(cursor) = &expect.cursor {
        let expected = serde_json::to_value(cursor).expect("TOML values are JSON");
        let actual = run
            .cursor
            .as_deref()
            .and_then(|c| serde_json::from_str::<Value>(c).ok())
            .map_or("(none)".to_string(), |c| c.to_string());
        differ("cursor", expected.to_string(), actual);
    }
    for line in &expect.log {
        if !observed.log.contains(line.as_str()) {
            differ("log contains", line.clone(), "(not in the log)".into());
        }
    }
    for (query, rows) in &expect.rows {
        let expected: Vec<Vec<Value>> = rows
            .iter()
            .map(|row| row.iter().map(cell_of_toml).collect())
            .collect();
        let actual = match observed.rows.get(query) {
            Some(Ok(actual)) => show_rows(actual),
            Some(Err(error)) => format!("the query failed: {error}"),
            None => "(not run)".into(),
        };
        differ(&format!("rows of {query}"), show_rows(&expected), actual);
    }
    mismatches.extend(files::check(&expect.files, observed.files));
    mismatches.extend(links::check(&expect.requests, observed.requests));
    mismatches
}

/// An expected cell as the JSON a database cell reads as: `"<null>"` is NULL, a whole
/// number an integer.
fn cell_of_toml(value: &toml::Value) -> Value {
    match value {
        toml::Value::String(s) if s == NULL => Value::Null,
        other => serde_json::to_value(other).expect("TOML values are JSON"),
    }
}

fn show_rows(rows: &[Vec<Value>]) -> String {
    let cells = |row: &Vec<Value>| -> String {
        row.iter()
            .map(|c| match c {
                Value::Null => NULL.to_string(),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "[{}]",
        rows.iter()
            .map(|r| format!("[{}]", cells(r)))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(status: &str, code: Option<&str>, attempts: i64) -> RunRecord {
        RunRecord {
            id: "r".into(),
            job: "demo".into(),
            instance: "default".into(),
            tenant: "operator".into(),
            origin: "manual".into(),
            payload: "{}".into(),
            status: status.into(),
            pass: 1,
            cursor: None,
            counters: "{}".into(),
            attempts,
            failures: 0,
            generation: None,
            host: None,
            last_code: code.map(str::to_string),
            last_error: code.map(|_| "trap: unreachable".to_string()),
            component_digest: None,
            scheduled_for: None,
            rerun_of: None,
            next_attempt_at: 0,
            created_at: 0,
            started_at: None,
            finished_at: None,
            updated_at: 0,
            work_done: 0,
            defers: 0,
            trace_parent: None,
            ..RunRecord::default()
        }
    }

    const CASES: &str = r#"
        [[case]]
        name = "records"
        payload = { items = ["a"] }
        [case.expect]
        attempts = 1
        log = ["recording 1 items"]
        rows = { "SELECT item, n FROM t" = [["a", 1], ["b", "<null>"]] }

        [[case]]
        name = "panics"
        [case.expect]
        code = "trap"
        error = "unreachable"
    "#;

    #[test]
    fn a_run_that_matches_its_case_passes_and_one_that_does_not_says_how() {
        let cases = parse(CASES).unwrap();
        assert_eq!(cases[0].payload_json().unwrap(), r#"{"items":["a"]}"#);
        let rows = BTreeMap::from([(
            "SELECT item, n FROM t".to_string(),
            Ok(vec![
                vec![Value::from("a"), Value::from(1)],
                vec![Value::from("b"), Value::Null],
            ]),
        )]);
        let passed = run("succeeded", None, 1);
        let seen = Observed {
            run: &passed,
            log: "recording 1 items\n",
            rows: &rows,
            files: &BTreeMap::new(),
            requests: &BTreeMap::new(),
        };
        assert_eq!(check(&cases[0].expect, &seen), []);
        let retried = run("succeeded", None, 2);
        let short = BTreeMap::from([("SELECT item, n FROM t".to_string(), Ok(vec![]))]);
        let seen = Observed {
            run: &retried,
            log: "",
            rows: &short,
            files: &BTreeMap::new(),
            requests: &BTreeMap::new(),
        };
        let what: Vec<String> = check(&cases[0].expect, &seen)
            .into_iter()
            .map(|m| format!("{}: {} / {}", m.what, m.expected, m.actual))
            .collect();
        assert_eq!(
            what,
            [
                "attempts: 1 / 2",
                "log contains: recording 1 items / (not in the log)",
                "rows of SELECT item, n FROM t: [[\"a\", 1], [\"b\", <null>]] / []"
            ]
        );
        let trapped = run("failed", Some("trap"), 1);
        let none = BTreeMap::new();
        let seen = Observed {
            run: &trapped,
            log: "",
            rows: &none,
            files: &BTreeMap::new(),
            requests: &BTreeMap::new(),
        };
        assert_eq!(check(&cases[1].expect, &seen), []);
        // Status, the log line and the rows (the query was not run); not the attempts.
        assert_eq!(check(&cases[0].expect, &seen).len(), 3);
    }

    #[test]
    fn counters_and_the_cursor_are_held_against_the_case() {
        let case = &parse(
            "[[case]]\nname = \"c\"\n[case.expect]\ncursor = { after = 3 }\ncounters = { imported = 3 }\n",
        )
        .unwrap()[0];
        let mut done = run("succeeded", None, 1);
        done.counters = r#"{"imported":3,"other":1}"#.into();
        done.cursor = Some(r#"{"after":3}"#.into());
        let none = BTreeMap::new();
        let seen = Observed {
            run: &done,
            log: "",
            rows: &none,
            files: &BTreeMap::new(),
            requests: &BTreeMap::new(),
        };
        assert_eq!(check(&case.expect, &seen), []);
        done.counters = r#"{"other":1}"#.into();
        done.cursor = None;
        let seen = Observed {
            run: &done,
            log: "",
            rows: &none,
            files: &BTreeMap::new(),
            requests: &BTreeMap::new(),
        };
        let what: Vec<String> = check(&case.expect, &seen)
            .into_iter()
            .map(|m| format!("{}: {} / {}", m.what, m.expected, m.actual))
            .collect();
        assert_eq!(
            what,
            [
                "counter imported: 3 / (none)",
                "cursor: {\"after\":3} / (none)"
            ]
        );
    }

    #[test]
    fn a_cases_file_that_cannot_be_read_is_refused_in_words() {
        assert!(matches!(parse(""), Err(CasesError::Empty)));
        let twice = "[[case]]\nname = \"a\"\n[[case]]\nname = \"a\"\n";
        assert!(matches!(parse(twice), Err(CasesError::Duplicate(n)) if n == "a"));
        let unknown = "[[case]]\nname = \"a\"\n[case.expect]\nstatuss = \"failed\"\n";
        let error = parse(unknown).unwrap_err().to_string();
        assert!(error.contains("unknown field `statuss`"), "{error}");
    }
}
