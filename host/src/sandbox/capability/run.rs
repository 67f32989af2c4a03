//! `jobhost:job/run`: what an attempt knows about its run (retries left, what started
//! it, deferrals), the children its previous pass waited for, the result it hands a
//! waiting parent, and the signals it waits for and reads (0.1.6). No grant: it reaches
//! only the run's own row, its children and its signals.

use crate::rules::enqueue::attempts_allowed;
use crate::rules::json_rule::JsonLimits;
use crate::sandbox::capability::context::AttemptContext;
use crate::sandbox::capability::view::View;
use crate::sandbox::engine::bindings::jobhost::job::run::{
    Child, ChildPage, Host, ReceivedSignal, RunInfo as Info, SignalState, StartedBy,
};
use crate::sandbox::engine::bindings::jobhost::job::types::HostError;
use crate::store::guest::{Fence, GuestDbError};
use crate::store::{Origin, RunRecord, Store};

/// What a run hands its parent (`set-result`).
pub const RESULT: JsonLimits = JsonLimits {
    max_bytes: 4 * 1024,
    max_depth: 16,
};
/// Most children one `children` call returns.
pub const MAX_CHILDREN_PAGE: u32 = 1000;

/// The attempt's run, as the runner claimed it.
pub struct RunSession {
    pub store: Store,
    pub fence: Fence,
    pub run: RunRecord,
    /// The job's retries per pass (`retries`).
    pub retries: u32,
}

impl RunSession {
    /// `cx`'s run: every job may read its own and set its result.
    pub fn for_attempt(cx: &AttemptContext) -> Option<RunSession> {
        Some(RunSession {
            store: cx.host.store.clone(),
            fence: cx.fence(),
            run: cx.run.clone(),
            retries: cx.spec.retry.retries,
        })
    }
}

/// The `run` capability's per-attempt state (`None` outside a runner's attempt).
pub struct RunCapability {
    session: Option<RunSession>,
    /// The run's whole row, read at the first call that needs it: a claim returns only
    /// what running an attempt needs.
    row: Option<RunRecord>,
}

impl RunCapability {
    pub fn new(session: Option<RunSession>) -> Self {
        RunCapability { session, row: None }
    }
}

/// What started `run`, from its row.
pub fn started_by(run: &RunRecord) -> StartedBy {
    let origin = run.origin.as_str();
    match origin {
        o if o == Origin::Cron.as_str() => {
            StartedBy::Schedule(run.scheduled_for.map_or(0, |t| t.max(0) as u64))
        }
        o if o == Origin::Kick.as_str() => StartedBy::Kick,
        o if o == Origin::Event.as_str() => StartedBy::Event(run.event.clone().unwrap_or_default()),
        o if o == Origin::Start.as_str() => StartedBy::Start,
        o if o == Origin::Retry.as_str() => {
            StartedBy::Retry(run.retry_of.clone().unwrap_or_default())
        }
        o if o == Origin::Boot.as_str() => StartedBy::Boot,
        o if o == Origin::Child.as_str() => {
            StartedBy::Parent(run.parent_run.clone().unwrap_or_default())
        }
        _ => StartedBy::Manual,
    }
}

/// This attempt's place in its run: attempts are counted per pass (`failures` of this
/// pass before it), `attempts` are allowed (`rules::enqueue::attempts_allowed`), and the
/// last one is final.
pub fn info(run: &RunRecord, attempts: u32) -> Info {
    let failures = u32::try_from(run.failures.max(0)).unwrap_or(u32::MAX);
    let retries_left = attempts.saturating_sub(1).saturating_sub(failures);
    Info {
        final_attempt: retries_left == 0,
        retries_left,
        started_by: started_by(run),
        deferrals: u32::try_from(run.defers.max(0)).unwrap_or(u32::MAX),
    }
}

impl View<'_, RunCapability> {
    fn run_session(&self) -> Result<&RunSession, HostError> {
        self.own.session.as_ref().ok_or(HostError::Unavailable)
    }

    /// The run's whole row, read once per attempt.
    async fn run_row(&mut self) -> Result<RunRecord, HostError> {
        if let Some(row) = &self.own.row {
            return Ok(row.clone());
        }
        let session = self.run_session()?;
        match session.store.get_run(&session.run.id).await {
            Ok(Some(row)) => {
                self.own.row = Some(row.clone());
                Ok(row)
            }
            _ => {
                self.attempt.signals.unavailable = true;
                Err(HostError::Unavailable)
            }
        }
    }
}

