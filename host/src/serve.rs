//! `host serve`: the long-running host. It claims due runs and runs them on a bounded
//! set of workers, fires schedules, checks for crashed runs and missed schedules, delivers
//! reports, reloads changed components and answers the HTTP API — until it is told to
//! stop, when it drains: no new runs, running attempts get a grace period, then are
//! cancelled (their writes are fenced) and put back in the queue for any host.

use crate::app::App;
use crate::catalog::Catalog;
use crate::engine::attempt::CancelToken;
use crate::manifest::CatchUp;
use crate::report::Reporter;
use crate::runner::Step;
use crate::schedule::Scheduler;
use crate::schedule::surveillance::Surveillance;
use crate::store::{Pool, RunRecord};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::{Notify, Semaphore, watch};
use tokio::task::JoinSet;

/// Runs requeued for at most this long wake the dispatcher when due; later ones are found
/// by its polling.
const PRECISE_WAKE: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub listen: SocketAddr,
    pub workers: usize,
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
    pub max_reruns: i64,
    /// How long a run may sit past its lease before surveillance calls it crashed.
    pub stale: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// What the loops and the HTTP handlers share.
pub struct Shared {
    pub app: App,
    pub catalog: Arc<Catalog>,
    /// Wakes the dispatcher: a run was queued or became due.
    pub wake: Arc<Notify>,
    pub draining: AtomicBool,
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
        wake: Arc::new(Notify::new()),
        draining: AtomicBool::new(false),
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
    loops.spawn(reload_loop(shared.clone(), config.clone(), stop.clone()));
    loops.spawn(collect_loop(shared.clone(), config.clone(), stop.clone()));
    loops.spawn(signing_keys_loop(
        shared.clone(),
        config.clone(),
        stop.clone(),
    ));
    if let Pool::Postgres(pool) = shared.app.store.pool() {
        loops.spawn(listen_loop(pool.clone(), shared.wake.clone(), stop.clone()));
    }
    let dispatcher = tokio::spawn(dispatch(
        shared.clone(),
        config.clone(),
        cancel,
        stop.clone(),
    ));

    let mut http_stop = stop.clone();
    let http = tokio::spawn(
        axum::serve(listener, crate::http::router(shared.clone()))
            .with_graceful_shutdown(async move {
                let _ = http_stop.wait_for(|s| *s).await;
            })
            .into_future(),
    );
    tracing::info!(%addr, jobs = shared.catalog.all().len(), workers = config.workers, "serving");
    println!("listening on {addr}");

    shutdown.await;
    tracing::info!(
        grace_ms = config.shutdown_grace.as_millis() as u64,
        "draining: no new runs; running attempts get the grace period"
    );
    shared.draining.store(true, Ordering::Release);
    let _ = stop_tx.send(true);
    let mut dispatcher = dispatcher;
    if tokio::time::timeout(config.shutdown_grace, &mut dispatcher)
        .await
        .is_err()
    {
        tracing::warn!(
            code = "cancelled",
            "grace period over: cancelling running attempts"
        );
        let _ = cancel_tx.send(true);
        let _ = dispatcher.await;
    }
    while loops.join_next().await.is_some() {}
    let _ = http.await;
    shared.app.store.close().await;
    tracing::info!("stopped");
    Ok(())
}

