// Issues a membership link through an IAM mount (with the job's own per-attempt
// credential), and revokes it again if asked: the link grants `role` in `container` of
// `dimension` until it expires. The Rust `invite` example, in JavaScript.
//
// Payload: {"mount": "iam", "dimension": "workspace", "container": "acme", "role": "viewer",
// "expires_in_s": 3600, "revoke": false}. Needs `links=<mount>` and the actions
// `membership.issue` (and `membership.revoke`). An IAM that refuses the job's credential
// fails the attempt with `iam: unauthorized`.

import { DONE, iam, log } from './jobhost.js';

export function run(ctx) {
  const { mount, dimension, container, role, expires_in_s: expiresInS = 3600, revoke = false } = ctx.payload;
  const link = iam.issueMembership(mount, { dimension, container, role, expiresInS }, 'issue');
  log.info(`issued ${link.id} (${link.url}), expires at ${link.expiresAt}`);
  if (revoke) {
    iam.revokeMembership(mount, link.id, 'revoke');
    log.info(`revoked ${link.id}`);
  }
  return DONE;
}
