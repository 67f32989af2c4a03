//! The API's description (`GET /openapi.json`) held to the API: every route the router
//! registers is described, and nothing else; every curl example and JSON answer the
//! README and the docs show fits it; and the real binary's answers, on both backends,
//! fit the schemas of their routes and statuses.
//!
//! The validator below is strict rather than complete: it knows the keywords `utoipa`
//! writes and refuses a schema with any other, so a schema it cannot check fails the test
//! instead of passing it.

use crate::common::{Home, Server};
use serde_json::Value;
use std::collections::BTreeSet;

/// The routes that need no token, registered beside the API's (`service::http::router`).
const OPEN: [(&str, &str); 5] = [
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
    ("GET", "/.well-known/jwks.json"),
    ("GET", "/openapi.json"),
];

fn document() -> Value {
    serde_json::from_str(jobhost::service::http::openapi_document()).expect("the document is JSON")
}

/// Keywords that only annotate: nothing to check.
const ANNOTATIONS: [&str; 8] = [
    "description",
    "title",
    "example",
    "examples",
    "format",
    "default",
    "deprecated",
    "contentMediaType",
];

/// Checks `value` against `schema`, resolving `$ref`s in `doc`; the first misfit, by path.
fn check(doc: &Value, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    let Some(schema) = schema.as_object() else {
        return match schema {
            Value::Bool(true) => Ok(()),
            _ => Err(format!("{at}: schema {schema} is not an object")),
        };
    };
    for (keyword, rule) in schema {
        match keyword.as_str() {
            k if ANNOTATIONS.contains(&k) => {}
            "$ref" => {
                let name = rule
                    .as_str()
                    .and_then(|r| r.strip_prefix("#/components/schemas/"))
                    .ok_or_else(|| format!("{at}: a $ref outside the components: {rule}"))?;
                let target = &doc["components"]["schemas"][name];
                if target.is_null() {
                    return Err(format!("{at}: $ref to {name}, which is not described"));
                }
                check(doc, target, value, at)?;
            }
            "type" => {
                let types: Vec<&str> = match rule {
                    Value::String(t) => vec![t.as_str()],
                    Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
                    _ => return Err(format!("{at}: type {rule}")),
                };
                if !types.iter().any(|t| is_type(value, t)) {
                    return Err(format!("{at}: {value} is not {types:?}"));
                }
            }
            "enum" => {
                let allowed = rule
                    .as_array()
                    .ok_or_else(|| format!("{at}: enum {rule}"))?;
                if !allowed.contains(value) {
                    return Err(format!("{at}: {value} is not one of {rule}"));
                }
            }
            "minimum" => {
                if let (Some(n), Some(min)) = (value.as_f64(), rule.as_f64())
                    && n < min
                {
                    return Err(format!("{at}: {n} is below {min}"));
                }
            }
            "properties" => {
                if let Some(object) = value.as_object() {
                    for (name, property) in rule.as_object().into_iter().flatten() {
                        if let Some(field) = object.get(name) {
                            check(doc, property, field, &format!("{at}.{name}"))?;
                        }
                    }
                }
            }
            "required" => {
                if let Some(object) = value.as_object() {
                    for name in rule
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                    {
                        if !object.contains_key(name) {
                            return Err(format!("{at}: no {name:?} in {value}"));
                        }
                    }
                }
            }
            "additionalProperties" => {
                if let Some(object) = value.as_object() {
                    let known = schema.get("properties").and_then(Value::as_object);
                    for (name, field) in object {
                        if known.is_some_and(|k| k.contains_key(name)) {
                            continue;
                        }
                        match rule {
                            Value::Bool(false) => {
                                return Err(format!("{at}: {name:?} is not a field here"));
                            }
                            Value::Bool(true) => {}
                            other => check(doc, other, field, &format!("{at}.{name}"))?,
                        }
                    }
                }
            }
            "items" => {
                for (i, item) in value.as_array().into_iter().flatten().enumerate() {
                    check(doc, rule, item, &format!("{at}[{i}]"))?;
                }
            }
            "allOf" => {
                for part in rule.as_array().into_iter().flatten() {
                    check(doc, part, value, at)?;
                }
            }
            "oneOf" => {
                let parts = rule
                    .as_array()
                    .ok_or_else(|| format!("{at}: oneOf {rule}"))?;
                let fits = parts
                    .iter()
                    .filter(|p| check(doc, p, value, at).is_ok())
                    .count();
                if fits != 1 {
                    return Err(format!("{at}: {value} fits {fits} of oneOf {rule}"));
                }
            }
            "anyOf" => {
                let parts = rule
                    .as_array()
                    .ok_or_else(|| format!("{at}: anyOf {rule}"))?;
                if !parts.iter().any(|p| check(doc, p, value, at).is_ok()) {
                    return Err(format!("{at}: {value} fits none of anyOf {rule}"));
                }
            }
            other => return Err(format!("{at}: the keyword {other:?} is not checked here")),
        }
    }
    Ok(())
}

