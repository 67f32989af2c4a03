-- Every ending delivered (issue 41): which endings of which job go to which webhook, the
-- outbox of deliveries and each attempt at one. The SQLite migration of the same
-- number has the same tables and columns.

-- A job's routes, written when it is registered (`App::register`) from its `deliver`:
-- ending `ending` of a run of `job` is delivered to the webhook named `webhook`.
CREATE TABLE jobhost_delivery_routes (
    job     TEXT NOT NULL,
    ending  TEXT NOT NULL,
    webhook TEXT NOT NULL,
    PRIMARY KEY (job, ending, webhook)
);

-- One row per run and webhook, written by the triggers on runs (`functions/runs_changed.sql`,
-- `functions/runs_queued_ended.sql`) in the transaction that
-- ends the run, whichever path ends it. `state`: `pending`, `delivered` or `failed`
-- (given up after its retry window; an operator's retry makes it pending again, from
-- `retry_from`). `after_run`: the run this one retries or reruns, whose delivery to the
-- same webhook goes first. `claim`: the host sending it now, until `next_try_at`.
CREATE TABLE jobhost_deliveries (
    id           BIGSERIAL PRIMARY KEY,
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
    id          BIGSERIAL PRIMARY KEY,
    delivery_id BIGINT NOT NULL,
    host        TEXT NOT NULL,
    status_code BIGINT,
    error       TEXT,
    duration_ms BIGINT NOT NULL,
    at          BIGINT NOT NULL
);
CREATE INDEX jobhost_delivery_attempts_of ON jobhost_delivery_attempts (delivery_id, id);

-- A run queued already ended (`skipped` by its job's `max_per_tenant`) writes its
-- deliveries; the body is `functions/runs_queued_ended.sql`. A run that ends by an
-- update writes them in `jobhost_runs_changed`, the statement trigger on run updates.
CREATE FUNCTION jobhost_runs_queued_ended() RETURNS TRIGGER
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
BEGIN
    RETURN NULL;
END
$function$;
CREATE TRIGGER jobhost_runs_queued_ended AFTER INSERT ON jobhost_runs
    FOR EACH ROW WHEN (NEW.status NOT IN ('queued', 'running'))
    EXECUTE FUNCTION jobhost_runs_queued_ended();
