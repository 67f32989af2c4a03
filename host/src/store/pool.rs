//! The two pools behind the store, and the one macro that runs a body on either.

use std::time::Duration;

/// Which engine a URL selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn from_url(url: &str) -> Option<Backend> {
        if url.starts_with("sqlite:") {
            Some(Backend::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Some(Backend::Postgres)
        } else {
            None
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// How long SQLite waits for the write lock before giving up. Guest transactions are
/// bounded well below this (see `capability::db`), so a busy job delays host writes, it
/// does not fail them.
pub const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Debug)]
pub enum Pool {
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool),
}

/// Runs `$body` with `$p` bound to the concrete pool: the body is written once and
/// compiled for each driver, so no statement is written twice.
macro_rules! with_pool {
    ($pool:expr, $p:ident => $body:expr) => {
        match &$pool {
            $crate::store::pool::Pool::Sqlite($p) => $body,
            $crate::store::pool::Pool::Postgres($p) => $body,
        }
    };
}

/// A pooled connection held for one compound write.
///
/// Unless [`Exclusive::release`] is called once its transaction has ended (committed or
/// rolled back), dropping it closes the connection instead of returning it to the pool: a
/// write dropped half-way (a cancelled call, a shutdown) must never hand the next user a
/// connection that is still inside a transaction, holding locks (on SQLite, the write
/// lock). Closing it makes the server roll back.
pub(crate) struct Exclusive<DB: sqlx::Database> {
    conn: Option<sqlx::pool::PoolConnection<DB>>,
}

impl<DB: sqlx::Database> Exclusive<DB> {
    pub(crate) async fn acquire(pool: &sqlx::Pool<DB>) -> Result<Self, sqlx::Error> {
        Ok(Exclusive {
            conn: Some(pool.acquire().await?),
        })
    }

    /// The transaction ended: the connection may serve the next user.
    pub(crate) fn release(mut self) {
        self.conn.take();
    }
}

impl<DB: sqlx::Database> std::ops::Deref for Exclusive<DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &DB::Connection {
        self.conn.as_ref().expect("held until released or dropped")
    }
}

impl<DB: sqlx::Database> std::ops::DerefMut for Exclusive<DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        self.conn.as_mut().expect("held until released or dropped")
    }
}

impl<DB: sqlx::Database> Drop for Exclusive<DB> {
    fn drop(&mut self) {
        if let Some(mut conn) = self.conn.take() {
            conn.close_on_drop();
        }
    }
}
