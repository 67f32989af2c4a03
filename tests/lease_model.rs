//! A model-based test of the lease protocol, against the real database on both backends.
//!
//! Proptest generates rounds of store operations from three simulated hosts — batched
//! claims that lease and start, guest writes fenced by the lease, retries, finishes (one
//! at a time and in batches), give-backs, kicks, surveillance, a transaction sitting on a
//! lease row — run concurrently, each one possibly cancelled at
//! one of its await points (as a deadline or a shutdown cancels a host call). After every
//! round and at the end (once every run has been driven to an end) it checks what must
//! always hold:
//!
//! - no guest write commits after its lease generation moved on or its deadline passed;
//! - every kick is followed by a run of its instance;
//! - no store operation fails (a deadlock or a busy database is a failure) or hangs;
//! - nothing is left holding the database when all operations are over (no connection
//!   back in a pool inside a transaction);
//! - the deadline the database enforces is never earlier than the one the host keeps;
//! - every run ends.
//!
//! `JOBHOST_MODEL_CASES` sets the number of cases per backend (default 6); failures are
//! kept in `lease_model.proptest-regressions` beside this file and replayed first.

use crate::common;

use common::{Backend, Home};
use jobhost::queue::lease::LeaseTerms;
use jobhost::rules::grants::DbGrant;
use jobhost::store::guest::{Access, Fence, GuestDb, GuestDbError, SqlValue};
use jobhost::store::{
    AttemptEnding, ClaimRequest, Claimed, Crash, Lease, LostRun, NewReport, NewRun, Origin,
    Recorded, Recording, ReportKind, RunChange, RunRecord, RunStatus, Store,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

const JOB: &str = "model";
const INSTANCES: [&str; 2] = ["a", "b"];
const HOSTS: usize = 3;
const TIMEOUT: Duration = Duration::from_millis(400);
const GRACE: Duration = Duration::from_millis(200);
/// How long a claimed attempt may wait before it starts (the runner's `start_within`).
const START_WITHIN: Duration = Duration::from_millis(100);
/// Longest any single store operation may take before the model calls it hung.
const OP_BOUND: Duration = Duration::from_secs(20);

#[derive(Debug, Clone)]
enum Op {
    /// `host kick`: queue a run, or set the holder's pending flag.
    Kick {
        instance: usize,
    },
    /// A scheduled run (no kick semantics).
    Enqueue {
        instance: usize,
    },
    /// Claim due runs and start their attempts, as the runner does.
    Claim {
        host: usize,
    },
    /// A guest write transaction of one of the host's attempts, held open for a while.
    Write {
        host: usize,
        slot: usize,
        hold_ms: u64,
    },
    /// The attempt failed: requeue the run for a retry (parking its lease).
    Retry {
        host: usize,
        slot: usize,
    },
    /// The attempt succeeded: finish the run and release its lease.
    Finish {
        host: usize,
        slot: usize,
    },
    /// Every attempt the host holds ends at once, recorded in one batch (as the
    /// finisher does), some succeeded, some to retry.
    FinishAll {
        host: usize,
    },
    /// A claimed attempt that never started goes back to the queue.
    GiveBack {
        host: usize,
        slot: usize,
    },
    /// Surveillance: mark runs whose lease expired as crashed.
    Surveil,
    /// A host finishes an attempt late, just as surveillance finds its lease expired.
    LateFinish {
        host: usize,
        slot: usize,
    },
    /// Another transaction sits on the lease row (a guest commit in progress).
    HoldLease {
        instance: usize,
        ms: u64,
    },
    Sleep {
        ms: u64,
    },
}

#[derive(Debug, Clone)]
struct Timed {
    op: Op,
    /// Drop the operation at this await point, if it has not finished by then.
    cancel_after: Option<u8>,
}

fn op() -> impl Strategy<Value = Op> {
    let host = 0..HOSTS;
    let instance = 0..INSTANCES.len();
    prop_oneof![
        3 => instance.clone().prop_map(|instance| Op::Kick { instance }),
        2 => instance.clone().prop_map(|instance| Op::Enqueue { instance }),
        5 => host.clone().prop_map(|host| Op::Claim { host }),
        4 => (host.clone(), 0..4usize, prop_oneof![Just(0u64), 10u64..150])
            .prop_map(|(host, slot, hold_ms)| Op::Write { host, slot, hold_ms }),
        2 => (host.clone(), 0..4usize).prop_map(|(host, slot)| Op::Retry { host, slot }),
        3 => (host.clone(), 0..4usize).prop_map(|(host, slot)| Op::Finish { host, slot }),
        2 => host.clone().prop_map(|host| Op::FinishAll { host }),
        1 => (host.clone(), 0..4usize).prop_map(|(host, slot)| Op::GiveBack { host, slot }),
        2 => Just(Op::Surveil),
        2 => (host.clone(), 0..4usize).prop_map(|(host, slot)| Op::LateFinish { host, slot }),
        2 => (instance, 50u64..400).prop_map(|(instance, ms)| Op::HoldLease { instance, ms }),
        2 => (20u64..700).prop_map(|ms| Op::Sleep { ms }),
    ]
}

fn timed() -> impl Strategy<Value = Timed> {
    (
        op(),
        prop_oneof![3 => Just(None), 1 => (1u8..8).prop_map(Some)],
    )
        .prop_map(|(op, cancel_after)| Timed { op, cancel_after })
}

fn rounds() -> impl Strategy<Value = Vec<Vec<Timed>>> {
    prop::collection::vec(prop::collection::vec(timed(), 1..=3), 6..=18)
}

/// Drops a future at its `n`-th await point (the `n`-th time it is polled and not ready),
/// as a deadline or shutdown drops a host call in flight.
struct CancelAfter<F> {
    inner: Pin<Box<F>>,
    left: Option<u8>,
}

impl<F: Future> Future for CancelAfter<F> {
    type Output = Option<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.left == Some(0) {
            return Poll::Ready(None);
        }
        match self.inner.as_mut().poll(cx) {
            Poll::Ready(v) => Poll::Ready(Some(v)),
            Poll::Pending => {
                if let Some(n) = self.left.as_mut() {
                    *n -= 1;
                    if *n == 0 {
                        // Wake once more so the drop happens now, not at the next wake-up.
                        cx.waker().wake_by_ref();
                    }
                }
                Poll::Pending
            }
        }
    }
}

