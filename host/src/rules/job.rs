//! A job's resolved definition: what runs, under which limits, with which grants.

use crate::rules::grants::Grants;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum JobError {
    #[error(
        "invalid job name {0:?}: use 1-64 lower-case letters, digits, '-', '_' or '.', starting with a letter or digit"
    )]
    Name(String),
    #[error("payload refused: {0}")]
    Payload(crate::rules::json_rule::JsonRefusal),
    #[error("timeout must be at least 10ms")]
    TimeoutTooShort,
    #[error("memory cap must be at least 1MiB and at most 4GiB")]
    MemoryOutOfRange,
    #[error("max_queued must be at least 1")]
    MaxQueued,
    #[error("max_per_tenant must be at least 1")]
    MaxPerTenantZero,
    #[error("invalid instance key {0:?}: use 1-128 printable characters")]
    Instance(String),
    #[error("{0}")]
    Limits(#[from] crate::rules::claim_limits::LimitError),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    #[serde(with = "crate::rules::units::serde_duration")]
    pub timeout: Duration,
    /// CPU budget in Wasm fuel units; `None` means only the deadline bounds the attempt.
    pub fuel: Option<u64>,
    #[serde(with = "crate::rules::units::serde_size")]
    pub memory: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Duration::from_secs(30),
            fuel: None,
            memory: 64 << 20,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Extra attempts after the first failed one.
    pub retries: u32,
    #[serde(with = "crate::rules::units::serde_duration")]
    pub backoff_base: Duration,
    #[serde(with = "crate::rules::units::serde_duration")]
    pub backoff_max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            retries: 0,
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(300),
        }
    }
}

/// How a job's runs share the fleet. The claim keeps `sequential` and `limits`, and the statement that
/// queues runs `max_per_tenant` (both are stored with the job's registration, so every
/// host sees them); the runner keeps `max_defers`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flow {
    /// At most one run of the job (of any instance) running at a time, across the fleet:
    /// the others wait in the queue, unclaimed, without using an attempt.
    #[serde(default)]
    pub sequential: bool,
    /// How many times a run may end a pass with `defer`; one more ends it
    /// `too_many_defers`. `None`: [`DEFAULT_MAX_DEFERS`] (read through
    /// [`Flow::defers_allowed`]), so a run that defers forever still ends.
    #[serde(default)]
    pub max_defers: Option<u32>,
    /// At most this many runs of the job queued or running per tenant (across its
    /// instances); a new run over it does what `over_limit` says. `None`: no cap.
    #[serde(default)]
    pub max_per_tenant: Option<u32>,
    #[serde(default)]
    pub over_limit: OverLimit,
    /// At most this many runs of the job queued for one tenant (`backlog`); `None`:
    /// [`crate::rules::queue_caps::DEFAULT_MAX_QUEUED_PER_JOB`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_queued: Option<u64>,
    /// Each tenant's cap on its queued runs, as the manifest that registered the job set
    /// them: stored with the job, so every host (and `host start`) applies the same.
    #[serde(
        default,
        skip_serializing_if = "crate::rules::queue_caps::TenantCaps::is_empty"
    )]
    pub tenant_queued: crate::rules::queue_caps::TenantCaps,
    /// The claim's limits (`rate`, `concurrency`, per key): stored with the job's
    /// registration, so every host's claim applies the same.
    #[serde(
        default,
        skip_serializing_if = "crate::rules::claim_limits::ClaimLimits::is_empty"
    )]
    pub limits: crate::rules::claim_limits::ClaimLimits,
}

/// The defers a run may make when its job sets no `max_defers`: enough for any polling
/// job a person would write, few enough that a job deferring by mistake ends in hours,
/// not never.
pub const DEFAULT_MAX_DEFERS: u32 = 100;

impl Flow {
    /// The defers a run of the job may make; the one past them ends it `too_many_defers`.
    pub fn defers_allowed(&self) -> u32 {
        self.max_defers.unwrap_or(DEFAULT_MAX_DEFERS)
    }

