//! Guest SQL on SQLite: grants enforced by SQLite's authorizer, deadlines by its progress
//! handler, the size of every value by SQLite's own limits, commits fenced by the lease
//! in the same transaction.
//!
//! Each guest statement runs on a connection from a pool of its own, with an authorizer
//! installed for the job's grant: SQLite asks it about every table a statement reads or
//! writes, every function, pragma, attach and transaction command, while it prepares the
//! statement, so what a job may touch never depends on parsing its SQL. Guest statements
//! are never cached (a statement prepared for one job must not be reused, unchecked, by
//! another). A progress handler interrupts a statement still running at its deadline.
//!
//! One gap in what SQLite tells the authorizer needs care: a table a statement names but
//! takes no column from (`SELECT count(*) FROM t`, `EXISTS (SELECT 1 FROM t)`) is reported
//! without its database, exactly like a common table expression. Such a name is refused
//! unless it is granted or turns out, on asking SQLite's schema, not to be a table or view
//! at all (then it can only be a CTE of the statement, which is prepared again with that
//! name allowed).

use super::cancel_book::CancelBook;
use super::guest::{
    Access, Applied, Fence, GuestDbError, MAX_PARAMS, MAX_SQL_BYTES, MAX_VALUE_BYTES, Refusal,
    SqlRows, SqlValue, TxEffect, TxSession, collect_rows,
};
use super::queries::Queries;
use crate::rules::grants::DbGrant;
use libsqlite3_sys as ffi;
use sqlx::pool::PoolConnection;
use sqlx::sqlite::{SqliteArguments, SqliteRow};
use sqlx::{AssertSqlSafe, ConnectOptions, Row, Sqlite, SqlitePool, TypeInfo, ValueRef};
use std::collections::BTreeSet;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use tokio::time::Instant;

const MODE_READ: u8 = 0;
const MODE_WRITE: u8 = 1;
/// The host's own statements on a guest connection (BEGIN, the fence, COMMIT).
const MODE_HOST: u8 = 2;

const DENIED_NONE: u8 = 0;
const DENIED_NOT_GRANTED: u8 = 1;
const DENIED_READ_ONLY: u8 = 2;
const DENIED_FORBIDDEN: u8 = 3;
/// A name reported without its database: a table or a CTE, to be looked up.
const DENIED_AMBIGUOUS: u8 = 4;

/// Functions a guest may never call, whatever it was granted: the ones that reach the
/// host's files or code (the fence's view of the cancel book among them), and the JSON aggregates, whose buffer grows row by row with no
/// regard for `SQLITE_LIMIT_LENGTH` (checked only on the final value) — a hundred of them
/// in one statement would each grow towards 2 GiB.
const FORBIDDEN_FUNCTIONS: [&str; 10] = [
    "load_extension",
    super::cancel_book::FUNCTION,
    "fts3_tokenizer",
    "readfile",
    "writefile",
    "edit",
    "json_group_array",
    "json_group_object",
    "jsonb_group_array",
    "jsonb_group_object",
];

/// The most memory SQLite may hold in this process, all connections together (the host's
/// and the guests'): a backstop under the per-connection limits, which bound what a value
/// may become but not every buffer a function builds on the way. The most the guests' 4
/// connections can hold at once stays well under it — each a row of 100 values of 1 MiB,
/// and a JSON function escaping its 32 arguments of 1 MiB at up to six bytes a byte, about
/// 300 MiB — so the host's own statements always have room. Past it a statement fails
/// (`failed` to a guest) rather than the process.
const SQLITE_HEAP_LIMIT: i64 = 2 << 30;

/// Table-valued functions a guest may use: they read only their arguments.
const ALLOWED_TABLE_FUNCTIONS: [&str; 4] = ["json_each", "json_tree", "jsonb_each", "jsonb_tree"];

/// Most CTE names one statement may have resolved (each costs a preparation).
const MAX_AMBIGUOUS: usize = 16;

/// SQLite's per-connection limits on guest connections: every value, statement and
/// expression a guest can make SQLite build is bounded before it is built, so no
/// statement can make the host allocate more than a few of `MAX_VALUE_BYTES` at once.
const LIMITS: [(c_int, c_int); 9] = [
    (ffi::SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES as c_int),
    (ffi::SQLITE_LIMIT_SQL_LENGTH, MAX_SQL_BYTES as c_int),
    (ffi::SQLITE_LIMIT_COLUMN, 100),
    (ffi::SQLITE_LIMIT_EXPR_DEPTH, 100),
    (ffi::SQLITE_LIMIT_COMPOUND_SELECT, 64),
    (ffi::SQLITE_LIMIT_FUNCTION_ARG, 32),
    (ffi::SQLITE_LIMIT_VARIABLE_NUMBER, MAX_PARAMS as c_int),
    (ffi::SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 1000),
    (ffi::SQLITE_LIMIT_TRIGGER_DEPTH, 10),
];

