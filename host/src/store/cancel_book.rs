//! On SQLite, the cancels decided but not yet written to the database: a side database
//! beside it (`<db>.cancels`, its own file and WAL), so a cancel is recorded without the
//! database's one write lock, which a guest's transaction may hold for up to its bound.
//!
//! A cancel writes its run here first (a point insert that waits only for other cancels),
//! and from then on the run counts as ended for every write of its attempt: the fence
//! (`queries`, `{unmarked_holder}`) asks [`FUNCTION`] on every connection that runs it —
//! the host's pools, the writer, the probe, the guests' pool, where the authorizer refuses
//! the function to guest SQL —, a claim passes the run over and an ending leaves it for
//! the cancel. The cancel's own transaction (run row, lease, report) follows as soon as it
//! gets the write lock, through whichever process gets there first (`crate::runs::controls`),
//! and then the entry is removed. Guest connections never attach this file.

use libsqlite3_sys as ffi;
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use std::ffi::{c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::error::{Result, StoreError};
use super::pool::SQLITE_BUSY_TIMEOUT;

/// The SQL function the fence calls: 1 if its argument is a run with a cancel recorded.
pub(crate) const FUNCTION: &str = "jobhost_cancel_marked";

/// A cancel recorded here: the run and how it is to end (an operator's cancel, or what
/// its family decided), with the tenant it was asked for (`None`: the operator).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelMark {
    pub run_id: String,
    pub tenant: Option<String>,
    pub status: String,
    pub code: String,
    pub report: String,
    pub by_operator: bool,
}

pub(crate) struct CancelBook {
    path: PathBuf,
    /// Reads on the calling thread: the fence's function runs inside a statement.
    reads: Mutex<Connection>,
}

impl CancelBook {
    /// Opens (creating) the book beside the SQLite database at `db`.
    pub(crate) fn open(db: &Path) -> Result<Arc<CancelBook>> {
        let path = db.with_extension("cancels");
        let writes = connect(&path, true).map_err(|e| cannot_open(&path, &e))?;
        writes
            .execute_batch(
                "CREATE TABLE IF NOT EXISTS jobhost_cancels (run_id TEXT PRIMARY KEY, \
                 tenant TEXT, status TEXT NOT NULL, code TEXT NOT NULL, report TEXT NOT NULL, \
                 by_operator INTEGER NOT NULL, marked_at INTEGER NOT NULL)",
            )
            .map_err(|e| cannot_open(&path, &e))?;
        let reads = connect(&path, false).map_err(|e| cannot_open(&path, &e))?;
        // A read of a WAL file waits only while another connection recovers it.
        reads
            .busy_timeout(std::time::Duration::from_secs(1))
            .map_err(|e| cannot_open(&path, &e))?;
        Ok(Arc::new(CancelBook {
            path,
            reads: Mutex::new(reads),
        }))
    }

    /// Whether `run_id` has a cancel recorded.
    fn is_marked(&self, run_id: &str) -> rusqlite::Result<bool> {
        let conn = self
            .reads
            .lock()
            .map_err(|_| rusqlite::Error::InvalidQuery)?;
        let mut statement =
            conn.prepare_cached("SELECT 1 FROM jobhost_cancels WHERE run_id = ?1")?;
        Ok(statement
            .query_row([run_id], |_| Ok(()))
            .optional()?
            .is_some())
    }

    /// Records `marks` (a run marked already keeps its first mark). Runs on a blocking
    /// thread: it may wait for another process's cancel.
    pub(crate) async fn mark(self: &Arc<Self>, marks: Vec<CancelMark>) -> Result<()> {
        self.blocking(move |conn| {
            let tx = conn.unchecked_transaction()?;
            {
                let mut insert = tx.prepare_cached(
                    "INSERT INTO jobhost_cancels (run_id, tenant, status, code, report, \
                     by_operator, marked_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, \
                     CAST(unixepoch('subsec') * 1000 AS INTEGER)) ON CONFLICT DO NOTHING",
                )?;
                for m in &marks {
                    insert.execute(rusqlite::params![
                        m.run_id,
                        m.tenant,
                        m.status,
                        m.code,
                        m.report,
                        m.by_operator
                    ])?;
                }
            }
            tx.commit()
        })
        .await
    }

    /// Every cancel recorded and not yet written to the database. Read on the book's kept
    /// read connection (on a blocking thread): a serving host asks every 250 ms, and
    /// opening a connection each time would be most of the cost.
    pub(crate) async fn marks(self: &Arc<Self>) -> Result<Vec<CancelMark>> {
        let book = self.clone();
        Self::answer(
            tokio::task::spawn_blocking(move || {
                let conn = book
                    .reads
                    .lock()
                    .map_err(|_| rusqlite::Error::InvalidQuery)?;
                let mut statement = conn.prepare_cached(
                    "SELECT run_id, tenant, status, code, report, by_operator \
                 FROM jobhost_cancels ORDER BY marked_at, run_id",
                )?;
                statement
                    .query_map([], |row| {
                        Ok(CancelMark {
                            run_id: row.get(0)?,
                            tenant: row.get(1)?,
                            status: row.get(2)?,
                            code: row.get(3)?,
                            report: row.get(4)?,
                            by_operator: row.get(5)?,
                        })
                    })?
                    .collect()
            })
            .await,
        )
    }

    /// Removes the marks of `runs`, whose cancels are in the database (or that ended
    /// otherwise before them).
    pub(crate) async fn clear(self: &Arc<Self>, runs: Vec<String>) -> Result<()> {
        self.blocking(move |conn| {
            let tx = conn.unchecked_transaction()?;
            {
                let mut delete =
                    tx.prepare_cached("DELETE FROM jobhost_cancels WHERE run_id = ?1")?;
                for run in &runs {
                    delete.execute([run])?;
                }
            }
            tx.commit()
        })
        .await
    }

