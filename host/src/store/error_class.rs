//! What a database error means, read by each backend's own codes, and the fixed words
//! that say so: every decision on a host-side database error (retry, wait, give up, which
//! exit code, which answer) and every description of one is made here.
//!
//! SQLite answers with a result code, whose low byte is the primary code (5 `BUSY`,
//! 6 `LOCKED`, ...). Postgres answers with a SQLSTATE: five characters, the first two its
//! class. A SQLSTATE is not a number: read as one, 22021 (a NUL in text) and 42501 (no
//! privilege) both end in SQLite's `BUSY` byte.

use sqlx::error::DatabaseError;
use sqlx::postgres::PgDatabaseError;
use sqlx::sqlite::SqliteError;

/// What a failed statement means to the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// SQLite's lock stayed held by another connection for the whole busy timeout
    /// (`SQLITE_BUSY`, `SQLITE_LOCKED`, any extended code).
    Locked,
    /// Postgres rolled the transaction back for a serialization failure (40001) or a
    /// deadlock (40P01): running it again is safe.
    Conflict,
    /// The database could not be reached, or dropped the connection mid-statement: the
    /// driver's I/O, TLS, protocol and pool errors, and Postgres classes 08 (connection,
    /// but 08P01), 53 (out of resources), 57P01–57P03 (shut down, or starting).
    Unavailable,
    /// A value the database will not take: Postgres class 22 (22021 a NUL in text, an
    /// out-of-range number, ...), SQLite `TOOBIG` and `MISMATCH`.
    InvalidValue,
    /// The host's own role or file lacks a privilege: Postgres 42501, SQLite `PERM`,
    /// `READONLY` and `AUTH`.
    Privilege,
    /// Anything else: a constraint, a missing table, a row the host cannot read.
    Other,
}

/// SQLite's primary result codes the host tells apart.
mod sqlite {
    pub const PERM: i32 = 3;
    pub const BUSY: i32 = 5;
    pub const LOCKED: i32 = 6;
    pub const READONLY: i32 = 8;
    pub const TOOBIG: i32 = 18;
    pub const MISMATCH: i32 = 20;
    pub const AUTH: i32 = 23;
}

/// The class of a SQLite result code (primary or extended).
pub fn of_sqlite(code: i32) -> ErrorClass {
    match code & 0xff {
        sqlite::BUSY | sqlite::LOCKED => ErrorClass::Locked,
        sqlite::PERM | sqlite::READONLY | sqlite::AUTH => ErrorClass::Privilege,
        sqlite::TOOBIG | sqlite::MISMATCH => ErrorClass::InvalidValue,
        _ => ErrorClass::Other,
    }
}

/// The class of a Postgres SQLSTATE.
pub fn of_sqlstate(state: &str) -> ErrorClass {
    match state {
        "40001" | "40P01" => ErrorClass::Conflict,
        "42501" => ErrorClass::Privilege,
        // A protocol violation answers the statement (parameters that do not match it),
        // not the connection.
        "08P01" => ErrorClass::Other,
        "57P01" | "57P02" | "57P03" => ErrorClass::Unavailable,
        s if s.starts_with("08") || s.starts_with("53") => ErrorClass::Unavailable,
        s if s.starts_with("22") => ErrorClass::InvalidValue,
        _ => ErrorClass::Other,
    }
}

/// The class of a driver error, by the code of the backend that returned it.
pub fn of(error: &sqlx::Error) -> ErrorClass {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => ErrorClass::Unavailable,
        sqlx::Error::Database(e) => match code_of(e.as_ref()) {
            Some(Code::Sqlite(code)) => of_sqlite(code),
            Some(Code::Sqlstate(state)) => of_sqlstate(state),
            None => ErrorClass::Other,
        },
        _ => ErrorClass::Other,
    }
}

/// A database error's code, typed by the backend that sent it.
enum Code<'a> {
    Sqlite(i32),
    Sqlstate(&'a str),
}

fn code_of(error: &dyn DatabaseError) -> Option<Code<'_>> {
    if let Some(pg) = error.try_downcast_ref::<PgDatabaseError>() {
        return Some(Code::Sqlstate(pg.code()));
    }
    let sqlite = error.try_downcast_ref::<SqliteError>()?;
    sqlite.code()?.parse().ok().map(Code::Sqlite)
}

/// A fixed, secret-free description of a driver error: its kind and, for errors the
/// database returned, its code. Never the driver's message, which can quote a URL, a
/// statement or a value.
pub fn describe(error: &sqlx::Error) -> String {
    match error {
        sqlx::Error::Configuration(_) => "invalid connection settings".into(),
        sqlx::Error::Io(e) => format!("connection failed ({})", e.kind()),
        sqlx::Error::Tls(_) => "TLS failed".into(),
        sqlx::Error::Protocol(_) => "protocol error".into(),
        sqlx::Error::PoolTimedOut => "timed out waiting for a connection".into(),
        sqlx::Error::PoolClosed => "connection pool closed".into(),
        sqlx::Error::WorkerCrashed => "database worker stopped".into(),
        sqlx::Error::Database(e) => match code_of(e.as_ref()) {
            Some(Code::Sqlite(code)) => describe_sqlite(code),
            Some(Code::Sqlstate(state)) => describe_sqlstate(state),
            None => "statement failed".into(),
        },
        sqlx::Error::RowNotFound => "row not found".into(),
        sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => "unexpected value".into(),
        _ => "driver error".into(),
    }
}

