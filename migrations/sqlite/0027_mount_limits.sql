-- The limits of a `[links.NAME]` mount, shared by every host (issue 40). The Postgres
-- migration of the same number has the same columns.

-- A mount's `rate`: the earliest time its next call may go (`next_at`, microseconds of the
-- database's clock), each call pushing it on by the rate's interval, and when the last
-- call reserved its time (`reserved_at`). One row per mount with a rate
-- (`store::mount_limits`).
CREATE TABLE jobhost_mount_buckets (
    mount       TEXT PRIMARY KEY,
    next_at     BIGINT NOT NULL,
    reserved_at BIGINT NOT NULL
);

-- A mount's `concurrency`: its calls in flight, one row per slot (0 to concurrency - 1),
-- held by one call until it ends or `expires_at` (milliseconds) passes, so the slots of a
-- host that crashed mid-call free themselves.
CREATE TABLE jobhost_mount_slots (
    mount      TEXT NOT NULL,
    slot       BIGINT NOT NULL,
    holder     TEXT NOT NULL,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (mount, slot)
);