fn is_type(value: &Value, t: &str) -> bool {
    match t {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        _ => false,
    }
}

/// The operation of `method` on the described path `concrete` fits (a `{param}` segment
/// takes any one segment): its template and operation.
fn operation<'d>(doc: &'d Value, method: &str, concrete: &str) -> Option<(&'d str, &'d Value)> {
    let concrete = concrete.split('?').next().unwrap_or_default();
    let asked: Vec<&str> = concrete.split('/').collect();
    doc["paths"]
        .as_object()?
        .iter()
        .find_map(|(template, item)| {
            let parts: Vec<&str> = template.split('/').collect();
            let fits = parts.len() == asked.len()
                && parts.iter().zip(&asked).all(|(p, a)| {
                    p == a || (p.starts_with('{') && p.ends_with('}') && !a.is_empty())
                });
            let op = &item[method.to_ascii_lowercase()];
            (fits && op.is_object()).then_some((template.as_str(), op))
        })
}

/// Checks an answer of `method path` with `status` against the described one.
fn check_answer(doc: &Value, method: &str, path: &str, status: u16, body: &Value) {
    let (template, op) =
        operation(doc, method, path).unwrap_or_else(|| panic!("{method} {path} is not described"));
    let answer = &op["responses"][status.to_string()];
    assert!(
        answer.is_object(),
        "{method} {template}: status {status} is not described; the answer was {body}"
    );
    let schema = &answer["content"]["application/json"]["schema"];
    assert!(
        !schema.is_null(),
        "{method} {template} {status}: no JSON schema"
    );
    if let Err(misfit) = check(doc, schema, body, "answer") {
        panic!("{method} {path} {status} does not fit its description: {misfit}\n{body:#}");
    }
}

/// The validator refuses what does not fit: a test of the test.
#[test]
fn the_validator_refuses_an_answer_that_does_not_fit() {
    let doc = document();
    let started = serde_json::json!({"run_id": "r", "result": "created", "joined": false});
    check_answer(&doc, "POST", "/jobs/hello/runs", 201, &started);
    let path = "/jobs/{name}/runs";
    let schema =
        &doc["paths"][path]["post"]["responses"]["201"]["content"]["application/json"]["schema"];
    for wrong in [
        serde_json::json!({"run_id": "r", "result": "made", "joined": false}),
        serde_json::json!({"run_id": 7, "result": "created", "joined": false}),
        serde_json::json!({"result": "created", "joined": false}),
        serde_json::json!("created"),
    ] {
        assert!(
            check(&doc, schema, &wrong, "answer").is_err(),
            "{wrong} passed"
        );
    }
    let error = serde_json::json!({"error": {"code": "unknown_run"}});
    let schema = &doc["paths"]["/runs/{id}"]["get"]["responses"]["404"]["content"]["application/json"]
        ["schema"];
    assert!(
        check(&doc, schema, &error, "answer").is_err(),
        "an error without its message"
    );
}

/// Every route the router registers is described with its method, and nothing else is:
/// a route added without its `#[utoipa::path]` (or described and not served) fails here.
#[test]
fn every_route_of_the_router_is_described_and_nothing_else() {
    let doc = document();
    let mut served: BTreeSet<(String, String)> = jobhost::service::http::api_routes()
        .iter()
        .map(|r| (r.method.to_string(), r.path.to_string()))
        .collect();
    served.extend(OPEN.iter().map(|(m, p)| (m.to_string(), p.to_string())));
    let mut described = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("a path item") {
            if !["get", "post", "delete", "put", "patch"].contains(&method.as_str()) {
                continue;
            }
            described.insert((method.to_ascii_uppercase(), path.clone()));
            let answers = op["responses"].as_object().expect("responses");
            assert!(
                answers.keys().any(|s| s.starts_with('2')),
                "{method} {path}: no success described"
            );
            for (status, answer) in answers {
                for (kind, content) in answer["content"].as_object().into_iter().flatten() {
                    let schema = &content["schema"];
                    assert!(
                        schema.is_object(),
                        "{method} {path} {status} {kind}: no schema"
                    );
                }
            }
        }
    }
    let undescribed: Vec<_> = served.difference(&described).collect();
    assert!(
        undescribed.is_empty(),
        "served, not described: {undescribed:?}"
    );
    let unserved: Vec<_> = described.difference(&served).collect();
    assert!(unserved.is_empty(), "described, not served: {unserved:?}");
    // Every schema a `$ref` names is there.
    let text = doc.to_string();
    for piece in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
        let name = piece.split('"').next().unwrap();
        assert!(
            doc["components"]["schemas"][name].is_object(),
            "{name} is not described"
        );
    }
}

