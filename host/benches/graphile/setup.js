// Installs graphile-worker's schema for host/benches/serve.rs, which then queues jobs with
// graphile-worker's own `add_jobs` SQL function (the statement `addJobs` runs), and the
// fan-out's counter row's table (see worker.js):
//
//   DATABASE_URL=postgres://... node setup.js
"use strict";

const { makeWorkerUtils } = require("graphile-worker");

async function main() {
  const connectionString = process.env.DATABASE_URL;
  if (!connectionString) throw new Error("set DATABASE_URL");
  const utils = await makeWorkerUtils({ connectionString });
  try {
    await utils.migrate();
    await utils.withPgClient((client) =>
      client.query(
        "CREATE TABLE IF NOT EXISTS bench_fanin " +
          "(id int PRIMARY KEY, remaining int NOT NULL, total bigint NOT NULL)",
      ),
    );
  } finally {
    await utils.release();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
