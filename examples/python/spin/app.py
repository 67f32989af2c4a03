"""A bounded amount of pure compute: the Python twin of ``examples/spin`` (Rust), which
the sandbox benchmark runs to measure what metering costs an interpreter.

Payload: ``{"iterations": n}`` adds one to a counter ``n`` times in a plain ``while``
loop (the interpreter's dispatch loop, no host call) and succeeds; ``{"iterations": 0}``
returns at once (a no-op attempt). Needs no grants.
"""

import jobhost


def run(ctx):
    payload = ctx.payload if isinstance(ctx.payload, dict) else {}
    iterations = payload.get("iterations")
    if not isinstance(iterations, int) or isinstance(iterations, bool) or iterations < 0:
        raise jobhost.Unrecoverable(f'the payload is {{"iterations": n}}, not {ctx.payload!r}')
    n = 0
    i = 0
    while i < iterations:
        n = (n + 1) & 0xFFFFFFFF
        i += 1
    return jobhost.DONE