/// Claims due runs while workers are free, and runs each on its own task.
async fn dispatch(
    shared: Arc<Shared>,
    config: ServeConfig,
    cancel: CancelToken,
    mut stop: watch::Receiver<bool>,
) {
    let workers = Arc::new(Semaphore::new(config.workers));
    let mut running = JoinSet::new();
    let host = shared.app.runner.host_id().to_string();
    loop {
        while running.try_join_next().is_some() {}
        let first = tokio::select! {
            permit = workers.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            _ = stop.wait_for(|s| *s) => break,
        };
        if *stop.borrow() {
            break;
        }
        // Claim as many runs as there are free workers, in one statement.
        let mut permits = vec![first];
        while let Ok(permit) = workers.clone().try_acquire_owned() {
            permits.push(permit);
        }
        match shared
            .app
            .store
            .claim_due_runs(&host, permits.len() as i64)
            .await
        {
            Ok(runs) if !runs.is_empty() => {
                // One permit per run; a claimed run is never dropped, even if the
                // database returned more than asked for.
                let mut permits = permits.into_iter();
                for run in runs {
                    let permit = permits.next();
                    let lag = (run.updated_at - run.next_attempt_at).max(0) as u64;
                    shared.app.metrics.run_claimed(Duration::from_millis(lag));
                    let shared = shared.clone();
                    let cancel = cancel.clone();
                    running.spawn(async move {
                        process(&shared, run, cancel).await;
                        drop(permit);
                    });
                }
            }
            Ok(_) => {
                drop(permits);
                wait_for_work(&shared, &config, &mut stop).await;
            }
            Err(e) => {
                drop(permits);
                tracing::warn!(code = "driver_failed", error = %e, "cannot claim runs");
                tokio::select! {
                    _ = tokio::time::sleep(config.poll) => {}
                    _ = stop.wait_for(|s| *s) => break,
                }
            }
        }
    }
    while running.join_next().await.is_some() {}
}

async fn wait_for_work(shared: &Shared, config: &ServeConfig, stop: &mut watch::Receiver<bool>) {
    let until_due = match shared.app.store.next_due_in().await {
        Ok(Some(ms)) => Duration::from_millis(ms.max(10) as u64),
        _ => config.poll,
    };
    tokio::select! {
        _ = shared.wake.notified() => {}
        _ = tokio::time::sleep(until_due.min(config.poll)) => {}
        _ = stop.wait_for(|s| *s) => {}
    }
}

async fn process(shared: &Shared, run: RunRecord, cancel: CancelToken) {
    let store = &shared.app.store;
    let Some(job) = shared.catalog.get(&run.job) else {
        let _ = store
            .skip_run(&run.id, "the job is not defined on this host")
            .await;
        return;
    };
    match shared
        .app
        .runner
        .step(&run, &job.spec, &job.loaded, cancel)
        .await
    {
        Ok(Step::Finished {
            follow_up: Some(_), ..
        }) => shared.wake.notify_one(),
        Ok(Step::Requeued { delay }) if delay <= PRECISE_WAKE => {
            let wake = shared.wake.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                wake.notify_one();
            });
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(
            job = %run.job,
            run_id = %run.id,
            code = "driver_failed",
            error = %e,
            "could not record the run; surveillance will report it when its lease expires"
        ),
    }
}

async fn schedule_loop(shared: Arc<Shared>, config: ServeConfig, mut stop: watch::Receiver<bool>) {
    let store = shared.app.store.clone();
    let scheduler = Scheduler::new(
        store.clone(),
        shared.catalog.clone(),
        config.catch_up,
        shared.wake.clone(),
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
            Ok(found) if found.crashed > 0 => shared.wake.notify_one(),
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
    loop {
        tokio::select! {
            _ = tokio::time::sleep(config.reload_interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        shared.catalog.reload_changed(&shared.app).await;
    }
}

/// Deletes, once per period across the fleet, the objects nothing can see.
async fn collect_loop(shared: Arc<Shared>, config: ServeConfig, mut stop: watch::Receiver<bool>) {
    let collector = crate::files::collector::Collector {
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
/// `jobhost_work`), instead of polling hard.
async fn listen_loop(pool: sqlx::PgPool, wake: Arc<Notify>, mut stop: watch::Receiver<bool>) {
    loop {
        let listened = async {
            let mut listener = sqlx::postgres::PgListener::connect_with(&pool).await?;
            listener.listen("jobhost_work").await?;
            loop {
                listener.recv().await?;
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
