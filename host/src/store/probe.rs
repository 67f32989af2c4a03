//! A SQLite connection read on the calling thread, for the one check that stands between
//! a guest and an effect no transaction can take back: whether its attempt still holds
//! its lease, right before a `links` request leaves the host. Through the pool that read
//! is two hand-offs to the connection's worker thread (tens of microseconds, as much as
//! the request itself to a nearby service); here it is a cached statement on a hot page.
//!
//! It only accelerates: anything unusual (the database busy, an error, a poisoned lock)
//! answers `None`, and the caller asks through the pool, which reports errors properly.

use super::guest::Fence;
use rusqlite::{Connection, OpenFlags, ToSql};
use std::path::Path;
use std::sync::Mutex;

pub(crate) struct SqliteProbe {
    conn: Mutex<Connection>,
}

impl SqliteProbe {
    /// Opens a read-only connection to the database at `path` (which the pools created).
    pub(crate) fn open(path: &Path) -> Option<SqliteProbe> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).ok()?;
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
        let probe = SqliteProbe::open(&path).unwrap();
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
}
