//! `host test [DIR|FILE]`: runs an author's cases (`tests.toml` beside the job's
//! `jobhost.toml`), each on a throwaway database of its own — SQLite in a temporary home,
//! or with `--db postgres://…` a fresh database on that server — through the same runner,
//! grants and fence as `host run`, several at once. A case is sealed: its collections
//! live in its temporary home and its mounts point at its own server of canned
//! responses, so no case reads the operator's storage or calls a real service.
//!
//! Exit codes: 0 every case passed, 1 a case failed, 2 the cases file, the manifest or
//! the component is not valid.

use super::failure::Failure;
use super::global::{AttemptArgs, Global};
use super::run::{open_app, run_to_end};
use crate::authoring::test_cases::files::{self as case_files, Found};
use crate::authoring::test_cases::links::CannedServer;
use crate::authoring::test_cases::{self, Case, Mismatch, Observed};
use crate::rules::guest_text::for_terminal;
use crate::rules::units::{readable_count, readable_size};
use crate::sandbox::files::{Location, Uploader};
use crate::sandbox::journal::replay::Verdict;
use crate::service::manifest::Manifest;
use crate::store::LeaseRequest;
use crate::store::guest::Fence;
use crate::store::scratch::ScratchDatabase;
use crate::store::{AttemptRecord, RunRecord};
use clap::Args;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// Cases run at once.
const AT_ONCE: usize = 4;
/// Lines of a failing case's attempt log shown.
const LOG_LINES: usize = 20;
/// Most attempts of a case's run shown (its last ones).
const ATTEMPTS_SHOWN: i64 = 20;

#[derive(Args, Debug)]
pub struct TestArgs {
    /// The job project (its `tests.toml` and `jobhost.toml`), or a cases file.
    #[arg(default_value = ".")]
    pub path: PathBuf,
    /// The manifest (default: `jobhost.toml` beside the cases file).
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    /// Only the cases whose name contains this.
    #[arg(long)]
    pub only: Option<String>,
    #[command(flatten)]
    pub attempts: AttemptArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Run the cases again each time the cases file, the manifest or a component changes.
    #[arg(long)]
    pub watch: bool,
}

/// One case's outcome.
struct Outcome {
    name: String,
    run: Option<RunRecord>,
    fuel: Option<i64>,
    peak_memory: Option<i64>,
    duration_ms: u128,
    log: String,
    /// The run's last attempts, in order.
    attempts: Vec<AttemptRecord>,
    mismatches: Vec<Mismatch>,
    /// The case could not be run at all (its seed failed, say).
    problem: Option<String>,
}

impl Outcome {
    fn passed(&self) -> bool {
        self.problem.is_none() && self.mismatches.is_empty()
    }
}

pub async fn test(global: &Global, args: TestArgs) -> Result<u8, Failure> {
    if !args.watch {
        return test_once(global, &args).await;
    }
    let (cases_path, manifest_path) = paths(&args);
    loop {
        let mut watched = vec![cases_path.clone(), manifest_path.clone()];
        if let Ok(manifest) = Manifest::load(&manifest_path) {
            watched.extend(manifest.jobs.iter().map(|j| j.component.clone()));
        }
        // Taken before the run: a change made while it runs starts the next one.
        let before = super::watch::stamps(&watched);
        if let Err(failure) = test_once(global, &args).await {
            eprintln!("error: {}", failure.message);
        }
        super::watch::waiting(&watched);
        super::watch::until_changed(&watched, before).await;
    }
}

/// The cases file and the manifest `args` name.
fn paths(args: &TestArgs) -> (PathBuf, PathBuf) {
    let cases_path = if args.path.is_dir() {
        args.path.join("tests.toml")
    } else {
        args.path.clone()
    };
    let manifest_path = args.manifest.clone().unwrap_or_else(|| {
        cases_path
            .parent()
            .unwrap_or(Path::new("."))
            .join("jobhost.toml")
    });
    (cases_path, manifest_path)
}

