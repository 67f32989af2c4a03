//! Re-executing an attempt from its journal: a fresh sandbox with no capability live,
//! each import answered from the journal in order, nothing written anywhere. What it
//! gives back — the log, the outcome, a trap's frames, where a rebuilt component's calls
//! diverge — is what the author needs from a failure they cannot reproduce.

use super::file::{JournalFile, log_digest};
use super::{Journal, Stop};
use crate::rules::failure::FailureCode;
use crate::sandbox::capability::Capabilities;
use crate::sandbox::engine::attempt::Execution;
use crate::sandbox::engine::output::AttemptLog;
use crate::sandbox::engine::state::GuestState;
use crate::sandbox::engine::{Engine, Loaded, MAX_LOG_BYTES};
use serde::Serialize;
use std::time::Duration;
use tokio::time::Instant;

/// How long a replay may run beyond the original attempt's timeout (it waits for no
/// database or service, but sleeps as long as the guest slept).
const REPLAY_SLACK: Duration = Duration::from_secs(10);
/// The longest a replay runs, whatever its journal says the attempt's timeout was.
const MAX_REPLAY: Duration = Duration::from_secs(24 * 3600);

/// Why a journal cannot be replayed with a component.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(
        "the journal was recorded with component {recorded}, not this one ({given}): give the component with --job to replay it anyway"
    )]
    OtherComponent { recorded: String, given: String },
}

/// What a replay did.
#[derive(Debug, Clone, Serialize)]
pub struct Replayed {
    /// `succeeded` or `failed`.
    pub status: &'static str,
    pub outcome: Option<&'static str>,
    pub code: Option<&'static str>,
    /// The guest's message, or the trap and the guest's frames.
    pub message: Option<String>,
    pub log: String,
    pub fuel_used: u64,
    /// Where and why the replay stopped before the guest ended, if it did.
    pub stopped: Option<Stop>,
    /// The journal's calls the replay answered, and how many it holds.
    pub calls_answered: usize,
    pub calls_recorded: usize,
    /// What the original attempt was stopped by, when the replay ends where it did (a
    /// deadline or a cancel leaves no trace in the guest: only the journal's end says so).
    pub original_code: Option<String>,
    /// Whether the replay ended as the original attempt did: same code, log and fuel
    /// (fuel only where both the attempt and the replay metered it: `fuel_metered`).
    pub same: Same,
    pub fuel_metered: bool,
    /// The replay ended where the original attempt was stopped from outside, after the
    /// fuel it used: its `code` is the original's.
    pub at_original_stop: bool,
    /// For a failed attempt, what the replay says of its failure (`None` for an attempt
    /// that succeeded: there is no failure to get past).
    pub verdict: Option<Verdict>,
}

/// What a replay says about the failure of the attempt it replays: the author's question
/// after a fix ("does it get past where it failed?"), answered only as far as the journal
/// can — answered from the journal, a component that asks what the original did not
/// cannot be followed further.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Verdict {
    /// It got every answer it asked for of those the original got before failing, and
    /// went on: it ended (`ended`: its outcome, after `answered` of the calls) or asked
    /// for a call past the journal's end (`then`).
    GetsPast {
        failed_after: usize,
        answered: usize,
        ended: Option<String>,
        then: Option<String>,
    },
    /// It failed with the original's code, against the same answers.
    FailsAgain { code: String },
    /// It failed otherwise against the same answers.
    FailsDifferently { code: String, original: String },
    /// It asked at `call` what the original did not, before the original failed: from
    /// there on the journal has no answers for it, so the replay cannot tell.
    Diverged {
        call: usize,
        failed_after: usize,
        original: String,
        fix: String,
    },
    /// The journal stops before the original's failure (cut in flight, or at its cap).
    CannotTell { stop: String },
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let calls = |n: &usize| format!("{n} call{}", if *n == 1 { "" } else { "s" });
        match self {
            Verdict::GetsPast {
                failed_after,
                answered,
                ended,
                then,
            } => {
                write!(
                    f,
                    "gets past the failure: the original failed after {}",
                    calls(failed_after)
                )?;
                match (ended, then) {
                    (Some(ended), _) if answered < failed_after => {
                        write!(f, "; this component ends {ended} after {answered} of them")
                    }
                    (Some(ended), _) => write!(f, "; this component ends {ended}"),
                    (None, Some(then)) => write!(
                        f,
                        "; this component went on to ask {then}, which the journal cannot answer"
                    ),
                    (None, None) => Ok(()),
                }
            }
            Verdict::FailsAgain { code } => write!(
                f,
                "fails again: {code}, as the original did, against the same answers"
            ),
            Verdict::FailsDifferently { code, original } => write!(
                f,
                "fails differently: {code} (the original: {original}), against the same answers"
            ),
            Verdict::Diverged {
                call,
                failed_after,
                original,
                fix,
            } => write!(
                f,
                "cannot tell: diverged at call {call}, before the failure (after {}): the original asked {original}, this component asks {fix}",
                calls(failed_after)
            ),
            Verdict::CannotTell { stop } => write!(f, "cannot tell: {stop}"),
        }
    }
}

