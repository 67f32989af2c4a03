//! The serve benchmarks' settings: the fixed sizes, names and goals, and what the
//! environment chooses (`JOBHOST_BENCH_*`, read once at the start).

use std::time::Duration;

/// The one job every host serves (and graphile-worker's one task).
pub const JOB: &str = "noop";
/// Workers per host, and graphile-worker's concurrency per process, in batch mode (and for
/// the kicks).
pub const BATCH_WORKERS: usize = 4;
/// The same in backlog mode and the curve.
pub const BACKLOG_WORKERS: usize = 24;
/// How often a drain checks for work left, for every system.
pub const CHECK_EVERY: Duration = Duration::from_millis(5);
/// Batch-mode runs are inserted due this far ahead: never, for the benchmark.
pub const PARKED_MS: i64 = 24 * 60 * 60 * 1000;
/// On SQLite a batch becomes due this far ahead: beyond the host's 1 s poll, so the host
/// has looked at the queue once more and waits for exactly that instant.
pub const SQLITE_DUE_AHEAD_MS: i64 = 1_500;
/// The untimed drain before a backlog variant's timed ones has at most this many runs.
pub const WARM_UP_RUNS: usize = 1_000;
/// Backlogs above this are drained one time fewer (they take minutes on Postgres).
pub const LONG_DRAIN: usize = 50_000;
/// Kicks before the measured ones.
pub const KICK_WARM_UP: usize = 10;
/// The pause between two looks at a kicked run's status.
pub const KICK_POLL: Duration = Duration::from_micros(100);
/// Nothing should come near these.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(600);
pub const START_TIMEOUT: Duration = Duration::from_secs(120);
/// The goals printed beside the results.
pub const SQLITE_GOAL_RUNS_PER_S: f64 = 10_000.0;
pub const POSTGRES_KICK_GOAL_MS: f64 = 5.0;
pub const SQLITE_KICK_GOAL_MS: f64 = 1.0;

/// The fan-out's parent job (the `family` guest), the one of its untimed warm-up, and
/// their children's job.
pub const FANOUT_PARENT: &str = "family";
pub const FANOUT_WARM_UP_JOB: &str = "family-warm-up";
pub const FANOUT_CHILD: &str = "family-child";
/// Children of the untimed fan-out before the timed ones.
pub const FANOUT_WARM_UP: usize = 100;

/// What the environment chose (`JOBHOST_BENCH_*`, see the doc at the top of serve.rs).
pub struct Settings {
    pub quick: bool,
    pub parts: Vec<String>,
    pub batch: usize,
    pub samples: usize,
    pub backlog: usize,
    pub curve: Vec<usize>,
    pub reps: usize,
    pub kicks: usize,
    /// The fan-out's children.
    pub fanout: usize,
}

impl Settings {
    pub fn from_env() -> Settings {
        let quick = std::env::var("JOBHOST_BENCH_QUICK").is_ok_and(|v| v == "1");
        let number = |name: &str, default: usize| match std::env::var(name) {
            Ok(v) => v
                .parse()
                .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
            Err(_) => default,
        };
        let samples = number("JOBHOST_BENCH_SAMPLES", if quick { 10 } else { 20 });
        assert!(
            samples >= 10,
            "JOBHOST_BENCH_SAMPLES must be at least 10 (criterion's minimum)"
        );
        let reps = number("JOBHOST_BENCH_REPS", if quick { 1 } else { 3 });
        let curve = match std::env::var("JOBHOST_BENCH_CURVE") {
            Ok(v) => v
                .split(',')
                .map(|n| {
                    n.trim()
                        .parse()
                        .unwrap_or_else(|_| panic!("JOBHOST_BENCH_CURVE: {n:?} is not a number"))
                })
                .collect(),
            Err(_) if quick => vec![200, 2_000],
            Err(_) => vec![200, 10_000, 100_000],
        };
        assert!(reps >= 1, "JOBHOST_BENCH_REPS must be at least 1");
        let parts: Vec<String> = std::env::var("JOBHOST_BENCH_PARTS")
            .unwrap_or_else(|_| "batch,latency,backlog,curve,trips,floor,fanout,limits".to_string())
            .split(',')
            .map(|p| p.trim().to_string())
            .collect();
        for part in &parts {
            assert!(
                [
                    "batch", "latency", "backlog", "curve", "trips", "floor", "fanout", "limits"
                ]
                .contains(&part.as_str()),
                "JOBHOST_BENCH_PARTS: unknown part {part:?}"
            );
        }
        Settings {
            quick,
            parts,
            batch: if quick { 50 } else { 200 },
            samples,
            backlog: if quick { 2_000 } else { 20_000 },
            curve,
            reps,
            kicks: if quick { 50 } else { 300 },
            fanout: if quick { 1_000 } else { 10_000 },
        }
    }

    pub fn runs(&self, part: &str) -> bool {
        self.parts.iter().any(|p| p == part)
    }
}
