-- The Postgres migration of this number plans its claim's choice of due runs without a
-- sort, so stale statistics can never make a claim read and sort the whole queue, and
-- names a queued run's tenant in its notification, so every host serves that tenant in
-- turn at once. The SQLite claim (`store::queries`, `due_runs`, run by the host's writer)
-- names its index (`INDEXED BY jobhost_runs_queued_by_tenant`), whose order is the
-- claim's, and enumerates the tenants with queued runs in every claim: nothing changes
-- here.
SELECT 1;
