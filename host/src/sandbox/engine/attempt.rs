//! One attempt of one pass, in the sandbox: instantiate, call the handler under the
//! deadline, fuel budget and memory cap, and classify what happened.

use super::bindings::exports::jobhost::job::handler::{self, Counter};
use super::limits::{FuelGauge, hostcall_bytes};
use super::output::AttemptLog;
use super::state::GuestState;
use super::{Engine, Loaded, MAX_LOG_BYTES};
use crate::rules::failure::FailureCode;
use crate::rules::json_rule;
use crate::sandbox::capability::Capabilities;
pub use crate::sandbox::journal::file::PassContext;
use crate::sandbox::journal::{CommittedEnd, Journal, Recorded};
use crate::sandbox::refusal::Refused;
use std::time::Duration;
use tokio::time::Instant;
use wasmtime::{Trap, UpdateDeadline};

/// Longest a pass may defer its next pass.
pub const MAX_DEFER: Duration = Duration::from_secs(7 * 24 * 3600);
/// Most bytes of a guest's own error message kept on the run record.
pub const MAX_MESSAGE_BYTES: usize = 2048;

/// Set to `true` to cancel attempts (host shutdown past its grace period).
pub type CancelToken = tokio::sync::watch::Receiver<bool>;

/// Set to the code of a run's ending decided outside its attempt (an operator's cancel,
/// its family's end): the attempt stops at once, for good, and fails with that code.
pub type StopToken = tokio::sync::watch::Receiver<Option<FailureCode>>;

pub struct AttemptSpec<'a> {
    pub loaded: &'a Loaded,
    pub cancel: CancelToken,
    /// Set when the run is ended from outside: the attempt stops at once, for good.
    pub stop: StopToken,
    pub context: PassContext,
    pub memory: u64,
    pub fuel: Option<u64>,
    pub deadline: Instant,
    /// The capabilities the job was given, with their sessions for this attempt
    /// (`Capabilities::for_attempt`).
    pub capabilities: Capabilities,
    /// The journal's cap; `None` records nothing (`record = "off"`).
    pub record: Option<u64>,
    /// Where the attempt's log goes: the caller keeps a clone to read it while it runs
    /// (`runs::runner::live`).
    pub log: AttemptLog,
    /// The fuel burnt so far, which the caller reads likewise.
    pub fuel_gauge: FuelGauge,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Done,
    Continue { cursor: String },
    Defer { delay: Duration },
}

impl Outcome {
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Done => "done",
            Outcome::Continue { .. } => "continue",
            Outcome::Defer { .. } => "defer",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptFailure {
    pub code: FailureCode,
    /// The guest's own message (truncated), for the run record only; after a refusal,
    /// the host's reason first.
    pub message: Option<String>,
    /// Why a host call was refused, in the host's words (`sandbox::refusal`): the one
    /// text of a failure a report may carry.
    pub reason: Option<String>,
    /// The refusal behind it would refuse every attempt alike (the statement or the grant
    /// is at fault): the runner does not retry it.
    pub deterministic: bool,
}

#[derive(Debug)]
pub struct AttemptReport {
    pub result: Result<Outcome, AttemptFailure>,
    pub fuel_used: u64,
    pub peak_memory: u64,
    pub duration: Duration,
    pub log: String,
    pub log_truncated: bool,
    /// The run's counters after the pass (JSON), if the attempt changed them: kept only
    /// with an outcome.
    pub counters: Option<String>,
    /// The pass recorded that it waits for the children it started (`jobs`).
    pub waits_for_children: bool,
    /// The pass recorded that it waits for a signal, with this timeout in ms (`run`).
    pub waits_for_signal: Option<u64>,
    /// The steps the attempt reached that the pass's ledger did not hold.
    pub steps_reached: Vec<String>,
    /// The host calls the attempt made, when it was recorded, and the seed it was given.
    pub journal: Option<(Recorded, u128)>,
}

impl AttemptReport {
    /// The attempt of a run whose last pass already committed `done` with its writes:
    /// nothing runs, the run only ends.
    pub fn committed_done() -> AttemptReport {
        AttemptReport {
            result: Ok(Outcome::Done),
            fuel_used: 0,
            peak_memory: 0,
            duration: Duration::ZERO,
            log: String::new(),
            log_truncated: false,
            counters: None,
            waits_for_children: false,
            waits_for_signal: None,
            steps_reached: Vec::new(),
            journal: None,
        }
    }
}

/// Most fuel a guest burns between two points where the store holds its true count.
///
/// Compiled code keeps its fuel count in a register and writes it back only at a call, a
/// return or when its fuel runs out — not at an epoch check. An attempt stopped by its
/// deadline or a cancel in a loop that calls nothing would otherwise report the fuel it had
/// at its last call (a 3 s loop reported 2 296). Running out of this much fuel writes the
/// count back (and yields to the runtime): every ending reads `fuel_used` to within it, a
/// few milliseconds of compute.
pub const FUEL_SAVE_INTERVAL: u64 = 10_000_000;

/// The error the epoch callback raises at the deadline.
#[derive(Debug)]
struct DeadlineReached;

impl std::fmt::Display for DeadlineReached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("deadline reached")
    }
}

