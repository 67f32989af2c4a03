//! `host serve`: the long-running host. It claims due runs and runs them on a bounded
//! set of workers per lane (each lane claims only its own jobs' runs, so one lane's
//! backlog never takes another's slots), fires schedules, checks for crashed runs and
//! missed schedules, delivers reports, reloads changed components and answers the HTTP
//! API — until it is told to stop, when it drains: no new runs, running attempts get a
//! grace period, then are cancelled (their writes are fenced) and put back in the queue
//! for any host.

use crate::sandbox::engine::attempt::CancelToken;
use crate::service::app::App;
use crate::service::catalog::Catalog;
use crate::service::http::Shared;
use crate::service::manifest::CatchUp;
use crate::service::report::Reporter;
use crate::service::schedule::Scheduler;
use crate::service::schedule::surveillance::Surveillance;
use crate::store::{AttemptTerms, Claimed, Pool, Store};
use futures_util::FutureExt;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub listen: SocketAddr,
    /// What one client of the API may hold: time, buffers, connections.
    pub api_limits: crate::service::http::ConnectionLimits,
    /// The lanes this host serves, with the workers of each.
    pub lanes: BTreeMap<String, usize>,
    /// The most claimed runs each lane keeps ready per worker: as many as its workers
    /// start within `READY_WAIT` at the lane's recent pace, at least one. A deeper queue
    /// means fewer, larger claims and endings (much of their cost is per call and per
    /// commit, not per run); a run that waits in it longer than `start_within` is given
    /// back.
    pub prefetch: usize,
    /// Longest wait between looks at the queue when nothing wakes the host.
    pub poll: Duration,
    pub surveillance_interval: Duration,
    pub reload_interval: Duration,
    /// How often the fleet collects objects nothing can see, and how long an object no
    /// name points at is kept for readers still reading it.
    pub collect_interval: Duration,
    pub file_grace: Duration,
    /// How long a key signs per-attempt tokens.
    pub key_rotation: Duration,
    pub shutdown_grace: Duration,
    pub catch_up: CatchUp,
    pub webhook: Option<String>,
    /// Where endings are delivered (`[webhooks]`), their secrets read at start.
    pub webhooks: crate::service::webhooks::Webhooks,
    pub max_reruns: i64,
    /// How long a run may sit past its lease before surveillance calls it crashed.
    pub stale: Duration,
    /// How long history is kept (none: for ever); pruned on the surveillance interval.
    pub retention: Option<Duration>,
    /// The page links a run's trace here (`{trace_id}` replaced), if set.
    pub trace_url: Option<String>,
    /// How long a job no host registers stays un-orphaned (`registration`).
    pub orphan_grace: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// The terms this host claims runs of `lane` under: every job of its catalog in the
/// lane, as loaded now. A job whose component still compiles is left out: its runs wait
/// queued, their deadlines not begun, until this host can start them.
fn claim_terms(shared: &Shared, lane: &str) -> BTreeMap<String, AttemptTerms> {
    shared
        .catalog
        .all()
        .iter()
        .filter(|job| job.spec.lane == lane && job.loaded.is_some())
        .map(|job| {
            (
                job.spec.name.clone(),
                shared.app.runner.terms(&job.spec, &job.digest),
            )
        })
        .collect()
}

