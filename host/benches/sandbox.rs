//! Benchmarks of the sandbox's fixed costs: what one call into a guest costs, what
//! metering a guest's compute costs, what loading a component costs, what one whole
//! attempt costs once the store is involved, and what fencing a guest's write with its
//! lease adds over a plain SQL write.
//!
//! Run with `cargo bench -p jobhost --bench sandbox` (append `-- --quick` for a fast
//! check, or a group's name to run only that group). The groups:
//!
//! - `instantiate`: a fresh store, the noop component instantiated and its handler called
//!   (`on-demand`, `pooling`), and instantiation alone, not called (`alone/on-demand`,
//!   `alone/pooling`), with each instance allocator.
//! - `compute`: a bounded compute-bound guest call (`spin`, and its Python and JavaScript
//!   twins `examples/{python,js}/spin`, looping a fixed number of times) with the epoch
//!   deadline and fuel metering each on or off, on the same component and host linker, in
//!   CPU time of the guest's thread (`compute/<rust|python|js>/<setting>`): `epochs+fuel`
//!   against `fuel-only` (and `epochs-only` against `unmetered`) shows the epoch
//!   deadline's overhead, against `epochs-only` fuel metering's.
//! - `load`: loading the noop component into an engine that has not loaded it yet, by
//!   compiling it (`compile`) or from the on-disk compile cache (`compile-cache`, a second
//!   `host run`), and from the engine's own map of loaded components (`in-memory`).
//! - `attempt`: one run end to end on SQLite (insert, claim, lease, attempt, ending), with
//!   the flight recorder off (`…/unrecorded`: `recorder.policy = off`, no journal), on as by
//!   default (`…/recorded`: every host call journaled in memory, the journal dropped when
//!   the attempt succeeds) and keeping every attempt's journal (`…/kept`: `always`, one
//!   more write per attempt): `recorded` against `unrecorded` is what the recorder costs
//!   every run; `kept` what persisting a journal adds. For the noop guest (`on-demand`) and
//!   for one fenced write from the guest (`ledger-1-row`); `pooling/recorded`, the noop
//!   guest with the pooling allocator, as jobs run by default.
//! - `db_write`: one guest write transaction fenced by the lease (`fenced`) against the same
//!   write through a plain sqlx pool (`sqlx-direct`); the same write made as a guest makes
//!   it, through the `db` capability's host calls (begin, execute, commit) on a fresh
//!   attempt's state, unjournaled (`fenced-capability`) and journaled
//!   (`fenced-capability-recorded`): the pair is the recorder's cost per call, without the
//!   sandbox around it; and, through the `steps` capability as a guest calls it, a step hit
//!   (`step-hit`: an attempt's first `start` finds the recorded result — one read of the
//!   ledger) and a step miss (`step-miss`: `start`, then `record` in a fenced transaction of
//!   its own), each in a fresh attempt's state.
//!
//! - `journal`: the recorder's own work, with no I/O to blur it: the three calls the ledger
//!   guest journals (`ledger-calls`), and a query answering 100 rows of three columns
//!   (`query-100-rows`), each through a journal recording and through one that is off.
//!
//! The recorder's goal is at most 5 % over the figures without it: compare
//! `attempt/*/recorded` with `attempt/*/unrecorded`, and `db_write/fenced-capability-recorded`
//! with `db_write/fenced-capability`. The ledger guest journals three calls (`db.begin`,
//! `db.transaction.execute`, `db.transaction.commit`), the noop guest none: its pair shows
//! only noise. And noise is large here: every statement is a hand-off to the connection's
//! thread, so a write's time is bimodal, and on a small shared machine a variant's median
//! moves by 10 % and more from one run to the next. Judge 5 % from several runs in
//! alternating order, each variant alone (`-- '^db_write/fenced-capability$'`, then
//! `-- '^db_write/fenced-capability-recorded$'`, and again the other way round).
//!
//! Last, with no filter or the filter `languages` (`cargo bench -p jobhost --bench sandbox
//! -- languages` runs it alone), the benchmark prints the three languages side by side as
//! a markdown table, each figure the median of several measurements
//! ([`print_languages_table`]): component size, first compile on 1 thread and on every
//! core, cached load, instantiate, a no-op attempt and a 1 000-row fenced write end to end
//! on SQLite, and the compute loop unmetered and as the host meters a job by default.
//! `JOBHOST_BENCH_QUICK=1` measures each figure at most three times (about two minutes on
//! 2 cores, most of it the first compiles); the whole benchmark takes about fifteen.
//!
//! The `noop`, `ledger` and `spin` guests are taken from the workspace's target directory
//! (`target/wasm32-wasip2/guest/`), and built there first if they are missing; the Python
//! and JavaScript examples (`examples/{python,js}/{spin,ledger}`) by `host build`'s own
//! code, with the build tools `scripts/test` installs in the target directory
//! (`polyglot-tools`) unless `JOBHOST_COMPONENTIZE_PY` / `JOBHOST_JS_TOOLS` name others.
//! Compiled components are kept in `target/bench-component-cache`.

#[path = "support/guests.rs"]
mod guests;
#[path = "support/languages.rs"]
mod languages;

