//! Guest SQL on SQLite: grants enforced by SQLite's authorizer, deadlines by its progress
//! handler, commits fenced by the lease in the same transaction.
//!
//! Each guest statement runs on a connection from a pool of its own, with an authorizer
//! installed for the job's grant: SQLite asks it about every table a statement reads or
//! writes, every function, pragma, attach and transaction command, while it prepares the
//! statement, so what a job may touch never depends on parsing its SQL. Guest statements
//! are never cached (a statement prepared for one job must not be reused, unchecked, by
//! another). A progress handler interrupts a statement still running at its deadline.

use super::guest::{
    Access, Fence, GuestDbError, Refusal, SqlRows, SqlValue, TxSession, collect_rows,
};
use crate::grants::DbGrant;
use libsqlite3_sys as ffi;
use sqlx::pool::PoolConnection;
use sqlx::sqlite::{SqliteArguments, SqliteRow};
use sqlx::{AssertSqlSafe, Row, Sqlite, SqlitePool, TypeInfo, ValueRef};
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use tokio::time::Instant;

const MODE_READ: u8 = 0;
const MODE_WRITE: u8 = 1;
/// The host's own statements on a guest connection (BEGIN, the fence, COMMIT).
const MODE_HOST: u8 = 2;

const DENIED_NONE: u8 = 0;
const DENIED_NOT_GRANTED: u8 = 1;
const DENIED_READ_ONLY: u8 = 2;
const DENIED_FORBIDDEN: u8 = 3;

/// Functions a guest may never call, whatever it was granted.
const FORBIDDEN_FUNCTIONS: [&str; 5] = [
    "load_extension",
    "fts3_tokenizer",
    "readfile",
    "writefile",
    "edit",
];

/// What the authorizer consults; shared with SQLite through a raw pointer for as long as
/// the authorizer is installed.
struct AuthState {
    grant: Arc<DbGrant>,
    mode: AtomicU8,
    denied: AtomicU8,
}

