/**
 * The jobhost guest SDK for JavaScript: a job is a function `run(ctx)` exported by `job.js`.
 *
 *     import { db, log, DONE } from './jobhost.js';
 *
 *     export function run(ctx) {
 *       log.info(`recording ${ctx.payload.items.length} items`);
 *       db.transaction((tx) => {   // commits when the function returns, rolls back if it throws
 *         for (const item of ctx.payload.items) {
 *           tx.execute('INSERT INTO demo_items (run_id, item) VALUES ($1, $2)', [ctx.runId, item]);
 *         }
 *       });
 *       return DONE;
 *     }
 *
 * `run` returns `DONE` (or nothing), `Continue(cursor)` for another pass (which gets the
 * cursor, any JSON value, as `ctx.cursor`), or `Defer(seconds)`; it may be `async` and
 * return a promise of one. It throws `Failed` to fail this attempt (it is retried while
 * retries are left) or `Unrecoverable` to end the run; a host refusal throws a `HostError`
 * (its `code` is fixed, see `host codes`). Any other exception fails the attempt with its
 * `Name: message (at file:line:column in function)`, the innermost frame of the job's own
 * code; its stack (and an uncaught `HostError`'s) goes to the attempt's log.
 * Running out of memory is not caught: the attempt traps, and the host reports
 * `memory_limit` when the job's memory cap was the cause.
 *
 * `ctx` holds `job`, `runId`, `instance`, `tenant`, `attempt` and `pass` (1-based),
 * `payload` (the run's payload, decoded from JSON; a payload that is not JSON ends the run
 * as unrecoverable), `cursor` (what the previous pass gave `Continue`, or null) and
 * `counters` (the run's counters by name).
 *
 * The capabilities: `log` (`trace` to `error`); `db` (`query`, `begin`, and
 * `transaction(fn)`, which commits when `fn` returns and rolls back if it throws), its
 * `Transaction` (`query`, `execute`, `commit`, `commitPass(end)`, `rollback`) and `Rows`
 * (`columns`, `rows`, `dicts()`); `files` (`stat`, `read`, `readAll`, `list`, `put`,
 * `remove`, `removeIn`, `statVersion`, `readVersion`, `upload` giving an `Upload`: `write`,
 * `attach`, `attachIn`; and `scan`: `pending`, `read`, `mark`); `links`
 * (`call(mount, method, path, {headers, body, json, step, action})` and `send`, alike but
 * for the mount's limits, giving a `Response`: `status`, `headers`, `body`, `ok`,
 * `json()`, `text()`); `iam` (`issueMembership`, `revokeMembership` through a mount);
 * `steps` (`step(name, fn)`, `stepIn(tx, name, fn)`,
 * `stepWith(name, Retry(attempts, backoff), fn)`, `counterAdd(name, delta)`); `jobs`
 * (`enqueue`, `enqueueAll`, `kick`, `emit`, each with its `...In(tx, ...)` form inside a
 * transaction, and `waitForChildren`); and `run` (`info`, `children`, `setResult`: as the
 * job's own function is `run`, import it as `import { run as thisRun } from
 * './jobhost.js'`). These are the Rust SDK's calls under the same names. To wait,
 * `await new Promise((resolve) => setTimeout(resolve, ms))` in an `async` run.
 *
 * SQL values: null, numbers (a safe integer binds as an integer, any other number as a
 * real), bigints and booleans (integers), strings, and bytes (`Uint8Array` or any
 * `ArrayBuffer` view); integers come back as numbers when they are safe, else as bigints.
 *
 * The component holds only the capabilities the job was granted: `host build` builds it
 * against the grants in `jobhost.toml`, and this file gets them from `./capabilities.js`,
 * which the build writes. A capability the job was not granted is not in its component at
 * all; using it throws `HostError` with code `capability-refused`, which, uncaught, ends
 * the run (`unrecoverable`: no retry could succeed).
 */

import {
  log as rawLog, run as rawRun, db as rawDb, files as rawFiles, links as rawLinks, steps as rawSteps, jobs as rawJobs,
} from './capabilities.js';

// Most lines of a stack put in the attempt's log (its innermost ones).
const STACK_LINES = 40;
// Bytes read or written per `files` call (the host's largest chunk).
const CHUNK = 1 << 20;
// Tries `files.readAll` makes when the object is replaced while it reads.
const READ_TRIES = 3;
// Children `run.children` reads per host call (the host's largest page).
const CHILD_PAGE = 1000;

// Values made by the generated bindings belong to another realm: `instanceof Error` and
// `instanceof Uint8Array` are false for them, so they are recognised by shape and copied.

// ---- outcomes and errors -------------------------------------------------------------

/** The run is complete. */
export const DONE = Object.freeze({ toString: () => 'DONE' });

/**
 * Run another pass, which gets `cursor` (any JSON value) as `ctx.cursor`. Callable with
 * or without `new`.
 */
export function Continue(cursor) {
  if (!new.target) return new Continue(cursor);
  this.cursor = cursor === undefined ? null : cursor;
}

/**
 * Run another pass after `seconds`: a number over 0 and at most 7 days (604800). Callable
 * with or without `new`. Anything else throws here, where the job made it (`TypeError`
 * for what is not a number, `RangeError` for zero, a negative, NaN or too long), rather
 * than reach the host as a delay it would refuse (`invalid_defer`) or wrap around.
 */
export function Defer(seconds) {
  if (!new.target) return new Defer(seconds);
  deferMs(seconds);
  this.seconds = seconds;
}

// The longest defer the host takes, in seconds (the host's `engine::attempt::MAX_DEFER`).
const MAX_DEFER_SECONDS = 604800;

/** `seconds` as the host's milliseconds (a sub-millisecond delay is 1), checked. */
function deferMs(seconds) {
  if (typeof seconds !== 'number') {
    throw new TypeError(`Defer(seconds): seconds is a number, not ${typeName(seconds)}`);
  }
  if (!(seconds > 0 && seconds <= MAX_DEFER_SECONDS)) {
    throw new RangeError(`Defer(seconds): seconds is over 0 and at most ${MAX_DEFER_SECONDS} (7 days), not ${seconds}`);
  }
  return BigInt(Math.max(1, Math.round(seconds * 1000)));
}

/** This attempt failed; the host retries it while the job has retries left. */
export class Failed extends Error {}
Failed.prototype.name = 'Failed';

/** The run cannot succeed; it is never retried. */
export class Unrecoverable extends Error {}
Unrecoverable.prototype.name = 'Unrecoverable';

