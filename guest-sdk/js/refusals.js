// Written by `host build` (not part of a project): what a job's platform refuses, as errors
// the job can catch.
//
// componentize-js's runtime reaches past the sandbox in two places, and each would trap the
// whole attempt (`unreachable`) instead of failing the call: `fetch` (it needs wasi:http,
// which a job is built without) and `import()` while the job runs (it reads modules from the
// build's directory, which a job does not have). The entry module imports this one before
// any of the job's, so `fetch` is replaced before the job's modules run, and the build
// rewrites each `import(...)` in the job's modules into a call of `__jobhostImport`: both
// reject with a fixed message naming what is refused. Node.js's globals (`process`,
// `require`, `Buffer`) and sockets (`WebSocket`, `XMLHttpRequest`) are not defined at all:
// using one throws a ReferenceError, catchable like any other.

// Node.js's built-in modules (`node:` or bare), by what a job uses instead.
const FILES = new Set(['fs']);
const NETWORK = new Set([
  '_http_agent', '_http_client', '_http_common', '_http_incoming', '_http_outgoing', '_http_server',
  '_tls_common', '_tls_wrap', 'dgram', 'dns', 'http', 'http2', 'https', 'net', 'tls',
]);
const PROCESSES = new Set(['child_process', 'cluster', 'process', 'worker_threads']);
const OTHERS = new Set([
  '_stream_duplex', '_stream_passthrough', '_stream_readable', '_stream_transform', '_stream_wrap',
  '_stream_writable', 'assert', 'async_hooks', 'buffer', 'console', 'constants', 'crypto',
  'diagnostics_channel', 'domain', 'events', 'inspector', 'module', 'os', 'path', 'perf_hooks',
  'punycode', 'querystring', 'readline', 'repl', 'stream', 'string_decoder', 'sys', 'timers',
  'trace_events', 'tty', 'url', 'util', 'v8', 'vm', 'wasi', 'zlib',
]);

/** The message for a refused `import(specifier)`. */
function importRefusal(specifier) {
  const name = String(specifier);
  const bare = name.startsWith('node:') ? name.slice(5) : name;
  const top = bare.split('/')[0];
  const builtin = name.startsWith('node:') || [FILES, NETWORK, PROCESSES, OTHERS].some((set) => set.has(top));
  if (!builtin) {
    return `jobhost: \`import(${JSON.stringify(name)})\` is not available in a job: its modules are fixed when it is built; import them statically`;
  }
  const module = `node:${bare}`;
  if (FILES.has(top)) return `jobhost: \`${module}\` is not available in a job: it has no files of its own; use \`files\``;
  if (NETWORK.has(top)) return `jobhost: \`${module}\` is not available in a job: it has no sockets; call out through \`links\``;
  if (PROCESSES.has(top)) return `jobhost: \`${module}\` is not available in a job: it has no processes or threads of its own`;
  return `jobhost: \`${module}\` is not available in a job: it runs in a sandbox, not in Node.js`;
}

globalThis.fetch = function fetch() {
  return Promise.reject(
    new TypeError('jobhost: `fetch` is not available in a job: it has no sockets; call out through `links`'),
  );
};

Object.defineProperty(globalThis, '__jobhostImport', {
  value: function __jobhostImport(specifier) {
    // Rejects, as `import()` does, even if naming the specifier throws.
    return new Promise(() => {
      throw new Error(importRefusal(specifier));
    });
  },
});
