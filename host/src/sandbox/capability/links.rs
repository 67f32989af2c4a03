//! `jobhost:job/links`: the guest's calls to mounts, through [`Links`]. This only
//! translates: it checks the mount against the job's grant (nothing is sent otherwise),
//! passes the attempt along, and turns failures into fixed `host-error` reasons. A call
//! the mount's limits refused is `rate-limited` to `send` (0.1.5); `call`, whose
//! `host-error` cannot grow a case without refusing every earlier guest, answers it
//! `unavailable`.

use crate::sandbox::capability::context::AttemptContext;
use crate::sandbox::capability::view::View;
use crate::sandbox::engine::bindings::jobhost::job::links::{CallError, Host, Request, Response};
use crate::sandbox::engine::bindings::jobhost::job::types::HostError;
use crate::sandbox::links::{Caller, LinkError, Links};
use crate::sandbox::refusal;
use std::collections::BTreeSet;
use std::sync::Arc;

/// What one attempt may call.
pub struct LinksSession {
    pub links: Arc<Links>,
    pub grant: Arc<BTreeSet<String>>,
    pub caller: Caller,
}

impl LinksSession {
    /// The mounts `cx`'s attempt may call, if its job was granted `links`.
    pub fn for_attempt(cx: &AttemptContext) -> Option<LinksSession> {
        let grant = cx.spec.grants.links.clone()?;
        let run = cx.run;
        Some(LinksSession {
            links: cx.host.links.clone(),
            grant: Arc::new(grant),
            caller: Caller {
                job: run.job.clone(),
                tenant: run.tenant.clone(),
                run_id: run.id.clone(),
                run_root: run.rerun_of.clone().unwrap_or_else(|| run.id.clone()),
                pass: run.pass,
                fence: cx.fence(),
                deadline: cx.deadline,
                lease_deadline_ms: cx.lease.deadline_at,
                actions: Arc::new(cx.spec.actions.clone()),
                trace: run.trace(),
            },
        })
    }
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

impl View<'_, LinksCapability> {
    fn refuse_link(&mut self, reason: &str, mount: &str) -> HostError {
        let grant = self.own.session.as_ref().map(|s| &*s.grant);
        self.attempt
            .signals
            .refuse(refusal::link(reason, mount, grant));
        HostError::CapabilityRefused(reason.into())
    }

    fn link_error(&mut self, error: LinkError, mount: &str) -> CallError {
        CallError::Host(match error {
            LinkError::UnknownMount => self.refuse_link("not-granted", mount),
            LinkError::MethodNotAllowed => self.refuse_link("method-not-allowed", mount),
            LinkError::ActionNotDeclared => self.refuse_link("action-not-declared", mount),
            LinkError::BadPath => HostError::Invalid("bad-path".into()),
            LinkError::BadHeader => HostError::Invalid("bad-header".into()),
            LinkError::HeaderNotAllowed => HostError::Invalid("header-not-allowed".into()),
            LinkError::BadStep => HostError::Invalid("bad-step".into()),
            LinkError::RequestTooLarge => HostError::Invalid("request-too-large".into()),
            LinkError::ResponseTooLarge => HostError::Invalid("response-too-large".into()),
            LinkError::LeaseLost => {
                self.attempt.signals.lease_lost = true;
                HostError::LeaseLost
            }
            LinkError::Unavailable => HostError::Unavailable,
            LinkError::RateLimited => return CallError::RateLimited,
            LinkError::Open { .. } | LinkError::Store(_) => {
                tracing::warn!(code = "driver_failed", error = %error, "a links call failed");
                HostError::Unavailable
            }
        })
    }

    /// One call through the grant and the mount's rules, for `call` and `send` alike.
    async fn forward(&mut self, mount: &str, request: Request) -> Result<Response, CallError> {
        let Some(session) = self
            .own
            .session
            .as_ref()
            .filter(|s| s.grant.contains(mount))
        else {
            return Err(CallError::Host(self.refuse_link("not-granted", mount)));
        };
        let request = crate::sandbox::links::Request {
            method: request.method,
            path: request.path,
            headers: request.headers,
            body: request.body,
            step: request.step,
            action: request.action,
        };
        let answered = session.links.call(&session.caller, mount, request).await;
        match answered {
            Ok(response) => Ok(Response {
                status: response.status,
                headers: response.headers,
                body: response.body,
            }),
            Err(e) => Err(self.link_error(e, mount)),
        }
    }
}