const DESCRIPTIONS = {
  'lease-lost': 'lease lost: nothing was committed',
  'capability-refused': 'capability refused',
  'query-refused': 'query refused',
  invalid: 'invalid call',
  unavailable: 'host unavailable',
  'rate-limited': "rate limited: the mount's limits held the call, nothing was sent",
};

/**
 * The host refused a call. `code` is one of `lease-lost`, `capability-refused`,
 * `query-refused`, `invalid`, `unavailable`, or (from `links.send`) `rate-limited`: the
 * mount's limits held the call past its `max_wait` and nothing was sent, so the job usually
 * returns a defer; `reason` is the host's fixed reason, where it
 * gives one (else undefined).
 */
export class HostError extends Error {
  constructor(code, reason) {
    const text = DESCRIPTIONS[code] ?? `host error ${code}`;
    super(reason === undefined ? text : `${text}: ${reason}`);
    this.code = code;
    this.reason = reason;
  }
}
HostError.prototype.name = 'HostError';

/** The attempt lost its lease: nothing it was committing was kept. */
export class LeaseLost extends HostError {
  constructor() {
    super('lease-lost');
  }
}
LeaseLost.prototype.name = 'LeaseLost';

/** `files.readVersion` found the name pointing at another object, or `files.readAll` on every try. */
export class Changed extends Error {}
Changed.prototype.name = 'Changed';

/** The error for a WIT `host-error` ({tag, val}). */
function hostError(value) {
  if (value.tag === 'lease-lost') return new LeaseLost();
  return new HostError(value.tag, value.val);
}

/** What the bindings throw for an `err`: a ComponentError (of their realm) with `payload`. */
function refusal(e) {
  return e !== null && typeof e === 'object' && 'payload' in e && e.payload !== null && typeof e.payload === 'object'
    && typeof e.payload.tag === 'string'
    ? e.payload
    : undefined;
}

/** Calls a host function, throwing its refusal as a `HostError`. */
function call(f, ...args) {
  try {
    return f(...args);
  } catch (e) {
    const payload = refusal(e);
    if (payload !== undefined) throw hostError(payload);
    throw e;
  }
}

// Refusals no retry can get past: the capability is not in the component at all.
const unbuilt = new WeakSet();

function notGranted(capability) {
  const refusal = new HostError(
    'capability-refused',
    `the job was not granted \`${capability}\` when it was built (see jobhost.toml)`,
  );
  // Uncaught, it ends the run (`unrecoverable`), as the host never retries a
  // `capability_refused`.
  unbuilt.add(refusal);
  return refusal;
}

function granted(raw, capability) {
  if (raw === undefined) throw notGranted(capability);
  return raw;
}

/**
 * A copy, in this realm, of bytes the bindings lifted (the constructor copies at memory
 * speed; `Uint8Array.from` would iterate them one by one, seconds per MiB).
 */
const bytes = (view) => new Uint8Array(view);

/** `data` (a string, UTF-8 encoded, or bytes) as a Uint8Array. */
function toBytes(data, what) {
  if (typeof data === 'string') return new TextEncoder().encode(data);
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  throw new TypeError(`${what} is a string or bytes, not ${typeName(data)}`);
}

/** A u64 or s64 the bindings give as a bigint: a number when safe. */
function integer(value) {
  if (typeof value !== 'bigint') return value;
  return value >= Number.MIN_SAFE_INTEGER && value <= Number.MAX_SAFE_INTEGER ? Number(value) : value;
}

function typeName(value) {
  if (value === null) return 'null';
  if (typeof value !== 'object') return typeof value;
  return value.constructor?.name ?? Object.prototype.toString.call(value).slice(8, -1);
}

/** JSON text for a cursor or a step's result; bigints are refused, as JSON has none. */
function toJson(value, what) {
  const text = JSON.stringify(value === undefined ? null : value);
  if (text === undefined) throw new TypeError(`${what} is not JSON: ${typeName(value)}`);
  return text;
}

// ---- the run's context ---------------------------------------------------------------

/** Everything a pass knows about its run. */
export class Context {
  constructor(raw) {
    /** The job's registered name. */
    this.job = raw.job;
    /** The run's id (stable across its passes and attempts). */
    this.runId = raw.runId;
    /** The instance key: runs of one job and instance never overlap. */
    this.instance = raw.instance;
    /** The tenant that owns the job. */
    this.tenant = raw.tenant;
    /** 1-based attempt number within this pass. */
    this.attempt = raw.attempt;
    /** 1-based pass number within this run. */
    this.pass = raw.pass;
    try {
      /** The run's payload, decoded from JSON. */
      this.payload = JSON.parse(raw.payload);
    } catch (e) {
      throw new Unrecoverable(`the payload is not JSON: ${e?.message ?? e}`);
    }
    /** What the previous pass gave `Continue`; null on a run's first pass. */
    this.cursor = raw.cursor === undefined || raw.cursor === null ? null : JSON.parse(raw.cursor);
    /** The run's counters, by name. */
    this.counters = Object.fromEntries(Array.from(raw.counters, (c) => [c.name, integer(c.value)]));
  }
}

// ---- log -----------------------------------------------------------------------------

function text(part) {
  if (typeof part === 'string') return part;
  if (part !== null && typeof part === 'object') {
    if (typeof part.message === 'string' && typeof part.stack === 'string') return `${part.name ?? 'Error'}: ${part.message}`;
    try {
      const json = JSON.stringify(part, (_, v) => (typeof v === 'bigint' ? v.toString() : v));
      if (json !== undefined) return json;
    } catch {
      // A cycle: fall back to String.
    }
  }
  return String(part);
}

function writer(level) {
  return (...parts) => rawLog.write(level, parts.map(text).join(' '));
}

/**
 * Log lines, kept on the attempt's record (bounded by the host). Each takes any values,
 * joined by spaces (objects as JSON).
 */
export const log = Object.freeze({
  trace: writer('trace'),
  debug: writer('debug'),
  info: writer('info'),
  warn: writer('warn'),
  error: writer('error'),
});

// ---- db ------------------------------------------------------------------------------

const MIN_S64 = -(1n << 63n);
const MAX_S64 = (1n << 63n) - 1n;

function toValue(value) {
  if (value === null || value === undefined) return { tag: 'null' };
  switch (typeof value) {
    case 'boolean':
      return { tag: 'integer', val: value ? 1n : 0n };
    case 'bigint':
      if (value < MIN_S64 || value > MAX_S64) throw new RangeError(`${value} does not fit a 64-bit integer`);
      return { tag: 'integer', val: value };
    case 'number':
      return Number.isSafeInteger(value) ? { tag: 'integer', val: BigInt(value) } : { tag: 'real', val: value };
    case 'string':
      return { tag: 'text', val: value };
    default:
      if (value instanceof ArrayBuffer || ArrayBuffer.isView(value)) return { tag: 'blob', val: toBytes(value) };
      throw new TypeError(`a statement parameter cannot be ${typeName(value)}`);
  }
}

