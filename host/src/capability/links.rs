//! `jobhost:job/links`: the guest's calls to mounts, through [`Links`]. This only
//! translates: it checks the mount against the job's grant (nothing is sent otherwise),
//! passes the attempt along, and turns failures into fixed `host-error` reasons.

use crate::engine::bindings::jobhost::job::links::{Host, Request, Response};
use crate::engine::bindings::jobhost::job::types::HostError;
use crate::engine::state::GuestState;
use crate::failure::FailureCode;
use crate::links::{Caller, LinkError, Links};
use std::collections::BTreeSet;
use std::sync::Arc;

/// What one attempt may call.
pub struct LinksSession {
    pub links: Arc<Links>,
    pub grant: Arc<BTreeSet<String>>,
    pub caller: Caller,
}

/// The `links` capability's per-attempt state: `None` when the job was not granted links.
pub struct LinksCapability {
    session: Option<LinksSession>,
}

impl LinksCapability {
    pub fn new(session: Option<LinksSession>) -> Self {
        LinksCapability { session }
    }
}

impl GuestState {
    fn refuse_link(&mut self, reason: &str) -> HostError {
        self.signals
            .refused
            .get_or_insert(FailureCode::CapabilityRefused);
        HostError::CapabilityRefused(reason.into())
    }

    fn link_error(&mut self, error: LinkError) -> HostError {
        match error {
            LinkError::UnknownMount => self.refuse_link("not-granted"),
            LinkError::MethodNotAllowed => self.refuse_link("method-not-allowed"),
            LinkError::ActionNotDeclared => self.refuse_link("action-not-declared"),
            LinkError::BadPath => HostError::Invalid("bad-path".into()),
            LinkError::BadHeader => HostError::Invalid("bad-header".into()),
            LinkError::HeaderNotAllowed => HostError::Invalid("header-not-allowed".into()),
            LinkError::BadStep => HostError::Invalid("bad-step".into()),
            LinkError::RequestTooLarge => HostError::Invalid("request-too-large".into()),
            LinkError::ResponseTooLarge => HostError::Invalid("response-too-large".into()),
            LinkError::LeaseLost => {
                self.signals.lease_lost = true;
                HostError::LeaseLost
            }
            LinkError::Unavailable => HostError::Unavailable,
            LinkError::Open { .. } | LinkError::Store(_) => {
                tracing::warn!(code = "driver_failed", error = %error, "a links call failed");
                HostError::Unavailable
            }
        }
    }
}

impl Host for GuestState {
    async fn call(&mut self, mount: String, request: Request) -> Result<Response, HostError> {
        let Some(session) = self
            .links
            .session
            .as_ref()
            .filter(|s| s.grant.contains(&mount))
        else {
            return Err(self.refuse_link("not-granted"));
        };
        let (links, caller) = (session.links.clone(), session.caller.clone());
        let request = crate::links::Request {
            method: request.method,
            path: request.path,
            headers: request.headers,
            body: request.body,
            step: request.step,
            action: request.action,
        };
        match links.call(&caller, &mount, request).await {
            Ok(response) => Ok(Response {
                status: response.status,
                headers: response.headers,
                body: response.body,
            }),
            Err(e) => Err(self.link_error(e)),
        }
    }
}