fn workspace() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// The documents whose examples are held to the description.
const DOCUMENTED: [&str; 3] = ["README.md", "docs/guide.md", "docs/operating.md"];

/// Each curl command of `text`, its lines joined: method, URL path and `-d` body.
fn curls(text: &str) -> Vec<(String, String, Option<String>)> {
    let mut commands = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(start) = line.find("curl ") else {
            continue;
        };
        let mut command = line[start..].to_string();
        // A command goes on past a line ending in `\`, and a quoted body past its line.
        while command.trim_end().ends_with('\\') || command.matches('\'').count() % 2 == 1 {
            command = command.trim_end().trim_end_matches('\\').to_string();
            command.push(' ');
            command.push_str(lines.next().expect("the command goes on").trim());
        }
        let method = if command.contains("-X POST") {
            "POST"
        } else if command.contains("-X DELETE") {
            "DELETE"
        } else {
            "GET"
        };
        let url = command
            .split_whitespace()
            .map(|w| w.trim_matches(|c| c == '"' || c == '`'))
            .find(|w| w.starts_with("http://") || w.starts_with("https://"))
            .unwrap_or_else(|| panic!("a curl example without a URL: {command}"));
        let path = url
            .splitn(4, '/')
            .nth(3)
            .map(|p| format!("/{p}"))
            .unwrap_or_default();
        let body = command.split_once("-d '").map(|(_, rest)| {
            rest.split_once('\'')
                .unwrap_or_else(|| panic!("an unclosed body: {command}"))
                .0
                .to_string()
        });
        commands.push((method.to_string(), path, body));
    }
    commands
}

/// Each JSON answer a document shows, after its marker
/// `<!-- answer: METHOD PATH STATUS -->`: the route, the status and the JSON.
fn answers(text: &str) -> Vec<(String, String, u16, Value)> {
    let mut found = Vec::new();
    for piece in text.split("<!-- answer: ").skip(1) {
        let (head, rest) = piece.split_once(" -->").expect("a closed marker");
        let mut words = head.split_whitespace();
        let (method, path, status) = (
            words.next().expect("a method"),
            words.next().expect("a path"),
            words.next().and_then(|s| s.parse().ok()).expect("a status"),
        );
        let block = rest
            .split_once("```json\n")
            .and_then(|(_, b)| b.split_once("```"))
            .expect("a ```json block after the marker")
            .0;
        let json = serde_json::from_str(block)
            .unwrap_or_else(|e| panic!("the answer to {method} {path} is not JSON: {e}"));
        found.push((method.to_string(), path.to_string(), status, json));
    }
    found
}

/// Every curl example in the README and the docs names a described route, and its body
/// fits that route's request body; every JSON answer they show fits its response.
#[test]
fn every_documented_example_fits_the_description() {
    let doc = document();
    let mut bodies = 0;
    let mut shown = 0;
    for file in DOCUMENTED {
        let text = std::fs::read_to_string(workspace().join(file)).expect(file);
        for (method, path, body) in curls(&text) {
            let (template, op) = operation(&doc, &method, &path)
                .unwrap_or_else(|| panic!("{file}: {method} {path} is not described"));
            let Some(body) = body else { continue };
            let body: Value = serde_json::from_str(&body)
                .unwrap_or_else(|e| panic!("{file}: the body of {method} {path} is not JSON: {e}"));
            let schema = &op["requestBody"]["content"]["application/json"]["schema"];
            assert!(
                schema.is_object(),
                "{file}: {method} {template} takes no body"
            );
            if let Err(misfit) = check(&doc, schema, &body, "body") {
                panic!("{file}: {method} {path}: the example does not fit: {misfit}");
            }
            bodies += 1;
        }
        for (method, path, status, answer) in answers(&text) {
            check_answer(&doc, &method, &path, status, &answer);
            shown += 1;
        }
    }
    assert!(
        bodies >= 2 && shown >= 3,
        "{bodies} bodies, {shown} answers checked"
    );
}