async fn test_once(global: &Global, args: &TestArgs) -> Result<u8, Failure> {
    let (cases_path, manifest_path) = paths(args);
    let text = std::fs::read_to_string(&cases_path).map_err(|e| {
        Failure::usage(format!(
            "cannot read the cases in {}: {e}",
            cases_path.display()
        ))
    })?;
    let mut cases = test_cases::parse(&text)
        .map_err(|e| Failure::usage(format!("{}: {e}", cases_path.display())))?;
    if let Some(only) = &args.only {
        cases.retain(|c| c.name.contains(only.as_str()));
    }
    let manifest = Arc::new(Manifest::load(&manifest_path)?);
    // The global `--db` (or `JOBHOST_DB`) names the backend: a Postgres server gets a
    // fresh database per case (its user must be allowed to create databases); anything
    // else, a throwaway SQLite file per case. The database named is never written.
    let postgres = global
        .db
        .clone()
        .filter(|url| url.starts_with("postgres://") || url.starts_with("postgresql://"));
    // Each case's spec is checked before any runs: a case naming no job of the
    // manifest is the file's mistake, not a failed case.
    let mut specs = Vec::new();
    for case in &cases {
        let mut spec = spec_of(&manifest, case)?;
        case.limits
            .apply(&mut spec)
            .map_err(|e| Failure::usage(format!("case {:?}: {e}", case.name)))?;
        if let Some(grants) = &case.grants {
            spec.grants = grants.clone();
        }
        let mounts = case.links.keys().chain(case.expect.requests.keys());
        if let Some(mount) = mounts
            .into_iter()
            .find(|m| !manifest.mounts.contains_key(*m))
        {
            return Err(Failure::usage(format!(
                "case {:?}: the manifest declares no mount {mount:?} (add [links.{mount}])",
                case.name
            )));
        }
        specs.push(spec);
    }
    let dir = cases_path.parent().unwrap_or(Path::new(".")).to_path_buf();
    let limit = Arc::new(tokio::sync::Semaphore::new(AT_ONCE));
    let mut running = tokio::task::JoinSet::new();
    for (index, (case, spec)) in cases.into_iter().zip(specs).enumerate() {
        let (global, manifest, limit) = (global.clone(), manifest.clone(), limit.clone());
        let (db, attempts, dir) = (postgres.clone(), args.attempts, dir.clone());
        running.spawn(async move {
            let _turn = limit.acquire_owned().await.expect("never closed");
            let given = Given {
                manifest: &manifest,
                case: &case,
                dir: &dir,
                postgres: db.as_deref(),
                attempts,
            };
            let outcome = run_case(&global, given, spec).await;
            (index, outcome)
        });
    }
    let mut outcomes = Vec::new();
    while let Some(done) = running.join_next().await {
        outcomes.push(done.map_err(|_| Failure::usage("a case's task failed"))?);
    }
    outcomes.sort_by_key(|(index, _)| *index);
    let outcomes: Vec<Outcome> = outcomes.into_iter().map(|(_, o)| o).collect();
    if args.json {
        print_json(&outcomes);
    } else {
        print_table(&outcomes);
    }
    Ok(if outcomes.iter().all(Outcome::passed) {
        0
    } else {
        1
    })
}

fn spec_of(manifest: &Manifest, case: &Case) -> Result<crate::rules::job::JobSpec, Failure> {
    let name = match &case.job {
        Some(name) => name.clone(),
        None => match &manifest.jobs[..] {
            [only] => only.name.clone(),
            _ => {
                return Err(Failure::usage(format!(
                    "case {:?}: the manifest has several jobs: say which with `job = \"…\"`",
                    case.name
                )));
            }
        },
    };
    manifest.job(&name).cloned().ok_or_else(|| {
        Failure::usage(format!(
            "case {:?}: no job {name:?} in {}; {}",
            case.name,
            manifest.path.display(),
            crate::rules::job::known_jobs(manifest.jobs.iter().map(|j| j.name.as_str()))
        ))
    })
}

/// What a case runs with.
struct Given<'a> {
    manifest: &'a Manifest,
    case: &'a Case,
    /// The cases file's directory: a case's paths are relative to it.
    dir: &'a Path,
    postgres: Option<&'a str>,
    attempts: AttemptArgs,
}

/// The manifest as a case sees it: every collection in the case's home, every mount
/// served by the case's server with no credential of the operator's (a signed attempt
/// token is kept: it holds no secret).
fn sealed(manifest: &Manifest, server: Option<&CannedServer>) -> Manifest {
    let mut sealed = manifest.clone();
    for collection in sealed.collections.values_mut() {
        collection.location = Location::Home;
    }
    for (name, mount) in sealed.mounts.iter_mut() {
        if let Some(server) = server {
            mount.url = server.url_of(name);
        }
        if matches!(
            mount.credential,
            Some(crate::sandbox::links::Credential::Secret { .. })
        ) {
            mount.credential = None;
        }
    }
    sealed
}

