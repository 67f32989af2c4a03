//! `host test [DIR|FILE]`: runs an author's cases (`tests.toml` beside the job's
//! `jobhost.toml`), each on a throwaway database of its own — SQLite in a temporary home,
//! or with `--db postgres://…` a fresh database on that server — through the same runner,
//! grants and fence as `host run`, several at once.
//!
//! Exit codes: 0 every case passed, 1 a case failed, 2 the cases file, the manifest or
//! the component is not valid.

use super::run::{open_app, run_to_end};
use super::{AttemptArgs, Failure, Global};
use crate::guest_text::for_terminal;
use crate::manifest::Manifest;
use crate::store::RunRecord;
use crate::store::scratch::ScratchDatabase;
use crate::test_cases::{self, Case, Mismatch, Observed};
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
        specs.push(spec);
    }
    let limit = Arc::new(tokio::sync::Semaphore::new(AT_ONCE));
    let mut running = tokio::task::JoinSet::new();
    for (index, (case, spec)) in cases.into_iter().zip(specs).enumerate() {
        let (global, manifest, limit) = (global.clone(), manifest.clone(), limit.clone());
        let (db, attempts) = (postgres.clone(), args.attempts);
        running.spawn(async move {
            let _turn = limit.acquire_owned().await.expect("never closed");
            let outcome = run_case(&global, &manifest, &case, spec, db.as_deref(), attempts).await;
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

fn spec_of(manifest: &Manifest, case: &Case) -> Result<crate::job::JobSpec, Failure> {
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
            "case {:?}: no job {name:?} in {}",
            case.name,
            manifest.path.display()
        ))
    })
}

async fn run_case(
    global: &Global,
    manifest: &Manifest,
    case: &Case,
    spec: crate::job::JobSpec,
    postgres: Option<&str>,
    attempts: AttemptArgs,
) -> Outcome {
    let started = Instant::now();
    let mut outcome = Outcome {
        name: case.name.clone(),
        run: None,
        fuel: None,
        peak_memory: None,
        duration_ms: 0,
        log: String::new(),
        mismatches: Vec::new(),
        problem: None,
    };
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
    let db_url = database.as_ref().map_or_else(
        || format!("sqlite://{}", home.path().join("jobhost.db").display()),
        |d| d.url.clone(),
    );
    // A home of its own, the compile cache shared: each component compiles once.
    let mut case_global = global.clone();
    case_global.cache = Some(global.cache_dir());
    case_global.home = home.path().to_path_buf();
    let result = async {
        let migrations = manifest.host.migrations.clone();
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
        let payload = case
            .payload_json()
            .unwrap_or_else(|| spec.payload.to_string());
        let payload = crate::job::validate_payload(&payload).map_err(|e| e.to_string())?;
        let (run, last) = run_to_end(&app, &spec, payload, "default")
            .await
            .map_err(|f| f.message)?;
        let mut rows = BTreeMap::new();
        for query in case.expect.rows.keys() {
            let cells = app.store.select_cells(query).await;
            rows.insert(query.clone(), cells.map_err(|e| e.to_string()));
        }
        app.store.close().await;
        Ok::<_, String>((run, last, rows))
    }
    .await;
    match result {
        Ok((run, last, rows)) => {
            let log = last.last().map(|a| a.log.clone()).unwrap_or_default();
            outcome.mismatches = test_cases::check(
                &case.expect,
                &Observed {
                    run: &run,
                    log: &log,
                    rows: &rows,
                },
            );
            outcome.fuel = last.last().and_then(|a| a.fuel_used);
            outcome.peak_memory = last.last().and_then(|a| a.peak_memory);
            outcome.log = log;
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

fn print_table(outcomes: &[Outcome]) {
    let width = outcomes
        .iter()
        .map(|o| o.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    println!(
        "{:width$}  {:6}  {:>8}  {:<16}  {:>8}  {:>12}  {:>11}",
        "case", "result", "attempts", "code", "ms", "fuel", "peak memory"
    );
    for o in outcomes {
        let run = o.run.as_ref();
        println!(
            "{:width$}  {:6}  {:>8}  {:<16}  {:>8}  {:>12}  {:>11}",
            for_terminal(&o.name),
            if o.passed() { "pass" } else { "FAIL" },
            run.map_or("-".into(), |r| r.attempts.to_string()),
            run.and_then(|r| r.last_code.clone())
                .unwrap_or_else(|| "-".into()),
            o.duration_ms,
            o.fuel.map_or("-".into(), |f| f.to_string()),
            o.peak_memory.map_or("-".into(), |m| m.to_string()),
        );
    }
    for o in outcomes.iter().filter(|o| !o.passed()) {
        println!("\ncase {:?} failed:", for_terminal(&o.name));
        if let Some(problem) = &o.problem {
            println!("  {}", for_terminal(problem));
        }
        for m in &o.mismatches {
            println!("  {}", for_terminal(&m.what));
            println!("    expected: {}", for_terminal(&m.expected));
            println!("    actual:   {}", for_terminal(&m.actual));
        }
        if let Some(error) = o.run.as_ref().and_then(|r| r.last_error.as_deref()) {
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