use criterion::{BatchSize, Criterion, SamplingMode};
use jobhost::authoring::languages::Lang;
use jobhost::rules::failure::FailureCode;
use jobhost::rules::grants::{DbGrant, Grants};
use jobhost::rules::job::{JobSpec, Limits, RetryPolicy};
use jobhost::runs::runner::{RunnerSettings, Step};
use jobhost::sandbox::capability::Capabilities;
use jobhost::sandbox::capability::db::{DbCapability, DbSession};
use jobhost::sandbox::capability::steps::{StepsCapability, StepsSession};
use jobhost::sandbox::engine::attempt::{
    AttemptReport, AttemptSpec, CancelToken, Outcome, PassContext, StopToken,
};
use jobhost::sandbox::engine::bindings::jobhost::job::db::{
    Host as DbHost, HostTransaction as DbTransaction, Value,
};
use jobhost::sandbox::engine::bindings::jobhost::job::steps::Host as StepsHost;
use jobhost::sandbox::engine::compiler::{self, CompileLimits, Compiler};
use jobhost::sandbox::engine::output::AttemptLog;
use jobhost::sandbox::engine::state::GuestState;
use jobhost::sandbox::engine::{Engine, EngineSettings, Loaded, MAX_LOG_BYTES};
use jobhost::sandbox::journal::{Journal, RecordPolicy, Recorder};
use jobhost::service::app::{App, AppConfig};
use jobhost::store::guest::{Access, Fence, GuestDb, SqlValue};
use jobhost::store::new_run_id;
use jobhost::store::{LeaseRequest, NewRun, Origin, RunStatus, Store};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tempfile::TempDir;
use tokio::runtime::Runtime;
use tokio::time::Instant;
use wasmtime::component::Resource;

/// The write the `db_write` variants make (and the ledger guest makes once per attempt).
const INSERT_LEDGER: &str = "INSERT INTO ledger (run_id, attempt, n) VALUES ($1, $2, $3)";
/// Far beyond any benchmark's length: nothing is measured against a deadline.
const GENEROUS: Duration = Duration::from_secs(30);
/// How long a fenced write transaction may stay open (the runner's default bound).
const TXN_BOUND: Duration = Duration::from_secs(5);
/// The `compute` group's work: loop iterations of the Rust `spin` guest per call (tens of
/// milliseconds, so an attempt's fixed costs are noise beside it).
const SPIN_ITERATIONS: u64 = 20_000_000;

