//! Opening the host's own connections, with errors a person can act on: a database path
//! that is a directory, a Postgres database or user that does not exist, a server that
//! refuses the connection — each said in words (naming the file, or the server, user and
//! database, never the password), and a refused connection fails at once rather than
//! after a pool's retries.

use super::cancel_book::CancelBook;
use super::error::StoreError;
use super::pool::SQLITE_BUSY_TIMEOUT;
use sqlx::ConnectOptions;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqliteSynchronous};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// The settings of every connection to a SQLite database: WAL so readers never wait for
/// the writer, and a busy timeout so writers queue for the single write lock instead of
/// failing. Statements are logged only at debug level.
pub(crate) fn sqlite_options(url: &str) -> Result<SqliteConnectOptions, sqlx::Error> {
    Ok(SqliteConnectOptions::from_str(url)?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(SQLITE_BUSY_TIMEOUT)
        .foreign_keys(true)
        .log_slow_statements(log::LevelFilter::Debug, Duration::from_secs(1)))
}

/// The SQLite database file `url` names, its directory created: an error in words if it
/// cannot be a file.
pub(crate) fn sqlite_path(url: &str) -> Result<std::path::PathBuf, StoreError> {
    let path = sqlite_options(url)?.get_filename().to_path_buf();
    if path.is_dir() {
        return Err(StoreError::Open(format!(
            "the SQLite database path {} is a directory: give a file path, e.g. sqlite://{}/jobhost.db",
            path.display(),
            path.display()
        )));
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    Ok(path)
}

/// Opens a SQLite pool of the host's own, each connection with the fence's function over
/// `cancels` installed.
pub(crate) async fn open_sqlite(
    url: &str,
    max: u32,
    cancels: &Arc<CancelBook>,
) -> Result<SqlitePool, StoreError> {
    let path = sqlite_path(url)?;
    let options = sqlite_options(url)?;
    let cancels = cancels.clone();
    sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(max)
        // An embedded connection does not go stale like a socket: no ping per acquire.
        .test_before_acquire(false)
        .acquire_timeout(Duration::from_secs(30))
        .after_connect(move |conn, _| {
            let cancels = cancels.clone();
            Box::pin(async move { install_cancels(conn, &cancels).await })
        })
        .connect_with(options)
        .await
        .map_err(|e| match &e {
            sqlx::Error::Database(db) if db.code().as_deref() == Some("14") => {
                StoreError::Open(format!(
                    "cannot open the SQLite database {}: check that it is a file this user may read and write",
                    path.display()
                ))
            }
            _ => e.into(),
        })
}

/// Installs the fence's function over `cancels` on a new connection.
pub(crate) async fn install_cancels(
    conn: &mut sqlx::SqliteConnection,
    cancels: &Arc<CancelBook>,
) -> Result<(), sqlx::Error> {
    let mut handle = conn.lock_handle().await?;
    // SAFETY: the handle is locked for us and open.
    let code = unsafe { cancels.install(handle.as_raw_handle().as_ptr()) };
    if code == libsqlite3_sys::SQLITE_OK {
        Ok(())
    } else {
        Err(sqlx::Error::Protocol(format!(
            "cannot install the cancel book's function (SQLite code {code})"
        )))
    }
}

/// Opens the host's Postgres pool. One connection is made first, directly, so a wrong
/// URL or an absent server is reported at once and in words.
pub(crate) async fn open_postgres(url: &str) -> Result<PgPool, StoreError> {
    let options = PgConnectOptions::from_str(url)?
        .log_slow_statements(log::LevelFilter::Debug, Duration::from_secs(1));
    let first = options.connect().await.map_err(|e| explain(&options, &e))?;
    let pool = PgPoolOptions::new()
        .max_connections(16)
        .acquire_timeout(Duration::from_secs(10))
        // A connection that died is found by the statement that uses it, and the runner
        // retries what the database did not answer; a ping before every use would double
        // the round trips of every short write.
        .test_before_acquire(false)
        .connect_lazy_with(options);
    drop(first);
    Ok(pool)
}

/// Says why a first Postgres connection failed, in words.
fn explain(options: &PgConnectOptions, error: &sqlx::Error) -> StoreError {
    let server = format!("{}:{}", options.get_host(), options.get_port());
    let user = options.get_username();
    let database = options.get_database().unwrap_or(user);
    let text = match error {
        sqlx::Error::Io(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            format!(
                "Postgres at {server} refused the connection: is the server running, and on that port?"
            )
        }
        sqlx::Error::Io(e) => format!("cannot reach Postgres at {server}: {}", e.kind()),
        sqlx::Error::Database(db) => match db.code().as_deref() {
            Some("3D000") => format!(
                "Postgres at {server} has no database \"{database}\": create it, or fix the URL"
            ),
            Some("28000" | "28P01") => format!(
                "Postgres at {server} refused user \"{user}\": check the user and password in the URL (and pg_hba.conf)"
            ),
            Some("53300") => format!("Postgres at {server} has no connection slots left"),
            _ => format!(
                "Postgres at {server} refused the connection ({})",
                super::error_class::describe(error)
            ),
        },
        sqlx::Error::Tls(_) => format!("the TLS handshake with Postgres at {server} failed"),
        _ => format!(
            "cannot connect to Postgres at {server} ({})",
            super::error_class::describe(error)
        ),
    };
    StoreError::Open(text)
}

/// Claims a SQLite database file for one serving process, for as long as the returned
/// file is kept open (the claim ends with the process, however it ends).
///
/// SQLite has one write lock per file: several serving processes on one file would queue
/// behind each other's guest transactions, and a frozen one would stall them all. One
/// `host serve` per file is enforced here; `host run` and the CLI's reads may still share
/// the file. A fleet uses Postgres.
pub fn claim_for_serving(url: &str) -> Result<std::fs::File, StoreError> {
    use std::io::{Read, Seek, Write};
    let path = sqlite_options(url)?.get_filename().to_path_buf();
    let lock_path = path.with_extension("serve-lock");
    if let Some(dir) = lock_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)
        .map_err(|e| StoreError::Open(format!("cannot create {}: {e}", lock_path.display())))?;
    if file.try_lock().is_err() {
        let mut holder = String::new();
        let _ = file.read_to_string(&mut holder);
        let holder = holder.trim();
        return Err(StoreError::Open(format!(
            "another `host serve`{} already serves the SQLite database {}: SQLite takes one \
             serving process per file; stop it, or use Postgres (--db postgres://...) to run \
             several hosts",
            if holder.is_empty() {
                String::new()
            } else {
                format!(" (pid {holder})")
            },
            path.display()
        )));
    }
    let _ = file.set_len(0);
    let _ = file.rewind();
    let _ = write!(file, "{}", std::process::id());
    Ok(file)
}
