//! The fixed failure codes: the only failure text that logs, reports and metrics carry.
//!
//! Every code is listed once, in [`FailureCode::ALL`], with the sentence that documents it;
//! `host codes` prints that table and `docs/failure-codes.md` mirrors it (a test keeps the
//! two in step). A guest's own error text is never a code: it is kept, truncated, on the
//! run's record only.

use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailureCode {
    Timeout,
    OutOfFuel,
    MemoryLimit,
    ResourceLimit,
    Trap,
    HandlerFailed,
    Unrecoverable,
    InvalidOutcome,
    LeaseLost,
    CapabilityRefused,
    QueryRefused,
    DriverFailed,
    RecordFailed,
    Crashed,
    Cancelled,
    StepReused,
    TooManyDefers,
    TenantLimit,
    QuotaExceeded,
    PathRefused,
    CancelledByOperator,
    TenantDisabled,
    RunLimit,
    ChildFailed,
    ParentFailed,
    InvalidDefer,
    QueueFull,
    FamilyTooDeep,
    Orphaned,
}

impl FailureCode {
    /// Every code with its meaning: the single place they are documented.
    pub const ALL: [(FailureCode, &'static str); 29] = [
        (
            FailureCode::Timeout,
            "the attempt ran past its deadline and was stopped (epoch interruption or a cancelled host call)",
        ),
        (
            FailureCode::OutOfFuel,
            "the attempt used up its fuel (CPU) budget",
        ),
        (
            FailureCode::MemoryLimit,
            "the guest tried to grow its memory past the job's cap",
        ),
        (
            FailureCode::ResourceLimit,
            "the guest held more host resources (handles: streams, transactions, uploads) than an attempt may",
        ),
        (
            FailureCode::Trap,
            "the guest trapped (panic, unreachable, stack overflow, ...)",
        ),
        (
            FailureCode::HandlerFailed,
            "the handler returned `failed`; the run may retry",
        ),
        (
            FailureCode::Unrecoverable,
            "the handler returned `unrecoverable` (or its payload did not parse); never retried",
        ),
        (
            FailureCode::InvalidOutcome,
            "the handler returned an outcome the host cannot keep (a cursor that is not JSON, or too large)",
        ),
        (
            FailureCode::LeaseLost,
            "the attempt's lease generation was superseded or past its deadline: nothing it wrote afterwards committed",
        ),
        (
            FailureCode::CapabilityRefused,
            "the guest called a capability it was not granted, and failed",
        ),
        (
            FailureCode::QueryRefused,
            "the database refused a guest statement (not granted, forbidden or failed), and the guest failed; not retried when the statement or the grant is at fault",
        ),
        (
            FailureCode::DriverFailed,
            "the host could not reach its database during the attempt",
        ),
        (
            FailureCode::RecordFailed,
            "the database refused to store what the attempt handed back; its output was dropped and the run ended",
        ),
        (
            FailureCode::Crashed,
            "the host running the run stopped before finishing it; found when its lease expired",
        ),
        (
            FailureCode::Cancelled,
            "the host shut down and cancelled the attempt after the grace period",
        ),
        (
            FailureCode::StepReused,
            "the guest reached one step name twice in one attempt (a bug in the job); never retried",
        ),
        (
            FailureCode::TooManyDefers,
            "the handler returned `defer` once more than its job's `max_defers` allows; never retried",
        ),
        (
            FailureCode::TenantLimit,
            "the run was not queued: its job already had `max_per_tenant` runs queued or running for its tenant (policy `skip`)",
        ),
        (
            FailureCode::QuotaExceeded,
            "the run was not started: its tenant used its fuel or time quota for the last hour (policy `fail`)",
        ),
        (
            FailureCode::PathRefused,
            "a files call met a symbolic link (or a special file) under a local collection and was refused; the guest failed, and the operator was told",
        ),
        (
            FailureCode::CancelledByOperator,
            "an operator cancelled the run: its lease moved on in the cancelling transaction, so nothing the attempt wrote afterwards committed; never retried",
        ),
        (
            FailureCode::TenantDisabled,
            "the run was not started: its tenant was disabled while it waited in the queue; recorded `skipped`",
        ),
        (
            FailureCode::RunLimit,
            "the attempt tried to start more runs (10 000), or runs with more payload (32 MiB), than an attempt may; the call was refused and the guest failed; never retried",
        ),
        (
            FailureCode::ChildFailed,
            "a child the run waited for with policy `fail` failed, crashed or was cancelled: the run failed without its next pass, and its unfinished children were cancelled",
        ),
        (
            FailureCode::ParentFailed,
            "the run's parent failed or was cancelled before the run ended: it was cancelled (a detached run never is); never retried",
        ),
        (
            FailureCode::InvalidDefer,
            "the handler returned `defer` with a delay the host refuses (zero, or over 7 days); never retried",
        ),
        (
            FailureCode::QueueFull,
            "the attempt tried to queue runs past its tenant's or the started job's `max_queued` (`invalid(queue-full)`), and failed; nothing was queued by that call",
        ),
        (
            FailureCode::FamilyTooDeep,
            "the attempt tried to start a run deeper in its family than 16 (a child of a child ...; `invalid(family-too-deep)`), and failed; never retried",
        ),
        (
            FailureCode::Orphaned,
            "the run waited (queued, retrying, delayed, or waiting for its children) when its job was orphaned: no serving host registered the job within the orphan grace; recorded `skipped`",
        ),
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FailureCode::Timeout => "timeout",
            FailureCode::OutOfFuel => "out_of_fuel",
            FailureCode::MemoryLimit => "memory_limit",
            FailureCode::ResourceLimit => "resource_limit",
            FailureCode::Trap => "trap",
            FailureCode::HandlerFailed => "handler_failed",
            FailureCode::Unrecoverable => "unrecoverable",
            FailureCode::InvalidOutcome => "invalid_outcome",
            FailureCode::LeaseLost => "lease_lost",
            FailureCode::CapabilityRefused => "capability_refused",
            FailureCode::QueryRefused => "query_refused",
            FailureCode::DriverFailed => "driver_failed",
            FailureCode::RecordFailed => "record_failed",
            FailureCode::Crashed => "crashed",
            FailureCode::Cancelled => "cancelled",
            FailureCode::StepReused => "step_reused",
            FailureCode::TooManyDefers => "too_many_defers",
            FailureCode::TenantLimit => "tenant_limit",
            FailureCode::QuotaExceeded => "quota_exceeded",
            FailureCode::PathRefused => "path_refused",
            FailureCode::CancelledByOperator => "cancelled_by_operator",
            FailureCode::TenantDisabled => "tenant_disabled",
            FailureCode::RunLimit => "run_limit",
            FailureCode::ChildFailed => "child_failed",
            FailureCode::ParentFailed => "parent_failed",
            FailureCode::InvalidDefer => "invalid_defer",
            FailureCode::QueueFull => "queue_full",
            FailureCode::FamilyTooDeep => "family_too_deep",
            FailureCode::Orphaned => "orphaned",
        }
    }