impl std::error::Error for DeadlineReached {}

/// The error the epoch callback raises once a replay stopped.
#[derive(Debug)]
pub(crate) struct ReplayStopped;

impl std::fmt::Display for ReplayStopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the replay stopped")
    }
}

impl std::error::Error for ReplayStopped {}

/// One handler call to make: an attempt's, or a replay's.
pub(crate) struct Execution<'a> {
    pub loaded: &'a Loaded,
    pub state: GuestState,
    pub fuel: Option<u64>,
    pub deadline: Instant,
    pub cancel: CancelToken,
    pub stop: StopToken,
    pub context: PassContext,
    pub replaying: bool,
    /// Where the fuel burnt so far is published while the guest runs, if anywhere.
    pub fuel_gauge: Option<FuelGauge>,
}

/// How the call ended, and the store it ran in (what the host calls noted, the log).
pub(crate) struct Executed {
    pub result: Result<Outcome, AttemptFailure>,
    pub fuel_used: u64,
    pub store: wasmtime::Store<GuestState>,
}

impl Engine {
    pub async fn run_attempt(&self, spec: AttemptSpec<'_>) -> AttemptReport {
        let started = Instant::now();
        let log = spec.log;
        if spec.fuel.is_some() && !self.profile.fuel {
            // A fuel cap this engine cannot meter is not kept by running unmetered.
            return AttemptReport {
                result: Err(AttemptFailure {
                    code: FailureCode::OutOfFuel,
                    message: None,
                    reason: None,
                    deterministic: false,
                }),
                fuel_used: 0,
                peak_memory: 0,
                duration: started.elapsed(),
                log: String::new(),
                log_truncated: false,
                counters: None,
                waits_for_children: false,
                waits_for_signal: None,
                steps_reached: Vec::new(),
                journal: None,
            };
        }
        let journal = spec.record.map_or_else(Journal::off, Journal::recording);
        let seed = crate::sandbox::journal::wasi::fresh_seed();
        let state =
            GuestState::journaled(spec.memory, log.clone(), spec.capabilities, journal, seed);
        let executed = self
            .execute(Execution {
                loaded: spec.loaded,
                state,
                fuel: spec.fuel,
                deadline: spec.deadline,
                cancel: spec.cancel,
                stop: spec.stop,
                context: spec.context,
                replaying: false,
                fuel_gauge: Some(spec.fuel_gauge),
            })
            .await;
        let state = executed.store.data();
        let (log_text, log_truncated) = log.contents();
        AttemptReport {
            result: executed.result,
            fuel_used: executed.fuel_used,
            peak_memory: state.limiter.peak() as u64,
            duration: started.elapsed(),
            log: log_text,
            log_truncated,
            counters: state.capabilities.steps.changed_counters(),
            waits_for_children: state.attempt.signals.waits_for_children,
            waits_for_signal: state.attempt.signals.waits_for_signal,
            steps_reached: state.capabilities.steps.reached_new(),
            journal: spec.record.map(|_| (state.attempt.journal.take(), seed)),
        }
    }

    /// Instantiates and calls a handler in a store set up as an attempt's, and classifies
    /// how it ended: the one path attempts and replays share.
    pub(crate) async fn execute(&self, run: Execution<'_>) -> Executed {
        let fuel = run.fuel.unwrap_or(u64::MAX);
        let hostcall = hostcall_bytes(run.state.limiter.cap());
        let mut store = self.attempt_store(
            run.state,
            fuel,
            run.deadline,
            hostcall,
            run.replaying,
            run.fuel_gauge,
        );
        let context = to_wit(run.context);
        // A host call in flight at the deadline (or at cancellation) is cancelled by
        // dropping the call.
        let (mut cancel, mut stop) = (run.cancel, run.stop);
        let mut stopped_with = None;
        let called = tokio::select! {
            called = tokio::time::timeout_at(run.deadline, async {
                let job = run.loaded.pre.instantiate_async(&mut store).await?;
                job.jobhost_job_handler()
                    .call_run(&mut store, &context)
                    .await
            }) => Some(called),
            () = cancelled(&mut cancel) => None,
            code = stopped(&mut stop) => {
                stopped_with = Some(code);
                None
            }
        };
        let fuel_used = if self.profile.fuel {
            fuel.saturating_sub(store.get_fuel().unwrap_or(0))
        } else {
            0
        };
        let result = classify(called, stopped_with, store.data(), run.deadline);
        Executed {
            result,
            fuel_used,
            store,
        }
    }