/// An attempt a simulated host believes it is running.
#[derive(Debug, Clone)]
struct Held {
    run: RunRecord,
    lease: Lease,
}

/// One simulated host process: its own connections, and what it believes it holds.
struct SimHost {
    id: String,
    store: Store,
    guest: GuestDb,
    held: Mutex<Vec<Held>>,
}

#[derive(Default)]
struct Record {
    violations: Vec<String>,
    /// (instance, database time just before the kick was issued).
    kicks: Vec<(String, i64)>,
    /// The deadline each started generation was given: (instance, generation) -> ms.
    deadlines: BTreeMap<(String, i64), i64>,
}

struct World {
    backend: Backend,
    hosts: Vec<Arc<SimHost>>,
    record: Mutex<Record>,
    grant: Arc<DbGrant>,
    /// A connection of the test's own, for checking the database.
    admin: Store,
    url: String,
}

impl World {
    fn violation(&self, text: String) {
        self.record.lock().unwrap().violations.push(text);
    }

    fn check<T>(&self, what: &str, result: Result<T, jobhost::store::StoreError>) -> Option<T> {
        match result {
            Ok(v) => Some(v),
            Err(e) => {
                self.violation(format!("{what} failed: {e}"));
                None
            }
        }
    }
}

fn ms(d: Duration) -> i64 {
    d.as_millis() as i64
}

fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn new_run(instance: &str, origin: Origin) -> NewRun {
    NewRun {
        id: jobhost::store::new_run_id(),
        job: JOB.into(),
        instance: instance.into(),
        tenant: "default".into(),
        origin,
        payload: "{}".into(),
        cursor: None,
        component_digest: None,
        scheduled_for: None,
        rerun_of: None,
        delay_ms: 0,
        trace_parent: None,
    }
}

fn terms() -> BTreeMap<String, jobhost::store::AttemptTerms> {
    let lease = LeaseTerms { grace: GRACE };
    BTreeMap::from([(
        JOB.to_string(),
        lease.attempt(TIMEOUT, START_WITHIN, "model"),
    )])
}

/// Claims up to `limit` due runs (or the one run `run_id`) for `host`, in one batch.
async fn claim(
    world: &World,
    host: &SimHost,
    limit: i64,
    run_id: Option<&str>,
) -> Option<Vec<Claimed>> {
    let terms = terms();
    let result = host
        .store
        .claim_runs(&ClaimRequest {
            host: &host.id,
            limit,
            run_id,
            terms: &terms,
            paused: &[],
        })
        .await;
    trace(|| {
        format!(
            "{} claimed {:?}",
            host.id,
            result.as_ref().map(|c| c
                .iter()
                .map(|c| (&c.run.id, c.lease.as_ref().map(|l| l.generation)))
                .collect::<Vec<_>>())
        )
    });
    world.check("claim_runs", result)
}

