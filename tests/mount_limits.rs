//! A mount's `rate` and `concurrency` end to end: `host run` processes at once (each a
//! host of its own, sharing the database) call a local service through the `linker`
//! guest, and the service counts what reached it — requests per second and requests in
//! flight; a call the limits hold past `max_wait` is refused, sends nothing, and becomes
//! the guest's defer (`send`) or `unavailable` (`call`, for guests of an earlier WIT). On
//! SQLite and Postgres.

use crate::common;

use common::Home;
use common::service::Service;
use serde_json::{Value, json};
use std::process::Output;
use std::time::{Duration, Instant};

/// Mounts `paced` (10 calls a second), `narrow` (2 calls in flight) and `tight` (one call
/// in flight, waiting at most 300 ms), and the `linker` guest as `caller`, recording
/// every attempt's host calls.
fn manifest(home: &Home, service: &Service) -> String {
    let m = home.manifest(
        "",
        &format!(
            r#"
            [links.paced]
            url = "{url}/api/"
            rate = "10/s"
            max_wait = "10s"

            [links.narrow]
            url = "{url}/api/"
            concurrency = 2
            max_wait = "10s"

            [links.tight]
            url = "{url}/api/"
            concurrency = 1
            max_wait = "300ms"

            [jobs.caller]
            component = "{{guest:linker}}"
            timeout = "20s"
            retries = 0
            record = "always"
            grants.links = ["paced", "narrow", "tight"]
        "#,
            url = service.url
        ),
    );
    m.to_str().unwrap().to_string()
}

/// The database, migrated before processes start on it at once.
async fn migrated(home: &Home) {
    home.store().await.close().await;
}

/// `host run caller` as a process of its own, for instance `instance`.
fn start(home: &Home, m: &str, instance: &str, payload: Value) -> std::process::Child {
    home.spawn(&[
        "run",
        "caller",
        "--json",
        "--manifest",
        m,
        "--instance",
        instance,
        "--payload",
        &payload.to_string(),
    ])
}

/// Waits for every process, off the runtime (the service answers on it meanwhile).
async fn finish(children: Vec<std::process::Child>) -> Vec<Output> {
    tokio::task::spawn_blocking(move || {
        children
            .into_iter()
            .map(|c| c.wait_with_output().unwrap())
            .collect()
    })
    .await
    .unwrap()
}

/// The run a `host run --json` printed.
fn printed(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "no JSON: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

on_every_backend! {
    async fn a_mounts_rate_and_concurrency_hold_across_hosts(home) {
        let service = Service::start().await;
        let m = manifest(&home, &service);
        migrated(&home).await;
        // Three hosts at once make 18 calls through `paced` and three more 9 calls of
        // 300 ms each through `narrow`.
        let mut children = Vec::new();
        for i in 0..3 {
            let paced = json!({"mount": "paced", "path": "effect", "calls": 6});
            children.push(start(&home, &m, &format!("paced-{i}"), paced));
            let narrow = json!({"mount": "narrow", "path": "hold?ms=300", "calls": 3});
            children.push(start(&home, &m, &format!("narrow-{i}"), narrow));
        }
        for out in finish(children).await {
            assert!(out.status.success(), "{}", printed(&out));
        }
        let seen = service.seen();
        let mut paced: Vec<u64> = seen.iter().filter(|s| s.path == "/api/effect").map(|s| s.at_ms).collect();
        paced.sort_unstable();
        assert_eq!(paced.len(), 18);
        // Spaced evenly at 10 a second: no second holds more than 10, give or take one
        // for the timers' jitter, and 18 calls take at least 1.7 s.
        for (i, t) in paced.iter().enumerate() {
            let within = paced[i..].iter().take_while(|u| **u < t + 1000).count();
            assert!(within <= 11, "{within} calls in the second from {t}: {paced:?}");
        }
        let span = paced[17] - paced[0];
        assert!(span >= 1_600, "18 calls at 10/s went out in {span} ms: {paced:?}");
        assert_eq!(seen.iter().filter(|s| s.path == "/api/hold").count(), 9);
        assert!(service.max_in_flight() <= 2, "{} calls in flight at once", service.max_in_flight());
    }

    async fn a_call_held_past_max_wait_is_refused_sends_nothing_and_the_guest_defers(home) {
        let service = Service::start().await;
        let m = manifest(&home, &service);
        migrated(&home).await;
        // One host holds `tight`'s only slot for 4 s.
        let holder = start(&home, &m, "holder", json!({"mount": "tight", "path": "hold?ms=4000"}));
        let begun = Instant::now();
        while service.count() == 0 {
            assert!(begun.elapsed() < Duration::from_secs(30), "the holder's call never came");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Meanwhile a guest using `send` is refused after 300 ms and defers its pass by
        // 5 s, after which the slot is free; a guest using `call` is answered `unavailable`.
        let deferring = start(&home, &m, "deferring", json!({
            "mount": "tight", "path": "hold?ms=10", "send": true, "defer_ms": 5000
        }));
        let calling = start(&home, &m, "calling", json!({"mount": "tight", "path": "hold?ms=10"}));
        let outs = finish(vec![holder, deferring, calling]).await;
        let (holder, deferring, calling) = (printed(&outs[0]), printed(&outs[1]), printed(&outs[2]));
        assert_eq!(holder["status"], "succeeded", "{holder}");
        assert_eq!(deferring["status"], "succeeded", "{deferring}");
        assert_eq!((deferring["passes"].as_i64(), deferring["defers"].as_i64()), (Some(2), Some(1)), "the refused pass deferred: {deferring}");
        assert_eq!(calling["status"], "failed", "{calling}");
        assert_eq!(calling["error"], "host unavailable", "{calling}");
        // The refused calls sent nothing: the holder's and the deferred pass's reached it.
        assert_eq!(service.count(), 2, "{:?}", service.seen());
        assert_eq!(service.max_in_flight(), 1);
        // The refusal is in the deferred attempt's journal, so its replay ends the same.
        let run_id = deferring["run_id"].as_str().unwrap();
        let journaled = home
            .scalar(&format!(
                "SELECT COUNT(*) FROM jobhost_journals WHERE run_id = '{run_id}' AND body LIKE '%rate-limited%'"
            ))
            .await;
        assert_eq!(journaled, 1, "the refused attempt's journal");
        let out = home.run(&["replay", run_id, "--attempt", "1", "--json"]);
        let replayed: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
            panic!("no JSON: {}", String::from_utf8_lossy(&out.stderr))
        });
        assert_eq!(out.status.code(), Some(0), "{replayed}");
        assert_eq!(replayed["replay"]["same"]["outcome"], true, "{replayed}");
        assert_eq!(service.count(), 2, "a replay sends nothing");
    }
}
