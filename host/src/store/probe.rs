//! A SQLite connection read on the calling thread, for reads that stand between a caller
//! and what it waits for: whether an attempt still holds its lease, right before a
//! `links` request leaves the host; and the point reads of an API request (its token, the
//! job it names, that job's tenant), which a kick's answer waits on. Through the pool
//! each read is two hand-offs to the connection's worker thread (tens to hundreds of
//! microseconds on a busy host), and sqlx pings the connection as it goes back, which
//! keeps it from the next caller; here it is a cached statement on a hot page.
//!
//! It only accelerates: anything unusual (the connection in use by another caller, the
//! database busy, an error, a poisoned lock) answers `None`, and the caller asks through
//! the pool, which reports errors properly.

use super::cancel_book::CancelBook;
use super::records::Fence;
use super::records::{JobRecord, TenantRecord, TokenCheck};
use rusqlite::{Connection, OpenFlags, OptionalExtension, Row, ToSql};
use std::path::Path;
use std::sync::{Arc, Mutex};

pub(crate) struct SqliteProbe {
    conn: Mutex<Connection>,
}

impl SqliteProbe {
    /// Opens a read-only connection to the database at `path` (which the pools created).
    /// The fence's function over `cancels` is installed on it.
    pub(crate) fn open(path: &Path, cancels: &Arc<CancelBook>) -> Option<SqliteProbe> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).ok()?;
        // SAFETY: the connection is open and used under the probe's lock.
        if unsafe { cancels.install(conn.handle()) } != libsqlite3_sys::SQLITE_OK {
            return None;
        }
        // Never wait on the calling thread: busy means ask the pool.
        conn.busy_timeout(std::time::Duration::ZERO).ok()?;
        Some(SqliteProbe {
            conn: Mutex::new(conn),
        })
    }

    /// Runs `sql` (the dialect's `lease_live`, parameters `$1`..`$4`) for `fence`.
    pub(crate) fn lease_live(&self, sql: &str, fence: &Fence) -> Option<bool> {
        let conn = self.conn.lock().ok()?;
        let mut statement = conn.prepare_cached(sql).ok()?;
        let params: [(&str, &dyn ToSql); 4] = [
            ("$1", &fence.job),
            ("$2", &fence.instance),
            ("$3", &fence.generation),
            ("$4", &fence.holder),
        ];
        let n: i64 = statement.query_row(&params[..], |row| row.get(0)).ok()?;
        Some(n > 0)
    }

    /// The row `sql` (one parameter, `$1` = `key`) finds, as `row` reads it: `Some(None)`
    /// if there is none. Never waits for the connection: another caller holding it means
    /// `None`, the pool.
    pub(crate) fn point_read<T>(
        &self,
        sql: &str,
        key: &str,
        row: fn(&Row<'_>) -> rusqlite::Result<T>,
    ) -> Option<Option<T>> {
        let conn = self.conn.try_lock().ok()?;
        let mut statement = conn.prepare_cached(sql).ok()?;
        let params: [(&str, &dyn ToSql); 1] = [("$1", &key)];
        statement.query_row(&params[..], row).optional().ok()
    }
}

/// A job's row as `queries::JOB_COLUMNS` names it.
pub(crate) fn job(row: &Row<'_>) -> rusqlite::Result<JobRecord> {
    Ok(JobRecord {
        name: row.get("name")?,
        tenant: row.get("tenant")?,
        component_path: row.get("component_path")?,
        component_digest: row.get("component_digest")?,
        spec: row.get("spec")?,
        schedule: row.get("schedule")?,
        next_fire_at: row.get("next_fire_at")?,
        registered_at: row.get("registered_at")?,
        updated_at: row.get("updated_at")?,
        last_success_at: row.get("last_success_at")?,
        missed_reported_at: row.get("missed_reported_at")?,
        per_tenant: row.get("per_tenant")?,
        orphaned_at: row.get("orphaned_at")?,
    })
}

pub(crate) fn tenant(row: &Row<'_>) -> rusqlite::Result<TenantRecord> {
    Ok(TenantRecord {
        name: row.get("name")?,
        active: row.get("active")?,
        created_at: row.get("created_at")?,
        updated_at: row.get("updated_at")?,
    })
}

pub(crate) fn token_check(row: &Row<'_>) -> rusqlite::Result<TokenCheck> {
    Ok(TokenCheck {
        secret_hash: row.get("secret_hash")?,
        tenant: row.get("tenant")?,
        tenant_active: row.get("tenant_active")?,
        label: row.get("label")?,
        read_only: row.get("read_only")?,
        expired: row.get("expired")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_from_committed_rows_and_gives_way_when_unsure() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe.db");
        let writer = Connection::open(&path).unwrap();
        writer
            .execute_batch(
                "PRAGMA journal_mode = WAL;
                 CREATE TABLE leases (job TEXT, instance TEXT, generation INTEGER, holder TEXT);
                 INSERT INTO leases VALUES ('j', 'i', 3, 'run');",
            )
            .unwrap();
        let cancels = CancelBook::open(&path).unwrap();
        let probe = SqliteProbe::open(&path, &cancels).unwrap();
        let sql = "SELECT COUNT(*) FROM leases WHERE job = $1 AND instance = $2 \
                   AND generation = $3 AND holder = $4";
        let mut fence = Fence {
            job: "j".into(),
            instance: "i".into(),
            generation: 3,
            holder: "run".into(),
        };
        assert_eq!(probe.lease_live(sql, &fence), Some(true));
        writer
            .execute("UPDATE leases SET generation = 4", [])
            .unwrap();
        assert_eq!(probe.lease_live(sql, &fence), Some(false));
        fence.generation = 4;
        assert_eq!(probe.lease_live(sql, &fence), Some(true));
        assert_eq!(probe.lease_live("SELECT nonsense", &fence), None);
    }

    #[test]
    fn a_point_read_finds_a_row_or_none_and_gives_way_when_unsure() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe.db");
        let writer = Connection::open(&path).unwrap();
        writer
            .execute_batch(
                "PRAGMA journal_mode = WAL;
                 CREATE TABLE t (name TEXT, active INTEGER, created_at INTEGER, updated_at INTEGER);
                 INSERT INTO t VALUES ('acme', 1, 5, 6);",
            )
            .unwrap();
        let cancels = CancelBook::open(&path).unwrap();
        let probe = SqliteProbe::open(&path, &cancels).unwrap();
        let sql = "SELECT name, active, created_at, updated_at FROM t WHERE name = $1";
        let found = probe.point_read(sql, "acme", tenant).unwrap().unwrap();
        assert_eq!(
            (found.name.as_str(), found.active, found.updated_at),
            ("acme", 1, 6)
        );
        assert!(probe.point_read(sql, "other", tenant).unwrap().is_none());
        assert!(
            probe
                .point_read("SELECT nonsense", "acme", tenant)
                .is_none()
        );
        let held = probe.conn.lock().unwrap();
        assert!(
            probe.point_read(sql, "acme", tenant).is_none(),
            "in use: ask the pool"
        );
        drop(held);
        assert!(
            probe.point_read(sql, "acme", job).is_none(),
            "a row of another shape"
        );
    }
}
