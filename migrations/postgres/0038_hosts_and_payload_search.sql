-- Each serving host's heartbeat, for the console's hosts view, and payload search (issue
-- 44). The migration of the same number on the other backend has the same table and
-- columns; only Postgres has an index for payload search (SQLite's search is a bounded scan).

-- One row per host process (`host_id`, its hostname and pid), written every few seconds
-- while it serves: its version, its lanes with their workers and how many are busy (JSON
-- `[{"lane", "workers", "busy"}]`), when it started and when it was last seen (database
-- time, ms); `stopped_at` when it stopped cleanly. A host not seen for three beats is not
-- alive; rows not seen for a day are deleted by the beats of the hosts still serving.
CREATE TABLE jobhost_hosts (
    host_id    TEXT PRIMARY KEY,
    version    TEXT NOT NULL,
    lanes      TEXT NOT NULL,
    started_at BIGINT NOT NULL,
    seen_at    BIGINT NOT NULL,
    stopped_at BIGINT
);

-- Payload search (`GET /runs/search`): `payload::jsonb @> needle`, served by this index over
-- the runs whose payload is a JSON object (every payload is JSON, canonical, by the payload
-- rule; the predicate keeps a hand-edited row that is not an object out of the cast) that
-- jsonb can hold: a payload with the escape `\u0000` is valid JSON that jsonb refuses, and
-- without the second condition such a run could not be inserted at all. The cost is a jsonb
-- parse and a GIN entry per run written. SQLite has neither: its search is a bounded scan
-- (`store::payload_search`).
CREATE INDEX jobhost_runs_payload ON jobhost_runs
    USING GIN ((CAST(payload AS jsonb)) jsonb_path_ops)
    WHERE substr(payload, 1, 1) = chr(123) AND strpos(payload, '\u0000') = 0;