impl Host for View<'_, LinksCapability> {
    async fn call(&mut self, mount: String, request: Request) -> Result<Response, HostError> {
        crate::journaled!(self.attempt, "links.call", (&mount, &request), async {
            self.forward(&mount, request).await.map_err(|e| match e {
                CallError::RateLimited => HostError::Unavailable,
                CallError::Host(e) => e,
            })
        })
    }

    async fn send(&mut self, mount: String, request: Request) -> Result<Response, CallError> {
        crate::journaled!(self.attempt, "links.send", (&mount, &request), async {
            self.forward(&mount, request).await
        })
    }
}

impl crate::sandbox::journal::CodeOf for Result<Response, CallError> {
    fn code_of(&self) -> std::borrow::Cow<'static, str> {
        match self {
            Ok(_) => "ok".into(),
            Err(CallError::RateLimited) => "rate-limited".into(),
            Err(CallError::Host(error)) => crate::sandbox::engine::bindings::error_code(error),
        }
    }
}

impl crate::sandbox::journal::Placeholder for Result<Response, CallError> {
    fn placeholder() -> Self {
        Err(CallError::Host(HostError::Unavailable))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::capability::fixture::{self, Leased};
    use crate::sandbox::links::headers::default_headers;
    use crate::sandbox::links::limits::MountLimits;
    use crate::sandbox::links::token::{ROTATE_AFTER, Signer};
    use crate::sandbox::links::{DEFAULT_MAX_BODY, MountSpec};
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// A local service counting the requests it gets.
    async fn service() -> (String, Arc<AtomicUsize>) {
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = hits.clone();
        let app = axum::Router::new().fallback(move || {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                "pong"
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (url, hits)
    }

    /// The `links` capability of an attempt holding its lease, granted `api` — and no
    /// wasm at all.
    async fn state(dir: &std::path::Path, url: &str) -> (LinksCapability, Leased) {
        let leased = Leased::open(dir).await;
        let store = &leased.store;
        let mut mounts = BTreeMap::new();
        for name in ["api", "other"] {
            mounts.insert(
                name.to_string(),
                MountSpec {
                    url: url.to_string(),
                    methods: ["GET".to_string()].into(),
                    timeout: Duration::from_secs(5),
                    max_request: DEFAULT_MAX_BODY,
                    max_response: DEFAULT_MAX_BODY,
                    credential: None,
                    headers: default_headers(),
                    limits: MountLimits::default(),
                },
            );
        }
        let signer = Arc::new(Signer::open(store.clone(), ROTATE_AFTER).await.unwrap());
        let links = Arc::new(Links::open(&mounts, signer, store.clone()).unwrap());
        let session = LinksSession {
            links,
            grant: Arc::new(["api".to_string()].into()),
            caller: Caller {
                job: "j".into(),
                tenant: "acme".into(),
                run_id: "run-1".into(),
                run_root: "run-1".into(),
                pass: 1,
                fence: leased.lease.fence(),
                deadline: tokio::time::Instant::now() + Duration::from_secs(30),
                lease_deadline_ms: leased.lease.deadline_at,
                actions: Arc::new(BTreeSet::new()),
                trace: crate::rules::trace::TraceParent::start(),
            },
        };
        (LinksCapability::new(Some(session)), leased)
    }

    fn get(path: &str) -> Request {
        Request {
            method: "GET".into(),
            path: path.into(),
            headers: Vec::new(),
            body: Vec::new(),
            step: "s".into(),
            action: None,
        }
    }

    #[tokio::test]
    async fn calls_go_out_only_when_granted_well_formed_and_live() {
        let dir = tempfile::tempdir().unwrap();
        let (url, hits) = service().await;
        let (mut links, leased) = state(dir.path(), &url).await;
        let mut shared = fixture::attempt();
        let mut guest = View::new(&mut links, &mut shared);
        let answer = Host::call(&mut guest, "api".into(), get("ping"))
            .await
            .unwrap();
        assert_eq!(
            (answer.status, answer.body.as_slice()),
            (200, b"pong".as_slice())
        );
        assert!(matches!(
            Host::call(&mut guest, "other".into(), get("ping")).await,
            Err(HostError::CapabilityRefused(r)) if r == "not-granted"
        ));
        assert!(matches!(
            Host::call(&mut guest, "api".into(), get("../ping")).await,
            Err(HostError::Invalid(r)) if r == "bad-path"
        ));
        let mut post = get("ping");
        post.method = "POST".into();
        assert!(matches!(
            Host::call(&mut guest, "api".into(), post).await,
            Err(HostError::CapabilityRefused(r)) if r == "method-not-allowed"
        ));
        leased.lose_lease().await;
        assert!(matches!(
            Host::call(&mut guest, "api".into(), get("ping")).await,
            Err(HostError::LeaseLost)
        ));
        assert!(guest.attempt.signals.lease_lost);
        assert_eq!(
            hits.load(Ordering::SeqCst),
            1,
            "only the first call went out"
        );
    }
}