pub async fn serve(
    app: App,
    catalog: Catalog,
    config: ServeConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| ServeError::Listen {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().unwrap_or(config.listen);
    let shared = Arc::new(Shared {
        app,
        catalog: Arc::new(catalog),
        draining: AtomicBool::new(false),
        gauges: tokio::sync::Mutex::new(None),
        lanes: config.lanes.clone(),
        console: crate::service::http::Console::default(),
        trace_url: config.trace_url.clone(),
        run_watch: Default::default(),
    });
    let (stop_tx, stop) = watch::channel(false);
    let (cancel_tx, cancel) = watch::channel(false);

    let mut loops = JoinSet::new();
    loops.spawn(schedule_loop(shared.clone(), config.clone(), stop.clone()));
    loops.spawn(surveillance_loop(
        shared.clone(),
        config.clone(),
        stop.clone(),
    ));
    loops.spawn(report_loop(shared.clone(), config.clone(), stop.clone()));
    if !config.webhooks.is_empty() {
        let deliverer = crate::service::webhooks::Deliverer::new(
            shared.app.store.clone(),
            shared.app.runner.host_id(),
            config.webhooks.clone(),
            shared.app.metrics.clone(),
        );
        loops.spawn(crate::service::webhooks::delivery_loop(
            deliverer,
            stop.clone(),
        ));
    }
    loops.spawn(crate::service::http::sample_loop(
        shared.clone(),
        stop.clone(),
    ));
    loops.spawn(crate::service::http::heartbeat_loop(
        shared.clone(),
        stop.clone(),
    ));
    loops.spawn(crate::service::http::pulse_loop(
        shared.clone(),
        stop.clone(),
    ));
    loops.spawn(crate::service::http::watch_loop(
        shared.clone(),
        stop.clone(),
    ));
    loops.spawn(crate::runs::controls::watch_cancels(
        shared.app.runner.clone(),
        stop.clone(),
    ));
    loops.spawn(crate::runs::family::keep_sweeping(
        shared.app.runner.clone(),
        shared.app.metrics.clone(),
        stop.clone(),
    ));
    loops.spawn(reload_loop(shared.clone(), config.clone(), stop.clone()));
    loops.spawn(registration_loop(
        shared.clone(),
        config.clone(),
        stop.clone(),
    ));
    loops.spawn(collect_loop(shared.clone(), config.clone(), stop.clone()));
    loops.spawn(retention_loop(shared.clone(), config.clone(), stop.clone()));
    loops.spawn(signing_keys_loop(
        shared.clone(),
        config.clone(),
        stop.clone(),
    ));
    if let Pool::Postgres(pool) = shared.app.store.pool() {
        loops.spawn(listen_loop(
            pool.clone(),
            shared.app.store.clone(),
            shared.app.wake.clone(),
            stop.clone(),
        ));
    }
    let mut lane_wakes = Vec::new();
    let mut dispatchers = JoinSet::new();
    for (lane, &workers) in &config.lanes {
        let wake = Arc::new(Notify::new());
        lane_wakes.push(wake.clone());
        dispatchers.spawn(dispatch(
            shared.clone(),
            config.clone(),
            Lane {
                name: lane.clone(),
                workers,
                ready: workers * config.prefetch.max(1),
                wake,
            },
            cancel.clone(),
            stop.clone(),
        ));
    }
    loops.spawn(wake_lanes(
        shared.app.wake.clone(),
        lane_wakes,
        stop.clone(),
    ));
    let mut http = tokio::spawn(crate::service::http::serve_api(
        listener,
        crate::service::http::router(shared.clone()),
        config.api_limits,
        stop.clone(),
    ));
    if let Ok(0) = shared.app.store.live_tokens().await {
        tracing::warn!(
            "no API tokens: the API refuses every request until one is created with `host tokens create`"
        );
    }
    let lanes: Vec<String> = config
        .lanes
        .iter()
        .map(|(lane, workers)| format!("{lane}={workers}"))
        .collect();
    tracing::info!(%addr, jobs = shared.catalog.all().len(), lanes = %lanes.join(","), "serving");
    println!("listening on {addr}");

    shutdown.await;
    tracing::info!(
        grace_ms = config.shutdown_grace.as_millis() as u64,
        "draining: no new runs; running attempts get the grace period"
    );
    shared.draining.store(true, Ordering::Release);
    let _ = stop_tx.send(true);
    let drained = async { while dispatchers.join_next().await.is_some() {} };
    tokio::pin!(drained);
    if tokio::time::timeout(config.shutdown_grace, &mut drained)
        .await
        .is_err()
    {
        tracing::warn!(
            code = "cancelled",
            "grace period over: cancelling running attempts"
        );
        let _ = cancel_tx.send(true);
        drained.await;
    }
    while loops.join_next().await.is_some() {}
    shared.app.runner.flush().await;
    // A request still running holds the server's graceful shutdown: it gets the grace
    // period too.
    if tokio::time::timeout(config.shutdown_grace, &mut http)
        .await
        .is_err()
    {
        tracing::warn!("grace period over: closing the API's open connections");
        http.abort();
    }
    shared.app.store.close().await;
    tracing::info!("stopped");
    Ok(())
}

/// How long the dispatcher stops claiming ahead after a claimed run waited too long for
/// a worker (the workers are busy with long runs: runs claimed ahead would only wait, held
/// from other hosts), in multiples of `start_within`.
const PREFETCH_PAUSE: u32 = 10;

/// A lane keeps ready as many claimed runs as its workers start within this, at its
/// recent pace (up to `--prefetch` per worker, at least one): short runs are claimed in
/// batches large enough to pay for their round trip, however few the workers (four
/// workers of no-op runs claimed 16 at a time spent most of a batch's time in claims),
/// while longer runs are claimed one ahead per worker — a deeper queue would only hold
/// them from other hosts, which could start them at once.
const READY_WAIT: Duration = Duration::from_millis(20);

/// `Pace::busy_us` before any attempt of the lane ended: taken as long.
const BUSY_UNKNOWN: u64 = u64::MAX;

/// What the dispatcher and the workers share to pace claims.
struct Pace {
    /// Workers waiting for a run.
    idle: AtomicUsize,
    /// A worker took a run or became idle: there may be room to claim into.
    room: Notify,
    /// Until when only idle workers are claimed for.
    prefetch_paused_until: Mutex<Option<Instant>>,
    /// How long the lane's recent runs kept a worker busy, in µs: a moving average of
    /// the last eight or so.
    busy_us: AtomicU64,
}

impl Pace {
    fn new() -> Pace {
        Pace {
            idle: AtomicUsize::new(0),
            room: Notify::new(),
            prefetch_paused_until: Mutex::new(None),
            busy_us: AtomicU64::new(BUSY_UNKNOWN),
        }
    }

    /// A worker spent `took` on one run.
    fn ran(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(BUSY_UNKNOWN - 1);
        let _ = self
            .busy_us
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |mean| {
                Some(if mean == BUSY_UNKNOWN {
                    us
                } else {
                    mean - mean / 8 + us / 8
                })
            });
    }

    /// How many claimed runs `lane` keeps ready for its workers now.
    fn depth(&self, lane: &Lane) -> usize {
        let busy_us = self.busy_us.load(Ordering::Acquire).max(1);
        let per_worker = usize::try_from(READY_WAIT.as_micros() as u64 / busy_us).unwrap_or(1);
        lane.workers
            .saturating_mul(per_worker.max(1))
            .min(lane.ready)
    }

    fn prefetch(&self) -> bool {
        self.prefetch_paused_until
            .lock()
            .expect("pace lock")
            .is_none_or(|until| Instant::now() >= until)
    }

    fn pause_prefetch(&self, for_: Duration) {
        *self.prefetch_paused_until.lock().expect("pace lock") = Some(Instant::now() + for_);
    }
}

