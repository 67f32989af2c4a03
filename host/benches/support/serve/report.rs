//! What the serve benchmarks measure, the record that collects it while they run, and the
//! summary printed from it at the end.

use crate::counting_proxy::Counted;
use crate::floor::{FLOOR_BATCH, FLOOR_RUNS, FloorDrains};
use crate::postgres;
use crate::settings::{
    BACKLOG_WORKERS, BATCH_WORKERS, KICK_POLL, KICK_WARM_UP, POSTGRES_KICK_GOAL_MS,
    SQLITE_GOAL_RUNS_PER_S, SQLITE_KICK_GOAL_MS, Settings,
};
use crate::stats::{Stats, fmt_duration, median, percentile, times};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

/// Where the numbers were taken, for the summary.
pub struct Context {
    pub server: String,
    pub load_before: String,
}

/// The Postgres server's version and the settings that matter to a drain.
pub async fn describe_postgres() -> String {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&postgres::admin_url())
        .await
        .expect("connect to Postgres (set JOBHOST_TEST_POSTGRES)");
    let (version, autovacuum, synchronous_commit): (String, String, String) = sqlx::query_as(
        "SELECT current_setting('server_version'), current_setting('autovacuum'), \
         current_setting('synchronous_commit')",
    )
    .fetch_one(&mut conn)
    .await
    .expect("read the server's settings");
    let _ = conn.close().await;
    format!("Postgres {version} (autovacuum {autovacuum}, synchronous_commit {synchronous_commit})")
}

/// The 1, 5 and 15 minute load averages: other work on the machine skews every number.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Db {
    Postgres,
    Sqlite,
}

impl fmt::Display for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Db::Postgres => "postgres",
            Db::Sqlite => "sqlite",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum System {
    JobhostPostgres,
    JobhostSqlite,
    Graphile,
    GraphileBatched,
}

/// A system and how many processes of it run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Variant {
    pub system: System,
    pub procs: usize,
}

impl Variant {
    /// The variants in the order of the summary.
    pub const ALL: [Variant; 7] = [
        Variant::of(System::JobhostPostgres, 1),
        Variant::of(System::JobhostPostgres, 3),
        Variant::of(System::Graphile, 1),
        Variant::of(System::Graphile, 3),
        Variant::of(System::GraphileBatched, 1),
        Variant::of(System::GraphileBatched, 3),
        Variant::of(System::JobhostSqlite, 1),
    ];

    pub const fn of(system: System, procs: usize) -> Variant {
        Variant { system, procs }
    }

    pub fn label(self) -> &'static str {
        match self.system {
            System::JobhostPostgres => "jobhost postgres",
            System::JobhostSqlite => "jobhost sqlite",
            System::Graphile => "graphile-worker",
            System::GraphileBatched => "graphile-worker batched",
        }
    }

    /// Criterion's name for it.
    pub fn id(self) -> String {
        let system = match self.system {
            System::JobhostPostgres => "jobhost_postgres",
            System::JobhostSqlite => "jobhost_sqlite",
            System::Graphile => "graphile",
            System::GraphileBatched => "graphile_batched",
        };
        let unit = match self.system {
            System::JobhostPostgres | System::JobhostSqlite => "host",
            System::Graphile | System::GraphileBatched => "worker",
        };
        let plural = if self.procs == 1 { "" } else { "s" };
        format!("{system}_{}_{unit}{plural}", self.procs)
    }
}

/// How a backlog was queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Shape {
    /// As kicks queue runs: time-ordered (v7-like) ids, one a millisecond.
    Kicked,
    /// One kick's row copied by a plain `INSERT`: random (v4) ids, one due and creation
    /// time for all.
    Inserted,
}

impl Shape {
    pub const ALL: [Shape; 2] = [Shape::Kicked, Shape::Inserted];
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Shape::Kicked => "kicked",
            Shape::Inserted => "inserted",
        })
    }
}

/// What the job of a limits drain declares: nothing, a job-wide `concurrency` below the
/// host's workers (so it binds), or `key_concurrency = 1` over [`LIMIT_KEYS`] keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Limit {
    None,
    Concurrency,
    KeyConcurrency,
    /// `rate = "20/s"`: not a cost drain (`Limit::ALL`), the rate's accuracy
    /// (`Jobhost::drain_rated`).
    Rate,
}

/// The keys the backlog of a `key_concurrency` drain is spread over.
pub const LIMIT_KEYS: usize = 1_000;

