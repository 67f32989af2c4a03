//! `jobhost:job/steps`: memoised steps, counters, and a pass's end committed with the
//! guest's writes. This only translates and checks: names and results against the
//! bounds, each name once per attempt; the rows are the store's (`store::steps`), what a
//! committed end means is the runner's.

use crate::rules::json_rule;
use crate::sandbox::capability::context::AttemptContext;
use crate::sandbox::capability::handles::TxHandle;
use crate::sandbox::capability::shared::Attempt;
use crate::sandbox::capability::view::View;
use crate::sandbox::engine::bindings::jobhost::job::steps::{Host, PassEnd};
use crate::sandbox::engine::bindings::jobhost::job::types::HostError;
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

/// The session, or a refusal: the job was not granted `steps` (noted in `attempt`), or
/// the pass's end is committed and nothing more belongs to it. Borrowed beside the
/// capability's other state and the attempt, not cloned.
fn open<'s>(
    session: &'s Option<StepsSession>,
    attempt: &mut Attempt,
) -> Result<&'s StepsSession, HostError> {
    let Some(session) = session else {
        attempt
            .signals
            .refuse(crate::sandbox::refusal::capability_not_granted("steps"));
        return Err(HostError::CapabilityRefused("not-granted".into()));
    };
    if attempt.signals.committed.is_some() {
        return Err(invalid("pass-committed"));
    }
    Ok(session)
}

impl View<'_, StepsCapability> {
    /// Checks a result about to be recorded for `name`: reached, not yet recorded, JSON
    /// by the queue-safety rule, within the ledger's bound. Returns it canonical.
    fn recordable(&mut self, name: &str, result: &str) -> Result<String, HostError> {
        open(&self.own.session, self.attempt)?;
        let steps = &*self.own;
        if !steps.reached.contains(name) {
            return Err(invalid("step-not-started"));
        }
        if steps.recorded.contains(name) {
            return Err(invalid("step-recorded"));
        }
        let canonical = json_rule::canonical(result.as_bytes(), json_rule::STEP_RESULT)
            .map_err(|refusal| invalid(refusal.code()))?;
        if steps.ledger_bytes + canonical.len() > MAX_LEDGER_BYTES {
            return Err(invalid("ledger-full"));
        }
        Ok(canonical)
    }
}

impl StepsCapability {
    fn step_recorded(&mut self, name: String, size: usize) {
        self.ledger_bytes += size;
        self.new_records += 1;
        self.recorded.insert(name);
    }

    fn step_write(&self, name: &str, result: String) -> ProgressWrite {
        let session = self.session.as_ref().expect("checked by recordable");
        ProgressWrite::Step {
            run_id: session.run_id.clone(),
            pass: session.pass,
            name: name.to_string(),
            result,
            generation: session.fence.generation,
        }
    }
}