/// One lane a host serves: its name, its workers, how many claimed runs it keeps ready
/// for them, and what wakes its dispatcher.
struct Lane {
    name: String,
    workers: usize,
    ready: usize,
    wake: Arc<Notify>,
}

/// The claimed runs a lane keeps ready for its workers, in the order they were claimed.
///
/// A claimed run is `running`, its lease taken, before a worker starts it: the dispatcher
/// gives it back once it has waited `start_within` (`Ready::expired`), whether or not a
/// worker frees up — a run held here past that would be held from every other host,
/// and joined by every start of its job, for as long as the lane's workers stay busy.
struct Ready {
    runs: Mutex<VecDeque<Claimed>>,
    /// A run was added, or the queue closed.
    added: Notify,
    closed: AtomicBool,
}

impl Ready {
    fn new() -> Ready {
        Ready {
            runs: Mutex::new(VecDeque::new()),
            added: Notify::new(),
            closed: AtomicBool::new(false),
        }
    }

    fn len(&self) -> usize {
        self.runs.lock().expect("ready lock").len()
    }

    fn push(&self, claimed: Claimed) {
        self.runs.lock().expect("ready lock").push_back(claimed);
        self.added.notify_one();
    }

    /// The next run for a worker, waiting for one; `None` once the queue is closed and
    /// empty.
    async fn take(&self) -> Option<Claimed> {
        loop {
            let added = self.added.notified();
            tokio::pin!(added);
            added.as_mut().enable();
            if let Some(claimed) = self.runs.lock().expect("ready lock").pop_front() {
                return Some(claimed);
            }
            if self.closed.load(Ordering::Acquire) {
                return None;
            }
            added.await;
        }
    }

