-- Each serving host's heartbeat, for the console's hosts view, and payload search (issue
-- 44). The migration of the same number on the other backend has the same table and
-- columns; only Postgres has an index for payload search (SQLite's search is a bounded scan).

-- One row per host process (`host_id`, its hostname and pid), written every few seconds
-- while it serves: its version, its lanes with their workers and how many are busy (JSON
-- `[{"lane", "workers", "busy"}]`), when it started and when it was last seen (database
-- time, ms); `stopped_at` when it stopped cleanly. A host not seen for three beats is not
-- alive; rows not seen for a day are deleted by the beats of the hosts still serving.
CREATE TABLE jobhost_hosts (
    host_id    TEXT PRIMARY KEY,
    version    TEXT NOT NULL,
    lanes      TEXT NOT NULL,
    started_at BIGINT NOT NULL,
    seen_at    BIGINT NOT NULL,
    stopped_at BIGINT
);