function toValues(params) {
  if (params === undefined || params === null) return [];
  return Array.from(params, toValue);
}

function fromValue(value) {
  switch (value.tag) {
    case 'null':
      return null;
    case 'integer':
      return integer(value.val);
    case 'blob':
      return bytes(value.val);
    default:
      return value.val;
  }
}

/** A statement's result: `columns`, and `rows` of plain JavaScript values. */
export class Rows {
  constructor(raw) {
    this.columns = Array.from(raw.columns);
    this.rows = Array.from(raw.rows, (row) => Array.from(row, fromValue));
  }

  get length() {
    return this.rows.length;
  }

  [Symbol.iterator]() {
    return this.rows[Symbol.iterator]();
  }

  /** Each row as an object by column name. */
  dicts() {
    return this.rows.map((row) => Object.fromEntries(this.columns.map((c, i) => [c, row[i]])));
  }
}

// The bindings' transaction behind a `Transaction`, for `files` and `steps`.
let openTransaction;

/**
 * A write transaction, fenced by the attempt's lease. One left open (neither committed nor
 * rolled back) keeps the next `db.begin` refused (`invalid: transaction-open`) until the
 * attempt ends, which rolls it back: end it, or let `db.transaction(fn)` end it for you.
 */
export class Transaction {
  #raw;

  constructor(raw) {
    this.#raw = raw;
  }

  static {
    openTransaction = (tx) => tx.#open();
  }

  #open() {
    if (this.#raw === undefined) throw new HostError('invalid', 'the transaction has ended');
    return this.#raw;
  }

  #end() {
    const raw = this.#open();
    this.#raw = undefined;
    return raw;
  }

  /** Whether it was committed or rolled back. */
  get ended() {
    return this.#raw === undefined;
  }

  /** Runs one statement; its rows. */
  query(sql, params = []) {
    const raw = this.#open();
    return new Rows(call(() => raw.query(sql, toValues(params))));
  }

  /** Runs one statement; how many rows it changed. */
  execute(sql, params = []) {
    const raw = this.#open();
    return integer(call(() => raw.execute(sql, toValues(params))));
  }

  /** Commits if the attempt still holds its lease; `LeaseLost` means nothing was committed. */
  commit() {
    const raw = this.#end();
    call(() => rawDb.Transaction.commit(raw));
  }

  /**
   * Commits with the pass's end (`DONE` or `Continue(cursor)`) and its counter changes,
   * all or none. Returns the end, for `run` to return.
   */
  commitPass(end = DONE) {
    const steps = granted(rawSteps, 'steps');
    let rawEnd;
    if (end === DONE || end === undefined || end === null) {
      end = DONE;
      rawEnd = { tag: 'done' };
    } else if (end instanceof Continue) {
      rawEnd = { tag: 'continue', val: toJson(end.cursor, 'the cursor') };
    } else {
      throw new TypeError('a pass ends with DONE or Continue(cursor)');
    }
    const raw = this.#end();
    call(() => steps.commitPass(raw, rawEnd));
    return end;
  }

  /** Rolls back (nothing if it has ended). */
  rollback() {
    if (this.#raw !== undefined) rawDb.Transaction.rollback(this.#end());
  }
}

const isThenable = (value) => value !== null && (typeof value === 'object' || typeof value === 'function') && typeof value.then === 'function';

/** SQL on the tables the job was granted; writes only in a transaction. */
export const db = Object.freeze({
  /** Runs one read-only statement outside any transaction; its rows. */
  query(sql, params = []) {
    const raw = granted(rawDb, 'db');
    return new Rows(call(() => raw.query(sql, toValues(params))));
  },

  /** Opens the attempt's write transaction (at most one is open at a time). */
  begin() {
    const raw = granted(rawDb, 'db');
    return new Transaction(call(() => raw.begin()));
  },

  /**
   * Runs `fn(tx)` in a new transaction and commits it when `fn` returns (unless `fn` ended
   * it), or rolls it back if `fn` throws; `fn`'s result. An async `fn` gives a promise,
   * settled once the transaction has ended.
   */
  transaction(fn) {
    const tx = db.begin();
    const finish = (result) => {
      if (!tx.ended) tx.commit();
      return result;
    };
    const abandon = (e) => {
      tx.rollback();
      throw e;
    };
    let result;
    try {
      result = fn(tx);
    } catch (e) {
      abandon(e);
    }
    if (isThenable(result)) return Promise.resolve(result).then(finish, abandon);
    return finish(result);
  },
});

// ---- files ---------------------------------------------------------------------------

/** Object metadata with plain numbers: `name`, `size`, `digest`, `createdAt` (ms). */
const metadata = (m) => ({ name: m.name, size: integer(m.size), digest: m.digest, createdAt: integer(m.createdAt) });