impl Host for View<'_, RunCapability> {
    async fn info(&mut self) -> Info {
        crate::journaled!(self.attempt, "run.info", (), async {
            let row = self.run_row().await;
            match (&self.own.session, row) {
                // The claim's counts are the attempt's; the row adds what started the run
                // and the attempts its start allowed.
                (Some(session), Ok(row)) => Info {
                    started_by: started_by(&row),
                    ..info(
                        &session.run,
                        attempts_allowed(session.retries, row.max_attempts),
                    )
                },
                (Some(session), Err(_)) => {
                    info(&session.run, attempts_allowed(session.retries, None))
                }
                (None, _) => Info {
                    final_attempt: true,
                    retries_left: 0,
                    started_by: StartedBy::Manual,
                    deferrals: 0,
                },
            }
        })
    }

    async fn children(
        &mut self,
        cursor: Option<String>,
        limit: u32,
    ) -> Result<ChildPage, HostError> {
        crate::journaled!(self.attempt, "run.children", (&cursor, limit), async {
            if limit == 0 || limit > MAX_CHILDREN_PAGE {
                return Err(HostError::Invalid("invalid-limit".into()));
            }
            let run = self.run_row().await?;
            let store = self.run_session()?.store.clone();
            // The previous pass waited: its children are the ones to read.
            let waited = run.wait_pass.filter(|p| *p < run.pass);
            let Some(pass) = waited else {
                return Ok(ChildPage {
                    children: Vec::new(),
                    next: None,
                });
            };
            let page = store
                .children(&run.id, pass, cursor.as_deref(), i64::from(limit))
                .await;
            let page = match page {
                Ok(page) => page,
                Err(_) => {
                    self.attempt.signals.unavailable = true;
                    return Err(HostError::Unavailable);
                }
            };
            let next = (page.len() == limit as usize)
                .then(|| page.last().map(|c| c.id.clone()))
                .flatten();
            Ok(ChildPage {
                children: page
                    .into_iter()
                    .map(|c| Child {
                        run_id: c.id,
                        job: c.job,
                        instance: c.instance,
                        status: c.status,
                        code: c.last_code,
                        result: c.result,
                    })
                    .collect(),
                next,
            })
        })
    }

    async fn set_result(&mut self, value: String) -> Result<(), HostError> {
        crate::journaled!(self.attempt, "run.set-result", (&value,), async {
            let canonical = crate::rules::json_rule::canonical(value.as_bytes(), RESULT)
                .map_err(|refusal| HostError::Invalid(refusal.code().into()))?;
            self.attempt.own_write_allowed().await?;
            let session = self.run_session()?;
            let (store, fence, id) = (
                session.store.clone(),
                session.fence.clone(),
                session.run.id.clone(),
            );
            match store.set_result_fenced(&fence, &id, &canonical).await {
                Ok(true) => Ok(()),
                Ok(false) => {
                    self.attempt.signals.lease_lost = true;
                    Err(HostError::LeaseLost)
                }
                Err(_) => {
                    self.attempt.signals.unavailable = true;
                    Err(HostError::Unavailable)
                }
            }
        })
    }

    async fn wait_for_signal(&mut self, name: String, timeout_ms: u64) -> Result<(), HostError> {
        crate::journaled!(
            self.attempt,
            "run.wait-for-signal",
            (&name, timeout_ms),
            async { self.wait_for(&name, timeout_ms).await }
        )
    }

    async fn signal(&mut self, name: String) -> Result<SignalState, HostError> {
        crate::journaled!(self.attempt, "run.signal", (&name,), async {
            self.read_signal(&name).await
        })
    }
}