/// What the authorizer consults; shared with SQLite through a raw pointer for as long as
/// the authorizer is installed.
struct AuthState {
    grant: Arc<DbGrant>,
    /// Names of virtual table modules (`pragma_*`, `dbstat`, ...): never a CTE.
    modules: Arc<BTreeSet<String>>,
    mode: AtomicU8,
    denied: AtomicU8,
    /// This statement's names found not to be tables (its CTEs), lower-cased.
    ctes: Mutex<BTreeSet<String>>,
    /// The last name reported without a database and not yet resolved.
    ambiguous: Mutex<Option<String>>,
}

impl AuthState {
    fn decide(
        &self,
        action: c_int,
        arg1: Option<&str>,
        arg2: Option<&str>,
        database: Option<&str>,
    ) -> Result<(), u8> {
        let mode = self.mode.load(Ordering::Acquire);
        if mode == MODE_HOST {
            return Ok(());
        }
        let lower = arg1.map(str::to_ascii_lowercase);
        let reserved = lower
            .as_deref()
            .is_some_and(|t| t.starts_with("sqlite_") || t.starts_with("pragma_"));
        match action {
            ffi::SQLITE_SELECT | ffi::SQLITE_RECURSIVE => Ok(()),
            ffi::SQLITE_READ => {
                let Some(table) = lower.as_deref() else {
                    return Err(DENIED_NOT_GRANTED);
                };
                if ALLOWED_TABLE_FUNCTIONS.contains(&table) {
                    return Ok(());
                }
                if reserved || self.modules.contains(table) {
                    return Err(DENIED_NOT_GRANTED);
                }
                match database {
                    Some("main") if self.grant.may_read(table) => Ok(()),
                    Some(_) => Err(DENIED_NOT_GRANTED),
                    None if self.grant.may_read(table) => Ok(()),
                    None if self.ctes.lock().expect("cte names").contains(table) => Ok(()),
                    None => {
                        *self.ambiguous.lock().expect("ambiguous name") = Some(table.to_string());
                        Err(DENIED_AMBIGUOUS)
                    }
                }
            }
            // Schema changes write the schema table first: they are forbidden, not a
            // matter of grants.
            ffi::SQLITE_INSERT | ffi::SQLITE_UPDATE | ffi::SQLITE_DELETE if reserved => {
                Err(DENIED_FORBIDDEN)
            }
            ffi::SQLITE_INSERT | ffi::SQLITE_UPDATE | ffi::SQLITE_DELETE => {
                match (database, lower.as_deref()) {
                    (Some("main"), Some(table)) if self.grant.may_write(table) => {
                        if mode == MODE_WRITE {
                            Ok(())
                        } else {
                            Err(DENIED_READ_ONLY)
                        }
                    }
                    _ => Err(DENIED_NOT_GRANTED),
                }
            }
            ffi::SQLITE_FUNCTION => match arg2 {
                Some(f) if FORBIDDEN_FUNCTIONS.contains(&f.to_ascii_lowercase().as_str()) => {
                    Err(DENIED_FORBIDDEN)
                }
                _ => Ok(()),
            },
            _ => Err(DENIED_FORBIDDEN),
        }
    }

    /// Starts a new guest statement: no refusal, no CTE names known yet.
    fn reset(&self) {
        self.denied.store(DENIED_NONE, Ordering::Release);
        self.ctes.lock().expect("cte names").clear();
        *self.ambiguous.lock().expect("ambiguous name") = None;
    }
}

/// # Safety
/// `user` is the `AuthState` installed with this callback, alive while it is installed.
unsafe extern "C" fn authorize(
    user: *mut c_void,
    action: c_int,
    arg1: *const c_char,
    arg2: *const c_char,
    database: *const c_char,
    _trigger: *const c_char,
) -> c_int {
    // SAFETY: see above; the strings are NUL-terminated or null, as SQLite documents.
    let state = unsafe { &*(user as *const AuthState) };
    let text = |p: *const c_char| {
        (!p.is_null())
            .then(|| unsafe { CStr::from_ptr(p) }.to_str().ok())
            .flatten()
    };
    match state.decide(action, text(arg1), text(arg2), text(database)) {
        Ok(()) => ffi::SQLITE_OK,
        Err(kind) => {
            state.denied.store(kind, Ordering::Release);
            ffi::SQLITE_DENY
        }
    }
}

