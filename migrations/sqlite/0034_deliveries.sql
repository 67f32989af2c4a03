-- Every ending delivered (issue 41): which endings of which job go to which webhook, the
-- outbox of deliveries and each attempt at one. The Postgres migration of the same
-- number has the same tables and columns.

-- A job's routes, written when it is registered (`App::register`) from its `deliver`:
-- ending `ending` of a run of `job` is delivered to the webhook named `webhook`.
CREATE TABLE jobhost_delivery_routes (
    job     TEXT NOT NULL,
    ending  TEXT NOT NULL,
    webhook TEXT NOT NULL,
    PRIMARY KEY (job, ending, webhook)
);

-- One row per run and webhook, written by the triggers below in the transaction that
-- ends the run, whichever path ends it. `state`: `pending`, `delivered` or `failed`
-- (given up after its retry window; an operator's retry makes it pending again, from
-- `retry_from`). `after_run`: the run this one retries or reruns, whose delivery to the
-- same webhook goes first. `claim`: the host sending it now, until `next_try_at`.
CREATE TABLE jobhost_deliveries (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id       TEXT NOT NULL,
    job          TEXT NOT NULL,
    tenant       TEXT NOT NULL,
    webhook      TEXT NOT NULL,
    ending       TEXT NOT NULL,
    after_run    TEXT,
    state        TEXT NOT NULL DEFAULT 'pending',
    attempts     BIGINT NOT NULL DEFAULT 0,
    claim        TEXT,
    next_try_at  BIGINT NOT NULL,
    retry_from   BIGINT NOT NULL,
    last_status  BIGINT,
    last_error   TEXT,
    created_at   BIGINT NOT NULL,
    delivered_at BIGINT,
    updated_at   BIGINT NOT NULL
);
CREATE UNIQUE INDEX jobhost_deliveries_run ON jobhost_deliveries (run_id, webhook);
CREATE INDEX jobhost_deliveries_due ON jobhost_deliveries (next_try_at)
    WHERE state = 'pending';
CREATE INDEX jobhost_deliveries_state ON jobhost_deliveries (state, id);

-- Each attempt at a delivery: the HTTP status it got (none: no answer), and the error in
-- fixed words or the receiver's text, bounded and escaped.
CREATE TABLE jobhost_delivery_attempts (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id BIGINT NOT NULL,
    host        TEXT NOT NULL,
    status_code BIGINT,
    error       TEXT,
    duration_ms BIGINT NOT NULL,
    at          BIGINT NOT NULL
);
CREATE INDEX jobhost_delivery_attempts_of ON jobhost_delivery_attempts (delivery_id, id);

-- A run that ends (or is queued already ended, `skipped`) writes its deliveries.
CREATE TRIGGER jobhost_runs_ended AFTER UPDATE OF status ON jobhost_runs
WHEN OLD.status IN ('queued', 'running') AND NEW.status NOT IN ('queued', 'running')
BEGIN
    INSERT OR IGNORE INTO jobhost_deliveries (run_id, job, tenant, webhook, ending, after_run,
        next_try_at, retry_from, created_at, updated_at)
    SELECT NEW.id, NEW.job, NEW.tenant, r.webhook, NEW.status,
        COALESCE(NEW.retry_of, NEW.rerun_of), t.now, t.now, t.now, t.now
    FROM jobhost_delivery_routes r, (SELECT CAST(unixepoch('subsec') * 1000 AS BIGINT) AS now) t
    WHERE r.job = NEW.job AND r.ending = NEW.status;
END;
CREATE TRIGGER jobhost_runs_queued_ended AFTER INSERT ON jobhost_runs
WHEN NEW.status NOT IN ('queued', 'running')
BEGIN
    INSERT OR IGNORE INTO jobhost_deliveries (run_id, job, tenant, webhook, ending, after_run,
        next_try_at, retry_from, created_at, updated_at)
    SELECT NEW.id, NEW.job, NEW.tenant, r.webhook, NEW.status,
        COALESCE(NEW.retry_of, NEW.rerun_of), t.now, t.now, t.now, t.now
    FROM jobhost_delivery_routes r, (SELECT CAST(unixepoch('subsec') * 1000 AS BIGINT) AS now) t
    WHERE r.job = NEW.job AND r.ending = NEW.status;
END;
