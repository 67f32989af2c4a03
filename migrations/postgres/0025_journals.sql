-- The flight recorder's journals (issue 30). The SQLite migration of the same number has
-- the same columns.

-- One attempt's host calls, as `host runs export` writes them (see docs/architecture.md,
-- "The flight recorder"): kept for the attempts the job's `record` names (failed ones by
-- default), read by `host replay`, the API and the page, deleted by retention with the
-- run. `tenant` is the run's: a tenant's token reads only its own journals.
CREATE TABLE jobhost_journals (
    run_id      TEXT NOT NULL,
    seq         BIGINT NOT NULL,
    job         TEXT NOT NULL,
    tenant      TEXT NOT NULL,
    calls       BIGINT NOT NULL,
    bytes       BIGINT NOT NULL,
    replayable  BIGINT NOT NULL,
    body        TEXT NOT NULL,
    recorded_at BIGINT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
