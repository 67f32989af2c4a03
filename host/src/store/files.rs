//! The rows of `files`: which name points at which object, what waits for a scan, what
//! the collector may delete, and the fenced row changes (`FileWrite`).
//!
//! A `FileWrite` is applied by the statements here on SQLite (with the triggers of
//! migration 0003), and by the functions of migration 0002 on Postgres (which a guest's
//! own connection, logged in as its job's role, may call inside its transaction); either
//! way in a transaction whose commit checks the lease.

use super::error::Result;
use super::handle::Store;
use super::pool::Exclusive;
use super::queries::Queries;
use super::records::Fence;
use super::records::{
    DeadObject, FileRecord, FileWrite, FileWritten, PendingFile, SigningKeyRecord,
};
use sqlx::{Connection, PgConnection, Row, SqliteConnection};

/// Applies a `FileWrite` on a SQLite connection inside an open write transaction (a
/// guest's, which checks the lease as it commits).
pub(crate) async fn apply_sqlite(
    conn: &mut SqliteConnection,
    q: &'static Queries,
    write: &FileWrite,
) -> std::result::Result<FileWritten, sqlx::Error> {
    match write {
        FileWrite::Attach {
            tenant,
            collection,
            name,
            object_key,
            size,
            digest,
            status,
            run_id,
            max_objects,
            max_bytes,
        } => {
            // The triggers of migrations 0003 and 0015 retire the old key and the upload
            // record, and count the tenant's usage; no row back: over its quota.
            let created_at: Option<i64> = sqlx::query_scalar(q.upsert_file.as_str())
                .persistent(false)
                .bind(tenant)
                .bind(collection)
                .bind(name)
                .bind(object_key)
                .bind(size)
                .bind(digest)
                .bind(*status)
                .bind(run_id)
                .bind(max_objects)
                .bind(max_bytes)
                .fetch_optional(&mut *conn)
                .await?;
            Ok(
                created_at.map_or(FileWritten::OverQuota, |created_at| FileWritten::Attached {
                    created_at,
                }),
            )
        }
        FileWrite::Remove {
            tenant,
            collection,
            name,
        } => {
            let removed = sqlx::query(q.delete_file.as_str())
                .persistent(false)
                .bind(tenant)
                .bind(collection)
                .bind(name)
                .execute(&mut *conn)
                .await?
                .rows_affected();
            Ok(FileWritten::Changed(removed == 1))
        }
        FileWrite::Mark {
            collection,
            object_key,
            status,
        } => {
            let changed = sqlx::query(q.mark_file.as_str())
                .persistent(false)
                .bind(collection)
                .bind(object_key)
                .bind(*status)
                .execute(&mut *conn)
                .await?
                .rows_affected();
            Ok(FileWritten::Changed(changed == 1))
        }
    }
}

