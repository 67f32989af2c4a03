//! What one client of the API may hold: a request's head that never ends, a kept-alive
//! connection left idle and a body that never arrives are each cut off at their time
//! limit; connections past the cap are answered 503 at once; the host keeps answering
//! everyone else. The real binary, spoken to over raw sockets.

use crate::common;

use common::{Backend, Home, Server};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const LIMITS: [&str; 6] = [
    "--header-timeout",
    "1s",
    "--request-timeout",
    "2s",
    "--max-connections",
    "4",
];

async fn connect(server: &Server) -> TcpStream {
    let addr = server.url.trim_start_matches("http://");
    TcpStream::connect(addr).await.expect("connect")
}

/// Everything the server sends until it closes the connection, and how long that took;
/// panics if it is still open after `within`.
async fn until_closed(stream: &mut TcpStream, within: Duration) -> (String, Duration) {
    let start = Instant::now();
    let mut answer = Vec::new();
    tokio::time::timeout(within, stream.read_to_end(&mut answer))
        .await
        .expect("the server should have closed the connection")
        .expect("read");
    (
        String::from_utf8_lossy(&answer).into_owned(),
        start.elapsed(),
    )
}

async fn healthy(server: &Server) -> bool {
    let answer = reqwest::get(format!("{}/healthz", server.url)).await;
    answer.is_ok_and(|a| a.status() == 200)
}

#[tokio::test]
async fn a_request_head_that_never_ends_is_cut_off_while_others_are_answered() {
    let home = Home::new(Backend::Sqlite).await;
    let server = home.serve(&LIMITS).await;
    let connected = Instant::now();
    let mut slow = connect(&server).await;
    slow.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: ")
        .await
        .expect("write");
    assert!(
        healthy(&server).await,
        "another client is answered meanwhile"
    );
    let (answer, _) = until_closed(&mut slow, Duration::from_secs(10)).await;
    let took = connected.elapsed();
    assert!(took >= Duration::from_millis(900), "closed after {took:?}");
    assert!(!answer.contains("200 OK"), "{answer}");
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed() {
    let home = Home::new(Backend::Sqlite).await;
    let server = home.serve(&LIMITS).await;
    let mut idle = connect(&server).await;
    idle.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .expect("write");
    let (answer, took) = until_closed(&mut idle, Duration::from_secs(10)).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(answer.ends_with("ok"), "{answer}");
    assert!(took >= Duration::from_millis(700), "closed after {took:?}");
}

#[tokio::test]
async fn a_body_that_never_arrives_is_answered_408_and_one_too_large_413() {
    let home = Home::new(Backend::Sqlite).await;
    let server = home.serve(&LIMITS).await;
    let mut slow = connect(&server).await;
    let head = format!(
        "POST /tenants HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"name\": \"acme\"",
        server.token
    );
    slow.write_all(head.as_bytes()).await.expect("write");
    let (answer, took) = until_closed(&mut slow, Duration::from_secs(10)).await;
    assert!(
        answer.starts_with("HTTP/1.1 408 Request Timeout"),
        "{answer}"
    );
    assert!(answer.contains(r#""code":"request_timeout""#), "{answer}");
    assert!(
        took >= Duration::from_millis(1500),
        "answered after {took:?}"
    );

    let payload = "x".repeat(600 * 1024);
    let (status, body) = server
        .post_as(
            Some(&server.token),
            "/tenants",
            Some(&format!(r#"{{"name": "{payload}"}}"#)),
        )
        .await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], "body_too_large", "{body}");
    let (status, tenants) = server.get("/tenants").await;
    assert_eq!(status, 200);
    assert_eq!(tenants["tenants"], serde_json::json!([]), "{tenants}");
}

#[tokio::test]
async fn connections_past_the_cap_are_refused_at_once_until_the_held_ones_time_out() {
    let home = Home::new(Backend::Sqlite).await;
    let server = home.serve(&LIMITS).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut stream = connect(&server).await;
        stream.write_all(b"GET /").await.expect("write");
        held.push(stream);
    }
    // The server takes the four in order; the fifth is the one past the cap.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut refused = connect(&server).await;
    let (answer, took) = until_closed(&mut refused, Duration::from_secs(5)).await;
    assert!(
        answer.starts_with("HTTP/1.1 503 Service Unavailable"),
        "{answer}"
    );
    assert!(
        answer.contains(r#""code":"too_many_connections""#),
        "{answer}"
    );
    assert!(took < Duration::from_millis(700), "refused after {took:?}");
    for stream in &mut held {
        until_closed(stream, Duration::from_secs(10)).await;
    }
    assert!(healthy(&server).await, "answered once the held ones closed");
    assert!(
        home.server_logs().contains("connection cap reached"),
        "the cap is logged"
    );
}

/// `host` with `args`, which must exit (not serve) within 20 s: its status and stderr.
fn refused(home: &Home, args: &[&str]) -> (std::process::ExitStatus, String) {
    let mut child = home
        .host()
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn host");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("host {args:?} did not refuse its flags");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    (status, stderr)
}

#[tokio::test]
async fn zero_limits_are_refused_with_a_clear_error() {
    let home = Home::new(Backend::Sqlite).await;
    for flag in ["--header-timeout", "--request-timeout"] {
        let (status, stderr) = refused(&home, &["serve", "--listen", "127.0.0.1:0", flag, "0s"]);
        assert_eq!(status.code(), Some(2), "{flag} 0s: {stderr}");
        assert!(stderr.contains("it must be longer than zero"), "{stderr}");
    }
    let (status, stderr) = refused(
        &home,
        &["serve", "--listen", "127.0.0.1:0", "--max-connections", "0"],
    );
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--max-connections"), "{stderr}");
}