    /// Takes no more runs: the workers take what is left, then stop.
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.added.notify_waiters();
    }

    /// The runs that have waited `start_within` for a worker, taken out.
    fn expired(&self, start_within: Duration) -> Vec<Claimed> {
        let late = |claimed: &Claimed| claimed.stamped_after.elapsed() >= start_within;
        let mut runs = self.runs.lock().expect("ready lock");
        if !runs.iter().any(late) {
            return Vec::new();
        }
        let (expired, kept): (VecDeque<Claimed>, _) =
            std::mem::take(&mut *runs).into_iter().partition(late);
        *runs = kept;
        expired.into()
    }

    /// When the oldest run waiting would have waited `start_within`.
    fn next_expiry(&self, start_within: Duration) -> Option<Instant> {
        let runs = self.runs.lock().expect("ready lock");
        runs.iter()
            .map(|claimed| claimed.stamped_after + start_within)
            .min()
    }
}

/// Sleeps until `at`, or for ever if there is no such time.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Passes each wake-up of the host (a run queued, a requeued run due soon) to every
/// lane's dispatcher: a permit each, so none misses one while it claims.
async fn wake_lanes(wake: Arc<Notify>, lanes: Vec<Arc<Notify>>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = wake.notified() => lanes.iter().for_each(|lane| lane.notify_one()),
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// Claims a lane keeps in flight at once on Postgres while its queue is deep (its last
/// claim came back full): one claim's round trip and the database's work on it overlap
/// the next's, so a host's claims are not one long chain of round trips. While the queue
/// is shallow a lane claims one batch at a time: a second claim would find nothing. On
/// SQLite always one: the host's one writer takes claims in turn, and a second one queued
/// behind the first only keeps the file's write lock from other processes for longer.
const CLAIMS_IN_FLIGHT: usize = 2;

/// A claim joins one in flight only for at least `1 / JOIN_AT` of the runs the lane keeps
/// ready: a smaller batch would pay a round trip for a few runs.
const JOIN_AT: usize = 4;

/// Claims runs of one lane's jobs for its workers, one round trip per batch: as many as
/// fit a queue of runs ready to start (so a worker that finishes finds the next run
/// waiting, without a claim's round trip) — as many as the workers start within
/// `READY_WAIT` (`Pace::depth`), so short runs are claimed in batches large enough to pay
/// for their round trip — or, when claiming ahead is paused, as many as workers are
/// idle. Runs asked for by claims in flight count as queued, so the queue never gets more
/// than it holds.
async fn dispatch(
    shared: Arc<Shared>,
    config: ServeConfig,
    lane: Lane,
    cancel: CancelToken,
    mut stop: watch::Receiver<bool>,
) {
    let ready = Arc::new(Ready::new());
    let pace = Arc::new(Pace::new());
    let start_within = shared.app.runner.settings().start_within;
    let mut workers = JoinSet::new();
    for _ in 0..lane.workers {
        workers.spawn(work(
            shared.clone(),
            ready.clone(),
            pace.clone(),
            cancel.clone(),
            stop.clone(),
        ));
    }
    let in_flight = match shared.app.store.pool() {
        Pool::Postgres(_) => CLAIMS_IN_FLIGHT,
        Pool::Sqlite(_) => 1,
    };
    let mut claims: JoinSet<Result<Vec<Claimed>, crate::store::StoreError>> = JoinSet::new();
    // What each claim in flight asked for, and their sum.
    let mut asks: HashMap<tokio::task::Id, usize> = HashMap::new();
    let mut asked = 0;
    let mut deep = false;
    loop {
        if *stop.borrow() {
            break;
        }
        for claimed in ready.expired(start_within) {
            give_back_late(&shared, &pace, claimed).await;
        }
        let expiry = sleep_until(ready.next_expiry(start_within));
        tokio::pin!(expiry);
        let room = pace.room.notified();
        tokio::pin!(room);
        room.as_mut().enable();
        let queued = ready.len() + asked;
        let depth = if pace.prefetch() {
            pace.depth(&lane)
        } else {
            pace.idle.load(Ordering::Acquire)
        };
        let want = depth.saturating_sub(queued);
        let may_claim =
            claims.is_empty() || (deep && claims.len() < in_flight && want * JOIN_AT >= depth);
        if want > 0 && may_claim {
            let terms = claim_terms(&shared, &lane.name);
            if !terms.is_empty() {
                let (claiming, lane_name) = (shared.clone(), lane.name.clone());
                let claim = claims.spawn(async move {
                    claiming.app.runner.claim(&lane_name, &terms, want).await
                });
                asks.insert(claim.id(), want);
                asked += want;
                continue;
            }
            if claims.is_empty() {
                // No job of this host is in the lane (yet: a compile ending or a reload
                // may add one, and wakes the lane).
                tokio::select! {
                    _ = lane.wake.notified() => {}
                    _ = tokio::time::sleep(config.poll) => {}
                    _ = stop.wait_for(|s| *s) => break,
                }
                continue;
            }
        }
        if claims.is_empty() {
            tokio::select! {
                _ = room => {}
                _ = &mut expiry => {}
                _ = stop.wait_for(|s| *s) => break,
            }
            continue;
        }
        let done = tokio::select! {
            Some(done) = claims.join_next_with_id() => done,
            _ = room => continue,
            _ = &mut expiry => continue,
            _ = stop.wait_for(|s| *s) => break,
        };
        let id = match &done {
            Ok((id, _)) => *id,
            Err(e) => e.id(),
        };
        let wanted = asks.remove(&id).unwrap_or(0);
        asked -= wanted;
        let Ok((_, claimed)) = done else {
            // Its runs stay claimed until their leases expire: surveillance finds them.
            tracing::error!(
                code = "host_defect",
                "a claim stopped on a defect in the host"
            );
            deep = false;
            if stopped_within(config.poll, &mut stop).await {
                break;
            }
            continue;
        };
        match claimed {
            Ok(runs) => {
                deep = runs.len() == wanted;
                let empty = runs.is_empty();
                queue_claimed(&shared, &lane, &ready, runs).await;
                if empty && claims.is_empty() {
                    let terms = claim_terms(&shared, &lane.name);
                    let expires = ready.next_expiry(start_within);
                    wait_for_work(&shared, &config, &lane, &terms, expires, &mut stop).await;
                }
            }
            Err(e) => {
                deep = false;
                tracing::warn!(code = "driver_failed", error = %e, "cannot claim runs");
                if claims.is_empty() && stopped_within(config.poll, &mut stop).await {
                    break;
                }
            }
        }
    }
    // The claims in flight still end: their runs go to the queue, whose workers give them
    // back; then the workers finish what they run, and stop.
    while let Some(done) = claims.join_next().await {
        if let Ok(Ok(runs)) = done {
            queue_claimed(&shared, &lane, &ready, runs).await;
        }
    }
    ready.close();
    while workers.join_next().await.is_some() {}
}

/// Waits `wait`, or until the host is told to stop: whether it was.
async fn stopped_within(wait: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(wait) => false,
        _ = stop.wait_for(|s| *s) => true,
    }
}