/// The job-wide `concurrency` of a limits drain: half the host's workers.
pub const LIMIT_CONCURRENCY: usize = 12;

/// The rate of the rate drain, starts a second, and how long it is measured: the issue's
/// goal is this rate within 5 % over a minute.
pub const RATE_PER_S: usize = 20;
pub const RATE_MEASURED: std::time::Duration = std::time::Duration::from_secs(60);

impl Limit {
    pub const ALL: [Limit; 3] = [Limit::None, Limit::Concurrency, Limit::KeyConcurrency];

    /// The job's manifest lines.
    pub fn manifest_lines(self) -> String {
        match self {
            Limit::None => String::new(),
            Limit::Concurrency => format!("concurrency = {LIMIT_CONCURRENCY}\n"),
            Limit::KeyConcurrency => "key = \"/k\"\nkey_concurrency = 1\n".to_string(),
            Limit::Rate => format!("rate = \"{RATE_PER_S}/s\"\n"),
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&match self {
            Limit::None => "none".to_string(),
            Limit::Concurrency => format!("concurrency={LIMIT_CONCURRENCY}"),
            Limit::KeyConcurrency => format!("key_concurrency=1/{LIMIT_KEYS}keys"),
            Limit::Rate => format!("rate={RATE_PER_S}/s"),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    Batch(Variant),
    Backlog(Variant),
    Curve(Db, Shape, usize),
    Limits(Db, Limit),
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Batch(v) => write!(f, "batch/{}", v.id()),
            Key::Backlog(v) => write!(f, "backlog/{}", v.id()),
            Key::Curve(db, shape, runs) => write!(f, "curve/{db}/{shape}/{runs}"),
            Key::Limits(db, limit) => write!(f, "limits/{db}/{limit}"),
        }
    }
}

/// One drain.
#[derive(Clone, Copy)]
pub struct Drain {
    pub runs: usize,
    pub elapsed: Duration,
    /// CPU time of the system's processes (the window: the doc at the top of serve.rs).
    pub cpu: Duration,
    /// CPU time of the Postgres server's processes over the same window (backlog drains
    /// on Postgres).
    pub db_cpu: Option<Duration>,
    /// The largest peak RSS of a process, in KiB (backlog drains).
    pub peak_rss_kib: Option<u64>,
    /// From spawning the processes to the first claim (backlog drains).
    pub to_first_claim: Option<Duration>,
}

/// One kick: from sending it to its answer and to seeing its run claimed, and the run's
/// own `started_at - created_at`.
pub struct Kick {
    pub answered: Duration,
    pub client: Duration,
    pub db_ms: i64,
}

pub struct Trips {
    pub runs: usize,
    pub start_up: Counted,
    pub drain: Counted,
    pub elapsed: Duration,
}

/// One fan-out: a parent, its children, and the parent's resume.
pub struct Fanout {
    pub children: usize,
    /// From just before the parent is queued to its resume's start.
    pub resumed: Duration,
    /// The parent's first pass (jobhost) or task (graphile-worker), which queues the
    /// children.
    pub enqueued: Duration,
    /// From the last child's end to the resume's start.
    pub last_to_resume: Option<Duration>,
    /// CPU time of the process, from queueing the parent to seeing the resume.
    pub cpu: Duration,
    /// CPU time of the Postgres server's processes over the same window.
    pub db_cpu: Duration,
}

/// A rate drain: the starts of a job with `rate = "RATE_PER_S/s"` over its first
/// `RATE_MEASURED`, as its claims entered them in the rate's window (the database's clock
/// at the claim) and as its runs show them (`started_at`, when each guest started).
#[derive(Debug, Clone, Copy)]
pub struct RateDrain {
    pub claimed: RateFigures,
    pub started: RateFigures,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct RateFigures {
    /// Starts within `RATE_MEASURED` of the first.
    pub starts: usize,
    /// Those a second.
    pub per_s: f64,
    /// The most in any one second (`[t, t + 1 s)`, `t` a start).
    pub most_in_1s: usize,
}

impl RateFigures {
    /// The figures of `times` (ms, the database's clock, sorted).
    pub fn of(times: &[i64]) -> RateFigures {
        let Some(&first) = times.first() else {
            return RateFigures::default();
        };
        let measured = RATE_MEASURED.as_millis() as i64;
        let within: Vec<i64> = times
            .iter()
            .copied()
            .take_while(|&t| t < first + measured)
            .collect();
        let mut most = 0;
        let mut end = 0;
        for (i, &t) in within.iter().enumerate() {
            while end < within.len() && within[end] < t + 1_000 {
                end += 1;
            }
            most = most.max(end - i);
        }
        RateFigures {
            starts: within.len(),
            per_s: within.len() as f64 / RATE_MEASURED.as_secs_f64(),
            most_in_1s: most,
        }
    }

