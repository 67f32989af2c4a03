-- The Postgres migration of this number plans its claim's choice of due runs without a
-- sort, so stale statistics can never make a claim read and sort the whole queue. The
-- SQLite claim (`store::queries`, `due_runs`, run by the host's writer) names its index
-- (`INDEXED BY jobhost_runs_queued_by_tenant`), whose order is the claim's: nothing
-- changes here.
SELECT 1;
