//! Families of runs: what a parent's children lead to, decided by one sweep every host
//! runs (`sweep`, every [`SWEEP_EVERY`] while it serves).
//!
//! - A parent that waits (its pass called `jobs.wait-for-children` and ended with its next
//!   pass queued) sleeps queued, its lease parked, due at no time. Once every attached
//!   child its pass started has ended, it is made due: its next pass reads how they ended
//!   (`run.children`). With policy `fail`, the first child that failed, crashed or was
//!   cancelled ends the parent `failed` (`child_failed`) at once, without its next pass.
//! - A parent that failed, crashed or was cancelled takes its unfinished attached children
//!   with it: they are cancelled as an operator's cancel is — fenced, so nothing a
//!   running child writes afterwards commits — with code `parent_failed`. Detached
//!   children are never waited for nor cancelled.
//!
//! - A run that sleeps waiting for a signal whose send came while its waiting pass still
//!   ran (the send found it running, so woke nothing) is made due: the sweep reads the
//!   unread signals (`Store::wake_signalled`), so no signal waits for its timeout.
//!
//! Every step is a conditional write that a second host's sweep (or a repeat of this
//! one) finds done, so hosts sweep side by side without coordinating. The sweep reads
//! only the runs marked as having a family to look after (`family` = 1, a partial index).

use crate::rules::failure::FailureCode;
use crate::runs::controls::{Actor, Controls, Ending};
use crate::runs::metrics::Metrics;
use crate::runs::runner::Runner;
use crate::store::family::FamilyRow;
use crate::store::{ReportKind, RunStatus, Store, StoreError};
use std::time::Duration;

/// How often a serving host sweeps.
pub const SWEEP_EVERY: Duration = Duration::from_millis(250);
/// Families one sweep looks at; the rest wait for the next.
const FAMILIES_PER_SWEEP: i64 = 500;
/// Children one sweep cancels per ended parent (in transactions of `controls::BATCH`).
const CANCELS_PER_PARENT: i64 = 1000;

const CHILD_FAILED: Ending = Ending {
    status: RunStatus::Failed,
    code: FailureCode::ChildFailed,
    report: ReportKind::RunFailed,
    by_operator: false,
};

const PARENT_FAILED: Ending = Ending {
    status: RunStatus::Cancelled,
    code: FailureCode::ParentFailed,
    report: ReportKind::Cancelled,
    by_operator: false,
};

/// What one sweep did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    pub woken: usize,
    /// Runs woken by a signal that came before their wait was committed.
    pub signalled: u64,
    pub failed: usize,
    pub cancelled: usize,
}

/// What a waiting parent's children lead to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Wait,
    Wake,
    Fail,
}

/// The rule: with policy `fail` a failed, crashed or cancelled child fails the parent;
/// otherwise the parent wakes once none is queued or running.
fn verdict(policy: &str, tally: &[(String, i64)]) -> Verdict {
    let count = |statuses: &[RunStatus]| -> i64 {
        tally
            .iter()
            .filter(|(s, _)| statuses.iter().any(|x| x.as_str() == s))
            .map(|(_, n)| n)
            .sum()
    };
    let failed = count(&[RunStatus::Failed, RunStatus::Crashed, RunStatus::Cancelled]);
    let unfinished = count(&[RunStatus::Queued, RunStatus::Running]);
    if policy == "fail" && failed > 0 {
        Verdict::Fail
    } else if unfinished == 0 {
        Verdict::Wake
    } else {
        Verdict::Wait
    }
}

/// Whether a run in `status` takes its unfinished children with it.
fn takes_children(status: &str) -> bool {
    [RunStatus::Failed, RunStatus::Crashed, RunStatus::Cancelled]
        .iter()
        .any(|s| s.as_str() == status)
}