    pub fn line(&self) -> String {
        format!(
            "{} starts, {:.2}/s ({:+.1} %), at most {} in any second",
            self.starts,
            self.per_s,
            (self.per_s / RATE_PER_S as f64 - 1.0) * 100.0,
            self.most_in_1s
        )
    }
}

/// Everything measured, for the summary.
#[derive(Default)]
pub struct Record {
    pub drains: Mutex<BTreeMap<Key, Vec<Drain>>>,
    pub kicks: Mutex<BTreeMap<Db, Vec<Kick>>>,
    pub trips: Mutex<Option<Trips>>,
    pub floor: Mutex<Vec<FloorDrains>>,
    pub fanouts: Mutex<BTreeMap<System, Vec<Fanout>>>,
    /// The rate drains, by backend.
    pub rated: Mutex<BTreeMap<Db, RateDrain>>,
    /// What runs now (a criterion benchmark, a backlog drain...), for the log lines.
    pub phase: Mutex<String>,
    /// WARN and ERROR lines of the processes' logs, by system: how many in each phase, and
    /// the first few distinct ones (numbers aside), with their phase.
    pub logs: Mutex<BTreeMap<&'static str, Logged>>,
}

#[derive(Default)]
pub struct Logged {
    pub by_phase: BTreeMap<String, usize>,
    /// Phase and line.
    pub first: Vec<(String, String)>,
}

impl Record {
    pub fn drain(&self, key: Key, drain: Drain) {
        self.drains
            .lock()
            .unwrap()
            .entry(key)
            .or_default()
            .push(drain);
    }

    pub fn enter(&self, phase: impl fmt::Display) {
        *self.phase.lock().unwrap() = phase.to_string();
    }

    pub fn log_lines(&self, system: &'static str, lines: Vec<String>) {
        let phase = self.phase.lock().unwrap().clone();
        let mut logs = self.logs.lock().unwrap();
        let logged = logs.entry(system).or_default();
        if !lines.is_empty() {
            *logged.by_phase.entry(phase.clone()).or_default() += lines.len();
        }
        let shape = |line: &str| line.replace(|c: char| c.is_ascii_digit(), "#");
        for line in lines {
            if logged.first.len() < 5 && !logged.first.iter().any(|(_, l)| shape(l) == shape(&line))
            {
                logged.first.push((phase.clone(), line));
            }
        }
    }

    /// The summary of the last `keep` drains of `key` (batch mode's first is criterion's
    /// warm-up).
    pub fn stats(&self, key: Key, keep: usize) -> Option<Stats> {
        let drains = self.drains.lock().unwrap();
        let all = drains.get(&key)?;
        Stats::of(&all[all.len().saturating_sub(keep)..])
    }

    pub fn print_summary(&self, s: &Settings, context: &Context) {
        println!();
        println!(
            "==== serve benchmarks: summary ({} run) ====",
            if s.quick { "quick" } else { "full" }
        );
        println!(
            "{} cores; {}; load average before {}, after {}",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            context.server,
            context.load_before,
            load_average()
        );
        if s.runs("batch") {
            self.print_mode(s, "batch");
        }
        if s.runs("backlog") {
            self.print_mode(s, "backlog");
        }
        if s.runs("latency") {
            self.print_latency(s);
        }
        if s.runs("curve") {
            self.print_curve(s);
        }
        if s.runs("limits") {
            self.print_limits(s);
        }
        if let Some(trips) = &*self.trips.lock().unwrap() {
            print_trips(trips);
        }
        self.print_floor();
        if s.runs("fanout") {
            self.print_fanout(s);
        }
        self.print_logs();
    }

