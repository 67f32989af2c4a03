"""A run that waits for the outside: its first pass waits for the signal the payload names
(``signal``, at most ``timeout_ms``: an hour unless given) and continues, holding no
worker meanwhile; its second reads the signal and hands back ``[{"state": "received",
"id": ..., "payload": ...}]`` (``[{"state": "timed-out"}]`` if nobody sent it in time), as
one round of jobhost's ``tests/guests/waiter`` does. Send it with ``host runs signal
RUN_ID approval --payload '{"ok": true}'`` or ``POST /runs/RUN_ID/signals/approval``.
Needs no grant.
"""

import jobhost
from jobhost import log


def run(ctx):
    name = ctx.payload.get("signal", "approval")
    if ctx.pass_ == 1:
        jobhost.run.wait_for_signal(name, ctx.payload.get("timeout_ms", 3_600_000))
        return jobhost.Continue([])
    signal = jobhost.run.signal(name)
    reading = {"state": signal.state}
    if signal.state == "received":
        reading.update(id=signal.id, payload=signal.payload)
    log.info(f"read: {reading}")
    jobhost.run.set_result([reading])
    return jobhost.DONE
