//! The rows of mounts' limits (migration 0027): a mount's next free time for its `rate`,
//! its calls in flight for its `concurrency`. Each change is one statement, atomic on
//! both backends (on Postgres a row lock orders the hosts); when a call may go, and how
//! long it waits, is decided in `sandbox::links::limits`.

use super::error::Result;
use super::handle::Store;
use super::queries::{self, statements};
use std::sync::LazyLock;

static SQLITE: LazyLock<MountStatements> =
    LazyLock::new(|| MountStatements::render(&queries::SQLITE));
static POSTGRES: LazyLock<MountStatements> =
    LazyLock::new(|| MountStatements::render(&queries::POSTGRES));

statements! {
    MountStatements;

    // Reserves mount `$1`'s next time, `$2` µs after the one before (or now, if that has
    // passed), unless it is more than `$3` µs away; the wait until it, in µs, or no row.
    // The clock is read once (`n`), so the wait is measured against the time reserved.
    reserve_call = "INSERT INTO jobhost_mount_buckets AS b (mount, next_at, reserved_at) \
        SELECT $1, n.t + $2, n.t FROM (SELECT {now} * 1000 AS t) n WHERE 1 = 1 \
        ON CONFLICT (mount) DO UPDATE SET \
            next_at = CASE WHEN b.next_at > excluded.reserved_at THEN b.next_at \
                ELSE excluded.reserved_at END + $2, \
            reserved_at = excluded.reserved_at \
        WHERE b.next_at - excluded.reserved_at <= $3 \
        RETURNING next_at - $2 - reserved_at";
    // Mount `$1`'s slots below `$2` that a call holds now.
    held_slots = "SELECT slot FROM jobhost_mount_slots \
        WHERE mount = $1 AND slot < $2 AND expires_at > {now} ORDER BY slot";
    // Takes slot `$2` of mount `$1` for holder `$3` for `$4` ms, unless a call holds it.
    take_slot = "INSERT INTO jobhost_mount_slots AS s (mount, slot, holder, expires_at) \
        VALUES ($1, $2, $3, {now} + $4) \
        ON CONFLICT (mount, slot) DO UPDATE SET holder = excluded.holder, \
            expires_at = excluded.expires_at \
        WHERE s.expires_at <= {now} \
        RETURNING slot";
    free_slot = "DELETE FROM jobhost_mount_slots WHERE mount = $1 AND slot = $2 AND holder = $3";
}

impl Store {
    fn mount_statements(&self) -> &'static MountStatements {
        match self.backend {
            super::pool::Backend::Sqlite => &SQLITE,
            super::pool::Backend::Postgres => &POSTGRES,
        }
    }

    /// Reserves the next call of `mount` at one call per `interval_us`: how long, in µs,
    /// the call waits for its time, or `None` (nothing reserved) when that is more than
    /// `max_wait_us`.
    pub async fn reserve_mount_call(
        &self,
        mount: &str,
        interval_us: i64,
        max_wait_us: i64,
    ) -> Result<Option<i64>> {
        let q = &self.mount_statements().reserve_call;
        Ok(with_pool!(self.pool, p => sqlx::query_scalar(q.as_str())
                .bind(mount)
                .bind(interval_us)
                .bind(max_wait_us)
                .fetch_optional(p)
                .await?))
    }

    /// Takes a free slot of `mount`'s `concurrency` for `holder`, held at most `hold_ms`:
    /// its number, or `None` when every slot is held.
    pub async fn take_mount_slot(
        &self,
        mount: &str,
        concurrency: i64,
        holder: &str,
        hold_ms: i64,
    ) -> Result<Option<i64>> {
        let s = self.mount_statements();
        // Another host may take the free slot first: then read again, at most once per slot.
        for _ in 0..=concurrency {
            let held: Vec<i64> = with_pool!(self.pool, p => sqlx::query_scalar(s.held_slots.as_str())
                .bind(mount)
                .bind(concurrency)
                .fetch_all(p)
                .await?);
            let Some(free) = (0..concurrency).find(|n| !held.contains(n)) else {
                return Ok(None);
            };
            let taken: Option<i64> = with_pool!(self.pool, p => sqlx::query_scalar(s.take_slot.as_str())
                .bind(mount)
                .bind(free)
                .bind(holder)
                .bind(hold_ms)
                .fetch_optional(p)
                .await?);
            if taken.is_some() {
                return Ok(taken);
            }
        }
        Ok(None)
    }

    /// Frees the slot `holder` took.
    pub async fn free_mount_slot(&self, mount: &str, slot: i64, holder: &str) -> Result<()> {
        let q = &self.mount_statements().free_slot;
        with_pool!(self.pool, p => sqlx::query(q.as_str())
            .bind(mount)
            .bind(slot)
            .bind(holder)
            .execute(p)
            .await
            .map(drop)?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_token_is_rendered() {
        for statements in [&*SQLITE, &*POSTGRES] {
            for sql in statements.all() {
                assert!(!sql.contains('{'), "unrendered token in {sql}");
            }
        }
    }

    #[tokio::test]
    async fn calls_are_spaced_and_slots_bounded_and_expiring() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&format!("sqlite://{}/t.db", dir.path().display()))
            .await
            .unwrap();
        // One call per 10 s, waiting at most 15 s: the first goes now, the second in
        // about 10 s, the third would wait about 20 s and is refused, reserving nothing.
        let first = store
            .reserve_mount_call("api", 10_000_000, 15_000_000)
            .await;
        assert_eq!(first.unwrap(), Some(0));
        let second = store
            .reserve_mount_call("api", 10_000_000, 15_000_000)
            .await;
        let second = second.unwrap().unwrap();
        assert!((9_000_000..=10_000_000).contains(&second), "{second}");
        let third = store
            .reserve_mount_call("api", 10_000_000, 15_000_000)
            .await;
        assert_eq!(third.unwrap(), None);
        let other = store.reserve_mount_call("other", 10_000_000, 0).await;
        assert_eq!(other.unwrap(), Some(0), "each mount has its own time");

        assert_eq!(
            store.take_mount_slot("api", 2, "a", 60_000).await.unwrap(),
            Some(0)
        );
        assert_eq!(
            store.take_mount_slot("api", 2, "b", 60_000).await.unwrap(),
            Some(1)
        );
        assert_eq!(
            store.take_mount_slot("api", 2, "c", 60_000).await.unwrap(),
            None
        );
        store
            .free_mount_slot("api", 0, "someone else")
            .await
            .unwrap();
        assert_eq!(
            store.take_mount_slot("api", 2, "c", 60_000).await.unwrap(),
            None
        );
        store.free_mount_slot("api", 0, "a").await.unwrap();
        assert_eq!(
            store.take_mount_slot("api", 2, "c", 0).await.unwrap(),
            Some(0)
        );
        // A slot past its expiry (a crashed host's) is free again.
        assert_eq!(
            store.take_mount_slot("api", 2, "d", 60_000).await.unwrap(),
            Some(0)
        );
    }
}
