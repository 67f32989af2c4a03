-- Records a step's result inside the calling transaction, only for a run running that
-- pass at that generation: a job's role may execute this function, and should the
-- statement checker (`store::pg_statement`) ever let guest SQL name it, a guest still
-- could not plant results in another run's ledger.
CREATE OR REPLACE FUNCTION jobhost_record_step(p_run text, p_pass bigint, p_name text, p_result text, p_generation bigint)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
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
$function$;
REVOKE ALL ON FUNCTION jobhost_record_step(TEXT, BIGINT, TEXT, TEXT, BIGINT) FROM PUBLIC;
