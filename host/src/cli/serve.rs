//! `host serve`, `host jobs`, `host hosts`, `host kick` and `host check`.

use super::failure::Failure;
use super::global::Global;
use crate::queue::kick::{self, KickError, Kicked};
use crate::rules::trace::TraceParent;
use crate::rules::units::{parse_duration, parse_positive_duration};
use crate::runs::runner::RunnerSettings;
use crate::sandbox::engine::{Engine, EngineSettings};
use crate::service::app::{App, AppConfig};
use crate::service::catalog::Catalog;
use crate::service::manifest::{CatchUp, Manifest, ManifestError};
use crate::service::schedule::cron::{Cron, parse_tz};
use crate::service::serve::{ServeConfig, serve};
use crate::service::views;
use crate::store::{Backend, Store};
use clap::Args;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address of the HTTP API (port 0 picks a free port; the address is printed).
    #[arg(long, env = "JOBHOST_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Longest a client may take to send a request's head, or leave a kept-alive
    /// connection idle.
    #[arg(long, value_parser = parse_positive_duration, default_value = "10s")]
    pub header_timeout: Duration,
    /// Longest an API request's body may take to arrive (answered 408 past it), and
    /// longest a client may leave its answer unread (closed past it).
    #[arg(long, value_parser = parse_positive_duration, default_value = "30s")]
    pub request_timeout: Duration,
    /// Most API connections open at once; one more is answered 503 and closed (at most
    /// half the process's file descriptors: the rest are the databases', files' and
    /// compilers').
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_connections: u32,
    /// The jobs to run; without one the host serves its API with no jobs.
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    /// Runs of the `default` lane executed at once (a lane declared in the manifest,
    /// `[lanes.NAME] workers = N`, has its own).
    #[arg(long)]
    pub workers: Option<usize>,
    /// The most claimed runs each lane keeps ready per worker: as many as its workers
    /// start within 20 ms at their recent pace (one per worker for runs of 20 ms or
    /// more), so a free worker starts its next run at once and claims come in batches; a
    /// run that waits there longer than its start window (2 s) is given back, and
    /// claiming ahead pauses for a while.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub prefetch: u16,
    /// Serve only these lanes (comma-separated; default: every lane).
    #[arg(long, value_delimiter = ',')]
    pub lanes: Option<Vec<String>>,
    /// Longest wait between looks at the queue.
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    pub poll: Duration,
    /// How often to look for crashed runs and missed schedules.
    #[arg(long, value_parser = parse_duration)]
    pub surveillance_interval: Option<Duration>,
    /// How long running attempts may finish after SIGTERM before they are cancelled.
    #[arg(long, value_parser = parse_duration)]
    pub shutdown_grace: Option<Duration>,
    /// How often the fleet deletes objects nothing can see.
    #[arg(long, value_parser = parse_duration, default_value = "60s")]
    pub collect_interval: Duration,
    /// Delete finished runs (with their attempts, logs and ledgers) and delivered reports
    /// older than this, checked on the surveillance interval (default: keep everything).
    #[arg(long, value_parser = parse_duration)]
    pub retention: Option<Duration>,
    /// How long an object no name points at any more is kept for readers still reading it.
    #[arg(long, value_parser = parse_duration, default_value = "10m")]
    pub file_grace: Duration,
    /// How long a key signs per-attempt tokens (links) before the next one does; the next
    /// is published a quarter of this before it signs.
    #[arg(long, value_parser = parse_duration, default_value = "24h")]
    pub key_rotation: Duration,
    /// How long a job that no serving host registers (its manifest names it) stays
    /// scheduled and kickable before it is orphaned; each host registers its jobs four
    /// times per grace. Every host of a fleet should use the same [default: 60s].
    #[arg(long, value_parser = parse_positive_duration)]
    pub orphan_grace: Option<Duration>,
    /// POST every report to this URL (JSON).
    #[arg(long)]
    pub webhook: Option<String>,
    /// Export spans with OpenTelemetry (OTLP over HTTP, protobuf) to this collector
    /// (its base URL: `/v1/traces` is added).
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// Where the page links a run's trace: a URL with `{trace_id}` in it, such as
    /// `http://jaeger:16686/trace/{trace_id}`.
    #[arg(long, env = "JOBHOST_TRACE_URL", value_parser = trace_url)]
    pub trace_url: Option<String>,
    /// After downtime: `one` catch-up run per schedule, or `none`.
    #[arg(long, value_enum)]
    pub catch_up: Option<CatchUpArg>,
    /// Time zone of cron schedules (IANA name).
    #[arg(long)]
    pub timezone: Option<String>,
    #[command(flatten)]
    pub attempts: super::global::AttemptArgs,
    /// Reruns a crashed run gets.
    #[arg(long, default_value_t = 3)]
    pub max_reruns: i64,
    /// Pre-reserve instance slots for the workers (faster instantiation, more address
    /// space reserved); `--pooling=false` allocates each instance on demand.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true", value_name = "BOOL")]
    pub pooling: bool,
    /// Meter fuel in every attempt (enforces jobs' `fuel` caps, reports `fuel_used`);
    /// `--fuel-metering=false` runs guest code faster, bounded by its deadline only, and
    /// refuses a manifest whose jobs set `fuel`.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true", value_name = "BOOL")]
    pub fuel_metering: bool,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy)]
