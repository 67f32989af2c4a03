//! `jobhost:job/steps`: memoised steps, counters, and a pass's end committed with the
//! guest's writes. This only translates and checks: names and results against the
//! bounds, each name once per attempt; the rows are the store's (`store::steps`), what a
//! committed end means is the runner's.

use crate::rules::json_rule;
use crate::sandbox::capability::context::AttemptContext;
use crate::sandbox::engine::bindings::jobhost::job::steps::{Host, PassEnd};
use crate::sandbox::engine::bindings::jobhost::job::types::HostError;
use crate::sandbox::engine::state::GuestState;
use crate::sandbox::journal::CommittedEnd;
use crate::store::guest::{Applied, Fence, GuestDbError, TxEffect};
use crate::store::{ProgressWrite, Store};
use std::collections::{BTreeMap, HashMap, HashSet};
use wasmtime::component::Resource;

/// Longest step name, in bytes.
pub const MAX_STEP_NAME_BYTES: usize = 128;
/// Most steps one pass may record (its ledger's rows).
pub const MAX_STEPS_PER_PASS: usize = 1000;
/// Most bytes of results one pass's ledger may hold: the ledger is read into the host's
/// memory when an attempt reaches its first step.
pub const MAX_LEDGER_BYTES: usize = 4 << 20;
/// Most steps a failed attempt notes as failed in (`Store::note_step_failures`): an
/// attempt fails in one step, the others it reached it recorded, unless their transaction
/// did not commit.
pub const MAX_NOTED_FAILURES: usize = 16;
/// Longest message a failed step keeps of its attempt's failure, in bytes.
pub const MAX_STEP_ERROR_BYTES: usize = 512;
/// Longest counter name, in bytes.
pub const MAX_COUNTER_NAME_BYTES: usize = 64;
/// Most counters one run may have.
pub const MAX_COUNTERS: usize = 64;

/// What one attempt's steps belong to.
pub struct StepsSession {
    pub store: Store,
    pub fence: Fence,
    pub run_id: String,
    pub pass: i64,
    /// The run's counters as the pass found them.
    pub counters: BTreeMap<String, i64>,
}

impl StepsSession {
    /// The ledger of `cx`'s attempt's pass, if its job was granted `steps`.
    pub fn for_attempt(cx: &AttemptContext) -> Option<StepsSession> {
        cx.spec.grants.steps.then(|| StepsSession {
            store: cx.host.store.clone(),
            fence: cx.fence(),
            run_id: cx.run.id.clone(),
            pass: cx.run.pass,
            counters: serde_json::from_str(&cx.run.counters).unwrap_or_default(),
        })
    }
}

/// The `steps` capability's per-attempt state: `None` when the job was not granted steps.
pub struct StepsCapability {
    session: Option<StepsSession>,
    /// The pass's recorded results, read when the attempt reaches its first step.
    ledger: Option<HashMap<String, String>>,
    ledger_bytes: usize,
    /// Steps this attempt recorded (not in the ledger as it was read).
    new_records: usize,
    /// Names this attempt reached, and those it recorded.
    reached: HashSet<String>,
    recorded: HashSet<String>,
    counters: BTreeMap<String, i64>,
    counters_changed: bool,
}

impl StepsCapability {
    pub fn new(session: Option<StepsSession>) -> Self {
        let counters = session
            .as_ref()
            .map(|s| s.counters.clone())
            .unwrap_or_default();
        StepsCapability {
            session,
            ledger: None,
            ledger_bytes: 0,
            new_records: 0,
            reached: HashSet::new(),
            recorded: HashSet::new(),
            counters,
            counters_changed: false,
        }
    }

    /// The run's counters after this attempt's changes (JSON), if it changed any.
    pub fn changed_counters(&self) -> Option<String> {
        self.counters_changed.then(|| counters_json(&self.counters))
    }

    /// The steps this attempt reached that the pass's ledger did not hold when it read it:
    /// those an attempt that fails may have failed in (at most [`MAX_NOTED_FAILURES`]).
    pub fn reached_new(&self) -> Vec<String> {
        let ledger = self.ledger.as_ref();
        let mut names: Vec<String> = self
            .reached
            .iter()
            .filter(|name| !ledger.is_some_and(|l| l.contains_key(*name)))
            .cloned()
            .collect();
        names.sort();
        names.truncate(MAX_NOTED_FAILURES);
        names
    }
}

fn counters_json(counters: &BTreeMap<String, i64>) -> String {
    serde_json::to_string(counters).expect("counters serialise")
}