/** Named objects in the collections the job was granted. */
export const files = Object.freeze({
  /** The object's metadata (`name`, `size`, `digest`, `createdAt`), or null. */
  stat(collection, name) {
    const raw = granted(rawFiles, 'files');
    const m = call(() => raw.stat(collection, name));
    return m === undefined || m === null ? null : metadata(m);
  },

  /**
   * Up to `length` bytes (at most 1 MiB) from `offset`. Each call reads what the name
   * points at then: use `readAll` for a whole object.
   */
  read(collection, name, offset = 0, length = CHUNK) {
    const raw = granted(rawFiles, 'files');
    return bytes(call(() => raw.read(collection, name, BigInt(offset), BigInt(length))));
  },

  /** The object `name` points at (`metadata`) and its `version`, for `readVersion`; or null. */
  statVersion(collection, name) {
    const raw = granted(rawFiles, 'files');
    const v = call(() => raw.statVersion(collection, name));
    return v === undefined || v === null ? null : { metadata: metadata(v.metadata), version: v.version };
  },

  /**
   * Up to `length` bytes (at most 1 MiB) of `version` of `name`, from `offset`; throws
   * `Changed` once the name points at another object (or none): every chunk read with one
   * version is the same object's.
   */
  readVersion(collection, name, version, offset = 0, length = CHUNK) {
    const raw = granted(rawFiles, 'files');
    return bytes(versionChunk(raw, collection, name, version, offset, length));
  },

  /** The whole object as one version (never part of a replaced one), or null. */
  readAll(collection, name) {
    const raw = granted(rawFiles, 'files');
    for (let i = 0; i < READ_TRIES; i++) {
      const version = files.statVersion(collection, name);
      if (version === null) return null;
      const size = version.metadata.size;
      const data = new Uint8Array(size);
      let filled = 0;
      try {
        while (filled < size) {
          const chunk = versionChunk(raw, collection, name, version.version, filled, Math.min(CHUNK, size - filled));
          if (chunk.length === 0) break;
          data.set(chunk, filled);
          filled += chunk.length;
        }
      } catch (e) {
        if (e instanceof Changed) continue;
        throw e;
      }
      return filled === size ? data : data.slice(0, filled);
    }
    throw new Changed(`${collection}/${name} was replaced on every read`);
  },

  /**
   * A page of objects whose name starts with `prefix`, in name order, from `cursor` on:
   * `{ objects, next }` (`next` is the cursor of the next page, null on the last).
   */
  list(collection, { prefix = '', cursor = null, limit = 100 } = {}) {
    const raw = granted(rawFiles, 'files');
    const page = call(() => raw.listObjects(collection, prefix, cursor ?? undefined, limit));
    return { objects: Array.from(page.objects, metadata), next: page.next ?? null };
  },

  /**
   * Starts writing an object into `collection`: an `Upload`, invisible until attached.
   * Start it before a transaction's first statement if it is to be attached in that
   * transaction (on SQLite the transaction holds the one write lock, and the upload is
   * refused `invalid`, `transaction-open`).
   */
  upload(collection) {
    const raw = granted(rawFiles, 'files');
    return new Upload(call(() => raw.startUpload(collection)));
  },

  /**
   * Writes `data` (a string, UTF-8 encoded, or bytes) as `name`: visible once attached, in
   * `tx` if given (it commits with the transaction) or in a fenced write of its own. Its
   * metadata.
   */
  put(collection, name, data, tx) {
    const content = toBytes(data, 'a file');
    const upload = files.upload(collection);
    upload.write(content);
    return tx === undefined || tx === null ? upload.attach(name) : upload.attachIn(tx, name);
  },

  /** Removes `name`, in `tx` if given; whether there was such an object. */
  remove(collection, name, tx) {
    const raw = granted(rawFiles, 'files');
    if (tx === undefined || tx === null) return call(() => raw.remove(collection, name));
    const rawTx = openTransaction(tx);
    return call(() => raw.removeIn(rawTx, collection, name));
  },

  /** Removes `name` when `tx` commits; whether there was such an object. */
  removeIn(tx, collection, name) {
    return files.remove(collection, name, tx);
  },

  /** For a collection's scan job (granted `files.scan`): files of every tenant waiting for a verdict. */
  scan: Object.freeze({
    /** Files waiting for a verdict: `{ id, tenant, name, size }`. */
    pending(collection, limit = 100) {
      const raw = granted(rawFiles, 'files');
      return Array.from(call(() => raw.scanPending(collection, limit)), (f) => ({
        id: f.id,
        tenant: f.tenant,
        name: f.name,
        size: integer(f.size),
      }));
    },

    /** Up to `length` bytes of a waiting file, from `offset`. */
    read(collection, id, offset = 0, length = CHUNK) {
      const raw = granted(rawFiles, 'files');
      return bytes(call(() => raw.scanRead(collection, id, BigInt(offset), BigInt(length))));
    },

    /** Marks a waiting file `'clean'` (visible to its tenant) or `'rejected'`. */
    mark(collection, id, verdict) {
      const raw = granted(rawFiles, 'files');
      if (verdict !== 'clean' && verdict !== 'rejected') {
        throw new TypeError(`a verdict is 'clean' or 'rejected', not ${text(verdict)}`);
      }
      call(() => raw.scanMark(collection, id, verdict));
    },
  }),
});

/** A chunk of one version, as the bindings give it; `Changed` once the name moved on. */
function versionChunk(raw, collection, name, version, offset, length) {
  try {
    return raw.readVersion(collection, name, version, BigInt(offset), BigInt(length));
  } catch (e) {
    const payload = refusal(e);
    if (payload === undefined) throw e;
    if (payload.tag === 'changed') throw new Changed(`${collection}/${name} was replaced while it was read`);
    throw hostError(payload.val);
  }
}

/** An object being written: invisible until attached to its name; dropped unattached, it is discarded. */
export class Upload {
  #raw;

  constructor(raw) {
    this.#raw = raw;
  }

  #open() {
    if (this.#raw === undefined) throw new HostError('invalid', 'the upload has ended');
    return this.#raw;
  }

  #take() {
    const raw = this.#open();
    this.#raw = undefined;
    return raw;
  }

  /** Appends `data` (a string, UTF-8 encoded, or bytes), sent in chunks of at most 1 MiB. */
  write(data) {
    const raw = this.#open();
    const content = toBytes(data, 'an upload');
    for (let start = 0; start < content.length; start += CHUNK) {
      const chunk = content.slice(start, start + CHUNK);
      call(() => raw.write(chunk));
    }
  }

  /** Makes it visible as `name`, in a fenced write of its own; `LeaseLost` means it never became visible. Its metadata. */
  attach(name) {
    const raw = this.#take();
    return metadata(call(() => rawFiles.attach(raw, name)));
  }

  /** Makes it visible as `name` when `tx` commits, and never otherwise. Its metadata. */
  attachIn(tx, name) {
    const rawTx = openTransaction(tx);
    const raw = this.#take();
    return metadata(call(() => rawFiles.attachIn(rawTx, raw, name)));
  }
}

// ---- links ---------------------------------------------------------------------------

/** A mount's answer: `status`, `headers` (pairs, lower-case names), `body` (bytes). */
export class Response {
  constructor(raw) {
    this.status = raw.status;
    this.headers = Array.from(raw.headers, ([k, v]) => [k, v]);
    this.body = bytes(raw.body);
  }

  /** Whether the status is 2xx. */
  get ok() {
    return this.status >= 200 && this.status < 300;
  }

  /** The body decoded from JSON. */
  json() {
    return JSON.parse(this.text());
  }

  /** The body as UTF-8 text. */
  text() {
    return new TextDecoder().decode(this.body);
  }
}

function headerPairs(headers) {
  if (headers === undefined || headers === null) return [];
  const entries = typeof headers[Symbol.iterator] === 'function' ? Array.from(headers) : Object.entries(headers);
  // As a dict would: a later value of a name replaces an earlier one.
  const byName = new Map(entries.map(([k, v]) => [String(k), String(v)]));
  return Array.from(byName);
}

