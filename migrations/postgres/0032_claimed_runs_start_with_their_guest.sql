-- Claimed ahead is not running (issue 40). A host claims runs ahead of its free workers;
-- such a run is `running` in its row (its lease taken, every limit counting it) but its
-- guest has not started. `guest_started_at` is when the current attempt's guest started
-- (database clock), written by the host that runs it (`runs::runner::starts`), NULL
-- from the claim until then: a running run without it is shown `claimed`, and the run's
-- `started_at` is its first guest start, no longer its first claim. The other backend's
-- migration of the same number has the same column.
ALTER TABLE jobhost_runs ADD COLUMN guest_started_at BIGINT;

-- Runs running as the host is upgraded were started by the hosts that claimed them.
UPDATE jobhost_runs SET guest_started_at = updated_at WHERE status = 'running';