/// The guest-facing SQLite database.
#[derive(Clone)]
pub struct SqliteGuest {
    pool: SqlitePool,
    /// The host's statements (the fence, file writes) it runs on guest connections.
    q: &'static Queries,
    modules: Arc<BTreeSet<String>>,
}

impl SqliteGuest {
    /// Opens the guest pool on the database at `url`: its own connections, each with the
    /// guest limits set, no statement logging (guest SQL never reaches the operator's
    /// log), and rows handed over one at a time (a refused result stops the statement).
    /// The fence's function over `cancels` is installed on each connection (the
    /// authorizer refuses it to guest SQL).
    pub(crate) async fn open(
        url: &str,
        q: &'static Queries,
        cancels: &Arc<CancelBook>,
    ) -> Result<SqliteGuest, sqlx::Error> {
        // SAFETY: sets a process-wide limit; callable at any time from any thread.
        unsafe { ffi::sqlite3_hard_heap_limit64(SQLITE_HEAP_LIMIT) };
        let cancels = cancels.clone();
        let options = super::connect::sqlite_options(url)?
            .row_buffer_size(1)
            .log_statements(log::LevelFilter::Off)
            .log_slow_statements(log::LevelFilter::Off, std::time::Duration::MAX);
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(4)
            .test_before_acquire(false)
            .acquire_timeout(std::time::Duration::from_secs(30))
            .after_connect(move |conn, _| {
                let cancels = cancels.clone();
                Box::pin(async move {
                    super::connect::install_cancels(conn, &cancels).await?;
                    let mut handle = conn.lock_handle().await?;
                    let db = handle.as_raw_handle().as_ptr();
                    for (limit, value) in LIMITS {
                        // SAFETY: the handle is locked for us and open.
                        unsafe { ffi::sqlite3_limit(db, limit, value) };
                    }
                    Ok(())
                })
            })
            .connect_with(options)
            .await?;
        let modules: Vec<String> = sqlx::query_scalar("SELECT name FROM pragma_module_list")
            .fetch_all(&pool)
            .await?;
        Ok(SqliteGuest {
            pool,
            q,
            modules: Arc::new(
                modules
                    .into_iter()
                    .map(|m| m.to_ascii_lowercase())
                    .filter(|m| !ALLOWED_TABLE_FUNCTIONS.contains(&m.as_str()))
                    .collect(),
            ),
        })
    }

    pub async fn query(
        &self,
        access: &Access,
        sql: &str,
        params: &[SqlValue],
    ) -> Result<SqlRows, GuestDbError> {
        let mut session = self.session(access, MODE_READ, access.deadline).await?;
        let result = session.fetch(sql, params).await;
        session.release().await;
        result
    }

    /// Opens a write transaction; statements in it are interrupted at `deadline`. The
    /// write lock is taken by its first statement (or its commit), not before: the lock
    /// every writer of the file waits for is held no longer than the guest's writes need.
    pub(crate) async fn begin(
        &self,
        access: &Access,
        deadline: Instant,
    ) -> Result<Box<dyn TxSession>, GuestDbError> {
        let mut session = self.session(access, MODE_WRITE, deadline).await?;
        session.host_queries = Some(self.q);
        Ok(Box::new(session))
    }

    async fn session(
        &self,
        access: &Access,
        mode: u8,
        deadline: Instant,
    ) -> Result<Session, GuestDbError> {
        Session::open(&self.pool, &access.grant, &self.modules, mode, deadline).await
    }
}

/// A pooled connection with the authorizer and progress handler installed.
struct Session {
    conn: Option<PoolConnection<Sqlite>>,
    auth: Arc<AuthState>,
    /// Set for a write session: the host's statements it runs in the transaction.
    host_queries: Option<&'static Queries>,
    /// Whether a write session issued its `BEGIN IMMEDIATE`.
    begun: bool,
    /// Set once SQLite rolled the begun transaction back by itself: from then on every
    /// statement would run in autocommit, unfenced, so the session takes none.
    rolled_back: bool,
    /// Set on a session whose owner dropped it: its own drop closes the connection.
    orphan: bool,
}

