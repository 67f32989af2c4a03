//! A local HTTP service for the `links` tests: it records every request it gets (method,
//! path, headers, body) and answers by path:
//!
//! - `/api/echo`: 200, the method, path and body it got (never the headers);
//! - `/api/redirect`: 302 to `/api/target` (which counts if anyone follows);
//! - `/api/slow`: answers after 30 s;
//! - `/api/big`: 2 MiB;
//! - `/api/fail`: 500;
//! - `/api/reports`: 202;
//! - `/api/effect`: 200 (a side effect whose repeats the steps tests count);
//! - `/api/hold?ms=N`: 200 after N ms (150 by default), counting the requests it holds at
//!   once (`max_in_flight`);
//! - `/iam/memberships` (POST) and `/iam/memberships/{id}` (DELETE): a small IAM that
//!   issues and revokes membership links, checking the caller's per-attempt token against
//!   the host's published keys (`jwks_url`) and its actions; `/iam/links/{id}` answers 200
//!   while a link is valid and 410 once it expired or was revoked.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
    /// When it arrived, in milliseconds since the Unix epoch.
    pub at_ms: u64,
}

#[derive(Debug, Clone)]
struct Membership {
    expires_at: u64,
    revoked: bool,
}

#[derive(Default)]
struct Inner {
    seen: Vec<Seen>,
    memberships: HashMap<String, Membership>,
    jwks_url: Option<String>,
    /// Tenants the IAM refuses.
    refused_tenants: Vec<String>,
    /// Requests `/api/hold` holds now, and the most it held at once.
    in_flight: usize,
    max_in_flight: usize,
}

#[derive(Clone)]
pub struct Service {
    pub url: String,
    inner: Arc<Mutex<Inner>>,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

impl Service {
    pub async fn start() -> Service {
        let inner = Arc::new(Mutex::new(Inner::default()));
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Service {
            url: format!("http://{addr}"),
            inner,
        }
    }

    /// Where the IAM fetches the host's public keys.
    pub fn trust(&self, jwks_url: &str) {
        self.inner.lock().unwrap().jwks_url = Some(jwks_url.to_string());
    }

    pub fn refuse_tenant(&self, tenant: &str) {
        self.inner
            .lock()
            .unwrap()
            .refused_tenants
            .push(tenant.to_string());
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.inner.lock().unwrap().seen.clone()
    }

    pub fn count(&self) -> usize {
        self.inner.lock().unwrap().seen.len()
    }

    /// The most requests `/api/hold` held at once.
    pub fn max_in_flight(&self) -> usize {
        self.inner.lock().unwrap().max_in_flight
    }