    /// The caps new runs of the job for `tenant` are queued under.
    pub fn queue_caps(&self, tenant: &str) -> crate::rules::queue_caps::Caps {
        crate::rules::queue_caps::Caps {
            tenant: self.tenant_queued.of(tenant),
            job: self
                .max_queued
                .unwrap_or(crate::rules::queue_caps::DEFAULT_MAX_QUEUED_PER_JOB),
        }
    }
}

/// Most names [`known_jobs`] lists.
pub const KNOWN_JOBS_SHOWN: usize = 20;

/// The jobs there are, for an error about a job that is not one of them: their names,
/// sorted, at most [`KNOWN_JOBS_SHOWN`] and then how many more, so a typo shows at once
/// and a fleet of thousands of jobs does not flood the answer.
pub fn known_jobs<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let mut names: Vec<&str> = names.into_iter().collect();
    names.sort_unstable();
    names.dedup();
    match names.len() {
        0 => "no job is known".to_string(),
        n if n <= KNOWN_JOBS_SHOWN => format!("known jobs: {}", names.join(", ")),
        n => format!(
            "known jobs: {} and {} more",
            names[..KNOWN_JOBS_SHOWN].join(", "),
            n - KNOWN_JOBS_SHOWN
        ),
    }
}

/// What a run queued over its job's `max_per_tenant` does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OverLimit {
    /// It is not run: recorded skipped with code `tenant_limit`, and reported.
    #[default]
    Skip,
    /// It waits in the queue for a slot, each wait longer (jittered), using no attempt.
    Defer,
}

