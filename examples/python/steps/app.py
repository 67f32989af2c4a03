"""A run of several passes: each pass writes one page (a row of the `ledger` table, its
``n`` the page's number) and ends, in the same transaction, with where the next pass starts.

Payload: ``{"pages": n}``. Pass k writes page k inside the step ``page-k`` and adds one to
the run's counter ``pages``; the row, the step's record, the counter and the pass's end
(``Continue({"next": k + 1})``, or ``DONE`` after page n) commit together or not at all, so
a retried pass never writes its page twice. Needs ``db.write=ledger``, ``steps`` and the
table from ``examples/migrations``.
"""

import jobhost
from jobhost import db, log, steps


def run(ctx):
    pages = ctx.payload.get("pages")
    if not isinstance(pages, int) or isinstance(pages, bool) or pages < 1:
        raise jobhost.Unrecoverable(f"pages is a whole number of at least 1, not {pages!r}")
    page = ctx.cursor["next"] if ctx.cursor else 1
    log.info(f"pass {ctx.pass_}: page {page} of {pages} ({ctx.counters.get('pages', 0)} done)")

    def write_page(tx):
        tx.execute(
            "INSERT INTO ledger (run_id, attempt, n) VALUES ($1, $2, $3)",
            [ctx.run_id, ctx.attempt, page],
        )
        return {"page": page}

    with db.transaction() as tx:
        steps.step_in(tx, f"page-{page}", write_page)
        done = steps.counter_add("pages", 1)
        end = jobhost.DONE if page >= pages else jobhost.Continue({"next": page + 1})
        # Commits the row, the step, the counter and the pass's end as one.
        tx.commit_pass(end)
    log.info(f"wrote page {page} ({done} in all)")
    return end