pub enum CatchUpArg {
    One,
    None,
}

pub async fn run_serve(global: &Global, args: ServeArgs) -> Result<u8, Failure> {
    let manifest = args
        .manifest
        .as_deref()
        .map(|path| serving_manifest(global, path))
        .transpose()?;
    let host = manifest
        .as_ref()
        .map(|m| m.host.clone())
        .unwrap_or_default();
    let tz = parse_tz(
        host.timezone
            .as_deref()
            .or(args.timezone.as_deref())
            .unwrap_or("UTC"),
    )?;
    let workers = args.workers.or(host.workers).unwrap_or(4).max(1);
    let lanes = served_lanes(
        manifest.as_ref().map(|m| &m.lanes),
        workers,
        args.lanes.as_deref(),
    )?;
    let all_workers: usize = lanes.values().sum();
    if !args.fuel_metering
        && let Some(m) = &manifest
    {
        let capped: Vec<&str> = m
            .jobs
            .iter()
            .filter(|j| j.limits.fuel.is_some())
            .map(|j| j.name.as_str())
            .collect();
        if !capped.is_empty() {
            let (jobs, their) = if capped.len() == 1 {
                ("job", "its")
            } else {
                ("jobs", "their")
            };
            return Err(Failure::usage(format!(
                "--fuel-metering=false cannot keep the fuel cap of {jobs} {}: remove {their} `fuel` or meter fuel",
                capped.join(", ")
            )));
        }
    }
    let db_url = global.db_url(host.db.as_deref());
    let _serving = match Backend::from_url(&db_url) {
        Some(Backend::Sqlite) => Some(crate::store::claim_for_serving(&db_url)?),
        _ => None,
    };
    let app = App::open(AppConfig {
        db_url,
        operator_migrations: host.migrations.clone(),
        engine: EngineSettings {
            pooling: args.pooling,
            // One slot per worker's attempt, with room to spare.
            max_instances: (all_workers as u32 * 2).max(16),
            cache_dir: Some(global.cache_dir()),
            fuel: args.fuel_metering,
            compiler: Some(global.compiler()?),
        },
        runner: RunnerSettings {
            claim_slack: args.poll * 5 + Duration::from_secs(10),
            quotas: manifest
                .as_ref()
                .map(|m| m.quotas.clone())
                .unwrap_or_default(),
            ..args.attempts.runner()
        },
        home: global.home.clone(),
        collections: manifest
            .as_ref()
            .map(|m| m.collections.clone())
            .unwrap_or_default(),
        mounts: manifest
            .as_ref()
            .map(|m| m.mounts.clone())
            .unwrap_or_default(),
        key_rotation: args.key_rotation,
    })
    .await?;
    let webhooks = match &manifest {
        Some(m) => crate::service::webhooks::Webhooks::resolve(&m.webhooks)
            .map_err(|e| Failure::usage(e.to_string()))?,
        None => Default::default(),
    };
    let specs = manifest.map(|m| m.jobs).unwrap_or_default();
    let catalog = Catalog::load(&app, specs, tz).await?;
    let config = ServeConfig {
        listen: args.listen,
        api_limits: crate::service::http::ConnectionLimits {
            header_timeout: args.header_timeout,
            request_timeout: args.request_timeout,
            max_connections: within_descriptors(args.max_connections as usize),
        },
        lanes,
        prefetch: usize::from(args.prefetch),
        poll: args.poll,
        surveillance_interval: args
            .surveillance_interval
            .or(host.surveillance_interval)
            .unwrap_or(Duration::from_secs(60)),
        reload_interval: Duration::from_secs(2),
        collect_interval: args.collect_interval,
        key_rotation: args.key_rotation,
        file_grace: args.file_grace,
        shutdown_grace: args
            .shutdown_grace
            .or(host.shutdown_grace)
            .unwrap_or(Duration::from_secs(30)),
        catch_up: match args.catch_up {
            Some(CatchUpArg::One) => CatchUp::One,
            Some(CatchUpArg::None) => CatchUp::None,
            None => host.catch_up.unwrap_or_default(),
        },
        webhook: args.webhook.or(host.webhook),
        webhooks,
        max_reruns: args.max_reruns,
        stale: args.attempts.lease_grace,
        retention: args.retention.or(host.retention),
        trace_url: args.trace_url,
        orphan_grace: args
            .orphan_grace
            .unwrap_or(crate::service::registration::ORPHAN_GRACE),
    };
    serve(app, catalog, config, shutdown_signal()).await?;
    Ok(0)
}

