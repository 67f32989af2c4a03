-- Surveillance reads only the runs a host holds. It looks for lost runs among the running
-- runs and the queued manual ones (a retry or the next pass of a `host run`); asked as one
-- condition with an `OR`, the index by status served the `queued` half by reading every
-- queued run, so each tick cost time in proportion to the backlog. The query is now one
-- branch per kind (`store::queries`, `lost_runs`): running runs by the index by status,
-- queued manual runs by this index, which holds no other run (named with `INDEXED BY`:
-- without statistics the planner prefers the index by status). The Postgres migration of
-- this number also keeps its runs trigger from looking up steps for runs at their first
-- pass; SQLite's trigger (migration 0005) already runs only when the pass, the work or
-- the status changes in a way that drops steps.
CREATE INDEX jobhost_runs_manual_queued ON jobhost_runs (updated_at)
    WHERE status = 'queued' AND origin = 'manual';
