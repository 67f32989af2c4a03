//! `host run` and `host migrate`.

use super::failure::Failure;
use super::global::Global;
use super::output;
use crate::rules::grants::Grants;
use crate::rules::job::{self, JobSpec, Limits, RetryPolicy};
use crate::rules::units::{parse_duration, parse_size};
use crate::runs::runner::{RunnerSettings, Step};
use crate::sandbox::engine::EngineSettings;
use crate::sandbox::files::CollectionSpec;
use crate::service::app::{App, AppConfig};
use crate::service::manifest::Manifest;
use crate::service::schedule::surveillance::Surveillance;
use crate::store::new_run_id;
use crate::store::{AttemptRecord, NewRun, Origin, RunRecord, RunStatus, Store};
use clap::Args;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Args, Debug)]
pub struct RunArgs {
    /// A job of the manifest to run now (instead of --job).
    #[arg(value_name = "JOB", requires = "manifest")]
    pub manifest_job: Option<String>,
    /// The job's component (.wasm) for an ad-hoc run.
    #[arg(long, value_name = "PATH", required_unless_present = "manifest_job")]
    pub job: Option<PathBuf>,
    /// The manifest whose job JOB is; with --job, whose host settings (database,
    /// migrations, collections) the run uses.
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    /// The job's name (default: the component's file name).
    #[arg(long)]
    pub name: Option<String>,
    /// Runs of one job and instance never overlap.
    #[arg(long, default_value = "default")]
    pub instance: String,
    /// The payload: JSON text, or @FILE.
    #[arg(long)]
    pub payload: Option<String>,
    /// Deadline of each attempt, e.g. 30s, 10m.
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Extra attempts after a failed one.
    #[arg(long)]
    pub retries: Option<u32>,
    /// First retry delay (doubles per retry, with jitter).
    #[arg(long, value_parser = parse_duration)]
    pub backoff: Option<Duration>,
    /// CPU budget per attempt, in fuel units.
    #[arg(long)]
    pub fuel: Option<u64>,
    /// Memory cap, e.g. 64MiB.
    #[arg(long, value_parser = parse_size)]
    pub memory: Option<u64>,
    /// A capability grant, CAP.MODE=NAME[,NAME], e.g. db.write=ledger. Repeatable.
    #[arg(long = "grant", value_name = "CAP.MODE=NAME")]
    pub grants: Vec<String>,
    /// The operator's migrations to apply first.
    #[arg(long)]
    pub migrations: Option<PathBuf>,
    #[command(flatten)]
    pub attempts: super::global::AttemptArgs,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Run again each time the component (or the manifest) changes.
    #[arg(long)]
    pub watch: bool,
}

pub async fn run(global: &Global, args: RunArgs) -> Result<u8, Failure> {
    if !args.watch {
        return run_once(global, &args).await;
    }
    loop {
        let mut watched: Vec<PathBuf> = args.manifest.iter().cloned().collect();
        let manifest = args
            .manifest
            .as_deref()
            .map(Manifest::load)
            .transpose()
            .ok()
            .flatten();
        if let Ok(spec) = resolve_spec(&args, manifest.as_ref()) {
            watched.push(spec.component);
        } else if let Some(job) = &args.job {
            watched.push(job.clone());
        }
        // Taken before the run: a change made while it runs starts the next one.
        let before = super::watch::stamps(&watched);
        if let Err(failure) = run_once(global, &args).await {
            eprintln!("error: {}", failure.message);
        }
        super::watch::waiting(&watched);
        super::watch::until_changed(&watched, before).await;
    }
}

async fn run_once(global: &Global, args: &RunArgs) -> Result<u8, Failure> {
    let manifest = args.manifest.as_deref().map(Manifest::load).transpose()?;
    let spec = resolve_spec(args, manifest.as_ref())?;
    let payload = match &args.payload {
        Some(text) => read_payload(text)?,
        None => spec.payload.to_string(),
    };
    let payload = job::validate_payload(&payload)?;
    job::validate_instance(&args.instance)?;
    let migrations = args
        .migrations
        .clone()
        .or_else(|| manifest.as_ref().and_then(|m| m.host.migrations.clone()));
    let db_url = global.db_url(manifest.as_ref().and_then(|m| m.host.db.as_deref()));
    let app = open_app(
        global,
        db_url,
        migrations,
        &spec,
        manifest.as_ref(),
        args.attempts,
    )
    .await?;
    register_startable(&app, &spec, manifest.as_ref()).await?;
    // What a killed `host run` left behind on this database is reported now.
    let swept = Surveillance {
        store: app.store.clone(),
        catalog: None,
        host_id: app.runner.host_id().to_string(),
        interval: Duration::ZERO,
        stale: args.attempts.lease_grace,
        max_reruns: 0,
    }
    .sweep_crashed()
    .await?;
    if swept > 0 {
        tracing::warn!(
            runs = swept,
            code = "crashed",
            "reported runs whose host had stopped"
        );
    }
    let progress = super::progress::Progress::new(args.json);
    let (record, attempts) =
        run_to_end(&app, &spec, payload, &args.instance, Some(&progress), 1).await?;
    progress.finish();
    app.store.close().await;
    output::run_result(&record, args.json);
    if !args.json
        && let Some(last) = attempts.last()
    {
        output::log(last);
    }
    Ok(output::exit_code(&record))
}

