//! Shared by the end-to-end tests: the real `host` binary, real guests built from
//! `examples/`, and a fresh database per test on either backend.
#![allow(dead_code)]

pub mod app_role;
pub mod postgres;
pub mod proxy;
pub mod service;
pub mod webhook;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every guest in the workspace (the examples and `tests/guests`), built once per test
/// process: all workspace members but the host itself. `scripts/test` builds them once
/// for the whole suite and says where (`JOBHOST_TEST_GUESTS`), so a process per test does
/// not ask cargo again.
pub fn guest(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        if let Some(built) = std::env::var_os("JOBHOST_TEST_GUESTS") {
            return PathBuf::from(built);
        }
        let status = Command::new(env!("CARGO"))
            .current_dir(workspace())
            .args(GUEST_BUILD)
            .status()
            .expect("run cargo to build the guests");
        assert!(
            status.success(),
            "building the guests failed (is wasm32-wasip2 installed?)"
        );
        target_dir().join("wasm32-wasip2/guest")
    });
    let path = dir.join(format!("{name}.wasm"));
    assert!(path.exists(), "no guest {name} at {}", path.display());
    path
}

/// A Python or JavaScript example (`examples/python/ledger`, say), built from its source
/// by `host build` — once per test run (`JOBHOST_TEST_RUN`, set by `scripts/test`; once
/// per process without it), whichever test process asks first, the others waiting on a
/// lock — and its component. A build is not byte-reproducible, so building once also
/// means each component is compiled once for the whole suite: by the build itself, into
/// the shared compile cache.
pub fn polyglot(example: &str) -> PathBuf {
    PathBuf::from(polyglot_build(example)["path"].as_str().unwrap())
}

