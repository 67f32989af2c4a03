// A parent that starts children and waits for them, and the children (one component, two
// jobs, told apart by the job's name: a job whose name ends in `child` is a child). It does
// exactly what the Rust example `examples/family` does, payload for payload and log line for
// log line, so one test body checks the three languages (`tests/polyglot.rs`).
//
// The parent's payload: {"children": n, "in_tx": bool, "fail_after": bool, "wait": "fail" |
// "continue" | null, "failing": [i, ...], "wait_ms": m, "detached": bool, "delay_ms": d,
// "job": "family-child", "busy_ms": b, "linger_ms": l, "beside": [...], "forks": bool,
// "child_writes": w, "child_wait_ms": m, "step": bool}. Every pass first logs its place in the
// run (`run.info()`). With `step` the first pass reaches the step `sample` and logs what it
// got back, failing its first attempt after it: the value reads the same on the first run and
// on the retry, a `Date` as its string and `undefined` gone. Then the first pass waits
// `wait_ms`, queues `n` runs of `job` (payload {"n": i, "fail": i in failing, "busy_ms": b,
// "writes": w, "wait_ms": m}, or with `forks` its own), in a transaction that also writes a
// `ledger` row (`in_tx`) or in writes of their own; with `fail_after` it then fails. With
// `beside` it makes those calls (`enqueue`, `kick`, `emit`, `result`) outside its open
// transaction and logs how each was answered. With `wait` the pass continues, waiting for its
// children; the next pass sums their results. With `start_key` it starts two runs of `job`
// under that unique key (`jobs.start`) and logs what each start answered.
//
// A child writes `writes` transactions of one `ledger` row each (held open `wait_ms`), takes
// `busy_ms`, then hands back {"n": n}, or, with `fail`, fails for good. Needs
// `db.write=ledger`, `steps`, `jobs` granting the children and the table from
// examples/migrations.

import { Continue, DONE, Failed, HostError, Unrecoverable, db, jobs, log, run as thisRun, steps } from './jobhost.js';

// Runs queued per call: the host takes at most 1000.
const BATCH = 1000;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export async function run(ctx) {
  const p = ctx.payload;
  if (ctx.job.endsWith('child')) return child(ctx, p);
  const info = thisRun.info();
  log.info(
    `pass ${ctx.pass} attempt ${ctx.attempt}: final=${info.finalAttempt} retries_left=${info.retriesLeft} ` +
      `started_by=${startedBy(info.startedBy)} deferrals=${info.deferrals}`,
  );
  if (ctx.pass > 1) return sumUp();
  if (p.step ?? false) {
    const sample = steps.step('sample', () => ({ pair: [1, 'a'], when: new Date(0), gone: undefined, list: [undefined, 1] }));
    log.info(`step sample: ${shape(sample)}`);
    if (ctx.attempt === 1) throw new Failed('failing after the step');
  }
  await startChildren(ctx, p);
  if (p.start_key != null) startTwice(p.start_key, p.job ?? 'family-child');
  const policy = p.wait ?? null;
  if (policy === null) return DONE;
  jobs.waitForChildren(policy === 'fail' ? 'fail' : 'continue');
  return Continue({});
}

/** What started the run, written as the Rust example's `{:?}` writes it. */
function startedBy({ kind, value }) {
  const name = `StartedBy::${kind[0].toUpperCase()}${kind.slice(1)}`;
  if (value === null) return name;
  return typeof value === 'number' ? `${name}(${value})` : `${name}(${JSON.stringify(value)})`;
}

/** A value as its types show: a `Date` as `Date(...)`, `undefined` as itself, strings quoted. */
function shape(value) {
  if (value === undefined) return 'undefined';
  if (value instanceof Date) return `Date(${value.toISOString()})`;
  if (Array.isArray(value)) return `[${value.map(shape).join(', ')}]`;
  if (value !== null && typeof value === 'object') {
    return `{${Object.entries(value).map(([k, v]) => `${k}: ${shape(v)}`).join(', ')}}`;
  }
  return JSON.stringify(value);
}

