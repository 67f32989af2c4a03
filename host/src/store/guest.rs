//! The guest's side of the database: SQL a job runs on the tables it was granted.
//!
//! [`GuestDb`] is the port the `db` capability calls; each backend enforces the grants in
//! the database itself (SQLite: an authorizer; Postgres: a role per job) and fences every
//! commit with the attempt's lease in the same transaction. Every failure is a fixed code.

use super::family::Enqueue;
use super::postgres_guest::PgGuest;
/// The fence is a record of its own, so the store's probe and writers check it without
/// the port; the port's callers find it here, with the port.
pub use super::records::Fence;
use super::records::{FileWrite, FileWritten, ProgressWrite};
use super::sqlite_guest::SqliteGuest;
use crate::rules::grants::DbGrant;
use std::sync::Arc;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// A value crossing the boundary, in either direction.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

impl SqlValue {
    /// Bytes of its text or blob (none for a number or NULL): what `MAX_VALUE_BYTES`
    /// bounds.
    pub fn content_bytes(&self) -> usize {
        match self {
            SqlValue::Text(s) => s.len(),
            SqlValue::Blob(b) => b.len(),
            _ => 0,
        }
    }
}

/// Bytes a row of values takes in the host's memory, each value's own size included
/// (a NULL costs as much as an integer): what `MAX_RESULT_BYTES` bounds.
pub(crate) fn row_bytes(values: &[SqlValue]) -> usize {
    std::mem::size_of::<Vec<SqlValue>>()
        + values
            .iter()
            .map(|v| std::mem::size_of::<SqlValue>() + v.content_bytes())
            .sum::<usize>()
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct SqlRows {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<SqlValue>>,
}

/// Most rows one statement may return to a guest.
pub const MAX_ROWS: usize = 10_000;
/// Most bytes one statement's result may take in the host's memory (`row_bytes`).
pub const MAX_RESULT_BYTES: usize = 8 << 20;
/// Most bytes of any one value (text or blob) a guest statement may make the database
/// build, return or store.
pub const MAX_VALUE_BYTES: usize = 1 << 20;
/// Most bytes of SQL text per statement.
pub const MAX_SQL_BYTES: usize = 64 << 10;
/// Most parameters per statement.
pub const MAX_PARAMS: usize = 999;
/// Most bytes of a statement's parameters together: each is copied again by the driver
/// (SQLite binds a copy, Postgres encodes a bind message).
pub const MAX_PARAMS_BYTES: usize = 8 << 20;

/// Why a statement was refused: the fixed reasons guests see in `query-refused`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The statement touches a table the job was not granted (or not for writing).
    NotGranted,
    /// A write outside a transaction.
    ReadOnly,
    /// Schema changes, pragmas, attaching databases, transaction control, role changes.
    Forbidden,
    /// The statement does not parse or names something that does not exist.
    InvalidStatement,
    /// A constraint (unique, foreign key, not null, check) rejected the write.
    Constraint,
    /// The statement ran into the attempt's deadline or the transaction's time bound.
    Interrupted,
    /// The transaction stayed open longer than the host allows and was rolled back.
    TransactionTimeout,
    /// The database rolled the transaction back itself (SQLite: a conflict clause
    /// `OR ROLLBACK`, `RAISE(ROLLBACK)` in a trigger): nothing in it commits, and it takes
    /// no more statements.
    RolledBack,
    /// Any other failure of the statement.
    Failed,
}

