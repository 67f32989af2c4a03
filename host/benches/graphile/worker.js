// One graphile-worker process for host/benches/serve.rs: a no-op `noop` task, run with
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