impl Session {
    async fn open(
        pool: &SqlitePool,
        grant: &Arc<DbGrant>,
        modules: &Arc<BTreeSet<String>>,
        mode: u8,
        deadline: Instant,
    ) -> Result<Session, GuestDbError> {
        let conn = tokio::time::timeout_at(deadline, pool.acquire())
            .await
            .map_err(|_| GuestDbError::Refused(Refusal::Interrupted))?
            .map_err(|_| GuestDbError::Unavailable)?;
        let auth = Arc::new(AuthState {
            grant: grant.clone(),
            modules: modules.clone(),
            mode: AtomicU8::new(mode),
            denied: AtomicU8::new(DENIED_NONE),
            ctes: Mutex::default(),
            ambiguous: Mutex::default(),
        });
        // From here on the session owns the connection: dropped at any await point, it
        // still cleans up (see `Drop`).
        let mut session = Session {
            conn: Some(conn),
            auth,
            host_queries: None,
            begun: false,
            rolled_back: false,
            orphan: false,
        };
        let deadline = deadline.into_std();
        let auth = session.auth.clone();
        let mut handle = session
            .conn()
            .lock_handle()
            .await
            .map_err(|_| GuestDbError::Unavailable)?;
        // SAFETY: the handle is locked for us; `auth` outlives the installation because
        // the session keeps it until `release` removes the authorizer.
        unsafe {
            ffi::sqlite3_set_authorizer(
                handle.as_raw_handle().as_ptr(),
                Some(authorize),
                Arc::as_ptr(&auth) as *mut c_void,
            );
        }
        handle.set_progress_handler(1_000, move || std::time::Instant::now() < deadline);
        drop(handle);
        Ok(session)
    }

    fn conn(&mut self) -> &mut PoolConnection<Sqlite> {
        self.conn
            .as_mut()
            .expect("a session has its connection until released")
    }

    /// Runs one of the host's own statements, unchecked by the grant.
    async fn host_statement(&mut self, sql: &'static str) -> Result<(), GuestDbError> {
        let host = HostMode::enter(&self.auth);
        let result = sqlx::raw_sql(sql).execute(&mut **self.conn()).await;
        host.classify(result.map(drop))
    }

    /// Readies one of the host's own row changes inside the transaction: the write lock
    /// taken, the host's statements, the authorizer in the host's mode until the returned
    /// guard is dropped.
    async fn as_host(&mut self) -> Result<(&'static Queries, HostMode), GuestDbError> {
        self.ensure_begun().await?;
        let q = self
            .host_queries
            .expect("a write session has the host's statements");
        Ok((q, HostMode::enter(&self.auth)))
    }

    /// Takes the write lock, once, before the transaction's first statement; refuses
    /// every statement once the transaction was rolled back.
    async fn ensure_begun(&mut self) -> Result<(), GuestDbError> {
        if self.rolled_back {
            return Err(GuestDbError::Refused(Refusal::RolledBack));
        }
        if self.host_queries.is_some() && !self.begun {
            // IMMEDIATE: the guest's writes and the fence check happen under one lock
            // that no lease renewal can slip past.
            self.host_statement("BEGIN IMMEDIATE").await?;
            self.begun = true;
        }
        Ok(())
    }

    /// A statement's result, unless it (or a trigger it fired) made SQLite roll the begun
    /// transaction back: then the statement is refused as `rolled-back`. SQLite ends a
    /// transaction by itself only with an error of the statement that made it, so only a
    /// failed statement is checked.
    async fn still_in_transaction<T>(
        &mut self,
        result: Result<T, GuestDbError>,
    ) -> Result<T, GuestDbError> {
        if result.is_err() {
            self.check_open().await?;
        }
        result
    }

    /// Whether SQLite still has the begun transaction open (it rolls one back by itself
    /// on some errors: a conflict clause `OR ROLLBACK`, `RAISE(ROLLBACK)` in a trigger).
    /// Once it has not, the session is marked and refuses every later statement, since
    /// they would run in autocommit, outside the fence.
    async fn check_open(&mut self) -> Result<(), GuestDbError> {
        if !self.begun {
            return Ok(());
        }
        let open = {
            let mut handle = self
                .conn()
                .lock_handle()
                .await
                .map_err(|_| GuestDbError::Unavailable)?;
            // SAFETY: the handle is locked for us.
            unsafe { ffi::sqlite3_get_autocommit(handle.as_raw_handle().as_ptr()) == 0 }
        };
        if open {
            return Ok(());
        }
        self.rolled_back = true;
        Err(GuestDbError::Refused(Refusal::RolledBack))
    }

    async fn fence(&mut self, sql: &'static str, fence: &Fence) -> Result<bool, GuestDbError> {
        let auth = self.auth.clone();
        auth.mode.store(MODE_HOST, Ordering::Release);
        sqlx::query(sql)
            .persistent(false)
            .bind(&fence.job)
            .bind(&fence.instance)
            .bind(fence.generation)
            .bind(&fence.holder)
            .fetch_optional(&mut **self.conn())
            .await
            .map(|row| row.is_some())
            .map_err(|e| classify(&e, &auth))
    }