fn invalid(reason: &str) -> HostError {
    HostError::Invalid(reason.into())
}

/// A step or counter name: a name by [`crate::rules::name_rule`], bounded.
fn valid_name(name: &str, max: usize) -> bool {
    crate::rules::name_rule::is_name(name, max)
}

impl GuestState {
    fn steps_session(&mut self) -> Result<&StepsSession, HostError> {
        if self.steps.session.is_none() {
            self.attempt
                .signals
                .refuse(crate::sandbox::refusal::capability_not_granted("steps"));
            return Err(HostError::CapabilityRefused("not-granted".into()));
        }
        if self.attempt.signals.committed.is_some() {
            return Err(invalid("pass-committed"));
        }
        Ok(self.steps.session.as_ref().expect("checked above"))
    }

    /// Checks a result about to be recorded for `name`: reached, not yet recorded, JSON
    /// by the queue-safety rule, within the ledger's bound. Returns it canonical.
    fn recordable(&mut self, name: &str, result: &str) -> Result<String, HostError> {
        self.steps_session()?;
        if !self.steps.reached.contains(name) {
            return Err(invalid("step-not-started"));
        }
        if self.steps.recorded.contains(name) {
            return Err(invalid("step-recorded"));
        }
        let canonical = json_rule::canonical(result.as_bytes(), json_rule::STEP_RESULT)
            .map_err(|refusal| invalid(refusal.code()))?;
        if self.steps.ledger_bytes + canonical.len() > MAX_LEDGER_BYTES {
            return Err(invalid("ledger-full"));
        }
        Ok(canonical)
    }

    fn step_recorded(&mut self, name: String, size: usize) {
        self.steps.ledger_bytes += size;
        self.steps.new_records += 1;
        self.steps.recorded.insert(name);
    }

    fn step_write(&self, name: &str, result: String) -> ProgressWrite {
        let session = self.steps.session.as_ref().expect("checked by recordable");
        ProgressWrite::Step {
            run_id: session.run_id.clone(),
            pass: session.pass,
            name: name.to_string(),
            result,
            generation: session.fence.generation,
        }
    }
}

impl Host for GuestState {
    async fn start(&mut self, name: String) -> Result<Option<String>, HostError> {
        crate::journaled!(self.attempt, "steps.start", (&name,), async {
            let session = self.steps_session()?;
            if !valid_name(&name, MAX_STEP_NAME_BYTES) {
                return Err(invalid("invalid-step-name"));
            }
            let (store, run_id, pass) =
                (session.store.clone(), session.run_id.clone(), session.pass);
            if self.steps.reached.contains(&name) {
                self.attempt
                    .signals
                    .refuse(crate::sandbox::refusal::step_reused());
                return Err(invalid("step-reused"));
            }
            if self.steps.ledger.is_none() {
                // One read per attempt, however many steps it reaches.
                let steps = match store.pass_steps(&run_id, pass).await {
                    Ok(steps) => steps,
                    Err(_) => {
                        self.attempt.signals.unavailable = true;
                        return Err(HostError::Unavailable);
                    }
                };
                self.steps.ledger_bytes = steps.iter().map(|(_, r)| r.len()).sum();
                self.steps.ledger = Some(steps.into_iter().collect());
            }
            let ledger = self.steps.ledger.as_ref().expect("read above");
            let hit = ledger.get(&name).cloned();
            // Names reached are held in memory too: bounded like the ledger.
            let full = self.steps.reached.len() >= MAX_STEPS_PER_PASS
                || (hit.is_none() && ledger.len() + self.steps.new_records >= MAX_STEPS_PER_PASS);
            if full {
                return Err(invalid("too-many-steps"));
            }
            if hit.is_some() {
                self.steps.recorded.insert(name.clone());
            }
            self.steps.reached.insert(name);
            Ok(hit)
        })
    }