    pub fn print_mode(&self, s: &Settings, mode: &str) {
        let batch = mode == "batch";
        println!();
        if batch {
            println!(
                "batch: {} runs made due at once to idle, listening processes ({BATCH_WORKERS} \
                 workers / concurrency {BATCH_WORKERS} each); clock: from the return of the \
                 statement that queues them to the first check that finds none left; n: \
                 criterion samples",
                s.batch
            );
        } else {
            println!(
                "backlog: {} runs queued before the processes start ({BACKLOG_WORKERS} workers \
                 / concurrency {BACKLOG_WORKERS} each); clock: from the first claim to the first \
                 check that finds none left; 'to 1st': spawn to first claim, not clocked",
                s.backlog
            );
        }
        println!(
            "{:<24} {:>5} {}  comparison",
            "system",
            "procs",
            Stats::HEADER
        );
        let keep = if batch { s.samples } else { s.reps };
        let key = |v: Variant| {
            if batch {
                Key::Batch(v)
            } else {
                Key::Backlog(v)
            }
        };
        let rate = |system: System, procs: usize| {
            self.stats(key(Variant::of(system, procs)), keep)
                .map(|st| st.runs_per_s)
        };
        for v in Variant::ALL {
            let Some(st) = self.stats(key(v), keep) else {
                println!("{:<24} {:>5} (not run)", v.label(), v.procs);
                continue;
            };
            let comparison = match v.system {
                System::JobhostPostgres => format!(
                    "{} graphile, {} graphile batched",
                    times(Some(st.runs_per_s), rate(System::Graphile, v.procs)),
                    times(Some(st.runs_per_s), rate(System::GraphileBatched, v.procs)),
                ),
                System::JobhostSqlite => format!(
                    "{} the goal of {SQLITE_GOAL_RUNS_PER_S:.0} runs/s",
                    times(Some(st.runs_per_s), Some(SQLITE_GOAL_RUNS_PER_S))
                ),
                System::Graphile | System::GraphileBatched => String::new(),
            };
            println!(
                "{:<24} {:>5} {}  {comparison}",
                v.label(),
                v.procs,
                st.columns()
            );
        }
        println!(
            "CPU: user + system time of the system's own processes (hosts or node workers, \
             not Postgres) per run; DB: the Postgres server's processes, spawn to done \
             (backlog drains); RSS: largest peak of one process"
        );
    }

    pub fn print_latency(&self, s: &Settings) {
        println!();
        println!(
            "kick -> start: {} sequential kicks over the host's HTTP API (1 host, \
             {BATCH_WORKERS} workers), after {KICK_WARM_UP} warm-up kicks",
            s.kicks
        );
        println!(
            "{:<9} {:>11} {:>11} {:>16} {:>11} {:>7} {:>7}",
            "backend", "client p50", "client p99", "goal p50", "answer p50", "db p50", "db p99"
        );
        let kicks = self.kicks.lock().unwrap();
        for db in [Db::Sqlite, Db::Postgres] {
            let Some(kicks) = kicks.get(&db).filter(|k| !k.is_empty()) else {
                println!("{db:<9} (not run)");
                continue;
            };
            let sorted = |values: Vec<f64>| {
                let mut values = values;
                values.sort_by(f64::total_cmp);
                values
            };
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            let client = sorted(kicks.iter().map(|k| ms(k.client)).collect());
            let answered = sorted(kicks.iter().map(|k| ms(k.answered)).collect());
            let db_ms = sorted(kicks.iter().map(|k| k.db_ms as f64).collect());
            let goal = match db {
                Db::Postgres => POSTGRES_KICK_GOAL_MS,
                Db::Sqlite => SQLITE_KICK_GOAL_MS,
            };
            let p50 = percentile(&client, 0.50);
            let verdict = if p50 <= goal { "met" } else { "missed" };
            println!(
                "{db:<9} {:>8.3} ms {:>8.3} ms {:>16} {:>8.3} ms {:>4.0} ms {:>4.0} ms",
                p50,
                percentile(&client, 0.99),
                format!("<= {goal:.0} ms: {verdict}"),
                percentile(&answered, 0.50),
                percentile(&db_ms, 0.50),
                percentile(&db_ms, 0.99),
            );
        }
        println!(
            "client: from sending the kick until this process first sees the run no longer \
             queued (one query every {} µs); answer: until the kick's HTTP answer; db: \
             started_at - created_at, whole ms",
            KICK_POLL.as_micros()
        );
    }

