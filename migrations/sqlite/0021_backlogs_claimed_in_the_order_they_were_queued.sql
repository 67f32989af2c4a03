-- A backlog drains at the same pace whatever its ids and due times. The claim takes due runs
-- in due time and then id order, from indexes keyed `(…, next_attempt_at, id)`. Runs queued
-- by a plain `INSERT` (an operator's script, an import, an older version) may share one due
-- time and carry random (v4) ids: the claim then took them in an order unrelated to where
-- they lie, so each run started and ended on a table page of its own, and each of these
-- indexes lost entries all over it. Every claim and every ending wrote hundreds of scattered
-- pages (a 100 000-run backlog of such runs drained at 2 000 runs/s, against 17 000 for
-- runs queued a millisecond apart with time-ordered ids).
--
-- Ties in due time are now taken in the order the runs were queued: by rowid, which the
-- indexes below end with (SQLite appends it to every index entry), so the claim reads
-- them in order without a sort (`store::queries`, `{queue_order}`). Consecutive runs lie on
-- the same pages, whatever their ids. The Postgres migration of this number says why
-- Postgres keeps its order.
DROP INDEX jobhost_runs_claim;
CREATE INDEX jobhost_runs_claim ON jobhost_runs (next_attempt_at)
    WHERE status = 'queued' AND origin <> 'manual';
DROP INDEX jobhost_runs_queued_by_tenant;
CREATE INDEX jobhost_runs_queued_by_tenant ON jobhost_runs (tenant, next_attempt_at)
    WHERE status = 'queued';
