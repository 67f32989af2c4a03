//! The graphile-worker driver: its database (set up by `benches/graphile/setup.js`), the
//! benchmark's connection to it, and the `node worker.js` processes that drain and fan out.

use crate::postgres::PgDatabase;
use crate::procs::{Proc, Report, postgres_cpu, total_cpu, usage_since, wait_drained};
use crate::report::{Drain, Fanout, Record};
use crate::settings::{BACKLOG_WORKERS, BATCH_WORKERS, DRAIN_TIMEOUT, START_TIMEOUT};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tempfile::TempDir;

/// `$1` no-op jobs, in the statement graphile-worker's `addJobs` runs.
pub const GRAPHILE_ADD_JOBS: &str = "SELECT COUNT(*) FROM graphile_worker.add_jobs(ARRAY(\
    SELECT json_populate_record(NULL::graphile_worker.job_spec, \
    '{\"identifier\": \"noop\", \"payload\": {}}'::json) FROM generate_series(1, $1)), false)";
pub const GRAPHILE_BUSY: &str = "SELECT EXISTS (SELECT 1 FROM graphile_worker._private_jobs)";

/// graphile-worker's fan-out parent, for `$1` children.
pub const GRAPHILE_ADD_PARENT: &str =
    "SELECT graphile_worker.add_job('parent', json_build_object('children', $1::int))";
pub const GRAPHILE_FANIN: &str = "SELECT remaining, total FROM bench_fanin WHERE id = 1";

/// graphile-worker's database, the benchmark's connection to it, and batch mode's
/// long-lived `node worker.js` processes (backlog drains start their own).
pub struct Graphile {
    pub dir: PathBuf,
    pub logs: TempDir,
    pub database: PgDatabase,
    pub pool: sqlx::PgPool,
    pub workers: Vec<Proc>,
    pub batched: bool,
}

impl Graphile {
    pub async fn start() -> Graphile {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("benches")
            .join("graphile");
        if let Err(message) = install_node_modules(&dir) {
            panic!("graphile-worker benchmarks: {message}");
        }
        let database = PgDatabase::create("jobhost_bench_").await;
        let setup = tokio::process::Command::new("node")
            .arg("setup.js")
            .current_dir(&dir)
            .env("DATABASE_URL", &database.url)
            .stderr(Stdio::inherit())
            .output()
            .await
            .expect("run node setup.js");
        assert!(
            setup.status.success(),
            "`node setup.js` failed: {}",
            setup.status
        );
        let pool = sqlx::PgPool::connect(&database.url)
            .await
            .expect("connect to graphile-worker's database");
        Graphile {
            dir,
            logs: tempfile::tempdir().expect("temp dir"),
            database,
            pool,
            workers: Vec::new(),
            batched: false,
        }
    }

    pub fn spawn_worker(&self, concurrency: usize, batched: bool) -> Proc {
        let mut command = Command::new("node");
        command
            .args(["worker.js", "--concurrency", &concurrency.to_string()])
            .current_dir(&self.dir)
            .env("DATABASE_URL", &self.database.url);
        if batched {
            command.arg("--batched");
        }
        Proc::spawn(command, "graphile-worker", self.logs.path(), |line| {
            line.strip_prefix("@bench ")
                .and_then(|json| serde_json::from_str(json).ok())
        })
    }

    /// Starts or stops batch mode's workers until `n` of the flavour run, idle and
    /// listening.
    pub async fn scale_to(&mut self, n: usize, batched: bool, record: &Record) {
        if batched != self.batched {
            for worker in self.workers.drain(..) {
                worker.stop(record).await;
            }
            self.batched = batched;
        }
        while self.workers.len() > n {
            self.workers.pop().expect("a worker").stop(record).await;
        }
        while self.workers.len() < n {
            let worker = self.spawn_worker(BATCH_WORKERS, batched);
            worker.report("ready", START_TIMEOUT).await;
            self.workers.push(worker);
        }
    }

    pub async fn busy(&self) -> bool {
        sqlx::query_scalar(GRAPHILE_BUSY)
            .fetch_one(&self.pool)
            .await
            .expect("check for jobs left")
    }

    pub async fn add_jobs(&self, count: usize) {
        let added: i64 = sqlx::query_scalar(GRAPHILE_ADD_JOBS)
            .bind(count as i64)
            .fetch_one(&self.pool)
            .await
            .expect("add the jobs");
        assert_eq!(added, count as i64);
    }

    pub async fn drain_batch(&self, batch: usize) -> Drain {
        assert!(!self.busy().await, "the previous batch is not done");
        let cpu_before = total_cpu(&self.workers);
        self.add_jobs(batch).await;
        let start = SystemTime::now();
        let done = wait_drained(|| self.busy(), &self.workers).await;
        Drain {
            runs: batch,
            elapsed: done.duration_since(start).unwrap_or_default(),
            cpu: total_cpu(&self.workers).saturating_sub(cpu_before),
            db_cpu: None,
            peak_rss_kib: None,
            to_first_claim: None,
        }
    }