    pub fn parse(code: &str) -> Option<FailureCode> {
        Self::ALL
            .iter()
            .map(|(c, _)| *c)
            .find(|c| c.as_str() == code)
    }

    /// A run's ending decided outside its attempt — an operator's cancel, or its family's
    /// end — which stops an attempt still running: the attempt fails with the same code.
    pub fn ends_from_outside(self) -> bool {
        matches!(
            self,
            FailureCode::CancelledByOperator | FailureCode::ParentFailed | FailureCode::ChildFailed
        )
    }

    /// The run ends `cancelled` with this code, rather than `failed`.
    pub fn cancels(self) -> bool {
        matches!(
            self,
            FailureCode::CancelledByOperator | FailureCode::ParentFailed
        )
    }

    /// Whether the run is tried again after this code, as `host codes --json` says it:
    /// `yes`, `never`, or `when-transient` for a refusal the runner retries only if the
    /// next attempt could meet another answer (`AttemptFailure::deterministic`).
    pub fn retried(self) -> &'static str {
        match self {
            FailureCode::QueryRefused => "when-transient",
            code if code.is_retryable() => "yes",
            _ => "never",
        }
    }

    /// Whether another attempt could succeed. `lease_lost` is retried only in the sense that
    /// the retry must first renew the lease, which fails if the lease was superseded.
    pub fn is_retryable(self) -> bool {
        !matches!(
            self,
            FailureCode::Unrecoverable
                | FailureCode::CapabilityRefused
                | FailureCode::InvalidOutcome
                | FailureCode::RecordFailed
                | FailureCode::Cancelled
                | FailureCode::StepReused
                | FailureCode::TooManyDefers
                | FailureCode::TenantLimit
                | FailureCode::QuotaExceeded
                | FailureCode::CancelledByOperator
                | FailureCode::TenantDisabled
                | FailureCode::RunLimit
                | FailureCode::ChildFailed
                | FailureCode::ParentFailed
                | FailureCode::InvalidDefer
                | FailureCode::FamilyTooDeep
                | FailureCode::Orphaned
        )
    }
}

impl fmt::Display for FailureCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_query_is_retried_only_when_it_may_not_recur() {
        assert_eq!(FailureCode::QueryRefused.retried(), "when-transient");
        assert_eq!(FailureCode::Timeout.retried(), "yes");
        assert_eq!(FailureCode::Unrecoverable.retried(), "never");
    }

    #[test]
    fn codes_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for (code, doc) in FailureCode::ALL {
            assert!(seen.insert(code.as_str()), "duplicate {code}");
            assert_eq!(FailureCode::parse(code.as_str()), Some(code));
            assert!(!doc.is_empty());
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
        }
        assert_eq!(FailureCode::parse("nope"), None);
    }

    #[test]
    fn docs_list_every_code() {
        let doc = include_str!("../../../docs/failure-codes.md");
        for (code, _) in FailureCode::ALL {
            assert!(
                doc.contains(&format!("`{}`", code.as_str())),
                "docs/failure-codes.md does not document `{code}`"
            );
        }
    }
}
