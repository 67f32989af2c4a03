-- Signals (issue 41): a run waits for the outside. The SQLite migration of the same
-- number has the same columns.
--
-- A signal is stored as it is sent (`POST /runs/{id}/signals/{name}`, `host runs
-- signal`), once per run and signal id (a second send of the id is the same signal), and
-- read by the first pass that asks for its name (`run.signal`), which takes it: `pass`
-- names that pass, so every attempt of it reads the same signal and a later pass the
-- next one. Unread signals (`pass` NULL) are the few the sweep looks at.
CREATE TABLE jobhost_signals (
    run_id      TEXT NOT NULL,
    signal_id   TEXT NOT NULL,
    name        TEXT NOT NULL,
    payload     TEXT NOT NULL,
    received_at BIGINT NOT NULL,
    pass        BIGINT,
    PRIMARY KEY (run_id, signal_id)
);
CREATE INDEX jobhost_signals_unread ON jobhost_signals (run_id, name, received_at)
    WHERE pass IS NULL;

-- A pass that called `run.wait-for-signal` records the name and itself (`signal_pass`):
-- once it ended (`signal_pass` = `pass` - 1) the run sleeps queued, its lease parked,
-- due at the wait's timeout, until a signal of that name makes it due now.
ALTER TABLE jobhost_runs ADD COLUMN signal_name TEXT;
ALTER TABLE jobhost_runs ADD COLUMN signal_pass BIGINT;
