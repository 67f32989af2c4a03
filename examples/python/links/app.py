"""Calls the `api` mount (POST echo) and records the call in the `ledger` table.

Payload: ``{"item": "anything JSON", "mount": "api"}`` (``mount`` names another mount
to call instead, for the host to refuse one the job was not granted). The host adds the mount's credential and an
``Idempotency-Key`` derived from the run, the pass and the step (``echo``), so a retried
attempt sends the same key. Needs ``links=api`` (declared under ``[links.api]`` in the
manifest), ``db.write=ledger`` and the table from ``examples/migrations``.
"""

import jobhost
from jobhost import db, links, log


def run(ctx):
    item = ctx.payload.get("item")
    mount = ctx.payload.get("mount", "api")
    response = links.call(
        mount, "POST", "echo", json={"run": ctx.run_id, "item": item}, step="echo"
    )
    if not response.ok:
        # The service's trouble: another attempt may do better.
        raise jobhost.Failed(f"api answered {response.status}")
    answer = response.json()
    log.info(f"api answered {response.status}: {answer}")
    with db.transaction() as tx:
        tx.execute(
            "INSERT INTO ledger (run_id, attempt, n) VALUES ($1, $2, $3)",
            [ctx.run_id, ctx.attempt, response.status],
        )
    return jobhost.DONE
