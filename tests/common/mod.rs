//! Shared by the end-to-end tests: the real `host` binary, real guests built from
//! `examples/`, and a fresh database per test on either backend.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub const GUESTS: [&str; 8] = [
    "hello", "flaky", "spin", "hog", "ledger", "noop", "probe", "future",
];

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Builds every guest once per test process (cargo serialises concurrent builds).
pub fn guest(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        let mut cmd = Command::new(env!("CARGO"));
        cmd.current_dir(workspace())
            .args(["build", "--quiet", "--profile", "guest", "--target", "wasm32-wasip2"]);
        for g in GUESTS {
            cmd.args(["-p", g]);
        }
        let status = cmd.status().expect("run cargo to build the guests");
        assert!(status.success(), "building the guests failed (is wasm32-wasip2 installed?)");
        workspace().join("target/wasm32-wasip2/guest")
    });
    let path = dir.join(format!("{name}.wasm"));
    assert!(path.exists(), "no guest {name} at {}", path.display());
    path
}

pub fn migrations() -> PathBuf {
    workspace().join("examples/migrations")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// The Postgres server the Postgres variants use (a fresh database per test).
pub fn postgres_admin_url() -> String {
    std::env::var("JOBHOST_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

/// One test's world: a home directory and a database of its own.
pub struct Home {
    pub dir: tempfile::TempDir,
    pub backend: Backend,
    pub db_url: String,
}

impl Home {
    pub async fn new(backend: Backend) -> Home {
        let dir = tempfile::tempdir().expect("temp dir");
        let db_url = match backend {
            Backend::Sqlite => format!("sqlite://{}/jobhost.db", dir.path().display()),
            Backend::Postgres => fresh_postgres_database().await,
        };
        Home {
            dir,
            backend,
            db_url,
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The real binary, pointed at this home and database.
    pub fn host(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_host"));
        cmd.env("JOBHOST_HOME", self.path())
            .env("JOBHOST_DB", &self.db_url)
            .env("JOBHOST_LOG", "warn")
            .current_dir(self.path());
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.host().args(args).output().expect("run host")
    }

    /// `host run ... --json`, returning the exit code and the printed object.
    pub fn run_json(&self, args: &[&str]) -> (i32, serde_json::Value) {
        let mut all = vec!["run", "--json"];
        all.extend_from_slice(args);
        let out = self.run(&all);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let value = serde_json::from_str(stdout.trim()).unwrap_or_else(|_| {
            panic!(
                "host run printed no JSON\nstdout: {stdout}\nstderr: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (out.status.code().unwrap_or(-1), value)
    }

    /// Starts `host` in the background.
    pub fn spawn(&self, args: &[&str]) -> std::process::Child {
        self.host()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn host")
    }

    pub async fn store(&self) -> jobhost::store::Store {
        jobhost::store::Store::open(&self.db_url).await.expect("open store")
    }

    /// Runs one statement on the database directly (fault injection, setup).
    pub async fn exec(&self, sql: &str) -> u64 {
        let store = self.store().await;
        let n = match store.pool() {
            jobhost::store::Pool::Sqlite(p) => {
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(p).await.map(|r| r.rows_affected())
            }
            jobhost::store::Pool::Postgres(p) => {
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(p).await.map(|r| r.rows_affected())
            }
        }
        .expect("exec");
        store.close().await;
        n
    }

    /// Reads one integer (a count, say) from the database directly.
    pub async fn scalar(&self, sql: &str) -> i64 {
        let store = self.store().await;
        let v: i64 = match store.pool() {
            jobhost::store::Pool::Sqlite(p) => {
                sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_one(p).await
            }
            jobhost::store::Pool::Postgres(p) => {
                sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_one(p).await
            }
        }
        .expect("scalar");
        store.close().await;
        v
    }

    /// Waits until `sql` returns a count above zero.
    pub async fn wait_for(&self, sql: &str, within: Duration) {
        let start = Instant::now();
        while self.scalar(sql).await == 0 {
            assert!(start.elapsed() < within, "timed out waiting for: {sql}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn fresh_postgres_database() -> String {
    use sqlx::Connection;
    let admin = postgres_admin_url();
    let name = format!("jobhost_test_{}", uuid::Uuid::now_v7().simple());
    let mut conn = sqlx::PgConnection::connect(&admin)
        .await
        .expect("connect to the test Postgres (set JOBHOST_TEST_POSTGRES)");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .expect("create a test database");
    let (base, _) = admin.rsplit_once('/').expect("a database URL");
    format!("{base}/{name}")
}

/// Declares each test once and runs it on every backend.
#[macro_export]
macro_rules! on_every_backend {
    ($(async fn $name:ident($home:ident) $body:block)*) => {
        mod sqlite {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let $home = $crate::common::Home::new($crate::common::Backend::Sqlite).await;
                    $body
                }
            )*
        }
    };
}