/// A SQLite result code in words.
pub fn describe_sqlite(code: i32) -> String {
    match of_sqlite(code) {
        ErrorClass::Locked => format!(
            "another process holds the SQLite database's write lock (waited {} s; \
             one `host serve` per file — use Postgres for several hosts)",
            super::pool::SQLITE_BUSY_TIMEOUT.as_secs()
        ),
        ErrorClass::Privilege => format!(
            "SQLite refused the host access (code {code}): check that the database file \
             and its directory are writable by this user"
        ),
        ErrorClass::InvalidValue => format!("SQLite refused a value (code {code})"),
        _ => format!("statement failed (code {code})"),
    }
}

/// A Postgres SQLSTATE in words.
pub fn describe_sqlstate(state: &str) -> String {
    match of_sqlstate(state) {
        ErrorClass::Privilege => format!(
            "Postgres refused the host's role a privilege it needs (SQLSTATE {state}): \
             connect as the database's owner, or grant the role CREATE on the schema and \
             rights on the jobhost_ tables"
        ),
        ErrorClass::Conflict => format!(
            "Postgres rolled the transaction back for a conflict with another (SQLSTATE {state})"
        ),
        ErrorClass::Unavailable => {
            format!("Postgres dropped or refused the connection (SQLSTATE {state})")
        }
        ErrorClass::InvalidValue => format!("Postgres refused a value (SQLSTATE {state})"),
        _ => format!("statement failed (SQLSTATE {state})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_codes_are_read_by_their_primary_code() {
        for (code, class) in [
            (5, ErrorClass::Locked),
            (517, ErrorClass::Locked), // SQLITE_BUSY_SNAPSHOT
            (6, ErrorClass::Locked),
            (262, ErrorClass::Locked), // SQLITE_LOCKED_SHAREDCACHE
            (3, ErrorClass::Privilege),
            (8, ErrorClass::Privilege),
            (1032, ErrorClass::Privilege), // SQLITE_READONLY_DBMOVED
            (23, ErrorClass::Privilege),
            (18, ErrorClass::InvalidValue),
            (20, ErrorClass::InvalidValue),
            (1, ErrorClass::Other),
            (19, ErrorClass::Other),
            (2067, ErrorClass::Other), // SQLITE_CONSTRAINT_UNIQUE
        ] {
            assert_eq!(of_sqlite(code), class, "code {code}");
        }
        assert!(describe_sqlite(5).contains("write lock"));
        assert!(!describe_sqlite(19).contains("write lock"));
    }

    #[test]
    fn sqlstates_are_read_as_text_never_as_sqlite_codes() {
        for (state, class) in [
            ("40001", ErrorClass::Conflict),
            ("40P01", ErrorClass::Conflict),
            ("08006", ErrorClass::Unavailable),
            ("08001", ErrorClass::Unavailable),
            ("08P01", ErrorClass::Other),
            ("57P01", ErrorClass::Unavailable),
            ("57P03", ErrorClass::Unavailable),
            ("53300", ErrorClass::Unavailable),
            ("22021", ErrorClass::InvalidValue),
            ("22P02", ErrorClass::InvalidValue),
            ("22003", ErrorClass::InvalidValue),
            ("42501", ErrorClass::Privilege),
            ("42P01", ErrorClass::Other),
            ("23505", ErrorClass::Other),
            ("57014", ErrorClass::Other),
        ] {
            assert_eq!(of_sqlstate(state), class, "SQLSTATE {state}");
        }
        // Both end in SQLite's BUSY byte when read as numbers; neither is a lock.
        for state in ["22021", "42501"] {
            assert_eq!(state.parse::<i32>().unwrap() & 0xff, sqlite::BUSY);
            assert_ne!(of_sqlstate(state), ErrorClass::Locked);
            assert!(!describe_sqlstate(state).contains("SQLite"), "{state}");
        }
        assert!(describe_sqlstate("42501").contains("privilege"));
    }

    #[test]
    fn driver_errors_without_a_code_are_classed_by_kind() {
        let io = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(of(&io), ErrorClass::Unavailable);
        assert_eq!(of(&sqlx::Error::PoolTimedOut), ErrorClass::Unavailable);
        assert_eq!(of(&sqlx::Error::RowNotFound), ErrorClass::Other);
    }

    #[tokio::test]
    async fn a_held_sqlite_lock_is_read_as_locked_and_a_missing_table_is_not() {
        use sqlx::sqlite::SqliteConnectOptions;
        use sqlx::{Connection, Executor};
        let dir = tempfile::tempdir().expect("temp dir");
        let options = SqliteConnectOptions::new()
            .filename(dir.path().join("lock.db"))
            .create_if_missing(true)
            .busy_timeout(std::time::Duration::ZERO);
        let mut holder = sqlx::SqliteConnection::connect_with(&options)
            .await
            .unwrap();
        holder.execute("CREATE TABLE t (x INTEGER)").await.unwrap();
        holder.execute("BEGIN IMMEDIATE").await.unwrap();
        let mut other = sqlx::SqliteConnection::connect_with(&options)
            .await
            .unwrap();
        let locked = other.execute("INSERT INTO t VALUES (1)").await.unwrap_err();
        assert_eq!(of(&locked), ErrorClass::Locked);
        assert!(
            describe(&locked).contains("write lock"),
            "{}",
            describe(&locked)
        );
        let missing = other.execute("SELECT * FROM nowhere").await.unwrap_err();
        assert_eq!(of(&missing), ErrorClass::Other);
        assert_eq!(describe(&missing), "statement failed (code 1)");
    }
}
