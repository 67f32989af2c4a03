//! Fuel counted however an attempt ends, on both backends: the adversarial guest turns a
//! loop that calls nothing a fixed number of times, then returns, traps, or turns it for
//! ever until its deadline or an operator's cancel stops it. Each attempt's `fuel_used`
//! holds at least the fixed work (the trapped one, within 1 % of what the successful one
//! reports), `/usage` sums them, and the timed-out attempt replays to `timeout`.

use crate::common;

use common::{Home, Server, guest};
use serde_json::Value;
use std::time::{Duration, Instant};

/// Turns of the loop every attempt makes: about 2·10⁹ fuel, far above what the engine may
/// leave uncounted at an ending (`FUEL_SAVE_INTERVAL`, 10⁷).
const TURNS: u64 = 200_000_000;

fn manifest(home: &Home) -> std::path::PathBuf {
    let adversary = guest("adversary").display().to_string();
    let job = |name: &str, then: &str, timeout: &str| {
        format!(
            r#"
            [jobs.{name}]
            component = "{adversary}"
            retries = 0
            timeout = "{timeout}"
            grants.db = {{ read = ["ledger"] }}
            payload = {{ mode = "burn", iterations = {TURNS}, then = "{then}" }}
            "#
        )
    };
    home.manifest(
        "",
        &[
            job("done", "done", "60s"),
            job("trap", "trap", "60s"),
            job("timeout", "spin", "5s"),
            job("cancel", "spin", "60s"),
        ]
        .concat(),
    )
}

async fn kick(server: &Server, job: &str) -> String {
    let (status, kicked) = server.post(&format!("/jobs/{job}/kick")).await;
    assert_eq!(status, 202, "{kicked}");
    kicked["run_id"].as_str().expect("queued").to_string()
}

async fn wait_run(server: &Server, id: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let (status, run) = server.get(&format!("/runs/{id}")).await;
        assert_eq!(status, 200, "{run}");
        if ok(&run) {
            return run;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "waited for {id}: {run}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Kicks `job`, waits for its one attempt to end, and gives its run's id, and the
/// attempt's code, fuel and duration.
async fn ended(server: &Server, job: &str) -> (String, Value, u64, i64) {
    let id = kick(server, job).await;
    let run = wait_run(server, &id, |r| {
        r["attempt_records"][0]["finished_at"].is_string()
    })
    .await;
    let (code, fuel, took) = attempt(&run);
    (id, code, fuel, took)
}

fn attempt(run: &Value) -> (Value, u64, i64) {
    let a = &run["attempt_records"][0];
    let fuel = a["fuel_used"]
        .as_u64()
        .unwrap_or_else(|| panic!("no fuel_used: {run}"));
    (a["code"].clone(), fuel, a["duration_ms"].as_i64().unwrap())
}

on_every_backend! {
    async fn fuel_is_counted_whether_the_attempt_succeeds_traps_times_out_or_is_cancelled(home) {
        let m = manifest(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;

        let (_, code, work, took) = ended(&server, "done").await;
        assert!(code.is_null(), "{code}");
        assert!(work > 1_000_000_000, "{work} fuel for {TURNS} turns");
        let within = |fuel: u64| fuel.abs_diff(work) * 100 <= work;

        // A trap no call precedes: the count is the store's, not the last call's.
        let (_, code, fuel, _) = ended(&server, "trap").await;
        assert_eq!(code, "trap");
        assert!(within(fuel), "trapped after the same work: {fuel} fuel, {work} succeeding");

        // Stopped in a loop that calls nothing, after the same work and more.
        let (timed_out_id, code, timed_out, _) = ended(&server, "timeout").await;
        assert_eq!(code, "timeout");
        assert!(timed_out * 100 >= work * 99, "timed out: {timed_out} fuel, {work} for the turns before");

        let id = kick(&server, "cancel").await;
        wait_run(&server, &id, |r| r["status"] == "running").await;
        // Past the fixed turns (with room for a loaded machine), into the endless loop.
        tokio::time::sleep(Duration::from_millis((3 * took).clamp(1000, 10_000) as u64)).await;
        let out = home.run(&["runs", "cancel", &id]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        // The cancel ends the attempt's row at once; the attempt, stopped, adds its fuel.
        let run = wait_run(&server, &id, |r| r["attempt_records"][0]["fuel_used"].is_u64()).await;
        let (code, cancelled, _) = attempt(&run);
        assert_eq!(code, "cancelled_by_operator");
        assert!(cancelled * 100 >= work * 99, "cancelled: {cancelled} fuel, {work} for the turns before");

        // What quotas count is what the attempts used.
        let (status, usage) = server.get("/usage").await;
        assert_eq!(status, 200, "{usage}");
        let tenant = usage["tenants"].as_array().unwrap().iter()
            .find(|t| t["tenant"] == "default").unwrap_or_else(|| panic!("{usage}"));
        assert_eq!(tenant["fuel_used"].as_u64(), Some(work + fuel + timed_out + cancelled), "{usage}");

        // The timed-out attempt replays to where its deadline stopped it.
        let id = timed_out_id;
        let out = home.run(&["replay", "--json", &id]);
        let shown: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(out.status.code(), Some(0), "{shown}");
        assert_eq!(shown["replay"]["code"], "timeout", "{shown}");
        assert_eq!(shown["replay"]["fuel_used"].as_u64(), Some(timed_out), "{shown}");
        assert_eq!(shown["replay"]["same"], serde_json::json!({"outcome": true, "log": true, "fuel": true}));
        let printed = String::from_utf8_lossy(&home.run(&["replay", &id]).stdout).into_owned();
        assert!(printed.contains("failed: timeout"), "{printed}");
        assert!(!printed.contains("out_of_fuel"), "{printed}");
    }
}
