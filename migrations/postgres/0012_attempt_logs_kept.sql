-- A run keeps the logs of its last 1 000 attempts: recording a later one empties the log
-- of the one 1 000 before it (marked truncated). A run that continues pass after pass has
-- one attempt per pass, each with up to 64 KiB of log, and no bound on its passes; this
-- bounds what its logs make the database hold. The attempts themselves stay: their fuel
-- and time are what a tenant's quota sums. The SQLite migration of the same number has the
-- same trigger.
CREATE FUNCTION jobhost_attempt_logs_kept() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    UPDATE jobhost_attempts a SET log = '', log_truncated = 1
    WHERE a.run_id = NEW.run_id AND a.seq = NEW.seq - 1000 AND a.log <> '';
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION jobhost_attempt_logs_kept() FROM PUBLIC;

CREATE TRIGGER jobhost_attempt_logs_kept AFTER INSERT ON jobhost_attempts
FOR EACH ROW WHEN (NEW.seq > 1000)
EXECUTE FUNCTION jobhost_attempt_logs_kept();
