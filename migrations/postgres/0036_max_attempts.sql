-- A start's own bound on its attempts (issue 41): `max_attempts` from the API, `host
-- start` (`rules::enqueue`), at least 1 and at most its job's retries + 1, checked before
-- the run is written. NULL: the job's retries alone. The runner reads it when an attempt
-- failed (`rules::enqueue::attempts_allowed`). The other backend's migration of the same
-- number has the same column.
ALTER TABLE jobhost_runs ADD COLUMN max_attempts BIGINT;