/// Applies a `FileWrite` on the host's Postgres connection inside an open transaction.
async fn apply_postgres(
    conn: &mut PgConnection,
    write: &FileWrite,
) -> std::result::Result<FileWritten, sqlx::Error> {
    Ok(match write {
        FileWrite::Attach {
            tenant,
            collection,
            name,
            object_key,
            size,
            digest,
            status,
            run_id,
            max_objects,
            max_bytes,
        } => {
            let created_at: Option<i64> = sqlx::query_scalar(
                "SELECT jobhost_attach_file($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            )
            .bind(tenant)
            .bind(collection)
            .bind(name)
            .bind(object_key)
            .bind(size)
            .bind(digest)
            .bind(*status)
            .bind(run_id)
            .bind(max_objects)
            .bind(max_bytes)
            .fetch_one(&mut *conn)
            .await?;
            created_at.map_or(FileWritten::OverQuota, |created_at| FileWritten::Attached {
                created_at,
            })
        }
        FileWrite::Remove {
            tenant,
            collection,
            name,
        } => FileWritten::Changed(
            sqlx::query_scalar("SELECT jobhost_remove_file($1, $2, $3)")
                .bind(tenant)
                .bind(collection)
                .bind(name)
                .fetch_one(&mut *conn)
                .await?,
        ),
        FileWrite::Mark {
            collection,
            object_key,
            status,
        } => FileWritten::Changed(
            sqlx::query_scalar("SELECT jobhost_mark_file($1, $2, $3)")
                .bind(collection)
                .bind(object_key)
                .bind(*status)
                .fetch_one(&mut *conn)
                .await?,
        ),
    })
}

impl Store {
    pub async fn get_file(
        &self,
        tenant: &str,
        collection: &str,
        name: &str,
    ) -> Result<Option<FileRecord>> {
        let q = &self.q.get_file;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(tenant)
            .bind(collection)
            .bind(name)
            .fetch_optional(p)
            .await?))
    }

    pub async fn get_file_by_key(&self, collection: &str, key: &str) -> Result<Option<FileRecord>> {
        let q = &self.q.get_file_by_key;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(collection)
            .bind(key)
            .fetch_optional(p)
            .await?))
    }

    /// Visible files of a tenant whose name starts with `prefix`, after `after`, in name
    /// order.
    pub async fn list_files(
        &self,
        tenant: &str,
        collection: &str,
        prefix: &str,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<FileRecord>> {
        let q = &self.q.list_files;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(tenant)
            .bind(collection)
            .bind(prefix)
            .bind(after)
            .bind(limit)
            .fetch_all(p)
            .await?))
    }

    pub async fn pending_files(&self, collection: &str, limit: i64) -> Result<Vec<PendingFile>> {
        let q = &self.q.pending_files;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(collection)
            .bind(limit)
            .fetch_all(p)
            .await?))
    }

    /// Records an upload's key before anything is written under it.
    pub async fn insert_upload(
        &self,
        key: &str,
        tenant: &str,
        collection: &str,
        run_id: &str,
        attach_by: i64,
    ) -> Result<()> {
        let q = &self.q.insert_upload;
        with_pool!(self.pool, p => sqlx::query(q.as_str())
            .bind(key)
            .bind(tenant)
            .bind(collection)
            .bind(run_id)
            .bind(attach_by)
            .execute(p)
            .await
            .map(drop)?);
        Ok(())
    }

    /// Applies a `FileWrite` in a transaction of its own, fenced by the attempt's lease:
    /// `None` when the lease was lost (nothing changed).
    pub async fn file_write_fenced(
        &self,
        fence: &Fence,
        write: &FileWrite,
    ) -> Result<Option<FileWritten>> {
        self.retrying(|| self.file_write_fenced_once(fence, write))
            .await
    }

    async fn file_write_fenced_once(
        &self,
        fence: &Fence,
        write: &FileWrite,
    ) -> Result<Option<FileWritten>> {
        let p = match &self.pool {
            super::pool::Pool::Sqlite(p) => {
                return self.file_write_fenced_sqlite(p, fence, write).await;
            }
            super::pool::Pool::Postgres(p) => p,
        };
        self.fenced_postgres(p, fence, async |conn| apply_postgres(conn, write).await)
            .await
    }

    /// Runs `apply` in a transaction of its own on Postgres, fenced by the attempt's
    /// lease: the lease row locked first (as in every transaction), so no renewal or
    /// takeover slips between the check and the commit. `None` when the lease was lost
    /// (nothing applied).
    pub(super) async fn fenced_postgres<T>(
        &self,
        pool: &sqlx::PgPool,
        fence: &Fence,
        apply: impl AsyncFnOnce(&mut PgConnection) -> std::result::Result<T, sqlx::Error>,
    ) -> Result<Option<T>> {
        let mut conn = Exclusive::acquire(pool).await?;
        let mut tx = conn.begin().await?;
        let held = sqlx::query(self.q.fence.as_str())
            .bind(&fence.job)
            .bind(&fence.instance)
            .bind(fence.generation)
            .bind(&fence.holder)
            .fetch_optional(&mut *tx)
            .await?;
        if held.is_none() {
            tx.rollback().await?;
            conn.release();
            return Ok(None);
        }
        let applied = apply(&mut tx).await?;
        tx.commit().await?;
        conn.release();
        Ok(Some(applied))
    }

    /// One statement with the lease check inside (see `upsert_file_fenced`). Nothing
    /// changed means the lease was lost or there was nothing to change; the lease decides
    /// which (once lost, a lease never comes back to the same attempt).
    async fn file_write_fenced_sqlite(
        &self,
        pool: &sqlx::SqlitePool,
        fence: &Fence,
        write: &FileWrite,
    ) -> Result<Option<FileWritten>> {
        let q = self.q;
        let fenced = |sql: &'static str| {
            sqlx::query(sql)
                .bind(&fence.job)
                .bind(&fence.instance)
                .bind(fence.generation)
                .bind(&fence.holder)
        };
        let changed = match write {
            FileWrite::Attach {
                tenant,
                collection,
                name,
                object_key,
                size,
                digest,
                status,
                run_id,
                max_objects,
                max_bytes,
            } => {
                let row = fenced(q.upsert_file_fenced.as_str())
                    .bind(tenant)
                    .bind(collection)
                    .bind(name)
                    .bind(object_key)
                    .bind(size)
                    .bind(digest)
                    .bind(*status)
                    .bind(run_id)
                    .bind(max_objects)
                    .bind(max_bytes)
                    .fetch_optional(pool)
                    .await?;
                // Nothing written: the lease was lost, or else the quota refused it (the
                // statement's only two conditions; a lost lease never comes back).
                return Ok(match row {
                    Some(row) => Some(FileWritten::Attached {
                        created_at: row.try_get(0)?,
                    }),
                    None if self.lease_live(fence).await? => Some(FileWritten::OverQuota),
                    None => None,
                });
            }
            FileWrite::Remove {
                tenant,
                collection,
                name,
            } => fenced(q.delete_file_fenced.as_str())
                .bind(tenant)
                .bind(collection)
                .bind(name)
                .execute(pool)
                .await?
                .rows_affected(),
            FileWrite::Mark {
                collection,
                object_key,
                status,
            } => fenced(q.mark_file_fenced.as_str())
                .bind(collection)
                .bind(object_key)
                .bind(*status)
                .execute(pool)
                .await?
                .rows_affected(),
        };
        if changed == 0 && !self.lease_live(fence).await? {
            return Ok(None);
        }
        Ok(Some(FileWritten::Changed(changed == 1)))
    }

    /// Uploads no attempt can attach any more: their attempt's deadline passed `grace_ms`
    /// ago.
    pub async fn dead_uploads(&self, grace_ms: i64, limit: i64) -> Result<Vec<DeadObject>> {
        let q = &self.q.dead_uploads;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(grace_ms)
            .bind(limit)
            .fetch_all(p)
            .await?))
    }

    pub async fn forget_upload(&self, key: &str) -> Result<()> {
        let q = &self.q.forget_upload;
        with_pool!(self.pool, p => sqlx::query(q.as_str()).bind(key).execute(p).await.map(drop)?);
        Ok(())
    }

    /// Objects no name has pointed at for `grace_ms`.
    pub async fn dead_garbage(&self, grace_ms: i64, limit: i64) -> Result<Vec<DeadObject>> {
        let q = &self.q.dead_garbage;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str())
            .bind(grace_ms)
            .bind(limit)
            .fetch_all(p)
            .await?))
    }

    pub async fn forget_garbage(&self, key: &str) -> Result<()> {
        let q = &self.q.forget_garbage;
        with_pool!(self.pool, p => sqlx::query(q.as_str()).bind(key).execute(p).await.map(drop)?);
        Ok(())
    }

    /// Puts a dead upload's record back to the end of the collector's line (never
    /// earlier: its attempt's deadline passed long ago).
    pub async fn postpone_upload(&self, key: &str) -> Result<()> {
        let q = &self.q.postpone_upload;
        with_pool!(self.pool, p => sqlx::query(q.as_str()).bind(key).execute(p).await.map(drop)?);
        Ok(())
    }

    /// Puts a garbage record back to the end of the collector's line.
    pub async fn postpone_garbage(&self, key: &str) -> Result<()> {
        let q = &self.q.postpone_garbage;
        with_pool!(self.pool, p => sqlx::query(q.as_str()).bind(key).execute(p).await.map(drop)?);
        Ok(())
    }

    /// Whether an attempt holds its lease right now (database clock), without locking it.
    pub async fn lease_live(&self, fence: &Fence) -> Result<bool> {
        let q = &self.q.lease_live;
        if let Some(live) = self.probe.as_ref().and_then(|p| p.lease_live(q, fence)) {
            return Ok(live);
        }
        let n: i64 = with_pool!(self.reader, p => sqlx::query_scalar(q.as_str())
            .bind(&fence.job)
            .bind(&fence.instance)
            .bind(fence.generation)
            .bind(&fence.holder)
            .fetch_one(p)
            .await?);
        Ok(n > 0)
    }
}

impl Store {
    /// The signing keys, newest first.
    pub async fn signing_keys(&self) -> Result<Vec<SigningKeyRecord>> {
        let q = &self.q.signing_keys;
        Ok(with_pool!(self.pool, p => sqlx::query_as(q.as_str()).fetch_all(p).await?))
    }

    pub async fn insert_signing_key(&self, kid: &str, seed: &str, public_key: &str) -> Result<()> {
        let q = &self.q.insert_signing_key;
        with_pool!(self.pool, p => sqlx::query(q.as_str())
            .bind(kid)
            .bind(seed)
            .bind(public_key)
            .execute(p)
            .await
            .map(drop)?);
        Ok(())
    }

    /// Forgets keys made more than `age_ms` ago.
    pub async fn forget_signing_keys(&self, age_ms: i64) -> Result<()> {
        let q = &self.q.forget_signing_keys;
        with_pool!(self.pool, p => sqlx::query(q.as_str()).bind(age_ms).execute(p).await.map(drop)?);
        Ok(())
    }
}
