-- Claims and ends of attempts in batches (see host/src/store/attempts.rs): the host's
-- writer runs a batch in one transaction; the Postgres migration of the same number has
-- the same index and the functions that do the same there.

-- The claim's order, straight from an index: no sort of every due row, however long the
-- backlog.
CREATE INDEX jobhost_runs_claim ON jobhost_runs (next_attempt_at, id)
WHERE status = 'queued' AND origin <> 'manual';