impl Refusal {
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::NotGranted => "not-granted",
            Refusal::ReadOnly => "read-only",
            Refusal::Forbidden => "forbidden",
            Refusal::InvalidStatement => "invalid-statement",
            Refusal::Constraint => "constraint",
            Refusal::Interrupted => "interrupted",
            Refusal::TransactionTimeout => "transaction-timeout",
            Refusal::RolledBack => "rolled-back",
            Refusal::Failed => "failed",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestDbError {
    /// The fence failed: the lease moved on or its deadline passed; nothing committed.
    LeaseLost,
    Refused(Refusal),
    /// The arguments were not acceptable (fixed reason).
    Invalid(&'static str),
    /// The database could not be reached.
    Unavailable,
}

/// What one attempt may do, and until when.
#[derive(Debug, Clone)]
pub struct Access {
    pub grant: Arc<DbGrant>,
    pub fence: Fence,
    /// The run's tenant: on Postgres the transaction's `jobhost.tenant` setting, which
    /// the operator's row-level security policies may compare a tenant column with.
    pub tenant: String,
    /// Statements are interrupted at this instant.
    pub deadline: Instant,
}

/// The guest-facing database of one backend.
#[derive(Clone)]
pub enum GuestDb {
    Sqlite(SqliteGuest),
    Postgres(PgGuest),
}

impl GuestDb {
    /// Opens the guest-facing side of the store's database (its own connections).
    pub async fn open(store: &super::handle::Store) -> Result<GuestDb, super::error::StoreError> {
        match store.pool() {
            super::pool::Pool::Sqlite(_) => Ok(GuestDb::Sqlite(
                SqliteGuest::open(store.url(), store.q, store.cancel_book()).await?,
            )),
            super::pool::Pool::Postgres(admin) => {
                Ok(GuestDb::Postgres(PgGuest::new(admin.clone(), store.url())?))
            }
        }
    }

    /// Runs one read-only statement outside any transaction.
    pub async fn query(
        &self,
        access: &Access,
        sql: &str,
        params: &[SqlValue],
    ) -> Result<SqlRows, GuestDbError> {
        check_statement(sql, params)?;
        match self {
            GuestDb::Sqlite(db) => db.query(access, sql, params).await,
            GuestDb::Postgres(db) => db.query(access, sql, params).await,
        }
    }

    /// Opens a write transaction that stays open at most until `until`.
    pub async fn begin(&self, access: &Access, until: Instant) -> Result<GuestTx, GuestDbError> {
        let deadline = until.min(access.deadline);
        let session = match self {
            GuestDb::Sqlite(db) => db.begin(access, deadline).await?,
            GuestDb::Postgres(db) => db.begin(access, deadline).await?,
        };
        Ok(GuestTx::new(session, access.fence.clone(), deadline))
    }
}

/// A write of another capability that must commit with the guest's transaction or not at
/// all. The port knows SQL, the fence and this list, not each capability's rows: a
/// capability adds its write to the open transaction as one of these
/// ([`GuestTx::apply`]), and each backend applies it with its own statements.
#[derive(Debug, Clone, Copy)]
pub enum TxEffect<'a> {
    /// `files`' attach, removal or mark (`attach-in`, `remove-in`).
    File(&'a FileWrite),
    /// `steps`' recorded step or ended pass (`record-in`, `commit-pass`).
    Progress(&'a ProgressWrite),
    /// `jobs`' queued runs (`enqueue-in`).
    Enqueue(&'a Enqueue),
}

/// What the port answers for one [`TxEffect`], of the effect's own kind.
#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    File(FileWritten),
    /// Whether the progress write changed a row.
    Progress(bool),
    /// Per run, whether it was inserted.
    Enqueued(Vec<super::enqueue::EnqueueAnswer>),
}

impl Applied {
    /// The answer to a `TxEffect::File`.
    pub fn file(self) -> Result<FileWritten, GuestDbError> {
        match self {
            Applied::File(written) => Ok(written),
            _ => Err(GuestDbError::Refused(Refusal::Failed)),
        }
    }

    /// The answer to a `TxEffect::Progress`.
    pub fn progress(self) -> Result<bool, GuestDbError> {
        match self {
            Applied::Progress(changed) => Ok(changed),
            _ => Err(GuestDbError::Refused(Refusal::Failed)),
        }
    }

    /// The answer to a `TxEffect::Enqueue`.
    pub fn enqueued(self) -> Result<Vec<super::enqueue::EnqueueAnswer>, GuestDbError> {
        match self {
            Applied::Enqueued(inserted) => Ok(inserted),
            _ => Err(GuestDbError::Refused(Refusal::Failed)),
        }
    }
}

/// A backend's open write transaction.
#[async_trait::async_trait]
pub(crate) trait TxSession: Send {
    async fn fetch(&mut self, sql: &str, params: &[SqlValue]) -> Result<SqlRows, GuestDbError>;
    async fn execute(&mut self, sql: &str, params: &[SqlValue]) -> Result<u64, GuestDbError>;
    /// Checks the fence and commits, in the transaction; rolls back if the fence fails.
    async fn commit(&mut self, fence: &Fence) -> Result<(), GuestDbError>;
    /// Applies one effect in the transaction, at once and in the order the guest made
    /// them, so it commits with the guest's writes (fenced) or not at all.
    async fn apply(&mut self, effect: TxEffect<'_>) -> Result<Applied, GuestDbError>;
    /// Rolls back whatever is open and gives the connection back.
    async fn release(self: Box<Self>);
    /// Whether the database takes no other write while this transaction is open (SQLite,
    /// once its one write lock is taken).
    fn blocks_other_writers(&self) -> bool;
}

/// An open write transaction. Dropping it rolls it back. It is also rolled back when
/// its time bound passes, even while the guest is idle, so one job cannot hold locks
/// (SQLite's single write lock above all) for long.
pub struct GuestTx {
    session: Arc<Mutex<Option<Box<dyn TxSession>>>>,
    fence: Fence,
    /// The task that rolls it back at its time bound: stopped with the transaction, so a
    /// guest that begins and ends transactions in a loop leaves no sleeping tasks behind.
    watchdog: tokio::task::AbortHandle,
}

impl Drop for GuestTx {
    fn drop(&mut self) {
        self.watchdog.abort();
    }
}

impl GuestTx {
    fn new(session: Box<dyn TxSession>, fence: Fence, deadline: Instant) -> GuestTx {
        let session = Arc::new(Mutex::new(Some(session)));
        let watched = Arc::downgrade(&session);
        let watchdog = tokio::spawn(async move {
            tokio::time::sleep_until(deadline).await;
            if let Some(session) = watched.upgrade() {
                let expired = session.lock().await.take();
                if let Some(expired) = expired {
                    expired.release().await;
                }
            }
        });
        GuestTx {
            session,
            fence,
            watchdog: watchdog.abort_handle(),
        }
    }

    pub async fn query(&mut self, sql: &str, params: &[SqlValue]) -> Result<SqlRows, GuestDbError> {
        check_statement(sql, params)?;
        let mut guard = self.session.lock().await;
        let session = guard
            .as_mut()
            .ok_or(GuestDbError::Refused(Refusal::TransactionTimeout))?;
        session.fetch(sql, params).await
    }

    pub async fn execute(&mut self, sql: &str, params: &[SqlValue]) -> Result<u64, GuestDbError> {
        check_statement(sql, params)?;
        let mut guard = self.session.lock().await;
        let session = guard
            .as_mut()
            .ok_or(GuestDbError::Refused(Refusal::TransactionTimeout))?;
        session.execute(sql, params).await
    }

    /// Whether the database takes no other write while this transaction is open: then a
    /// write the host commits on its own would wait for this transaction to end.
    pub async fn blocks_other_writers(&self) -> bool {
        self.session
            .lock()
            .await
            .as_ref()
            .is_some_and(|s| s.blocks_other_writers())
    }

    /// Applies another capability's write inside the transaction (`TxSession::apply`).
    pub async fn apply(&mut self, effect: TxEffect<'_>) -> Result<Applied, GuestDbError> {
        let mut guard = self.session.lock().await;
        let session = guard
            .as_mut()
            .ok_or(GuestDbError::Refused(Refusal::TransactionTimeout))?;
        session.apply(effect).await
    }

    /// Checks the fence and commits, both in the transaction: all or nothing.
    pub async fn commit(self) -> Result<(), GuestDbError> {
        let mut session = self
            .session
            .lock()
            .await
            .take()
            .ok_or(GuestDbError::Refused(Refusal::TransactionTimeout))?;
        let result = session.commit(&self.fence).await;
        session.release().await;
        result
    }

    pub async fn rollback(self) {
        let session = self.session.lock().await.take();
        if let Some(session) = session {
            session.release().await;
        }
    }
}

fn check_statement(sql: &str, params: &[SqlValue]) -> Result<(), GuestDbError> {
    if sql.len() > MAX_SQL_BYTES {
        return Err(GuestDbError::Invalid("statement-too-long"));
    }
    if params.len() > MAX_PARAMS {
        return Err(GuestDbError::Invalid("too-many-params"));
    }
    if params.iter().any(|p| p.content_bytes() > MAX_VALUE_BYTES) {
        return Err(GuestDbError::Invalid("value-too-large"));
    }
    if params.iter().map(SqlValue::content_bytes).sum::<usize>() > MAX_PARAMS_BYTES {
        return Err(GuestDbError::Invalid("params-too-large"));
    }
    Ok(())
}

/// Collects a statement's rows into `SqlRows`, refusing results past `MAX_ROWS` or
/// `MAX_RESULT_BYTES` as soon as they get there.
pub(crate) async fn collect_rows<R: sqlx::Row>(
    mut rows: impl futures_util::Stream<Item = Result<R, sqlx::Error>> + Unpin,
    classify: impl Fn(&sqlx::Error) -> GuestDbError,
    decode: impl Fn(&R, usize) -> Result<Vec<SqlValue>, GuestDbError>,
) -> Result<SqlRows, GuestDbError> {
    use futures_util::TryStreamExt;
    use sqlx::Column;
    let mut out = SqlRows::default();
    let (mut count, mut bytes) = (0usize, 0usize);
    while let Some(row) = rows.try_next().await.map_err(|e| classify(&e))? {
        if out.columns.is_empty() {
            out.columns = row.columns().iter().map(|c| c.name().to_string()).collect();
        }
        let values = decode(&row, MAX_RESULT_BYTES.saturating_sub(bytes))?;
        count += 1;
        bytes += row_bytes(&values);
        if count > MAX_ROWS || bytes > MAX_RESULT_BYTES {
            return Err(GuestDbError::Invalid("result-too-large"));
        }
        out.rows.push(values);
    }
    Ok(out)
}
