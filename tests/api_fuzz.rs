//! The API's paths and query parameters are fuzzed as guest inputs are: hostile text
//! (NUL, invalid UTF-8 escapes, control bytes, Unicode formatting characters, huge
//! numbers and strings) in every id, name and query parameter of a real `host serve`,
//! sent byte for byte over a raw socket. Every answer is a valid one or a documented JSON
//! error (`docs/failure-codes.md`), never a 5xx and never plain text; nothing reaches the
//! database's error path, and the host serves on afterwards. A fixed corpus runs first,
//! then random cases: `JOBHOST_FUZZ_CASES` (300 by default) and `JOBHOST_FUZZ_SEED`
//! (printed on failure) replay them.
//!
//! Also: a host started on Postgres with a role that lacks privileges says so, in words
//! about Postgres, and exits as for any load error.

use crate::common;

use common::{Backend, Home, Server};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The API's documented error codes and their statuses (`docs/failure-codes.md`) that a
/// hostile parameter may be answered with.
const ANSWERS: [(&str, u16); 8] = [
    ("unauthenticated", 401),
    ("unknown_job", 404),
    ("unknown_run", 404),
    ("unknown_tenant", 404),
    ("not_found", 404),
    ("invalid_parameter", 400),
    ("tenant_disabled", 409),
    ("job_orphaned", 409),
];

/// Hostile values of one path segment or query value, as sent (percent-encoded).
fn corpus() -> Vec<String> {
    let mut values: Vec<String> = [
        "%00",
        "x%00",
        "%00x",
        "x%00y",
        "%FF",
        "x%FF%FE",
        "%C0%80",
        "%ED%A0%80",
        "%F4%90%80%80",
        "%E2%80%AE",
        "x%E2%80%8B",
        "%C2%AD",
        "%D8%9C",
        "%E2%81%A0",
        "%EF%BB%BF",
        "%F0%9F%92%A9",
        "%01",
        "%1B%5B31m",
        "%7F",
        "%0A",
        "x%0D%0Ay",
        "%09",
        "%20",
        "99999999999999999999",
        "-99999999999999999999",
        "9223372036854775807",
        "-9223372036854775808",
        "-1",
        "0",
        "1e400",
        "NaN",
        "10000000000000000000ms",
        "18446744073709551615ms",
        "99999999999d",
        "9999-12-31T23:59:59Z",
        "%2F",
        "a%2Fb",
        "%2E%2E",
        "..",
        "%25",
        "%",
        "%zz",
        "%27%3B--",
        "x_%00",
        "1_%00",
        "99999999999999999999_x",
        "_",
        "",
    ]
    .iter()
    .map(|v| v.to_string())
    .collect();
    values.push("a".repeat(8000));
    values.push("%00".repeat(1000));
    values.push("%E2%80%AE".repeat(500));
    values.push("9".repeat(4000));
    values
}