/// Takes a claimed run as the runner does. With a lease, the attempt is the host's (its
/// deadline checked against the host's own). Without: a run that held the lease before
/// lost it (recorded); a kick folds into the holder's pending flag, or, if the holder
/// ended meanwhile, claims again; anything else is skipped.
async fn start(world: &World, host: &SimHost, claimed: Claimed) -> Option<Held> {
    let mut claimed = claimed;
    for _ in 0..5 {
        let Claimed {
            run,
            lease,
            stamped_after,
            ..
        } = claimed;
        if let Some(lease) = lease {
            // The host's own deadline, as the runner takes it, on the wall clock.
            let now = tokio::time::Instant::now();
            let host_deadline = (now + TIMEOUT).min(stamped_after + TIMEOUT + START_WITHIN);
            let host_deadline = wall_ms() + ms(host_deadline.duration_since(now));
            if lease.deadline_at + 25 < host_deadline {
                world.violation(format!(
                    "generation {} of {} got a database deadline {} ms before the host's",
                    lease.generation,
                    lease.instance,
                    host_deadline - lease.deadline_at
                ));
            }
            world.record.lock().unwrap().deadlines.insert(
                (lease.instance.clone(), lease.generation),
                lease.deadline_at,
            );
            return Some(Held { run, lease });
        }
        if let Some(previous) = LeaseTerms::held_by(&run) {
            finish(
                world,
                host,
                &Held {
                    run,
                    lease: previous,
                },
                RunStatus::Failed,
            )
            .await;
            return None;
        }
        if run.origin != Origin::Kick.as_str()
            || world.check(
                "set_pending",
                host.store.set_pending(&run.job, &run.instance).await,
            )?
        {
            world.check("skip_run", host.store.skip_run(&run.id, "held").await)?;
            return None;
        }
        claimed = claim(world, host, 1, Some(&run.id)).await?.pop()?;
    }
    None
}

/// What the model's attempts record: a row per attempt, as the runner's.
fn ending(host: &SimHost, held: &Held, status: &'static str) -> AttemptEnding {
    AttemptEnding {
        seq: held.run.attempts,
        pass: held.run.pass,
        attempt: held.run.failures + 1,
        host: host.id.clone(),
        status,
        outcome: (status == "succeeded").then_some("done"),
        code: (status == "failed").then_some("handler_failed"),
        fuel_used: None,
        peak_memory: None,
        duration_ms: 1,
        log: String::new(),
        log_truncated: false,
        started_at: held.run.updated_at,
    }
}

/// The run ends `status`. A success requires the lease; if it was lost, the loss is
/// recorded instead, as the finisher does. A failure here is a lost lease.
fn finishing(host: &SimHost, held: &Held, status: RunStatus) -> Recording {
    let attempt = (status == RunStatus::Succeeded).then(|| ending(host, held, "succeeded"));
    Recording {
        run_id: held.run.id.clone(),
        lease: held.lease.clone(),
        attempt,
        change: RunChange::Finish {
            require_lease: status == RunStatus::Succeeded,
            status,
            code: (status == RunStatus::Failed).then_some("lease_lost"),
            error: None,
            cursor: None,
            counters: None,
            pass: held.run.pass,
            failures: held.run.failures,
            follow_up: Some(Box::new(jobhost::queue::kick::follow_up(
                &held.run,
                "{}".into(),
            ))),
            report: None,
        },
    }
}

fn retrying(host: &SimHost, held: &Held) -> Recording {
    Recording {
        run_id: held.run.id.clone(),
        lease: held.lease.clone(),
        attempt: Some(ending(host, held, "failed")),
        change: RunChange::Requeue {
            delay_ms: 20,
            hold_ms: ms(GRACE) * 4,
            pass: held.run.pass,
            cursor: None,
            counters: None,
            failures: held.run.failures + 1,
            defers: held.run.defers,
            code: Some("handler_failed"),
            error: None,
        },
    }
}

/// Records a batch of endings; an ending whose lease was lost is recorded again as
/// `lease_lost`, as the finisher does.
async fn record(world: &World, host: &SimHost, items: Vec<Recording>) {
    let answers = host.store.record_attempts(&items).await;
    trace(|| {
        format!(
            "{} recorded {:?}: {answers:?}",
            host.id,
            items.iter().map(|i| &i.run_id).collect::<Vec<_>>()
        )
    });
    let mut again = Vec::new();
    for (mut item, answer) in items.into_iter().zip(answers) {
        if let Some(Recorded::LeaseLost) = world.check("record_attempts", answer) {
            if let Some(a) = &mut item.attempt {
                a.status = "failed";
                a.outcome = None;
                a.code = Some("lease_lost");
            }
            if let RunChange::Finish {
                require_lease,
                status,
                code,
                ..
            } = &mut item.change
            {
                *require_lease = false;
                *status = RunStatus::Failed;
                *code = Some("lease_lost");
            }
            again.push(item);
        }
    }
    if !again.is_empty() {
        for answer in host.store.record_attempts(&again).await {
            world.check("record_attempts (lost)", answer);
        }
    }
}

async fn finish(world: &World, host: &SimHost, held: &Held, status: RunStatus) {
    record(world, host, vec![finishing(host, held, status)]).await;
}

fn host_index(world: &World, host: &SimHost) -> usize {
    world
        .hosts
        .iter()
        .position(|h| h.id == host.id)
        .expect("a host of the world")
}

fn take(host: &SimHost, slot: usize) -> Option<Held> {
    let mut held = host.held.lock().unwrap();
    if held.is_empty() {
        return None;
    }
    let i = slot % held.len();
    Some(held.remove(i))
}

