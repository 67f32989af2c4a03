//! Python and JavaScript jobs under the same sandbox, grants and fence as Rust ones: the
//! examples in `examples/python` and `examples/js`, built from source by `host build`
//! (componentize-py, componentize-js) and run by the real binary on SQLite and Postgres;
//! their failed attempts replay from their journals as a Rust guest's do.

use crate::common::service::Service;
use crate::common::{self, Backend, Home, migrations, polyglot, polyglot_build, shared_cache};
use serde_json::{Value, json};
use std::time::Duration;

const LANGS: [&str; 2] = ["python", "js"];

/// The job name an example runs as: `ledger-py`, `ledger-js`.
fn job(lang: &str, example: &str) -> String {
    let suffix = if lang == "python" { "py" } else { "js" };
    format!("{example}-{suffix}")
}

/// Runs `example` of `lang` once with `payload` and `args`: the exit code and the run.
fn run(home: &Home, lang: &str, example: &str, payload: Value, args: &[&str]) -> (i32, Value) {
    let component = polyglot(&format!("{lang}/{example}")).display().to_string();
    let name = job(lang, example);
    let payload = payload.to_string();
    let mut all = vec![
        "--job",
        &component,
        "--name",
        &name,
        "--payload",
        &payload,
        "--grant",
        "db.write=ledger",
    ];
    all.extend_from_slice(args);
    home.run_json(&all)
}

/// The ledger rows run `id` committed.
async fn rows_of(home: &Home, id: &str) -> i64 {
    home.scalar(&format!(
        "SELECT COUNT(*) FROM ledger WHERE run_id = '{id}'"
    ))
    .await
}

/// The last attempt's log of run `id`.
fn log_of(home: &Home, id: &str) -> String {
    let out = home.run(&["runs", "show", id, "--json"]);
    let shown: Value = serde_json::from_slice(&out.stdout).expect("runs show --json");
    shown["attempt_records"]
        .as_array()
        .and_then(|a| a.last())
        .and_then(|a| a["log"].as_str())
        .unwrap_or_else(|| panic!("no attempt log for run {id}"))
        .to_string()
}

/// Asserts the failed attempt of run `id` replays from its journal (kept, as a failure's
/// is by default) to the same outcome, log and fuel: the flight recorder is the host's,
/// whatever language the component was written in.
fn replays_the_same(home: &Home, id: &str, what: &str) {
    let out = home.run(&["replay", id, "--json"]);
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "{what}: replay printed no JSON: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(out.status.code(), Some(0), "{what}: {shown}");
    assert_eq!(
        shown["replay"]["same"],
        json!({"outcome": true, "log": true, "fuel": true}),
        "{what}: {shown}"
    );
}

