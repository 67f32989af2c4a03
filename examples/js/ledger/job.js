// Writes `rows` rows into the `ledger` table in one transaction: the JavaScript twin of
// examples/ledger (Rust).
//
// Payload: {"rows": n, "wait_ms": m, "wait_at": "commit" | "begin"}. With `wait_ms`, it
// waits that long before committing (`wait_at` = "commit", the default: inside the open
// transaction) or before opening the transaction ("begin"), to outlive its deadline or its
// lease. Needs `db.write=ledger` and the table from examples/migrations.
//
// "mode" picks a misbehaviour instead, to see what the host makes of it:
//
// - raise: an uncaught Error (handler_failed, its stack in the log)
// - unrecoverable: Unrecoverable (the run ends, never retried)
// - hog: allocates until the memory cap (memory_limit)
// - spin: a busy loop (timeout)
// - secrets: reads a table it was not granted (query_refused)
// - link: calls a mount it was not granted (`links` is not in the component at all:
//   refused before anything is sent, and the run ends as unrecoverable)
// - huge-log: 20,000 log lines of 1 KiB (the host keeps a bounded log)
// - handles: opens transactions and never ends them
// - platform: reaches for what a job does not have (`fetch`, `import()` of `fs`, `node:fs`
//   and `node:net`, `process`, a WebSocket), catches each refusal, logs it and succeeds
// - fetch: calls `fetch` and lets its refusal fail the attempt (handler_failed)

import { DONE, Unrecoverable, db, links, log } from './jobhost.js';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export async function run(ctx) {
  const payload = isObject(ctx.payload) ? ctx.payload : {};
  if (payload.mode !== undefined) return misbehave(ctx, payload.mode);

  // A payload that does not fit can never succeed: end the run, as the Rust job does.
  const { rows, wait_ms: wait = 0, wait_at: waitAt = 'commit' } = payload;
  if (!isCount(rows) || !isCount(wait) || (waitAt !== 'commit' && waitAt !== 'begin')) {
    throw new Unrecoverable(
      `the payload is {"rows": n, "wait_ms": m, "wait_at": "commit" | "begin"}, not ${JSON.stringify(ctx.payload)}`,
    );
  }

  if (waitAt === 'begin') await sleep(wait);
  // Commits when the function's promise resolves; rolls back if it rejects.
  await db.transaction(async (tx) => {
    for (let n = 0; n < rows; n++) {
      tx.execute('INSERT INTO ledger (run_id, attempt, n) VALUES ($1, $2, $3)', [ctx.runId, ctx.attempt, n]);
    }
    if (waitAt === 'commit') await sleep(wait);
  });
  log.info(`committed ${rows} rows`);
  return DONE;
}

/** Each of the platform's refusals, caught and logged as `refused <what>: <error>`. */
async function platform() {
  const reaches = {
    fetch: () => fetch('https://example.com/'),
    fs: () => import('fs'),
    'node:fs': () => import('node:fs'),
    'node:net': () => import('node:net'),
    process: () => process.exit(0),
    WebSocket: () => new WebSocket('wss://example.com/'),
  };
  for (const [what, reach] of Object.entries(reaches)) {
    try {
      await reach();
      log.error(`${what} was not refused`);
    } catch (e) {
      log.info(`refused ${what}: ${e.name}: ${e.message}`);
    }
  }
  return DONE;
}

const isObject = (value) => value !== null && typeof value === 'object' && !Array.isArray(value);
const isCount = (value) => Number.isSafeInteger(value) && value >= 0;

function misbehave(ctx, mode) {
  switch (mode) {
    case 'raise':
      throw new Error('asked to raise');
    case 'unrecoverable':
      throw new Unrecoverable('asked to give up');
    case 'hog': {
      const held = [];
      for (;;) held.push(new Uint8Array(1 << 20).fill(1));
    }
    case 'spin': {
      let n = 0;
      for (;;) n += 1;
    }
    case 'secrets': {
      // `secrets` is not granted: the host refuses, and the HostError fails the attempt.
      const rows = db.query('SELECT value FROM secrets');
      log.info(`read ${rows.length} secrets`);
      return DONE;
    }
    case 'link':
      // No link is granted: refused before anything is sent.
      links.call('nowhere', 'GET', '');
      return DONE;
    case 'huge-log': {
      const line = 'x'.repeat(1024);
      for (let i = 0; i < 20000; i++) log.info(`${String(i).padStart(5, '0')} ${line}`);
      return DONE;
    }
    case 'handles': {
      const held = [];
      for (;;) held.push(db.begin());
    }
    case 'platform':
      return platform();
    case 'fetch':
      return fetch('https://example.com/').then(() => DONE);
    default:
      throw new Unrecoverable(`no mode ${JSON.stringify(mode)}`);
  }
}
