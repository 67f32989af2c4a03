//! One test per store operation of a run's life, each run on both backends (River's
//! `riverdrivertest` shape): the Postgres functions (`migrations/postgres/functions`) and
//! their SQLite twin must leave the same rows. Queue, claim, record an ending, give back,
//! and the fence: a write under a lease that moved on is refused.

use crate::common;

use jobhost::queue::lease::LeaseTerms;
use jobhost::rules::claim_limits::{ClaimLimits, LimitKey, Order, Rate};
use jobhost::rules::enqueue::{OnConflict, Outcome, Unique, While};
use jobhost::rules::grants::DbGrant;
use jobhost::store::family::{ChildRun, Enqueue, ParentLink};
use jobhost::store::guest::{Access, Fence, GuestDb, GuestDbError, SqlValue};
use jobhost::store::{
    AttemptEnding, ClaimRequest, Claimed, GuestStart, Lease, NewRun, Origin, Recorded, Recording,
    RunChange, RunRecord, RunStatus, Store,
};
use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

const JOB: &str = "conform";
const HOST: &str = "host-a";

async fn store_with_job(home: &common::Home) -> Store {
    store_with_limits(home, &Default::default()).await
}

/// The store with the job registered under these claim limits.
async fn store_with_limits(home: &common::Home, limits: &ClaimLimits) -> Store {
    let store = home.store().await;
    common::register_job(&store, JOB, limits).await;
    store
}

/// A run of the job whose payload names customer `customer`.
fn keyed_run(id: &str, instance: &str, customer: &str) -> NewRun {
    NewRun {
        payload: serde_json::json!({"c": {"id": customer}}).to_string(),
        ..new_run(id, instance, 0)
    }
}

fn ids(claimed: &[Claimed]) -> Vec<&str> {
    claimed.iter().map(|c| c.run.id.as_str()).collect()
}

fn new_run(id: &str, instance: &str, delay_ms: i64) -> NewRun {
    NewRun {
        id: id.into(),
        job: JOB.into(),
        instance: instance.into(),
        tenant: "default".into(),
        origin: Origin::Kick,
        payload: "{\"n\":1}".into(),
        cursor: None,
        component_digest: None,
        scheduled_for: None,
        rerun_of: None,
        delay_ms,
        trace_parent: None,
    }
}

async fn claim(store: &Store, limit: i64) -> Vec<Claimed> {
    let terms = BTreeMap::from([(
        JOB.to_string(),
        LeaseTerms {
            grace: Duration::from_secs(5),
        }
        .attempt(Duration::from_secs(60), Duration::from_secs(30), "conform"),
    )]);
    let mut claimed = store
        .claim_runs(&ClaimRequest {
            host: HOST,
            limit,
            run_id: None,
            terms: &terms,
            paused: &[],
        })
        .await
        .unwrap();
    claimed.sort_by(|a, b| a.run.id.cmp(&b.run.id));
    claimed
}

/// A row as a whole, to compare (records do not implement `PartialEq`).
fn whole(run: &RunRecord) -> serde_json::Value {
    serde_json::to_value(run).unwrap()
}

async fn run(store: &Store, id: &str) -> RunRecord {
    store.get_run(id).await.unwrap().expect("the run")
}

fn ending(claimed: &RunRecord, status: &'static str) -> AttemptEnding {
    AttemptEnding {
        seq: claimed.attempts,
        pass: claimed.pass,
        attempt: claimed.failures + 1,
        host: HOST.into(),
        status,
        outcome: (status == "succeeded").then_some("done"),
        code: (status == "failed").then_some("handler_failed"),
        fuel_used: Some(7),
        peak_memory: None,
        duration_ms: 3,
        log: "said hello".into(),
        log_truncated: false,
        started_at: claimed.updated_at,
    }
}