/// Puts claimed runs in the lane's queue of runs ready to start.
async fn queue_claimed(shared: &Shared, lane: &Lane, ready: &Ready, runs: Vec<Claimed>) {
    for claimed in runs {
        let lag = (claimed.run.updated_at - claimed.run.next_attempt_at).max(0) as u64;
        shared.app.metrics.run_claimed(Duration::from_millis(lag));
        if ready.len() < lane.ready {
            ready.push(claimed);
        } else {
            // Never more than there is room for, counting the claims in flight, and only
            // the dispatcher adds: cannot happen, but a claimed run is never dropped.
            give_back(shared, claimed).await;
        }
    }
}

/// One worker: takes the next claimed run and runs its attempt; the ending goes to the
/// runner's finisher and the worker takes the next run at once.
async fn work(
    shared: Arc<Shared>,
    ready: Arc<Ready>,
    pace: Arc<Pace>,
    cancel: CancelToken,
    stop: watch::Receiver<bool>,
) {
    let start_within = shared.app.runner.settings().start_within;
    loop {
        pace.idle.fetch_add(1, Ordering::AcqRel);
        pace.room.notify_one();
        let next = ready.take().await;
        pace.idle.fetch_sub(1, Ordering::AcqRel);
        pace.room.notify_one();
        let Some(claimed) = next else { return };
        if *stop.borrow() {
            give_back(&shared, claimed).await;
            continue;
        }
        if claimed.stamped_after.elapsed() > start_within {
            give_back_late(&shared, &pace, claimed).await;
            continue;
        }
        let began = Instant::now();
        let run_id = claimed.run.id.clone();
        // A defect in the host that a guest reaches (a panic in a host call) ends its
        // attempt, never the worker: the host keeps all its workers whatever a guest does.
        let processed = AssertUnwindSafe(process(&shared, claimed, cancel.clone()))
            .catch_unwind()
            .await;
        if processed.is_err() {
            tracing::error!(run_id = %run_id, code = "host_defect", "an attempt stopped on a defect in the host; surveillance will report its run when its lease expires");
        }
        pace.ran(began.elapsed());
    }
}