async fn run_case(global: &Global, given: Given<'_>, spec: crate::rules::job::JobSpec) -> Outcome {
    let Given {
        manifest,
        case,
        dir,
        postgres,
        attempts,
    } = given;
    let started = Instant::now();
    let mut outcome = Outcome {
        name: case.name.clone(),
        run: None,
        fuel: None,
        peak_memory: None,
        duration_ms: 0,
        log: String::new(),
        attempts: Vec::new(),
        mismatches: Vec::new(),
        problem: None,
    };
    if let Some(journal) = &case.journal {
        replay_case(global, case, &dir.join(journal), &spec, &mut outcome).await;
        outcome.duration_ms = started.elapsed().as_millis();
        return outcome;
    }
    let home = match tempfile::tempdir() {
        Ok(home) => home,
        Err(e) => {
            outcome.problem = Some(format!("cannot make a temporary home: {e}"));
            return outcome;
        }
    };
    let database = match postgres {
        Some(url) => match ScratchDatabase::create(url).await {
            Ok(database) => Some(database),
            Err(problem) => {
                outcome.problem = Some(problem);
                return outcome;
            }
        },
        None => None,
    };
    let server = if manifest.mounts.is_empty() {
        None
    } else {
        match CannedServer::start(case.links.clone()).await {
            Ok(server) => Some(server),
            Err(e) => {
                outcome.problem = Some(format!("cannot start the canned links server: {e}"));
                return outcome;
            }
        }
    };
    let manifest = &sealed(manifest, server.as_ref());
    let db_url = database.as_ref().map_or_else(
        || format!("sqlite://{}", home.path().join("jobhost.db").display()),
        |d| d.url.clone(),
    );
    // A home of its own, the compile cache shared: each component compiles once.
    let mut case_global = global.clone();
    case_global.cache = Some(global.cache_dir());
    case_global.home = home.path().to_path_buf();
    let result = async {
        let migrations = match &case.migrations {
            Some(own) => Some(dir.join(own)),
            None => manifest.host.migrations.clone(),
        };
        let app = open_app(
            &case_global,
            db_url,
            migrations,
            &spec,
            Some(manifest),
            attempts,
        )
        .await
        .map_err(|f| f.message)?;
        for statement in &case.seed {
            app.store
                .run_script(statement)
                .await
                .map_err(|e| format!("the seed statement {statement:?} failed: {e}"))?;
        }
        place_files(&app, case, dir, &spec.tenant).await?;
        let payload = case
            .payload_json()
            .unwrap_or_else(|| spec.payload.to_string());
        let payload = crate::rules::job::validate_payload(&payload).map_err(|e| e.to_string())?;
        let (run, last) = run_to_end(&app, &spec, payload, "default", None, ATTEMPTS_SHOWN)
            .await
            .map_err(|f| f.message)?;
        let mut rows = BTreeMap::new();
        for query in case.expect.rows.keys() {
            let cells = app.store.select_cells(query).await;
            rows.insert(query.clone(), cells.map_err(|e| e.to_string()));
        }
        let files = found_files(&app, case, &run.tenant).await;
        app.store.close().await;
        Ok::<_, String>((run, last, rows, files))
    }
    .await;
    match result {
        Ok((run, last, rows, files)) => {
            let log = last.last().map(|a| a.log.clone()).unwrap_or_default();
            let requests = server.as_ref().map(|s| s.recorded()).unwrap_or_default();
            outcome.mismatches = test_cases::check(
                &case.expect,
                &Observed {
                    run: &run,
                    log: &log,
                    rows: &rows,
                    files: &files,
                    requests: &requests,
                },
            );
            outcome.fuel = last.last().and_then(|a| a.fuel_used);
            outcome.peak_memory = last.last().and_then(|a| a.peak_memory);
            outcome.log = log;
            outcome.attempts = last;
            outcome.run = Some(run);
        }
        Err(problem) => outcome.problem = Some(problem),
    }
    if let Some(database) = database {
        database.drop().await;
    }
    outcome.duration_ms = started.elapsed().as_millis();
    outcome
}