impl OverLimit {
    pub fn as_str(self) -> &'static str {
        match self {
            OverLimit::Skip => "skip",
            OverLimit::Defer => "defer",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    pub name: String,
    pub tenant: String,
    pub component: PathBuf,
    pub limits: Limits,
    pub retry: RetryPolicy,
    pub grants: Grants,
    /// The actions the job may name in `links` calls (and its tokens carry).
    #[serde(default)]
    pub actions: std::collections::BTreeSet<String>,
    /// Cron expression, if the job runs on a schedule.
    pub schedule: Option<String>,
    /// Payload of scheduled and kicked runs.
    pub payload: serde_json::Value,
    /// Each fire or kick queues one child run per active tenant, run as that tenant.
    #[serde(default)]
    pub per_tenant: bool,
    /// A new version of the job (component) queues one run when the fleet first
    /// registers it.
    #[serde(default)]
    pub run_on_boot: bool,
    /// The events each of which queues a run of the job (`events`).
    #[serde(default)]
    pub on: std::collections::BTreeSet<String>,
    /// The payload filter of some of those events: only a matching event queues a run.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub on_where: std::collections::BTreeMap<String, crate::rules::event_filter::Filter>,
    /// Absent from definitions registered before flow control.
    #[serde(default)]
    pub flow: Flow,
    /// The lane whose workers run the job: a host serves a lane with workers of its own,
    /// so one lane's runs never take another's slots.
    #[serde(default = "default_lane")]
    pub lane: String,
    /// What its attempts keep of their host calls, to be replayed (`journal`).
    #[serde(default)]
    pub recorder: crate::rules::record::Recorder,
    /// Which of its runs' endings go to which webhook (`rules::delivery`), written as the
    /// job's routes when it is registered.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub deliver: crate::rules::delivery::Routes,
}

/// The lane of jobs that name none; its workers are `--workers`.
pub const DEFAULT_LANE: &str = "default";

fn default_lane() -> String {
    DEFAULT_LANE.to_string()
}

impl JobSpec {
    pub fn validate(&self) -> Result<(), JobError> {
        validate_name(&self.name)?;
        if self.limits.timeout < Duration::from_millis(10) {
            return Err(JobError::TimeoutTooShort);
        }
        if !(1 << 20..=4 << 30).contains(&self.limits.memory) {
            return Err(JobError::MemoryOutOfRange);
        }
        if self.flow.max_queued == Some(0) {
            return Err(JobError::MaxQueued);
        }
        if self.flow.max_per_tenant == Some(0) {
            return Err(JobError::MaxPerTenantZero);
        }
        if self.flow.sequential && self.flow.limits.concurrency.is_some() {
            return Err(crate::rules::claim_limits::LimitError::SequentialAndConcurrency.into());
        }
        self.flow.limits.validate()?;
        validate_payload(&self.payload.to_string())?;
        Ok(())
    }
}

pub fn validate_name(name: &str) -> Result<(), JobError> {
    let ok = (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.".contains(c));
    if ok {
        Ok(())
    } else {
        Err(JobError::Name(name.to_string()))
    }
}

pub fn validate_instance(instance: &str) -> Result<(), JobError> {
    let ok = crate::rules::name_rule::is_name(instance, 128);
    if ok {
        Ok(())
    } else {
        Err(JobError::Instance(instance.to_string()))
    }
}

/// Checks a payload by the queue-safety rule, returning it in canonical form.
pub fn validate_payload(text: &str) -> Result<String, JobError> {
    crate::rules::json_rule::canonical(text.as_bytes(), crate::rules::json_rule::PAYLOAD)
        .map_err(JobError::Payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn an_unknown_jobs_error_lists_at_most_twenty_known_jobs() {
        assert_eq!(known_jobs([]), "no job is known");
        assert_eq!(
            known_jobs(["sync", "ledger", "sync"]),
            "known jobs: ledger, sync"
        );
        let many: Vec<String> = (0..23).map(|n| format!("job{n:02}")).collect();
        let listed = known_jobs(many.iter().map(String::as_str).rev());
        assert!(listed.starts_with("known jobs: job00, job01, "), "{listed}");
        assert!(listed.ends_with(", job19 and 3 more"), "{listed}");
        assert!(!listed.contains("job20"), "{listed}");
    }

    #[test]
    fn names() {
        for good in ["hello", "a", "nightly-report.v2", "0day_sync"] {
            assert!(validate_name(good).is_ok(), "{good}");
        }
        for bad in ["", "Hello", "-x", "a b", "x/y", &"a".repeat(65)] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn payloads() {
        assert_eq!(validate_payload(r#"{ "a" : 1 }"#).unwrap(), r#"{"a":1}"#);
        assert!(matches!(validate_payload("{"), Err(JobError::Payload(_))));
        let big = format!(
            "\"{}\"",
            "x".repeat(crate::rules::json_rule::PAYLOAD.max_bytes)
        );
        let refused = validate_payload(&big).unwrap_err().to_string();
        assert!(refused.contains("the limit is 262144"), "{refused}");
        let nan = validate_payload(r#"{"a": [1, NaN]}"#)
            .unwrap_err()
            .to_string();
        assert!(nan.contains("$.a[1]"), "{nan}");
    }

    proptest! {
        #![proptest_config(crate::rules::fuzzing::config(2000))]

        /// Any text is a payload or a clear refusal; an accepted payload is canonical JSON.
        #[test]
        fn payloads_are_json_or_refused(text in prop_oneof![
            crate::rules::fuzzing::text(),
            any::<u8>().prop_map(|n| format!("{}1{}", "[".repeat(n as usize), "]".repeat(n as usize))),
            Just("{\"a\": NaN}".to_string()),
            Just("\"\\ud800\"".to_string()),
        ]) {
            match validate_payload(&text) {
                Ok(canonical) => {
                    let value: serde_json::Value = serde_json::from_str(&canonical).unwrap();
                    prop_assert_eq!(validate_payload(&canonical), Ok(value.to_string()));
                }
                Err(e) => prop_assert!(!e.to_string().contains('\n')),
            }
        }

        #[test]
        fn names_and_instances_are_valid_or_refused(text in crate::rules::fuzzing::text()) {
            if validate_name(&text).is_ok() {
                prop_assert!(text.len() <= 64 && !text.is_empty());
            }
            if validate_instance(&text).is_ok() {
                prop_assert!(text.chars().all(crate::rules::name_rule::allowed));
            }
        }
    }
}