/// One sweep over the families (see the module's rules).
pub async fn sweep(
    store: &Store,
    metrics: &Metrics,
    runner: Option<&Runner>,
) -> Result<Swept, StoreError> {
    let controls = Controls {
        store,
        metrics,
        runner,
    };
    let operator = Actor { tenant: None };
    let mut swept = Swept {
        signalled: store.wake_signalled(FAMILIES_PER_SWEEP).await?,
        ..Swept::default()
    };
    // On SQLite a cancel recorded in the cancel book ends its run already (its row
    // follows): its children go at once, not once the row is written.
    let recorded: std::collections::BTreeMap<String, String> = store
        .recorded_cancels()
        .await?
        .into_iter()
        .map(|mark| (mark.run_id, mark.status))
        .collect();
    for mut row in store.family_rows(FAMILIES_PER_SWEEP).await? {
        if let Some(status) = recorded.get(&row.id)
            && RunStatus::parse(&row.status).is_some_and(|s| !s.is_terminal())
        {
            row.status = status.clone();
        }
        match waiting(&row) {
            Some((pass, policy)) => {
                let tally = store.children_tally(&row.id, pass).await?;
                match verdict(policy, &tally) {
                    Verdict::Wait => {}
                    Verdict::Wake => {
                        if store.wake_parent(&row.id).await? {
                            swept.woken += 1;
                            tracing::debug!(run_id = %row.id, "parent woken: its children ended");
                        }
                    }
                    Verdict::Fail => {
                        let Some(parent) = store.get_run(&row.id).await? else {
                            continue;
                        };
                        let ended = controls
                            .end_batch(operator, &[parent], CHILD_FAILED)
                            .await?;
                        swept.failed += ended.iter().flatten().count();
                    }
                }
            }
            None if takes_children(&row.status) => {
                let children = store
                    .unfinished_children(&row.id, CANCELS_PER_PARENT)
                    .await?;
                if children.is_empty() {
                    store.family_settled(&row.id).await?;
                    continue;
                }
                for batch in children.chunks(crate::runs::controls::BATCH) {
                    let ended = controls.end_batch(operator, batch, PARENT_FAILED).await?;
                    swept.cancelled += ended.iter().flatten().count();
                }
            }
            None => store.family_settled(&row.id).await?,
        }
    }
    Ok(swept)
}

/// The pass a sleeping parent waits in, and its policy.
fn waiting(row: &FamilyRow) -> Option<(i64, &str)> {
    let pass = row.wait_pass.filter(|p| *p < row.pass)?;
    let policy = row.wait_policy.as_deref()?;
    (row.status == RunStatus::Queued.as_str()).then_some((pass, policy))
}

/// Sweeps every [`SWEEP_EVERY`] until `stop`; a sweep that fails is logged (by its
/// fixed kind, never the driver's text) and tried again at the next tick.
pub async fn keep_sweeping(
    runner: std::sync::Arc<Runner>,
    metrics: std::sync::Arc<Metrics>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(SWEEP_EVERY) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        match sweep(runner.store(), &metrics, Some(&runner)).await {
            Ok(swept) if swept != Swept::default() => {
                tracing::debug!(
                    woken = swept.woken,
                    signalled = swept.signalled,
                    failed = swept.failed,
                    cancelled = swept.cancelled,
                    "family sweep"
                );
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(code = "driver_failed", error = %e, "family sweep failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(pairs: &[(&str, i64)]) -> Vec<(String, i64)> {
        pairs.iter().map(|(s, n)| (s.to_string(), *n)).collect()
    }

    #[test]
    fn a_parent_wakes_once_no_child_is_left_queued_or_running() {
        let live = tally(&[("succeeded", 9), ("running", 1)]);
        assert_eq!(verdict("continue", &live), Verdict::Wait);
        assert_eq!(verdict("fail", &live), Verdict::Wait);
        let ended = tally(&[("succeeded", 9), ("skipped", 1)]);
        assert_eq!(verdict("continue", &ended), Verdict::Wake);
        assert_eq!(verdict("fail", &ended), Verdict::Wake);
        // No children at all: nothing to wait for.
        assert_eq!(verdict("fail", &[]), Verdict::Wake);
    }

    #[test]
    fn policy_fail_fails_at_the_first_bad_child_and_continue_waits_for_all() {
        for bad in ["failed", "crashed", "cancelled"] {
            let one_bad = tally(&[("queued", 5), (bad, 1)]);
            assert_eq!(verdict("fail", &one_bad), Verdict::Fail, "{bad}");
            assert_eq!(verdict("continue", &one_bad), Verdict::Wait, "{bad}");
            let all_ended = tally(&[("succeeded", 5), (bad, 1)]);
            assert_eq!(verdict("continue", &all_ended), Verdict::Wake, "{bad}");
        }
    }

    #[test]
    fn only_a_sleeping_parent_waits_and_only_a_failed_one_takes_its_children() {
        let row = |status: &str, pass, wait_pass| FamilyRow {
            id: "p".into(),
            status: status.into(),
            pass,
            wait_pass,
            wait_policy: Some("fail".into()),
        };
        assert_eq!(waiting(&row("queued", 2, Some(1))), Some((1, "fail")));
        // Still running the pass that asked to wait, or retrying it after a failure.
        assert_eq!(waiting(&row("running", 1, Some(1))), None);
        assert_eq!(waiting(&row("queued", 1, Some(1))), None);
        assert_eq!(waiting(&row("queued", 2, None)), None);
        assert!(takes_children("failed") && takes_children("crashed"));
        assert!(takes_children("cancelled"));
        assert!(!takes_children("succeeded") && !takes_children("skipped"));
    }
}
