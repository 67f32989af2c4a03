-- Live runs, second part (issue 44): the fuel a running attempt has burnt so far, written
-- with its live log by its host (`runs::runner::live`); null where the host does not meter
-- fuel. The other backend's migration of the same number is the same.
ALTER TABLE jobhost_live_logs ADD COLUMN fuel_used BIGINT;