/** The bindings' request for `method path` with `call`'s options. */
function linkRequest(method, path, { headers, body, json, step = '', action } = {}) {
  const pairs = headerPairs(headers);
  let content = body === undefined || body === null ? new Uint8Array(0) : toBytes(body, 'a body');
  if (json !== undefined) {
    content = new TextEncoder().encode(toJson(json, 'the json body'));
    if (!pairs.some(([k]) => k.toLowerCase() === 'content-type')) pairs.push(['content-type', 'application/json']);
  }
  return {
    method: String(method),
    path: String(path),
    headers: pairs,
    body: content,
    step: String(step),
    action: action === undefined || action === null ? undefined : String(action),
  };
}

/**
 * Calls to the mounts the job was granted; the host adds the credential and an
 * `Idempotency-Key` derived from the run, the pass and `step`.
 */
export const links = Object.freeze({
  /**
   * Sends `method path` to `mount`. Options: `headers` (an object, a Map or pairs), `body`
   * (a string or bytes) or `json` (any JSON value: sent as the body, with
   * `content-type: application/json` unless given), `step` (names this call within the
   * pass, for its idempotency key) and `action` (one of the job's declared actions).
   * A `Response`, whatever its status. The mount's `rate` and `concurrency` limits answer
   * `unavailable` here (`send` tells them apart).
   */
  call(mount, method, path, options) {
    const raw = granted(rawLinks, 'links');
    const request = linkRequest(method, path, options);
    return new Response(call(() => raw.call(mount, request)));
  },

  /**
   * `call`, with the mount's limits thrown as a `HostError` of code `rate-limited`: nothing
   * was sent, and the job usually returns a `Defer`.
   */
  send(mount, method, path, options) {
    const raw = granted(rawLinks, 'links');
    const request = linkRequest(method, path, options);
    try {
      return new Response(raw.send(mount, request));
    } catch (e) {
      const payload = refusal(e);
      if (payload === undefined) throw e;
      if (payload.tag === 'rate-limited') throw new HostError('rate-limited');
      throw hostError(payload.val);
    }
  },
});

// ---- iam -----------------------------------------------------------------------------

/**
 * Why IAM did not issue or revoke a link, as a fixed `code`: `unauthorized` (IAM refused the
 * job's credential or its action: 401, 403), `unavailable` (IAM or the way to it is down:
 * 5xx, unreachable) or `refused` (any other answer; `status` says which). Uncaught, it fails
 * the attempt with `iam: CODE`, as the Rust SDK's does; a host refusal is thrown as the
 * `HostError` it is.
 */
export class IamError extends Failed {
  constructor(code, status) {
    super(`iam: ${code}`);
    this.code = code;
    this.status = status;
  }
}

function iamAnswer(mount, method, path, expected, options) {
  let response;
  try {
    response = links.call(mount, method, path, options);
  } catch (e) {
    if (e instanceof HostError && e.code === 'unavailable') throw new IamError('unavailable');
    throw e;
  }
  if (response.status === expected) return response;
  if (response.status === 401 || response.status === 403) throw new IamError('unauthorized', response.status);
  if (response.status >= 500) throw new IamError('unavailable', response.status);
  throw new IamError('refused', response.status);
}

/**
 * Membership links issued by an IAM service through a mount, with the job's own workload
 * credential (the host's per-attempt token): an expiring, revocable link that grants a role
 * in one container of a dimension. The service answers `POST memberships` with
 * `{dimension, container, role, expires_in_s}` by `201 {id, url, expires_at}` and
 * `DELETE memberships/{id}` by `204`; the calls name the actions `membership.issue` and
 * `membership.revoke`, which the job must declare.
 */
export const iam = Object.freeze({
  /**
   * Issues a link granting `role` in `container` of `dimension` for `expiresInS` seconds
   * (an hour unless given); `step` names the call within the pass. Gives `{id, url,
   * expiresAt}` (seconds since the Unix epoch).
   */
  issueMembership(mount, { dimension, container, role, expiresInS = 3600 }, step = 'issue') {
    const json = { dimension, container, role, expires_in_s: expiresInS };
    const response = iamAnswer(mount, 'POST', 'memberships', 201, { json, step, action: 'membership.issue' });
    let link;
    try {
      link = response.json();
    } catch {
      throw new IamError('refused', response.status);
    }
    if (link === null || typeof link !== 'object' || typeof link.id !== 'string' || typeof link.url !== 'string'
        || !Number.isSafeInteger(link.expires_at)) {
      throw new IamError('refused', response.status);
    }
    return { id: link.id, url: link.url, expiresAt: link.expires_at };
  },

  /** Revokes the link `id`. */
  revokeMembership(mount, id, step = 'revoke') {
    iamAnswer(mount, 'DELETE', `memberships/${id}`, 204, { step, action: 'membership.revoke' });
  },
});

// ---- steps ---------------------------------------------------------------------------

function noPromise(value, name) {
  if (isThenable(value)) {
    throw new TypeError(`step ${name}'s work returned a promise: a step's work is synchronous`);
  }
  return value;
}

/** Orders strings by code point, as the host orders an object's keys (by their UTF-8 bytes). */
function byCodePoint(a, b) {
  const [x, y] = [Array.from(a, (c) => c.codePointAt(0)), Array.from(b, (c) => c.codePointAt(0))];
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    if (x[i] !== y[i]) return x[i] - y[i];
  }
  return x.length - y.length;
}

/** An object as the host stores it: its keys in order. */
function hostObject(_, value) {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return value;
  return Object.fromEntries(Object.keys(value).sort(byCodePoint).map((k) => [k, value[k]]));
}

/**
 * The JSON text to record for `value`, and the value read back as a replay reads the host's
 * record of it: the first run returns what a replay decodes (a `Date` as its string,
 * `undefined` left out of an object and null in an array, keys in order), and a value JSON
 * cannot hold (a bigint) fails before anything is recorded.
 */
function asRecorded(value, what) {
  const json = toJson(value, what);
  return [json, JSON.parse(json, hostObject)];
}

/**
 * How `steps.stepWith` retries: up to `attempts` tries in all (at least one), waiting
 * `backoff` seconds after the first failure and twice as long after each next one. Only
 * `Failed` and `HostError` are retried; the waits count against the attempt's deadline.
 * Callable with or without `new`.
 */
export function Retry(attempts, backoff = 0) {
  if (!new.target) return new Retry(attempts, backoff);
  if (!Number.isSafeInteger(attempts)) throw new TypeError(`Retry(attempts): attempts is a whole number, not ${text(attempts)}`);
  if (typeof backoff !== 'number' || !Number.isFinite(backoff) || backoff < 0) {
    throw new RangeError(`Retry(backoff): backoff is seconds, at least 0, not ${text(backoff)}`);
  }
  this.attempts = attempts;
  this.backoff = backoff;
}