fn peek(host: &SimHost, slot: usize) -> Option<Held> {
    let held = host.held.lock().unwrap();
    (!held.is_empty()).then(|| held[slot % held.len()].clone())
}

async fn surveil(world: &World, store: &Store) {
    for (lost, run) in find_lost(world, store).await {
        mark_crashed(world, store, lost, run).await;
    }
}

/// Surveillance's first half: the runs whose lease expired.
async fn find_lost(world: &World, store: &Store) -> Vec<(LostRun, RunRecord)> {
    let Some(lost) = world.check("lost_runs", store.lost_runs(ms(GRACE)).await) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for lost in lost {
        if let Some(Some(run)) = world.check("get_run", store.get_run(&lost.id).await) {
            found.push((lost, run));
        }
    }
    found
}

/// Surveillance's second half: mark a lost run crashed, queueing its rerun (up to three
/// per first run, as surveillance does) and the follow-up of kicks it had pending.
async fn mark_crashed(world: &World, store: &Store, lost: LostRun, run: RunRecord) {
    let root = run.rerun_of.clone().unwrap_or_else(|| run.id.clone());
    let Some(reruns) = world.check("count_reruns", store.count_reruns(&root).await) else {
        return;
    };
    let rerun = (reruns < 3).then(|| NewRun {
        origin: Origin::Rerun,
        rerun_of: Some(root),
        ..new_run(&run.instance, Origin::Rerun)
    });
    let crash = Crash {
        run: &lost,
        stale_ms: ms(GRACE),
        rerun,
        follow_up: Some(jobhost::queue::kick::follow_up(&run, "{}".into())),
        report: NewReport::about_run(
            ReportKind::Crashed,
            &run,
            jobhost::rules::failure::FailureCode::Crashed,
        ),
    };
    let marked = world.check("mark_crashed", store.mark_crashed(&crash).await);
    trace(|| format!("crashed {}: {marked:?}", lost.id));
}

/// With `JOBHOST_MODEL_TRACE` set, prints what the model does.
fn trace(text: impl FnOnce() -> String) {
    if std::env::var_os("JOBHOST_MODEL_TRACE").is_some() {
        eprintln!("[model {}] {}", wall_ms() % 100_000, text());
    }
}

async fn apply(world: Arc<World>, op: Op) {
    trace(|| format!("{op:?}"));
    match op {
        Op::Kick { instance } => {
            let host = &world.hosts[0];
            let Some(before) = world.check("now", host.store.now().await) else {
                return;
            };
            match jobhost::queue::kick::kick(&host.store, JOB, INSTANCES[instance], None).await {
                Ok(kicked) => {
                    trace(|| format!("kicked at {before}: {kicked:?}"));
                    world
                        .record
                        .lock()
                        .unwrap()
                        .kicks
                        .push((INSTANCES[instance].into(), before))
                }
                Err(e) => world.violation(format!("kick failed: {e}")),
            }
        }
        Op::Enqueue { instance } => {
            let run = new_run(INSTANCES[instance], Origin::Cron);
            world.check("insert_run", world.hosts[0].store.insert_run(&run).await);
        }
        Op::Claim { host } => {
            let host = world.hosts[host].clone();
            let Some(claimed) = claim(&world, &host, 2, None).await else {
                return;
            };
            for claimed in claimed {
                if let Some(held) = start(&world, &host, claimed).await {
                    host.held.lock().unwrap().push(held);
                }
            }
        }
        Op::Write {
            host,
            slot,
            hold_ms,
        } => {
            let host = world.hosts[host].clone();
            let Some(held) = peek(&host, slot) else {
                return;
            };
            let access = Access {
                grant: world.grant.clone(),
                fence: Fence {
                    job: held.lease.job.clone(),
                    instance: held.lease.instance.clone(),
                    generation: held.lease.generation,
                    holder: held.lease.holder.clone(),
                },
                tenant: "default".into(),
                deadline: tokio::time::Instant::now() + TIMEOUT,
            };
            let until = tokio::time::Instant::now() + Duration::from_secs(2);
            let wrote = async {
                let mut tx = host.guest.begin(&access, until).await?;
                tx.execute(
                    "INSERT INTO model_writes (run_id, generation) VALUES ($1, $2)",
                    &[
                        SqlValue::Text(held.run.id.clone()),
                        SqlValue::Integer(held.lease.generation),
                    ],
                )
                .await?;
                tokio::time::sleep(Duration::from_millis(hold_ms)).await;
                tx.commit().await
            }
            .await;
            match wrote {
                Ok(()) | Err(GuestDbError::LeaseLost) => {}
                // Expected when the attempt's own deadline passes mid-statement.
                Err(GuestDbError::Refused(_)) => {}
                Err(e) => world.violation(format!("guest write failed: {e:?}")),
            }
        }
        Op::Retry { host, slot } => {
            let host = world.hosts[host].clone();
            let Some(held) = take(&host, slot) else {
                return;
            };
            record(&world, &host, vec![retrying(&host, &held)]).await;
        }
        Op::FinishAll { host } => {
            let host = world.hosts[host].clone();
            let all = std::mem::take(&mut *host.held.lock().unwrap());
            let items = all
                .iter()
                .enumerate()
                .map(|(i, held)| match i % 3 {
                    2 => retrying(&host, held),
                    _ => finishing(&host, held, RunStatus::Succeeded),
                })
                .collect();
            record(&world, &host, items).await;
        }
        Op::GiveBack { host, slot } => {
            let host = world.hosts[host].clone();
            let Some(held) = take(&host, slot) else {
                return;
            };
            let given = Recording {
                run_id: held.run.id.clone(),
                lease: held.lease.clone(),
                attempt: None,
                change: RunChange::GiveBack {
                    hold_ms: ms(GRACE) * 4,
                },
            };
            record(&world, &host, vec![given]).await;
        }
        Op::Finish { host, slot } => {
            let host = world.hosts[host].clone();
            let Some(held) = take(&host, slot) else {
                return;
            };
            finish(&world, &host, &held, RunStatus::Succeeded).await;
        }
        Op::Surveil => surveil(&world, &world.hosts[1].store.clone()).await,
        Op::LateFinish { host, slot } => {
            let host = world.hosts[host].clone();
            let Some(held) = take(&host, slot) else {
                return;
            };
            let expired = held.lease.expires_at + ms(GRACE) + 20 - wall_ms();
            tokio::time::sleep(Duration::from_millis(expired.max(0) as u64)).await;
            let surveyor = world.hosts[(host_index(&world, &host) + 1) % HOSTS].clone();
            let lost = find_lost(&world, &surveyor.store).await;
            let marks = futures_util::future::join_all(
                lost.into_iter()
                    .map(|(lost, run)| mark_crashed(&world, &surveyor.store, lost, run)),
            );
            tokio::join!(finish(&world, &host, &held, RunStatus::Succeeded), marks);
        }
        Op::HoldLease { instance, ms } => {
            hold_lease(&world, &world.url, INSTANCES[instance], ms).await
        }
        Op::Sleep { ms } => tokio::time::sleep(Duration::from_millis(ms)).await,
    }
}