    /// The backlog drain under each claim limit, and its cost per run (the processes' CPU
    /// and, on Postgres, the server's) against the unlimited drain's.
    pub fn print_limits(&self, s: &Settings) {
        println!();
        println!(
            "claim limits: jobhost, 1 host, {BACKLOG_WORKERS} workers, {} runs queued \
             before it starts; clock as in backlog mode",
            s.backlog
        );
        println!("{:<9} {:<27} {} x none", "backend", "limit", Stats::HEADER);
        for db in [Db::Postgres, Db::Sqlite] {
            let none = self.stats(Key::Limits(db, Limit::None), s.reps);
            for limit in Limit::ALL {
                let Some(st) = self.stats(Key::Limits(db, limit), s.reps) else {
                    println!("{db:<9} {limit:<27} (not run)");
                    continue;
                };
                let cost = |st: &Stats| st.cpu_us_per_run + st.db_cpu_us_per_run.unwrap_or(0.0);
                let ratio = none
                    .as_ref()
                    .map_or("-".to_string(), |n| format!("{:.2}", cost(&st) / cost(n)));
                println!("{db:<9} {limit:<27} {} {ratio:>6}", st.columns());
            }
        }
        println!(
            "x none: CPU per run of the host and the database server against the unlimited \
             drain's (the goal: at most 1.2)"
        );
        let rated = self.rated.lock().unwrap();
        if !rated.is_empty() {
            println!(
                "rate = \"{RATE_PER_S}/s\" over {} s of a backlog (the goal: {RATE_PER_S}/s \
                 within 5 %, never more than {RATE_PER_S} in a second):",
                RATE_MEASURED.as_secs()
            );
        }
        for (db, drain) in rated.iter() {
            println!("{db:<9} claimed: {}", drain.claimed.line());
            println!("{db:<9} started: {}", drain.started.line());
        }
    }

    pub fn print_curve(&self, s: &Settings) {
        println!();
        println!(
            "backlog curve: jobhost, 1 host, {BACKLOG_WORKERS} workers, the backlog queued \
             before it starts; clock as in backlog mode"
        );
        println!(
            "{:<9} {:<8} {:>8} {}",
            "backend",
            "queued",
            "backlog",
            Stats::HEADER
        );
        for db in [Db::Postgres, Db::Sqlite] {
            for shape in Shape::ALL {
                for &runs in &s.curve {
                    let Some(st) = self.stats(Key::Curve(db, shape, runs), s.reps) else {
                        println!("{db:<9} {shape:<8} {runs:>8} (not run)");
                        continue;
                    };
                    println!("{db:<9} {shape:<8} {runs:>8} {}", st.columns());
                }
            }
        }
        println!(
            "queued: kicked, time-ordered ids a millisecond apart; inserted, one kick's row \
             copied by a plain INSERT (random v4 ids, one due time)"
        );
    }

    pub fn print_logs(&self) {
        println!();
        for (system, logged) in self.logs.lock().unwrap().iter() {
            if logged.by_phase.is_empty() {
                println!("{system} logs: no WARN or ERROR line");
                continue;
            }
            let phases: Vec<String> = logged
                .by_phase
                .iter()
                .map(|(phase, n)| format!("{n} in {phase}"))
                .collect();
            println!(
                "{system} logs: WARN/ERROR lines: {}; the first distinct ones:",
                phases.join(", ")
            );
            for (phase, line) in &logged.first {
                println!("  [{phase}] {line}");
            }
        }
    }