    /// Whether `name` is a table or view of the database (rather than a CTE).
    async fn is_table(&mut self, name: &str) -> Result<bool, GuestDbError> {
        let auth = self.auth.clone();
        let mode = auth.mode.swap(MODE_HOST, Ordering::AcqRel);
        let found = sqlx::query_scalar::<_, i64>(
            "SELECT COUNT(*) FROM (SELECT name FROM sqlite_schema \
             UNION ALL SELECT name FROM sqlite_temp_schema) \
             WHERE name = $1 COLLATE NOCASE",
        )
        .persistent(false)
        .bind(name)
        .fetch_one(&mut **self.conn())
        .await
        .map_err(|e| classify(&e, &auth));
        auth.mode.store(mode, Ordering::Release);
        Ok(found? > 0)
    }

    /// After a statement was refused for a name reported without its database: refuses
    /// it for good if the name is a table, or allows the name (a CTE) for the next try.
    async fn resolve_ambiguous(&mut self) -> Result<bool, GuestDbError> {
        if self.auth.denied.load(Ordering::Acquire) != DENIED_AMBIGUOUS {
            return Ok(false);
        }
        let name = self
            .auth
            .ambiguous
            .lock()
            .expect("ambiguous name")
            .take()
            .ok_or(GuestDbError::Refused(Refusal::NotGranted))?;
        let too_many = self.auth.ctes.lock().expect("cte names").len() >= MAX_AMBIGUOUS;
        if too_many || self.is_table(&name).await? {
            return Err(GuestDbError::Refused(Refusal::NotGranted));
        }
        self.auth.ctes.lock().expect("cte names").insert(name);
        self.auth.denied.store(DENIED_NONE, Ordering::Release);
        Ok(true)
    }

    async fn fetch(&mut self, sql: &str, params: &[SqlValue]) -> Result<SqlRows, GuestDbError> {
        self.ensure_begun().await?;
        self.auth.reset();
        loop {
            let auth = self.auth.clone();
            let query = bind_all(sqlx::query(AssertSqlSafe(sql)).persistent(false), params);
            let stream = query.fetch(&mut **self.conn());
            let result = collect_rows(stream, |e| classify(e, &auth), decode_row).await;
            let result = self.still_in_transaction(result).await;
            if result.is_err() && !self.rolled_back && self.resolve_ambiguous().await? {
                continue;
            }
            return result;
        }
    }

    async fn execute(&mut self, sql: &str, params: &[SqlValue]) -> Result<u64, GuestDbError> {
        self.ensure_begun().await?;
        self.auth.reset();
        loop {
            let auth = self.auth.clone();
            let result = bind_all(sqlx::query(AssertSqlSafe(sql)).persistent(false), params)
                .execute(&mut **self.conn())
                .await
                .map(|r| r.rows_affected())
                .map_err(|e| classify(&e, &auth));
            let result = self.still_in_transaction(result).await;
            if result.is_err() && !self.rolled_back && self.resolve_ambiguous().await? {
                continue;
            }
            return result;
        }
    }

    /// Rolls back whatever is open, uninstalls the authorizer and progress handler, and
    /// returns the connection to the pool; a connection that cannot be cleaned is closed.
    ///
    /// Whether a transaction is open is asked of SQLite itself, after any statement still
    /// running on the connection has ended: a `BEGIN` whose caller was cancelled while it
    /// waited for the write lock completes later, and must be rolled back too.
    ///
    /// Cancel-safe: the session keeps its connection until the cleanup is done, so a
    /// release dropped half-way leaves it to `Drop`, never pooling a connection that may
    /// still be inside a transaction (holding the file's one write lock).
    async fn release(mut self) {
        if self.conn.is_none() {
            return;
        }
        let cleaned: Result<(), sqlx::Error> = async {
            let open = {
                let mut handle = self.conn().lock_handle().await?;
                handle.remove_progress_handler();
                let db = handle.as_raw_handle().as_ptr();
                // SAFETY: the handle is locked; removing the authorizer ends SQLite's use
                // of `auth`.
                unsafe {
                    ffi::sqlite3_set_authorizer(db, None, std::ptr::null_mut());
                    ffi::sqlite3_get_autocommit(db) == 0
                }
            };
            if open {
                sqlx::raw_sql("ROLLBACK")
                    .execute(&mut **self.conn())
                    .await?;
            }
            Ok(())
        }
        .await;
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        if cleaned.is_err() {
            // SQLite may still hold the pointer: keep the state alive for good, and close
            // the connection (which rolls back anything open).
            conn.close_on_drop();
            std::mem::forget(self.auth.clone());
        }
    }

