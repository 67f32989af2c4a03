//! The operator's web page, rendered by a real headless browser against a real host.

use crate::common;

use common::{Backend, Home};
use std::process::Command;
use std::time::Duration;

fn chromium() -> String {
    let candidates = ["chromium", "chromium-browser", "google-chrome"];
    std::env::var("JOBHOST_TEST_CHROMIUM").ok().into_iter()
        .chain(candidates.iter().map(|c| c.to_string()))
        .find(|c| Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success()))
        .expect("the page test needs a headless browser: install chromium (apt-get install chromium) or set JOBHOST_TEST_CHROMIUM")
}

/// The page's DOM after its scripts ran.
fn render(url: &str, profile: &std::path::Path) -> String {
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--virtual-time-budget=5000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 DOM")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_jobs_and_recent_runs_and_what_is_failing() {
    let home = Home::new(Backend::Sqlite).await;
    let m = home.manifest(
        "",
        r#"
        [jobs.greeter]
        component = "{guest:hello}"
        [jobs.broken]
        component = "{guest:flaky}"
        payload = { fail_times = 9 }
        [jobs.acme-report]
        component = "{guest:hello}"
        tenant = "acme"
    "#,
    );
    let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
    server.post("/jobs/greeter/kick").await;
    server.post("/jobs/broken/kick").await;
    server
        .wait_runs("broken", Duration::from_secs(10), |runs| {
            runs.iter().any(|r| r["status"] == "failed")
        })
        .await;
    server
        .wait_runs("greeter", Duration::from_secs(10), |runs| {
            runs.iter().any(|r| r["status"] == "succeeded")
        })
        .await;

    // The token rides in the fragment, which the browser never sends to the server.
    let dom = render(
        &format!("{}/#token={}", server.url, server.token),
        &home.path().join("chromium"),
    );
    assert!(
        dom.contains(r#"<tr class="failing" data-job="broken">"#),
        "the failing job stands out:\n{dom}"
    );
    assert!(dom.contains(r#"<tr class="" data-job="greeter">"#), "{dom}");
    assert!(
        dom.contains(r#"data-status="failed""#) && dom.contains(r#"data-status="succeeded""#),
        "{dom}"
    );
    assert!(
        dom.contains("handler_failed"),
        "the failure code is shown:\n{dom}"
    );
    assert!(dom.contains("3 jobs · 1 failing · 2 recent runs"), "{dom}");
    assert!(
        dom.contains(r#"<span id="error"></span>"#),
        "no error shown:\n{dom}"
    );

    // A tenant's token shows that tenant's jobs only.
    let acme = home.create_token(Some("acme"));
    let dom = render(
        &format!("{}/#token={acme}", server.url),
        &home.path().join("chromium-acme"),
    );
    assert!(dom.contains(r#"data-job="acme-report""#), "{dom}");
    assert!(
        !dom.contains(r#"data-job="greeter""#) && !dom.contains("handler_failed"),
        "{dom}"
    );
    assert!(dom.contains("1 jobs · 0 failing · 0 recent runs"), "{dom}");

    // Without a token the page asks for one and shows nothing.
    let dom = render(
        &format!("{}/", server.url),
        &home.path().join("chromium-none"),
    );
    assert!(dom.contains(r#"<form id="signin">"#), "{dom}");
    assert!(!dom.contains(r#"data-job="#), "{dom}");
}