/// Sits on a lease row for `ms`, as a guest commit holding the fence's share lock does
/// (on SQLite: the write lock). It has a connection of its own, so that cancelling it
/// closes the connection and the server rolls back.
async fn hold_lease(world: &World, url: &str, instance: &str, ms: u64) {
    use sqlx::Connection;
    let held = match world.backend {
        Backend::Sqlite => {
            async {
                let mut conn = sqlx::SqliteConnection::connect(url).await?;
                let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
                sqlx::query("SELECT 1 FROM jobhost_leases WHERE job = $1 AND instance = $2")
                    .bind(JOB)
                    .bind(instance)
                    .fetch_optional(&mut *tx)
                    .await?;
                tokio::time::sleep(Duration::from_millis(ms)).await;
                tx.rollback().await
            }
            .await
        }
        Backend::Postgres => {
            async {
                let mut conn = sqlx::PgConnection::connect(url).await?;
                let mut tx = conn.begin().await?;
                sqlx::query(
                    "SELECT 1 FROM jobhost_leases WHERE job = $1 AND instance = $2 FOR SHARE",
                )
                .bind(JOB)
                .bind(instance)
                .fetch_optional(&mut *tx)
                .await?;
                tokio::time::sleep(Duration::from_millis(ms)).await;
                tx.rollback().await
            }
            .await
        }
    };
    if let Err(e) = held {
        world.violation(format!("holding the lease row failed: {e}"));
    }
}

/// Nothing may hold the database once every operation is over: a write must get through
/// within the busy timeout every host writer waits for SQLite's lock (so no host write
/// would fail), and no session may sit inside a transaction.
async fn check_settled(world: &World, url: &str) {
    tokio::time::sleep(Duration::from_millis(150)).await;
    match world.backend {
        Backend::Sqlite => {
            use sqlx::ConnectOptions;
            let options = url
                .parse::<sqlx::sqlite::SqliteConnectOptions>()
                .unwrap()
                .busy_timeout(jobhost::store::SQLITE_BUSY_TIMEOUT);
            let got = async {
                let mut conn = options.connect().await?;
                sqlx::raw_sql("BEGIN IMMEDIATE; ROLLBACK")
                    .execute(&mut conn)
                    .await?;
                Ok::<_, sqlx::Error>(())
            }
            .await;
            if let Err(e) = got {
                world.violation(format!(
                    "the write lock is still held after every operation ended: {e}"
                ));
            }
        }
        Backend::Postgres => {
            let jobhost::store::Pool::Postgres(p) = world.admin.pool() else {
                unreachable!()
            };
            let open: Vec<(String, String)> = sqlx::query_as(
                "SELECT usename::text, query FROM pg_stat_activity \
                 WHERE datname = current_database() \
                 AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()",
            )
            .fetch_all(p)
            .await
            .unwrap();
            if !open.is_empty() {
                world.violation(format!(
                    "sessions sit inside a transaction after every operation ended: {open:?}"
                ));
            }
        }
    }
}