    async fn record(&mut self, name: String, result: String) -> Result<(), HostError> {
        crate::journaled!(self.attempt, "steps.record", (&name, &result), async {
            let result = self.recordable(&name, &result)?;
            self.attempt.own_write_allowed().await?;
            let session = self.steps.session.as_ref().expect("checked by recordable");
            let (store, fence) = (session.store.clone(), session.fence.clone());
            let (run_id, pass) = (session.run_id.clone(), session.pass);
            let size = result.len();
            match store
                .record_step_fenced(&fence, &run_id, pass, &name, &result)
                .await
            {
                Ok(true) => {
                    self.step_recorded(name, size);
                    Ok(())
                }
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

    async fn record_in(
        &mut self,
        tx: Resource<crate::sandbox::capability::handles::TxHandle>,
        name: String,
        result: String,
    ) -> Result<(), HostError> {
        crate::journaled!(self.attempt, "steps.record-in", (&name, &result), async {
            let result = self.recordable(&name, &result)?;
            let size = result.len();
            let write = self.step_write(&name, result);
            let written = self.tx(&tx)?.apply(TxEffect::Progress(&write)).await;
            let written = written.and_then(Applied::progress);
            match self.translate(written)? {
                true => {
                    self.step_recorded(name, size);
                    Ok(())
                }
                false => Err(HostError::QueryRefused("failed".into())),
            }
        })
    }

    async fn counter_add(&mut self, name: String, delta: i64) -> Result<i64, HostError> {
        crate::journaled!(self.attempt, "steps.counter-add", (&name, delta), async {
            self.steps_session()?;
            if !valid_name(&name, MAX_COUNTER_NAME_BYTES) {
                return Err(invalid("invalid-counter-name"));
            }
            let counters = &mut self.steps.counters;
            if !counters.contains_key(&name) && counters.len() >= MAX_COUNTERS {
                return Err(invalid("too-many-counters"));
            }
            let value = counters
                .get(&name)
                .copied()
                .unwrap_or(0)
                .checked_add(delta)
                .ok_or_else(|| invalid("counter-overflow"))?;
            counters.insert(name, value);
            self.steps.counters_changed = true;
            Ok(value)
        })
    }

    async fn commit_pass(
        &mut self,
        tx: Resource<crate::sandbox::capability::handles::TxHandle>,
        end: PassEnd,
    ) -> Result<(), HostError> {
        let taken = self.take_tx(tx)?;
        crate::journaled!(self.attempt, "steps.commit-pass", (&end,), async {
            let checked = self
                .steps_session()
                .map(|s| (s.run_id.clone(), s.pass, s.fence.generation));
            let Some(mut taken) = taken else {
                return Err(invalid("unknown-transaction"));
            };
            let (run_id, pass, generation) = match checked {
                Ok(session) => session,
                Err(refused) => {
                    self.roll_back_taken(taken).await;
                    return Err(refused);
                }
            };
            let committed = match end {
                PassEnd::Done => CommittedEnd::Done,
                PassEnd::Continue(cursor) => {
                    match json_rule::canonical(cursor.as_bytes(), json_rule::CURSOR) {
                        Ok(cursor) => CommittedEnd::Continue { cursor },
                        Err(refusal) => {
                            self.roll_back_taken(taken).await;
                            return Err(invalid(refusal.code()));
                        }
                    }
                }
            };
            let write = ProgressWrite::EndPass {
                run_id,
                generation,
                pass,
                cursor: match &committed {
                    CommittedEnd::Continue { cursor } => Some(cursor.clone()),
                    CommittedEnd::Done => None,
                },
                counters: counters_json(&self.steps.counters),
                done: committed == CommittedEnd::Done,
            };
            let written = taken.apply(TxEffect::Progress(&write)).await;
            let written = written.and_then(Applied::progress);
            match written {
                Ok(true) => {}
                // The run is no longer running this attempt's pass: its lease moved on.
                Ok(false) => {
                    self.roll_back_taken(taken).await;
                    return self.translate(Err(GuestDbError::LeaseLost));
                }
                Err(e) => {
                    self.roll_back_taken(taken).await;
                    return self.translate(Err(e));
                }
            }
            self.commit_taken(taken).await?;
            self.attempt.signals.committed = Some(committed);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::failure::FailureCode;
    use crate::sandbox::capability::tests::reason;
    use crate::sandbox::engine::output::AttemptLog;
    use crate::sandbox::engine::state::Capabilities;
    use crate::store::LeaseRequest;

    /// An attempt's state with only `steps`, on a fresh SQLite store holding the lease.
    async fn attempt(dir: &tempfile::TempDir, pass: i64) -> (GuestState, Store) {
        let store = Store::open(&format!("sqlite://{}/db", dir.path().display()))
            .await
            .unwrap();
        let lease = match store
            .acquire_lease(&LeaseRequest {
                job: "j",
                instance: "i",
                holder: "run-1",
                deadline_ms: 60_000,
                expires_ms: 60_000,
            })
            .await
            .unwrap()
        {
            Some(lease) => lease,
            None => store
                .get_lease("j", "i")
                .await
                .unwrap()
                .unwrap()
                .into_lease(),
        };
        let session = StepsSession {
            store: store.clone(),
            fence: Fence {
                job: lease.job,
                instance: lease.instance,
                generation: lease.generation,
                holder: lease.holder,
            },
            run_id: "run-1".into(),
            pass,
            counters: BTreeMap::from([("near".to_string(), i64::MAX - 1)]),
        };
        let capabilities = Capabilities {
            steps: StepsCapability::new(Some(session)),
            ..Capabilities::none()
        };
        (
            GuestState::new(64 << 20, AttemptLog::new(1024), capabilities),
            store,
        )
    }

    #[tokio::test]
    async fn a_recorded_step_is_a_hit_for_the_next_attempt_and_a_name_is_reached_once() {
        let dir = tempfile::tempdir().unwrap();
        let (mut first, _) = attempt(&dir, 1).await;
        assert!(matches!(first.start("a".into()).await, Ok(None)));
        assert_eq!(reason(first.start("a".into()).await), "step-reused");
        assert_eq!(
            first.attempt.signals.refused_code(),
            Some(FailureCode::StepReused)
        );
        assert_eq!(
            reason(first.record("b".into(), "1".into()).await),
            "step-not-started"
        );
        first
            .record("a".into(), r#"{ "n" : 1 }"#.into())
            .await
            .unwrap();
        assert_eq!(
            reason(first.record("a".into(), "2".into()).await),
            "step-recorded"
        );
        let (mut second, store) = attempt(&dir, 1).await;
        assert!(matches!(second.start("a".into()).await, Ok(Some(r)) if r == r#"{"n":1}"#));
        assert_eq!(
            reason(second.record("a".into(), "2".into()).await),
            "step-recorded"
        );
        // After the pass's end is committed nothing more belongs to it.
        second.attempt.signals.committed = Some(CommittedEnd::Done);
        assert_eq!(reason(second.start("b".into()).await), "pass-committed");
        assert_eq!(
            reason(second.counter_add("c".into(), 1).await),
            "pass-committed"
        );
        // Another pass has a ledger of its own.
        let (mut other, _) = attempt(&dir, 2).await;
        assert!(matches!(other.start("a".into()).await, Ok(None)));
        assert_eq!(store.run_steps("run-1").await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn names_results_and_counters_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let (mut state, _) = attempt(&dir, 1).await;
        for bad in ["", "a\u{1b}[31m", &"x".repeat(MAX_STEP_NAME_BYTES + 1)] {
            assert_eq!(reason(state.start(bad.into()).await), "invalid-step-name");
        }
        state.start("r".into()).await.unwrap();
        assert_eq!(
            reason(state.record("r".into(), "NaN".into()).await),
            "non-finite"
        );
        let deep = format!("{}{}", "[".repeat(40), "]".repeat(40));
        assert_eq!(reason(state.record("r".into(), deep).await), "too-deep");
        assert_eq!(
            reason(
                state
                    .record("r".into(), format!("\"{}\"", "x".repeat(70_000)))
                    .await
            ),
            "too-large"
        );
        assert_eq!(state.counter_add("near".into(), 1).await.unwrap(), i64::MAX);
        assert_eq!(
            reason(state.counter_add("near".into(), 1).await),
            "counter-overflow"
        );
        // Names reached without being recorded are bounded too (`r` was the first).
        for i in 1..MAX_STEPS_PER_PASS {
            assert!(matches!(state.start(format!("n{i}")).await, Ok(None)));
        }
        assert_eq!(
            reason(state.start("one-more".into()).await),
            "too-many-steps"
        );
        assert_eq!(
            reason(state.counter_add("\n".into(), 1).await),
            "invalid-counter-name"
        );
        for i in 1..MAX_COUNTERS {
            state.counter_add(format!("c{i}"), -1).await.unwrap();
        }
        assert_eq!(
            reason(state.counter_add("one-more".into(), 1).await),
            "too-many-counters"
        );
        let counters: BTreeMap<String, i64> =
            serde_json::from_str(&state.steps.changed_counters().unwrap()).unwrap();
        assert_eq!((counters.len(), counters["c1"]), (MAX_COUNTERS, -1));
    }

    #[tokio::test]
    async fn a_job_without_the_grant_is_refused() {
        let mut state = GuestState::new(64 << 20, AttemptLog::new(1024), Capabilities::none());
        assert!(matches!(
            state.start("a".into()).await,
            Err(HostError::CapabilityRefused(r)) if r == "not-granted"
        ));
        assert_eq!(
            state.attempt.signals.refused_code(),
            Some(FailureCode::CapabilityRefused)
        );
    }
}
