// POSTs `{run, item}` as JSON to the mount `api` (path `echo`), logs the answer, and
// records it in the `ledger` table. The host adds the mount's credential and an
// `Idempotency-Key` derived from the run, the pass and the step ("echo"): every attempt of
// this pass sends the same key, so the service can tell a retry from a new call.
//
// Payload: {"item": <any JSON value>, "mount": "api"} (`mount` names another mount to call
// instead, for the host to refuse one the job was not granted). A non-2xx answer fails the
// attempt (it is retried while retries are left). Needs `links=api` (declared under
// [links.api] in the manifest), `db.write=ledger` and the table from examples/migrations.

import { DONE, Failed, db, links, log } from './jobhost.js';

export function run(ctx) {
  const { item = null, mount = 'api' } = ctx.payload ?? {};
  const response = links.call(mount, 'POST', 'echo', {
    json: { run: ctx.runId, item },
    step: 'echo',
  });
  let answer;
  try {
    answer = response.json();
  } catch {
    answer = response.text();
  }
  log.info(`${mount} answered ${response.status}:`, answer);
  // The service's trouble: another attempt may do better.
  if (!response.ok) throw new Failed(`${mount} answered ${response.status}`);
  db.transaction((tx) => {
    tx.execute('INSERT INTO ledger (run_id, attempt, n) VALUES ($1, $2, $3)', [ctx.runId, ctx.attempt, response.status]);
  });
  return DONE;
}
