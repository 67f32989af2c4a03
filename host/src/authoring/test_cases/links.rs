//! A case's `links`: canned responses served by a local server in place of each mount,
//! and the requests the job sent, held against the case's `expect.requests`.
//!
//! ```toml
//! [[case.links.payments]]                 # answers calls to the mount `payments`
//! method = "POST"                          # these two choose the requests it answers
//! path = "charges"                         # (the path under the mount, as the job gives it)
//! status = 201
//! json = { id = "ch_1" }                   # or `body = "text"`; `headers = { … }`
//! [[case.expect.requests.payments]]        # every request it got, in order
//! method = "POST"
//! path = "charges"
//! headers = { "content-type" = "application/json" }   # those named, as sent
//! json = { amount = 300 }                  # or `body = "text"`
//! ```
//!
//! A case never reaches a real service: every mount of the manifest is served by the
//! case's server, and a request no canned response matches is answered 404 and fails
//! the case.

use super::Mismatch;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// A canned response, and the requests it answers (any, unless narrowed).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Canned {
    pub method: Option<String>,
    pub path: Option<String>,
    #[serde(default = "ok")]
    pub status: u16,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub body: Option<String>,
    pub json: Option<toml::Value>,
}

fn ok() -> u16 {
    200
}

/// What a request the job sent must have been (only what is named is compared).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedRequest {
    pub method: Option<String>,
    pub path: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub body: Option<String>,
    pub json: Option<toml::Value>,
}

/// A request the case's server got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub method: String,
    /// The path under the mount, with its query, as the job gave it (`charges?page=2`).
    pub path: String,
    /// Lower-case names.
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
    /// Whether a canned response answered it.
    pub answered: bool,
}

impl Canned {
    /// Checks what a TOML parser cannot: a real status, one body, a method by its name.
    pub fn validate(&self) -> Result<(), String> {
        StatusCode::from_u16(self.status)
            .map_err(|_| format!("status {} is not an HTTP status", self.status))?;
        if self.body.is_some() && self.json.is_some() {
            return Err("give `body` or `json`, not both".into());
        }
        if let Some(method) = &self.method {
            Method::from_bytes(method.to_ascii_uppercase().as_bytes())
                .map_err(|_| format!("{method:?} is not an HTTP method"))?;
        }
        for (name, value) in &self.headers {
            axum::http::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("{name:?} is not a header name"))?;
            axum::http::HeaderValue::from_str(value)
                .map_err(|_| format!("the value of header {name:?} is not valid"))?;
        }
        Ok(())
    }

    fn answers(&self, method: &str, path: &str) -> bool {
        let method_fits = self
            .method
            .as_ref()
            .is_none_or(|m| m.eq_ignore_ascii_case(method));
        // A canned path with no query matches whatever query the request has.
        let path_fits = self.path.as_ref().is_none_or(|p| {
            p == path || (!p.contains('?') && path.split('?').next() == Some(p.as_str()))
        });
        method_fits && path_fits
    }

    fn response(&self) -> Response {
        let mut response = match (&self.json, &self.body) {
            (Some(json), _) => axum::Json(json.clone()).into_response(),
            (None, Some(body)) => body.clone().into_response(),
            (None, None) => ().into_response(),
        };
        *response.status_mut() = StatusCode::from_u16(self.status).expect("validated");
        for (name, value) in &self.headers {
            response.headers_mut().insert(
                axum::http::HeaderName::from_bytes(name.as_bytes()).expect("validated"),
                axum::http::HeaderValue::from_str(value).expect("validated"),
            );
        }
        response
    }
}

impl ExpectedRequest {
    pub fn validate(&self) -> Result<(), String> {
        if self.body.is_some() && self.json.is_some() {
            return Err("give `body` or `json`, not both".into());
        }
        Ok(())
    }
}

#[derive(Default)]
struct Served {
    canned: BTreeMap<String, Vec<Canned>>,
    recorded: Mutex<BTreeMap<String, Vec<Recorded>>>,
}

/// The server a case's mounts point at: `http://127.0.0.1:PORT/<mount>/`. It stops when
/// dropped.
pub struct CannedServer {
    base: String,
    served: Arc<Served>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl CannedServer {
    pub async fn start(canned: BTreeMap<String, Vec<Canned>>) -> std::io::Result<CannedServer> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let served = Arc::new(Served {
            canned,
            recorded: Mutex::default(),
        });
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(served.clone());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(CannedServer {
            base,
            served,
            _stop: stop,
        })
    }

    /// The base URL standing in for `mount`.
    pub fn url_of(&self, mount: &str) -> String {
        format!("{}/{mount}/", self.base)
    }

