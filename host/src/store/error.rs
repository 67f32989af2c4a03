//! The store's one error type: what a caller may show, never a driver's message.

use super::error_class::{self, ErrorClass, describe, describe_sqlite};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The text is a fixed description of the failure's kind, never the driver's message
    /// (which can quote a URL or a statement).
    #[error("database error: {}", describe(.0))]
    Database(#[from] sqlx::Error),
    #[error("unsupported database URL: use sqlite://PATH or postgres://USER@HOST/DB")]
    UnsupportedUrl,
    #[error("cannot create the database directory {path}: {source}")]
    CreateDir {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read migrations in {path}: {source}")]
    MigrationDir {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("invalid migration {0}: name files NNNN_name.sql, one version each")]
    MigrationName(String),
    #[error("{scope} migration {name} was changed after it was applied")]
    MigrationChanged { scope: &'static str, name: String },
    #[error("migration {name} failed: {}", describe(.source))]
    MigrationFailed { name: String, source: sqlx::Error },
    /// The database could not be opened; the text says why in words, naming the file or
    /// the server, user and database, never a password.
    #[error("{0}")]
    Open(String),
    /// A statement of the SQLite writer failed (its SQLite code only).
    #[error("database error: {}", describe_sqlite(*.code))]
    Sqlite { code: i32 },
    #[error("database error: the SQLite writer stopped")]
    WriterStopped,
    /// A batch could not reach the database; each of its items gets this.
    #[error("database error: the database could not be reached")]
    Unreachable,
    #[error("database error: an answer the host cannot read")]
    Unreadable,
    /// A bounded read (payload search) ran past its bound and was stopped.
    #[error("the search ran past its time bound")]
    TimedOut,
}

impl StoreError {
    /// What the error means, by the code of the backend that returned it
    /// (`error_class`).
    pub fn class(&self) -> ErrorClass {
        match self {
            StoreError::Database(e) | StoreError::MigrationFailed { source: e, .. } => {
                error_class::of(e)
            }
            StoreError::Sqlite { code } => error_class::of_sqlite(*code),
            StoreError::WriterStopped | StoreError::Unreachable => ErrorClass::Unavailable,
            _ => ErrorClass::Other,
        }
    }

    /// Whether SQLite's write lock stayed held by another process for the whole busy
    /// timeout (on SQLite, one process serves a file; see `docs/internals/sqlite.md`).
    pub fn is_locked(&self) -> bool {
        self.class() == ErrorClass::Locked
    }

    /// Whether the database could not be reached or failed mid-statement (as opposed to a
    /// refused statement): the runner turns this into `driver_failed`.
    pub fn is_unavailable(&self) -> bool {
        self.class() == ErrorClass::Unavailable
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
