-- Unique runs (issue 41): the latest run queued under each unique key of a job and
-- tenant. The SQLite migration of the same number has the same columns.
--
-- An enqueue with `unique` takes this row first (Postgres: `INSERT ... ON CONFLICT DO
-- UPDATE`, which locks it until the enqueue commits; SQLite: its one writer), compares
-- the run it names with the key's `while` (`rules::unique`), and either answers with that
-- run (joined, replaced, debounced) or queues a new one and names it here. Two enqueues
-- of one key, on any hosts, are so ordered: never two runs where the rule allows one.
-- A row whose run retention deleted names no run, and the next enqueue of its key
-- queues a new one.
CREATE TABLE jobhost_unique_keys (
    job    TEXT NOT NULL,
    tenant TEXT NOT NULL,
    key    TEXT NOT NULL,
    run_id TEXT NOT NULL,
    PRIMARY KEY (job, tenant, key)
);