fn finish(claimed: &RunRecord, lease: &Lease) -> Recording {
    Recording {
        run_id: claimed.id.clone(),
        lease: lease.clone(),
        attempt: Some(ending(claimed, "succeeded")),
        change: RunChange::Finish {
            require_lease: true,
            status: RunStatus::Succeeded,
            code: None,
            error: None,
            cursor: None,
            counters: None,
            pass: claimed.pass,
            failures: claimed.failures,
            follow_up: None,
            report: None,
        },
    }
}

fn retry(claimed: &RunRecord, lease: &Lease, delay_ms: i64, hold_ms: i64) -> Recording {
    Recording {
        run_id: claimed.id.clone(),
        lease: lease.clone(),
        attempt: Some(ending(claimed, "failed")),
        change: RunChange::Requeue {
            delay_ms,
            hold_ms,
            pass: claimed.pass,
            cursor: None,
            counters: None,
            failures: claimed.failures + 1,
            defers: claimed.defers,
            code: Some("handler_failed"),
            error: Some("it broke".into()),
        },
    }
}

fn give_back(claimed: &RunRecord, lease: &Lease, hold_ms: i64) -> Recording {
    Recording {
        run_id: claimed.id.clone(),
        lease: lease.clone(),
        attempt: None,
        change: RunChange::GiveBack { hold_ms },
    }
}

fn only(claimed: Vec<Claimed>) -> (RunRecord, Lease) {
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    let claimed = claimed.into_iter().next().unwrap();
    let lease = claimed.lease.expect("claimed with a lease");
    (claimed.run, lease)
}