/** `work()`, tried as `retry` says; a promise of its result. */
async function retrying(name, retry, work) {
  let delay = retry.backoff;
  for (let tries = 1; ; tries++) {
    try {
      return noPromise(work(), name);
    } catch (e) {
      const retried = (e instanceof Failed || e instanceof HostError) && !unbuilt.has(e);
      if (!retried || tries >= retry.attempts) throw e;
      log.debug(`step ${name}: try ${tries} failed (${describe(e)}), again in ${delay}s`);
      await new Promise((resolve) => setTimeout(resolve, delay * 1000));
      delay *= 2;
    }
  }
}

/**
 * Memoised steps and counters across the attempts of a pass. A step's result goes
 * through JSON on every run, the first as a replay: what the work returns is recorded as
 * JSON and read back as the host keeps it, so a `Date` is its string, `undefined` is gone
 * and keys are in order on the first run as on a resume.
 */
export const steps = Object.freeze({
  /**
   * `work()`'s result (recorded as JSON; undefined as null), recorded after it runs; a
   * later attempt of this pass that reaches `name` gets the recorded result and does not
   * run it. A name may be reached once per attempt.
   */
  step(name, work) {
    const raw = granted(rawSteps, 'steps');
    const recorded = call(() => raw.start(name));
    if (recorded !== undefined && recorded !== null) return JSON.parse(recorded);
    const [json, value] = asRecorded(noPromise(work(), name), `step ${name}'s result`);
    call(() => raw.record(name, json));
    return value;
  },

  /**
   * As `step`, but `work(tx)` writes through `tx` and the result is recorded in it: both
   * commit together, or neither.
   */
  stepIn(tx, name, work) {
    const raw = granted(rawSteps, 'steps');
    const recorded = call(() => raw.start(name));
    if (recorded !== undefined && recorded !== null) return JSON.parse(recorded);
    const [json, value] = asRecorded(noPromise(work(tx), name), `step ${name}'s result`);
    const rawTx = openTransaction(tx);
    call(() => raw.recordIn(rawTx, name, json));
    return value;
  },

  /**
   * As `step`, trying `work()` as `retry` (a `Retry`) says within this attempt (a step's
   * name is reached once per attempt, so retrying it means retrying inside it); a promise
   * of its result, for an `async` run to await.
   */
  async stepWith(name, retry, work) {
    const raw = granted(rawSteps, 'steps');
    const recorded = call(() => raw.start(name));
    if (recorded !== undefined && recorded !== null) return JSON.parse(recorded);
    const [json, value] = asRecorded(await retrying(name, retry, work), `step ${name}'s result`);
    call(() => raw.record(name, json));
    return value;
  },

  /**
   * Adds `delta` (an integer) to the run's counter `name` (committed with the pass's end);
   * its value with this attempt's changes.
   */
  counterAdd(name, delta) {
    const raw = granted(rawSteps, 'steps');
    if (typeof delta === 'number' && !Number.isSafeInteger(delta)) {
      throw new RangeError(`a counter changes by an integer, not ${delta}`);
    }
    const change = BigInt(delta);
    return integer(call(() => raw.counterAdd(name, change)));
  },
});

// ---- jobs ----------------------------------------------------------------------------

/**
 * `value` as JSON text for the host; one JSON cannot hold is refused `invalid(reason)`, as
 * the Rust SDK does.
 */
function hostJson(value, reason) {
  let json;
  try {
    json = JSON.stringify(value === undefined ? null : value);
  } catch {
    json = undefined;
  }
  if (json === undefined) throw new HostError('invalid', reason);
  return json;
}

const payloadText = (payload) => hostJson(payload, 'invalid-payload');

/**
 * The bindings' options for `{ instance, delay, priority, dedupKey, detached }`; the
 * default: due now (`delay` in seconds), an instance of its own, attached to its parent
 * (waited for, and cancelled with it).
 */
function rawOptions({ instance, delay = 0, priority = 0, dedupKey, detached = false } = {}) {
  if (typeof delay !== 'number' || !Number.isFinite(delay) || delay < 0) {
    throw new RangeError(`a run's delay is seconds, at least 0, not ${text(delay)}`);
  }
  return {
    instance: instance === undefined || instance === null ? undefined : String(instance),
    delayMs: BigInt(Math.round(delay * 1000)),
    priority,
    dedupKey: dedupKey === undefined || dedupKey === null ? undefined : String(dedupKey),
    detached: Boolean(detached),
  };
}

const enqueued = (e) => ({ runId: e.runId, duplicate: e.duplicate });

/** Seconds (at least 0) as the host's milliseconds. */
function millis(seconds, what) {
  if (typeof seconds !== 'number' || !Number.isFinite(seconds) || seconds < 0) {
    throw new RangeError(`${what} is seconds, at least 0, not ${text(seconds)}`);
  }
  return BigInt(Math.round(seconds * 1000));
}

const HOLDS = ['queued', 'active', 'until-finished'];
const ON_CONFLICT = ['keep', 'replace', 'debounce'];

/**
 * The bindings' options for a start (WIT 0.1.7): `{ instance, runAt (a Date, or
 * milliseconds since the epoch), delay (seconds; not with runAt), priority, maxAttempts,
 * unique: { key, hold ('queued', 'active', 'until-finished' or a period in seconds),
 * onConflict ('keep', 'replace' or 'debounce') }, detached }`.
 */
function rawStartOptions({ instance, runAt, delay = 0, priority = 0, maxAttempts, unique, detached = false } = {}) {
  let at;
  if (runAt !== undefined && runAt !== null) {
    const ms = runAt instanceof Date ? runAt.getTime() : runAt;
    if (typeof ms !== 'number' || !Number.isFinite(ms)) {
      throw new RangeError(`runAt is a Date or milliseconds since the epoch, not ${text(runAt)}`);
    }
    at = BigInt(Math.max(0, Math.round(ms)));
  }
  let rawUnique;
  if (unique !== undefined && unique !== null) {
    const { key, hold = 'until-finished', onConflict = 'keep' } = unique;
    if (!HOLDS.includes(hold) && (typeof hold !== 'number' || !(hold > 0))) {
      throw new RangeError(`unique.hold is ${HOLDS.join(', ')} or seconds over 0, not ${text(hold)}`);
    }
    if (!ON_CONFLICT.includes(onConflict)) {
      throw new RangeError(`unique.onConflict is ${ON_CONFLICT.join(', ')}, not ${text(onConflict)}`);
    }
    rawUnique = {
      key: String(key),
      hold: typeof hold === 'number' ? { tag: 'period', val: millis(hold, 'unique.hold') } : { tag: hold },
      onConflict,
    };
  }
  return {
    instance: instance === undefined || instance === null ? undefined : String(instance),
    runAt: at,
    delayMs: millis(delay, "a run's delay"),
    priority,
    maxAttempts: maxAttempts === undefined || maxAttempts === null ? undefined : maxAttempts,
    unique: rawUnique,
    detached: Boolean(detached),
  };
}

