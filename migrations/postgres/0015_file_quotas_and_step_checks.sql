-- Each tenant's quota in a collection: its usage (objects and bytes its names point at)
-- kept by the trigger that already keeps a name's bookkeeping, and checked by
-- `jobhost_attach_file` under a lock on the usage row, so two attaches of one tenant on
-- two hosts cannot both take its last bytes. The SQLite migration of the same number has
-- the same table.

CREATE TABLE jobhost_file_usage (
    tenant     TEXT NOT NULL,
    collection TEXT NOT NULL,
    objects    BIGINT NOT NULL,
    bytes      BIGINT NOT NULL,
    PRIMARY KEY (tenant, collection)
);

INSERT INTO jobhost_file_usage (tenant, collection, objects, bytes)
SELECT tenant, collection, COUNT(*), SUM(size) FROM jobhost_files GROUP BY tenant, collection;

CREATE OR REPLACE FUNCTION jobhost_files_bookkeeping() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND OLD.object_key <> NEW.object_key) THEN
        INSERT INTO jobhost_file_garbage (object_key, collection, since)
        VALUES (OLD.object_key, OLD.collection,
                CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT))
        ON CONFLICT DO NOTHING;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        DELETE FROM jobhost_uploads WHERE object_key = NEW.object_key;
    END IF;
    IF TG_OP = 'INSERT' THEN
        INSERT INTO jobhost_file_usage (tenant, collection, objects, bytes)
        VALUES (NEW.tenant, NEW.collection, 1, NEW.size)
        ON CONFLICT (tenant, collection) DO UPDATE
        SET objects = jobhost_file_usage.objects + 1,
            bytes = jobhost_file_usage.bytes + excluded.bytes;
    ELSIF TG_OP = 'UPDATE' THEN
        UPDATE jobhost_file_usage SET bytes = bytes - OLD.size + NEW.size
        WHERE tenant = NEW.tenant AND collection = NEW.collection;
    ELSE
        UPDATE jobhost_file_usage SET objects = objects - 1, bytes = bytes - OLD.size
        WHERE tenant = OLD.tenant AND collection = OLD.collection;
    END IF;
    RETURN NULL;
END
$$;

-- An attach within the tenant's quota: NULL (and nothing changed) if the tenant's files in
-- the collection, counting this one and not the one the name points at now, would have
-- more than `p_max_objects` objects or `p_max_bytes` bytes. The usage row is locked
-- first (created if the tenant has none yet), so concurrent attaches of one tenant and
-- collection check one after another. The eight-argument function of 0003 stays for
-- hosts of an earlier version until they are upgraded.
CREATE FUNCTION jobhost_attach_file(
    p_tenant TEXT, p_collection TEXT, p_name TEXT, p_key TEXT, p_size BIGINT,
    p_digest TEXT, p_status TEXT, p_run TEXT, p_max_objects BIGINT, p_max_bytes BIGINT
) RETURNS BIGINT
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now BIGINT := CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT);
    v_objects BIGINT;
    v_bytes BIGINT;
    v_old BIGINT;
BEGIN
    INSERT INTO jobhost_file_usage (tenant, collection, objects, bytes)
    VALUES (p_tenant, p_collection, 0, 0) ON CONFLICT DO NOTHING;
    SELECT objects, bytes INTO v_objects, v_bytes FROM jobhost_file_usage
    WHERE tenant = p_tenant AND collection = p_collection FOR UPDATE;
    SELECT size INTO v_old FROM jobhost_files
    WHERE tenant = p_tenant AND collection = p_collection AND name = p_name;
    IF v_objects + CAST(v_old IS NULL AS INT) > p_max_objects
        OR v_bytes - COALESCE(v_old, 0) + p_size > p_max_bytes THEN
        RETURN NULL;
    END IF;
    INSERT INTO jobhost_files (tenant, collection, name, object_key, size, digest, status,
        run_id, created_at)
    VALUES (p_tenant, p_collection, p_name, p_key, p_size, p_digest, p_status, p_run, v_now)
    ON CONFLICT (tenant, collection, name) DO UPDATE SET object_key = excluded.object_key,
        size = excluded.size, digest = excluded.digest, status = excluded.status,
        run_id = excluded.run_id, created_at = excluded.created_at;
    RETURN v_now;
END
$$;
REVOKE ALL ON FUNCTION jobhost_attach_file(TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT,
    BIGINT, BIGINT) FROM PUBLIC;

-- A step is recorded only for a run running that pass at that generation, as
-- `jobhost_end_pass` already checks: a job's role may execute this function, and only
-- the statement checker (`store::pg_statement`) keeps guest SQL from naming it; should
-- that ever fail, a guest still could not plant results in another run's ledger.
CREATE OR REPLACE FUNCTION jobhost_record_step(p_run TEXT, p_pass BIGINT, p_name TEXT,
    p_result TEXT, p_generation BIGINT)
RETURNS BOOLEAN
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM jobhost_runs WHERE id = p_run AND status = 'running'
                   AND generation = p_generation AND pass = p_pass) THEN
        RETURN false;
    END IF;
    INSERT INTO jobhost_steps (run_id, pass, name, result, generation, recorded_at)
    VALUES (p_run, p_pass, p_name, p_result, p_generation,
        CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT));
    RETURN true;
END
$$;
