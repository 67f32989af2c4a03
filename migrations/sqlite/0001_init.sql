-- jobhost's own tables. Every time is integer milliseconds since the Unix epoch, read from
-- the database's clock; every integer is BIGINT; booleans are 0/1. The Postgres migration
-- of the same number has the same tables and columns (a test compares them).

CREATE TABLE jobhost_jobs (
    name               TEXT PRIMARY KEY,
    tenant             TEXT NOT NULL,
    component_path     TEXT NOT NULL,
    component_digest   TEXT NOT NULL,
    spec               TEXT NOT NULL,
    schedule           TEXT,
    next_fire_at       BIGINT,
    registered_at      BIGINT NOT NULL,
    updated_at         BIGINT NOT NULL,
    last_success_at    BIGINT,
    missed_reported_at BIGINT
);

CREATE TABLE jobhost_leases (
    job         TEXT NOT NULL,
    instance    TEXT NOT NULL,
    generation  BIGINT NOT NULL,
    holder      TEXT,
    deadline_at BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL,
    pending     BIGINT NOT NULL DEFAULT 0,
    updated_at  BIGINT NOT NULL,
    PRIMARY KEY (job, instance)
);

CREATE TABLE jobhost_runs (
    id               TEXT PRIMARY KEY,
    job              TEXT NOT NULL,
    instance         TEXT NOT NULL,
    tenant           TEXT NOT NULL,
    origin           TEXT NOT NULL,
    payload          TEXT NOT NULL,
    status           TEXT NOT NULL,
    pass             BIGINT NOT NULL DEFAULT 1,
    cursor           TEXT,
    counters         TEXT NOT NULL DEFAULT '{}',
    attempts         BIGINT NOT NULL DEFAULT 0,
    failures         BIGINT NOT NULL DEFAULT 0,
    generation       BIGINT,
    host             TEXT,
    last_code        TEXT,
    last_error       TEXT,
    component_digest TEXT,
    scheduled_for    BIGINT,
    rerun_of         TEXT,
    next_attempt_at  BIGINT NOT NULL,
    created_at       BIGINT NOT NULL,
    started_at       BIGINT,
    finished_at      BIGINT,
    updated_at       BIGINT NOT NULL
);
CREATE INDEX jobhost_runs_due ON jobhost_runs (status, next_attempt_at);
CREATE INDEX jobhost_runs_job ON jobhost_runs (job, created_at);
CREATE INDEX jobhost_runs_created ON jobhost_runs (created_at);

CREATE TABLE jobhost_attempts (
    run_id        TEXT NOT NULL,
    seq           BIGINT NOT NULL,
    pass          BIGINT NOT NULL,
    attempt       BIGINT NOT NULL,
    generation    BIGINT NOT NULL,
    host          TEXT NOT NULL,
    status        TEXT NOT NULL,
    outcome       TEXT,
    code          TEXT,
    fuel_used     BIGINT,
    peak_memory   BIGINT,
    duration_ms   BIGINT,
    log           TEXT NOT NULL DEFAULT '',
    log_truncated BIGINT NOT NULL DEFAULT 0,
    started_at    BIGINT NOT NULL,
    finished_at   BIGINT,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE jobhost_reports (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    kind             TEXT NOT NULL,
    job              TEXT NOT NULL,
    run_id           TEXT,
    code             TEXT,
    body             TEXT NOT NULL,
    created_at       BIGINT NOT NULL,
    logged_at        BIGINT,
    webhook_attempts BIGINT NOT NULL DEFAULT 0,
    next_try_at      BIGINT NOT NULL,
    delivered_at     BIGINT
);
CREATE INDEX jobhost_reports_due ON jobhost_reports (delivered_at, next_try_at);

-- The database role each job's SQL runs as, on Postgres (unused on SQLite, whose grants
-- are enforced by an authorizer on the connection).
CREATE TABLE jobhost_guest_roles (
    role     TEXT PRIMARY KEY,
    password TEXT NOT NULL,
    grants   TEXT NOT NULL
);