    pub fn print_fanout(&self, s: &Settings) {
        println!();
        println!(
            "fan-out: one parent queues {} children and waits for them; 1 process \
             ({BACKLOG_WORKERS} workers / concurrency {BACKLOG_WORKERS}), Postgres; clock: from \
             queueing the parent (jobhost: the kick's request; graphile-worker: add_job) to its \
             resume starting; medians",
            s.fanout
        );
        println!(
            "{:<24} {:>3} {:>11} {:>10} {:>11} {:>11} {:>10} {:>9}  comparison",
            "system",
            "n",
            "to resume",
            "children/s",
            "enqueue",
            "last->res.",
            "CPU µs/ch.",
            "DB µs/ch."
        );
        let fanouts = self.fanouts.lock().unwrap();
        let summary = |system: System| {
            let all = fanouts.get(&system).filter(|f| !f.is_empty())?;
            let median_ms = |f: &dyn Fn(&Fanout) -> Option<Duration>| -> Option<Duration> {
                let values: Vec<f64> = all.iter().filter_map(f).map(|d| d.as_secs_f64()).collect();
                (!values.is_empty()).then(|| Duration::from_secs_f64(median(values)))
            };
            let children: usize = all.iter().map(|f| f.children).sum();
            let per_child = |d: Duration| d.as_secs_f64() * 1e6 / children as f64;
            let resumed = median_ms(&|f| Some(f.resumed)).expect("a fan-out");
            Some((
                all.len(),
                resumed,
                all[0].children as f64 / resumed.as_secs_f64(),
                median_ms(&|f| Some(f.enqueued)).expect("a fan-out"),
                median_ms(&|f| f.last_to_resume),
                per_child(all.iter().map(|f| f.cpu).sum()),
                per_child(all.iter().map(|f| f.db_cpu).sum()),
            ))
        };
        let graphile_rate = summary(System::Graphile).map(|row| row.2);
        for (system, label) in [
            (System::JobhostPostgres, "jobhost postgres"),
            (System::Graphile, "graphile-worker"),
        ] {
            let Some((n, resumed, rate, enqueued, last, cpu, db)) = summary(system) else {
                println!("{label:<24} (not run)");
                continue;
            };
            let comparison = match system {
                System::JobhostPostgres => {
                    format!("{} graphile", times(Some(rate), graphile_rate))
                }
                _ => String::new(),
            };
            println!(
                "{label:<24} {n:>3} {:>11} {rate:>10.0} {:>11} {:>11} {cpu:>10.1} {db:>9.1}  \
                 {comparison}",
                fmt_duration(resumed),
                fmt_duration(enqueued),
                last.map_or("-".to_string(), fmt_duration),
            );
        }
        println!(
            "enqueue (not clocked): jobhost, the parent's first pass (start, the children in \
             enqueue_all calls of 1000, the wait); graphile-worker, the parent task (counter row and \
             one add_jobs, one transaction). last->res.: from the last child's end to the \
             resume (jobhost: the family sweep wakes the parent, every 250 ms; \
             graphile-worker: the last child adds it). CPU: the process's, DB: the Postgres \
             server's, from queueing the parent to seeing the resume, per child"
        );
    }

    /// The floor's table, and the backlog drains' database CPU beside it when they ran.
    pub fn print_floor(&self) {
        let floor = self.floor.lock().unwrap();
        if floor.is_empty() {
            return;
        }
        println!(
            "floor: the Postgres server's CPU per run with no process running ({FLOOR_RUNS} runs \
             in SQL, batches of {FLOOR_BATCH}, a commit per claim and per ending; medians)"
        );
        println!("workload     µs/run   runs/s  what");
        for FloorDrains { workload, drains } in floor.iter() {
            let mut us: Vec<f64> = drains.iter().map(|d| d.0).collect();
            let mut rate: Vec<f64> = drains.iter().map(|d| d.1).collect();
            us.sort_by(f64::total_cmp);
            rate.sort_by(f64::total_cmp);
            println!(
                "{:<10} {:>8.1} {:>8.0}  {}",
                workload.name,
                percentile(&us, 0.5),
                percentile(&rate, 0.5),
                workload.what
            );
        }
        for variant in [
            Variant::of(System::JobhostPostgres, 1),
            Variant::of(System::GraphileBatched, 1),
        ] {
            if let Some(db) = self
                .stats(Key::Backlog(variant), usize::MAX)
                .and_then(|s| s.db_cpu_us_per_run)
            {
                println!(
                    "beside it, the backlog drain of {} (1 process): {db:.1} µs/run",
                    variant.label()
                );
            }
        }
    }
}

pub fn print_trips(trips: &Trips) {
    let per_run = |n: u64| n as f64 / trips.runs as f64;
    let drain = trips.drain;
    println!();
    println!(
        "postgres round trips: 1 host, {BACKLOG_WORKERS} workers, a {}-run backlog, through a \
         counting proxy (that drain took {}, slowed by the proxy)",
        trips.runs,
        fmt_duration(trips.elapsed)
    );
    println!(
        "  drain (listening -> done): {} simple queries + {} syncs = {:.2} round trips per run, \
         over {} new connections",
        drain.queries,
        drain.syncs,
        per_run(drain.queries + drain.syncs),
        drain.connections
    );
    println!(
        "  start-up (spawn -> listening): {} simple queries + {} syncs, {} connections",
        trips.start_up.queries, trips.start_up.syncs, trips.start_up.connections
    );
}