/// The process `host run` (and each case of `host test`) runs one job's run in: the
/// database at `db_url`, migrated, and an engine and runner for this process alone.
pub(super) async fn open_app(
    global: &Global,
    db_url: String,
    migrations: Option<PathBuf>,
    spec: &JobSpec,
    manifest: Option<&Manifest>,
    attempts: super::global::AttemptArgs,
) -> Result<App, Failure> {
    Ok(App::open(AppConfig {
        db_url,
        operator_migrations: migrations,
        engine: EngineSettings {
            cache_dir: Some(global.cache_dir()),
            compiler: Some(global.compiler()?),
            ..EngineSettings::default()
        },
        runner: RunnerSettings {
            // This process claims its run again the moment it is due: a short slack, so
            // that a run left waiting by a killed `host run` is found soon after.
            claim_slack: Duration::from_secs(1),
            // The run is claimed when it is about to start: no room for waiting.
            start_within: Duration::ZERO,
            ..attempts.runner()
        },
        home: global.home.clone(),
        collections: run_collections(spec, manifest),
        mounts: manifest.map(|m| m.mounts.clone()).unwrap_or_default(),
        key_rotation: crate::sandbox::links::token::ROTATE_AFTER,
    })
    .await?)
}

/// Queues one run of `spec` and runs it here, pass after pass and retry after retry, to
/// its end: the run, and its last `attempts` attempts, in order. `progress` is shown each
/// pass that leaves the run queued.
pub(super) async fn run_to_end(
    app: &App,
    spec: &JobSpec,
    payload: String,
    instance: &str,
    progress: Option<&super::progress::Progress>,
    attempts: i64,
) -> Result<(RunRecord, Vec<AttemptRecord>), Failure> {
    let loaded = app.load(spec).await?;
    app.register(spec, &loaded.digest, None).await?;
    let run = app
        .store
        .insert_run(&NewRun {
            id: new_run_id(),
            job: spec.name.clone(),
            instance: instance.to_string(),
            tenant: spec.tenant.clone(),
            origin: Origin::Manual,
            payload,
            cursor: None,
            component_digest: Some(loaded.digest.clone()),
            scheduled_for: None,
            rerun_of: None,
            delay_ms: 0,
            trace_parent: Some(crate::rules::trace::TraceParent::start()),
        })
        .await?;
    // `host run` stops at Ctrl-C like any foreground command; nothing cancels an attempt.
    let (_never, cancel) = tokio::sync::watch::channel(false);
    let mut delay = Duration::ZERO;
    loop {
        tokio::time::sleep(delay).await;
        let Some(claimed) = app.runner.claim_one(&run.id, spec, &loaded.digest).await? else {
            // Another host took it (or it ended): wait for it to end.
            if finished(&app.store, &run.id).await? {
                break;
            }
            delay = Duration::from_millis(200);
            continue;
        };
        match app
            .runner
            .step(claimed, spec, &loaded, cancel.clone())
            .await?
        {
            // It sleeps until its children ended: they run under `host serve` or
            // `host drive`, which then run its next pass.
            Step::Requeued { delay: next } if next >= crate::runs::runner::CHILDREN_WAIT => break,
            Step::Requeued { delay: next } => {
                let now = app.store.get_run(&run.id).await?;
                // It sleeps until a signal comes: as for children, its next pass is left
                // to `host serve` or `host drive`, which a `host run` run never reaches.
                if now.as_ref().is_some_and(|r| r.waiting_signal().is_some()) {
                    break;
                }
                delay = next;
                if let Some(progress) = progress
                    && let Some(now) = &now
                {
                    progress.pass(now);
                }
            }
            Step::GivenBack => delay = Duration::ZERO,
            Step::Finished { .. } | Step::Skipped | Step::Abandoned => break,
        }
    }
    app.runner.flush().await;
    crate::runs::controls::write_recorded_cancels_here(&app.store).await;
    let record = app
        .store
        .get_run(&run.id)
        .await?
        .expect("the run we inserted exists");
    let attempts = app.store.list_attempts(&run.id, attempts).await?;
    Ok((record, attempts))
}

