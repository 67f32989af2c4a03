-- A run keeps the logs of its last 1 000 attempts: recording a later one empties the log
-- of the one 1 000 before it (marked truncated), so a run of unbounded passes holds a
-- bounded amount of log. The SQLite migration 0012 has the same trigger.
CREATE OR REPLACE FUNCTION jobhost_attempt_logs_kept()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
BEGIN
    UPDATE jobhost_attempts a SET log = '', log_truncated = 1
    WHERE a.run_id = NEW.run_id AND a.seq = NEW.seq - 1000 AND a.log <> '';
    RETURN NULL;
END
$function$;
REVOKE ALL ON FUNCTION jobhost_attempt_logs_kept() FROM PUBLIC;