    /// Instantiates `loaded` in a fresh store set up as an attempt's (memory cap, fuel,
    /// epoch deadline; no `db`, `files` or `links` session), without calling it: the
    /// fixed cost every attempt pays before its handler runs. Only for measuring it (the
    /// `sandbox` benchmark).
    #[doc(hidden)]
    pub async fn instantiate_only(
        &self,
        loaded: &Loaded,
        memory: u64,
        deadline: Instant,
    ) -> wasmtime::Result<()> {
        let state = GuestState::new(memory, AttemptLog::new(MAX_LOG_BYTES), Capabilities::none());
        let mut store = self.attempt_store(
            state,
            u64::MAX,
            deadline,
            hostcall_bytes(memory),
            false,
            None,
        );
        loaded.pre.instantiate_async(&mut store).await?;
        Ok(())
    }

    /// A store for one attempt: the memory limiter, the bound on what one host call lifts,
    /// the fuel (if metered), and an epoch deadline callback that yields to the runtime
    /// every tick, publishes the fuel burnt so far to `fuel_gauge`, and traps at
    /// `deadline` — or, `replaying`, once the replay stopped (the guest was answered a
    /// placeholder it must not go on with).
    fn attempt_store(
        &self,
        state: GuestState,
        fuel: u64,
        deadline: Instant,
        hostcall_bytes: usize,
        replaying: bool,
        fuel_gauge: Option<FuelGauge>,
    ) -> wasmtime::Store<GuestState> {
        let mut store = wasmtime::Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limiter);
        store.set_hostcall_fuel(hostcall_bytes);
        if self.profile.fuel {
            store
                .fuel_async_yield_interval(Some(FUEL_SAVE_INTERVAL))
                .expect("fuel is enabled on the engine");
            store.set_fuel(fuel).expect("fuel is enabled on the engine");
        }
        let deadline = deadline.into_std();
        let fuel_gauge = fuel_gauge.filter(|_| self.profile.fuel);
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |store| {
            if let Some(gauge) = &fuel_gauge {
                gauge.set(fuel.saturating_sub(store.get_fuel().unwrap_or(fuel)));
            }
            if std::time::Instant::now() >= deadline {
                Err(wasmtime::Error::new(DeadlineReached))
            } else if replaying && store.data().attempt.journal.stopped().is_some() {
                Err(wasmtime::Error::new(ReplayStopped))
            } else {
                Ok(UpdateDeadline::Yield(1))
            }
        });
        store
    }
}

async fn cancelled(token: &mut CancelToken) {
    if token.wait_for(|cancel| *cancel).await.is_err() {
        // Nobody can cancel any more: wait forever.
        std::future::pending::<()>().await;
    }
}

/// The code the run was ended with from outside, once it is.
async fn stopped(token: &mut StopToken) -> FailureCode {
    let code = token
        .wait_for(Option::is_some)
        .await
        .ok()
        .and_then(|code| *code);
    match code {
        Some(code) => code,
        // Nobody can stop it any more: wait forever.
        None => std::future::pending().await,
    }
}

/// `None` when the attempt was cancelled.
type Called = Option<
    Result<
        wasmtime::Result<Result<handler::Outcome, handler::JobError>>,
        tokio::time::error::Elapsed,
    >,
>;

