// One graphile-worker process for host/benches/serve.rs: a no-op `noop` task, run with
// `--concurrency N` (default 4) and graphile-worker's out-of-the-box settings otherwise:
// LISTEN "jobs:insert" for new jobs plus the default 2 s poll, per-job logging on.
//
//   DATABASE_URL=postgres://... node worker.js --concurrency 4
//
// Protocol (so several processes can share one drain): stdout lines that start with
// "@bench " carry JSON; everything else on stdout is graphile-worker's own logging.
//   - once the worker runs and its LISTEN connection is up: @bench {"ready":true}
//   - for each line {"queued_at": T} read on stdin (T: ms since the epoch, when the batch
//     was enqueued; the batch is committed by then), the worker waits until the queue is
//     drained (no job row is left: graphile-worker deletes a job when it succeeds), polling
//     every 5 ms on a connection of its own, then prints
//       @bench {"elapsed_ms": <drained - T>, "processed": <jobs this process ran meanwhile>}
//   - at the end of stdin it stops gracefully and exits.
"use strict";

const { EventEmitter } = require("node:events");
const readline = require("node:readline");
const { run } = require("graphile-worker");
const { Client } = require("pg");

const POLL_DRAINED_MS = 5;

function now() {
  return performance.timeOrigin + performance.now();
}

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

  const events = new EventEmitter();
  let processed = 0;
  events.on("job:success", () => {
    processed += 1;
  });
  const listening = new Promise((resolve) => events.once("pool:listen:success", resolve));

  const runner = await run({
    connectionString,
    concurrency,
    events,
    taskList: {
      noop: async () => {},
    },
  });
  await listening;
  // `pool:listen:success` fires as the LISTEN statement is sent; give it a moment.
  await sleep(200);

  const probe = new Client({ connectionString });
  await probe.connect();
  const drained = async () => {
    const { rows } = await probe.query(
      "SELECT NOT EXISTS (SELECT 1 FROM graphile_worker._private_jobs) AS drained",
    );
    return rows[0].drained;
  };

  report({ ready: true });

  const lines = readline.createInterface({ input: process.stdin });
  for await (const line of lines) {
    if (!line.trim()) continue;
    const { queued_at: queuedAt } = JSON.parse(line);
    while (!(await drained())) {
      await sleep(POLL_DRAINED_MS);
    }
    const elapsedMs = now() - queuedAt;
    report({ elapsed_ms: elapsedMs, processed });
    processed = 0;
  }

  await probe.end();
  await runner.stop();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