/// Registers the manifest's jobs that `spec` may start (`grants.jobs`), so the runs its
/// pass queues have their job: they run under `host serve` or `host drive`.
async fn register_startable(
    app: &App,
    spec: &JobSpec,
    manifest: Option<&Manifest>,
) -> Result<(), Failure> {
    let Some(manifest) = manifest else {
        return Ok(());
    };
    for name in spec.grants.startable_jobs() {
        if let Some(started) = manifest.job(name).filter(|s| s.name != spec.name) {
            let loaded = app.load(started).await?;
            app.register(started, &loaded.digest, None).await?;
        }
    }
    Ok(())
}

async fn finished(store: &Store, id: &str) -> Result<bool, Failure> {
    Ok(store
        .get_run(id)
        .await?
        .and_then(|r| r.status())
        .is_some_and(RunStatus::is_terminal))
}

fn resolve_spec(args: &RunArgs, manifest: Option<&Manifest>) -> Result<JobSpec, Failure> {
    let mut spec = match (&args.manifest_job, manifest) {
        (Some(name), Some(manifest)) => manifest.job(name).cloned().ok_or_else(|| {
            Failure::usage(format!(
                "unknown job {name:?} in {}; {}",
                manifest.path.display(),
                crate::rules::job::known_jobs(manifest.jobs.iter().map(|j| j.name.as_str()))
            ))
        })?,
        _ => {
            let path = args.job.clone().expect("clap requires --job without JOB");
            JobSpec {
                name: match &args.name {
                    Some(name) => name.clone(),
                    None => name_from_path(&path)?,
                },
                tenant: crate::rules::tenant::OPERATOR_TENANT.into(),
                component: path,
                limits: Limits::default(),
                retry: RetryPolicy::default(),
                grants: Grants::default(),
                actions: Default::default(),
                schedule: None,
                payload: serde_json::json!({}),
                per_tenant: false,
                on: Default::default(),
                on_where: Default::default(),
                run_on_boot: false,
                flow: Default::default(),
                lane: crate::rules::job::DEFAULT_LANE.into(),
                recorder: Default::default(),
                deliver: Default::default(),
            }
        }
    };
    if let Some(path) = &args.job {
        spec.component = path.clone();
    }
    if let Some(t) = args.timeout {
        spec.limits.timeout = t;
    }
    if let Some(r) = args.retries {
        spec.retry.retries = r;
    }
    if let Some(b) = args.backoff {
        spec.retry.backoff_base = b;
    }
    if let Some(f) = args.fuel {
        spec.limits.fuel = Some(f);
    }
    if let Some(m) = args.memory {
        spec.limits.memory = m;
    }
    for flag in &args.grants {
        spec.grants.add_flag(flag)?;
    }
    for mount in spec.grants.links.iter().flatten() {
        if !manifest.is_some_and(|m| m.mounts.contains_key(mount)) {
            return Err(Failure::usage(format!(
                "the link {mount:?} is not declared: declare it in a manifest ([links.{mount}]) and pass --manifest"
            )));
        }
    }
    spec.validate()?;
    Ok(spec)
}

/// The collections of an ad-hoc run: the manifest's, and every other one the job was
/// granted, under the host's home.
fn run_collections(
    spec: &JobSpec,
    manifest: Option<&Manifest>,
) -> BTreeMap<String, CollectionSpec> {
    let mut collections = manifest.map(|m| m.collections.clone()).unwrap_or_default();
    for name in spec.grants.files.iter().flat_map(|f| f.collections()) {
        collections
            .entry(name.to_string())
            .or_insert_with(CollectionSpec::in_home);
    }
    collections
}

fn name_from_path(path: &Path) -> Result<String, Failure> {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().to_ascii_lowercase().replace(' ', "-"))
        .unwrap_or_default();
    job::validate_name(&stem).map_err(|_| {
        Failure::usage(format!(
            "cannot name the job after {}: pass --name",
            path.display()
        ))
    })?;
    Ok(stem)
}

pub(super) fn read_payload(text: &str) -> Result<String, Failure> {
    match text.strip_prefix('@') {
        Some(file) => std::fs::read_to_string(file)
            .map_err(|e| Failure::usage(format!("cannot read payload file {file}: {e}"))),
        None => Ok(text.to_string()),
    }
}

pub async fn migrate(
    global: &Global,
    migrations: Option<PathBuf>,
    manifest: Option<PathBuf>,
) -> Result<u8, Failure> {
    let manifest = manifest.as_deref().map(Manifest::load).transpose()?;
    let store =
        Store::open(&global.db_url(manifest.as_ref().and_then(|m| m.host.db.as_deref()))).await?;
    let dir = migrations.or_else(|| manifest.and_then(|m| m.host.migrations));
    let applied = match dir {
        Some(dir) => store.migrate_operator(&dir).await?,
        None => Vec::new(),
    };
    store.close().await;
    if applied.is_empty() {
        println!("migrations are up to date");
    } else {
        for name in applied {
            println!("applied {name}");
        }
    }
    Ok(0)
}
