-- An application's enqueue in its own transaction (issue 41): the schema `jobhost`, owned
-- by the host's role, holds what applications may call — `jobhost.enqueue`, whose text is
-- the repeatable `functions/app_enqueue.sql`. Nobody may use the schema until
-- `host apps grant ROLE` grants a role its usage and the function's execution; the
-- grants are Postgres' own (no table of roles), so `host apps list` reads them there.
CREATE SCHEMA IF NOT EXISTS jobhost;
REVOKE ALL ON SCHEMA jobhost FROM PUBLIC;