impl Host for View<'_, StepsCapability> {
    async fn start(&mut self, name: String) -> Result<Option<String>, HostError> {
        crate::journaled!(self.attempt, "steps.start", (&name,), async {
            let session = open(&self.own.session, self.attempt)?;
            if !valid_name(&name, MAX_STEP_NAME_BYTES) {
                return Err(invalid("invalid-step-name"));
            }
            if self.own.reached.contains(&name) {
                self.attempt
                    .signals
                    .refuse(crate::sandbox::refusal::step_reused());
                return Err(invalid("step-reused"));
            }
            if self.own.ledger.is_none() {
                // One read per attempt, however many steps it reaches.
                let read = session
                    .store
                    .pass_steps(&session.run_id, session.pass)
                    .await;
                let Ok(read) = read else {
                    self.attempt.signals.unavailable = true;
                    return Err(HostError::Unavailable);
                };
                self.own.ledger_bytes = read.iter().map(|(_, r)| r.len()).sum();
                self.own.ledger = Some(read.into_iter().collect());
            }
            let steps = &mut *self.own;
            let ledger = steps.ledger.as_ref().expect("read above");
            let hit = ledger.get(&name).cloned();
            // Names reached are held in memory too: bounded like the ledger.
            let full = steps.reached.len() >= MAX_STEPS_PER_PASS
                || (hit.is_none() && ledger.len() + steps.new_records >= MAX_STEPS_PER_PASS);
            if full {
                return Err(invalid("too-many-steps"));
            }
            if hit.is_some() {
                steps.recorded.insert(name.clone());
            }
            steps.reached.insert(name);
            Ok(hit)
        })
    }

    async fn record(&mut self, name: String, result: String) -> Result<(), HostError> {
        crate::journaled!(self.attempt, "steps.record", (&name, &result), async {
            let result = self.recordable(&name, &result)?;
            self.attempt.own_write_allowed().await?;
            let session = self.own.session.as_ref().expect("checked by recordable");
            let size = result.len();
            let recorded = session
                .store
                .record_step_fenced(
                    &session.fence,
                    &session.run_id,
                    session.pass,
                    &name,
                    &result,
                )
                .await;
            match recorded {
                Ok(true) => {
                    self.own.step_recorded(name, size);
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
        tx: Resource<TxHandle>,
        name: String,
        result: String,
    ) -> Result<(), HostError> {
        crate::journaled!(self.attempt, "steps.record-in", (&name, &result), async {
            let result = self.recordable(&name, &result)?;
            let size = result.len();
            let write = self.own.step_write(&name, result);
            let written = self
                .attempt
                .guest_tx(&tx)?
                .apply(TxEffect::Progress(&write))
                .await;
            let written = written.and_then(Applied::progress);
            match self.attempt.translate(written)? {
                true => {
                    self.own.step_recorded(name, size);
                    Ok(())
                }
                false => Err(HostError::QueryRefused("failed".into())),
            }
        })
    }

    async fn counter_add(&mut self, name: String, delta: i64) -> Result<i64, HostError> {
        crate::journaled!(self.attempt, "steps.counter-add", (&name, delta), async {
            open(&self.own.session, self.attempt)?;
            if !valid_name(&name, MAX_COUNTER_NAME_BYTES) {
                return Err(invalid("invalid-counter-name"));
            }
            let counters = &mut self.own.counters;
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
            self.own.counters_changed = true;
            Ok(value)
        })
    }

    async fn commit_pass(&mut self, tx: Resource<TxHandle>, end: PassEnd) -> Result<(), HostError> {
        let taken = self.attempt.take_tx(tx)?;
        crate::journaled!(self.attempt, "steps.commit-pass", (&end,), async {
            let checked = open(&self.own.session, self.attempt)
                .map(|s| (s.run_id.clone(), s.pass, s.fence.generation));
            let Some(mut taken) = taken else {
                return Err(invalid("unknown-transaction"));
            };
            let (run_id, pass, generation) = match checked {
                Ok(session) => session,
                Err(refused) => {
                    self.attempt.roll_back_taken(taken).await;
                    return Err(refused);
                }
            };
            let committed = match end {
                PassEnd::Done => CommittedEnd::Done,
                PassEnd::Continue(cursor) => {
                    match json_rule::canonical(cursor.as_bytes(), json_rule::CURSOR) {
                        Ok(cursor) => CommittedEnd::Continue { cursor },
                        Err(refusal) => {
                            self.attempt.roll_back_taken(taken).await;
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
                counters: counters_json(&self.own.counters),
                done: committed == CommittedEnd::Done,
            };
            let written = taken.apply(TxEffect::Progress(&write)).await;
            let written = written.and_then(Applied::progress);
            match written {
                Ok(true) => {}
                // The run is no longer running this attempt's pass: its lease moved on.
                Ok(false) => {
                    self.attempt.roll_back_taken(taken).await;
                    return self.attempt.translate(Err(GuestDbError::LeaseLost));
                }
                Err(e) => {
                    self.attempt.roll_back_taken(taken).await;
                    return self.attempt.translate(Err(e));
                }
            }
            self.attempt.commit_taken(taken).await?;
            self.attempt.signals.committed = Some(committed);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::failure::FailureCode;
    use crate::sandbox::capability::fixture::{self, Leased, reason};

    /// An attempt's `steps` of `pass`, on the store in `dir` holding the lease, and the
    /// attempt's shared piece.
    async fn attempt(dir: &tempfile::TempDir, pass: i64) -> (StepsCapability, Attempt, Store) {
        let leased = Leased::open(dir.path()).await;
        let session = StepsSession {
            store: leased.store.clone(),
            fence: leased.lease.fence(),
            run_id: "run-1".into(),
            pass,
            counters: BTreeMap::from([("near".to_string(), i64::MAX - 1)]),
        };
        (
            StepsCapability::new(Some(session)),
            fixture::attempt(),
            leased.store,
        )
    }

    #[tokio::test]
    async fn a_recorded_step_is_a_hit_for_the_next_attempt_and_a_name_is_reached_once() {
        let dir = tempfile::tempdir().unwrap();
        let (mut steps, mut shared, _) = attempt(&dir, 1).await;
        let mut first = View::new(&mut steps, &mut shared);
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
        let (mut steps, mut shared, store) = attempt(&dir, 1).await;
        let mut second = View::new(&mut steps, &mut shared);
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
        let (mut steps, mut shared, _) = attempt(&dir, 2).await;
        let mut other = View::new(&mut steps, &mut shared);
        assert!(matches!(other.start("a".into()).await, Ok(None)));
        assert_eq!(store.run_steps("run-1").await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn names_results_and_counters_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let (mut steps, mut shared, _) = attempt(&dir, 1).await;
        let mut state = View::new(&mut steps, &mut shared);
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
            serde_json::from_str(&steps.changed_counters().unwrap()).unwrap();
        assert_eq!((counters.len(), counters["c1"]), (MAX_COUNTERS, -1));
    }

    #[tokio::test]
    async fn a_job_without_the_grant_is_refused() {
        let (mut steps, mut shared) = (StepsCapability::new(None), fixture::attempt());
        assert!(matches!(
            View::new(&mut steps, &mut shared).start("a".into()).await,
            Err(HostError::CapabilityRefused(r)) if r == "not-granted"
        ));
        assert_eq!(
            shared.signals.refused_code(),
            Some(FailureCode::CapabilityRefused)
        );
    }
}