/// A request's status and JSON answer, checked against the description.
async fn fits(
    doc: &Value,
    server: &Server,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> (u16, Value) {
    let (status, answer) = server.request_as(method, token, path, body).await;
    check_answer(doc, method, path, status, &answer);
    (status, answer)
}

fn manifest(home: &Home) -> std::path::PathBuf {
    home.manifest(
        "",
        r#"
        [jobs.hello]
        component = "{guest:hello}"
        [jobs.greeter]
        component = "{guest:hello}"
        tenant = "acme"
        on = ["greeting.sent"]
        "#,
    )
}

on_every_backend! {
    async fn real_answers_fit_the_description(home) {
        let doc = document();
        let added = home.run(&["tenants", "add", "acme"]);
        assert!(added.status.success(), "{}", String::from_utf8_lossy(&added.stderr));
        let server = home.serve(&["--manifest", manifest(&home).to_str().unwrap()]).await;
        let op = Some(server.token.as_str());

        // The document served is the one the binary was built with, to anyone.
        let (status, served) = server.get_as(None, "/openapi.json").await;
        assert_eq!((status, &served), (200, &doc));

        fits(&doc, &server, op, "GET", "/jobs", None).await;
        let (_, job) = fits(&doc, &server, op, "GET", "/jobs/hello", None).await;
        assert!(job["settings"].is_object(), "{job}");
        fits(&doc, &server, op, "POST", "/jobs/hello/kick", None).await;
        let (status, started) = fits(
            &doc, &server, op, "POST", "/jobs/hello/runs",
            Some(r#"{"instance": "a", "payload": {"name": "a"}, "priority": 5, "max_attempts": 1}"#),
        )
        .await;
        assert_eq!(status, 201, "{started}");
        let run = started["run_id"].as_str().unwrap().to_string();
        let (status, _) = fits(
            &doc, &server, op, "POST", "/jobs/hello/runs:batch",
            Some(r#"{"runs": [{"instance": "b", "delay": "1h", "unique": {"key": "k", "while": "queued", "on_conflict": "replace"}}, {"instance": "c"}]}"#),
        )
        .await;
        assert_eq!(status, 200);
        let (status, ended) = fits(&doc, &server, op, "GET", &format!("/runs/{run}?wait=60s"), None).await;
        assert_eq!((status, ended["status"].as_str()), (200, Some("succeeded")), "{ended}");
        assert!(!ended["attempt_records"].as_array().unwrap().is_empty(), "{ended}");
        assert_eq!(ended["max_attempts"], 1, "{ended}");
        let (_, found) = fits(&doc, &server, op, "GET", "/runs/search?payload=%7B%22name%22%3A%22a%22%7D", None).await;
        assert_eq!(found["runs"][0]["run_id"].as_str(), Some(run.as_str()), "{found}");
        fits(&doc, &server, op, "GET", "/failures?window=day", None).await;
        let (_, hosts) = fits(&doc, &server, op, "GET", "/hosts", None).await;
        assert_eq!(hosts["hosts"][0]["this_host"], true, "{hosts}");
        fits(&doc, &server, op, "GET", "/runs?limit=10", None).await;
        fits(&doc, &server, op, "GET", "/runs/count?job=hello", None).await;
        let (_, delayed) = server.get("/runs?job=hello&instance=b").await;
        let delayed = delayed["runs"][0]["run_id"].as_str().expect("the delayed run").to_string();
        fits(&doc, &server, op, "GET", &format!("/runs/{delayed}"), None).await;
        let (_, upcoming) = fits(&doc, &server, op, "GET", "/upcoming", None).await;
        let kinds: Vec<&str> = upcoming["upcoming"].as_array().unwrap().iter().filter_map(|d| d["kind"].as_str()).collect();
        assert!(kinds.contains(&"run"), "the delayed run: {upcoming}");
        let (status, _) = fits(&doc, &server, op, "POST", &format!("/runs/{delayed}/cancel"), None).await;
        assert_eq!(status, 200);
        let (status, _) = fits(&doc, &server, op, "POST", &format!("/runs/{delayed}/retry"), None).await;
        assert_eq!(status, 201);
        let (status, _) = fits(&doc, &server, op, "POST", &format!("/runs/{run}/signals/approval"), Some(r#"{"payload": {"ok": true}}"#)).await;
        assert_eq!(status, 409, "the run ended");
        fits(&doc, &server, op, "POST", "/runs/cancel", Some(r#"{"filter": {"job": "hello"}}"#)).await;
        fits(&doc, &server, op, "POST", "/runs/retry", Some(r#"{"filter": {"job": "hello", "status": "cancelled"}, "confirm": true}"#)).await;
        let purge = r#"{"filter": {"job": "hello", "status": "cancelled"}}"#;
        let (_, preview) = fits(&doc, &server, op, "POST", "/runs/purge", Some(purge)).await;
        assert_eq!(preview["confirmed"], false, "{preview}");
        let purge = r#"{"filter": {"job": "hello", "status": "cancelled"}, "confirm": true}"#;
        let (_, purged) = fits(&doc, &server, op, "POST", "/runs/purge", Some(purge)).await;
        assert_eq!(purged["more"], false, "{purged}");
        fits(&doc, &server, op, "POST", "/pauses/job/hello", None).await;
        fits(&doc, &server, op, "GET", "/pauses", None).await;
        fits(&doc, &server, op, "DELETE", "/pauses/job/hello", None).await;
        fits(&doc, &server, op, "POST", "/events/greeting.sent", Some(r#"{"key": "g-1", "payload": {"name": "e"}}"#)).await;
        fits(&doc, &server, op, "GET", "/reports", None).await;
        fits(&doc, &server, op, "GET", "/deliveries", None).await;
        fits(&doc, &server, op, "GET", "/tenants", None).await;
        let (status, _) = fits(&doc, &server, op, "POST", "/tenants", Some(r#"{"name": "globex"}"#)).await;
        assert_eq!(status, 201);
        fits(&doc, &server, op, "POST", "/tenants/globex/disable", None).await;
        let (status, issued) = fits(&doc, &server, op, "POST", "/tokens", Some(r#"{"tenant": "acme", "label": "app", "expires": "30d"}"#)).await;
        assert_eq!(status, 201);
        fits(&doc, &server, op, "GET", "/tokens", None).await;
        fits(&doc, &server, op, "GET", "/whoami", None).await;
        fits(&doc, &server, op, "GET", "/audit?since=1h", None).await;
        fits(&doc, &server, op, "GET", "/usage", None).await;

        // A tenant's token is told less of the same views: that fits too.
        let acme = issued["token"].as_str().unwrap().to_string();
        let acme = Some(acme.as_str());
        fits(&doc, &server, acme, "GET", "/jobs", None).await;
        let (status, tenant_start) = fits(&doc, &server, acme, "POST", "/jobs/greeter/runs", None).await;
        assert_eq!(status, 201);
        let theirs = tenant_start["run_id"].as_str().unwrap().to_string();
        fits(&doc, &server, acme, "GET", &format!("/runs/{theirs}?wait=60s"), None).await;
        fits(&doc, &server, acme, "GET", "/whoami", None).await;
        fits(&doc, &server, acme, "GET", "/upcoming", None).await;
        fits(&doc, &server, acme, "GET", "/runs/search?payload=%7B%7D", None).await;

        // Refusals, each in the one error shape with a described status.
        let (status, _) = fits(&doc, &server, op, "GET", "/runs/no-such-run", None).await;
        assert_eq!(status, 404);
        let (status, _) = fits(&doc, &server, op, "GET", "/runs?status=lost", None).await;
        assert_eq!(status, 400);
        let (status, _) = fits(&doc, &server, None, "GET", "/jobs", None).await;
        assert_eq!(status, 401);
        let (status, _) = fits(&doc, &server, op, "POST", "/jobs/hello/runs", Some(r#"{"colour": "red"}"#)).await;
        assert_eq!(status, 400);
        let (status, _) = fits(&doc, &server, acme, "GET", "/tenants", None).await;
        assert_eq!(status, 404);
        let (status, _) = fits(&doc, &server, acme, "GET", "/hosts", None).await;
        assert_eq!(status, 404);
        let (status, _) = fits(&doc, &server, acme, "POST", "/runs/purge", Some("{}")).await;
        assert_eq!(status, 404);
        let (status, _) = fits(&doc, &server, op, "GET", "/runs/search?payload=%5B1%5D", None).await;
        assert_eq!(status, 400, "a payload that is not an object");
        let (status, _) = fits(&doc, &server, acme, "GET", &format!("/runs/{run}"), None).await;
        assert_eq!(status, 404, "another tenant's run");
        let token_id = issued["id"].as_str().unwrap();
        let (status, _) = fits(&doc, &server, op, "DELETE", &format!("/tokens/{token_id}"), None).await;
        assert_eq!(status, 200);
    }
}
