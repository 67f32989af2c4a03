// Enqueues a batch of no-op jobs for host/benches/serve.rs, in one `addJobs` call: one
// statement, one transaction, and one `jobs:insert` notification for the whole batch.
//
//   DATABASE_URL=postgres://... node enqueue.js --setup        install graphile-worker's schema
//   DATABASE_URL=postgres://... node enqueue.js --count 200    enqueue 200 `noop` jobs
//
// Prints one JSON line: {"queued_at": <ms since the epoch, taken just before addJobs>,
// "enqueue_ms": <how long addJobs took>, "count": N}. Workers measure from `queued_at`.
"use strict";

const { makeWorkerUtils } = require("graphile-worker");

function now() {
  return performance.timeOrigin + performance.now();
}

function arg(name) {
  const i = process.argv.indexOf(name);
  return i < 0 ? undefined : process.argv[i + 1];
}

async function main() {
  const connectionString = process.env.DATABASE_URL;
  if (!connectionString) throw new Error("set DATABASE_URL");
  const utils = await makeWorkerUtils({ connectionString });
  try {
    if (process.argv.includes("--setup")) {
      await utils.migrate();
      process.stdout.write(JSON.stringify({ setup: true }) + "\n");
      return;
    }
    const count = Number(arg("--count") ?? "200");
    if (!Number.isInteger(count) || count < 1) throw new Error(`bad --count ${arg("--count")}`);
    const specs = Array.from({ length: count }, () => ({ identifier: "noop", payload: {} }));
    // Warm the connection first, so `enqueue_ms` is the insert alone.
    await utils.withPgClient((client) => client.query("SELECT 1"));
    const queuedAt = now();
    const jobs = await utils.addJobs(specs);
    const enqueueMs = now() - queuedAt;
    if (jobs.length !== count) throw new Error(`addJobs returned ${jobs.length} jobs, not ${count}`);
    process.stdout.write(JSON.stringify({ queued_at: queuedAt, enqueue_ms: enqueueMs, count }) + "\n");
  } finally {
    await utils.release();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
