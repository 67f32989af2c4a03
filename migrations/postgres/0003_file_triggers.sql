-- A name's bookkeeping, done by a trigger on the row that changes: the key a name stops
-- pointing at becomes garbage (for the collector, once readers are done with it), and an
-- attached upload stops being an upload. The SQLite migration of the same number has the
-- same triggers; the functions of 0002 keep only the row change itself.

CREATE FUNCTION jobhost_files_bookkeeping() RETURNS trigger
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
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION jobhost_files_bookkeeping() FROM PUBLIC;

CREATE TRIGGER jobhost_files_bookkeeping
AFTER INSERT OR UPDATE OF object_key OR DELETE ON jobhost_files
FOR EACH ROW EXECUTE FUNCTION jobhost_files_bookkeeping();

CREATE OR REPLACE FUNCTION jobhost_attach_file(
    p_tenant TEXT, p_collection TEXT, p_name TEXT, p_key TEXT, p_size BIGINT,
    p_digest TEXT, p_status TEXT, p_run TEXT
) RETURNS BIGINT
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now BIGINT := CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT);
BEGIN
    INSERT INTO jobhost_files (tenant, collection, name, object_key, size, digest, status,
        run_id, created_at)
    VALUES (p_tenant, p_collection, p_name, p_key, p_size, p_digest, p_status, p_run, v_now)
    ON CONFLICT (tenant, collection, name) DO UPDATE SET object_key = excluded.object_key,
        size = excluded.size, digest = excluded.digest, status = excluded.status,
        run_id = excluded.run_id, created_at = excluded.created_at;
    RETURN v_now;
END
$$;

CREATE OR REPLACE FUNCTION jobhost_remove_file(p_tenant TEXT, p_collection TEXT, p_name TEXT)
RETURNS BOOLEAN
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    DELETE FROM jobhost_files
    WHERE tenant = p_tenant AND collection = p_collection AND name = p_name;
    RETURN FOUND;
END
$$;