    /// The requests each mount got, in order.
    pub fn recorded(&self) -> BTreeMap<String, Vec<Recorded>> {
        self.served
            .recorded
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

async fn answer(
    State(served): State<Arc<Served>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let whole = uri.path().trim_start_matches('/');
    let (mount, rest) = whole.split_once('/').unwrap_or((whole, ""));
    let path = match uri.query() {
        Some(query) => format!("{rest}?{query}"),
        None => rest.to_string(),
    };
    let canned = served
        .canned
        .get(mount)
        .and_then(|list| list.iter().find(|c| c.answers(method.as_str(), &path)));
    served
        .recorded
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .entry(mount.to_string())
        .or_default()
        .push(Recorded {
            method: method.to_string(),
            path: path.clone(),
            headers: headers
                .iter()
                .map(|(name, value)| {
                    (
                        name.as_str().to_string(),
                        String::from_utf8_lossy(value.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            body: body.to_vec(),
            answered: canned.is_some(),
        });
    match canned {
        Some(canned) => canned.response(),
        None => (
            StatusCode::NOT_FOUND,
            format!("host test: no canned response for {method} {path} on mount {mount}"),
        )
            .into_response(),
    }
}

/// Every way the requests `recorded` differ from `expected`, and every request no
/// canned response answered.
pub fn check(
    expected: &BTreeMap<String, Vec<ExpectedRequest>>,
    recorded: &BTreeMap<String, Vec<Recorded>>,
) -> Vec<Mismatch> {
    let mut mismatches = Vec::new();
    let mut differ = |what: String, expected: String, actual: String| {
        if expected != actual {
            mismatches.push(Mismatch {
                what,
                expected,
                actual,
            });
        }
    };
    for (mount, got) in recorded {
        for request in got.iter().filter(|r| !r.answered) {
            differ(
                format!("a canned response of {mount}"),
                "one answering every request".into(),
                format!("none for {} {}", request.method, request.path),
            );
        }
    }
    let none = Vec::new();
    for (mount, wanted) in expected {
        let got = recorded.get(mount).unwrap_or(&none);
        if wanted.len() != got.len() {
            let sent: Vec<String> = got
                .iter()
                .map(|r| format!("{} {}", r.method, r.path))
                .collect();
            differ(
                format!("requests to {mount}"),
                format!("{} requests", wanted.len()),
                format!("{} requests: [{}]", got.len(), sent.join(", ")),
            );
        }
        for (n, (want, sent)) in wanted.iter().zip(got).enumerate() {
            let what = |part: &str| format!("request {} to {mount}: {part}", n + 1);
            if let Some(method) = &want.method {
                differ(
                    what("method"),
                    method.to_ascii_uppercase(),
                    sent.method.clone(),
                );
            }
            if let Some(path) = &want.path {
                differ(what("path"), path.clone(), sent.path.clone());
            }
            for (name, value) in &want.headers {
                let found = sent
                    .headers
                    .get(&name.to_ascii_lowercase())
                    .cloned()
                    .unwrap_or_else(|| "(not sent)".into());
                differ(what(&format!("header {name}")), value.clone(), found);
            }
            let text = String::from_utf8_lossy(&sent.body);
            if let Some(body) = &want.body {
                differ(what("body"), body.clone(), text.to_string());
            }
            if let Some(json) = &want.json {
                let want = serde_json::to_value(json).expect("TOML values are JSON");
                let sent = serde_json::from_str::<Value>(&text)
                    .map_or_else(|_| format!("(not JSON) {text}"), |v| v.to_string());
                differ(what("json"), want.to_string(), sent);
            }
        }
    }
    mismatches
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(method: &str, path: &str, body: &str) -> Recorded {
        Recorded {
            method: method.into(),
            path: path.into(),
            headers: BTreeMap::from([("x-trace".to_string(), "t1".to_string())]),
            body: body.as_bytes().to_vec(),
            answered: true,
        }
    }

    #[test]
    fn a_canned_response_answers_the_requests_it_names() {
        let canned: Canned = toml::from_str("method = \"post\"\npath = \"charges\"").unwrap();
        assert!(canned.answers("POST", "charges"));
        assert!(canned.answers("POST", "charges?retry=1"));
        assert!(!canned.answers("GET", "charges"));
        assert!(!canned.answers("POST", "charges/1"));
        let any: Canned = toml::from_str("status = 503").unwrap();
        assert!(any.answers("DELETE", ""));
        let bad: Canned = toml::from_str("status = 1000").unwrap();
        assert!(bad.validate().unwrap_err().contains("not an HTTP status"));
        let both: Canned = toml::from_str("body = \"a\"\njson = 1").unwrap();
        assert!(both.validate().is_err());
    }

    #[test]
    fn the_requests_sent_are_held_against_the_case() {
        let expected: BTreeMap<String, Vec<ExpectedRequest>> = toml::from_str(
            r#"pay = [{ method = "post", path = "charges", headers = { X-Trace = "t1" }, json = { amount = 3 } }]"#,
        )
        .unwrap();
        let matching = BTreeMap::from([(
            "pay".to_string(),
            vec![sent("POST", "charges", r#"{ "amount": 3 }"#)],
        )]);
        assert_eq!(check(&expected, &matching), []);
        let mut unanswered = sent("GET", "other", "");
        unanswered.answered = false;
        let wrong = BTreeMap::from([(
            "pay".to_string(),
            vec![sent("POST", "charges", "{\"amount\":4}"), unanswered],
        )]);
        let what: Vec<String> = check(&expected, &wrong)
            .into_iter()
            .map(|m| format!("{}: {} / {}", m.what, m.expected, m.actual))
            .collect();
        assert_eq!(
            what,
            [
                "a canned response of pay: one answering every request / none for GET other",
                "requests to pay: 1 requests / 2 requests: [POST charges, GET other]",
                "request 1 to pay: json: {\"amount\":3} / {\"amount\":4}",
            ]
        );
        let nothing = BTreeMap::new();
        assert_eq!(check(&expected, &nothing).len(), 1);
    }
}