    /// Queues `runs` jobs, starts `procs` workers at once and times them from the first
    /// job's start to done.
    pub async fn drain_backlog(
        &self,
        runs: usize,
        procs: usize,
        batched: bool,
        record: &Record,
    ) -> Drain {
        assert!(!self.busy().await, "the previous backlog is not done");
        self.add_jobs(runs).await;
        sqlx::raw_sql("ANALYZE graphile_worker._private_jobs")
            .execute(&self.pool)
            .await
            .expect("analyze");
        let db_before = postgres_cpu();
        let spawned = SystemTime::now();
        let workers: Vec<Proc> = (0..procs)
            .map(|_| self.spawn_worker(BACKLOG_WORKERS, batched))
            .collect();
        let done = wait_drained(|| self.busy(), &workers).await;
        let db_cpu = Some(postgres_cpu().saturating_sub(db_before));
        let (cpu, peak_rss_kib) = usage_since(&workers, "started").await;
        let first = workers
            .iter()
            .filter_map(|w| w.found("first_job_at"))
            .filter_map(|r| r.value["first_job_at"].as_f64())
            .min_by(f64::total_cmp)
            .expect("a first job");
        for worker in workers {
            worker.stop(record).await;
        }
        let first = UNIX_EPOCH + Duration::from_secs_f64(first / 1e3);
        Drain {
            runs,
            elapsed: done.duration_since(first).unwrap_or_default(),
            cpu,
            db_cpu,
            peak_rss_kib: Some(peak_rss_kib),
            to_first_claim: Some(first.duration_since(spawned).unwrap_or_default()),
        }
    }

    /// Starts one worker, adds the `parent` job of `children` children and times it to
    /// the `resume` job's start; checks the counter and that no job is left once done.
    pub async fn fan_out(&self, children: usize, record: &Record) -> Fanout {
        assert!(!self.busy().await, "the previous fan-out is not done");
        let worker = self.spawn_worker(BACKLOG_WORKERS, false);
        worker.report("ready", START_TIMEOUT).await;
        let db_before = postgres_cpu();
        let cpu_before = worker.cpu();
        let added = SystemTime::now();
        sqlx::query(GRAPHILE_ADD_PARENT)
            .bind(children as i32)
            .execute(&self.pool)
            .await
            .expect("add the parent");
        let resumed = worker.report("resumed_at", DRAIN_TIMEOUT).await;
        let cpu = worker.cpu().saturating_sub(cpu_before);
        let db_cpu = postgres_cpu().saturating_sub(db_before);
        wait_drained(|| self.busy(), std::slice::from_ref(&worker)).await;
        let parent = worker.found("enqueued_ms").expect("the parent's report");
        let last_child = worker
            .found("last_child_at")
            .expect("the last child's report");
        worker.stop(record).await;
        let n = children as i64;
        let (remaining, total): (i32, i64) = sqlx::query_as(GRAPHILE_FANIN)
            .fetch_one(&self.pool)
            .await
            .expect("read the counter");
        assert_eq!(
            (remaining, total, resumed.value["total"].as_i64()),
            (0, n * (n - 1) / 2, Some(n * (n - 1) / 2)),
            "every child counted, and the resume saw their total"
        );
        let at = |report: &Report, key: &str| {
            let ms = report.value[key].as_f64().expect("a time");
            UNIX_EPOCH + Duration::from_secs_f64(ms / 1e3)
        };
        let resumed_at = at(&resumed, "resumed_at");
        Fanout {
            children,
            resumed: resumed_at.duration_since(added).unwrap_or_default(),
            enqueued: Duration::from_secs_f64(
                parent.value["enqueued_ms"].as_f64().expect("a duration") / 1e3,
            ),
            last_to_resume: Some(
                resumed_at
                    .duration_since(at(&last_child, "last_child_at"))
                    .unwrap_or_default(),
            ),
            cpu,
            db_cpu,
        }
    }

    pub async fn stop(self, record: &Record) {
        for worker in self.workers {
            worker.stop(record).await;
        }
        self.pool.close().await;
        self.database.drop_now().await;
    }
}

/// `npm ci` (or `npm install`, without a lock file) when `node_modules` is missing.
pub fn install_node_modules(dir: &Path) -> Result<(), String> {
    if dir.join("node_modules").join("graphile-worker").is_dir() {
        return Ok(());
    }
    let args: &[&str] = if dir.join("package-lock.json").is_file() {
        &["ci", "--no-audit", "--no-fund"]
    } else {
        &["install", "--no-audit", "--no-fund"]
    };
    eprintln!(
        "serve benchmarks: running `npm {}` in {}",
        args.join(" "),
        dir.display()
    );
    let status = Command::new("npm")
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status()
        .map_err(|e| format!("cannot run npm (Node.js and npm are needed): {e}"))?;
    if !status.success() {
        return Err(format!(
            "`npm {}` failed in {}: {status}",
            args.join(" "),
            dir.display()
        ));
    }
    Ok(())
}
