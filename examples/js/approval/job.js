// A run that waits for the outside: its first pass waits for the signal the payload names
// (`signal`, at most `timeout_ms`: an hour unless given) and continues, holding no worker
// meanwhile; its second reads the signal and hands back `[{state: "received", id,
// payload}]` (`[{state: "timed-out"}]` if nobody sent it in time), as one round of
// jobhost's tests/guests/waiter does. Send it with `host runs signal RUN_ID approval
// --payload '{"ok": true}'` or `POST /runs/RUN_ID/signals/approval`. Needs no grant.

import { Continue, DONE, log, run as thisRun } from './jobhost.js';

export function run(ctx) {
  const name = ctx.payload.signal ?? 'approval';
  if (ctx.pass === 1) {
    thisRun.waitForSignal(name, ctx.payload.timeout_ms ?? 3600000);
    return Continue([]);
  }
  const signal = thisRun.signal(name);
  const reading = signal.state === 'received'
    ? { state: signal.state, id: signal.id, payload: signal.payload }
    : { state: signal.state };
  log.info(`read: ${JSON.stringify(reading)}`);
  thisRun.setResult([reading]);
  return DONE;
}
