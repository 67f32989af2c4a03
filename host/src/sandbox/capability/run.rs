//! `jobhost:job/run`: what an attempt knows about its run (retries left, what started
//! it, deferrals), the children its previous pass waited for, and the result it hands a
//! waiting parent. No grant: it reaches only the run's own row and its children.

use crate::rules::json_rule::JsonLimits;
use crate::sandbox::capability::context::AttemptContext;
use crate::sandbox::capability::view::View;
use crate::sandbox::engine::bindings::jobhost::job::run::{
    Child, ChildPage, Host, RunInfo as Info, StartedBy,
};
use crate::sandbox::engine::bindings::jobhost::job::types::HostError;
use crate::store::guest::Fence;
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
/// pass before it), and the last one allowed is final.
pub fn info(run: &RunRecord, retries: u32) -> Info {
    let failures = u32::try_from(run.failures.max(0)).unwrap_or(u32::MAX);
    let retries_left = retries.saturating_sub(failures);
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
                // The claim's counts are the attempt's; the row adds what started the run.
                (Some(session), Ok(row)) => Info {
                    started_by: started_by(&row),
                    ..info(&session.run, session.retries)
                },
                (Some(session), Err(_)) => info(&session.run, session.retries),
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
}