/// Gives back a run that waited longer than its start window for a worker, and claims
/// only for idle workers for a while: the workers are busy with long runs, and runs
/// claimed ahead would only wait, held from other hosts.
async fn give_back_late(shared: &Shared, pace: &Pace, claimed: Claimed) {
    pace.pause_prefetch(shared.app.runner.settings().start_within * PREFETCH_PAUSE);
    give_back(shared, claimed).await;
}

async fn give_back(shared: &Shared, claimed: Claimed) {
    let run_id = claimed.run.id.clone();
    if let Err(e) = shared.app.runner.give_back(claimed).await {
        tracing::warn!(run_id = %run_id, code = "driver_failed", error = %e, "could not give a claimed run back; surveillance will find it when its lease expires");
    }
}

/// Waits until the lane is woken, its next run is due, a run it keeps ready has waited
/// its start window (`expires`), or the poll interval passed.
async fn wait_for_work(
    shared: &Shared,
    config: &ServeConfig,
    lane: &Lane,
    terms: &BTreeMap<String, AttemptTerms>,
    expires: Option<Instant>,
    stop: &mut watch::Receiver<bool>,
) {
    let jobs: Vec<&str> = terms.keys().map(String::as_str).collect();
    let until_due = match shared.app.store.next_due_in(&jobs).await {
        Ok(Some(ms)) => Duration::from_millis(ms.max(10) as u64),
        _ => config.poll,
    };
    tokio::select! {
        _ = lane.wake.notified() => {}
        _ = tokio::time::sleep(until_due.min(config.poll)) => {}
        _ = sleep_until(expires) => {}
        _ = stop.wait_for(|s| *s) => {}
    }
}

async fn process(shared: &Shared, claimed: Claimed, cancel: CancelToken) {
    let store = &shared.app.store;
    let Some(job) = shared.catalog.get(&claimed.run.job) else {
        let _ = store
            .skip_run(&claimed.run.id, "the job is not defined on this host")
            .await;
        return;
    };
    let Some(loaded) = &job.loaded else {
        // Claimed under terms taken before a reload: it waits for the compile.
        give_back(shared, claimed).await;
        return;
    };
    let (job_name, run_id) = (claimed.run.job.clone(), claimed.run.id.clone());
    // The ending is recorded by the finisher; follow-ups and runs requeued for soon wake
    // the dispatcher from there.
    if let Err(e) = shared
        .app
        .runner
        .attempt(claimed, &job.spec, loaded, cancel)
        .await
    {
        tracing::warn!(
            job = %job_name,
            run_id = %run_id,
            code = "driver_failed",
            error = %e,
            "could not start or hand over the attempt; surveillance will report it when its lease expires"
        );
    }
}

