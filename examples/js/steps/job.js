// A resumable run in JavaScript: one page per pass, each page exactly once, counted in the
// run's counter `pages`.
//
// Payload: {"pages": n}. Pass k writes the row (run, attempt, k) into `ledger` as the step
// `page-k`, recorded in the transaction that writes it, and commits that transaction with
// the pass's end (`commitPass`): `Continue({next: k + 1})`, or `DONE` after page n. The
// row, "page k is done", the counter and the cursor commit together or not at all: an
// attempt that fails first leaves nothing, and its retry does the page again; a pass whose
// end committed is never run again. Needs `db.write=ledger`, `steps` and the table from
// examples/migrations.

import { Continue, DONE, Unrecoverable, db, log, steps } from './jobhost.js';

export function run(ctx) {
  const { pages } = ctx.payload;
  if (!Number.isSafeInteger(pages) || pages < 1) {
    throw new Unrecoverable(`pages is a count of at least 1, not ${JSON.stringify(pages)}`);
  }
  const k = ctx.cursor?.next ?? 1;

  return db.transaction((tx) => {
    // The step's result, recorded with the row; an attempt that reached it after an
    // earlier one recorded it would get it back without running the work.
    const page = steps.stepIn(tx, `page-${k}`, (tx) => {
      tx.execute('INSERT INTO ledger (run_id, attempt, n) VALUES ($1, $2, $3)', [ctx.runId, ctx.attempt, k]);
      return { page: k, attempt: ctx.attempt };
    });
    // Counter changes commit with the pass's end.
    const done = steps.counterAdd('pages', 1);
    log.info(`pass ${ctx.pass}: page ${page.page} written by attempt ${page.attempt}, ${done} of ${pages} pages`);
    // Commits the row and the step with the pass's end, all or nothing.
    return tx.commitPass(k < pages ? Continue({ next: k + 1 }) : DONE);
  });
}
