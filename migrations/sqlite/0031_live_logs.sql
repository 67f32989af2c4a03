-- Live runs (issue 44): what a running attempt logged so far. The Postgres migration of the
-- same number has the same columns.

-- The log lines a running attempt wrote up to now, as its host writes them every 250 ms
-- (`runs::runner::live`) once the attempt has run that long: one row per run, the
-- attempt's `seq` (its row in `jobhost_attempts` once it ends), when it started and
-- what it logged, bounded as the attempt's log is. The host deletes it when the attempt
-- ends; one a crashed host left is read only while its attempt is the run's current one,
-- and deleted by retention with the run.
CREATE TABLE jobhost_live_logs (
    run_id        TEXT PRIMARY KEY,
    seq           BIGINT NOT NULL,
    log           TEXT NOT NULL,
    log_truncated BIGINT NOT NULL,
    started_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL
);
