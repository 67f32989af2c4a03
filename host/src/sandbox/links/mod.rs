//! Calls to the outside world through mounts the operator declared: a base URL, the
//! methods allowed, a credential the host adds, a timeout and a response bound.
//!
//! A guest never gets a socket. It names a mount and a path under it; the host checks the
//! path (no scheme, authority, `..` — also percent-encoded —, `@` or backslash) and the
//! headers (only those the mount accepts, with visible ASCII values: see [`headers`]),
//! checks in the database that the attempt still holds its lease
//! (no effect may leave the host for an attempt that lost it), adds the credential — a
//! secret from the host's environment or a file, or a token it signs for this attempt —
//! and an `Idempotency-Key` derived from the run, the pass and the guest's step name, so a
//! retried attempt repeats the same request rather than a new one, and a `traceparent` in
//! the run's trace (a new span id per call; the guest can neither set nor see it).
//! Redirects are not followed; the response body is read up to the mount's bound and no
//! further. A mount's `rate` and `concurrency` hold calls across every host (see
//! [`limits`]); a call they hold too long is refused before anything is sent.

pub mod headers;
pub mod limits;
pub mod token;

use crate::store::guest::Fence;
use crate::store::{Store, StoreError};
use limits::{MountCounts, MountLimits, MountStats};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use token::Signer;
use tokio::time::Instant;

/// Default bounds of a mount.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_MAX_BODY: u64 = 1 << 20;
/// Most bytes of a path, of a step name and of a method.
const MAX_PATH_BYTES: usize = 2048;
const MAX_METHOD_BYTES: usize = 16;
const MAX_STEP_BYTES: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountSpec {
    /// The base URL (http or https); guest paths are relative to it.
    pub url: String,
    /// Methods allowed, upper-case.
    pub methods: BTreeSet<String>,
    pub timeout: Duration,
    pub max_request: u64,
    pub max_response: u64,
    pub credential: Option<Credential>,
    /// The request headers a guest may send, lower-case (see [`headers`]).
    pub headers: BTreeSet<String>,
    /// Its calls' rate and concurrency across every host (see [`limits`]).
    #[serde(default)]
    pub limits: MountLimits,
}

/// What the host adds to every call of a mount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Credential {
    /// A secret from the host's environment or a file, read once at start.
    Secret {
        header: String,
        prefix: String,
        source: SecretSource,
    },
    /// A token the host signs for each attempt (a JWT, EdDSA): who acts (job, tenant,
    /// run, attempt), with which actions, until the attempt's deadline.
    Token {
        header: String,
        prefix: String,
        audience: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SecretSource {
    Env(String),
    File(PathBuf),
}

impl Credential {
    pub fn header(&self) -> &str {
        match self {
            Credential::Secret { header, .. } | Credential::Token { header, .. } => header,
        }
    }
}

/// A secret value: never printed.
struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("mount {mount}: {reason}")]
    Open { mount: String, reason: String },
    #[error("unknown mount")]
    UnknownMount,
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("action not declared by the job")]
    ActionNotDeclared,
    #[error("bad path")]
    BadPath,
    #[error("bad header")]
    BadHeader,
    #[error("header not allowed")]
    HeaderNotAllowed,
    #[error("bad step name")]
    BadStep,
    #[error("request body too large")]
    RequestTooLarge,
    #[error("response body too large")]
    ResponseTooLarge,
    #[error("the attempt's lease is lost")]
    LeaseLost,
    #[error("the service is unavailable")]
    Unavailable,
    #[error("the mount's limits held the call too long")]
    RateLimited,
    #[error(transparent)]
    Store(#[from] StoreError),
}

struct Mount {
    spec: MountSpec,
    base: url::Url,
    secret: Option<Secret>,
    stats: MountStats,
}

/// Every mount a host knows, and the client that calls them.
pub struct Links {
    mounts: BTreeMap<String, Mount>,
    client: reqwest::Client,
    signer: Arc<Signer>,
    store: Store,
}