/// Drives every run to an end: lets leases expire, marks what was lost as crashed, and
/// runs whatever is queued, until nothing is queued or running.
async fn drain(world: &World) {
    let host = world.hosts[2].clone();
    host.held.lock().unwrap().clear();
    for _ in 0..40 {
        tokio::time::sleep(TIMEOUT + GRACE * 2).await;
        surveil(world, &host.store).await;
        loop {
            let Some(claimed) = claim(world, &host, 10, None).await else {
                return;
            };
            if claimed.is_empty() {
                break;
            }
            for claimed in claimed {
                if let Some(held) = start(world, &host, claimed).await {
                    finish(world, &host, &held, RunStatus::Succeeded).await;
                }
            }
        }
        let live = count(
            &world.admin,
            "SELECT COUNT(*) FROM jobhost_runs WHERE status IN ('queued', 'running')",
        )
        .await;
        if live == 0 {
            return;
        }
    }
    world.violation("runs are still live after draining".into());
}

async fn count(store: &Store, sql: &'static str) -> i64 {
    use jobhost::store::Pool;
    match store.pool() {
        Pool::Sqlite(p) => sqlx::query_scalar(sql).fetch_one(p).await.unwrap(),
        Pool::Postgres(p) => sqlx::query_scalar(sql).fetch_one(p).await.unwrap(),
    }
}

jobhost::record! {
    #[derive(Debug)]
    struct WriteRow {
        instance: String,
        generation: i64,
        at: i64,
    }
}

jobhost::record! {
    #[derive(Debug)]
    struct StartRow {
        instance: String,
        generation: i64,
        started_at: i64,
    }
}

/// The end state: no zombie commit, every kick followed by a run, every run ended.
async fn check_history(world: &World) {
    use jobhost::store::Pool;
    let writes_sql = "SELECT r.instance, w.generation, w.at FROM model_writes w \
        JOIN jobhost_runs r ON r.id = w.run_id";
    let starts_sql = "SELECT r.instance, a.generation, a.started_at FROM jobhost_attempts a \
        JOIN jobhost_runs r ON r.id = a.run_id";
    let (writes, starts): (Vec<WriteRow>, Vec<StartRow>) = match world.admin.pool() {
        Pool::Sqlite(p) => (
            sqlx::query_as(writes_sql).fetch_all(p).await.unwrap(),
            sqlx::query_as(starts_sql).fetch_all(p).await.unwrap(),
        ),
        Pool::Postgres(p) => (
            sqlx::query_as(writes_sql).fetch_all(p).await.unwrap(),
            sqlx::query_as(starts_sql).fetch_all(p).await.unwrap(),
        ),
    };
    let record = world.record.lock().unwrap();
    let mut problems = Vec::new();
    for w in &writes {
        if let Some(deadline) = record.deadlines.get(&(w.instance.clone(), w.generation))
            && w.at >= *deadline
        {
            problems.push(format!(
                "generation {} of {} committed a write {} ms past its deadline",
                w.generation,
                w.instance,
                w.at - deadline
            ));
        }
        for s in starts
            .iter()
            .filter(|s| s.instance == w.instance && s.generation > w.generation)
        {
            if s.started_at <= w.at {
                problems.push(format!(
                    "generation {} of {} committed a write after generation {} started",
                    w.generation, w.instance, s.generation
                ));
            }
        }
    }
    for (instance, at) in &record.kicks {
        if !starts
            .iter()
            .any(|s| &s.instance == instance && s.started_at >= *at)
        {
            problems.push(format!("a kick of {instance} was never followed by a run"));
        }
    }
    let mut generations: BTreeMap<&str, BTreeSet<i64>> = BTreeMap::new();
    for s in &starts {
        if !generations
            .entry(&s.instance)
            .or_default()
            .insert(s.generation)
        {
            problems.push(format!(
                "generation {} of {} was started twice",
                s.generation, s.instance
            ));
        }
    }
    drop(record);
    for p in problems {
        world.violation(p);
    }
}