/// What `host build --json` printed for the build [`polyglot`] made.
pub fn polyglot_build(example: &str) -> serde_json::Value {
    let run = std::env::var("JOBHOST_TEST_RUN").unwrap_or_else(|_| std::process::id().to_string());
    let built = target_dir().join("polyglot-built");
    std::fs::create_dir_all(&built).unwrap();
    let key = example.replace('/', "-");
    let lock = std::fs::File::create(built.join(format!("{key}.lock"))).unwrap();
    lock.lock().unwrap();
    let stamp = built.join(format!("{key}.run"));
    if let Some(shown) = std::fs::read_to_string(&stamp)
        .ok()
        .and_then(|s| s.strip_prefix(&format!("{run}\n")).map(str::to_string))
        .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
        .filter(|shown| {
            shown["path"]
                .as_str()
                .is_some_and(|p| Path::new(p).is_file())
        })
    {
        return shown;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_host"))
        .args(["build", "--json"])
        .arg(workspace().join("examples").join(example))
        .env("JOBHOST_CACHE", shared_cache())
        .output()
        .expect("run host build");
    assert!(
        out.status.success(),
        "host build examples/{example} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    std::fs::write(&stamp, format!("{run}\n{shown}")).unwrap();
    shown
}

/// The cargo arguments that build every guest (`scripts/test` runs the same).
pub const GUEST_BUILD: [&str; 9] = [
    "build",
    "--quiet",
    "--profile",
    "guest",
    "--target",
    "wasm32-wasip2",
    "--workspace",
    "--exclude",
    "jobhost",
];

/// The build's target directory, wherever it is set: where cargo puts the guests.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace().join("target"), |dir| workspace().join(dir))
}

/// The compiled-component cache every host the tests start shares: each guest is
/// compiled once per suite, not once per test (entries are keyed by the component's
/// digest and the engine's configuration, and written atomically).
pub fn shared_cache() -> PathBuf {
    target_dir().join("e2e-component-cache")
}

pub fn migrations() -> PathBuf {
    workspace().join("examples/migrations")
}

/// The S3-compatible server the object-storage tests use (`scripts/test` starts
/// SeaweedFS), and the environment a host reads it from.
pub fn s3_environment() -> Vec<(&'static str, String)> {
    let endpoint =
        std::env::var("JOBHOST_TEST_S3").unwrap_or_else(|_| "http://127.0.0.1:8333".to_string());
    vec![
        ("AWS_ENDPOINT", endpoint),
        ("AWS_ACCESS_KEY_ID", "jobhost".into()),
        ("AWS_SECRET_ACCESS_KEY", "jobhost-secret".into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ALLOW_HTTP", "true".into()),
    ]
}

/// The bucket of the object-storage tests.
pub const S3_BUCKET: &str = "jobhost";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

pub use app_role::PgRole;
/// The Postgres server the Postgres variants use (a fresh database per test).
pub use postgres::admin_url as postgres_admin_url;

/// Registers `name` straight through the library as a plain job of the default tenant
/// under `limits` (its component `NAME.wasm`, digest `NAME`): what the store-level tests
/// queue and claim runs of.
pub async fn register_job(
    store: &jobhost::store::Store,
    name: &str,
    limits: &jobhost::rules::claim_limits::ClaimLimits,
) {
    store
        .upsert_job(&jobhost::store::JobUpsert {
            name,
            tenant: "default",
            component_path: &format!("{name}.wasm"),
            component_digest: name,
            spec: &serde_json::json!({"payload": {}}).to_string(),
            schedule: None,
            next_fire_at: None,
            per_tenant: false,
            sequential: false,
            max_per_tenant: None,
            over_limit: Default::default(),
            limits,
        })
        .await
        .unwrap();
}

/// Queues a run of `job` as a kick would (the job's instance `instance`, an empty
/// payload), due in `delay_ms`, straight through the library.
pub async fn queue_run(
    store: &jobhost::store::Store,
    job: &str,
    instance: &str,
    delay_ms: i64,
) -> jobhost::store::RunRecord {
    store
        .insert_run(&jobhost::store::NewRun {
            id: jobhost::store::new_run_id(),
            job: job.into(),
            instance: instance.into(),
            tenant: "default".into(),
            origin: jobhost::store::Origin::Kick,
            payload: "{}".into(),
            cursor: None,
            component_digest: None,
            scheduled_for: None,
            rerun_of: None,
            delay_ms,
            trace_parent: None,
        })
        .await
        .expect("queue a run")
}

/// One test's world: a home directory and a database of its own.
pub struct Home {
    /// The Postgres variants' database; declared first, so it is dropped (with its job
    /// roles) before the directory goes. The home's servers are gone by then.
    postgres: Option<postgres::PgDatabase>,
    pub dir: tempfile::TempDir,
    pub backend: Backend,
    pub db_url: String,
    operator_token: std::sync::OnceLock<String>,
}

impl Home {
    pub async fn new(backend: Backend) -> Home {
        let dir = tempfile::tempdir().expect("temp dir");
        let postgres = match backend {
            Backend::Sqlite => None,
            Backend::Postgres => Some(postgres::PgDatabase::create("jobhost_test_").await),
        };
        let db_url = match &postgres {
            None => format!("sqlite://{}/jobhost.db", dir.path().display()),
            Some(database) => database.url.clone(),
        };
        Home {
            postgres,
            dir,
            backend,
            db_url,
            operator_token: std::sync::OnceLock::new(),
        }
    }

    /// An operator's API token for this home's database, created on first use.
    pub fn operator_token(&self) -> String {
        self.operator_token
            .get_or_init(|| self.create_token(None))
            .clone()
    }

    /// `host tokens create`, of a tenant or (with `None`) an operator's.
    pub fn create_token(&self, tenant: Option<&str>) -> String {
        let mut args = vec!["tokens", "create", "--json"];
        args.extend(tenant.map(|t| ["--tenant", t]).into_iter().flatten());
        self.answer_json(&args)["token"]
            .as_str()
            .expect("a token")
            .to_string()
    }

    /// `host ARGS`, which must succeed, its output read as JSON.
    /// `host ARGS`: its exit code (-1 if a signal ended it), and what it printed on stdout
    /// and stderr.
    pub fn run_text(&self, args: &[&str]) -> (i32, String, String) {
        let out = self.run(args);
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `host ARGS`, which must succeed: what it printed on stdout.
    pub fn run_ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    }

    pub fn answer_json(&self, args: &[&str]) -> serde_json::Value {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON")
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The real binary, pointed at this home and database.
    pub fn host(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_host"));
        cmd.env("JOBHOST_HOME", self.path())
            .env("JOBHOST_CACHE", shared_cache())
            // Every `serve` on a free port, however a test starts it: tests run side by
            // side, and a second host on the default port would exit at once.
            .env("JOBHOST_LISTEN", "127.0.0.1:0")
            .env("JOBHOST_DB", &self.db_url)
            .env("JOBHOST_LOG", "warn")
            .current_dir(self.path());
        for (name, value) in s3_environment() {
            cmd.env(name, value);
        }
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
        jobhost::store::Store::open(&self.db_url)
            .await
            .expect("open store")
    }

    /// Runs one statement on the database directly (fault injection, setup).
    pub async fn exec(&self, sql: &str) -> u64 {
        let store = self.store().await;
        let n = match store.pool() {
            jobhost::store::Pool::Sqlite(p) => sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(p)
                .await
                .map(|r| r.rows_affected()),
            jobhost::store::Pool::Postgres(p) => sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(p)
                .await
                .map(|r| r.rows_affected()),
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
                sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                    .fetch_one(p)
                    .await
            }
            jobhost::store::Pool::Postgres(p) => {
                sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                    .fetch_one(p)
                    .await
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

/// A `host serve` process, killed when dropped.
pub struct Server {
    pub child: std::process::Child,
    pub url: String,
    /// The operator's token `get`, `post` and `text` send.
    pub token: String,
    client: reqwest::Client,
}

impl Home {
    /// Writes a manifest into the home directory; `jobs` is TOML for `[jobs.*]` tables,
    /// where `{guest:NAME}` stands for the path of a built guest.
    pub fn manifest(&self, host: &str, jobs: &str) -> PathBuf {
        let mut text = format!(
            "[host]\nmigrations = \"{}\"\n{host}\n",
            migrations().display()
        );
        let mut rest = jobs.to_string();
        while let Some(start) = rest.find("{guest:") {
            let end = start + rest[start..].find('}').expect("closing brace");
            let name = &rest[start + 7..end];
            let path = guest(name).display().to_string();
            rest.replace_range(start..=end, &path);
        }
        text.push_str(&rest);
        let path = self.path().join("jobhost.toml");
        std::fs::write(&path, text).expect("write manifest");
        path
    }

    /// Starts `host serve` on a free port and waits until it answers.
    pub async fn serve(&self, args: &[&str]) -> Server {
        self.serve_with_db(&self.db_url, args).await
    }

    /// Like `serve`, reaching the database through another URL (a proxy, say).
    pub async fn serve_with_db(&self, db_url: &str, args: &[&str]) -> Server {
        self.try_serve_with_db(db_url, args)
            .await
            .unwrap_or_else(|| panic!("host serve did not start"))
    }

    /// Starts `host serve`; `None` if it exited instead (a database out of reach, say).
    pub async fn try_serve_with_db(&self, db_url: &str, args: &[&str]) -> Option<Server> {
        self.try_serve_logging(db_url, "info", &[], args).await
    }

    /// Like `serve`, with these variables in the host's environment (a webhook's secret).
    pub async fn serve_env(&self, env: &[(&str, &str)], args: &[&str]) -> Server {
        self.try_serve_logging(&self.db_url, "info", env, args)
            .await
            .unwrap_or_else(|| panic!("host serve did not start"))
    }

    /// Like `serve`, logging with the filter `log` (a `JOBHOST_LOG` value).
    pub async fn serve_logging(&self, log: &str, args: &[&str]) -> Server {
        self.try_serve_logging(&self.db_url, log, &[], args)
            .await
            .unwrap_or_else(|| panic!("host serve did not start"))
    }

    async fn try_serve_logging(
        &self,
        db_url: &str,
        log: &str,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Option<Server> {
        use std::io::BufRead;
        let token = self.operator_token();
        let log_path = self.next_log();
        let mut child = self
            .host()
            .envs(env.iter().copied())
            .env("JOBHOST_DB", db_url)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .env("JOBHOST_LOG", log)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log_path).expect("log file"))
            .spawn()
            .expect("spawn host serve");
        let stdout = child.stdout.take().expect("stdout");
        let line = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            std::io::BufReader::new(stdout)
                .read_line(&mut line)
                .map(|_| line)
        })
        .await
        .expect("join")
        .expect("read the listening line");
        let Some(addr) = line.trim().strip_prefix("listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            // Why it did not start is in its log, which goes with the home.
            eprintln!(
                "host serve did not start; its log:\n{}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
            return None;
        };
        Some(Server {
            url: format!("http://{addr}"),
            child,
            token,
            client: reqwest::Client::new(),
        })
    }
}

impl Home {
    /// A fresh log file name for the next server (kept in the home for debugging).
    fn next_log(&self) -> PathBuf {
        static SERVERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = SERVERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.path().join(format!("serve-{n}.log"))
    }

    /// Everything the servers of this test logged.
    pub fn server_logs(&self) -> String {
        let mut all = String::new();
        for entry in std::fs::read_dir(self.path()).expect("home") {
            let path = entry.expect("entry").path();
            if path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("serve-"))
            {
                all.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
            }
        }
        all
    }
}

impl Server {
    /// `GET /runs/{id}`, which must answer.
    pub async fn run_view(&self, id: &str) -> serde_json::Value {
        let (status, run) = self.get(&format!("/runs/{id}")).await;
        assert_eq!(status, 200, "{run}");
        run
    }

    /// Run `id`'s view once `ok` holds of it (`what` names the wait in its failure). The
    /// bound is for liveness, not timing: a first run may wait for its component's
    /// compile under load.
    pub async fn wait_run(
        &self,
        id: &str,
        what: &str,
        ok: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let start = Instant::now();
        loop {
            let run = self.run_view(id).await;
            if ok(&run) {
                return run;
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "timed out waiting for {what}: {run}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn get(&self, path: &str) -> (u16, serde_json::Value) {
        self.get_as(Some(&self.token), path).await
    }

    pub async fn post(&self, path: &str) -> (u16, serde_json::Value) {
        self.post_as(Some(&self.token), path, None).await
    }

    pub async fn delete(&self, path: &str) -> (u16, serde_json::Value) {
        let request = self.client.delete(format!("{}{path}", self.url));
        let r = with_token(request, Some(&self.token))
            .send()
            .await
            .expect("DELETE");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(serde_json::Value::Null))
    }

    /// A GET with this bearer token, or none.
    pub async fn get_as(&self, token: Option<&str>, path: &str) -> (u16, serde_json::Value) {
        let request = self.client.get(format!("{}{path}", self.url));
        let r = with_token(request, token).send().await.expect("GET");
        let status = r.status().as_u16();
        let text = r.text().await.expect("body");
        (
            status,
            serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
        )
    }

    /// A POST with this bearer token (or none) and JSON body (or none).
    pub async fn post_as(
        &self,
        token: Option<&str>,
        path: &str,
        body: Option<&str>,
    ) -> (u16, serde_json::Value) {
        let mut request = self.client.post(format!("{}{path}", self.url));
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        let r = with_token(request, token).send().await.expect("POST");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(serde_json::Value::Null))
    }

    /// A request of any method with this bearer token (or none) and JSON body (or none).
    pub async fn request_as(
        &self,
        method: &str,
        token: Option<&str>,
        path: &str,
        body: Option<&str>,
    ) -> (u16, serde_json::Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
        let mut request = self.client.request(method, format!("{}{path}", self.url));
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        let r = with_token(request, token).send().await.expect("request");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(serde_json::Value::Null))
    }

    pub async fn text(&self, path: &str) -> String {
        let request = self.client.get(format!("{}{path}", self.url));
        with_token(request, Some(&self.token))
            .send()
            .await
            .expect("GET")
            .text()
            .await
            .expect("body")
    }

    /// All runs (newest first), optionally of one job.
    pub async fn runs(&self, job: Option<&str>) -> Vec<serde_json::Value> {
        let path = match job {
            Some(job) => format!("/runs?limit=500&job={job}"),
            None => "/runs?limit=500".to_string(),
        };
        let (_, body) = self.get(&path).await;
        body["runs"].as_array().cloned().unwrap_or_default()
    }

    /// Polls `check` on the runs of `job` until it holds.
    pub async fn wait_runs(
        &self,
        job: &str,
        within: Duration,
        check: impl Fn(&[serde_json::Value]) -> bool,
    ) -> Vec<serde_json::Value> {
        let start = Instant::now();
        loop {
            let runs = self.runs(Some(job)).await;
            if check(&runs) {
                return runs;
            }
            assert!(
                start.elapsed() < within,
                "timed out; runs of {job}: {runs:#?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }

    /// Waits for the process to exit; returns its exit code and how long that took.
    pub async fn wait_exit(mut self, within: Duration) -> (Option<i32>, Duration) {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return (status.code(), start.elapsed());
            }
            assert!(
                start.elapsed() < within,
                "host serve did not exit within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn with_token(request: reqwest::RequestBuilder, token: Option<&str>) -> reqwest::RequestBuilder {
    match token {
        Some(token) => request.bearer_auth(token),
        None => request,
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
        mod postgres {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let $home = $crate::common::Home::new($crate::common::Backend::Postgres).await;
                    $body
                }
            )*
        }
    };
}
