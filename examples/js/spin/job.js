// A bounded amount of pure compute: the JavaScript twin of examples/spin (Rust), which the
// sandbox benchmark runs to measure what metering costs an interpreter.
//
// Payload: {"iterations": n} adds one to a counter n times in a plain loop (the
// interpreter's dispatch loop, no host call) and succeeds; {"iterations": 0} returns at
// once (a no-op attempt). Needs no grants.

import { DONE, Unrecoverable } from './jobhost.js';

export function run(ctx) {
  const iterations = ctx.payload && ctx.payload.iterations;
  if (!Number.isSafeInteger(iterations) || iterations < 0) {
    throw new Unrecoverable(
      `the payload is {"iterations": n}, not ${JSON.stringify(ctx.payload)}`,
    );
  }
  let n = 0;
  for (let i = 0; i < iterations; i++) {
    n = (n + 1) | 0;
  }
  return DONE;
}