async fn run_case(backend: Backend, rounds: Vec<Vec<Timed>>) -> Vec<String> {
    trace(|| "---- case".into());
    let home = Home::new(backend).await;
    let admin = home.store().await;
    let schema = match backend {
        Backend::Sqlite => {
            "CREATE TABLE model_writes (run_id TEXT NOT NULL, generation BIGINT NOT NULL, \
             at BIGINT NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER)))"
        }
        Backend::Postgres => {
            "CREATE TABLE model_writes (run_id TEXT NOT NULL, generation BIGINT NOT NULL, \
             at BIGINT NOT NULL DEFAULT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT))"
        }
    };
    home.exec(schema).await;
    register_job(&admin).await;
    let mut hosts = Vec::new();
    for n in 0..HOSTS {
        hosts.push(Arc::new(sim_host(&home, format!("model-{n}")).await));
    }
    let mut grant = DbGrant::default();
    grant.write.insert("model_writes".into());
    let world = Arc::new(World {
        backend,
        hosts,
        record: Mutex::default(),
        grant: Arc::new(grant),
        admin,
        url: home.db_url.clone(),
    });
    for round in rounds {
        trace(|| "-- round".into());
        let mut tasks = tokio::task::JoinSet::new();
        for timed in round {
            let world = world.clone();
            tasks.spawn(async move {
                let op = CancelAfter {
                    inner: Box::pin(apply(world.clone(), timed.op.clone())),
                    left: timed.cancel_after,
                };
                if tokio::time::timeout(OP_BOUND, op).await.is_err() {
                    world.violation(format!("{:?} hung", timed.op));
                }
            });
        }
        while tasks.join_next().await.is_some() {}
        check_settled(&world, &home.db_url).await;
        if !world.record.lock().unwrap().violations.is_empty() {
            break;
        }
    }
    if world.record.lock().unwrap().violations.is_empty() {
        drain(&world).await;
        check_history(&world).await;
    }
    let violations = std::mem::take(&mut world.record.lock().unwrap().violations);
    trace(|| format!("violations: {violations:?}"));
    for host in &world.hosts {
        host.store.close().await;
    }
    world.admin.close().await;
    violations
}

async fn register_job(store: &Store) {
    common::register_job(store, JOB, &Default::default()).await;
}

async fn sim_host(home: &Home, id: String) -> SimHost {
    let store = home.store().await;
    let guest = GuestDb::open(&store).await.unwrap();
    SimHost {
        id,
        store,
        guest,
        held: Mutex::default(),
    }
}

/// Claims due runs for `host` outside the model (no world to record violations in), with
/// leases that outlast the test: these checks are about what one claim and one ending do,
/// and the model's 100 ms start window can pass between two statements on a loaded
/// machine, which would read as a lease lost the test never meant.
async fn claim_due(host: &SimHost) -> Vec<Claimed> {
    let lease = LeaseTerms { grace: GRACE };
    let terms = BTreeMap::from([(
        JOB.to_string(),
        lease.attempt(Duration::from_secs(60), Duration::from_secs(60), "model"),
    )]);
    host.store
        .claim_runs(&ClaimRequest {
            host: &host.id,
            limit: 10,
            run_id: None,
            terms: &terms,
            paused: &[],
        })
        .await
        .unwrap()
}

fn config() -> Config {
    let cases = std::env::var("JOBHOST_MODEL_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(6);
    Config {
        cases,
        max_shrink_iters: 24,
        max_shrink_time: 120_000,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..Config::default()
    }
}

fn check_backend(backend: Backend) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    proptest!(config(), |(rounds in rounds())| {
        let violations = runtime.block_on(run_case(backend, rounds));
        prop_assert!(violations.is_empty(), "violations: {violations:#?}");
    });
}

#[test]
fn the_lease_protocol_holds_on_sqlite() {
    check_backend(Backend::Sqlite);
}

#[test]
fn the_lease_protocol_holds_on_postgres() {
    check_backend(Backend::Postgres);
}

