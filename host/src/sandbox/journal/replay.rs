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
        })
    }
}