/// Who calls: one attempt of one run.
#[derive(Debug, Clone)]
pub struct Caller {
    pub job: String,
    pub tenant: String,
    pub run_id: String,
    /// The first run of the run's chain of reruns: a rerun resumes its crashed run's pass,
    /// so its calls carry the same idempotency keys.
    pub run_root: String,
    pub pass: i64,
    pub fence: Fence,
    /// When the attempt must stop (host clock), and its lease deadline (database clock,
    /// milliseconds): a call never outlives the first, a token never the second.
    pub deadline: Instant,
    pub lease_deadline_ms: i64,
    /// The actions the job declared.
    pub actions: Arc<BTreeSet<String>>,
    /// The run's trace: each call carries it to the service as a new span of it.
    pub trace: crate::rules::trace::TraceParent,
}

#[derive(Debug, Clone, Default)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub step: String,
    pub action: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Links {
    /// Opens the declared mounts: checks their URLs and reads their secrets.
    pub fn open(
        specs: &BTreeMap<String, MountSpec>,
        signer: Arc<Signer>,
        store: Store,
    ) -> Result<Links, LinkError> {
        let mut mounts = BTreeMap::new();
        for (name, spec) in specs {
            let open_err = |reason: String| LinkError::Open {
                mount: name.clone(),
                reason,
            };
            let base = base_url(&spec.url).map_err(open_err)?;
            let secret = match &spec.credential {
                Some(Credential::Secret { source, .. }) => Some(Secret(match source {
                    SecretSource::Env(var) => std::env::var(var).map_err(|_| {
                        open_err(format!("the environment has no {var} for its credential"))
                    })?,
                    SecretSource::File(path) => std::fs::read_to_string(path)
                        .map_err(|e| {
                            open_err(format!(
                                "cannot read its credential {}: {e}",
                                path.display()
                            ))
                        })?
                        .trim_end()
                        .to_string(),
                })),
                _ => None,
            };
            mounts.insert(
                name.clone(),
                Mount {
                    spec: spec.clone(),
                    base,
                    secret,
                    stats: MountStats::default(),
                },
            );
        }
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()
            .map_err(|_| LinkError::Open {
                mount: String::new(),
                reason: "cannot build the HTTP client".into(),
            })?;
        Ok(Links {
            mounts,
            client,
            signer,
            store,
        })
    }

    pub fn signer(&self) -> &Arc<Signer> {
        &self.signer
    }

    pub fn is_declared(&self, mount: &str) -> bool {
        self.mounts.contains_key(mount)
    }

    /// What each mount with limits met at them on this host, by mount.
    pub fn limit_counts(&self) -> Vec<(&str, MountCounts)> {
        self.mounts
            .iter()
            .filter(|(_, m)| m.spec.limits.rate.is_some() || m.spec.limits.concurrency.is_some())
            .map(|(name, m)| (name.as_str(), m.stats.counts()))
            .collect()
    }

    /// Makes one call for `caller`, or refuses it before anything is sent.
    pub async fn call(
        &self,
        caller: &Caller,
        mount: &str,
        request: Request,
    ) -> Result<Response, LinkError> {
        let m = self.mounts.get(mount).ok_or(LinkError::UnknownMount)?;
        // Bounds first: nothing the guest sent is copied or decoded before it is checked.
        if request.method.len() > MAX_METHOD_BYTES {
            return Err(LinkError::MethodNotAllowed);
        }
        let method = request.method.to_ascii_uppercase();
        if !m.spec.methods.contains(&method) {
            return Err(LinkError::MethodNotAllowed);
        }
        if let Some(action) = &request.action
            && !caller.actions.contains(action)
        {
            return Err(LinkError::ActionNotDeclared);
        }
        // No step is a step too (one key for the pass); a named one follows the name rule.
        if !request.step.is_empty()
            && !crate::rules::name_rule::is_name(&request.step, MAX_STEP_BYTES)
        {
            return Err(LinkError::BadStep);
        }
        let url = join(&m.base, &request.path)?;
        let credential_header = m.spec.credential.as_ref().map(Credential::header);
        let headers = headers::check(&request.headers, &m.spec.headers, credential_header)?;
        if request.body.len() as u64 > m.spec.max_request {
            return Err(LinkError::RequestTooLarge);
        }
        // Signing may read the keys from the database: it comes before the lease check, so
        // nothing but building the request stands between that check and the send.
        let token = match &m.spec.credential {
            Some(Credential::Token { audience, .. }) => Some(
                self.signer
                    .token(caller, audience, request.action.as_deref())
                    .await?,
            ),
            _ => None,
        };
        let method = reqwest::Method::from_bytes(method.as_bytes())
            .map_err(|_| LinkError::MethodNotAllowed)?;
        let mut call = self
            .client
            .request(method, url)
            .header(
                "idempotency-key",
                idempotency_key(&caller.run_root, caller.pass, &request.step),
            )
            .body(request.body);
        for (name, value) in headers {
            call = call.header(name, value);
        }
        call = call.header("traceparent", caller.trace.child().to_string());
        match (&m.spec.credential, &m.secret, token) {
            (Some(Credential::Secret { header, prefix, .. }), Some(secret), _) => {
                call = call.header(header, format!("{prefix}{}", secret.0));
            }
            (Some(Credential::Token { header, prefix, .. }), _, Some(token)) => {
                call = call.header(header, format!("{prefix}{token}"));
            }
            _ => {}
        }
        // The mount's limits, across every host: the call waits its turn, or is refused.
        let admitted = limits::admit(
            &self.store,
            mount,
            &m.spec.limits,
            &m.stats,
            caller.deadline,
            m.spec.timeout,
        )
        .await?;
        let answer = self.send(m, caller, call).await;
        admitted.end().await;
        answer
    }

    /// Sends a built call that its mount's limits let through, bounded by what is left of
    /// the attempt, and reads the answer up to the mount's bound.
    async fn send(
        &self,
        m: &Mount,
        caller: &Caller,
        call: reqwest::RequestBuilder,
    ) -> Result<Response, LinkError> {
        // The last moment before the effect leaves the host: the lease must be held now.
        if !self.store.lease_live(&caller.fence).await? {
            return Err(LinkError::LeaseLost);
        }
        let left = caller.deadline.saturating_duration_since(Instant::now());
        let call = call.timeout(m.spec.timeout.min(left));
        let response = call.send().await.map_err(|_| LinkError::Unavailable)?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .filter_map(|(n, v)| Some((n.as_str().to_string(), v.to_str().ok()?.to_string())))
            .collect();
        if response
            .content_length()
            .is_some_and(|n| n > m.spec.max_response)
        {
            return Err(LinkError::ResponseTooLarge);
        }
        let mut body = Vec::new();
        let mut response = response;
        while let Some(chunk) = response.chunk().await.map_err(|_| LinkError::Unavailable)? {
            if (body.len() + chunk.len()) as u64 > m.spec.max_response {
                return Err(LinkError::ResponseTooLarge);
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Response {
            status,
            headers,
            body,
        })
    }
}

/// The base URL of a mount: http(s), no credentials or fragment, ending in `/`.
fn base_url(text: &str) -> Result<url::Url, String> {
    let mut url = url::Url::parse(text).map_err(|_| format!("{text:?} is not a URL"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(format!("{text:?} is not an http(s) URL"));
    }
    if !url.username().is_empty() || url.password().is_some() || url.fragment().is_some() {
        return Err("the URL may not carry credentials or a fragment".into());
    }
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    Ok(url)
}

/// The URL of `path` under `base`, refusing anything that could leave it.
fn join(base: &url::Url, path: &str) -> Result<url::Url, LinkError> {
    if path.len() > MAX_PATH_BYTES {
        return Err(LinkError::BadPath);
    }
    let decoded = percent_decoded(path).ok_or(LinkError::BadPath)?;
    let refused = path.starts_with('/')
        || path.contains("://")
        || path.contains(['@', '\\', '#'])
        || path.chars().any(|c| c.is_control() || c == ' ')
        || path
            .split(['/', '?'])
            .next()
            .is_some_and(|first| first.contains(':'))
        || decoded.contains(['\\', '@'])
        || decoded.chars().any(char::is_control)
        || decoded.split(['/', '?', '&', '=']).any(dot_segment);
    if refused {
        return Err(LinkError::BadPath);
    }
    let url = base.join(path).map_err(|_| LinkError::BadPath)?;
    let inside = url.scheme() == base.scheme()
        && url.host_str() == base.host_str()
        && url.port_or_known_default() == base.port_or_known_default()
        && url.path().starts_with(base.path());
    if inside {
        Ok(url)
    } else {
        Err(LinkError::BadPath)
    }
}

/// Whether a path segment is `.` or `..` to some server: servers differ in what they strip
/// before they resolve dot segments (Tomcat and Spring a `;parameter`, Windows servers
/// trailing dots and spaces), so a segment of only dots and spaces before its first `;`
/// is one.
fn dot_segment(segment: &str) -> bool {
    let name = segment.split(';').next().unwrap_or_default();
    name.contains('.') && name.chars().all(|c| c == '.' || c == ' ')
}

/// `text` with its percent escapes decoded (twice: a double-encoded `..` is a `..` to some
/// servers), or `None` if that is not valid UTF-8.
fn percent_decoded(text: &str) -> Option<String> {
    let once = decode(text)?;
    decode(&once)
}

fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = text.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The key a service deduplicates a call by: the same for the same step of the same pass
/// of the same run, whichever attempt sends it.
pub fn idempotency_key(run_id: &str, pass: i64, step: &str) -> String {
    let digest = Sha256::digest(format!("{run_id}\n{pass}\n{step}").as_bytes());
    hex::encode(&digest[..16])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_under_the_mount() {
        let base = base_url("http://svc.internal:8080/api").unwrap();
        assert_eq!(base.as_str(), "http://svc.internal:8080/api/");
        for ok in [
            "invoices",
            "invoices/7",
            "invoices?limit=10&after=x",
            "a.b/c_d-e",
            "report.v2;format=csv",
            "a/.hidden/b",
            "",
        ] {
            let url = join(&base, ok).unwrap_or_else(|_| panic!("{ok}"));
            assert!(
                url.as_str().starts_with("http://svc.internal:8080/api/"),
                "{url}"
            );
        }
        for bad in [
            "http://evil.example/x",
            "//evil.example/x",
            "/etc/passwd",
            "../admin",
            "a/../../admin",
            "%2e%2e/admin",
            "%2E%2e/admin",
            "%252e%252e/admin",
            "a/%2e%2e%2fadmin",
            "user@evil.example",
            "a\\b",
            "a#frag",
            "mailto:x",
            "a\r\nHost: evil",
            "./x",
            "a/..;/..;/admin",
            "a/%2e%2e%3b/admin",
            "a/..;jsessionid=1/admin",
            "a/..%20/admin",
            "a/.../admin",
            "a/. ./admin",
            "a/..%00/admin",
            "a/..%09/admin",
            "a/%2e%2e%0d%0a/admin",
            "echo%0d%0aX-Injected:%201",
            "echo?q=%00",
            "a/%250a/b",
            &"a".repeat(MAX_PATH_BYTES + 1),
        ] {
            assert!(join(&base, bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn idempotency_keys_depend_on_run_pass_and_step_only() {
        let k = idempotency_key("run", 1, "charge");
        assert_eq!(k, idempotency_key("run", 1, "charge"));
        assert_ne!(k, idempotency_key("run", 2, "charge"));
        assert_ne!(k, idempotency_key("run", 1, "refund"));
        assert_eq!(k.len(), 32);
    }
}
