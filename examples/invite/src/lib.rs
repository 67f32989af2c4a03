//! Issues a membership link through an IAM mount (with the job's own per-attempt
//! credential), and revokes it again if asked: the link grants `role` in `container` of
//! `dimension` until it expires.
//!
//! Payload: `{"mount": "iam", "dimension": "workspace", "container": "acme", "role":
//! "viewer", "expires_in_s": 3600, "revoke": false}`. Needs `links=<mount>` and the
//! actions `membership.issue` (and `membership.revoke`).

use jobhost_guest::iam::{self, MembershipRequest};
use jobhost_guest::{Context, Job, JobError, Outcome, log};
use serde::Deserialize;

#[derive(Deserialize)]
struct Payload {
    mount: String,
    dimension: String,
    container: String,
    role: String,
    #[serde(default = "hour")]
    expires_in_s: u64,
    #[serde(default)]
    revoke: bool,
}

fn hour() -> u64 {
    3600
}

struct Invite;

impl Job for Invite {
    type Payload = Payload;

    fn run(ctx: Context<Payload>) -> Result<Outcome, JobError> {
        let p = &ctx.payload;
        let request = MembershipRequest {
            dimension: p.dimension.clone(),
            container: p.container.clone(),
            role: p.role.clone(),
            expires_in_s: p.expires_in_s,
        };
        let link = iam::issue_membership(&p.mount, &request, "issue")?;
        log::info(&format!(
            "issued {} ({}), expires at {}",
            link.id, link.url, link.expires_at
        ));
        if p.revoke {
            iam::revoke_membership(&p.mount, &link.id, "revoke")?;
            log::info(&format!("revoked {}", link.id));
        }
        Ok(Outcome::Done)
    }
}

jobhost_guest::export_job!(Invite);
