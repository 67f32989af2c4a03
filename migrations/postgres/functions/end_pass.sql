-- Commits a pass's end inside the calling (guest's, fenced) transaction: the cursor the
-- next pass resumes from and the next pass's number, or the mark that the run is done;
-- and the run's counters. Only while the run is still running this attempt's pass.
CREATE OR REPLACE FUNCTION jobhost_end_pass(p_run text, p_generation bigint, p_pass bigint, p_cursor text, p_counters text, p_done boolean)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
BEGIN
    UPDATE jobhost_runs r SET cursor = CASE WHEN p_done THEN r.cursor ELSE p_cursor END,
        pass = CASE WHEN p_done THEN r.pass ELSE p_pass + 1 END,
        work_done = CASE WHEN p_done THEN 1 ELSE 0 END, counters = p_counters,
        updated_at = CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)
    WHERE r.id = p_run AND r.status = 'running' AND r.generation = p_generation
      AND r.pass = p_pass;
    RETURN FOUND;
END
$function$;
REVOKE ALL ON FUNCTION jobhost_end_pass(TEXT, BIGINT, BIGINT, TEXT, TEXT, BOOLEAN) FROM PUBLIC;