    /// Closes the connection without cleaning it (closing rolls back); the authorizer's
    /// state is kept alive for good, as SQLite may still hold a pointer to it.
    fn abandon(&mut self) {
        if let Some(mut conn) = self.conn.take() {
            conn.close_on_drop();
            std::mem::forget(self.auth.clone());
        }
    }
}

#[async_trait::async_trait]
impl TxSession for Session {
    async fn fetch(&mut self, sql: &str, params: &[SqlValue]) -> Result<SqlRows, GuestDbError> {
        Session::fetch(self, sql, params).await
    }

    async fn execute(&mut self, sql: &str, params: &[SqlValue]) -> Result<u64, GuestDbError> {
        Session::execute(self, sql, params).await
    }

    async fn commit(&mut self, fence: &Fence) -> Result<(), GuestDbError> {
        self.ensure_begun().await?;
        let q = self
            .host_queries
            .expect("a write session has the host's statements");
        self.check_open().await?;
        if !self.fence(q.fence.as_str(), fence).await? {
            return Err(GuestDbError::LeaseLost);
        }
        self.host_statement("COMMIT").await
    }

    async fn apply(&mut self, effect: TxEffect<'_>) -> Result<Applied, GuestDbError> {
        let (q, host) = self.as_host().await?;
        let conn = self.conn();
        let applied = match effect {
            TxEffect::File(write) => host
                .classify(super::files::apply_sqlite(conn, q, write).await)
                .map(|written| Some(Applied::File(written))),
            TxEffect::Progress(write) => host
                .classify(super::resumable::apply_sqlite(conn, q, write).await)
                .map(|changed| Some(Applied::Progress(changed))),
            // `None`: the parent no longer runs its pass.
            TxEffect::Enqueue(write) => host
                .classify(super::family::apply_sqlite(conn, q, write).await)
                .map(|inserted| inserted.map(Applied::Enqueued)),
        };
        self.still_in_transaction(applied)
            .await?
            .ok_or(GuestDbError::LeaseLost)
    }

    async fn release(self: Box<Self>) {
        Session::release(*self).await
    }

    fn blocks_other_writers(&self) -> bool {
        self.begun && !self.rolled_back
    }
}

impl Drop for Session {
    /// Dropped with its connection (a cancelled call or release): the cleanup runs in a
    /// task of its own. An orphan dropped in turn (the runtime is shutting down) closes
    /// the connection instead of spawning again.
    fn drop(&mut self) {
        if self.conn.is_none() {
            return;
        }
        if self.orphan {
            self.abandon();
            return;
        }
        let orphan = Session {
            conn: self.conn.take(),
            auth: self.auth.clone(),
            host_queries: None,
            begun: false,
            rolled_back: false,
            orphan: true,
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(orphan.release());
            }
            Err(_) => drop(orphan),
        }
    }
}

fn bind_all<'q>(
    mut query: sqlx::query::Query<'q, Sqlite, SqliteArguments>,
    params: &'q [SqlValue],
) -> sqlx::query::Query<'q, Sqlite, SqliteArguments> {
    for p in params {
        query = match p {
            SqlValue::Null => query.bind(None::<i64>),
            SqlValue::Integer(i) => query.bind(*i),
            SqlValue::Real(f) => query.bind(*f),
            SqlValue::Text(s) => query.bind(s.as_str()),
            SqlValue::Blob(b) => query.bind(b.as_slice()),
        };
    }
    query
}

/// A row's values, unless its text and blobs come to more than `room` (what is left of the
/// result's bound): the driver holds the row already, and a row past the bound is refused
/// before its values are copied again.
fn decode_row(row: &SqliteRow, room: usize) -> Result<Vec<SqlValue>, GuestDbError> {
    let bad = |_| GuestDbError::Refused(Refusal::Failed);
    let mut held = 0usize;
    for i in 0..row.len() {
        let raw = row.try_get_raw(i).map_err(bad)?;
        if !raw.is_null() && matches!(raw.type_info().name(), "TEXT" | "BLOB") {
            held += row.try_get_unchecked::<&[u8], _>(i).map_err(bad)?.len();
        }
    }
    if held > room {
        return Err(GuestDbError::Invalid("result-too-large"));
    }
    (0..row.len())
        .map(|i| {
            let raw = row.try_get_raw(i).map_err(bad)?;
            if raw.is_null() {
                return Ok(SqlValue::Null);
            }
            let kind = raw.type_info().name().to_string();
            Ok(match kind.as_str() {
                "INTEGER" => SqlValue::Integer(row.try_get_unchecked(i).map_err(bad)?),
                "REAL" => SqlValue::Real(row.try_get_unchecked(i).map_err(bad)?),
                "BLOB" => SqlValue::Blob(row.try_get_unchecked(i).map_err(bad)?),
                _ => SqlValue::Text(row.try_get_unchecked(i).map_err(bad)?),
            })
        })
        .collect()
}

