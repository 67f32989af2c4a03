-- The fence of a guest write transaction: true while the lease is held at the attempt's
-- generation and before its deadline (database clock). It takes a share lock on the
-- lease row, so a renewal or takeover waits for the guest's transaction to end. It runs
-- with the host's rights; job roles may only execute it.
CREATE OR REPLACE FUNCTION jobhost_fence(p_job text, p_instance text, p_generation bigint, p_holder text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
 SET enable_seqscan TO 'off'
AS $function$
BEGIN
    PERFORM 1 FROM jobhost_leases
    WHERE job = p_job AND instance = p_instance AND generation = p_generation
      AND holder = p_holder
      AND deadline_at > CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)
    FOR SHARE;
    RETURN FOUND;
END
$function$;
REVOKE ALL ON FUNCTION jobhost_fence(TEXT, TEXT, BIGINT, TEXT) FROM PUBLIC;