fn main() {
    languages::use_shared_tools();
    let guests = match Guests::locate_or_build() {
        Ok(guests) => guests,
        Err(message) => {
            eprintln!("sandbox benchmarks: {message}");
            std::process::exit(1);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("start the tokio runtime");
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();

    bench_instantiate(&mut c, &rt, &guests);
    bench_compute(&mut c, &rt, &guests);
    bench_load(&mut c, &guests);
    bench_attempt(&mut c, &rt, &guests);
    bench_db_write(&mut c, &rt);
    bench_journal(&mut c);

    c.final_summary();
    if table_wanted() {
        print_languages_table(&rt, &guests);
    }
}

// ---- guests -------------------------------------------------------------------------

/// The compiled guests the benchmarks run.
struct Guests {
    noop: PathBuf,
    ledger: PathBuf,
    /// Rust, Python and JavaScript, side by side.
    languages: Vec<Language>,
}

/// One language's guests: the same compute loop and the same ledger writer in each.
struct Language {
    name: &'static str,
    /// `spin`'s twin: `{"iterations": n}` loops `n` times; `0` is a no-op attempt.
    spin: PathBuf,
    /// `ledger`'s twin: `{"rows": n}` writes `n` rows in one fenced transaction.
    ledger: PathBuf,
    /// The compute loop's iterations per call: tens of milliseconds in each language
    /// (an interpreter's iteration is a hundred times a compiled one's).
    iterations: u64,
}

impl Guests {
    fn locate_or_build() -> Result<Guests, String> {
        let mut found = guests::locate_or_build(&["noop", "ledger", "spin"])?.into_iter();
        let noop = found.next().expect("one path per name");
        let ledger = found.next().expect("one path per name");
        let spin = found.next().expect("one path per name");
        let languages = vec![
            Language {
                name: "Rust",
                spin,
                ledger: ledger.clone(),
                iterations: SPIN_ITERATIONS,
            },
            Language {
                name: "Python",
                spin: languages::polyglot("python/spin", Lang::Python)?,
                ledger: languages::polyglot("python/ledger", Lang::Python)?,
                iterations: 60_000,
            },
            Language {
                name: "JS",
                spin: languages::polyglot("js/spin", Lang::Js)?,
                ledger: languages::polyglot("js/ledger", Lang::Js)?,
                iterations: 300_000,
            },
        ];
        Ok(Guests {
            noop,
            ledger,
            languages,
        })
    }
}

fn operator_migrations() -> PathBuf {
    guests::workspace_dir().join("examples").join("migrations")
}

/// A cancel token nobody sets: the benchmarks never cancel an attempt. Its sender lives as
/// long as the process, as a serving host's does.
fn never_cancelled() -> CancelToken {
    static NEVER: LazyLock<tokio::sync::watch::Sender<bool>> =
        LazyLock::new(|| tokio::sync::watch::channel(false).0);
    NEVER.subscribe()
}

/// A stop token nobody sets, as [`never_cancelled`].
fn never_stopped() -> StopToken {
    static NEVER: LazyLock<tokio::sync::watch::Sender<Option<FailureCode>>> =
        LazyLock::new(|| tokio::sync::watch::channel(None).0);
    NEVER.subscribe()
}

// ---- instantiate --------------------------------------------------------------------

/// The fixed cost of every attempt, for a guest that does nothing, with each instance
/// allocator: on demand, and the pooling allocator, which reserves address space up front
/// to make exactly this cheaper (`host serve`'s default).
///
/// - `on-demand`, `pooling`: a fresh wasmtime store, instantiating the component and
///   calling its handler, as an attempt does ([`noop_call`]).
/// - `alone/on-demand`, `alone/pooling`: the instantiation alone, without the call
///   ([`instantiate_alone`]).
fn bench_instantiate(c: &mut Criterion, rt: &Runtime, guests: &Guests) {
    let mut group = c.benchmark_group("instantiate");
    for (allocator, pooling) in [("on-demand", false), ("pooling", true)] {
        let engine = Engine::new(&EngineSettings {
            pooling,
            ..EngineSettings::default()
        })
        .expect("configure the engine");
        let loaded = engine
            .load(&guests.noop, &Grants::default())
            .expect("load the noop guest");
        let report = rt.block_on(noop_call(&engine, &loaded));
        assert_eq!(
            report.result,
            Ok(Outcome::Done),
            "noop ({allocator}) failed: {report:?}"
        );
        rt.block_on(instantiate_alone(&engine, &loaded));
        group.bench_function(allocator, |b| {
            b.to_async(rt).iter(|| noop_call(&engine, &loaded));
        });
        group.bench_function(format!("alone/{allocator}"), |b| {
            b.to_async(rt).iter(|| instantiate_alone(&engine, &loaded));
        });
    }
    group.finish();
}

/// One sandbox call of the noop guest, without a database.
async fn noop_call(engine: &Engine, loaded: &Loaded) -> AttemptReport {
    guest_call(engine, loaded, "{}", Instant::now() + GENEROUS).await
}

/// The noop component instantiated in a fresh store set up as an attempt's (the engine's
/// own path, `Engine::instantiate_only`), and the store dropped: no call.
async fn instantiate_alone(engine: &Engine, loaded: &Loaded) {
    engine
        .instantiate_only(loaded, Limits::default().memory, Instant::now() + GENEROUS)
        .await
        .expect("instantiate the noop guest");
}

/// One attempt of a guest's handler with `payload`, without a database, under the
/// default limits and `deadline`.
async fn guest_call(
    engine: &Engine,
    loaded: &Loaded,
    payload: &str,
    deadline: Instant,
) -> AttemptReport {
    let limits = Limits::default();
    engine
        .run_attempt(AttemptSpec {
            loaded,
            cancel: never_cancelled(),
            stop: never_stopped(),
            context: PassContext {
                job: "bench".into(),
                run_id: "bench".into(),
                instance: "default".into(),
                tenant: "default".into(),
                attempt: 1,
                pass: 0,
                payload: payload.into(),
                cursor: None,
                counters: Vec::new(),
            },
            memory: limits.memory,
            fuel: limits.fuel,
            record: None,
            deadline,
            capabilities: Capabilities::none(),
            log: AttemptLog::new(MAX_LOG_BYTES),
            fuel_gauge: Default::default(),
        })
        .await
}

// ---- compute ------------------------------------------------------------------------

/// What metering costs a compute-bound guest, in each language: one attempt of its `spin`
/// looping [`Language::iterations`] times (a tight loop, so the worst case: a check per
/// iteration; in Python and JavaScript the interpreter's own dispatch loop, which is where
/// an interpreted job spends its attempt) ([`spin_call`]), with the same component and
/// host linker on four engines, `compute/<language>/<engine>`:
///
/// - `epochs+fuel`: epochs and fuel, as a job whose fuel is accounted runs.
/// - `fuel-only`: no epoch interruption (`Engine::without_epochs`; no deadline can stop
///   the guest, so never for jobs): against `epochs+fuel`, the epoch deadline's overhead.
/// - `epochs-only`: `EngineSettings::fuel` off: against `epochs+fuel`, fuel metering's
///   overhead.
/// - `unmetered`: neither, the floor.
///
/// On-demand allocation throughout: instantiation is the same small constant in each.
/// Measured as CPU time of the thread the guest runs on ([`thread_cpu_time`]), not wall
/// time: the comparison is of compute, and wall time on a shared machine is mostly noise
/// at this length. The engines share a compile cache in the target directory, so a second
/// run of the benchmark does not compile the Python and JavaScript guests four times again.
fn bench_compute(c: &mut Criterion, rt: &Runtime, guests: &Guests) {
    let engines = metering_engines();
    let mut group = c.benchmark_group("compute");
    // Each call takes tens of milliseconds: fewer samples of equal size, a longer
    // measurement.
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(20)
        .measurement_time(Duration::from_secs(8));
    for language in &guests.languages {
        let payload = spin_payload(language.iterations);
        for (id, engine) in &engines {
            let loaded = engine
                .load(&language.spin, &Grants::default())
                .expect("load the spin guest");
            if *id == "epochs+fuel" {
                // A guest built before `iterations` loops forever: stopped by the deadline
                // here (this engine has epochs), rather than hanging an engine without them.
                let report = rt.block_on(guest_call(
                    engine,
                    &loaded,
                    &payload,
                    Instant::now() + Duration::from_secs(10),
                ));
                if report.result != Ok(Outcome::Done) {
                    eprintln!(
                        "sandbox benchmarks: {}'s spin did not finish its bounded loop ({:?}); \
                         rebuild it (Rust: cargo build --profile guest --target wasm32-wasip2 \
                         -p spin; Python, JS: host build examples/<lang>/spin)",
                        language.name, report.result
                    );
                    std::process::exit(1);
                }
            }
            let report = rt.block_on(spin_call(engine, &loaded, &payload));
            assert_eq!(report.result, Ok(Outcome::Done), "spin ({id}): {report:?}");
            assert_eq!(report.fuel_used > 0, engine.meters_fuel(), "{report:?}");
            let name = format!("{}/{id}", language.name.to_lowercase());
            group.bench_function(name, |b| {
                b.iter_custom(|iters| {
                    rt.block_on(async {
                        let start = thread_cpu_time();
                        for _ in 0..iters {
                            spin_call(engine, &loaded, &payload).await;
                        }
                        thread_cpu_time() - start
                    })
                });
            });
        }
    }
    group.finish();
}

/// The four metering settings, each an engine of its own on one shared compile cache.
fn metering_engines() -> [(&'static str, Engine); 4] {
    let cache_dir = Some(guests::target_dir().join("bench-component-cache"));
    let metered = EngineSettings {
        cache_dir: cache_dir.clone(),
        fuel: true,
        ..EngineSettings::default()
    };
    let unfueled = EngineSettings {
        cache_dir,
        fuel: false,
        ..EngineSettings::default()
    };
    let engine = |e: Result<Engine, _>| e.expect("configure the engine");
    [
        ("epochs+fuel", engine(Engine::new(&metered))),
        ("fuel-only", engine(Engine::without_epochs(&metered))),
        ("epochs-only", engine(Engine::new(&unfueled))),
        ("unmetered", engine(Engine::without_epochs(&unfueled))),
    ]
}

/// The calling thread's CPU time. A guest runs on the thread that polls its attempt
/// (`block_on` here), epoch yields included, so this is the attempt's compute, which other
/// processes on the machine cannot inflate as they do wall time.
fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec to write to.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(status, 0, "read the thread's CPU time");
    Duration::new(
        u64::try_from(now.tv_sec).expect("a non-negative time"),
        u32::try_from(now.tv_nsec).expect("nanoseconds below a second"),
    )
}

/// The payload that bounds a `spin` to `iterations` iterations.
fn spin_payload(iterations: u64) -> String {
    format!(r#"{{"iterations": {iterations}}}"#)
}

/// One attempt of a `spin` with `payload`, then returning `done`.
async fn spin_call(engine: &Engine, loaded: &Loaded, payload: &str) -> AttemptReport {
    guest_call(engine, loaded, payload, Instant::now() + GENEROUS).await
}

// ---- load ---------------------------------------------------------------------------

/// What loading the noop component costs an engine that has not loaded it yet (read,
/// hash, compile or deserialize, check the contract, link it: `Engine::load`):
///
/// - `compile`: no compile cache: Cranelift compiles it.
/// - `compile-cache`: the on-disk compile cache holds it: a second `host run` (or a
///   restarted `host serve`) of the same component.
/// - `in-memory`: the engine loaded it before: only read and hashed (a reload or a second
///   job on the same component).
fn bench_load(c: &mut Criterion, guests: &Guests) {
    let dir = tempfile::tempdir().expect("create a temporary directory");
    let cached = Engine::new(&EngineSettings {
        cache_dir: Some(dir.path().join("cache")),
        ..EngineSettings::default()
    })
    .expect("configure the engine");
    // Compiles, and writes the cache entry every later load reads.
    cached
        .load(&guests.noop, &Grants::default())
        .expect("load the noop guest");
    let uncached = Engine::new(&EngineSettings::default()).expect("configure the engine");

    let mut group = c.benchmark_group("load");
    // A compilation takes a good part of a second: few samples of equal size, a longer
    // measurement.
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    for (id, engine) in [("compile", &uncached), ("compile-cache", &cached)] {
        group.bench_function(id, |b| {
            b.iter_batched(
                || engine.forget_loaded(),
                |()| load_noop(engine, guests),
                BatchSize::PerIteration,
            );
        });
    }
    group.bench_function("in-memory", |b| b.iter(|| load_noop(&cached, guests)));
    group.finish();
}

/// `Engine::load` of the noop component with no grants.
fn load_noop(engine: &Engine, guests: &Guests) -> Arc<Loaded> {
    engine
        .load(&guests.noop, &Grants::default())
        .expect("load the noop guest")
}

// ---- attempt ------------------------------------------------------------------------

/// A host (store, engine, runner) on its own SQLite database.
struct Host {
    app: App,
    _dir: TempDir,
}

impl Host {
    async fn open(engine: EngineSettings) -> Host {
        let dir = tempfile::tempdir().expect("create a temporary directory");
        let app = App::open(AppConfig {
            db_url: format!("sqlite://{}/bench.db", dir.path().display()),
            operator_migrations: Some(operator_migrations()),
            engine,
            runner: RunnerSettings::default(),
            home: dir.path().to_path_buf(),
            collections: Default::default(),
            mounts: Default::default(),
            key_rotation: jobhost::sandbox::links::token::ROTATE_AFTER,
        })
        .await
        .expect("open the host");
        Host { app, _dir: dir }
    }

    /// Loads and registers a job, as `host run` does before its first run.
    async fn job(&self, spec: JobSpec) -> (JobSpec, Arc<Loaded>) {
        let loaded = self.app.load(&spec).await.expect("load the guest");
        self.app
            .register(&spec, &loaded.digest, None)
            .await
            .expect("register the job");
        (spec, loaded)
    }

    /// One run from queue to finish: insert it, claim it (taking the lease, starting the
    /// attempt), run the attempt, and wait until its ending is recorded. Returns the run's
    /// id.
    async fn run_once(&self, spec: &JobSpec, loaded: &Loaded) -> String {
        let store = &self.app.store;
        let run = store
            .insert_run(&NewRun {
                id: new_run_id(),
                job: spec.name.clone(),
                instance: "default".into(),
                tenant: spec.tenant.clone(),
                origin: Origin::Manual,
                payload: spec.payload.to_string(),
                cursor: None,
                component_digest: Some(loaded.digest.clone()),
                scheduled_for: None,
                rerun_of: None,
                delay_ms: 0,
                trace_parent: None,
            })
            .await
            .expect("insert a run");
        let claimed = self
            .app
            .runner
            .claim_one(&run.id, spec, &loaded.digest)
            .await
            .expect("claim the run")
            .expect("a run just inserted is queued");
        let step = self
            .app
            .runner
            .step(claimed, spec, loaded, never_cancelled())
            .await
            .expect("step the run");
        assert!(
            matches!(
                step,
                Step::Finished {
                    status: RunStatus::Succeeded,
                    ..
                }
            ),
            "{} did not succeed: {step:?}",
            spec.name
        );
        run.id
    }
}

fn job_spec(name: &str, component: &Path, grants: Grants, payload: serde_json::Value) -> JobSpec {
    JobSpec {
        name: name.into(),
        tenant: "default".into(),
        component: component.to_path_buf(),
        limits: Limits::default(),
        retry: RetryPolicy::default(),
        grants,
        actions: Default::default(),
        schedule: None,
        payload,
        per_tenant: false,
        on: Default::default(),
        on_where: Default::default(),
        run_on_boot: false,
        flow: Default::default(),
        lane: jobhost::rules::job::DEFAULT_LANE.into(),
        recorder: Default::default(),
        deliver: Default::default(),
    }
}

/// `spec` with its attempts recording as `policy` says (the default cap).
fn recording(spec: &JobSpec, policy: RecordPolicy) -> JobSpec {
    JobSpec {
        recorder: Recorder {
            policy,
            ..Recorder::default()
        },
        ..spec.clone()
    }
}

/// What one run costs end to end on SQLite: the instantiate cost above plus the store's
/// writes around it (insert, claim, lease, attempt start and end, finish). Shows how much
/// of an attempt the sandbox is, and whether pooling still matters once the store is in
/// the path. `ledger-1-row` (on-demand) adds one fenced write from inside the guest.
///
/// And what the flight recorder costs a run, each variant named for its job's `recorder`:
///
/// - `…/unrecorded`: `off`: no journal, the host calls go straight through.
/// - `…/recorded`: `failures`, the default: every host call (capabilities, clocks,
///   random) journaled in memory; the run succeeds, so nothing is kept.
/// - `…/kept`: `always`: the same, and the journal written to the store at the attempt's
///   end.
///
/// Each variant runs on a host of its own, a fresh database, so none runs on the runs (and
/// journals) the one before it left; a check run before each asserts it keeps a journal
/// exactly when it should.
fn bench_attempt(c: &mut Criterion, rt: &Runtime, guests: &Guests) {
    let noop = job_spec(
        "noop",
        &guests.noop,
        Grants::default(),
        serde_json::json!({}),
    );
    let mut grants = Grants::default();
    grants.add_flag("db.write=ledger").expect("a valid grant");
    let ledger = job_spec(
        "ledger",
        &guests.ledger,
        grants,
        serde_json::json!({ "rows": 1 }),
    );
    let recorders = [
        ("unrecorded", RecordPolicy::Off),
        ("recorded", RecordPolicy::Failures),
        ("kept", RecordPolicy::Always),
    ];
    // (id, pooling allocator, job)
    let mut variants = Vec::new();
    for (guest, spec) in [("on-demand", &noop), ("ledger-1-row", &ledger)] {
        for (recorder, policy) in recorders {
            variants.push((
                format!("{guest}/{recorder}"),
                false,
                recording(spec, policy),
            ));
        }
    }
    variants.push((
        "pooling/recorded".to_string(),
        true,
        recording(&noop, RecordPolicy::Failures),
    ));

    let mut group = c.benchmark_group("attempt");
    // Each iteration takes milliseconds: fewer, longer samples keep the group short.
    group
        .sample_size(40)
        .measurement_time(Duration::from_secs(8));
    for (id, pooling, spec) in variants {
        let host = rt.block_on(Host::open(EngineSettings {
            pooling,
            ..EngineSettings::default()
        }));
        let (spec, loaded) = rt.block_on(host.job(spec));
        let run_id = rt.block_on(host.run_once(&spec, &loaded));
        let kept = rt
            .block_on(host.app.store.journal(&run_id, None))
            .expect("read the run's journal");
        assert_eq!(
            kept.is_some(),
            spec.recorder.policy == RecordPolicy::Always,
            "{id}: a journal kept when it should not be, or missing: {kept:?}"
        );
        group.bench_function(&id, |b| {
            b.to_async(rt).iter(|| host.run_once(&spec, &loaded));
        });
        rt.block_on(host.app.store.close());
    }
    group.finish();
}

// ---- db_write -----------------------------------------------------------------------

/// What the guest database path adds to one write: a guest transaction (authorizer and
/// progress handler installed, statement not cached, commit fenced by the lease in the
/// same transaction) against the same `BEGIN IMMEDIATE; INSERT; COMMIT` through a plain
/// sqlx pool with the store's connection settings, on the same database file.
///
/// - `fenced`: the guest transaction on `GuestDb` directly ([`fenced_write`]).
/// - `sqlx-direct`: the plain pool ([`direct_write`]).
/// - `fenced-capability`, `fenced-capability-recorded`: the same write as a guest makes
///   it, through the `db` capability's host calls — `begin`, `transaction.execute`,
///   `transaction.commit` — on an attempt's state ([`capability_write`]), with the journal
///   off and recording (the default cap). The state is a fresh one each iteration, made
///   outside the measurement, so the journal never nears its cap; both variants make it
///   the same way, so they differ only by the journal: the pair is what recording three
///   host calls costs (the arguments' summary and digest, the answer's encoding), without
///   the sandbox around it. The state is dropped inside the measurement, the journal with
///   it, as an attempt's is.
/// - `step-hit`, `step-miss`: the `steps` capability (below).
fn bench_db_write(c: &mut Criterion, rt: &Runtime) {
    let dir = tempfile::tempdir().expect("create a temporary directory");
    let url = format!("sqlite://{}/bench.db", dir.path().display());
    let (store, guest_db, access, direct) = rt.block_on(async {
        let store = Store::open(&url).await.expect("open the store");
        store
            .migrate_operator(&operator_migrations())
            .await
            .expect("apply the example migrations");
        let guest_db = GuestDb::open(&store)
            .await
            .expect("open the guest database");
        let lease = store
            .acquire_lease(&LeaseRequest {
                job: "ledger",
                instance: "default",
                holder: "bench",
                deadline_ms: 3_600_000,
                expires_ms: 3_600_000,
            })
            .await
            .expect("acquire the lease")
            .expect("a fresh database has the lease free");
        let access = Access {
            grant: Arc::new(DbGrant {
                write: ["ledger".to_string()].into(),
                ..DbGrant::default()
            }),
            fence: Fence {
                job: lease.job,
                instance: lease.instance,
                generation: lease.generation,
                holder: lease.holder,
            },
            tenant: "default".into(),
            deadline: Instant::now() + Duration::from_secs(24 * 3600),
        };
        (store, guest_db, access, direct_pool(&url).await)
    });

    let mut group = c.benchmark_group("db_write");
    let mut n = 0_i64;
    group.bench_function("fenced", |b| {
        b.to_async(rt).iter(|| {
            n += 1;
            fenced_write(&guest_db, &access, n)
        });
    });
    group.bench_function("sqlx-direct", |b| {
        b.to_async(rt).iter(|| {
            n += 1;
            direct_write(&direct, n)
        });
    });
    // An attempt's state with the `db` capability, journaled by `journal`: the same for
    // both capability variants.
    let db_state = |journal: Journal| {
        let session = DbSession {
            db: guest_db.clone(),
            access: access.clone(),
            txn_bound: TXN_BOUND,
        };
        GuestState::journaled(
            64 << 20,
            AttemptLog::new(1024),
            Capabilities {
                db: DbCapability::new(Some(session)),
                ..Capabilities::none()
            },
            journal,
            0,
        )
    };
    // Whether each capability variant's journal records (up to the default cap).
    let journal = |recording: bool| {
        if recording {
            Journal::recording(jobhost::sandbox::journal::DEFAULT_LIMIT)
        } else {
            Journal::off()
        }
    };
    for (id, recording) in [
        ("fenced-capability", false),
        ("fenced-capability-recorded", true),
    ] {
        // A check: the write goes through, and is journaled exactly when recording.
        let check = journal(recording);
        n += 1;
        rt.block_on(capability_write(db_state(check.clone()), n));
        let recorded = check.take();
        let calls: Vec<&str> = recorded.calls.iter().map(|c| c.call.as_str()).collect();
        if !recording {
            assert!(calls.is_empty(), "{id}: journaled {calls:?}");
        } else {
            assert_eq!(
                calls,
                [
                    "db.begin",
                    "db.transaction.execute",
                    "db.transaction.commit"
                ],
                "{id}"
            );
            assert!(!recorded.truncated, "{id}: journal truncated");
        }
        group.bench_function(id, |b| {
            b.to_async(rt).iter_batched(
                || {
                    n += 1;
                    (db_state(journal(recording)), n)
                },
                |(state, n)| capability_write(state, n),
                BatchSize::SmallInput,
            );
        });
    }
    let fence = access.fence.clone();
    let attempt = |pass: i64| {
        let session = StepsSession {
            store: store.clone(),
            fence: fence.clone(),
            run_id: "bench".into(),
            pass,
            counters: Default::default(),
        };
        GuestState::new(
            64 << 20,
            AttemptLog::new(1024),
            Capabilities {
                steps: StepsCapability::new(Some(session)),
                ..Capabilities::none()
            },
        )
    };
    rt.block_on(async {
        let mut recorded = attempt(0);
        let first = StepsHost::start(&mut recorded.view(|c| &mut c.steps), "page".into()).await;
        assert!(matches!(first, Ok(None)));
        StepsHost::record(
            &mut recorded.view(|c| &mut c.steps),
            "page".into(),
            r#"{"last":500,"count":500}"#.into(),
        )
        .await
        .expect("record the step every hit finds");
    });
    group.bench_function("step-hit", |b| {
        b.to_async(rt).iter_batched(
            || attempt(0),
            |mut state| async move {
                let hit = StepsHost::start(&mut state.view(|c| &mut c.steps), "page".into()).await;
                assert!(matches!(hit, Ok(Some(_))));
            },
            BatchSize::SmallInput,
        );
    });
    let mut pass = 0_i64;
    group.bench_function("step-miss", |b| {
        b.to_async(rt).iter_batched(
            || {
                pass += 1;
                attempt(pass)
            },
            |mut state| async move {
                let miss = StepsHost::start(&mut state.view(|c| &mut c.steps), "page".into()).await;
                assert!(matches!(miss, Ok(None)));
                StepsHost::record(
                    &mut state.view(|c| &mut c.steps),
                    "page".into(),
                    r#"{"last":500,"count":500}"#.into(),
                )
                .await
                .expect("record the step");
            },
            BatchSize::SmallInput,
        );
    });
    group.finish();
    rt.block_on(async {
        direct.close().await;
        store.close().await;
    });
}

/// A plain pool on the store's database, configured as the store configures its own.
async fn direct_pool(url: &str) -> sqlx::SqlitePool {
    use sqlx::sqlite::{
        SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
    };
    let options = SqliteConnectOptions::from_str(url)
        .expect("a valid SQLite URL")
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(jobhost::store::SQLITE_BUSY_TIMEOUT)
        .foreign_keys(true);
    SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .expect("open the direct pool")
}

/// One guest write transaction, as the `db` capability runs it for a guest.
async fn fenced_write(db: &GuestDb, access: &Access, n: i64) {
    let mut tx = db
        .begin(access, Instant::now() + TXN_BOUND)
        .await
        .expect("begin the guest transaction");
    let params = [
        SqlValue::Text("bench".into()),
        SqlValue::Integer(1),
        SqlValue::Integer(n),
    ];
    tx.execute(INSERT_LEDGER, &params)
        .await
        .expect("insert through the guest path");
    tx.commit().await.expect("commit under the lease");
}

/// The same write as [`fenced_write`], made as a guest makes it: through the `db`
/// capability's host calls on the attempt's `state` (journaled if its journal records),
/// which is dropped at the end, as an attempt's is.
/// Each call through the view the linker projects for it (`GuestState::view`), made per
/// call as the bindings make it.
async fn capability_write(mut state: GuestState, n: i64) {
    let tx = DbHost::begin(&mut state.view(|c| &mut c.db))
        .await
        .expect("begin the guest transaction");
    let params = vec![
        Value::Text("bench".into()),
        Value::Integer(1),
        Value::Integer(n),
    ];
    let changed = DbTransaction::execute(
        &mut state.view(|c| &mut c.db),
        Resource::new_borrow(tx.rep()),
        INSERT_LEDGER.into(),
        params,
    )
    .await
    .expect("insert through the capability");
    assert_eq!(changed, 1);
    DbTransaction::commit(&mut state.view(|c| &mut c.db), tx)
        .await
        .expect("commit under the lease");
}

/// The recorder's own work per call, as `journaled!` does it (begin: the arguments'
/// summary and digest; end: the answer encoded), against a journal that is off: the
/// figure the I/O-bound pairs above cannot resolve below their noise.
fn bench_journal(c: &mut Criterion) {
    use jobhost::sandbox::engine::bindings::jobhost::job::db::Rows;
    use jobhost::sandbox::engine::bindings::jobhost::job::types::HostError;
    use jobhost::sandbox::journal::{Begun, CodeOf};
    fn call<A, R>(journal: &Journal, name: &str, args: &A, answer: R)
    where
        A: serde::Serialize + std::fmt::Debug,
        R: serde::Serialize + CodeOf,
    {
        if let Begun::Record(pending) = journal.begin(name, args) {
            journal.end(pending, &answer, answer.code_of(), None);
        }
    }
    let sql = INSERT_LEDGER.to_string();
    let params = vec![
        Value::Text("bench".into()),
        Value::Integer(1),
        Value::Integer(7),
    ];
    let rows: Result<Rows, HostError> = Ok(Rows {
        columns: vec!["id".into(), "customer".into(), "amount".into()],
        rows: (0..100)
            .map(|n| {
                vec![
                    Value::Integer(n),
                    Value::Text(format!("customer-{n}")),
                    Value::Integer(n * 10),
                ]
            })
            .collect(),
    });
    let query = "SELECT id, customer, amount FROM invoices ORDER BY id".to_string();
    let mut group = c.benchmark_group("journal");
    for (id, recording) in [("off", false), ("recording", true)] {
        let journal = || {
            if recording {
                Journal::recording(jobhost::sandbox::journal::DEFAULT_LIMIT)
            } else {
                Journal::off()
            }
        };
        group.bench_function(format!("ledger-calls/{id}"), |b| {
            b.iter(|| {
                let journal = journal();
                call(&journal, "db.begin", &(), Ok::<(), HostError>(()));
                let args = (&sql, &params);
                call(
                    &journal,
                    "db.transaction.execute",
                    &args,
                    Ok::<u64, HostError>(1),
                );
                call(
                    &journal,
                    "db.transaction.commit",
                    &(),
                    Ok::<(), HostError>(()),
                );
                journal
            });
        });
        group.bench_function(format!("query-100-rows/{id}"), |b| {
            b.iter(|| {
                let journal = journal();
                call(
                    &journal,
                    "db.query",
                    &(&query, &Vec::<Value>::new()),
                    rows.clone(),
                );
                journal
            });
        });
    }
    group.finish();
}

/// The same write with nothing in between: the baseline for `fenced`.
async fn direct_write(pool: &sqlx::SqlitePool, n: i64) {
    let mut tx = pool
        .begin_with("BEGIN IMMEDIATE")
        .await
        .expect("begin the direct transaction");
    sqlx::query(INSERT_LEDGER)
        .bind("bench")
        .bind(1_i64)
        .bind(n)
        .execute(&mut *tx)
        .await
        .expect("insert directly");
    tx.commit().await.expect("commit directly");
}

// ---- languages ----------------------------------------------------------------------

/// Whether to print the three-language table: with no filter, or the filter `languages`.
fn table_wanted() -> bool {
    let filter = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-') && a != "bench");
    filter.is_none_or(|f| "languages".contains(f.as_str()))
}

/// How many times each figure of the table is measured (its median is shown):
/// `JOBHOST_BENCH_QUICK=1` for a check that it all works.
fn table_repeats(full: usize) -> usize {
    if std::env::var_os("JOBHOST_BENCH_QUICK").is_some() {
        full.min(3)
    } else {
        full
    }
}

/// The three languages side by side, measured after the groups above (one language after
/// the other, each figure the median of several), printed as a markdown table:
///
/// - component size: the `spin` twin's file.
/// - first compile: a fresh engine and no cache, compiled in the `host compile-component`
///   child as `host serve` compiles, on 1 thread and on every core (`--compile-threads`).
/// - cached load: from the on-disk compile cache into an engine that has not loaded it.
/// - instantiate: a fresh store, the component instantiated, nothing called (pooling).
/// - no-op attempt, 1 000-row write: a run end to end on SQLite (insert, claim, lease,
///   attempt, ending; pooling, the recorder as by default): `spin` with no iterations, and
///   the `ledger` twin writing 1 000 rows in one fenced transaction.
/// - compute: the `compute` group's loop, in CPU time, unmetered and as the host meters a
///   job by default, and the ratio of the two.
fn print_languages_table(rt: &Runtime, guests: &Guests) {
    let cache = tempfile::tempdir().expect("create a temporary directory");
    let default_metering = EngineSettings::default();
    let default_name = match default_metering.fuel {
        true => "epochs+fuel",
        false => "epochs only",
    };
    let rows = [
        "component size",
        "first compile, 1 thread",
        "first compile, all threads",
        "cached load",
        "instantiate",
        "no-op attempt",
        "1 000-row fenced write",
        "compute, unmetered",
        "compute, default metering",
        "default / unmetered",
    ];
    let mut columns = Vec::new();
    for language in &guests.languages {
        eprintln!("languages: measuring {}", language.name);
        columns.push(language_column(rt, language, cache.path()));
    }
    let threads = compiler::default_threads();
    println!();
    println!(
        "Three languages (median of each; compile on {threads} threads for `all threads`; \
         default metering: {default_name})"
    );
    println!();
    let names: Vec<&str> = guests.languages.iter().map(|l| l.name).collect();
    println!("| | {} |", names.join(" | "));
    println!("|---|{}", "---|".repeat(names.len()));
    for (i, row) in rows.iter().enumerate() {
        let cells: Vec<&str> = columns.iter().map(|c| c[i].as_str()).collect();
        println!("| {row} | {} |", cells.join(" | "));
    }
}

/// One language's figures, in the order of [`print_languages_table`]'s rows.
fn language_column(rt: &Runtime, language: &Language, cache: &Path) -> Vec<String> {
    let size = std::fs::metadata(&language.spin)
        .expect("read the component's size")
        .len();
    let compiled = |threads: usize, cache_dir: Option<PathBuf>| {
        let engine = Engine::new(&EngineSettings {
            cache_dir,
            compiler: Some(Compiler {
                program: PathBuf::from(env!("CARGO_BIN_EXE_host")),
                limits: CompileLimits::default(),
                threads,
            }),
            ..EngineSettings::default()
        })
        .expect("configure the engine");
        let start = std::time::Instant::now();
        engine
            .load(&language.spin, &Grants::default())
            .expect("compile the spin guest");
        (start.elapsed(), engine)
    };
    let (one_thread, _) = compiled(1, None);
    let dir = cache.join(language.name);
    let (all_threads, cached) = compiled(compiler::default_threads(), Some(dir));
    let cached_load = median(table_repeats(20), || {
        cached.forget_loaded();
        let start = std::time::Instant::now();
        cached
            .load(&language.spin, &Grants::default())
            .expect("load the spin guest from the cache");
        start.elapsed()
    });

    let pooled = EngineSettings {
        pooling: true,
        cache_dir: Some(guests::target_dir().join("bench-component-cache")),
        ..EngineSettings::default()
    };
    let host = rt.block_on(Host::open(pooled));
    let noop = job_spec(
        "noop",
        &language.spin,
        Grants::default(),
        serde_json::json!({ "iterations": 0 }),
    );
    let mut grants = Grants::default();
    grants.add_flag("db.write=ledger").expect("a valid grant");
    let ledger = job_spec(
        "ledger",
        &language.ledger,
        grants,
        serde_json::json!({ "rows": 1000 }),
    );
    let (noop, noop_loaded) = rt.block_on(host.job(noop));
    let (ledger, ledger_loaded) = rt.block_on(host.job(ledger));
    let engine = &host.app.engine;
    let memory = Limits::default().memory;
    let instantiate = median(table_repeats(20), || {
        let start = std::time::Instant::now();
        rt.block_on(async {
            engine
                .instantiate_only(&noop_loaded, memory, Instant::now() + GENEROUS)
                .await
                .expect("instantiate the guest");
        });
        start.elapsed()
    });
    let timed_run = |spec: &JobSpec, loaded: &Loaded| {
        let start = std::time::Instant::now();
        rt.block_on(host.run_once(spec, loaded));
        start.elapsed()
    };
    let noop_attempt = median(table_repeats(20), || timed_run(&noop, &noop_loaded));
    let write = median(table_repeats(5), || timed_run(&ledger, &ledger_loaded));
    rt.block_on(host.app.store.close());

    let unmetered = Engine::without_epochs(&EngineSettings {
        cache_dir: Some(guests::target_dir().join("bench-component-cache")),
        fuel: false,
        ..EngineSettings::default()
    })
    .expect("configure the engine");
    let default = Engine::new(&EngineSettings {
        cache_dir: Some(guests::target_dir().join("bench-component-cache")),
        ..EngineSettings::default()
    })
    .expect("configure the engine");
    let payload = spin_payload(language.iterations);
    let compute = |engine: &Engine| {
        let loaded = engine
            .load(&language.spin, &Grants::default())
            .expect("load the spin guest");
        median(table_repeats(7), || {
            rt.block_on(async {
                let start = thread_cpu_time();
                let report = spin_call(engine, &loaded, &payload).await;
                assert_eq!(report.result, Ok(Outcome::Done), "{report:?}");
                thread_cpu_time() - start
            })
        })
    };
    let floor = compute(&unmetered);
    let metered = compute(&default);
    vec![
        format!("{:.1} MiB", size as f64 / f64::from(1 << 20)),
        readable(one_thread),
        readable(all_threads),
        readable(cached_load),
        readable(instantiate),
        readable(noop_attempt),
        readable(write),
        readable(floor),
        readable(metered),
        format!("{:.2}×", metered.as_secs_f64() / floor.as_secs_f64()),
    ]
}

/// The median of `n` measurements.
fn median(n: usize, mut measure: impl FnMut() -> Duration) -> Duration {
    let mut times: Vec<Duration> = (0..n.max(1)).map(|_| measure()).collect();
    times.sort();
    times[times.len() / 2]
}

/// `d` in ms below 10 s, with the digits that mean something.
fn readable(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    match ms {
        ms if ms >= 10_000.0 => format!("{:.1} s", ms / 1000.0),
        ms if ms >= 100.0 => format!("{ms:.0} ms"),
        ms if ms >= 10.0 => format!("{ms:.1} ms"),
        ms => format!("{ms:.2} ms"),
    }
}