on_every_backend! {
    async fn python_and_js_ledgers_commit_and_are_fenced(home) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        for lang in LANGS {
            let (code, done) = run(&home, lang, "ledger", json!({"rows": 3}), &[]);
            assert_eq!(code, 0, "{lang}: {done}");
            let id = done["run_id"].as_str().unwrap();
            assert_eq!(rows_of(&home, id).await, 3, "{lang}");
            assert!(log_of(&home, id).contains("committed 3 rows"), "{lang}");

            // Past its deadline, its writes never commit.
            let (code, late) = run(&home, lang, "ledger", json!({"rows": 5, "wait_ms": 3000}), &["--timeout", "1s"]);
            assert_eq!((code, late["code"].as_str()), (1, Some("timeout")), "{lang}: {late}");
            let id = late["run_id"].as_str().unwrap();
            assert_eq!(rows_of(&home, id).await, 0, "{lang}");
        }
    }

    async fn a_superseded_python_or_js_attempt_commits_nothing(home) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        for lang in LANGS {
            let component = polyglot(&format!("{lang}/ledger")).display().to_string();
            let name = job(lang, "ledger");
            // The job waits before its transaction opens; meanwhile its lease moves on.
            let child = home.spawn(&[
                "run", "--json", "--job", &component, "--name", &name, "--payload",
                r#"{"rows":5,"wait_ms":4000,"wait_at":"begin"}"#, "--grant", "db.write=ledger",
                "--timeout", "30s",
            ]);
            // Its first load may compile it (tens of seconds on a debug build).
            home.wait_for(
                &format!("SELECT COUNT(*) FROM jobhost_leases WHERE job = '{name}' AND holder IS NOT NULL"),
                Duration::from_secs(120),
            ).await;
            assert_eq!(
                home.exec(&format!("UPDATE jobhost_leases SET generation = generation + 1 WHERE job = '{name}'")).await,
                1
            );
            let out = tokio::task::spawn_blocking(move || child.wait_with_output()).await.unwrap().unwrap();
            let superseded: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(superseded["code"], "lease_lost", "{lang}: {superseded}");
            let id = superseded["run_id"].as_str().unwrap();
            assert_eq!(rows_of(&home, id).await, 0, "{lang}");
        }
    }

    async fn python_and_js_compute_loops_finish_and_run_out_of_a_fuel_cap(home) {
        // The sandbox benchmark's compute guests: a bounded loop succeeds, the same loop
        // under a fuel cap below its work fails `out_of_fuel` (an interpreter's dispatch
        // loop is metered like compiled code), and a payload that is not a count ends the
        // run unrecoverable, with the job's own words.
        for lang in LANGS {
            let (code, done) = run(&home, lang, "spin", json!({"iterations": 1000}), &[]);
            assert_eq!((code, done["status"].as_str()), (0, Some("succeeded")), "{lang}: {done}");
            let (code, capped) = run(&home, lang, "spin", json!({"iterations": 1_000_000}), &["--fuel", "1000000"]);
            assert_eq!((code, capped["code"].as_str()), (1, Some("out_of_fuel")), "{lang}: {capped}");
            let (code, refused) = run(&home, lang, "spin", json!({"iterations": -1}), &[]);
            assert_eq!((code, refused["code"].as_str()), (1, Some("unrecoverable")), "{lang}: {refused}");
            assert_eq!(
                refused["error"].as_str(),
                Some(if lang == "python" {
                    "the payload is {\"iterations\": n}, not {'iterations': -1}"
                } else {
                    "the payload is {\"iterations\": n}, not {\"iterations\":-1}"
                }),
                "{lang}: {refused}"
            );
        }
    }

    async fn python_and_js_failures_end_with_the_codes_rust_ones_do(home) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        for lang in LANGS {
            // An uncaught exception fails the attempt, with the language's own traceback.
            let (code, raised) = run(&home, lang, "ledger", json!({"mode": "raise"}), &[]);
            assert_eq!((code, raised["code"].as_str()), (1, Some("handler_failed")), "{lang}: {raised}");
            // Its error is the exception's `Name: message` and where the job raised it.
            let place = if lang == "python" {
                "ValueError: asked to raise (at app.py:64 in misbehave)"
            } else {
                "Error: asked to raise (at job.js:79:"
            };
            assert!(raised["error"].as_str().unwrap().starts_with(place), "{lang}: {raised}");
            let log = log_of(&home, raised["run_id"].as_str().unwrap());
            let traceback = if lang == "python" { "Traceback (most recent call last)" } else { "job.js" };
            assert!(log.contains(traceback) && log.contains("asked to raise"), "{lang}: {log}");
            replays_the_same(&home, raised["run_id"].as_str().unwrap(), lang);

            // Unrecoverable: never retried.
            let (code, gave_up) = run(&home, lang, "ledger", json!({"mode": "unrecoverable"}), &["--retries", "2", "--backoff", "10ms"]);
            assert_eq!((code, gave_up["code"].as_str()), (1, Some("unrecoverable")), "{lang}: {gave_up}");
            assert_eq!(gave_up["attempts"], 1, "{lang}");

            // The memory cap, a busy loop, and a table not granted: the same codes as a
            // Rust guest's.
            let cases: [(&str, &[&str], &str); 3] = [
                ("hog", &["--memory", "48MiB"], "memory_limit"),
                ("spin", &["--timeout", "3s"], "timeout"),
                ("secrets", &["--retries", "2", "--backoff", "10ms"], "query_refused"),
            ];
            for (mode, args, expected) in cases {
                let (code, failed) = run(&home, lang, "ledger", json!({"mode": mode}), args);
                assert_eq!((code, failed["code"].as_str()), (1, Some(expected)), "{lang} {mode}: {failed}");
                if mode == "secrets" {
                    // Refused alike on every attempt: one, naming the tables granted.
                    assert_eq!(failed["attempts"], 1, "{lang}: {failed}");
                    let error = failed["error"].as_str().unwrap();
                    assert!(error.contains(r#"(tables granted: "ledger" (write))"#), "{lang}: {error}");
                }
                replays_the_same(&home, failed["run_id"].as_str().unwrap(), &format!("{lang} {mode}"));
            }
        }
        assert_eq!(home.scalar("SELECT COUNT(*) FROM ledger").await, 0);
    }

    // `host build` compiles the component into the compile cache it names, so the first
    // `host run` loads it from there rather than compile (tens of seconds for Python).
    async fn a_built_python_component_runs_first_time_from_the_compile_cache(home) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        let built = polyglot_build("python/ledger");
        let cache = &built["cache"];
        assert_eq!(cache["dir"].as_str(), shared_cache().to_str(), "{built}");
        let digest = cache["digest"].as_str().unwrap_or_else(|| panic!("{built}"));
        let entries = || -> Vec<String> {
            std::fs::read_dir(shared_cache()).unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|name| name.starts_with(digest) && name.ends_with(".cwasm"))
                .collect()
        };
        assert_eq!(entries().len(), 1, "the build left its compiled component in the cache");

        let component = built["path"].as_str().unwrap();
        let out = home.host()
            .env("JOBHOST_LOG", "jobhost=info")
            .args(["run", "--json", "--job", component, "--name", "ledger-py",
                   "--payload", r#"{"rows": 2}"#, "--grant", "db.write=ledger"])
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&out.stderr);
        let done: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{log}"));
        assert_eq!(done["status"], "succeeded", "{done}\n{log}");
        assert_eq!(rows_of(&home, done["run_id"].as_str().unwrap()).await, 2);
        assert!(
            log.contains(&format!("component loaded digest={digest} from_cache=true")),
            "the run loads the build's compile: {log}"
        );
        assert!(!log.contains("from_cache=false"), "the run compiled again: {log}");
    }

    // `host serve` takes on a job whose component it has not compiled without waiting
    // for the compile: a run kicked at once waits `compiling` (unclaimed, so no attempt
    // and no deadline begin), then runs as soon as the compile ends.
    async fn a_python_job_kicked_as_its_host_starts_waits_compiling_then_runs(home) {
        let component = polyglot("python/ledger");
        // A compile cache of its own, empty: this host has never compiled the component.
        let cache = tempfile::tempdir().unwrap();
        let m = home.manifest("", &format!(r#"
            [jobs.ledger-py]
            component = "{}"
            payload = {{ rows = 2 }}
            timeout = "30s"
            grants.db = {{ write = ["ledger"] }}
        "#, component.display()));
        let server = home
            .serve(&["--manifest", m.to_str().unwrap(), "--cache", cache.path().to_str().unwrap()])
            .await;
        let (code, kicked) = server.post("/jobs/ledger-py/kick").await;
        assert_eq!((code, kicked["result"].as_str()), (202, Some("queued")), "{kicked}");
        let id = kicked["run_id"].as_str().unwrap_or_else(|| panic!("{kicked}")).to_string();

        let (_, waiting) = server.get(&format!("/runs/{id}")).await;
        assert_eq!(waiting["status"], "queued", "{waiting}");
        assert_eq!(waiting["held_by"], "compiling", "{waiting}");
        let shown = home.run(&["runs", "show", &id]);
        let said = String::from_utf8_lossy(&shown.stdout);
        assert!(said.contains("held back by: compiling"), "{said}");

        // A debug build on a busy machine takes a minute or more to compile CPython.
        let runs = server
            .wait_runs("ledger-py", Duration::from_secs(600), |runs| {
                runs.iter().any(|r| r["status"] == "succeeded")
            })
            .await;
        assert_eq!(runs.len(), 1, "{runs:#?}");
        let (_, done) = server.get(&format!("/runs/{id}")).await;
        assert_eq!(done["attempts"], 1, "one attempt, none spent waiting: {done}");
        assert_eq!(done["held_by"], Value::Null, "{done}");
        assert_eq!(rows_of(&home, &id).await, 2);
        assert!(home.server_logs().contains("compiled; the job's runs may start"));
    }

    // CPython draws randomness some 2 500 times as it starts; each draw was a journaled
    // host call (a 290 KB journal for two rows). Each generator's seed is journaled once
    // instead, and the replay, seeded from it, still draws the same bytes.
    async fn a_python_attempts_journal_keeps_one_seed_not_every_random_draw(home) {
        let component = polyglot("python/ledger");
        let m = home.manifest("", &format!(r#"
            [jobs.ledger-py]
            component = "{}"
            payload = {{ rows = 2 }}
            record = "always"
            grants.db = {{ write = ["ledger"] }}
        "#, component.display()));
        let (code, done) = home.run_json(&["ledger-py", "--manifest", m.to_str().unwrap()]);
        assert_eq!(code, 0, "{done}");
        let id = done["run_id"].as_str().unwrap();
        assert_eq!(rows_of(&home, id).await, 2);

        let out = home.run(&["runs", "export", id]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.stdout.len() <= 8 << 10, "a trivial Python job's journal is {} bytes", out.stdout.len());
        let journal: Value = serde_json::from_slice(&out.stdout).unwrap();
        let calls: Vec<&str> = journal["calls"].as_array().unwrap().iter()
            .map(|c| c["call"].as_str().unwrap())
            .collect();
        assert!(!calls.iter().any(|c| c.ends_with(".bytes")), "no random draw is a call: {calls:?}");
        let seeds = calls.iter().filter(|c| c.ends_with(".seed")).count();
        assert!((1..=2).contains(&seeds), "one seed per generator drawn from: {calls:?}");
        replays_the_same(&home, id, "python ledger");
    }
}

/// The adversarial cases hold for Python and JavaScript components too: a huge log is
/// stored within its cap, handles hoarded end the attempt at the resource bound, and the
/// host goes on serving a Rust guest afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_python_and_js_guests_are_bounded_like_any_other() {
    let home = Home::new(Backend::Sqlite).await;
    home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
    for lang in LANGS {
        // 20 000 lines of 1 KiB take JavaScript's interpreter seconds of CPU inside the
        // guest (measured: 4 s on a quiet core): the attempt's bound is a liveness bound
        // for a loaded machine, not the job's 30 s.
        let (code, logged) = run(
            &home,
            lang,
            "ledger",
            json!({"mode": "huge-log"}),
            &["--timeout", "120s"],
        );
        assert_eq!(code, 0, "{lang}: {logged}");
        let log = log_of(&home, logged["run_id"].as_str().unwrap());
        assert!(
            log.len() <= 1 << 20 && log.len() > 1000,
            "{lang}: {} bytes",
            log.len()
        );
        let (code, hoarded) = run(&home, lang, "ledger", json!({"mode": "handles"}), &[]);
        assert_eq!(code, 1, "{lang}: {hoarded}");
        assert!(
            matches!(
                hoarded["code"].as_str(),
                Some("resource_limit" | "handler_failed")
            ),
            "{lang}: {hoarded}"
        );
    }
    let (code, after) = home.run_json(&[
        "--job",
        &common::guest("ledger").display().to_string(),
        "--payload",
        r#"{"rows":1}"#,
        "--grant",
        "db.write=ledger",
    ]);
    assert_eq!(code, 0, "{after}");
}

/// What componentize-js's runtime would reach past the sandbox with, trapping the attempt,
/// throws instead, naming what is refused: the example catches each refusal (`fetch`,
/// `import()` of `fs`, `node:fs` and `node:net`, `process`, a WebSocket), logs it and
/// succeeds; an uncaught one fails the attempt `handler_failed`, as an uncaught refusal of a
/// file or a socket does in Python; and a static import of a Node.js module fails the build.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_platform_refusals_are_errors_the_job_can_catch() {
    let home = Home::new(Backend::Sqlite).await;
    home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
    let (code, caught) = run(&home, "js", "ledger", json!({"mode": "platform"}), &[]);
    assert_eq!(code, 0, "{caught}");
    assert_eq!(caught["status"], "succeeded", "{caught}");
    let files = "it has no files of its own; use `files`";
    let sockets = "it has no sockets; call out through `links`";
    assert_eq!(
        log_of(&home, caught["run_id"].as_str().unwrap())
            .lines()
            .collect::<Vec<_>>(),
        [
            format!(
                "[info] refused fetch: TypeError: jobhost: `fetch` is not available in a job: {sockets}"
            ),
            format!(
                "[info] refused fs: Error: jobhost: `node:fs` is not available in a job: {files}"
            ),
            format!(
                "[info] refused node:fs: Error: jobhost: `node:fs` is not available in a job: {files}"
            ),
            format!(
                "[info] refused node:net: Error: jobhost: `node:net` is not available in a job: {sockets}"
            ),
            "[info] refused process: ReferenceError: process is not defined".to_string(),
            "[info] refused WebSocket: ReferenceError: WebSocket is not defined".to_string(),
        ]
    );

    let (code, uncaught) = run(&home, "js", "ledger", json!({"mode": "fetch"}), &[]);
    assert_eq!(code, 1, "{uncaught}");
    assert_eq!(uncaught["code"], "handler_failed", "{uncaught}");
    let error = uncaught["error"].as_str().unwrap();
    assert!(
        error.starts_with(&format!(
            "TypeError: jobhost: `fetch` is not available in a job: {sockets}"
        )),
        "{uncaught}"
    );
    replays_the_same(&home, uncaught["run_id"].as_str().unwrap(), "js fetch");

    let place = tempfile::tempdir().unwrap();
    let project = place.path().join("node");
    let created = home
        .host()
        .args(["new", "node", "--lang", "js", "--dir"])
        .arg(&project)
        .output()
        .unwrap();
    assert!(created.status.success(), "{created:?}");
    std::fs::write(
        project.join("job.js"),
        "import { readFileSync } from 'node:fs';\nexport const run = () => readFileSync('x');\n",
    )
    .unwrap();
    let built = home
        .host()
        .current_dir(&project)
        .arg("build")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&built.stderr);
    assert!(!built.status.success(), "{said}");
    assert!(
        said.contains("job.js imports `node:fs`, which a job does not have"),
        "{said}"
    );
    let components = std::fs::read_dir(project.join("build"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "wasm")
        })
        .count();
    assert_eq!(components, 0, "nothing is built: {said}");
}

