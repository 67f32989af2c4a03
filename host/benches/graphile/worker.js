// One graphile-worker process for host/benches/serve.rs: a no-op `noop` task and the
// fan-out's `parent`, `child` and `resume` (below), run with
// `--concurrency N` (default 4) and graphile-worker's out-of-the-box settings otherwise:
// LISTEN "jobs:insert" for new jobs plus the default 2 s poll, a pool of at most 10
// connections, per-job logging on. With `--batched`, its documented batching preset instead
// (https://worker.graphile.org/docs/performance#batching): a local queue of 500 jobs
// fetched (and locked) at once, and completions batched with no added delay.
//
//   DATABASE_URL=postgres://... node worker.js --concurrency 4 [--batched]
//
// Stdout lines that start with "@bench " carry JSON for the benchmark; everything else is
// graphile-worker's own logging. The benchmark queues the jobs and checks when they are
// done itself; the worker only says:
//   - {"started": true} once `run()` has returned (the worker is taking jobs);
//   - {"ready": true} once its LISTEN connection is up too (an idle worker a new job wakes);
//   - {"first_job_at": T} when its first job starts (T: ms since the epoch).
//
// The fan-out (the benchmark adds one `parent` job, payload {"children": N}):
//   - `parent` sets the counter row (`bench_fanin`, made by setup.js) to N, and queues N
//     `child` jobs (payload {"n": i}, i from 0) with one `add_jobs` statement, both in one
//     transaction; it says {"parent_started_at": T, "enqueued_ms": D} (D: from the task's
//     start to the commit);
//   - `child` decrements the counter and adds its n to the row's total in one statement
//     that, when the counter reaches 0, also adds the `resume` job (payload {"total"}); the
//     child that did says {"last_child_at": T};
//   - `resume` says {"resumed_at": T, "total": total} as it starts.
// SIGTERM stops it gracefully (graphile-worker's own signal handling).
"use strict";

const { EventEmitter } = require("node:events");
const { run } = require("graphile-worker");

function arg(name) {
  const i = process.argv.indexOf(name);
  return i < 0 ? undefined : process.argv[i + 1];
}

function report(value) {
  process.stdout.write("@bench " + JSON.stringify(value) + "\n");
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/// Milliseconds since the epoch, sub-millisecond.
const now = () => performance.timeOrigin + performance.now();

const SET_COUNTER =
  "INSERT INTO bench_fanin (id, remaining, total) VALUES (1, $1, 0) " +
  "ON CONFLICT (id) DO UPDATE SET remaining = EXCLUDED.remaining, total = 0";
// The statement graphile-worker's `addJobs` runs, for `$1` children at once.
const ADD_CHILDREN =
  "SELECT COUNT(*) AS added FROM graphile_worker.add_jobs(ARRAY(" +
  "SELECT json_populate_record(NULL::graphile_worker.job_spec, json_build_object(" +
  "'identifier', 'child', 'payload', json_build_object('n', i))) " +
  "FROM generate_series(0, $1::int - 1) AS i), false)";
// One child's end: the counter down by one, and the resume added by the child that takes
// it to 0, in the same statement (so the same transaction).
const CHILD_DONE =
  "WITH c AS (UPDATE bench_fanin SET remaining = remaining - 1, total = total + $1::bigint " +
  "WHERE id = 1 RETURNING remaining, total) " +
  "SELECT graphile_worker.add_job('resume', json_build_object('total', c.total)) " +
  "FROM c WHERE c.remaining = 0";

const fanout = {
  parent: async (payload, helpers) => {
    const started = now();
    const children = Number(payload.children);
    await helpers.withPgClient(async (client) => {
      await client.query("BEGIN");
      try {
        await client.query(SET_COUNTER, [children]);
        const { rows } = await client.query(ADD_CHILDREN, [children]);
        if (Number(rows[0].added) !== children) {
          throw new Error(`added ${rows[0].added} children, not ${children}`);
        }
        await client.query("COMMIT");
      } catch (e) {
        await client.query("ROLLBACK");
        throw e;
      }
    });
    report({ parent_started_at: started, enqueued_ms: now() - started });
  },
  child: async (payload, helpers) => {
    const { rows } = await helpers.query(CHILD_DONE, [payload.n]);
    if (rows.length > 0) report({ last_child_at: now() });
  },
  resume: async (payload) => {
    report({ resumed_at: now(), total: Number(payload.total) });
  },
};

async function main() {
  const connectionString = process.env.DATABASE_URL;
  if (!connectionString) throw new Error("set DATABASE_URL");
  const concurrency = Number(arg("--concurrency") ?? "4");
  const batched = process.argv.includes("--batched");

  const events = new EventEmitter();
  events.once("job:start", () => {
    report({ first_job_at: performance.timeOrigin + performance.now() });
  });
  const listening = new Promise((resolve) => events.once("pool:listen:success", resolve));

  const runner = await run({
    connectionString,
    concurrency,
    events,
    taskList: {
      noop: async () => {},
      ...fanout,
    },
    preset: batched
      ? {
          worker: {
            localQueue: { size: 500 },
            completeJobBatchDelay: 0,
            failJobBatchDelay: 0,
          },
        }
      : undefined,
  });
  report({ started: true });
  await listening;
  // `pool:listen:success` fires as the LISTEN statement is sent; give it a moment.
  await sleep(200);
  report({ ready: true });
  await runner.promise;
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
