//! The `Store` handle: the pools, the backend's statements and, on SQLite, the threads
//! that serve it. What it reads and writes is in the files named for the rows.

use super::cancel_book::CancelBook;
use super::claims::sqlite::SqliteWriter;
use super::error::{Result, StoreError};
use super::error_class::ErrorClass;
use super::pool::{Backend, Pool};
use super::probe::SqliteProbe;
use super::queries::{self, Dialect, Queries};
use super::{claims, connect, migrate};
use std::path::Path;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

pub(crate) static SQLITE_QUERIES: LazyLock<Queries> =
    LazyLock::new(|| Queries::render(&queries::SQLITE));
static POSTGRES_QUERIES: LazyLock<Queries> = LazyLock::new(|| Queries::render(&queries::POSTGRES));

#[derive(Clone)]
pub struct Store {
    /// Writes (and, on Postgres, everything).
    pub(super) pool: Pool,
    /// Reads. On SQLite a pool of its own: the writer is a single connection, so the
    /// host's writers queue in the pool instead of sleeping in SQLite's busy handler,
    /// while reads go on in parallel (WAL).
    pub(super) reader: Pool,
    /// On SQLite, lease checks answered on the calling thread (see `probe`).
    pub(super) probe: Option<Arc<SqliteProbe>>,
    /// On SQLite, the writer of claims and endings (see `claims::sqlite`).
    pub(super) writer: Option<Arc<SqliteWriter>>,
    /// On SQLite, the cancels recorded but not yet written (see `cancel_book`).
    pub(super) cancels: Option<Arc<CancelBook>>,
    pub(super) backend: Backend,
    pub(super) dialect: &'static Dialect,
    pub(crate) q: &'static Queries,
    pub(super) url: String,
    /// On Postgres, the tenants with queued runs as last read, and when: the fair claim's
    /// tenants (`claims::QueuedTenants`).
    pub(super) queued_tenants: Arc<claims::QueuedTenants>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the URL: it can carry a password.
        f.debug_struct("Store")
            .field("backend", &self.backend)
            .finish()
    }
}

impl Store {
    /// Opens (creating, for SQLite) the database and applies the host's migrations.
    pub async fn open(url: &str) -> Result<Store> {
        let backend = Backend::from_url(url).ok_or(StoreError::UnsupportedUrl)?;
        let cancels = match backend {
            Backend::Sqlite => Some(CancelBook::open(&connect::sqlite_path(url)?)?),
            Backend::Postgres => None,
        };
        let (pool, reader) = match &cancels {
            Some(book) => {
                let writer = Pool::Sqlite(connect::open_sqlite(url, 1, book).await?);
                (
                    writer,
                    Pool::Sqlite(connect::open_sqlite(url, 4, book).await?),
                )
            }
            None => {
                let pool = Pool::Postgres(connect::open_postgres(url).await?);
                (pool.clone(), pool)
            }
        };
        let (dialect, q) = match backend {
            Backend::Sqlite => (&queries::SQLITE, &*SQLITE_QUERIES),
            Backend::Postgres => (&queries::POSTGRES, &*POSTGRES_QUERIES),
        };
        let host = migrate::host_migrations(backend);
        let functions = migrate::host_repeatables(backend);
        migrate::apply(&pool, dialect, migrate::Scope::Host, &host, &functions).await?;
        let (probe, writer) = match &cancels {
            Some(book) => {
                let options = connect::sqlite_options(url)?;
                let path = options.get_filename();
                (
                    SqliteProbe::open(path, book).map(Arc::new),
                    Some(Arc::new(SqliteWriter::open(path, q, book)?)),
                )
            }
            None => (None, None),
        };
        Ok(Store {
            pool,
            reader,
            probe,
            writer,
            cancels,
            backend,
            dialect,
            q,
            url: url.to_string(),
            queued_tenants: Arc::default(),
        })
    }

    /// Runs a compound write again when Postgres aborted it for a deadlock or a
    /// serialization failure: the transaction rolled back, so running it again is safe.
    pub(super) async fn retrying<T, F, Fut>(&self, mut write: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        const TRIES: u32 = 5;
        let mut tries = 0;
        loop {
            match write().await {
                Err(e) if tries < TRIES && e.class() == ErrorClass::Conflict => {
                    tries += 1;
                    let pause = rand::random_range(1..=10 * u64::from(tries));
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
                result => return result,
            }
        }
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The SQLite store's cancel book.
    pub(crate) fn cancel_book(&self) -> &Arc<CancelBook> {
        self.cancels
            .as_ref()
            .expect("a SQLite store opens its cancel book")
    }

    pub(super) fn writer(&self) -> &SqliteWriter {
        self.writer
            .as_deref()
            .expect("a SQLite store opens its writer")
    }

    /// The URL the store was opened with: for opening further connections (guest access,
    /// notifications), never for printing.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Applies the operator's migrations from `dir`; returns the names applied now.
    pub async fn migrate_operator(&self, dir: &Path) -> Result<Vec<String>> {
        let migrations = migrate::read_dir(dir)?;
        migrate::apply(
            &self.pool,
            self.dialect,
            migrate::Scope::Operator,
            &migrations,
            &[],
        )
        .await
    }

    /// Whether the operator's schema has a table or view named `name`.
    pub async fn table_exists(&self, name: &str) -> Result<bool> {
        let q = self.dialect.table_exists;
        let n: i64 =
            with_pool!(self.reader, p => sqlx::query_scalar(q).bind(name).fetch_one(p).await?);
        Ok(n > 0)
    }

    /// The database's clock, in milliseconds since the epoch: the one clock every host
    /// sharing the database agrees on.
    pub async fn now(&self) -> Result<i64> {
        let q = &self.q.now;
        Ok(with_pool!(self.reader, p => sqlx::query_scalar(q.as_str()).fetch_one(p).await?))
    }

    pub async fn close(&self) {
        with_pool!(self.pool, p => p.close().await);
        with_pool!(self.reader, p => p.close().await);
    }
}