on_every_backend! {
    // A retry whose parked lease outlived its hold (a fleet too busy to claim it in time)
    // keeps it: a kick of its instance meanwhile folds into the pending flag, a scheduled
    // run of the instance gets no lease, and the retry, claimed late, moves the lease on
    // and queues the kick's follow-up when it ends.
    async fn a_parked_lease_stays_with_its_retry_past_its_hold(home) {
        register_job(&home.store().await).await;
        let host = sim_host(&home, "late".into()).await;
        let retry = new_run("a", Origin::Kick);
        host.store.insert_run(&retry).await.unwrap();
        let mut claimed = claim_due(&host).await;
        assert_eq!(claimed.len(), 1);
        let first = claimed.remove(0);
        let held = Held {
            lease: first.lease.expect("a first attempt takes the free lease"),
            run: first.run,
        };
        let mut requeue = retrying(&host, &held);
        let RunChange::Requeue {
            delay_ms, hold_ms, ..
        } = &mut requeue.change
        else {
            unreachable!("a retry requeues")
        };
        // Due in 500 ms, its lease parked with no hold left at all.
        (*delay_ms, *hold_ms) = (500, 0);
        let answers = host.store.record_attempts(&[requeue]).await;
        assert!(matches!(answers[..], [Ok(Recorded::Requeued)]), "{answers:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;

        let kicked = jobhost::queue::kick::kick(&host.store, JOB, "a", None).await.unwrap();
        assert!(
            matches!(kicked, jobhost::queue::kick::Kicked::Pending),
            "the kick folds into the parked lease's pending flag: {kicked:?}"
        );
        let scheduled = new_run("a", Origin::Cron);
        host.store.insert_run(&scheduled).await.unwrap();
        let claimed = claim_due(&host).await;
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].run.id, scheduled.id);
        assert!(
            claimed[0].lease.is_none(),
            "a scheduled run takes no lease parked for a queued retry"
        );
        host.store.skip_run(&scheduled.id, "held").await.unwrap();

        tokio::time::sleep(Duration::from_millis(600)).await;
        let mut claimed = claim_due(&host).await;
        assert_eq!(claimed.len(), 1);
        let late = claimed.remove(0);
        assert_eq!(late.run.id, retry.id);
        let lease = late.lease.expect("the retry keeps its parked lease");
        assert_eq!(lease.generation, held.lease.generation + 1);
        let answers = host
            .store
            .record_attempts(&[finishing(
                &host,
                &Held {
                    run: late.run,
                    lease,
                },
                RunStatus::Succeeded,
            )])
            .await;
        assert!(
            matches!(
                answers[..],
                [Ok(Recorded::Finished {
                    follow_up: Some(_)
                })]
            ),
            "the retry's end queues the folded kick's follow-up: {answers:?}"
        );
    }

    // One claim and one ending, each over a batch that mixes rows Postgres handles
    // together with rows that depend on one another: every item is answered as it would
    // be alone. The claim: two fresh runs of one instance (the older takes the lease,
    // the other gets none), a retry whose lease is parked for it (moved on), and two
    // fresh runs of their own. The ending: a success whose lease has a kick folded in
    // (its follow-up queued), a retry, a zombie's success (its generation moved on:
    // lease lost), and a finish of a run no longer running.
    async fn mixed_batches_answer_each_item_as_alone(home) {
        register_job(&home.store().await).await;
        let host = sim_host(&home, "mixed".into()).await;
        let retry = new_run("r", Origin::Kick);
        host.store.insert_run(&retry).await.unwrap();
        let first = claim_due(&host).await.remove(0);
        let parked = Held {
            lease: first.lease.expect("a free lease"),
            run: first.run,
        };
        let mut requeue = retrying(&host, &parked);
        if let RunChange::Requeue { delay_ms, .. } = &mut requeue.change {
            *delay_ms = 0;
        }
        let answers = host.store.record_attempts(&[requeue]).await;
        assert!(matches!(answers[..], [Ok(Recorded::Requeued)]), "{answers:?}");
        let older = new_run("shared", Origin::Cron);
        host.store.insert_run(&older).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let newer = new_run("shared", Origin::Cron);
        host.store.insert_run(&newer).await.unwrap();
        let (kicked, zombie) = (new_run("k", Origin::Kick), new_run("z", Origin::Kick));
        host.store.insert_run(&kicked).await.unwrap();
        host.store.insert_run(&zombie).await.unwrap();

        let claimed = claim_due(&host).await;
        let find = |id: &str| claimed.iter().find(|c| c.run.id == id).expect("claimed");
        let generation = |id: &str| find(id).lease.as_ref().map(|l| l.generation);
        assert_eq!(claimed.len(), 5, "{claimed:?}");
        assert_eq!(generation(&retry.id), Some(parked.lease.generation + 1));
        assert_eq!(generation(&older.id), Some(1), "the older run of a lease takes it");
        assert_eq!(generation(&newer.id), None, "the newer run of the lease gets none");
        assert_eq!(generation(&kicked.id), Some(1));
        assert_eq!(generation(&zombie.id), Some(1));
        assert!(claimed.iter().all(|c| c.run.status == "running"));

        let held = |id: &str| Held {
            run: find(id).run.clone(),
            lease: find(id).lease.clone().expect("leased"),
        };
        let folded = jobhost::queue::kick::kick(&host.store, JOB, "k", None).await.unwrap();
        assert!(matches!(folded, jobhost::queue::kick::Kicked::Pending), "{folded:?}");
        let mut stale = held(&zombie.id);
        stale.lease.generation += 1;
        let gone = held(&older.id);
        host.store.skip_run(&older.id, "ended elsewhere").await.unwrap();
        let items = [
            finishing(&host, &held(&kicked.id), RunStatus::Succeeded),
            retrying(&host, &held(&retry.id)),
            finishing(&host, &stale, RunStatus::Succeeded),
            finishing(&host, &gone, RunStatus::Failed),
        ];
        let answers = host.store.record_attempts(&items).await;
        assert!(
            matches!(
                answers[..],
                [
                    Ok(Recorded::Finished { follow_up: Some(_) }),
                    Ok(Recorded::Requeued),
                    Ok(Recorded::LeaseLost),
                    Ok(Recorded::NotRunning),
                ]
            ),
            "{answers:?}"
        );
        let status = |id: String| {
            let store = &host.store;
            async move { store.get_run(&id).await.unwrap().expect("the run").status }
        };
        assert_eq!(status(kicked.id.clone()).await, "succeeded");
        assert_eq!(status(retry.id.clone()).await, "queued");
        assert_eq!(status(zombie.id.clone()).await, "running");
        assert_eq!(status(older.id.clone()).await, "skipped");
    }
}