/// How an attempt ended, as one fixed code: the only place that decides it.
///
/// A pass's end the guest committed with its writes (`steps.commit-pass`) is fixed: it
/// wins over whatever happened after. Otherwise an ending from outside (an operator's
/// cancel, the run's family's: its code), then a lost lease
/// (nothing the attempt wrote committed); then a cancellation, then the deadline — also
/// when it showed only as a host call cut off at the deadline that the guest then failed
/// over (a statement interrupted by SQLite's progress handler or Postgres' statement
/// timeout, rather than by the host's timer) — then fuel, memory, host resources and
/// traps; then what the guest returned.
fn classify(
    called: Called,
    stopped_with: Option<FailureCode>,
    state: &GuestState,
    deadline: Instant,
) -> Result<Outcome, AttemptFailure> {
    let fail = |code, message: Option<String>| AttemptFailure {
        code,
        message: message.map(|m| crate::rules::guest_text::for_storage(&m, MAX_MESSAGE_BYTES)),
        reason: None,
        deterministic: false,
    };
    // A failure after a refusal: the refusal's code, and its reason before the guest's
    // words.
    let refused = |refused: &Refused, message: String| AttemptFailure {
        code: refused.code,
        message: Some(crate::rules::guest_text::for_storage(
            &refused.with_guest_message(&message),
            MAX_MESSAGE_BYTES,
        )),
        reason: Some(refused.reason.clone()),
        deterministic: refused.deterministic,
    };
    match state.attempt.signals.committed.as_ref() {
        Some(CommittedEnd::Done) => return Ok(Outcome::Done),
        Some(CommittedEnd::Continue { cursor }) => {
            return Ok(Outcome::Continue {
                cursor: cursor.clone(),
            });
        }
        None => {}
    }
    // An ending from outside (an operator's cancel, the family's) moved the lease on: it,
    // not the loss it caused, is why.
    if let Some(code) = stopped_with {
        return Err(fail(code, None));
    }
    // Whatever the guest returned, a lost lease means its writes did not commit.
    if state.attempt.signals.lease_lost {
        return Err(fail(FailureCode::LeaseLost, None));
    }
    let Some(called) = called else {
        return Err(fail(FailureCode::Cancelled, None));
    };
    let returned = match called {
        Err(_elapsed) => return Err(fail(FailureCode::Timeout, None)),
        Ok(Err(error)) => {
            let code = if error.downcast_ref::<DeadlineReached>().is_some() {
                FailureCode::Timeout
            } else if error.downcast_ref::<Trap>() == Some(&Trap::OutOfFuel) {
                FailureCode::OutOfFuel
            } else if state.limiter.hit() {
                FailureCode::MemoryLimit
            } else if error
                .downcast_ref::<wasmtime::component::ResourceTableError>()
                .is_some()
                || error
                    .downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
                    .is_some()
            {
                FailureCode::ResourceLimit
            } else {
                FailureCode::Trap
            };
            let message = (code == FailureCode::Trap)
                .then(|| super::trap::describe(&error, &state.log))
                .flatten();
            return Err(fail(code, message));
        }
        Ok(Ok(returned)) => returned,
    };
    if returned.is_err() && Instant::now() >= deadline {
        return Err(fail(FailureCode::Timeout, None));
    }
    match returned {
        Ok(handler::Outcome::Done) => Ok(Outcome::Done),
        Ok(handler::Outcome::Continue(cursor)) => {
            match json_rule::canonical(cursor.as_bytes(), json_rule::CURSOR) {
                Ok(cursor) => Ok(Outcome::Continue { cursor }),
                Err(refusal) => Err(fail(
                    FailureCode::InvalidOutcome,
                    Some(format!("the cursor was refused: {refusal}")),
                )),
            }
        }
        Ok(handler::Outcome::Defer(ms)) => match defer_delay(ms) {
            Some(delay) => Ok(Outcome::Defer { delay }),
            None => Err(fail(
                FailureCode::InvalidDefer,
                Some(format!(
                    "defer({ms} ms): a defer is longer than zero and at most {} days",
                    MAX_DEFER.as_secs() / 86_400
                )),
            )),
        },
        // Reusing a step name is a bug in the job, whatever it made of the refusal.
        Err(handler::JobError::Unrecoverable(message) | handler::JobError::Failed(message))
            if state.attempt.signals.refused_code() == Some(FailureCode::StepReused) =>
        {
            let reused = state
                .attempt
                .signals
                .refused
                .as_ref()
                .expect("checked above");
            Err(refused(reused, message))
        }
        Err(handler::JobError::Unrecoverable(message)) => {
            Err(fail(FailureCode::Unrecoverable, Some(message)))
        }
        Err(handler::JobError::Failed(message)) => match &state.attempt.signals.refused {
            _ if state.attempt.signals.unavailable => {
                Err(fail(FailureCode::DriverFailed, Some(message)))
            }
            Some(first) => Err(refused(first, message)),
            None => Err(fail(FailureCode::HandlerFailed, Some(message))),
        },
    }
}

/// The delay a `defer(ms)` asks for, if the host takes it: a zero delay would spin the run
/// through its defers (a pass wanting to run again at once is a `continue`), and one over
/// [`MAX_DEFER`] parks a lease for longer than anyone watches it.
fn defer_delay(ms: u64) -> Option<Duration> {
    let delay = Duration::from_millis(ms);
    (!delay.is_zero() && delay <= MAX_DEFER).then_some(delay)
}

fn to_wit(c: PassContext) -> handler::Context {
    handler::Context {
        job: c.job,
        run_id: c.run_id,
        instance: c.instance,
        tenant: c.tenant,
        attempt: c.attempt,
        pass: c.pass,
        payload: c.payload,
        cursor: c.cursor,
        counters: c
            .counters
            .into_iter()
            .map(|(name, value)| Counter { name, value })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_defer_is_longer_than_zero_and_at_most_seven_days() {
        assert_eq!(defer_delay(0), None);
        assert_eq!(defer_delay(1), Some(Duration::from_millis(1)));
        let week = MAX_DEFER.as_millis() as u64;
        assert_eq!(defer_delay(week), Some(MAX_DEFER));
        assert_eq!(defer_delay(week + 1), None);
        assert_eq!(defer_delay(u64::MAX), None);
    }
}
