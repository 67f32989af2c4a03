//! Event-triggered jobs end to end: `POST /events/{name}` and `host emit` queue one run of
//! each subscriber, at least once and never twice for one key, to the tenants the event
//! is for, and whose payload filter (`where`) the event's payload matches.

use crate::common;

use common::Home;
use serde_json::Value;
use std::process::Stdio;
use std::time::Duration;

fn subscribers(home: &Home) -> std::path::PathBuf {
    home.manifest(
        "",
        r#"
        [jobs.billing]
        component = "{guest:hello}"
        tenant = "acme"
        on = ["invoice.created"]
        [jobs.ledger]
        component = "{guest:hello}"
        tenant = "globex"
        on = ["invoice.created", "invoice.paid"]
        [jobs.audit]
        component = "{guest:hello}"
        on = ["invoice.created"]
        [jobs.fan]
        component = "{guest:hello}"
        per_tenant = true
        on = ["invoice.created"]
        [jobs.unrelated]
        component = "{guest:hello}"
        on = ["user.deleted"]
    "#,
    )
}

/// (job, tenant) of each run an emit answered with, sorted, and how many were duplicates.
fn reached(answer: &Value) -> (Vec<(String, String)>, usize) {
    let runs = answer["runs"].as_array().expect("runs");
    let mut pairs: Vec<(String, String)> = runs
        .iter()
        .map(|r| {
            (
                r["job"].as_str().unwrap().to_string(),
                r["tenant"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    pairs.sort();
    let duplicates = runs.iter().filter(|r| r["duplicate"] == true).count();
    (pairs, duplicates)
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(j, t)| (j.to_string(), t.to_string()))
        .collect()
}

on_every_backend! {
    async fn an_event_queues_each_subscriber_once_per_key(home) {
        let m = subscribers(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let op = Some(server.token.as_str());
        let body = r#"{"key":"inv-1","payload":{"name":"inv-1"}}"#;
        let (status, first) = server.post_as(op, "/events/invoice.created", Some(body)).await;
        assert_eq!(status, 202, "{first}");
        let everyone = pairs(&[("audit", "default"), ("billing", "acme"), ("fan", "acme"), ("fan", "globex"), ("ledger", "globex")]);
        assert_eq!(reached(&first), (everyone.clone(), 0), "{first}");
        // The same key again, as a retrying client would: the same runs, nothing new.
        let (_, again) = server.post_as(op, "/events/invoice.created", Some(body)).await;
        assert_eq!(reached(&again), (everyone, 5));
        assert_eq!(first["runs"].as_array().unwrap().iter().map(|r| &r["run_id"]).collect::<Vec<_>>(),
                   again["runs"].as_array().unwrap().iter().map(|r| &r["run_id"]).collect::<Vec<_>>());
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE origin = 'event'").await, 5);
        // Each run ran with the event's payload, as its tenant.
        let runs = server.wait_runs("fan", Duration::from_secs(20), |runs| {
            runs.len() == 2 && runs.iter().all(|r| r["status"] == "succeeded")
        }).await;
        let (_, detail) = server.get(&format!("/runs/{}", runs[0]["run_id"].as_str().unwrap())).await;
        let log = detail["attempt_records"][0]["log"].as_str().unwrap();
        assert!(log.contains("hello, inv-1") && log.contains(&format!("tenant {}", detail["tenant"].as_str().unwrap())), "{log}");
        // Another key is another event; another event name reaches its own subscribers.
        let (_, other) = server.post_as(op, "/events/invoice.created", Some(r#"{"key":"inv-2"}"#)).await;
        assert_eq!(reached(&other).1, 0);
        let (_, paid) = server.post_as(op, "/events/invoice.paid", Some(r#"{"key":"inv-1"}"#)).await;
        assert_eq!(reached(&paid), (pairs(&[("ledger", "globex")]), 0));
        let (_, nobody) = server.post_as(op, "/events/nobody.cares", Some(r#"{"key":"k"}"#)).await;
        assert_eq!(reached(&nobody), (vec![], 0));
        server.wait_runs("billing", Duration::from_secs(20), |runs| runs.len() == 2 && runs.iter().all(|r| r["status"] == "succeeded")).await;
    }

    async fn a_tenant_emits_to_its_own_subscribers_only(home) {
        let m = subscribers(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let acme = home.create_token(Some("acme"));
        let acme = Some(acme.as_str());
        let (status, emitted) = server.post_as(acme, "/events/invoice.created", Some(r#"{"key":"inv-1"}"#)).await;
        assert_eq!(status, 202, "{emitted}");
        assert_eq!(reached(&emitted), (pairs(&[("billing", "acme"), ("fan", "acme")]), 0));
        let (status, _) = server.post_as(acme, "/events/invoice.created", Some(r#"{"key":"inv-2","tenant":"globex"}"#)).await;
        assert_eq!(status, 400, "a tenant cannot emit another tenant's event");
        // The same key from the operator, for everyone, is a different event.
        let (_, broadcast) = server.post("/events/invoice.created").await;
        assert_eq!(broadcast["error"]["code"], "invalid_parameter", "a key is required");
        let (_, broadcast) = server.post_as(Some(&server.token), "/events/invoice.created", Some(r#"{"key":"inv-1"}"#)).await;
        assert_eq!(reached(&broadcast).1, 0, "{broadcast}");
        // The operator may emit on a tenant's behalf; a disabled tenant's jobs are not reached.
        let (_, for_globex) = server.post_as(Some(&server.token), "/events/invoice.created", Some(r#"{"key":"g","tenant":"globex"}"#)).await;
        assert_eq!(reached(&for_globex), (pairs(&[("fan", "globex"), ("ledger", "globex")]), 0));
        let out = home.run(&["tenants", "disable", "globex"]);
        assert!(out.status.success());
        let (_, disabled) = server.post_as(Some(&server.token), "/events/invoice.created", Some(r#"{"key":"inv-9"}"#)).await;
        assert_eq!(reached(&disabled), (pairs(&[("audit", "default"), ("billing", "acme"), ("fan", "acme")]), 0));
        assert_eq!(server.post_as(None, "/events/invoice.created", Some(r#"{"key":"x"}"#)).await.0, 401);
    }

    async fn bad_events_are_refused_and_queue_nothing(home) {
        let m = subscribers(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let op = Some(server.token.as_str());
        for (path, body) in [
            ("/events/Invoice.Created", r#"{"key":"k"}"#),
            ("/events/invoice.created", r#"{"key":""}"#),
            ("/events/invoice.created", "{\"key\":\"a\\u001b[2Jb\"}"),
            ("/events/invoice.created", r#"{"key":"k","payload":{"n":[1,{"x":1e999}]}}"#),
            ("/events/invoice.created", r#"{"key":"k","more":1}"#),
            ("/events/invoice.created", "[]"),
        ] {
            let (status, refused) = server.post_as(op, path, Some(body)).await;
            assert_eq!((status, &refused["error"]["code"]), (400, &"invalid_parameter".into()), "{path} {body}: {refused}");
        }
        let (_, refused) = server.post_as(op, "/events/invoice.created", Some(r#"{"key":"k","payload":{"n":[1,{"x":1e999}]}}"#)).await;
        assert!(refused["error"]["message"].as_str().unwrap().contains("$.payload.n[1].x"), "{refused}");
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs").await, 0);
        let out = home.run(&["emit", "invoice.created", "--key", "k", "--payload", "{\"a\":NaN}"]);
        assert_eq!(out.status.code(), Some(2));
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs").await, 0);
        let bad = home.manifest("", "[jobs.x]\ncomponent = \"{guest:hello}\"\non = [\"Bad Event\"]\n");
        let out = home.run(&["check", "--manifest", bad.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("invalid event name"));
    }

    async fn only_events_whose_payload_matches_a_filter_queue_its_run(home) {
        let m = home.manifest("", r#"
            [jobs.gold]
            component = "{guest:hello}"
            on = [{ event = "order.paid", where = { "customer.tier" = "gold", total = 10 } }, "order.refunded"]
            [jobs.nested]
            component = "{guest:hello}"
            on = [{ event = "order.paid", where = { customer.tier = "gold", "items.0.sku" = "x-1" } }]
            [jobs.every]
            component = "{guest:hello}"
            on = ["order.paid"]
        "#);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let op = Some(server.token.as_str());
        let to = &server;
        let emit = |key: &'static str, payload: &'static str| {
            let body = format!(r#"{{"key":"{key}","payload":{payload}}}"#);
            async move {
                let (status, answer) = to.post_as(op, "/events/order.paid", Some(&body)).await;
                assert_eq!(status, 202, "{answer}");
                let mut jobs: Vec<String> = answer["runs"].as_array().unwrap().iter()
                    .map(|r| r["job"].as_str().unwrap().to_string()).collect();
                jobs.sort();
                jobs
            }
        };
        assert_eq!(emit("o1", r#"{"customer":{"tier":"gold"},"total":10.0,"items":[{"sku":"x-1"}]}"#).await, ["every", "gold", "nested"]);
        assert_eq!(emit("o2", r#"{"customer":{"tier":"silver"},"total":10,"items":[{"sku":"x-1"}]}"#).await, ["every"]);
        assert_eq!(emit("o3", r#"{"customer":{"tier":"gold"},"total":"10","items":[]}"#).await, ["every"]);
        assert_eq!(emit("o4", r#"{"customer":{"tier":"gold"},"total":10}"#).await, ["every", "gold"]);
        // Without a payload, no filter matches.
        let (_, bare) = server.post_as(op, "/events/order.paid", Some(r#"{"key":"o5"}"#)).await;
        assert_eq!(reached(&bare).0, pairs(&[("every", "default")]));
        // An event the job takes unfiltered reaches it whatever its payload.
        let (_, refunded) = server.post_as(op, "/events/order.refunded", Some(r#"{"key":"o6","payload":{"total":1}}"#)).await;
        assert_eq!(reached(&refunded).0, pairs(&[("gold", "default")]));
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'gold'").await, 3);
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'nested'").await, 1);

        // A filter that could never be read is the manifest's error, said at load.
        for (on, says) in [
            (r#"[{ event = "e", where = { "a..b" = 1 } }]"#, "invalid path \"a..b\""),
            (r#"[{ event = "e", where = { tags = ["a"] } }]"#, "the value at \"tags\" in `where` is not a string, number or boolean"),
            (r#"[{ event = "e", where = {} }]"#, "`where` has no conditions"),
            (r#"[{ event = "e", when = { a = 1 } }]"#, "each `on` entry is an event name or"),
            (r#"["e", { event = "e", where = { a = 1 } }]"#, "the event \"e\" is given twice"),
        ] {
            let bad = home.manifest("", &format!("[jobs.x]\ncomponent = \"{{guest:hello}}\"\non = {on}\n"));
            let out = home.run(&["check", "--manifest", bad.to_str().unwrap()]);
            assert_eq!(out.status.code(), Some(2), "{on}");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(stderr.contains(says), "{on}: {stderr}");
        }
    }

    async fn twenty_concurrent_emits_of_one_key_queue_each_run_once(home) {
        let m = subscribers(&home);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let children: Vec<_> = (0..20)
            .map(|_| {
                home.host()
                    .args(["emit", "invoice.created", "--key", "race", "--json"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("spawn host emit")
            })
            .collect();
        let mut queued = 0;
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
            let (reached, duplicates) = reached(&answer);
            assert_eq!(reached.len(), 5);
            queued += 5 - duplicates;
        }
        assert_eq!(queued, 5, "each run was queued by exactly one emit");
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE origin = 'event'").await, 5);
        server.wait_runs("fan", Duration::from_secs(30), |runs| runs.len() == 2 && runs.iter().all(|r| r["status"] == "succeeded")).await;
    }
}