/** What a start did: `{ runId, outcome }`, `outcome` one of `created`, `joined`, `replaced`, `debounced`, `dropped`. */
const started = (s) => ({ runId: s.runId, outcome: s.outcome });

function rawStarts(runs) {
  return Array.from(runs, ({ job, payload, options }) => ({ job, payload: payloadText(payload), options: rawStartOptions(options) }));
}

function rawRuns(runs) {
  return Array.from(runs, ({ job, payload, options }) => ({ job, payload: payloadText(payload), options: rawOptions(options) }));
}

/**
 * Starting the jobs the manifest granted (`grants.jobs`), and waiting for them. Each call
 * queues in a fenced write of its own; its `...In(tx, ...)` form queues inside `tx`, so the
 * runs exist once `tx` commits, and never otherwise. Options: `{ instance, delay (seconds),
 * priority (-3600 to 3600), dedupKey, detached }`.
 */
export const jobs = Object.freeze({
  /** Queues a run of `job` with `payload` (any JSON value): `{ runId, duplicate }`. */
  enqueue(job, payload, options) {
    const raw = granted(rawJobs, 'jobs');
    const [json, opts] = [payloadText(payload), rawOptions(options)];
    return enqueued(call(() => raw.enqueue(job, json, opts)));
  },

  enqueueIn(tx, job, payload, options) {
    const raw = granted(rawJobs, 'jobs');
    const [rawTx, json, opts] = [openTransaction(tx), payloadText(payload), rawOptions(options)];
    return enqueued(call(() => raw.enqueueIn(rawTx, job, json, opts)));
  },

  /** Queues up to 1000 runs (`{ job, payload, options }`) in one fenced write: all, or none. */
  enqueueAll(runs) {
    const raw = granted(rawJobs, 'jobs');
    const batch = rawRuns(runs);
    return Array.from(call(() => raw.enqueueAll(batch)), enqueued);
  },

  enqueueAllIn(tx, runs) {
    const raw = granted(rawJobs, 'jobs');
    const [rawTx, batch] = [openTransaction(tx), rawRuns(runs)];
    return Array.from(call(() => raw.enqueueAllIn(rawTx, batch)), enqueued);
  },

  /** Starts a run of `job` with `payload` and start options (WIT 0.1.7): `{ runId, outcome }`. */
  start(job, payload, options) {
    const raw = granted(rawJobs, 'jobs');
    const [json, opts] = [payloadText(payload), rawStartOptions(options)];
    return started(call(() => raw.start(job, json, opts)));
  },

  startIn(tx, job, payload, options) {
    const raw = granted(rawJobs, 'jobs');
    const [rawTx, json, opts] = [openTransaction(tx), payloadText(payload), rawStartOptions(options)];
    return started(call(() => raw.startIn(rawTx, job, json, opts)));
  },

  /** Starts up to 1000 runs (`{ job, payload, options }`) in one fenced write: all, or none. */
  startAll(runs) {
    const raw = granted(rawJobs, 'jobs');
    const batch = rawStarts(runs);
    return Array.from(call(() => raw.startAll(batch)), started);
  },

  startAllIn(tx, runs) {
    const raw = granted(rawJobs, 'jobs');
    const [rawTx, batch] = [openTransaction(tx), rawStarts(runs)];
    return Array.from(call(() => raw.startAllIn(rawTx, batch)), started);
  },

  /** Kicks `job`; the id of the run it queued. */
  kick(job) {
    const raw = granted(rawJobs, 'jobs');
    return call(() => raw.kick(job));
  },

  kickIn(tx, job) {
    const raw = granted(rawJobs, 'jobs');
    const rawTx = openTransaction(tx);
    return call(() => raw.kickIn(rawTx, job));
  },

  /** Emits `event` (granted as `event:NAME`) with `payload`; how many runs it queued. */
  emit(event, payload) {
    const raw = granted(rawJobs, 'jobs');
    const json = payloadText(payload);
    return call(() => raw.emit(event, json));
  },

  emitIn(tx, event, payload) {
    const raw = granted(rawJobs, 'jobs');
    const [rawTx, json] = [openTransaction(tx), payloadText(payload)];
    return call(() => raw.emitIn(rawTx, event, json));
  },

  /**
   * Makes this pass's `Continue` (or `Defer`) wait until every child it started ended:
   * with `'fail'` the first child that fails fails the run (`child_failed`); with
   * `'continue'` the next pass runs however each ended, and reads how with
   * `run.children()`.
   */
  waitForChildren(policy) {
    const raw = granted(rawJobs, 'jobs');
    if (policy !== 'fail' && policy !== 'continue') {
      throw new TypeError(`a wait policy is 'fail' or 'continue', not ${text(policy)}`);
    }
    call(() => raw.waitForChildren(policy));
  },
});

// ---- run -----------------------------------------------------------------------------

/**
 * What an attempt knows about its run, the children its previous pass waited for, and the
 * value it hands a waiting parent. Every job has it.
 */
