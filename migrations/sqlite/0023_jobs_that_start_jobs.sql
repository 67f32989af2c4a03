-- Jobs that start jobs (issue 29): a run's parent, what it hands back, and a parent's
-- wait for its children.
--
-- `parent_run`, `parent_attempt` and `parent_pass` name the attempt whose `jobs` call
-- queued the run; `detached` children are neither waited for nor cancelled with their
-- parent. `result` is the JSON value a run hands its parent (`run.set-result`). `event`
-- names the event that queued a run of origin `event`.
--
-- A parent that called `jobs.wait-for-children` records the pass it waits in
-- (`wait_pass`) and its policy; once that pass ended (`wait_pass` < `pass`) it sleeps,
-- queued with its lease parked and due at no time, until the family sweep
-- (`crate::family`) wakes it or fails it. `family` = 1 marks a run whose children the
-- sweep looks after: from its first attached child or wait until it ended and none of
-- its children is left unfinished.
ALTER TABLE jobhost_runs ADD COLUMN parent_run TEXT;
ALTER TABLE jobhost_runs ADD COLUMN parent_attempt BIGINT;
ALTER TABLE jobhost_runs ADD COLUMN parent_pass BIGINT;
ALTER TABLE jobhost_runs ADD COLUMN detached INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobhost_runs ADD COLUMN result TEXT;
ALTER TABLE jobhost_runs ADD COLUMN event TEXT;
ALTER TABLE jobhost_runs ADD COLUMN wait_pass BIGINT;
ALTER TABLE jobhost_runs ADD COLUMN wait_policy TEXT;
ALTER TABLE jobhost_runs ADD COLUMN family INTEGER NOT NULL DEFAULT 0;

CREATE INDEX jobhost_runs_parent ON jobhost_runs (parent_run, parent_pass, id)
    WHERE parent_run IS NOT NULL;
CREATE INDEX jobhost_runs_family ON jobhost_runs (id) WHERE family = 1;