async fn schedule_loop(shared: Arc<Shared>, config: ServeConfig, mut stop: watch::Receiver<bool>) {
    let store = shared.app.store.clone();
    let scheduler = Scheduler::new(
        store.clone(),
        shared.catalog.clone(),
        config.catch_up,
        shared.app.wake.clone(),
    );
    loop {
        let wait = match store.now().await {
            Ok(now) => match scheduler.tick(now).await {
                Ok(Some(next)) => Duration::from_millis((next - now).clamp(5, 1_000) as u64),
                Ok(None) => Duration::from_secs(1),
                Err(e) => {
                    tracing::warn!(code = "driver_failed", error = %e, "schedule tick failed");
                    config.poll
                }
            },
            Err(e) => {
                tracing::warn!(code = "driver_failed", error = %e, "cannot read the database clock");
                config.poll
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

async fn surveillance_loop(
    shared: Arc<Shared>,
    config: ServeConfig,
    mut stop: watch::Receiver<bool>,
) {
    let surveillance = Surveillance {
        store: shared.app.store.clone(),
        catalog: Some(shared.catalog.clone()),
        host_id: shared.app.runner.host_id().to_string(),
        interval: config.surveillance_interval,
        stale: config.stale,
        max_reruns: config.max_reruns,
    };
    loop {
        match surveillance.check().await {
            Ok(found) if found.crashed > 0 => shared.app.wake.notify_one(),
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(code = "driver_failed", error = %e, "surveillance check failed")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(config.surveillance_interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

async fn report_loop(shared: Arc<Shared>, config: ServeConfig, mut stop: watch::Receiver<bool>) {
    let reporter = Reporter::new(
        shared.app.store.clone(),
        config.webhook.clone(),
        shared.app.metrics.clone(),
    );
    loop {
        if let Err(e) = reporter.deliver_due().await {
            tracing::warn!(code = "driver_failed", error = %e, "report delivery failed");
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

async fn reload_loop(shared: Arc<Shared>, config: ServeConfig, mut stop: watch::Receiver<bool>) {
    // First the components the catalog left to compile: the host serves meanwhile.
    tokio::select! {
        _ = shared.catalog.compile_pending(&shared.app) => {}
        _ = stop.wait_for(|s| *s) => return,
    }
    loop {
        tokio::select! {
            _ = tokio::time::sleep(config.reload_interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        shared.catalog.reload_changed(&shared.app).await;
    }
}

/// Registers this host's jobs, and orphans what no host registered within the grace.
async fn registration_loop(
    shared: Arc<Shared>,
    config: ServeConfig,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let serving: Vec<String> = shared
            .catalog
            .all()
            .iter()
            .map(|j| j.spec.name.clone())
            .collect();
        match crate::service::registration::beat(&shared.app.store, &serving, config.orphan_grace)
            .await
        {
            Ok(beat) if beat.orphaned == 0 => {}
            Ok(beat) => tracing::info!(
                jobs = beat.orphaned,
                "jobs no serving host registered within the orphan grace are orphaned: not scheduled, kicked or reached by events; their waiting runs end"
            ),
            Err(e) => {
                tracing::warn!(code = "driver_failed", error = %e, "registering the served jobs failed")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(crate::service::registration::beat_interval(config.orphan_grace)) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// Deletes, once per period across the fleet, the objects nothing can see.
async fn collect_loop(shared: Arc<Shared>, config: ServeConfig, mut stop: watch::Receiver<bool>) {
    let collector = crate::sandbox::files::collector::Collector {
        files: shared.app.files.clone(),
        store: shared.app.store.clone(),
        host_id: shared.app.runner.host_id().to_string(),
        interval: config.collect_interval,
        upload_grace: Duration::from_secs(1),
        garbage_grace: config.file_grace,
    };
    loop {
        if let Err(e) = collector.collect().await {
            tracing::warn!(code = "driver_failed", error = %e, "collecting objects failed");
        }
        tokio::select! {
            _ = tokio::time::sleep(config.collect_interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

async fn retention_loop(shared: Arc<Shared>, config: ServeConfig, mut stop: watch::Receiver<bool>) {
    let retention = crate::service::retention::Retention {
        store: shared.app.store.clone(),
        host_id: shared.app.runner.host_id().to_string(),
        interval: config.surveillance_interval,
        keep: config.retention,
    };
    loop {
        if let Err(e) = retention.prune().await {
            tracing::warn!(code = "driver_failed", error = %e, "pruning history failed");
        }
        tokio::select! {
            _ = tokio::time::sleep(config.surveillance_interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// Keeps the signing keys fresh: picks up keys other hosts made, and rotates.
async fn signing_keys_loop(
    shared: Arc<Shared>,
    config: ServeConfig,
    mut stop: watch::Receiver<bool>,
) {
    let every =
        (config.key_rotation / 4).clamp(Duration::from_millis(500), Duration::from_secs(60));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        if let Err(e) = shared.app.links.signer().refresh().await {
            tracing::warn!(code = "driver_failed", error = %e, "refreshing the signing keys failed");
        }
    }
}

/// On Postgres, every host wakes when any host queues a run (a trigger notifies
/// `jobhost_work`, naming the run's tenant), instead of polling hard; the tenant joins
/// this host's fair claims at once.
async fn listen_loop(
    pool: sqlx::PgPool,
    store: Store,
    wake: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let listened = async {
            let mut listener = sqlx::postgres::PgListener::connect_with(&pool).await?;
            listener.listen("jobhost_work").await?;
            loop {
                let notification = listener.recv().await?;
                store.queued_tenant_notified(notification.payload());
                wake.notify_one();
            }
        };
        tokio::select! {
            result = listened => {
                let result: Result<(), sqlx::Error> = result;
                if let Err(e) = result {
                    tracing::warn!(code = "driver_failed", error = %crate::store::describe(&e), "lost the notification channel; polling until it is back");
                }
            }
            _ = stop.wait_for(|s| *s) => return,
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane() -> Lane {
        Lane {
            name: "default".into(),
            workers: 4,
            ready: 16,
            wake: Arc::new(Notify::new()),
        }
    }

    #[test]
    fn short_runs_are_claimed_deep_and_long_ones_one_per_worker() {
        let (pace, lane) = (Pace::new(), lane());
        assert_eq!(pace.depth(&lane), 4, "nothing ended yet: taken as long");
        pace.ran(Duration::from_micros(200));
        assert_eq!(pace.depth(&lane), 16);
        for _ in 0..3 {
            pace.ran(Duration::from_secs(1));
        }
        assert_eq!(pace.depth(&lane), 4, "runs became long");
        for _ in 0..60 {
            pace.ran(Duration::from_micros(200));
        }
        assert_eq!(pace.depth(&lane), 16, "and short again");
    }

    /// A run claimed `waited` ago, named by it.
    fn claimed(waited: Duration) -> Claimed {
        Claimed {
            run: crate::store::RunRecord {
                id: format!("{waited:?}"),
                ..Default::default()
            },
            lease: None,
            stamped_after: Instant::now() - waited,
            answered_at: Instant::now() - waited,
        }
    }

    #[tokio::test]
    async fn runs_ready_past_their_start_window_are_taken_out_and_the_rest_kept_in_order() {
        let (ready, window) = (Ready::new(), Duration::from_secs(2));
        for waited in [1, 3, 0, 5] {
            ready.push(claimed(Duration::from_secs(waited)));
        }
        let ids =
            |runs: Vec<Claimed>| -> Vec<String> { runs.into_iter().map(|c| c.run.id).collect() };
        assert_eq!(ids(ready.expired(window)), ["3s", "5s"]);
        assert!(ready.expired(window).is_empty());
        // Next, the one claimed a second ago: a second from now.
        let next = ready.next_expiry(window).expect("runs wait");
        assert!(next > Instant::now() && next <= Instant::now() + Duration::from_secs(1));
        ready.close();
        assert_eq!(ready.take().await.map(|c| c.run.id).as_deref(), Some("1s"));
        assert_eq!(ready.take().await.map(|c| c.run.id).as_deref(), Some("0ns"));
        assert!(ready.take().await.is_none(), "closed and empty");
        assert_eq!(ready.next_expiry(window), None);
    }
}