fn trace_url(text: &str) -> Result<String, String> {
    let ok = (text.starts_with("http://") || text.starts_with("https://"))
        && text.contains("{trace_id}")
        && text.len() <= 512
        && text.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(text.to_string())
    } else {
        Err("use an http(s) URL with {trace_id} in it, at most 512 characters".into())
    }
}

/// The connection cap, raised to the process's hard limit on file descriptors if the soft
/// one is lower (as servers do), and lowered to half of it if it is still above that: past
/// its descriptors, a host would fail every accept and every database or file it opens.
fn within_descriptors(max_connections: usize) -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` and `setrlimit` only read and write the struct passed.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return max_connections;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit = raised;
        }
    }
    let room = usize::try_from(limit.rlim_cur / 2).unwrap_or(usize::MAX);
    if max_connections > room {
        tracing::warn!(
            max_connections,
            file_descriptors = limit.rlim_cur,
            "--max-connections lowered to half the process's file descriptors"
        );
        return room.max(1);
    }
    max_connections
}

/// The lanes this host serves and their workers: the manifest's, and `default` with
/// `workers` unless the manifest declares it; only those named by `--lanes` if given.
fn served_lanes(
    declared: Option<&BTreeMap<String, usize>>,
    workers: usize,
    only: Option<&[String]>,
) -> Result<BTreeMap<String, usize>, Failure> {
    let mut lanes = declared.cloned().unwrap_or_default();
    lanes
        .entry(crate::rules::job::DEFAULT_LANE.to_string())
        .or_insert(workers);
    let Some(only) = only else {
        return Ok(lanes);
    };
    if let Some(unknown) = only.iter().find(|l| !lanes.contains_key(l.as_str())) {
        return Err(Failure::usage(format!(
            "--lanes: no lane {unknown:?} (the manifest declares: {})",
            lanes.keys().cloned().collect::<Vec<_>>().join(", ")
        )));
    }
    lanes.retain(|lane, _| only.contains(lane));
    Ok(lanes)
}

/// SIGTERM or SIGINT. The handlers are installed when this is called, not when the
/// future is first polled: a signal that arrives right after the host said it is
/// listening must drain it, not kill it with the default action.
pub(super) fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("install a SIGTERM handler");
    let mut interrupt = signal(SignalKind::interrupt()).expect("install a SIGINT handler");
    async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = interrupt.recv() => {}
        }
    }
}

/// `host hosts`: the fleet as `GET /hosts` shows it.
pub async fn hosts(global: &Global, json: bool) -> Result<u8, Failure> {
    let store = Store::open(&global.db_url(None)).await?;
    let read = async {
        Ok::<_, crate::store::StoreError>((
            store.now().await?,
            store.list_hosts(views::HOSTS_SHOWN).await?,
        ))
    }
    .await;
    store.close().await;
    let (now, records) = read?;
    let list = views::hosts(&records, now, None);
    if json {
        println!("{}", serde_json::to_value(&list).expect("serialisable"));
        return Ok(0);
    }
    if list.hosts.is_empty() {
        println!("no host has served in the last day");
        return Ok(0);
    }
    println!(
        "{:<32}  {:<7}  {:<10}  {:>7}  {:<28}  {:<25}  LAST SEEN",
        "HOST", "STATE", "VERSION", "BUSY", "LANES (BUSY/WORKERS)", "STARTED"
    );
    for h in &list.hosts {
        let lanes: Vec<String> = h
            .lanes
            .iter()
            .map(|l| {
                format!(
                    "{} {}/{}",
                    l["lane"].as_str().unwrap_or("?"),
                    l["busy"].as_u64().unwrap_or(0),
                    l["workers"].as_u64().unwrap_or(0)
                )
            })
            .collect();
        let ago = u64::try_from(list.now_ms - h.seen_ms).unwrap_or(0);
        let line = format!(
            "{:<32}  {:<7}  {:<10}  {:>7}  {:<28}  {:<25}  {} ago",
            h.host,
            h.state,
            h.version,
            format!("{}/{}", h.workers.busy, h.workers.total),
            lanes.join(", "),
            h.started_at,
            crate::rules::units::readable_ms(ago)
        );
        println!("{}", crate::rules::guest_text::for_terminal(&line));
    }
    Ok(0)
}

pub async fn jobs(global: &Global, json: bool) -> Result<u8, Failure> {
    let store = Store::open(&global.db_url(None)).await?;
    let now = store.now().await?;
    let views = views::jobs(
        &store.list_jobs().await?,
        &store
            .instance_leases(crate::queue::kick::DEFAULT_INSTANCE)
            .await?,
        now,
    );
    store.close().await;
    if json {
        println!("{}", serde_json::Value::Array(views));
        return Ok(0);
    }
    if views.is_empty() {
        println!("no jobs");
        return Ok(0);
    }
    println!(
        "{:<24}  {:<16}  {:<24}  {:<24}  LEASE",
        "JOB", "SCHEDULE", "NEXT FIRE", "LAST SUCCESS"
    );
    for v in views {
        let text = |key: &str| v[key].as_str().unwrap_or("-").to_string();
        let lease = if v["orphaned"].as_bool() == Some(true) {
            "orphaned"
        } else if v["lease"]["held"].as_bool() == Some(true) {
            "held"
        } else {
            "free"
        };
        println!(
            "{:<24}  {:<16}  {:<24}  {:<24}  {lease}",
            text("name"),
            text("schedule"),
            text("next_fire_at"),
            text("last_success_at")
        );
    }
    Ok(0)
}

pub async fn kick_cmd(
    global: &Global,
    job: &str,
    instance: &str,
    trace: Option<TraceParent>,
    json: bool,
    queued: &mut Option<String>,
) -> Result<u8, Failure> {
    crate::rules::job::validate_instance(instance)?;
    let store = Store::open(&global.db_url(None)).await?;
    let result = match kick::kick(&store, job, instance, trace).await {
        Ok(kicked) => Ok(kicked),
        Err(e) => Err(refused(&store, job, e).await),
    };
    store.close().await;
    let kicked = result?;
    if let Kicked::Queued { run_id } | Kicked::Dropped { run_id, .. } = &kicked {
        *queued = Some(run_id.clone());
    }
    if json {
        println!("{}", serde_json::to_value(&kicked).expect("serialisable"));
    } else {
        match kicked {
            Kicked::Pending => println!("{job} is running: it will run once more when it ends"),
            Kicked::Queued { run_id } => println!("queued run {run_id} of {job}"),
            Kicked::Dropped { run_id, code } => println!(
                "dropped run {run_id} of {job} ({code}): it already has max_per_tenant runs queued or running"
            ),
            Kicked::QueueFull => println!("queued nothing of {job}: its queue is full"),
            Kicked::FannedOut { children } if children.is_empty() => {
                println!("{job} runs per tenant, and no tenant is active (see `host tenants`)")
            }
            Kicked::FannedOut { children } => {
                for child in children {
                    match child.kicked {
                        Kicked::Queued { run_id } => {
                            println!("queued run {run_id} of {job} for {}", child.tenant)
                        }
                        Kicked::Dropped { run_id, code } => println!(
                            "dropped run {run_id} of {job} for {} ({code})",
                            child.tenant
                        ),
                        Kicked::QueueFull => println!(
                            "queued nothing of {job} for {}: its queue is full (queue_full)",
                            child.tenant
                        ),
                        _ => println!(
                            "{job} is running for {}: it will run once more when it ends",
                            child.tenant
                        ),
                    }
                }
            }
        }
    }
    Ok(0)
}

/// A kick or start that could not be taken, in words (an unknown job's with the jobs
/// there are).
async fn refused(store: &Store, job: &str, error: KickError) -> Failure {
    match error {
        KickError::UnknownJob(_) => match store.list_jobs().await {
            Ok(jobs) => Failure::usage(format!(
                "unknown job {job:?}; {} (see `host jobs`)",
                crate::rules::job::known_jobs(jobs.iter().map(|j| j.name.as_str()))
            )),
            Err(e) => e.into(),
        },
        KickError::TenantDisabled(_) | KickError::UnknownTenant(_) => {
            Failure::usage(format!("{error} (see `host tenants list`)"))
        }
        KickError::Orphaned(_) => Failure::usage(format!("{error} (see `host jobs`)")),
        KickError::QueueFull(_) => Failure {
            message: format!("queue_full: {error} (see `host runs list --status queued`)"),
            exit: super::failure::EXIT_QUEUE_FULL,
        },
        KickError::Payload(e) => Failure::usage(e),
        KickError::Option { error, .. } => Failure::usage(option_refused(&error)),
        KickError::Store(e) => e.into(),
    }
}

/// `host start`'s options, read by the same rule as the API's (`rules::enqueue`).
#[derive(Debug, Clone, clap::Args)]
pub struct StartOptions {
    /// Due at this time (RFC 3339, e.g. 2026-12-06T18:00:00Z; at most a day past).
    #[arg(long, conflicts_with = "delay")]
    run_at: Option<String>,
    /// Due after this long (e.g. 30s, 10m, 2h; at most a year).
    #[arg(long)]
    delay: Option<String>,
    /// Seconds of precedence among the tenant's due runs, -3600 to 3600.
    #[arg(long, allow_negative_numbers = true)]
    priority: Option<i64>,
    /// Attempts a pass of the run may use: 1 up to the job's own (its retries + 1).
    #[arg(long, allow_negative_numbers = true)]
    max_attempts: Option<i64>,
    /// A unique key: the run it names answers while `--while` holds.
    #[arg(long)]
    unique: Option<String>,
    /// How long the key holds its run: queued, active, until-finished (the default), or a
    /// period such as 1h.
    #[arg(long = "while", value_name = "WHILE", requires = "unique")]
    hold: Option<String>,
    /// What a held key does: keep (join it, the default), replace (its payload),
    /// debounce (its due time).
    #[arg(long, requires = "unique")]
    on_conflict: Option<String>,
    /// Wait for the run to end, then print its ending and result (as `host runs wait`,
    /// whose exit codes it takes).
    #[arg(long)]
    wait: bool,
    /// How long `--wait` waits.
    #[arg(long, requires = "wait", default_value = "60s", value_parser = crate::rules::units::parse_duration)]
    timeout: std::time::Duration,
}

impl StartOptions {
    /// The options as the API's body would carry them.
    fn as_json(&self) -> serde_json::Map<String, serde_json::Value> {
        use serde_json::{Value, json};
        let mut body = serde_json::Map::new();
        let mut set = |field: &str, value: Option<Value>| {
            if let Some(value) = value {
                body.insert(field.into(), value);
            }
        };
        set("run_at", self.run_at.clone().map(Value::from));
        set("delay", self.delay.clone().map(Value::from));
        set("priority", self.priority.map(Value::from));
        set("max_attempts", self.max_attempts.map(Value::from));
        set(
            "unique",
            self.unique.as_ref().map(|key| {
                let mut unique = json!({ "key": key });
                if let Some(hold) = &self.hold {
                    unique["while"] = hold.clone().into();
                }
                if let Some(policy) = &self.on_conflict {
                    unique["on_conflict"] = policy.clone().into();
                }
                unique
            }),
        );
        body
    }
}

/// A refused option, named by its flag.
fn option_refused(e: &crate::rules::enqueue::OptionError) -> String {
    format!("{}: {}", flag_of(e.field), e.reason)
}

/// The flag of an option's field.
fn flag_of(field: &str) -> &'static str {
    match field {
        "run_at" => "--run-at",
        "delay" => "--delay",
        "priority" => "--priority",
        "max_attempts" => "--max-attempts",
        "unique.while" => "--while",
        "unique.on_conflict" => "--on-conflict",
        _ => "--unique",
    }
}

/// What `host start` asks.
pub struct Start<'a> {
    pub job: &'a str,
    pub instance: &'a str,
    pub payload: Option<&'a str>,
    pub options: StartOptions,
}

/// Joins the live run of a job and instance, or starts one; with a unique key, what the
/// unique rule answers.
pub async fn start_cmd(
    global: &Global,
    start: Start<'_>,
    trace: Option<TraceParent>,
    json: bool,
    started_run: &mut Option<String>,
) -> Result<u8, Failure> {
    let Start { job, instance, .. } = start;
    crate::rules::job::validate_instance(instance)?;
    let payload = start.payload.map(super::run::read_payload).transpose()?;
    let store = Store::open(&global.db_url(None)).await?;
    let result = async {
        let now = store.now().await?;
        let options = crate::rules::enqueue::from_json(&start.options.as_json(), now)
            .map_err(|e| Failure::usage(option_refused(&e)))?;
        let request = kick::StartRequest {
            instance: instance.to_string(),
            payload,
            options,
        };
        match kick::start(&store, job, request, trace).await {
            Ok(started) => Ok(started),
            Err(e) => Err(refused(&store, job, e).await),
        }
    }
    .await;
    let started = match result {
        Ok(started) => started,
        Err(e) => {
            store.close().await;
            return Err(e);
        }
    };
    *started_run = Some(started.run_id.clone());
    if start.options.wait {
        let ended = super::runs::wait(&store, &started.run_id, start.options.timeout, json).await;
        store.close().await;
        return ended;
    }
    store.close().await;
    if json {
        println!("{}", serde_json::to_value(&started).expect("serialisable"));
    } else if let Some(code) = started.dropped {
        println!(
            "dropped run {} of {job} ({code}): it already has max_per_tenant runs queued or running",
            started.run_id
        );
    } else {
        let said = match started.result {
            crate::rules::enqueue::Outcome::Created => "started",
            crate::rules::enqueue::Outcome::Joined => "joined",
            crate::rules::enqueue::Outcome::Replaced => "replaced the payload of",
            crate::rules::enqueue::Outcome::Debounced => "moved the due time of",
        };
        println!("{said} run {} of {job}", started.run_id);
    }
    Ok(0)
}

/// Emits an event and says which runs it queued (or had queued before).
pub async fn emit_cmd(
    global: &Global,
    event: &str,
    key: &str,
    tenant: Option<&str>,
    payload: Option<&str>,
    trace: Option<TraceParent>,
    json: bool,
) -> Result<u8, Failure> {
    let payload = payload.map(super::run::read_payload).transpose()?;
    let store = Store::open(&global.db_url(None)).await?;
    let result =
        crate::queue::events::emit(&store, event, key, tenant, payload.as_deref(), trace).await;
    store.close().await;
    let runs = result.map_err(|e| match e {
        crate::queue::events::EmitError::Store(e) => e.into(),
        e => Failure::usage(e),
    })?;
    if json {
        let view = serde_json::json!({ "event": event, "key": key, "runs": runs });
        println!("{view}");
    } else if runs.is_empty() {
        println!("no active job subscribes to {event}");
    } else {
        for run in &runs {
            let state = if run.duplicate {
                "already queued"
            } else {
                "queued"
            };
            println!(
                "{state} run {} of {} for {}",
                run.run_id, run.job, run.tenant
            );
        }
    }
    Ok(0)
}

/// Checks a manifest: its own settings (every problem at once), each job's schedule,
/// time zone, component and grants, and — when a database is named (`--db`, `JOBHOST_DB`
/// or the manifest's `[host] db`) — that the tables its jobs were granted exist.
pub async fn check(global: &Global, manifest: PathBuf) -> Result<u8, Failure> {
    let (manifest, mut problems) = Manifest::load_with_problems(&manifest)?;
    problems.extend(job_problems(global, &manifest)?);
    let db = &manifest.host.db;
    if global.db.is_some() || db.is_some() {
        let store = Store::open(&global.db_url(db.as_deref())).await?;
        for spec in &manifest.jobs {
            for table in spec.grants.db.iter().flat_map(|g| g.tables()) {
                if !store.table_exists(table).await? {
                    problems.push(format!(
                        "job {}: granted table {table:?} does not exist (are the operator's migrations applied?)",
                        spec.name
                    ));
                }
            }
        }
        store.close().await;
    }
    if !problems.is_empty() {
        return Err(ManifestError::problems(&manifest.path, problems).into());
    }
    println!("ok: {} jobs", manifest.jobs.len());
    Ok(0)
}

/// The problems of a manifest's sound jobs that need no database: schedules that do not
/// parse, components that do not load or import what their job was not granted.
fn job_problems(global: &Global, manifest: &Manifest) -> Result<Vec<String>, Failure> {
    let tz = parse_tz(manifest.host.timezone.as_deref().unwrap_or("UTC"))?;
    let engine = Engine::new(&EngineSettings {
        cache_dir: Some(global.cache_dir()),
        compiler: Some(global.compiler()?),
        ..EngineSettings::default()
    })?;
    let mut problems = Vec::new();
    for spec in &manifest.jobs {
        if let Some(expr) = &spec.schedule
            && let Err(e) = Cron::parse(expr, tz)
        {
            problems.push(format!("job {}: {e}", spec.name));
        }
        if let Err(e) = engine.load(&spec.component, &spec.grants) {
            problems.push(format!("job {}: {e}", spec.name));
        }
    }
    Ok(problems)
}

/// The manifest `host serve` starts with: refused with every problem that can be found
/// without a database when its own settings have any (the database's are found once it
/// is open, by the catalog).
pub(super) fn serving_manifest(
    global: &Global,
    path: &std::path::Path,
) -> Result<Manifest, Failure> {
    let (manifest, mut problems) = Manifest::load_with_problems(path)?;
    if problems.is_empty() {
        return Ok(manifest);
    }
    problems.extend(job_problems(global, &manifest)?);
    Err(ManifestError::problems(path, problems).into())
}