/// The verdict on a failed attempt (`original_code`, after `recorded` calls) of a replay
/// that answered `answered` calls and ended `ended` (its outcome, or its failure code) or
/// stopped at `stop`.
pub fn verdict(
    original_code: Option<&str>,
    (answered, recorded): (usize, usize),
    stop: Option<&Stop>,
    ended: Result<&str, &str>,
) -> Option<Verdict> {
    let original = original_code?;
    Some(match stop {
        Some(Stop::End { asked, .. }) => Verdict::GetsPast {
            failed_after: recorded,
            answered,
            ended: None,
            then: Some(asked.clone()),
        },
        Some(Stop::Diverged {
            call,
            journal,
            asked,
        }) => Verdict::Diverged {
            call: *call,
            failed_after: recorded,
            original: journal.clone(),
            fix: asked.clone(),
        },
        Some(stop @ (Stop::Cut { .. } | Stop::Truncated { .. })) => Verdict::CannotTell {
            stop: stop.to_string(),
        },
        None | Some(Stop::Left { .. }) => match ended {
            Ok(outcome) => Verdict::GetsPast {
                failed_after: recorded,
                answered,
                ended: Some(outcome.to_string()),
                then: None,
            },
            Err(code) if code == original => Verdict::FailsAgain {
                code: code.to_string(),
            },
            Err(code) => Verdict::FailsDifferently {
                code: code.to_string(),
                original: original.to_string(),
            },
        },
    })
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct Same {
    pub outcome: bool,
    pub log: bool,
    pub fuel: bool,
}

impl Same {
    pub fn all(self) -> bool {
        self.outcome && self.log && self.fuel
    }
}

/// Whether the original attempt was stopped from outside the guest: its end is the
/// journal's end, not something the guest did.
fn stopped_from_outside(code: Option<&str>) -> bool {
    matches!(
        code.and_then(FailureCode::parse),
        Some(
            FailureCode::Timeout
                | FailureCode::Cancelled
                | FailureCode::CancelledByOperator
                | FailureCode::ParentFailed
                | FailureCode::ChildFailed
                | FailureCode::OutOfFuel
        )
    )
}

impl Engine {
    /// Replays `journal` with `loaded`. Unless `any_component`, the component must be the
    /// one the journal was recorded with.
    pub async fn replay(
        &self,
        loaded: &Loaded,
        journal: &JournalFile,
        any_component: bool,
    ) -> Result<Replayed, ReplayError> {
        if !any_component && loaded.digest != journal.component {
            return Err(ReplayError::OtherComponent {
                recorded: journal.component.clone(),
                given: loaded.digest.clone(),
            });
        }
        let log = AttemptLog::new(MAX_LOG_BYTES);
        let player = Journal::replaying(journal.calls.clone(), journal.truncated);
        // Past the stop the guest is answered placeholders until its next tick: what it
        // logs of them is not the attempt's.
        player.on_stop({
            let log = log.clone();
            move || log.close()
        });
        let state = GuestState::journaled(
            journal.limits.memory,
            log.clone(),
            Capabilities::none(),
            player.clone(),
            journal.seed(),
        );
        let original = journal.ending.code.as_deref();
        // An attempt stopped from outside ran until its fuel says: the replay is given
        // exactly that, so it stops where the original was stopped.
        let metered = journal.limits.fuel_metered && self.meters_fuel();
        let fuel = if stopped_from_outside(original) && metered {
            Some(journal.ending.fuel_used)
        } else {
            journal.limits.fuel
        };
        let timeout = Duration::from_millis(journal.limits.timeout_ms).min(MAX_REPLAY);
        let deadline = Instant::now() + timeout + REPLAY_SLACK;
        let (_never_cancel, cancel) = tokio::sync::watch::channel(false);
        let (_never_stop, stop) = tokio::sync::watch::channel(None);
        let executed = self
            .execute(Execution {
                loaded,
                state,
                fuel,
                deadline,
                cancel,
                stop,
                context: journal.context.clone(),
                replaying: true,
                fuel_gauge: None,
            })
            .await;
        let (log_text, _) = log.contents();
        let stopped = player.stopped();
        let (calls_answered, calls_recorded) = player.progress();
        let (status, outcome, mut code, message) = match &executed.result {
            Ok(outcome) => ("succeeded", Some(outcome.name()), None, None),
            Err(failure) => (
                "failed",
                None,
                Some(failure.code.as_str()),
                failure.message.clone(),
            ),
        };
        // Out of the fuel the original used, the replay reached where it was stopped: it
        // ends there as the original did (its deadline, a cancel), not out of fuel.
        let reached_original_stop = stopped.is_none()
            && stopped_from_outside(original)
            && code == Some(FailureCode::OutOfFuel.as_str());
        if reached_original_stop {
            code = original
                .and_then(FailureCode::parse)
                .map(FailureCode::as_str);
        }
        // Calls the guest ended without making are a divergence too — but for the one in
        // flight when the original was stopped, which the replay, stopped at the same
        // fuel, may end just short of.
        let cut_call_left = reached_original_stop
            && calls_recorded == calls_answered + 1
            && journal
                .calls
                .last()
                .is_some_and(|call| call.answer.is_none());
        let left =
            (stopped.is_none() && calls_answered < calls_recorded && !cut_call_left).then(|| {
                Stop::Left {
                    answered: calls_answered,
                    more: calls_recorded - calls_answered,
                }
            });
        let same_outcome = left.is_none()
            && if stopped.is_some() || reached_original_stop {
                stopped_from_outside(original) && !matches!(stopped, Some(Stop::Diverged { .. }))
            } else {
                journal.ending.code.as_deref() == code
                    && journal.ending.outcome.as_deref() == outcome
            };
        let stopped = stopped.or(left);
        let verdict = verdict(
            journal.ending.code.as_deref(),
            (calls_answered, calls_recorded),
            stopped.as_ref(),
            outcome.ok_or(code.unwrap_or("failed")),
        );
        let same = Same {
            outcome: same_outcome,
            log: log_digest(&log_text) == journal.ending.log_digest,
            // Unmetered on either side, fuel says nothing: not a difference.
            fuel: !metered || executed.fuel_used == journal.ending.fuel_used,
        };
        Ok(Replayed {
            status,
            outcome,
            code,
            message,
            log: log_text,
            fuel_used: executed.fuel_used,
            stopped,
            calls_answered,
            calls_recorded,
            original_code: journal.ending.code.clone(),
            same,
            fuel_metered: metered,
            at_original_stop: reached_original_stop,
            verdict,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(call: usize) -> Stop {
        Stop::End {
            call,
            asked: "db.query(\"SELECT 2\")".into(),
        }
    }

    #[test]
    fn an_attempt_that_succeeded_has_no_failure_to_judge() {
        assert_eq!(verdict(None, (3, 3), None, Ok("done")), None);
        assert_eq!(verdict(None, (3, 3), Some(&end(4)), Err("trap")), None);
    }

    #[test]
    fn a_fix_that_ends_or_asks_past_the_journal_gets_past_the_failure() {
        let ended = verdict(Some("trap"), (2, 2), None, Ok("done")).unwrap();
        assert_eq!(
            ended,
            Verdict::GetsPast {
                failed_after: 2,
                answered: 2,
                ended: Some("done".into()),
                then: None
            }
        );
        assert_eq!(
            ended.to_string(),
            "gets past the failure: the original failed after 2 calls; this component ends done"
        );
        let went_on = verdict(Some("trap"), (2, 2), Some(&end(3)), Err("trap")).unwrap();
        assert_eq!(
            went_on.to_string(),
            "gets past the failure: the original failed after 2 calls; this component went on to ask db.query(\"SELECT 2\"), which the journal cannot answer"
        );
        // Ending with calls of the journal left is an ending against its answers, and
        // says how few it asked for.
        let early = Stop::Left {
            answered: 1,
            more: 1,
        };
        let early = verdict(Some("trap"), (1, 2), Some(&early), Ok("done")).unwrap();
        assert_eq!(
            early.to_string(),
            "gets past the failure: the original failed after 2 calls; this component ends done after 1 of them"
        );
    }

    #[test]
    fn a_fix_that_fails_says_whether_it_is_the_same_failure() {
        assert_eq!(
            verdict(Some("trap"), (2, 2), None, Err("trap")),
            Some(Verdict::FailsAgain {
                code: "trap".into()
            })
        );
        assert_eq!(
            verdict(Some("trap"), (2, 2), None, Err("handler_failed")),
            Some(Verdict::FailsDifferently {
                code: "handler_failed".into(),
                original: "trap".into()
            })
        );
    }

    #[test]
    fn a_divergence_before_the_failure_cannot_tell_and_names_both_calls() {
        let stop = Stop::Diverged {
            call: 1,
            journal: "db.begin()".into(),
            asked: "wall-clock.now()".into(),
        };
        let said = verdict(Some("trap"), (0, 4), Some(&stop), Err("trap")).unwrap();
        assert_eq!(
            said.to_string(),
            "cannot tell: diverged at call 1, before the failure (after 4 calls): the original asked db.begin(), this component asks wall-clock.now()"
        );
        let cut = Stop::Cut {
            call: 4,
            journal: "db.query()".into(),
        };
        assert!(matches!(
            verdict(Some("timeout"), (3, 4), Some(&cut), Err("timeout")),
            Some(Verdict::CannotTell { .. })
        ));
    }
}
