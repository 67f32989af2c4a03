-- The key of a new run of a job with `key` (trigger `jobhost_runs_limit_key`, migration
-- 0027): its instance, its tenant, or the payload's member the JSON pointer names (members
-- only, `~1` and `~0` unescaped; '' where there is none). Computed once, as the run is
-- queued, so no claim reads a payload. The SQLite twin is migration 0027's trigger.
CREATE OR REPLACE FUNCTION jobhost_run_limit_key()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_by TEXT;
BEGIN
    SELECT j.key_by INTO v_by FROM jobhost_jobs j WHERE j.name = NEW.job;
    NEW.limit_key := CASE
        WHEN v_by IS NULL THEN NULL
        WHEN v_by = 'instance' THEN NEW.instance
        WHEN v_by = 'tenant' THEN NEW.tenant
        ELSE COALESCE(jsonb_extract_path_text(CAST(NEW.payload AS JSONB), VARIADIC ARRAY(
            SELECT replace(replace(u.member, '~1', '/'), '~0', '~')
            FROM unnest(string_to_array(substr(v_by, 2), '/')) WITH ORDINALITY AS u(member, n)
            ORDER BY u.n)), '')
    END;
    RETURN NEW;
END
$function$;
REVOKE ALL ON FUNCTION jobhost_run_limit_key() FROM PUBLIC;
