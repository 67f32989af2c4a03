-- A run keeps the logs of its last 1 000 attempts: recording a later one empties the log
-- of the one 1 000 before it (marked truncated). A run that continues pass after pass has
-- one attempt per pass, each with up to 64 KiB of log, and no bound on its passes; this
-- bounds what its logs make the database hold. The attempts themselves stay: their fuel
-- and time are what a tenant's quota sums. The Postgres migration of the same number has
-- the same trigger.
CREATE TRIGGER jobhost_attempt_logs_kept AFTER INSERT ON jobhost_attempts
WHEN NEW.seq > 1000
BEGIN
    UPDATE jobhost_attempts SET log = '', log_truncated = 1
    WHERE run_id = NEW.run_id AND seq = NEW.seq - 1000 AND log <> '';
END;