/// A journal case: the job's component replayed against the journal, held against the
/// case's `expect` as a run would be (its status, code, error and log), and failed if its
/// calls diverge from the journal's.
async fn replay_case(
    global: &Global,
    case: &Case,
    path: &Path,
    spec: &crate::rules::job::JobSpec,
    outcome: &mut Outcome,
) {
    let result = async {
        let journal = super::replay::read_journal(path).map_err(|f| f.message)?;
        let engine = crate::sandbox::engine::Engine::new(&crate::sandbox::engine::EngineSettings {
            cache_dir: Some(global.cache_dir()),
            compiler: Some(global.compiler().map_err(|f| f.message)?),
            ..crate::sandbox::engine::EngineSettings::default()
        })
        .map_err(|e| e.to_string())?;
        let loaded = engine
            .load(&spec.component, &crate::rules::grants::Grants::everything())
            .map_err(|e| e.to_string())?;
        let replayed = engine
            .replay(&loaded, &journal, true)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>((journal, replayed))
    }
    .await;
    let (journal, replayed) = match result {
        Ok(done) => done,
        Err(problem) => {
            outcome.problem = Some(problem);
            return;
        }
    };
    let run = RunRecord {
        id: journal.run_id.clone(),
        job: journal.job.clone(),
        status: replayed.status.to_string(),
        last_code: replayed.code.map(str::to_string),
        last_error: replayed.message.clone(),
        attempts: 1,
        pass: journal.context.pass.into(),
        ..RunRecord::default()
    };
    let none = BTreeMap::new();
    outcome.mismatches = test_cases::check(
        &case.expect,
        &Observed {
            run: &run,
            log: &replayed.log,
            rows: &none,
            files: &BTreeMap::new(),
            requests: &BTreeMap::new(),
        },
    );
    if case.expect.past_failure {
        if !matches!(replayed.verdict, Some(Verdict::GetsPast { .. })) {
            outcome.mismatches.push(Mismatch {
                what: "replay".into(),
                expected: "gets past the call where the recorded attempt failed".into(),
                actual: replayed.verdict.as_ref().map_or_else(
                    || "the recorded attempt did not fail".to_string(),
                    ToString::to_string,
                ),
            });
        }
    } else if let Some(stop) = &replayed.stopped {
        outcome.mismatches.push(Mismatch {
            what: "replay".into(),
            expected: "the component ends against the journal's answers".into(),
            actual: stop.to_string(),
        });
    }
    outcome.fuel = Some(i64::try_from(replayed.fuel_used).unwrap_or(i64::MAX));
    outcome.log = replayed.log;
    outcome.run = Some(run);
}

/// Places the case's objects, each attached under a lease of `host test`'s own as an
/// attempt's would be.
async fn place_files(
    app: &crate::service::app::App,
    case: &Case,
    dir: &Path,
    tenant: &str,
) -> Result<(), String> {
    if case.files.is_empty() {
        return Ok(());
    }
    const HOLD_MS: i64 = 60_000;
    let lease = app
        .store
        .acquire_lease(&LeaseRequest {
            job: "host-test",
            instance: "files",
            holder: "host-test",
            deadline_ms: HOLD_MS,
            expires_ms: HOLD_MS,
        })
        .await
        .map_err(|e| format!("cannot take a lease to place the case's files: {e}"))?
        .ok_or("the lease to place the case's files is held elsewhere")?;
    let fence = Fence {
        job: lease.job,
        instance: lease.instance,
        generation: lease.generation,
        holder: lease.holder,
    };
    let who = Uploader {
        tenant: tenant.to_string(),
        run_id: "host-test".into(),
        attach_by: lease.deadline_at,
    };
    for (key, placed) in &case.files {
        let (collection, name) = case_files::split(key)?;
        let bytes = placed
            .bytes(dir)
            .map_err(|e| format!("files.{key:?}: {e}"))?;
        let placed = app
            .files
            .place(&fence, &who, collection, name, &bytes)
            .await
            .map_err(|e| format!("cannot place {key:?}: {e}"))?;
        if placed.is_none() {
            return Err("the lease to place the case's files was lost".into());
        }
    }
    Ok(())
}

/// Each object the case expects, as the run left it.
async fn found_files(
    app: &crate::service::app::App,
    case: &Case,
    tenant: &str,
) -> BTreeMap<String, Result<Option<Found>, String>> {
    let mut found = BTreeMap::new();
    for key in case.expect.files.keys() {
        let (collection, name) = case_files::split(key).expect("checked when parsed");
        found.insert(key.clone(), read_found(app, tenant, collection, name).await);
    }
    found
}

async fn read_found(
    app: &crate::service::app::App,
    tenant: &str,
    collection: &str,
    name: &str,
) -> Result<Option<Found>, String> {
    let Some(file) = app
        .files
        .stat(tenant, collection, name)
        .await
        .map_err(|e| e.to_string())?
    else {
        return Ok(None);
    };
    let size = u64::try_from(file.size).unwrap_or(0);
    let mut head = Vec::new();
    let wanted = size.min(case_files::MAX_COMPARED);
    while (head.len() as u64) < wanted {
        let chunk = app
            .files
            .read(
                tenant,
                collection,
                name,
                head.len() as u64,
                wanted - head.len() as u64,
            )
            .await
            .map_err(|e| e.to_string())?;
        if chunk.is_empty() {
            break;
        }
        head.extend_from_slice(&chunk);
    }
    Ok(Some(Found {
        size,
        sha256: file.digest,
        head,
    }))
}