/// `links`: each language's example calls a real HTTP server through its mount, with the
/// host's idempotency key; steps: each language's example runs pass after pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_js_jobs_call_links_and_run_in_passes() {
    let home = Home::new(Backend::Sqlite).await;
    home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(String, Value, String)>::new()));
    let recorded = seen.clone();
    let app = axum::Router::new().route(
        "/echo",
        axum::routing::post(
            move |headers: axum::http::HeaderMap, body: axum::Json<Value>| {
                let recorded = recorded.clone();
                async move {
                    let key = headers
                        .get("idempotency-key")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string();
                    recorded
                        .lock()
                        .unwrap()
                        .push(("POST /echo".into(), body.0.clone(), key));
                    axum::Json(json!({ "echoed": body.0 }))
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    for lang in LANGS {
        let component = polyglot(&format!("{lang}/links"));
        let name = job(lang, "links");
        let manifest = home.path().join(format!("{name}.toml"));
        std::fs::write(
            &manifest,
            format!(
                "[links.api]\nurl = \"{url}\"\n\n[jobs.{name}]\ncomponent = \"{}\"\n\
                 grants.db = {{ write = [\"ledger\"] }}\ngrants.links = [\"api\"]\n",
                component.display()
            ),
        )
        .unwrap();
        let run_manifest = |payload: &str| -> Value {
            let out = home.run(&[
                "run",
                &name,
                "--manifest",
                manifest.to_str().unwrap(),
                "--json",
                "--payload",
                payload,
            ]);
            serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|_| panic!("{lang}: {}", String::from_utf8_lossy(&out.stderr)))
        };
        let done = run_manifest(r#"{"item":"tea"}"#);
        assert_eq!(done["status"], "succeeded", "{lang}: {done}");
        let id = done["run_id"].as_str().unwrap().to_string();
        let calls = seen.lock().unwrap().clone();
        let call = calls
            .iter()
            .find(|(_, body, _)| body["run"] == id.as_str())
            .unwrap_or_else(|| panic!("{lang}: no call in {calls:?}"));
        assert_eq!(call.1["item"], "tea", "{lang}");
        assert!(!call.2.is_empty(), "{lang}: the host's idempotency key");
        assert_eq!(rows_of(&home, &id).await, 1, "{lang}");
        // A mount it was not granted is refused by the host, as a Rust guest's is; and a
        // capability the job was not built with is unrecoverable.
        let refused = run_manifest(r#"{"item":"tea","mount":"nowhere"}"#);
        assert_eq!(refused["code"], "capability_refused", "{lang}: {refused}");
        let (code, unbuilt) = run(&home, lang, "ledger", json!({"mode": "link"}), &[]);
        assert_eq!(
            (code, unbuilt["code"].as_str()),
            (1, Some("unrecoverable")),
            "{lang}: {unbuilt}"
        );

        let component = polyglot(&format!("{lang}/steps")).display().to_string();
        let name = job(lang, "steps");
        let (code, paged) = home.run_json(&[
            "--job",
            &component,
            "--name",
            &name,
            "--payload",
            r#"{"pages":3}"#,
            "--grant",
            "db.write=ledger",
            "--grant",
            "steps=on",
        ]);
        assert_eq!(code, 0, "{lang}: {paged}");
        assert_eq!(paged["passes"], 3, "{lang}: {paged}");
        assert_eq!(paged["counters"]["pages"], 3, "{lang}: {paged}");
        let id = paged["run_id"].as_str().unwrap();
        assert_eq!(rows_of(&home, id).await, 3, "{lang}");
    }
}

/// `iam`: each language's `invite` example issues a membership link through an IAM mount
/// with its own per-attempt credential, revokes one when asked, and fails with the Rust
/// SDK's `iam: unauthorized` when the IAM refuses its tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_js_jobs_issue_and_revoke_membership_links_through_iam() {
    let home = Home::new(Backend::Sqlite).await;
    let service = Service::start().await;
    let mut jobs = String::new();
    for lang in LANGS {
        let component = polyglot(&format!("{lang}/invite"));
        for (name, tenant, role, revoke) in [
            ("invite", "acme", "viewer", false),
            ("revoker", "acme", "editor", true),
            ("evil", "evil", "owner", false),
        ] {
            jobs.push_str(&format!(
                "[jobs.{job}]\ncomponent = \"{component}\"\ntenant = \"{tenant}\"\n\
                 actions = [\"membership.issue\", \"membership.revoke\"]\n\
                 payload = {{ mount = \"iam\", dimension = \"workspace\", container = \"acme-ws\", \
                 role = \"{role}\", revoke = {revoke} }}\ngrants.links = [\"iam\"]\n\n",
                job = job(lang, name),
                component = component.display(),
            ));
        }
    }
    let manifest = home.manifest(
        "",
        &format!(
            "[links.iam]\nurl = \"{url}/iam/\"\nmethods = [\"POST\", \"DELETE\"]\n\
             credential = {{ header = \"Authorization\", prefix = \"Bearer \", token = \"attempt\", \
             audience = \"iam\" }}\n\n{jobs}",
            url = service.url
        ),
    );
    let server = home
        .serve(&["--manifest", manifest.to_str().unwrap()])
        .await;
    service.trust(&format!("{}/.well-known/jwks.json", server.url));
    service.refuse_tenant("evil");
    for lang in LANGS {
        let ended = |name: &str| {
            let (server, name) = (&server, job(lang, name));
            async move {
                assert_eq!(
                    server.post(&format!("/jobs/{name}/kick")).await.0,
                    202,
                    "{name}"
                );
                server
                    .wait_runs(&name, Duration::from_secs(120), |runs| {
                        runs.iter()
                            .any(|r| r["status"] == "succeeded" || r["status"] == "failed")
                    })
                    .await[0]
                    .clone()
            }
        };
        // The link issued is valid, and says whom it admits.
        let invited = ended("invite").await;
        assert_eq!(invited["status"], "succeeded", "{lang}: {invited}");
        let log = log_of(&home, invited["run_id"].as_str().unwrap());
        let issued = log
            .split("issued ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("{lang}: no link in the log: {log}"))
            .to_string();
        assert!(
            log.contains(&format!("/join/{issued}?role=viewer&tenant=acme")),
            "{lang}: {log}"
        );
        assert!(service.link_valid(&issued).await, "{lang}: {issued}");
        // The one revoked is not.
        let revoker = ended("revoker").await;
        assert_eq!(revoker["status"], "succeeded", "{lang}: {revoker}");
        let log = log_of(&home, revoker["run_id"].as_str().unwrap());
        let revoked = log
            .split("revoked ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("{lang}: no revocation in the log: {log}"))
            .to_string();
        assert_ne!(revoked, issued, "{lang}");
        assert!(!service.link_valid(&revoked).await, "{lang}: {revoked}");
        // Refused by the IAM: the Rust SDK's error, word for word.
        let evil = ended("evil").await;
        assert_eq!(
            (evil["status"].as_str(), evil["error"].as_str()),
            (Some("failed"), Some("iam: unauthorized")),
            "{lang}: {evil}"
        );
    }
    let deletes = service
        .seen()
        .iter()
        .filter(|s| s.method == "DELETE")
        .count();
    assert_eq!(deletes, LANGS.len(), "one revocation per language");
}

/// `host new --lang python|js`, then `host build` and `host test` as an author runs them:
/// the build tool installed into the project on first use (never globally), and the new
/// project's own cases green.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_python_and_js_projects_build_and_pass_their_cases() {
    let home = Home::new(Backend::Sqlite).await;
    let place = tempfile::tempdir().unwrap();
    for (lang, installed) in [("python", ".venv"), ("js", "node_modules")] {
        let project = place.path().join(lang);
        let created = home
            .host()
            .args(["new", "demo", "--lang", lang, "--dir"])
            .arg(&project)
            .output()
            .unwrap();
        assert!(
            created.status.success(),
            "{lang}: {}",
            String::from_utf8_lossy(&created.stderr)
        );
        let in_project = |args: &[&str]| {
            home.host()
                .current_dir(&project)
                .env_remove("JOBHOST_COMPONENTIZE_PY")
                .env_remove("JOBHOST_JS_TOOLS")
                .args(args)
                .output()
                .unwrap()
        };
        let built = in_project(&["build"]);
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&built.stdout),
            String::from_utf8_lossy(&built.stderr)
        );
        assert!(built.status.success(), "{lang}: {said}");
        assert!(said.contains("installing componentize-"), "{lang}: {said}");
        assert!(said.contains("touches    db"), "{lang}: {said}");
        // The build compiled it for this host, and says the run and test after start at once.
        assert!(
            said.contains("compiled   into ") && said.contains("start at once"),
            "{lang}: {said}"
        );
        assert!(
            project.join(installed).is_dir(),
            "{lang}: the tool is the project's own"
        );
        let tested = in_project(&["test", "--json"]);
        let report: Value = serde_json::from_slice(&tested.stdout)
            .unwrap_or_else(|_| panic!("{lang}: {}", String::from_utf8_lossy(&tested.stderr)));
        assert_eq!(
            (report["passed"].as_i64(), report["failed"].as_i64()),
            (Some(2), Some(0)),
            "{lang}: {report}"
        );
    }
}
