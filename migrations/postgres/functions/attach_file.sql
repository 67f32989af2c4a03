-- Points a name at an uploaded object (its bookkeeping is the trigger's, files_bookkeeping.sql).
-- The ten-argument form attaches within the tenant's quota: NULL (and nothing changed) if
-- the tenant's usage in the collection, with this file added, would pass `p_max_objects`
-- objects or `p_max_bytes` bytes; a replaced object still counts until the collector
-- deletes it. The eight-argument form stays for hosts of an earlier version.
CREATE OR REPLACE FUNCTION jobhost_attach_file(p_tenant text, p_collection text, p_name text, p_key text, p_size bigint, p_digest text, p_status text, p_run text)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
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
$function$;
REVOKE ALL ON FUNCTION jobhost_attach_file(TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT) FROM PUBLIC;

CREATE OR REPLACE FUNCTION jobhost_attach_file(p_tenant text, p_collection text, p_name text, p_key text, p_size bigint, p_digest text, p_status text, p_run text, p_max_objects bigint, p_max_bytes bigint)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_now BIGINT := CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT);
    v_objects BIGINT;
    v_bytes BIGINT;
BEGIN
    INSERT INTO jobhost_file_usage (tenant, collection, objects, bytes)
    VALUES (p_tenant, p_collection, 0, 0) ON CONFLICT DO NOTHING;
    SELECT objects, bytes INTO v_objects, v_bytes FROM jobhost_file_usage
    WHERE tenant = p_tenant AND collection = p_collection FOR UPDATE;
    IF v_objects + 1 > p_max_objects OR v_bytes + p_size > p_max_bytes THEN
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
$function$;
REVOKE ALL ON FUNCTION jobhost_attach_file(TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT, BIGINT, BIGINT) FROM PUBLIC;
