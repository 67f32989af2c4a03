"""Issues a membership link through an IAM mount (with the job's own per-attempt
credential), and revokes it again if asked: the link grants ``role`` in ``container`` of
``dimension`` until it expires. The Rust ``invite`` example, in Python.

Payload: ``{"mount": "iam", "dimension": "workspace", "container": "acme", "role":
"viewer", "expires_in_s": 3600, "revoke": false}``. Needs ``links=<mount>`` and the
actions ``membership.issue`` (and ``membership.revoke``). An IAM that refuses the job's
credential fails the attempt with ``iam: unauthorized``.
"""

import jobhost
from jobhost import iam, log


def run(ctx):
    p = ctx.payload
    link = iam.issue_membership(
        p["mount"], p["dimension"], p["container"], p["role"],
        expires_in_s=p.get("expires_in_s", 3600), step="issue",
    )
    log.info(f"issued {link.id} ({link.url}), expires at {link.expires_at}")
    if p.get("revoke", False):
        iam.revoke_membership(p["mount"], link.id, step="revoke")
        log.info(f"revoked {link.id}")
    return jobhost.DONE