/// Maps a driver error to a fixed code, using what the authorizer recorded. A table that
/// does not exist is `not-granted` like one that does, so a guest cannot probe for names.
/// The authorizer in the host's mode, for the host's own statements; back to the mode it
/// was in when dropped, also when the call is cancelled half-way.
struct HostMode {
    auth: Arc<AuthState>,
    previous: u8,
}

impl HostMode {
    fn enter(auth: &Arc<AuthState>) -> HostMode {
        HostMode {
            auth: auth.clone(),
            previous: auth.mode.swap(MODE_HOST, Ordering::AcqRel),
        }
    }

    /// A host statement's failure as the guest sees it.
    fn classify<T>(&self, result: Result<T, sqlx::Error>) -> Result<T, GuestDbError> {
        result.map_err(|e| classify(&e, &self.auth))
    }
}

impl Drop for HostMode {
    fn drop(&mut self) {
        self.auth.mode.store(self.previous, Ordering::Release);
    }
}

fn classify(error: &sqlx::Error, auth: &AuthState) -> GuestDbError {
    match auth.denied.load(Ordering::Acquire) {
        DENIED_NOT_GRANTED | DENIED_AMBIGUOUS => {
            return GuestDbError::Refused(Refusal::NotGranted);
        }
        DENIED_READ_ONLY => return GuestDbError::Refused(Refusal::ReadOnly),
        DENIED_FORBIDDEN => return GuestDbError::Refused(Refusal::Forbidden),
        _ => {}
    }
    match error {
        sqlx::Error::Database(e) => {
            let code = e
                .code()
                .and_then(|c| c.parse::<i32>().ok())
                .unwrap_or(ffi::SQLITE_ERROR);
            match code & 0xff {
                ffi::SQLITE_AUTH => GuestDbError::Refused(Refusal::Forbidden),
                ffi::SQLITE_CONSTRAINT => GuestDbError::Refused(Refusal::Constraint),
                ffi::SQLITE_INTERRUPT => GuestDbError::Refused(Refusal::Interrupted),
                ffi::SQLITE_TOOBIG => GuestDbError::Invalid("value-too-large"),
                ffi::SQLITE_ERROR if e.message().starts_with("no such table") => {
                    GuestDbError::Refused(Refusal::NotGranted)
                }
                ffi::SQLITE_ERROR | ffi::SQLITE_RANGE => {
                    GuestDbError::Refused(Refusal::InvalidStatement)
                }
                ffi::SQLITE_READONLY => GuestDbError::Refused(Refusal::ReadOnly),
                ffi::SQLITE_BUSY | ffi::SQLITE_LOCKED => GuestDbError::Unavailable,
                _ => GuestDbError::Refused(Refusal::Failed),
            }
        }
        sqlx::Error::Io(_) | sqlx::Error::WorkerCrashed | sqlx::Error::PoolTimedOut => {
            GuestDbError::Unavailable
        }
        _ => GuestDbError::Refused(Refusal::Failed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::guest::Fence;

    struct Db {
        _dir: tempfile::TempDir,
        guest: SqliteGuest,
    }

    async fn db() -> Db {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/t.db", dir.path().display());
        let cancels = CancelBook::open(&dir.path().join("t.db")).unwrap();
        let host = crate::store::open_sqlite(&url, 1, &cancels).await.unwrap();
        sqlx::raw_sql(
            "CREATE TABLE ledger (run_id TEXT, attempt INTEGER, n INTEGER);
             CREATE INDEX ledger_n ON ledger (n);
             CREATE TABLE secrets (name TEXT PRIMARY KEY, value TEXT);
             INSERT INTO secrets VALUES ('api-key', 'do-not-leak');
             CREATE TABLE jobhost_runs (id TEXT);
             CREATE VIEW secret_view AS SELECT * FROM secrets;",
        )
        .execute(&host)
        .await
        .unwrap();
        let guest = SqliteGuest::open(&url, &crate::store::SQLITE_QUERIES, &cancels)
            .await
            .unwrap();
        Db { _dir: dir, guest }
    }

    fn access(read: &[&str], write: &[&str]) -> Access {
        let mut grant = DbGrant::default();
        grant.read.extend(read.iter().map(|t| t.to_string()));
        grant.write.extend(write.iter().map(|t| t.to_string()));
        Access {
            grant: Arc::new(grant),
            fence: Fence {
                job: "j".into(),
                instance: "i".into(),
                generation: 1,
                holder: "r".into(),
            },
            tenant: "t".into(),
            deadline: Instant::now() + std::time::Duration::from_secs(10),
        }
    }

    /// Runs `sql` as a guest would: a read on its own, or a write in a transaction that
    /// is rolled back.
    async fn run(db: &Db, access: &Access, sql: &str, write: bool) -> Result<(), GuestDbError> {
        if !write {
            return db.guest.query(access, sql, &[]).await.map(drop);
        }
        let mut tx = db.guest.begin(access, access.deadline).await?;
        let result = tx.execute(sql, &[]).await.map(drop);
        tx.release().await;
        result
    }

    const NOT_GRANTED: Result<(), GuestDbError> = Err(GuestDbError::Refused(Refusal::NotGranted));

    #[tokio::test]
    async fn a_table_touched_without_its_columns_is_still_refused() {
        let db = db().await;
        let a = access(&[], &["ledger"]);
        for sql in [
            "SELECT count(*) FROM jobhost_runs",
            "SELECT 1 FROM secrets",
            "SELECT EXISTS (SELECT 1 FROM secrets)",
            "SELECT ledger.n FROM ledger, secrets",
            "SELECT ledger.n FROM ledger JOIN secrets ON 1",
            "SELECT count(*) FROM main.secrets",
            "SELECT count(*) FROM secret_view",
            "SELECT (SELECT count(*) FROM secrets) FROM ledger",
            "WITH x AS (SELECT 1 FROM secrets) SELECT count(*) FROM x",
            "SELECT count(*) FROM sqlite_master",
            "SELECT name FROM sqlite_schema",
            "SELECT count(*) FROM temp.sqlite_master",
            "SELECT count(*) FROM pragma_table_list",
            "SELECT name FROM pragma_table_info('secrets')",
            "SELECT count(*) FROM dbstat",
            // A CTE named like a table it shadows is refused rather than guessed at.
            "WITH secrets AS (SELECT 1) SELECT count(*) FROM secrets",
            // A table that does not exist answers like one that is not granted.
            "SELECT count(*) FROM nowhere",
            "SELECT * FROM nowhere",
        ] {
            assert_eq!(run(&db, &a, sql, false).await, NOT_GRANTED, "{sql}");
        }
        for sql in [
            "INSERT INTO ledger (n) VALUES (1) RETURNING (SELECT count(*) FROM secrets)",
            "UPDATE ledger SET n = (SELECT count(*) FROM jobhost_runs)",
            "DELETE FROM ledger WHERE EXISTS (SELECT 1 FROM secrets)",
        ] {
            assert_eq!(run(&db, &a, sql, true).await, NOT_GRANTED, "{sql}");
        }
    }

    #[tokio::test]
    async fn ctes_and_table_functions_over_granted_data_work() {
        let db = db().await;
        let a = access(&[], &["ledger"]);
        for sql in [
            "SELECT count(*) FROM ledger",
            "WITH x AS (SELECT n FROM ledger) SELECT count(*) FROM x",
            "WITH x AS (SELECT 1 AS a), y AS (SELECT a FROM x) SELECT count(*) FROM x, y",
            "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 5) \
             SELECT count(*) FROM c",
            "SELECT value FROM json_each('[1, 2]')",
            "SELECT count(*) FROM json_each('[1]')",
        ] {
            assert_eq!(run(&db, &a, sql, false).await, Ok(()), "{sql}");
        }
        let write = "INSERT INTO ledger (n) VALUES (1) RETURNING (SELECT count(*) FROM ledger)";
        assert_eq!(run(&db, &a, write, true).await, Ok(()));
    }

    #[tokio::test]
    async fn values_are_bounded_before_sqlite_builds_them() {
        let db = db().await;
        let a = access(&[], &["ledger"]);
        let too_large = Err(GuestDbError::Invalid("value-too-large"));
        for sql in [
            "SELECT randomblob(400000000)",
            "SELECT length(zeroblob(2000000))",
            "WITH RECURSIVE c(i, s) AS (SELECT 1, 'x' UNION ALL SELECT i + 1, s || s FROM c \
             WHERE i < 40) SELECT length(s) FROM c",
        ] {
            assert_eq!(run(&db, &a, sql, false).await, too_large, "{sql}");
        }
        // Up to the cap is fine; what SQLite cuts short stays within it.
        assert_eq!(
            run(&db, &a, "SELECT length(randomblob(1000000))", false).await,
            Ok(())
        );
        let printed = db
            .guest
            .query(&a, "SELECT printf('%.*c', 2000000, 'x')", &[])
            .await;
        if let Ok(rows) = printed
            && let SqlValue::Text(text) = &rows.rows[0][0]
        {
            assert!(text.len() <= MAX_VALUE_BYTES);
        }
    }
}