    /// Runs `work` on a connection of its own, on a blocking thread (never a runtime
    /// worker: it may wait for another process's lock).
    async fn blocking<T: Send + 'static>(
        self: &Arc<Self>,
        work: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T> {
        let path = self.path.clone();
        Self::answer(
            tokio::task::spawn_blocking(move || {
                let conn = connect(&path, false)?;
                work(&conn)
            })
            .await,
        )
    }

    /// A blocking task's answer as the store's error (its fixed SQLite code).
    fn answer<T>(
        done: std::result::Result<rusqlite::Result<T>, tokio::task::JoinError>,
    ) -> Result<T> {
        done.map_err(|_| StoreError::WriterStopped)?
            .map_err(|e| match e {
                rusqlite::Error::SqliteFailure(failure, _) => StoreError::Sqlite {
                    code: failure.extended_code,
                },
                _ => StoreError::Sqlite { code: 1 },
            })
    }

    /// Installs [`FUNCTION`] on the connection `db`.
    ///
    /// # Safety
    /// `db` is an open connection the caller may use on this thread.
    pub(crate) unsafe fn install(self: &Arc<Self>, db: *mut ffi::sqlite3) -> c_int {
        let name = c"jobhost_cancel_marked";
        let book = Arc::into_raw(self.clone()) as *mut c_void;
        // SAFETY: `book` is released by `release` when SQLite drops the function (with the
        // connection, or if registration fails).
        unsafe {
            ffi::sqlite3_create_function_v2(
                db,
                name.as_ptr(),
                1,
                ffi::SQLITE_UTF8 | ffi::SQLITE_DIRECTONLY,
                book,
                Some(marked),
                None,
                None,
                Some(release),
            )
        }
    }
}

fn connect(path: &Path, create: bool) -> rusqlite::Result<Connection> {
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(SQLITE_BUSY_TIMEOUT)?;
    conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;")?;
    Ok(conn)
}

fn cannot_open(path: &Path, e: &rusqlite::Error) -> StoreError {
    let code = match e {
        rusqlite::Error::SqliteFailure(failure, _) => failure.extended_code,
        _ => 1,
    };
    StoreError::Open(format!(
        "cannot open the cancel book {} (SQLite code {code}): check that this user may create and write files beside the database",
        path.display()
    ))
}

/// # Safety
/// Called by SQLite with the user data `install` gave, one argument.
unsafe extern "C" fn marked(
    ctx: *mut ffi::sqlite3_context,
    argc: c_int,
    argv: *mut *mut ffi::sqlite3_value,
) {
    // SAFETY: the user data is the `CancelBook` `install` leaked, alive while the function
    // is; `argv` holds `argc` values.
    unsafe {
        let book = &*(ffi::sqlite3_user_data(ctx) as *const CancelBook);
        if argc != 1 {
            ffi::sqlite3_result_error_code(ctx, ffi::SQLITE_MISUSE);
            return;
        }
        let value = *argv;
        let text = ffi::sqlite3_value_text(value);
        if text.is_null() {
            ffi::sqlite3_result_int(ctx, 0);
            return;
        }
        let len = ffi::sqlite3_value_bytes(value);
        let bytes = std::slice::from_raw_parts(text, usize::try_from(len).unwrap_or(0));
        let Ok(run_id) = std::str::from_utf8(bytes) else {
            ffi::sqlite3_result_int(ctx, 0);
            return;
        };
        match book.is_marked(run_id) {
            Ok(marked) => ffi::sqlite3_result_int(ctx, c_int::from(marked)),
            // Unreadable: the write fails rather than commits unchecked.
            Err(_) => ffi::sqlite3_result_error_code(ctx, ffi::SQLITE_BUSY),
        }
    }
}

/// # Safety
/// `book` is the pointer `install` leaked.
unsafe extern "C" fn release(book: *mut c_void) {
    // SAFETY: see above; SQLite calls this once.
    drop(unsafe { Arc::from_raw(book as *const CancelBook) });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(run: &str) -> CancelMark {
        CancelMark {
            run_id: run.into(),
            tenant: None,
            status: "cancelled".into(),
            code: "cancelled_by_operator".into(),
            report: "cancelled".into(),
            by_operator: true,
        }
    }

    #[tokio::test]
    async fn a_marked_run_is_seen_by_the_function_of_another_connection_until_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("t.db");
        let book = CancelBook::open(&db).unwrap();
        let other = CancelBook::open(&db).unwrap();
        let conn = Connection::open(&db).unwrap();
        // SAFETY: the connection is open and used on this thread only.
        assert_eq!(unsafe { other.install(conn.handle()) }, ffi::SQLITE_OK);
        let asked = |run: &str| -> i64 {
            conn.query_row("SELECT jobhost_cancel_marked(?1)", [run], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(asked("r1"), 0);
        book.mark(vec![mark("r1")]).await.unwrap();
        assert_eq!(asked("r1"), 1, "seen at once, by another book's connection");
        assert_eq!(asked("r2"), 0);
        let mut again = mark("r1");
        again.code = "parent_failed".into();
        book.mark(vec![again]).await.unwrap();
        assert_eq!(
            other.marks().await.unwrap(),
            [mark("r1")],
            "the first mark stays"
        );
        other.clear(vec!["r1".into()]).await.unwrap();
        assert_eq!(asked("r1"), 0);
        assert!(book.marks().await.unwrap().is_empty());
        drop(conn);
        assert_eq!(
            Arc::strong_count(&other),
            1,
            "the connection's hold is released"
        );
    }
}