fn print_table(outcomes: &[Outcome]) {
    let width = outcomes
        .iter()
        .map(|o| o.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    println!(
        "{:width$}  {:6}  {:>8}  {:<16}  {:>9}  {:>8}  {:>11}",
        "case", "result", "attempts", "code", "time", "fuel", "peak memory"
    );
    for o in outcomes {
        let run = o.run.as_ref();
        println!(
            "{:width$}  {:6}  {:>8}  {:<16}  {:>9}  {:>8}  {:>11}",
            for_terminal(&o.name),
            if o.passed() { "pass" } else { "FAIL" },
            run.map_or("-".into(), |r| r.attempts.to_string()),
            run.and_then(|r| r.last_code.clone())
                .unwrap_or_else(|| "-".into()),
            crate::rules::units::readable_ms(u64::try_from(o.duration_ms).unwrap_or(u64::MAX)),
            o.fuel
                .map_or("-".into(), |f| readable_count(f.max(0) as u64)),
            o.peak_memory
                .map_or("-".into(), |m| readable_size(m.max(0) as u64)),
        );
    }
    for o in outcomes.iter().filter(|o| o.attempts.len() > 1) {
        println!("\ncase {:?}, attempt by attempt:", for_terminal(&o.name));
        print_attempts(&o.attempts);
    }
    for o in outcomes.iter().filter(|o| !o.passed()) {
        println!("\ncase {:?} failed:", for_terminal(&o.name));
        if let Some(problem) = &o.problem {
            println!("  {}", for_terminal(problem));
        }
        // A value of several lines (an error and its backtrace) stays under its label.
        let under = |text: &str| for_terminal(text).replace('\n', "\n              ");
        for m in &o.mismatches {
            println!("  {}", for_terminal(&m.what));
            println!("    expected: {}", under(&m.expected));
            println!("    actual:   {}", under(&m.actual));
        }
        // Once: a mismatch of the error already showed it whole.
        let error_shown = o.mismatches.iter().any(|m| m.what == "error contains");
        if let Some(error) = o.run.as_ref().and_then(|r| r.last_error.as_deref())
            && !error_shown
        {
            println!("  the run's error: {}", for_terminal(error));
        }
        let lines: Vec<&str> = o.log.lines().collect();
        if !lines.is_empty() {
            println!("  its last attempt's log:");
            let skipped = lines.len().saturating_sub(LOG_LINES);
            if skipped > 0 {
                println!("    | ({skipped} earlier lines)");
            }
            for line in &lines[skipped..] {
                println!("    | {}", for_terminal(line));
            }
        }
    }
    let passed = outcomes.iter().filter(|o| o.passed()).count();
    println!("\n{passed} of {} cases passed", outcomes.len());
}

/// One line per attempt: its number, pass, how it ended, its time.
fn print_attempts(attempts: &[AttemptRecord]) {
    for a in attempts {
        println!(
            "  attempt {} (pass {}): {}{} in {}",
            a.attempt,
            a.pass,
            a.status,
            a.code
                .as_deref()
                .map(|c| format!(" ({c})"))
                .unwrap_or_default(),
            crate::rules::units::readable_ms(a.duration_ms.unwrap_or(0).max(0) as u64),
        );
    }
}

fn print_json(outcomes: &[Outcome]) {
    let cases: Vec<Value> = outcomes
        .iter()
        .map(|o| {
            json!({
                "name": o.name,
                "passed": o.passed(),
                "status": o.run.as_ref().map(|r| r.status.clone()),
                "code": o.run.as_ref().and_then(|r| r.last_code.clone()),
                "attempts": o.run.as_ref().map(|r| r.attempts),
                "attempt_records": o.attempts.iter().map(|a| json!({
                    "attempt": a.attempt,
                    "pass": a.pass,
                    "status": a.status,
                    "code": a.code,
                    "duration_ms": a.duration_ms,
                })).collect::<Vec<_>>(),
                "duration_ms": o.duration_ms,
                "fuel": o.fuel,
                "peak_memory": o.peak_memory,
                "mismatches": o.mismatches,
                "problem": o.problem,
            })
        })
        .collect();
    let passed = outcomes.iter().filter(|o| o.passed()).count();
    println!(
        "{}",
        json!({"cases": cases, "passed": passed, "failed": outcomes.len() - passed})
    );
}