    /// Whether a membership link is usable now.
    pub async fn link_valid(&self, id: &str) -> bool {
        let response = reqwest::get(format!("{}/iam/links/{id}", self.url))
            .await
            .unwrap();
        response.status() == 200
    }
}

async fn answer(
    State(inner): State<Arc<Mutex<Inner>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    if path.starts_with("/iam/links/") {
        let id = path.trim_start_matches("/iam/links/");
        let valid = inner
            .lock()
            .unwrap()
            .memberships
            .get(id)
            .is_some_and(|m| !m.revoked && m.expires_at > now());
        return if valid {
            StatusCode::OK
        } else {
            StatusCode::GONE
        }
        .into_response();
    }
    let seen = Seen {
        method: method.to_string(),
        path: path.clone(),
        headers: headers
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
            .collect(),
        body: body.to_vec(),
        at_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64,
    };
    inner.lock().unwrap().seen.push(seen.clone());
    match path.as_str() {
        "/api/echo" => axum::Json(json!({
            "method": seen.method,
            "path": path,
            "body": String::from_utf8_lossy(&seen.body),
        }))
        .into_response(),
        "/api/redirect" => (StatusCode::FOUND, [("location", "/api/target")]).into_response(),
        "/api/slow" => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            StatusCode::OK.into_response()
        }
        "/api/big" => vec![b'x'; 2 << 20].into_response(),
        "/api/fail" => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        "/api/reports" => StatusCode::ACCEPTED.into_response(),
        "/api/effect" => StatusCode::OK.into_response(),
        "/api/hold" => {
            let ms = uri
                .query()
                .and_then(|q| q.strip_prefix("ms="))
                .and_then(|n| n.parse().ok())
                .unwrap_or(150);
            {
                let mut inner = inner.lock().unwrap();
                inner.in_flight += 1;
                inner.max_in_flight = inner.max_in_flight.max(inner.in_flight);
            }
            tokio::time::sleep(Duration::from_millis(ms)).await;
            inner.lock().unwrap().in_flight -= 1;
            StatusCode::OK.into_response()
        }
        "/iam/memberships" if method == Method::POST => issue(&inner, &seen).await,
        p if p.starts_with("/iam/memberships/") && method == Method::DELETE => {
            let id = p.trim_start_matches("/iam/memberships/").to_string();
            match authorize(&inner, &seen, "membership.revoke").await {
                Err(status) => status.into_response(),
                Ok(_) => {
                    let mut inner = inner.lock().unwrap();
                    match inner.memberships.get_mut(&id) {
                        Some(m) => {
                            m.revoked = true;
                            StatusCode::NO_CONTENT.into_response()
                        }
                        None => StatusCode::NOT_FOUND.into_response(),
                    }
                }
            }
        }
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn issue(inner: &Arc<Mutex<Inner>>, seen: &Seen) -> Response {
    let claims = match authorize(inner, seen, "membership.issue").await {
        Ok(claims) => claims,
        Err(status) => return status.into_response(),
    };
    let Ok(request) = serde_json::from_slice::<Value>(&seen.body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let id = format!("m-{}", inner.lock().unwrap().memberships.len() + 1);
    let expires_at = now() + request["expires_in_s"].as_u64().unwrap_or(3600);
    inner.lock().unwrap().memberships.insert(
        id.clone(),
        Membership {
            expires_at,
            revoked: false,
        },
    );
    let url = format!(
        "https://iam.example/join/{id}?role={}&tenant={}",
        request["role"].as_str().unwrap_or(""),
        claims["tenant"].as_str().unwrap_or("")
    );
    (
        StatusCode::CREATED,
        axum::Json(json!({"id": id, "url": url, "expires_at": expires_at})),
    )
        .into_response()
}

/// Checks the caller's token: signed by a key the host publishes, not expired, for a
/// tenant the IAM serves, carrying `action` among its declared actions and as the
/// call's action. Returns its claims.
async fn authorize(
    inner: &Arc<Mutex<Inner>>,
    seen: &Seen,
    action: &str,
) -> Result<Value, StatusCode> {
    let token = seen
        .headers
        .get("authorization")
        .and_then(|h| h.strip_prefix("Bearer "))
        .ok_or(StatusCode::UNAUTHORIZED)?;
    let jwks_url = inner
        .lock()
        .unwrap()
        .jwks_url
        .clone()
        .ok_or(StatusCode::UNAUTHORIZED)?;
    let jwks: Value = reqwest::get(jwks_url)
        .await
        .map_err(|_| StatusCode::UNAUTHORIZED)?
        .json()
        .await
        .map_err(|_| StatusCode::UNAUTHORIZED)?;
    let claims = verify(token, &jwks).ok_or(StatusCode::UNAUTHORIZED)?;
    if claims["exp"].as_u64().is_none_or(|exp| exp < now()) {
        return Err(StatusCode::UNAUTHORIZED);
    }
    let tenant = claims["tenant"].as_str().unwrap_or("");
    if inner
        .lock()
        .unwrap()
        .refused_tenants
        .iter()
        .any(|t| t == tenant)
    {
        return Err(StatusCode::FORBIDDEN);
    }
    let declared = claims["actions"]
        .as_array()
        .is_some_and(|a| a.iter().any(|x| x == action));
    if !declared || claims["action"] != action {
        return Err(StatusCode::FORBIDDEN);
    }
    Ok(claims)
}

/// The claims of a JWT (EdDSA) whose signature a key of `jwks` verifies.
pub fn verify(token: &str, jwks: &Value) -> Option<Value> {
    let mut parts = token.split('.');
    let (header, claims, signature) = (parts.next()?, parts.next()?, parts.next()?);
    let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).ok()?).ok()?;
    if header["alg"] != "EdDSA" {
        return None;
    }
    let key = jwks["keys"]
        .as_array()?
        .iter()
        .find(|k| k["kid"] == header["kid"])?;
    let public: [u8; 32] = URL_SAFE_NO_PAD
        .decode(key["x"].as_str()?)
        .ok()?
        .try_into()
        .ok()?;
    let signature: [u8; 64] = URL_SAFE_NO_PAD.decode(signature).ok()?.try_into().ok()?;
    let verifying = ed25519_dalek::VerifyingKey::from_bytes(&public).ok()?;
    let signed = &token[..token.rfind('.')?];
    verifying
        .verify_strict(
            signed.as_bytes(),
            &ed25519_dalek::Signature::from_bytes(&signature),
        )
        .ok()?;
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).ok()?).ok()
}