on_every_backend! {
    async fn a_claim_passes_over_runs_over_concurrency_until_a_slot_frees(home) {
        let limits = ClaimLimits { concurrency: NonZeroU32::new(2), ..Default::default() };
        let store = store_with_limits(&home, &limits).await;
        for (id, instance) in [("r1", "a"), ("r2", "b"), ("r3", "c")] {
            store.insert_run(&new_run(id, instance, 0)).await.unwrap();
        }
        let first = claim(&store, 10).await;
        assert_eq!(ids(&first), ["r1", "r2"]);
        // Held, not claimed: no attempt, no lease, and it says why.
        assert!(claim(&store, 10).await.is_empty());
        let held = run(&store, "r3").await;
        assert_eq!((held.status.as_str(), held.attempts), ("queued", 0));
        assert!(store.get_lease(JOB, "c").await.unwrap().is_none());
        assert_eq!(store.run_hold("r3").await.unwrap(), Some((false, Some("concurrency".into()))));
        assert_eq!(store.run_hold("r1").await.unwrap(), None, "not queued");
        // An ending frees the slot: counted from the runs' status.
        let lease = first[0].lease.clone().unwrap();
        store.record_attempts(&[finish(&first[0].run, &lease)]).await;
        assert_eq!(store.run_hold("r3").await.unwrap(), Some((false, None)));
        assert_eq!(ids(&claim(&store, 10).await), ["r3"]);
    }

    async fn per_key_fifo_claims_the_oldest_run_of_each_key_one_at_a_time(home) {
        let limits = ClaimLimits {
            key: Some(LimitKey::parse("/c/id").unwrap()),
            order: Some(Order::Fifo),
            ..Default::default()
        };
        let store = store_with_limits(&home, &limits).await;
        for (id, instance, customer) in [("r1", "a", "x"), ("r2", "b", "x"), ("r3", "c", "y"), ("r4", "d", "x")] {
            store.insert_run(&keyed_run(id, instance, customer)).await.unwrap();
        }
        assert_eq!(store.run_hold("r2").await.unwrap(), Some((false, Some("key".into()))));
        // One of each key, never a second of a key: other keys are not blocked.
        let first = claim(&store, 10).await;
        assert_eq!(ids(&first), ["r1", "r3"]);
        assert!(claim(&store, 10).await.is_empty());
        // A retry keeps its place: the key waits for it, not for the next run.
        let lease = first[0].lease.clone().unwrap();
        store.record_attempts(&[retry(&first[0].run, &lease, 60_000, 60_000)]).await;
        assert!(claim(&store, 10).await.is_empty(), "r2 must not overtake the retrying r1");
        assert_eq!(store.run_hold("r2").await.unwrap(), Some((false, Some("key".into()))));
        home.exec("UPDATE jobhost_runs SET next_attempt_at = 0 WHERE id = 'r1'").await;
        let again = claim(&store, 10).await;
        assert_eq!(ids(&again), ["r1"]);
        let lease = again[0].lease.clone().unwrap();
        store.record_attempts(&[finish(&again[0].run, &lease)]).await;
        assert_eq!(ids(&claim(&store, 10).await), ["r2"]);
    }

    async fn a_rate_starts_at_most_its_count_in_a_window(home) {
        let limits = ClaimLimits { rate: Some(Rate::parse("2/s").unwrap()), ..Default::default() };
        let store = store_with_limits(&home, &limits).await;
        for (id, instance) in [("r1", "a"), ("r2", "b"), ("r3", "c")] {
            store.insert_run(&new_run(id, instance, 0)).await.unwrap();
        }
        let started = std::time::Instant::now();
        assert_eq!(claim(&store, 10).await.len(), 2);
        assert!(claim(&store, 10).await.is_empty());
        assert_eq!(store.run_hold("r3").await.unwrap(), Some((false, Some("rate".into()))));
        // The dispatcher's next look is when the window drops its oldest start.
        let due = store.next_due_in(&[JOB]).await.unwrap().expect("a time");
        assert!((1..=1_000).contains(&due), "next due in {due} ms");
        tokio::time::sleep(Duration::from_millis(1_050).saturating_sub(started.elapsed())).await;
        assert_eq!(ids(&claim(&store, 10).await), ["r3"]);
    }

    async fn a_batch_of_many_runs_of_one_job_and_key_starts_exactly_their_free_slots(home) {
        let limits = ClaimLimits {
            concurrency: NonZeroU32::new(4),
            key: Some(LimitKey::parse("/c/id").unwrap()),
            key_concurrency: NonZeroU32::new(2),
            ..Default::default()
        };
        let store = store_with_limits(&home, &limits).await;
        let runs = [
            ("r1", "x"), ("r2", "x"), ("r3", "x"), ("r4", "x"), ("r5", "x"),
            ("r6", "y"), ("r7", "z"), ("r8", "z"), ("r9", "z"),
        ];
        for (id, customer) in runs {
            store.insert_run(&keyed_run(id, &format!("i-{id}"), customer)).await.unwrap();
        }
        assert_eq!(ids(&claim(&store, 1).await), ["r1"]);
        // One claim holds every run: x has one of its two slots left, y two, z two, so
        // r2, r6, r7, r8 pass their keys; the job has three of its four left, taken in
        // queue order.
        assert_eq!(ids(&claim(&store, 20).await), ["r2", "r6", "r7"]);
        let running = async |key: &str| {
            home.scalar(&format!(
                "SELECT COUNT(*) FROM jobhost_runs WHERE status = 'running' AND limit_key = '{key}'"
            ))
            .await
        };
        assert_eq!((running("x").await, running("y").await, running("z").await), (2, 1, 1));
        assert!(claim(&store, 20).await.is_empty(), "the job is full");
        for held in ["r3", "r4", "r5", "r8", "r9"] {
            let run = run(&store, held).await;
            assert_eq!((run.status.as_str(), run.attempts, run.generation), ("queued", 0, None), "{held}");
        }
        assert_eq!(store.run_hold("r8").await.unwrap(), Some((false, Some("concurrency".into()))));
    }

    async fn a_batch_under_rates_enters_exactly_the_windows_free_starts(home) {
        let limits = ClaimLimits {
            rate: Some(Rate::parse("3/min").unwrap()),
            key: Some(LimitKey::parse("/c/id").unwrap()),
            key_rate: Some(Rate::parse("1/min").unwrap()),
            ..Default::default()
        };
        let store = store_with_limits(&home, &limits).await;
        let runs = [("r1", "x"), ("r2", "x"), ("r3", "y"), ("r4", "y"), ("r5", "z"), ("r6", "w")];
        for (id, customer) in runs {
            store.insert_run(&keyed_run(id, &format!("i-{id}"), customer)).await.unwrap();
        }
        // One start per key (r2 and r4 wait for theirs), three for the job: w's r6 waits
        // for the job's window.
        assert_eq!(ids(&claim(&store, 20).await), ["r1", "r3", "r5"]);
        assert!(claim(&store, 20).await.is_empty());
        let window = async |scope: i64| {
            home.scalar(&format!("SELECT COUNT(*) FROM jobhost_rate_starts WHERE scope = {scope}"))
                .await
        };
        assert_eq!((window(0).await, window(1).await), (3, 3), "each start in both windows");
        assert_eq!(store.run_hold("r6").await.unwrap(), Some((false, Some("rate".into()))));
        assert_eq!(store.run_hold("r2").await.unwrap(), Some((false, Some("rate".into()))));
    }

    async fn a_claimed_run_is_shown_claimed_until_its_guest_start_is_written(home) {
        let store = store_with_job(&home).await;
        for (id, instance) in [("r1", "a"), ("r2", "b")] {
            store.insert_run(&new_run(id, instance, 0)).await.unwrap();
        }
        let claimed = claim(&store, 10).await;
        assert_eq!(ids(&claimed), ["r1", "r2"]);
        let r1 = run(&store, "r1").await;
        assert_eq!((r1.status.as_str(), r1.shown_status()), ("running", "claimed"));
        assert_eq!((r1.started_at, r1.guest_started_at), (None, None), "claimed, not started");
        let (lease1, lease2) = (claimed[0].lease.clone().unwrap(), claimed[1].lease.clone().unwrap());
        let at = r1.updated_at + 250;
        let start = |id: &str, generation, at| GuestStart { run_id: id.into(), generation, at };
        // A start of another attempt (an older generation) changes nothing.
        store.mark_guests_started(&[start("r1", lease1.generation - 1, at)]).await.unwrap();
        assert_eq!(run(&store, "r1").await.shown_status(), "claimed");
        store.mark_guests_started(&[start("r1", lease1.generation, at)]).await.unwrap();
        let r1 = run(&store, "r1").await;
        assert_eq!(r1.shown_status(), "running");
        assert_eq!((r1.started_at, r1.guest_started_at), (Some(at), Some(at)));
        // Its ending keeps the start written; the attempt's row says the same.
        let mut ended = finish(&claimed[0].run, &lease1);
        ended.attempt.as_mut().unwrap().started_at = at;
        assert_eq!(store.record_attempts(&[ended]).await[0].as_ref().unwrap(), &Recorded::Finished { follow_up: None });
        let r1 = run(&store, "r1").await;
        assert_eq!((r1.status.as_str(), r1.started_at), ("succeeded", Some(at)));
        assert_eq!(store.list_attempts("r1", 10).await.unwrap()[0].started_at, at);
        // A run that ended before its start was written takes its attempt's; the start
        // written late changes nothing.
        let mut ended = finish(&claimed[1].run, &lease2);
        ended.attempt.as_mut().unwrap().started_at = at + 7;
        store.record_attempts(&[ended]).await;
        store.mark_guests_started(&[start("r2", lease2.generation, at + 50)]).await.unwrap();
        let r2 = run(&store, "r2").await;
        assert_eq!((r2.status.as_str(), r2.started_at), ("succeeded", Some(at + 7)));
    }

    async fn a_run_given_back_unstarted_has_no_start(home) {
        let store = store_with_job(&home).await;
        store.insert_run(&new_run("r1", "a", 0)).await.unwrap();
        let claimed = claim(&store, 10).await;
        let lease = claimed[0].lease.clone().unwrap();
        store.record_attempts(&[give_back(&claimed[0].run, &lease, 0)]).await;
        let r1 = run(&store, "r1").await;
        assert_eq!((r1.status.as_str(), r1.started_at), ("queued", None));
    }

    async fn expired_rows_of_the_rates_windows_are_pruned_in_bounded_batches(home) {
        let limits = ClaimLimits {
            rate: Some(Rate::parse("2/s").unwrap()),
            key: Some(LimitKey::parse("/c").unwrap()),
            key_rate: Some(Rate::parse("5/min").unwrap()),
            ..Default::default()
        };
        let store = store_with_limits(&home, &limits).await;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        // (job, scope, key, age in ms, kept): the job's window is a second, a key's a
        // minute; a job with no rate keeps none.
        let rows = [
            (JOB, 0, "", 5_000, false),
            (JOB, 0, "", 20_000, false),
            (JOB, 0, "", 100, true),
            (JOB, 1, "k1", 30_000, true),
            (JOB, 1, "k2", 120_000, false),
            ("unrated", 0, "", 100, false),
        ];
        for (job, scope, key, age, _) in rows {
            home.exec(&format!(
                "INSERT INTO jobhost_rate_starts (job, scope, key, at) VALUES ('{job}', {scope}, '{key}', {})",
                now - age
            ))
            .await;
        }
        let left = || home.scalar("SELECT COUNT(*) FROM jobhost_rate_starts");
        assert_eq!(store.prune_rate_starts(2).await.unwrap(), 2, "bounded");
        assert_eq!(left().await, 4);
        assert_eq!(store.prune_rate_starts(100).await.unwrap(), 2);
        assert_eq!(store.prune_rate_starts(100).await.unwrap(), 0);
        let kept = rows.iter().filter(|r| r.4).count() as i64;
        assert_eq!(left().await, kept);
        assert_eq!(home.scalar(&format!("SELECT COUNT(*) FROM jobhost_rate_starts WHERE at >= {}", now - 30_000)).await, kept);
    }

    async fn enqueue_writes_a_queued_run_with_no_attempt_and_no_lease(home) {
        let store = store_with_job(&home).await;
        let queued = store.insert_run(&new_run("r-enqueue", "i1", 5_000)).await.unwrap();
        assert_eq!(
            (queued.id.as_str(), queued.job.as_str(), queued.instance.as_str()),
            ("r-enqueue", JOB, "i1")
        );
        assert_eq!((queued.tenant.as_str(), queued.origin.as_str()), ("default", "kick"));
        assert_eq!((queued.status.as_str(), queued.payload.as_str()), ("queued", "{\"n\":1}"));
        assert_eq!((queued.attempts, queued.failures, queued.pass), (0, 0, 1));
        assert_eq!((queued.generation, queued.host.as_deref()), (None, None));
        assert_eq!((queued.started_at, queued.finished_at), (None, None));
        let due_in = queued.next_attempt_at - queued.created_at;
        assert!((5_000..6_000).contains(&due_in), "due in {due_in} ms");
        assert_eq!(whole(&run(&store, "r-enqueue").await), whole(&queued));
        assert!(store.get_lease(JOB, "i1").await.unwrap().is_none());
        // Not due yet: a claim leaves it queued.
        assert!(claim(&store, 10).await.is_empty());
        assert_eq!(whole(&run(&store, "r-enqueue").await), whole(&queued));
    }

    async fn a_claim_leases_and_starts_at_most_its_limit_of_due_runs(home) {
        let store = store_with_job(&home).await;
        for (id, instance, delay) in
            [("r1", "a", 0), ("r2", "b", 0), ("r3", "c", 0), ("r4", "d", 60_000)]
        {
            store.insert_run(&new_run(id, instance, delay)).await.unwrap();
        }
        let first = claim(&store, 2).await;
        let second = claim(&store, 10).await;
        assert_eq!(first.len(), 2);
        assert_eq!(second.len(), 1);
        let mut ids: Vec<&str> = first.iter().chain(&second).map(|c| c.run.id.as_str()).collect();
        ids.sort_unstable();
        assert_eq!(ids, ["r1", "r2", "r3"], "the three due runs, each once");
        for claimed in first.iter().chain(&second) {
            let lease = claimed.lease.as_ref().expect("a lease");
            let row = run(&store, &claimed.run.id).await;
            assert_eq!(whole(&row), whole(&claimed.run));
            assert_eq!((row.status.as_str(), row.host.as_deref()), ("running", Some(HOST)));
            assert_eq!((row.attempts, row.failures, row.generation), (1, 0, Some(lease.generation)));
            // Claimed, not started: its guest's start is written when a worker starts it.
            assert_eq!((row.started_at, row.shown_status()), (None, "claimed"));
            assert_eq!(
                (lease.job.as_str(), lease.instance.as_str(), lease.holder.as_str()),
                (JOB, row.instance.as_str(), row.id.as_str())
            );
            let held = store.get_lease(JOB, &row.instance).await.unwrap().expect("a lease row");
            assert_eq!(held.holder.as_deref(), Some(row.id.as_str()));
            assert_eq!(
                (held.generation, held.deadline_at, held.expires_at),
                (lease.generation, lease.deadline_at, lease.expires_at)
            );
            assert!(lease.deadline_at <= lease.expires_at);
        }
        let waiting = run(&store, "r4").await;
        assert_eq!((waiting.status.as_str(), waiting.attempts), ("queued", 0));
        assert!(claim(&store, 10).await.is_empty());
    }

    async fn a_finished_attempt_ends_its_run_writes_its_attempt_and_frees_its_lease(home) {
        let store = store_with_job(&home).await;
        store.insert_run(&new_run("r-done", "i1", 0)).await.unwrap();
        let (claimed, lease) = only(claim(&store, 1).await);
        let answers = store.record_attempts(&[finish(&claimed, &lease)]).await;
        assert_eq!(
            answers.into_iter().map(Result::unwrap).collect::<Vec<_>>(),
            [Recorded::Finished { follow_up: None }]
        );
        let done = run(&store, "r-done").await;
        assert_eq!((done.status.as_str(), done.attempts, done.failures), ("succeeded", 1, 0));
        assert_eq!((done.last_code.as_deref(), done.generation), (None, Some(lease.generation)));
        assert!(done.finished_at.is_some());
        let attempts = store.list_attempts("r-done", 10).await.unwrap();
        assert_eq!(attempts.len(), 1, "{attempts:?}");
        assert_eq!(
            (attempts[0].status.as_str(), attempts[0].host.as_str(), attempts[0].log.as_str()),
            ("succeeded", HOST, "said hello")
        );
        assert_eq!(attempts[0].fuel_used, Some(7));
        let freed = store.get_lease(JOB, "i1").await.unwrap();
        assert!(
            freed.as_ref().is_none_or(|l| l.holder.is_none()),
            "the lease is free: {freed:?}"
        );
        // Recorded twice (a finisher's retry): the second finds the run over.
        let again = store.record_attempts(&[finish(&claimed, &lease)]).await;
        assert_eq!(again[0].as_ref().unwrap(), &Recorded::LeaseLost);
        assert_eq!(whole(&run(&store, "r-done").await), whole(&done));
    }

    async fn a_failed_attempt_requeues_its_run_with_its_lease_parked(home) {
        let store = store_with_job(&home).await;
        store.insert_run(&new_run("r-retry", "i1", 0)).await.unwrap();
        let (claimed, lease) = only(claim(&store, 1).await);
        let answers = store.record_attempts(&[retry(&claimed, &lease, 0, 60_000)]).await;
        assert_eq!(answers.into_iter().map(Result::unwrap).collect::<Vec<_>>(), [Recorded::Requeued]);
        let queued = run(&store, "r-retry").await;
        assert_eq!((queued.status.as_str(), queued.attempts, queued.failures), ("queued", 1, 1));
        assert_eq!(queued.last_code.as_deref(), Some("handler_failed"));
        let attempts = store.list_attempts("r-retry", 10).await.unwrap();
        assert_eq!(attempts.len(), 1);
        assert_eq!(attempts[0].status, "failed");
        // Parked: held for the run, so the next claim takes it at the next generation.
        let parked = store.get_lease(JOB, "i1").await.unwrap().expect("a lease row");
        assert_eq!(parked.holder.as_deref(), Some("r-retry"));
        assert_eq!(parked.generation, lease.generation);
        let (again, next) = only(claim(&store, 1).await);
        assert_eq!(again.id, "r-retry");
        assert_eq!((again.attempts, again.failures), (2, 1));
        assert_eq!(next.generation, lease.generation + 1);
    }

    async fn a_given_back_run_is_queued_as_it_was_before_its_claim(home) {
        let store = store_with_job(&home).await;
        let before = store.insert_run(&new_run("r-back", "i1", 0)).await.unwrap();
        let (claimed, lease) = only(claim(&store, 1).await);
        let answers = store.record_attempts(&[give_back(&claimed, &lease, 60_000)]).await;
        assert_eq!(answers.into_iter().map(Result::unwrap).collect::<Vec<_>>(), [Recorded::Requeued]);
        let back = run(&store, "r-back").await;
        assert_eq!((back.status.as_str(), back.attempts, back.failures), ("queued", 0, 0));
        assert_eq!(back.last_code, before.last_code);
        assert!(store.list_attempts("r-back", 10).await.unwrap().is_empty());
        let parked = store.get_lease(JOB, "i1").await.unwrap().expect("a lease row");
        assert_eq!((parked.holder.as_deref(), parked.generation), (Some("r-back"), lease.generation));
        let (again, next) = only(claim(&store, 1).await);
        assert_eq!((again.id.as_str(), again.attempts), ("r-back", 1));
        assert_eq!(next.generation, lease.generation + 1);
    }

    async fn a_stale_lease_can_neither_end_the_run_nor_write_for_it(home) {
        let store = store_with_job(&home).await;
        home.exec("CREATE TABLE conform_writes (run_id TEXT NOT NULL)").await;
        store.insert_run(&new_run("r-fence", "i1", 0)).await.unwrap();
        let (first, stale) = only(claim(&store, 1).await);
        store.record_attempts(&[retry(&first, &stale, 0, 60_000)]).await[0].as_ref().unwrap();
        let (second, current) = only(claim(&store, 1).await);
        assert_eq!(current.generation, stale.generation + 1);

        // The first attempt's ending, late: refused, nothing changed.
        let late = store.record_attempts(&[finish(&first, &stale)]).await;
        assert_eq!(late[0].as_ref().unwrap(), &Recorded::LeaseLost);
        assert_eq!(whole(&run(&store, "r-fence").await), whole(&second));

        // A guest write and a child run under the stale lease: refused, nothing written.
        let guest = GuestDb::open(&store).await.unwrap();
        let mut grant = DbGrant::default();
        grant.write.insert("conform_writes".into());
        let grant = Arc::new(grant);
        let fence_of = |lease: &Lease| Fence {
            job: lease.job.clone(),
            instance: lease.instance.clone(),
            generation: lease.generation,
            holder: lease.holder.clone(),
        };
        let write = |lease: Lease| {
            let access = Access {
                grant: grant.clone(),
                fence: fence_of(&lease),
                tenant: "default".into(),
                deadline: tokio::time::Instant::now() + Duration::from_secs(30),
            };
            let guest = &guest;
            async move {
                let until = tokio::time::Instant::now() + Duration::from_secs(10);
                let mut tx = guest.begin(&access, until).await?;
                tx.execute(
                    "INSERT INTO conform_writes (run_id) VALUES ($1)",
                    &[SqlValue::Text(format!("gen-{}", lease.generation))],
                )
                .await?;
                tx.commit().await
            }
        };
        assert!(matches!(write(stale.clone()).await, Err(GuestDbError::LeaseLost)));
        write(current.clone()).await.unwrap();
        assert_eq!(home.scalar("SELECT COUNT(*) FROM conform_writes").await, 1);
        let current_gen = format!("gen-{}", current.generation);
        assert_eq!(
            home.scalar(&format!(
                "SELECT COUNT(*) FROM conform_writes WHERE run_id = '{current_gen}'"
            ))
            .await,
            1
        );

        let child = |id: &str, claimed: &RunRecord, lease: &Lease| Enqueue {
            parent: ParentLink {
                run_id: claimed.id.clone(),
                generation: lease.generation,
                pass: claimed.pass,
                attempt: claimed.attempts,
            },
            runs: vec![ChildRun {
                id: id.into(),
                job: JOB.into(),
                instance: "child".into(),
                tenant: "default".into(),
                origin: "child",
                payload: "{}".into(),
                delay_ms: 0,
                trace_parent: None,
                parent_attempt: claimed.attempts,
                detached: 0,
                event: None,
                max_attempts: None,
                unique: None,
            }],
        };
        let refused = store
            .enqueue_fenced(&fence_of(&stale), &child("r-child-stale", &first, &stale))
            .await;
        assert!(matches!(refused, Err(GuestDbError::LeaseLost)), "{refused:?}");
        assert!(store.get_run("r-child-stale").await.unwrap().is_none());

        // Under the current lease the child is queued, once.
        let write = child("r-child", &second, &current);
        // Made again (a retried pass), it answers the same run: `joined`.
        for outcome in [Outcome::Created, Outcome::Joined] {
            let answered = store.enqueue_fenced(&fence_of(&current), &write).await.unwrap();
            let answered: Vec<_> = answered.iter().map(|a| (a.outcome, a.run_id.as_str())).collect();
            assert_eq!(answered, [(outcome, "r-child")]);
        }
        // With a unique key, the same write made again is its own run; another run's
        // write of the key joins it (the one unique rule, before any insert).
        let keyed = |id: &str| {
            let mut write = child(id, &second, &current);
            write.runs[0].unique = Some(Unique {
                key: "k".into(),
                hold: While::UntilFinished,
                on_conflict: OnConflict::Keep,
            });
            write
        };
        for (id, outcome) in [
            ("r-keyed", Outcome::Created),
            ("r-keyed", Outcome::Joined),
            ("r-keyed-2", Outcome::Joined),
        ] {
            let answered = store.enqueue_fenced(&fence_of(&current), &keyed(id)).await.unwrap();
            let answered: Vec<_> = answered.iter().map(|a| (a.outcome, a.run_id.as_str())).collect();
            assert_eq!(answered, [(outcome, "r-keyed")], "{id}");
        }
        assert!(store.get_run("r-keyed-2").await.unwrap().is_none());
        let queued = run(&store, "r-child").await;
        assert_eq!((queued.status.as_str(), queued.origin.as_str()), ("queued", "child"));
        assert_eq!((queued.attempts, queued.parent_run.as_deref()), (0, Some("r-fence")));

        // The current attempt still ends its run.
        let ended = store.record_attempts(&[finish(&second, &current)]).await;
        assert_eq!(ended[0].as_ref().unwrap(), &Recorded::Finished { follow_up: None });
        assert_eq!(run(&store, "r-fence").await.status, "succeeded");
    }
}