export const run = Object.freeze({
  /**
   * This attempt's place in its run: `finalAttempt` (failing it fails the run),
   * `retriesLeft` (attempts of this pass left after this one), `startedBy` (`{ kind,
   * value }`: `kind` is `schedule`, `kick`, `event`, `start`, `retry`, `boot`, `parent` or
   * `manual`; `value` the schedule's due time in ms, the event's name, or the id of the run
   * retried or of the parent, else null) and `deferrals` (the passes that ended in `Defer`
   * so far).
   */
  info() {
    const info = rawRun.info();
    const by = info.startedBy;
    return {
      finalAttempt: info.finalAttempt,
      retriesLeft: info.retriesLeft,
      startedBy: { kind: by.tag, value: by.val === undefined ? null : integer(by.val) },
      deferrals: info.deferrals,
    };
  },

  /**
   * Every child the previous pass started and waited for, in run id order: `{ runId, job,
   * instance, status, code, result }` (`status`: `succeeded`, `failed`, `cancelled`,
   * `skipped` or `crashed`; `code` its failure code, else null; `result` the value it
   * handed back with `setResult`, decoded, else null). None when it did not wait.
   */
  children() {
    const found = [];
    let cursor;
    for (;;) {
      const page = call(() => rawRun.children(cursor, CHILD_PAGE));
      for (const c of page.children) {
        found.push({
          runId: c.runId,
          job: c.job,
          instance: c.instance,
          status: c.status,
          code: c.code ?? null,
          result: c.result === undefined || c.result === null ? null : JSON.parse(c.result),
        });
      }
      if (page.next === undefined || page.next === null) return found;
      cursor = page.next;
    }
  },

  /** Hands `value` (any JSON value, at most 4 KiB of it) to a parent that waits for this run, in a fenced write of its own. */
  setResult(value) {
    const json = hostJson(value, 'invalid-result');
    call(() => rawRun.setResult(json));
  },

  /**
   * Makes this pass's `Continue` (or `Defer`) wait for the signal `name`: the run sleeps,
   * holding no worker, until it is sent (`POST /runs/{id}/signals/{name}`, `host runs
   * signal`) or was already, or `timeoutMs` (at most a year) after the pass ended; the
   * next pass reads it with `signal`. A pass waits for one thing: not also for its children.
   */
  waitForSignal(name, timeoutMs) {
    call(() => rawRun.waitForSignal(String(name), BigInt(Math.max(0, Math.round(Number(timeoutMs))))));
  },

  /**
   * The signal `name` for this pass: `{ state: 'received', id, payload }` (the payload
   * decoded; every attempt of the pass reads this same one), `{ state: 'timed-out' }` (the
   * previous pass waited for it and the timeout came first) or `{ state: 'pending' }`.
   */
  signal(name) {
    const state = call(() => rawRun.signal(String(name)));
    if (state.tag === 'received') {
      return { state: 'received', id: state.val.id, payload: JSON.parse(state.val.payload) };
    }
    return { state: state.tag };
  },
});

// ---- the export ----------------------------------------------------------------------

function outcome(returned) {
  if (returned === undefined || returned === null || returned === DONE) return { tag: 'done' };
  if (returned instanceof Continue) return { tag: 'continue', val: toJson(returned.cursor, 'the cursor') };
  if (returned instanceof Defer) return { tag: 'defer', val: deferMs(returned.seconds) };
  throw new Failed(`run returned ${typeName(returned)}: return DONE, Continue(cursor) or Defer(seconds)`);
}

const errorLike = (e) => e !== null && typeof e === 'object' && typeof e.message === 'string';

function describe(e) {
  if (errorLike(e)) {
    const name = typeof e.name === 'string' && e.name ? e.name : typeName(e);
    return e.message ? `${name}: ${e.message}` : name;
  }
  return `uncaught ${typeName(e)}: ${text(e)}`;
}

/**
 * The stack's frames (`function@file:line:column`, innermost first), without the bindings'
 * own, and with the project's files named as in the project (the build runs them from
 * `build/js/`).
 */
function frames(e) {
  if (e === null || typeof e !== 'object' || typeof e.stack !== 'string') return [];
  const lines = e.stack
    .split('\n')
    .filter((line) => line.trim() !== '' && !/\/initializer\.js:\d+:\d+$/.test(line))
    .map((line) => `    ${line.trim().replace(/@(?:[^@]*\/)?build\/js\//, '@')}`);
  // A refusal starts where the job called: not in this file, which only passed it on.
  if (e instanceof HostError) {
    const caller = lines.findIndex((line) => !/@jobhost\.js:\d+:\d+$/.test(line));
    if (caller > 0) lines.splice(0, caller);
  }
  return lines;
}

/** The files a build puts beside the job's own: their frames are never where the job threw. */
const SDK_FRAME = /@(?:jobhost|refusals|capabilities|entry)\.js:\d+:\d+$/;

/**
 * `text`, then where the job's code threw `e` — `file:line:column in function`, its
 * innermost frame outside the SDK — when the stack says.
 */
function withPlace(text, e) {
  const frame = frames(e)
    .map((line) => line.trim())
    .find((line) => !SDK_FRAME.test(line));
  const found = frame === undefined ? null : /^(.*)@(.+:\d+:\d+)$/.exec(frame);
  if (found === null) return text;
  const [, fn, place] = found;
  return `${text} (at ${fn ? `${place} in ${fn}` : place})`;
}

/** What an uncaught error puts in the log: `Name: message`, its stack, its causes. */
function report(e) {
  const lines = [describe(e), ...frames(e)];
  for (let cause = e?.cause, depth = 0; cause != null && depth < 3; cause = cause?.cause, depth++) {
    lines.push(`Caused by: ${describe(cause)}`, ...frames(cause));
  }
  if (lines.length > STACK_LINES + 1) {
    const left = lines.length - 1 - STACK_LINES;
    lines.splice(STACK_LINES + 1, left, `    ... ${left} more lines`);
  }
  return lines.join('\n');
}

/**
 * Whether `e` is the engine running out of memory (SpiderMonkey throws the string "out of
 * memory" when the memory cap refuses to grow): not the job's failure to report but the
 * attempt's end, so the export traps and the host records `memory_limit` (a `failed` would
 * hide why).
 */
const outOfMemory = (e) => e === 'out of memory' || (errorLike(e) && e.message === 'out of memory');

/** What the export throws so the bindings return `err(job-error)`. */
function jobError(e) {
  if (outOfMemory(e)) {
    try {
      log.error('out of memory: the attempt reached its memory cap');
    } catch {
      // There may be no memory left to say so.
    }
    // Not a job-error: the bindings let it escape, and the call traps.
    return e;
  }
  if (e instanceof Unrecoverable) return { payload: { tag: 'unrecoverable', val: e.message || 'unrecoverable' } };
  if (e instanceof Failed) return { payload: { tag: 'failed', val: e.message || 'failed' } };
  try {
    log.error(report(e));
  } catch {
    // Logging must not hide the failure.
  }
  if (e instanceof HostError) {
    return { payload: { tag: unbuilt.has(e) ? 'unrecoverable' : 'failed', val: withPlace(e.message, e) } };
  }
  return { payload: { tag: 'failed', val: withPlace(describe(e), e) } };
}

/**
 * The component's `handler` export for the job function `run`. The build wires it in the
 * entry module it writes: `import { handler as wrap } from './jobhost.js';
 * export const handler = wrap(run);`.
 */
export function handler(run) {
  if (typeof run !== 'function') throw new TypeError('handler(run) takes the job function');
  return {
    run(raw) {
      const settle = (returned) => {
        try {
          return outcome(returned);
        } catch (e) {
          throw jobError(e);
        }
      };
      let returned;
      try {
        returned = run(new Context(raw));
      } catch (e) {
        throw jobError(e);
      }
      if (isThenable(returned)) {
        return Promise.resolve(returned).then(settle, (e) => {
          throw jobError(e);
        });
      }
      return settle(returned);
    },
  };
}