async function child(ctx, p) {
  const n = p.n ?? 0;
  log.info(`child ${n}: started_by=${startedBy(thisRun.info().startedBy)}`);
  for (let i = 0; i < (p.writes ?? 0); i++) {
    const began = Date.now();
    const tx = db.begin();
    tx.execute('INSERT INTO ledger (run_id, attempt, n) VALUES ($1, $2, $3)', [ctx.runId, ctx.attempt, began]);
    await sleep(p.wait_ms ?? 0);
    tx.commit();
  }
  await sleep(p.busy_ms ?? 0);
  if (p.fail ?? false) throw new Unrecoverable(`child ${n} fails`);
  thisRun.setResult({ n });
  return DONE;
}

async function startChildren(ctx, p) {
  await sleep(p.wait_ms ?? 0);
  const job = p.job ?? 'family-child';
  const failing = p.failing ?? [];
  const children = p.children ?? 0;
  const newRun = (n) => ({
    job,
    payload: p.forks ?? false
      ? { children, job, forks: true, detached: p.detached ?? false }
      : { n, fail: failing.includes(n), busy_ms: p.busy_ms ?? 0, writes: p.child_writes ?? 0, wait_ms: p.child_wait_ms ?? 0 },
    options: { delay: failing.includes(n) ? 0 : (p.delay_ms ?? 0) / 1000, detached: p.detached ?? false },
  });
  const batches = [];
  for (let start = 0; start < children; start += BATCH) {
    const batch = [];
    for (let n = start; n < Math.min(start + BATCH, children); n++) batch.push(newRun(n));
    batches.push(batch);
  }
  if (p.in_tx ?? false) {
    const tx = db.begin();
    tx.execute('INSERT INTO ledger (run_id, attempt, n) VALUES ($1, $2, $3)', [ctx.runId, ctx.attempt, 0]);
    for (const batch of batches) jobs.enqueueAllIn(tx, batch);
    for (const call of p.beside ?? []) beside(call, job);
    if (p.fail_after ?? false) {
      tx.rollback();
      throw new Failed('failing after queueing, before the commit');
    }
    tx.commit();
  } else {
    for (const batch of batches) jobs.enqueueAll(batch);
    if (p.fail_after ?? false) {
      await sleep(p.linger_ms ?? 0);
      throw new Failed('failing after queueing');
    }
  }
  log.info(`started ${children} runs of ${job}`);
}

/** Starts two runs of `job` under unique `key` (an hour later, one attempt, detached) and logs what each start answered. */
function startTwice(key, job) {
  const options = { delay: 3600, maxAttempts: 1, detached: true, unique: { key, hold: 'until-finished' } };
  const first = jobs.start(job, { n: 0 }, options);
  const again = jobs.start(job, { n: 1 }, options);
  log.info(`started ${key}: ${first.outcome} then ${again.outcome}, one run: ${first.runId === again.runId}`);
}

/** Makes `call` outside the open transaction and logs its answer. */
function beside(call, job) {
  let answer;
  try {
    if (call === 'enqueue') answer = `ok ${jobs.enqueue(job, { n: 0 }).runId}`;
    else if (call === 'kick') answer = `ok ${jobs.kick(job)}`;
    else if (call === 'emit') answer = `ok ${jobs.emit('nudge', {})}`;
    else if (call === 'result') {
      thisRun.setResult({ beside: true });
      answer = 'ok ';
    } else answer = 'ok unknown call';
  } catch (e) {
    if (!(e instanceof HostError)) throw e;
    answer = e.message;
  }
  log.info(`beside ${call}: ${answer}`);
}

function sumUp() {
  const children = thisRun.children();
  const succeeded = children.filter((c) => c.status === 'succeeded').length;
  const sum = children.reduce((total, c) => total + (Number.isSafeInteger(c.result?.n) ? c.result.n : 0), 0);
  const other = children.length - succeeded;
  log.info(`children: ${succeeded} succeeded, ${other} other, sum ${sum}`);
  thisRun.setResult({ succeeded, other, sum });
  return DONE;
}