impl View<'_, RunCapability> {
    /// The store, fence, run id and pass of the attempt's run.
    fn signal_session(&self) -> Result<(Store, Fence, String, i64), HostError> {
        let session = self.run_session()?;
        Ok((
            session.store.clone(),
            session.fence.clone(),
            session.run.id.clone(),
            session.run.pass,
        ))
    }

    /// Records, fenced, that this pass waits for the signal `name` (`wait-for-signal`).
    async fn wait_for(&mut self, name: &str, timeout_ms: u64) -> Result<(), HostError> {
        crate::rules::signal::check_name(name)
            .map_err(|refusal| HostError::Invalid(refusal.code().into()))?;
        if timeout_ms > crate::rules::signal::MAX_WAIT_MS {
            return Err(HostError::Invalid("invalid-timeout".into()));
        }
        let signals = &self.attempt.signals;
        if signals.waits_for_children || signals.waits_for_signal.is_some() {
            return Err(HostError::Invalid("already-waiting".into()));
        }
        self.attempt.own_write_allowed().await?;
        let (store, fence, id, _) = self.signal_session()?;
        match store.wait_for_signal_fenced(&fence, &id, name).await {
            Ok(true) => {
                self.attempt.signals.waits_for_signal = Some(timeout_ms);
                Ok(())
            }
            Ok(false) => self.attempt.translate(Err(GuestDbError::LeaseLost)),
            Err(_) => self.attempt.translate(Err(GuestDbError::Unavailable)),
        }
    }

    /// The signal `name` for this pass (`signal`): taken, fenced, or why there is none.
    async fn read_signal(&mut self, name: &str) -> Result<SignalState, HostError> {
        crate::rules::signal::check_name(name)
            .map_err(|refusal| HostError::Invalid(refusal.code().into()))?;
        self.attempt.own_write_allowed().await?;
        let (store, fence, id, pass) = self.signal_session()?;
        match store.take_signal(&fence, &id, pass, name).await {
            Ok(Some(signal)) => {
                return Ok(SignalState::Received(ReceivedSignal {
                    id: signal.signal_id,
                    payload: signal.payload,
                }));
            }
            Ok(None) => {}
            Err(_) => return self.attempt.translate(Err(GuestDbError::Unavailable)),
        }
        match store.holds_pass(&fence, &id, pass).await {
            Ok(true) => {}
            Ok(false) => return self.attempt.translate(Err(GuestDbError::LeaseLost)),
            Err(_) => return self.attempt.translate(Err(GuestDbError::Unavailable)),
        }
        let row = self.run_row().await?;
        let waited = row.signal_name.as_deref() == Some(name) && row.signal_pass == Some(pass - 1);
        Ok(if waited {
            SignalState::TimedOut
        } else {
            SignalState::Pending
        })
    }
}

impl crate::sandbox::journal::CodeOf for Info {
    fn code_of(&self) -> std::borrow::Cow<'static, str> {
        "ok".into()
    }
}

impl crate::sandbox::journal::Placeholder for Info {
    fn placeholder() -> Self {
        Info {
            final_attempt: true,
            retries_left: 0,
            started_by: StartedBy::Manual,
            deferrals: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::capability::fixture::{self, reason};

    #[test]
    fn a_runs_own_max_attempts_makes_an_earlier_attempt_final() {
        let once_failed = RunRecord {
            failures: 1,
            ..RunRecord::default()
        };
        let job_only = info(&once_failed, attempts_allowed(3, None));
        assert_eq!((job_only.retries_left, job_only.final_attempt), (2, false));
        let asked = info(&once_failed, attempts_allowed(3, Some(2)));
        assert_eq!((asked.retries_left, asked.final_attempt), (0, true));
    }

    #[tokio::test]
    async fn a_hostile_result_or_page_is_refused_before_anything_is_read_or_written() {
        let (mut run, mut shared) = (RunCapability::new(None), fixture::attempt());
        let mut state = View::new(&mut run, &mut shared);
        assert_eq!(reason(state.set_result("NaN".into()).await), "non-finite");
        assert_eq!(
            reason(state.set_result("{\"a\":\0}".into()).await),
            "not-json"
        );
        let deep = format!("{}{}", "[".repeat(17), "]".repeat(17));
        assert_eq!(reason(state.set_result(deep).await), "too-deep");
        let huge = format!("\"{}\"", "x".repeat(RESULT.max_bytes));
        assert_eq!(reason(state.set_result(huge).await), "too-large");
        for limit in [0, MAX_CHILDREN_PAGE + 1, u32::MAX] {
            assert_eq!(reason(state.children(None, limit).await), "invalid-limit");
        }
    }

    #[tokio::test]
    async fn a_hostile_signal_name_or_timeout_is_refused_and_a_pass_waits_for_one_thing() {
        let (mut run, mut shared) = (RunCapability::new(None), fixture::attempt());
        let mut state = View::new(&mut run, &mut shared);
        for name in ["", "A", "a\0b", "a/b", "\u{202e}x", "a".repeat(65).as_str()] {
            assert_eq!(
                reason(state.wait_for_signal(name.to_string(), 1000).await),
                "invalid-signal-name"
            );
            assert_eq!(
                reason(state.signal(name.to_string()).await),
                "invalid-signal-name"
            );
        }
        let too_long = crate::rules::signal::MAX_WAIT_MS + 1;
        assert_eq!(
            reason(state.wait_for_signal("approval".into(), too_long).await),
            "invalid-timeout"
        );
        state.attempt.signals.waits_for_children = true;
        assert_eq!(
            reason(state.wait_for_signal("approval".into(), 1000).await),
            "already-waiting"
        );
        assert_eq!(state.attempt.signals.waits_for_signal, None);
    }
}