impl AuthState {
    /// `database` is `main` for a real table and absent for a common table expression.
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
        let schema_table = arg1.is_some_and(|t| t.to_ascii_lowercase().starts_with("sqlite_"));
        match action {
            ffi::SQLITE_SELECT | ffi::SQLITE_RECURSIVE => Ok(()),
            ffi::SQLITE_READ => match (database, arg1) {
                (None, _) => Ok(()),
                (Some("main"), Some(table)) if self.grant.may_read(table) => Ok(()),
                _ => Err(DENIED_NOT_GRANTED),
            },
            // Schema changes write the schema table first: they are forbidden, not a
            // matter of grants.
            ffi::SQLITE_INSERT | ffi::SQLITE_UPDATE | ffi::SQLITE_DELETE if schema_table => {
                Err(DENIED_FORBIDDEN)
            }
            ffi::SQLITE_INSERT | ffi::SQLITE_UPDATE | ffi::SQLITE_DELETE => {
                match (database, arg1) {
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
    fence_sql: &'static str,
}

impl SqliteGuest {
    pub fn new(pool: SqlitePool, fence_sql: &'static str) -> Self {
        SqliteGuest { pool, fence_sql }
    }

    pub async fn query(
        &self,
        access: &Access,
        sql: &str,
        params: &[SqlValue],
    ) -> Result<SqlRows, GuestDbError> {
        let mut session =
            Session::open(&self.pool, &access.grant, MODE_READ, access.deadline).await?;
        let result = session.fetch(sql, params).await;
        session.release().await;
        result
    }

    /// Opens a write transaction; statements in it are interrupted at `deadline`.
    pub(crate) async fn begin(
        &self,
        access: &Access,
        deadline: Instant,
    ) -> Result<Box<dyn TxSession>, GuestDbError> {
        let mut session = Session::open(&self.pool, &access.grant, MODE_HOST, deadline).await?;
        // IMMEDIATE: take the write lock now, so the guest's writes and the fence check
        // happen under one lock that no lease renewal can slip past.
        if let Err(e) = session.host_statement("BEGIN IMMEDIATE").await {
            session.release().await;
            return Err(e);
        }
        session.in_tx = true;
        session.auth.mode.store(MODE_WRITE, Ordering::Release);
        session.fence_sql = Some(self.fence_sql);
        Ok(Box::new(session))
    }
}

/// A pooled connection with the authorizer and progress handler installed.
struct Session {
    conn: Option<PoolConnection<Sqlite>>,
    auth: Arc<AuthState>,
    in_tx: bool,
    fence_sql: Option<&'static str>,
}

impl Session {
    async fn open(
        pool: &SqlitePool,
        grant: &Arc<DbGrant>,
        mode: u8,
        deadline: Instant,
    ) -> Result<Session, GuestDbError> {
        let mut conn = tokio::time::timeout_at(deadline, pool.acquire())
            .await
            .map_err(|_| GuestDbError::Refused(Refusal::Interrupted))?
            .map_err(|_| GuestDbError::Unavailable)?;
        let auth = Arc::new(AuthState {
            grant: grant.clone(),
            mode: AtomicU8::new(mode),
            denied: AtomicU8::new(DENIED_NONE),
        });
        let deadline = deadline.into_std();
        {
            let mut handle = conn
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
        }
        Ok(Session {
            conn: Some(conn),
            auth,
            in_tx: false,
            fence_sql: None,
        })
    }

    fn conn(&mut self) -> &mut PoolConnection<Sqlite> {
        self.conn
            .as_mut()
            .expect("a session has its connection until released")
    }

    async fn host_statement(&mut self, sql: &'static str) -> Result<(), GuestDbError> {
        let auth = self.auth.clone();
        sqlx::raw_sql(sql)
            .execute(&mut **self.conn())
            .await
            .map(drop)
            .map_err(|e| classify(&e, &auth))
    }

    async fn fence(&mut self, sql: &'static str, fence: &Fence) -> Result<bool, GuestDbError> {
        let auth = self.auth.clone();
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

    async fn fetch(&mut self, sql: &str, params: &[SqlValue]) -> Result<SqlRows, GuestDbError> {
        let auth = self.auth.clone();
        auth.denied.store(DENIED_NONE, Ordering::Release);
        let query = bind_all(sqlx::query(AssertSqlSafe(sql)).persistent(false), params);
        let stream = query.fetch(&mut **self.conn());
        collect_rows(stream, |e| classify(e, &auth), decode_row).await
    }

    async fn execute(&mut self, sql: &str, params: &[SqlValue]) -> Result<u64, GuestDbError> {
        let auth = self.auth.clone();
        auth.denied.store(DENIED_NONE, Ordering::Release);
        bind_all(sqlx::query(AssertSqlSafe(sql)).persistent(false), params)
            .execute(&mut **self.conn())
            .await
            .map(|r| r.rows_affected())
            .map_err(|e| classify(&e, &auth))
    }

    /// Rolls back what is open, uninstalls the authorizer and progress handler, and
    /// returns the connection to the pool; a connection that cannot be cleaned is closed.
    async fn release(mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        let auth = self.auth.clone();
        let cleaned: Result<(), sqlx::Error> = async {
            {
                let mut handle = conn.lock_handle().await?;
                handle.remove_progress_handler();
                // SAFETY: the handle is locked; removing the authorizer ends SQLite's use
                // of `auth`.
                unsafe {
                    ffi::sqlite3_set_authorizer(
                        handle.as_raw_handle().as_ptr(),
                        None,
                        std::ptr::null_mut(),
                    );
                }
            }
            if self.in_tx {
                sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await?;
            }
            Ok(())
        }
        .await;
        if cleaned.is_err() {
            // SQLite may still hold the pointer: keep the state alive for good, and close
            // the connection (which rolls back anything open).
            conn.close_on_drop();
            std::mem::forget(auth);
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
        self.auth.mode.store(MODE_HOST, Ordering::Release);
        let sql = self.fence_sql.expect("a write session knows its fence");
        if !self.fence(sql, fence).await? {
            return Err(GuestDbError::LeaseLost);
        }
        self.host_statement("COMMIT").await?;
        self.in_tx = false;
        Ok(())
    }

    async fn release(self: Box<Self>) {
        Session::release(*self).await
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.conn.is_none() {
            return;
        }
        let orphan = Session {
            conn: self.conn.take(),
            auth: self.auth.clone(),
            in_tx: self.in_tx,
            fence_sql: None,
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(orphan.release());
            }
            Err(_) => {
                let mut orphan = orphan;
                if let Some(conn) = orphan.conn.as_mut() {
                    conn.close_on_drop();
                }
                std::mem::forget(orphan.auth.clone());
                drop(orphan);
            }
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

fn decode_row(row: &SqliteRow) -> Result<Vec<SqlValue>, GuestDbError> {
    let bad = |_| GuestDbError::Refused(Refusal::Failed);
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

/// Maps a driver error to a fixed code, using what the authorizer recorded.
fn classify(error: &sqlx::Error, auth: &AuthState) -> GuestDbError {
    match auth.denied.load(Ordering::Acquire) {
        DENIED_NOT_GRANTED => return GuestDbError::Refused(Refusal::NotGranted),
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
