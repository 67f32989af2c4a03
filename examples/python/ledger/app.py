"""Writes ``rows`` rows into the ``ledger`` table in one transaction: the Python twin of
``examples/ledger`` (Rust).

Payload: ``{"rows": n, "wait_ms": m, "wait_at": "commit" | "begin"}``. With ``wait_ms``, it
waits that long before committing (``wait_at = "commit"``, the default: inside the open
transaction) or before opening the transaction (``"begin"``), to outlive its deadline or
its lease. Needs ``db.write=ledger`` and the table from ``examples/migrations``.

``"mode"`` picks a misbehaviour instead, to see what the host makes of it:

- ``raise``: an uncaught ``ValueError`` (``handler_failed``, its traceback in the log)
- ``unrecoverable``: ``jobhost.Unrecoverable`` (the run ends, never retried)
- ``hog``: allocates until the memory cap (``memory_limit``)
- ``spin``: a busy loop (``timeout``)
- ``secrets``: reads a table it was not granted (``query_refused``)
- ``link``: calls a mount it was not granted (``capability_refused``)
- ``huge-log``: 20,000 log lines of 1 KiB (the host keeps a bounded log)
- ``handles``: opens transactions and never ends them
"""

import time

import jobhost
from jobhost import db, log


def run(ctx):
    payload = ctx.payload if isinstance(ctx.payload, dict) else {}
    mode = payload.get("mode")
    if mode is not None:
        return misbehave(ctx, mode)

    # A payload that does not fit can never succeed: end the run, as the Rust job does.
    rows = payload.get("rows")
    wait_ms = payload.get("wait_ms", 0)
    wait_at = payload.get("wait_at", "commit")
    if not is_count(rows) or not is_count(wait_ms) or wait_at not in ("commit", "begin"):
        raise jobhost.Unrecoverable(
            'the payload is {"rows": n, "wait_ms": m, "wait_at": "commit" | "begin"}, '
            f"not {ctx.payload!r}"
        )
    wait = wait_ms / 1000

    if wait_at == "begin":
        time.sleep(wait)
    with db.transaction() as tx:  # commits when the block ends
        for n in range(rows):
            tx.execute(
                "INSERT INTO ledger (run_id, attempt, n) VALUES ($1, $2, $3)",
                [ctx.run_id, ctx.attempt, n],
            )
        if wait_at == "commit":
            time.sleep(wait)
    log.info(f"committed {rows} rows")
    return jobhost.DONE


def is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def misbehave(ctx, mode):
    if mode == "raise":
        raise ValueError("asked to raise")
    if mode == "unrecoverable":
        raise jobhost.Unrecoverable("asked to give up")
    if mode == "hog":
        held = []
        while True:
            held.append(bytearray(1 << 20))
    if mode == "spin":
        n = 0
        while True:
            n += 1
    if mode == "secrets":
        # `secrets` is not granted: the host refuses, and the HostError fails the attempt.
        rows = db.query("SELECT value FROM secrets")
        log.info(f"read {len(rows)} secrets")
        return jobhost.DONE
    if mode == "link":
        # No link is granted: refused before anything is sent.
        jobhost.links.call("nowhere", "GET", "")
        return jobhost.DONE
    if mode == "huge-log":
        line = "x" * 1024
        for i in range(20000):
            log.info(f"{i:05} {line}")
        return jobhost.DONE
    if mode == "handles":
        held = []
        while True:
            held.append(db.begin())
    raise jobhost.Unrecoverable(f"no mode {mode!r}")