/// Requests with a hostile value in each place a client's text goes, as (method, path,
/// body). `{}` is the value.
const ROUTES: [(&str, &str, Option<&str>); 37] = [
    ("GET", "/jobs/{}", None),
    ("POST", "/jobs/{}/kick", None),
    ("POST", "/jobs/greeter/kick?instance={}", None),
    ("POST", "/jobs/{}/runs", None),
    ("POST", "/jobs/{}/runs:batch", Some(r#"{"runs":[{}]}"#)),
    ("GET", "/runs/{}/events", None),
    ("GET", "/runs/x?wait={}", None),
    ("GET", "/runs/{}", None),
    ("GET", "/runs?job={}", None),
    ("GET", "/runs?status={}", None),
    ("GET", "/runs?since={}", None),
    ("GET", "/runs?until={}", None),
    ("GET", "/runs?limit={}", None),
    ("GET", "/runs?before={}", None),
    ("GET", "/runs?before=1_{}", None),
    ("GET", "/runs?job=greeter&job={}", None),
    ("GET", "/reports?job={}", None),
    ("GET", "/reports?limit={}", None),
    ("POST", "/events/{}", Some(r#"{"key":"k"}"#)),
    ("POST", "/tenants/{}/disable", None),
    ("POST", "/tenants/{}/enable", None),
    ("GET", "/usage?tenant={}", None),
    ("GET", "/runs/{}/attempts", None),
    ("GET", "/runs?code={}", None),
    ("GET", "/runs?tenant={}", None),
    ("GET", "/runs?instance={}", None),
    ("GET", "/runs?q={}", None),
    ("GET", "/runs/count?job={}", None),
    ("POST", "/runs/{}/cancel", None),
    ("POST", "/runs/{}/retry", None),
    ("DELETE", "/pauses/job/{}", None),
    ("DELETE", "/pauses/{}/x", None),
    ("GET", "/jobs/{}/stats", None),
    ("GET", "/overview?window={}", None),
    ("GET", "/runs/search?payload={}", None),
    ("GET", "/runs/search?payload=%7B%7D&job={}", None),
    ("GET", "/upcoming?limit={}", None),
];

/// One HTTP/1.1 answer: status, content type and body.
struct Answer {
    status: u16,
    content_type: String,
    body: String,
}

/// Sends `method target` exactly as given (no URL normalisation) and reads the answer.
async fn send(
    server: &Server,
    token: Option<&str>,
    method: &str,
    target: &str,
    body: Option<&str>,
) -> Answer {
    let addr = server.url.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let mut head = format!("{method} {target} HTTP/1.1\r\nhost: fuzz\r\nconnection: close\r\n");
    if let Some(token) = token {
        head.push_str(&format!("authorization: Bearer {token}\r\n"));
    }
    let body = body.unwrap_or("");
    head.push_str(&format!(
        "content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    ));
    stream.write_all(head.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut raw))
        .await
        .unwrap_or_else(|_| panic!("no answer to {method} {target}"))
        .expect("read");
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("{method} {target}: no HTTP answer: {raw:?}"));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{method} {target}: no status in {head:?}"));
    let content_type = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-type")
                .then(|| value.trim().to_string())
        })
        .unwrap_or_default();
    Answer {
        status,
        content_type,
        body: body.to_string(),
    }
}

/// Asserts that `answer` is a valid answer or a documented JSON error.
fn check(answer: &Answer, what: &str) {
    assert!(
        answer.status < 500,
        "{what}: answered {} {}",
        answer.status,
        answer.body
    );
    assert!(
        answer.content_type.starts_with("application/json"),
        "{what}: answered {} as {:?}: {:?}",
        answer.status,
        answer.content_type,
        answer.body
    );
    let body: Value = serde_json::from_str(&answer.body)
        .unwrap_or_else(|_| panic!("{what}: not JSON: {:?}", answer.body));
    if answer.status >= 400 {
        let code = body["error"]["code"].as_str().unwrap_or_default();
        assert!(
            ANSWERS.contains(&(code, answer.status)),
            "{what}: undocumented error {} {body}",
            answer.status
        );
        assert!(body["error"]["message"].is_string(), "{what}: {body}");
    }
}

/// Percent-encodes `bytes`, leaving unreserved ASCII as it is.
fn encode(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A random hostile value: raw bytes, NUL-laced names, huge digits or formatting
/// characters inside a name.
fn random_value(rng: &mut StdRng) -> String {
    match rng.random_range(0..4) {
        0 => {
            let n = rng.random_range(0..48);
            encode(&(0..n).map(|_| rng.random::<u8>()).collect::<Vec<u8>>())
        }
        1 => {
            let at = rng.random_range(0..8);
            format!(
                "{}%00{}",
                "greeter".get(..at).unwrap_or("greeter"),
                "x".repeat(at)
            )
        }
        2 => "9".repeat(rng.random_range(19..64)),
        _ => {
            let formatting = [
                "%E2%80%8B",
                "%E2%80%AE",
                "%C2%AD",
                "%D8%9C",
                "%E2%81%A0",
                "%EF%BB%BF",
                "%1F",
            ];
            format!(
                "gree{}ter",
                formatting[rng.random_range(0..formatting.len())]
            )
        }
    }
}

fn fuzz_manifest(home: &Home) -> std::path::PathBuf {
    home.manifest(
        "",
        r#"
        [jobs.greeter]
        component = "{guest:noop}"
        tenant = "acme"
        on = ["greeted"]
    "#,
    )
}

on_every_backend! {
    async fn hostile_paths_and_query_parameters_get_documented_answers_and_the_host_serves_on(home) {
        let m = fuzz_manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let operator = server.token.clone();
        let acme = home.create_token(Some("acme"));
        let tokens = [Some(operator.as_str()), Some(acme.as_str()), None];

        let mut sent = 0;
        for value in corpus() {
            for (method, route, body) in ROUTES {
                let target = route.replace("{}", &value);
                for token in tokens {
                    let answer = send(&server, token, method, &target, body).await;
                    check(&answer, &format!("{method} {target} (token: {})", token.is_some()));
                    sent += 1;
                }
            }
        }
        let seed = std::env::var("JOBHOST_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random::<u64>);
        let cases: usize = std::env::var("JOBHOST_FUZZ_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
        let mut rng = StdRng::seed_from_u64(seed);
        for _ in 0..cases {
            let (method, route, body) = ROUTES[rng.random_range(0..ROUTES.len())];
            let target = route.replace("{}", &random_value(&mut rng));
            let token = tokens[rng.random_range(0..tokens.len())];
            let answer = send(&server, token, method, &target, body).await;
            check(&answer, &format!("{method} {target} (JOBHOST_FUZZ_SEED={seed})"));
            sent += 1;
        }
        assert!(sent > 3000, "{sent}");

        // Nothing hostile reached the database's error path.
        let logs = home.server_logs();
        assert!(!logs.contains("write lock"), "{logs}");
        assert!(!logs.contains("API request failed"), "{logs}");
        assert!(!logs.contains("refused a request's value"), "{logs}");

        // The host serves on: its probes, reads and a run end to end.
        assert_eq!(server.text("/healthz").await, "ok");
        assert_eq!(server.text("/readyz").await, "ready");
        let (status, kicked) = server.post("/jobs/greeter/kick?instance=after-fuzz").await;
        assert_eq!(status, 202, "{kicked}");
        server
            .wait_runs("greeter", Duration::from_secs(60), |runs| {
                runs.iter().any(|r| r["instance"] == "after-fuzz" && r["status"] == "succeeded")
            })
            .await;
        let (status, tenants) = server.get("/tenants").await;
        assert_eq!(status, 200);
        assert!(tenants["tenants"].as_array().unwrap().iter().all(|t| t["active"] != false), "{tenants}");
    }
}

/// A Postgres role that may connect but create nothing: the host says the role lacks a
/// privilege, in Postgres's terms (not SQLite's write lock), and exits 2 (a load error),
/// not 4 (SQLite's lock).
#[tokio::test]
async fn a_postgres_role_without_privileges_is_told_so_not_that_sqlite_is_locked() {
    use sqlx::Connection;
    let home = Home::new(Backend::Postgres).await;
    let role = format!("jobhost_unprivileged_{}", uuid::Uuid::now_v7().simple());
    let mut admin = sqlx::PgConnection::connect(&home.db_url)
        .await
        .expect("connect");
    for statement in [
        format!("CREATE ROLE {role} LOGIN"),
        "REVOKE CREATE ON SCHEMA public FROM PUBLIC".to_string(),
    ] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
            .execute(&mut admin)
            .await
            .expect("set up the role");
    }
    let mut url = url::Url::parse(&home.db_url).expect("a URL");
    url.set_username(&role).expect("a user");
    let mut child = home
        .host()
        .env("JOBHOST_DB", url.as_str())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn host serve");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("host serve started with a role that may create nothing");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("read stderr");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP ROLE {role}")))
        .execute(&mut admin)
        .await
        .expect("drop the role");
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("privilege") && stderr.contains("42501"),
        "{stderr}"
    );
    assert!(!stderr.contains("SQLite"), "{stderr}");
}
