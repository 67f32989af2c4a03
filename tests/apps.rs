//! An application's enqueue in its own Postgres transaction (issue 41): `jobhost.enqueue`
//! called as an application's role that `host apps grant` let in and `host apps revoke`
//! shut out, with the real binary serving; each refusal in the API's words, writing
//! nothing; and the unique rule raced on one key by the API and the function at once.
//! SQLite's refusal of `host apps` is checked with the audit (`tests/audit.rs`).

use crate::common;

use common::{Backend, Home, PgRole};
use jobhost::queue::kick::{self, StartRequest};
use jobhost::rules::enqueue::{OnConflict, Options, Outcome, Unique, While};
use serde_json::{Value, json};
use sqlx::Connection;
use sqlx::postgres::{PgConnection, PgListener};
use std::time::{Duration, Instant};

/// `host apps ARGS`, which must succeed; what it printed.
fn apps(home: &Home, args: &[&str]) -> String {
    let out = home.run(&[&["apps"][..], args].concat());
    assert!(
        out.status.success(),
        "host apps {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn granted(home: &Home) -> Value {
    serde_json::from_str(&apps(home, &["list", "--json"])).expect("JSON")
}

/// `SELECT jobhost.enqueue(job, payload, options)` on `conn`: the run's id, or the
/// refusal's SQLSTATE and message.
async fn enqueue(
    conn: &mut PgConnection,
    job: &str,
    payload: Option<&str>,
    options: &Value,
) -> Result<String, (String, String)> {
    sqlx::query_scalar("SELECT jobhost.enqueue($1, CAST($2 AS jsonb), CAST($3 AS jsonb))")
        .bind(job)
        .bind(payload)
        .bind(options.to_string())
        .fetch_one(conn)
        .await
        .map_err(|e| {
            let db = e.as_database_error().expect("a refusal from the database");
            (
                db.code().unwrap_or_default().into_owned(),
                db.message().to_string(),
            )
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_enqueues_in_its_own_transaction() {
    let home = Home::new(Backend::Postgres).await;
    let manifest = home.manifest("", "[jobs.hello]\ncomponent = \"{guest:hello}\"\n");
    let server = home
        .serve(&["--manifest", manifest.to_str().unwrap()])
        .await;
    // A first run, so the component is compiled before the timed one.
    let (status, kicked) = server.post("/jobs/hello/kick").await;
    assert_eq!(status, 202, "{kicked}");
    let first = kicked["run_id"].as_str().unwrap();
    server
        .wait_run(first, "the kicked run", |r| r["status"] == "succeeded")
        .await;

    let app = PgRole::create(&home.db_url).await;
    let stranger = PgRole::create(&home.db_url).await;
    assert_eq!(granted(&home), json!([]));
    apps(&home, &["grant", &app.name]);
    assert_eq!(granted(&home), json!([app.name]));
    let mut conn = app.connect().await;
    let mut listener = PgListener::connect(&home.db_url).await.unwrap();
    listener.listen("jobhost_work").await.unwrap();

    // Rolled back: no run, and no host woken.
    let mut tx = conn.begin().await.unwrap();
    let dropped = enqueue(&mut tx, "hello", Some(r#"{"name": "gone"}"#), &json!({}))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let woken = tokio::time::timeout(Duration::from_secs(2), listener.recv()).await;
    assert!(
        woken.is_err(),
        "a rolled-back enqueue woke hosts: {woken:?}"
    );
    let runs = |id: &str| format!("SELECT COUNT(*) FROM jobhost_runs WHERE id = '{id}'");
    assert_eq!(home.scalar(&runs(&dropped)).await, 0);

    // Committed with the application's own write: hosts are woken at the commit, not
    // before, and the run starts and ends well within a liveness bound.
    let mut tx = conn.begin().await.unwrap();
    let id = enqueue(&mut tx, "hello", Some(r#"{"name": "app"}"#), &json!({}))
        .await
        .unwrap();
    let early = tokio::time::timeout(Duration::from_millis(500), listener.recv()).await;
    assert!(early.is_err(), "woken before the commit: {early:?}");
    assert_eq!(home.scalar(&runs(&id)).await, 0, "seen before the commit");
    tx.commit().await.unwrap();
    let committed = Instant::now();
    let note = tokio::time::timeout(Duration::from_secs(5), listener.recv())
        .await
        .expect("woken at the commit")
        .unwrap();
    assert_eq!(note.payload(), "default");
    let run = server
        .wait_run(&id, "the application's run", |r| r["status"] == "succeeded")
        .await;
    assert!(
        committed.elapsed() < Duration::from_secs(20),
        "ended {:?} after the commit: {run}",
        committed.elapsed()
    );
    assert_eq!(
        home.scalar(&format!(
            "SELECT COUNT(*) FROM jobhost_runs WHERE id = '{id}' AND origin = 'start' \
             AND payload = '{{\"name\": \"app\"}}'"
        ))
        .await,
        1
    );

    // The role reads no table of the host's; a role never granted may not call it.
    let denied = sqlx::query("SELECT COUNT(*) FROM jobhost_runs")
        .execute(&mut conn)
        .await
        .unwrap_err();
    assert_eq!(denied.as_database_error().unwrap().code().unwrap(), "42501");
    let mut other = stranger.connect().await;
    let refused = enqueue(&mut other, "hello", None, &json!({})).await;
    assert_eq!(refused.unwrap_err().0, "42501");

    // Revoked: refused from its next statement, on the connection it already had.
    apps(&home, &["revoke", &app.name]);
    assert_eq!(granted(&home), json!([]));
    let refused = enqueue(&mut conn, "hello", None, &json!({})).await;
    assert_eq!(refused.unwrap_err().0, "42501");
    let out = home.run(&["apps", "grant", "no_such_role_here"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no Postgres role \"no_such_role_here\""),
        "{stderr}"
    );
    assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_input_is_refused_in_the_apis_words_and_writes_nothing() {
    let home = Home::new(Backend::Postgres).await;
    let store = home.store().await;
    for job in ["uniq", "gone", "acmes"] {
        common::register_job(&store, job, &Default::default()).await;
    }
    home.exec(
        "UPDATE jobhost_jobs SET orphaned_at = 1 WHERE name = 'gone'; \
         UPDATE jobhost_jobs SET tenant = 'acme' WHERE name = 'acmes'",
    )
    .await;
    store.add_tenant("acme").await.unwrap();
    store.set_tenant_active("acme", false).await.unwrap();
    let app = PgRole::create(&home.db_url).await;
    apps(&home, &["grant", &app.name]);
    let mut conn = app.connect().await;

    // Each option the API refuses, refused here with its words.
    let now = store.now().await.unwrap();
    let past = chrono::DateTime::from_timestamp_millis(now - 2 * 86_400_000)
        .unwrap()
        .to_rfc3339();
    let bad_options = [
        json!({"run_at": past}),
        json!({"run_at": "yesterday"}),
        json!({"run_at": "2027-01-15T08:00:00Z", "delay": "1s"}),
        json!({"delay": "soon"}),
        json!({"delay": "400d"}),
        json!({"priority": 3601}),
        json!({"priority": "high"}),
        json!({"unique": "k"}),
        json!({"unique": {"key": "k", "x": 1}}),
        json!({"unique": {"key": "a\u{202e}b"}}),
        json!({"unique": {}}),
        json!({"unique": {"key": "k", "while": "forever"}}),
        json!({"unique": {"key": "k", "while": "0s"}}),
        json!({"unique": {"key": "k", "on_conflict": "merge"}}),
    ];
    for options in bad_options {
        let api = jobhost::rules::enqueue::from_json(options.as_object().unwrap(), now)
            .expect_err("the API refuses it");
        let refused = enqueue(&mut conn, "uniq", Some("{}"), &options).await;
        assert_eq!(
            refused,
            Err(("JH400".to_string(), format!("jobhost: {api}"))),
            "{options}"
        );
    }

    // The job, its tenant, the payload and the fields, each in the API's words.
    let kick_error = |e: kick::KickError| format!("jobhost: {e}");
    let big = format!("\"{}\"", "x".repeat(300_000));
    let deep = format!("{}1{}", "[".repeat(40), "]".repeat(40));
    let cases: [(&str, Option<&str>, Value, &str, String); 7] = [
        (
            "nope",
            None,
            json!({}),
            "JH404",
            "jobhost: no job named \"nope\"".into(),
        ),
        (
            "gone",
            None,
            json!({}),
            "JH409",
            kick_error(kick::KickError::Orphaned("gone".into())),
        ),
        (
            "acmes",
            None,
            json!({}),
            "JH409",
            kick_error(kick::KickError::TenantDisabled("acme".into())),
        ),
        (
            "uniq",
            Some(big.as_str()),
            json!({}),
            "JH400",
            format!(
                "jobhost: {}",
                jobhost::rules::job::validate_payload(&big).unwrap_err()
            ),
        ),
        (
            "uniq",
            Some(deep.as_str()),
            json!({}),
            "JH400",
            "jobhost: payload refused: nested deeper than the limit".into(),
        ),
        (
            "uniq",
            None,
            json!({"tenant": "acme"}),
            "JH404",
            "jobhost: no job named \"uniq\" of tenant \"acme\"".into(),
        ),
        (
            "uniq",
            None,
            json!({"when": "now"}),
            "JH400",
            "jobhost: when: not an option of jobhost.enqueue \
             (instance, tenant, run_at, delay, priority, max_attempts, unique)"
                .into(),
        ),
    ];
    for (job, payload, options, code, message) in cases {
        let refused = enqueue(&mut conn, job, payload, &options).await;
        assert_eq!(refused, Err((code.to_string(), message)), "{job} {options}");
    }
    assert!(
        jobhost::rules::job::validate_payload(&deep).is_err(),
        "the API refuses the deep payload too"
    );
    for table in [
        "jobhost_runs",
        "jobhost_unique_keys",
        "jobhost_leases",
        "jobhost_reports",
    ] {
        let written = home.scalar(&format!("SELECT COUNT(*) FROM {table}")).await;
        assert_eq!(written, 0, "{table}");
    }
    // What passes the same checks is queued.
    let ok = enqueue(
        &mut conn,
        "uniq",
        Some("{}"),
        &json!({"delay": "10m", "priority": 5, "unique": {"key": "k", "while": "1h"}}),
    )
    .await;
    assert!(ok.is_ok(), "{ok:?}");
    store.close().await;
}

/// `max_attempts` within the job's retries, and the queue caps (`max_queued` of the job
/// and of its tenant) counted as the API counts them: each refusal in the API's words,
/// writing nothing, and a start that joins its job's live run taking no room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_attempts_and_the_queue_caps_hold_as_through_the_api() {
    let home = Home::new(Backend::Postgres).await;
    let manifest = home.manifest(
        "",
        "[tenant_defaults]\nmax_queued = 3\n\
         [jobs.capped]\ncomponent = \"{guest:hello}\"\nretries = 2\nmax_queued = 2\n\
         [jobs.other]\ncomponent = \"{guest:hello}\"\n",
    );
    let server = home
        .serve(&["--manifest", manifest.to_str().unwrap()])
        .await;
    let app = PgRole::create(&home.db_url).await;
    apps(&home, &["grant", &app.name]);
    let mut conn = app.connect().await;
    let later = |more: Value| {
        let mut options = json!({"delay": "10m"});
        options
            .as_object_mut()
            .unwrap()
            .extend(more.as_object().unwrap().clone());
        options
    };

    // Fewer attempts than the job's 3 are kept with the run; more, or none, are refused.
    let two = enqueue(
        &mut conn,
        "capped",
        None,
        &later(json!({"max_attempts": 2})),
    )
    .await
    .unwrap();
    let kept = format!("SELECT max_attempts FROM jobhost_runs WHERE id = '{two}'");
    assert_eq!(home.scalar(&kept).await, 2);
    let over = Options {
        max_attempts: Some(4),
        ..Options::default()
    }
    .within_job(2)
    .unwrap_err();
    for bad in [json!(4), json!(0), json!(-1), json!(1.5), json!("2")] {
        let refused = enqueue(
            &mut conn,
            "capped",
            None,
            &later(json!({"max_attempts": bad})),
        )
        .await;
        assert_eq!(
            refused,
            Err(("JH400".to_string(), format!("jobhost: {over}"))),
            "max_attempts {bad}"
        );
    }
    // The job's own bound is allowed.
    enqueue(
        &mut conn,
        "capped",
        None,
        &later(json!({"max_attempts": 3, "unique": {"key": "k"}})),
    )
    .await
    .unwrap();

    // The job's cap of 2 queued runs is reached: refused in the API's words, with its
    // status; a start that joins the live run of the job's instance takes no room.
    let (status, api) = server
        .post_as(
            Some(&server.token),
            "/jobs/capped/runs",
            Some(r#"{"unique": {"key": "k2"}}"#),
        )
        .await;
    assert_eq!(status, 429, "{api}");
    let full =
        |e: jobhost::queue::backlog::Full| format!("jobhost: {}", kick::KickError::QueueFull(e));
    let job_full = full(jobhost::queue::backlog::Full::Job {
        job: "capped".into(),
        tenant: "default".into(),
        cap: 2,
    });
    assert_eq!(
        format!("jobhost: {}", api["error"]["message"].as_str().unwrap()),
        job_full
    );
    let refused = enqueue(&mut conn, "capped", None, &json!({"unique": {"key": "k2"}})).await;
    assert_eq!(refused, Err(("JH429".to_string(), job_full)));
    let joined = enqueue(&mut conn, "capped", None, &json!({})).await;
    assert_eq!(
        joined,
        Ok(two.clone()),
        "joins the live run of the instance"
    );

    // The tenant's cap of 3 counts every job's queued runs.
    enqueue(&mut conn, "other", None, &later(json!({})))
        .await
        .unwrap();
    let refused = enqueue(&mut conn, "other", None, &json!({"unique": {"key": "o"}})).await;
    let tenant_full = full(jobhost::queue::backlog::Full::Tenant {
        tenant: "default".into(),
        cap: 3,
    });
    assert_eq!(refused, Err(("JH429".to_string(), tenant_full)));
    assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs").await, 3);
    assert_eq!(
        home.scalar("SELECT COUNT(*) FROM jobhost_unique_keys WHERE key <> 'k'")
            .await,
        0,
        "a refused start holds no key"
    );
}

/// Callers racing one key, half through the API's path (`kick::start`, each on a store
/// of its own as separate hosts) and half through `jobhost.enqueue`.
const RACERS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_and_the_function_race_one_key_to_one_outcome() {
    let home = Home::new(Backend::Postgres).await;
    let store = home.store().await;
    common::register_job(&store, "uniq", &Default::default()).await;
    let app = PgRole::create(&home.db_url).await;
    apps(&home, &["grant", &app.name]);
    let modes = [
        (
            While::UntilFinished,
            OnConflict::Keep,
            "until-finished",
            "keep",
            Outcome::Joined,
        ),
        (
            While::Queued,
            OnConflict::Replace,
            "queued",
            "replace",
            Outcome::Replaced,
        ),
        (
            While::Queued,
            OnConflict::Debounce,
            "queued",
            "debounce",
            Outcome::Debounced,
        ),
    ];
    for (case, (hold, on_conflict, hold_text, conflict_text, held)) in modes.into_iter().enumerate()
    {
        let key = format!("order-{case}");
        let mut callers = Vec::new();
        for i in 0..RACERS {
            let payload = format!("{{\"n\": {i}}}");
            let sql_options = json!({"delay": "1h", "unique": {"key": key, "while": hold_text,
                "on_conflict": conflict_text}});
            let options = Options {
                due: jobhost::rules::enqueue::Due::Delay(3_600_000),
                unique: Some(Unique {
                    key: key.clone(),
                    hold,
                    on_conflict,
                }),
                ..Options::default()
            };
            let store = home.store().await;
            let mut conn = app.connect().await;
            callers.push(tokio::spawn(async move {
                let answer = if i % 2 == 0 {
                    let request = StartRequest {
                        instance: "default".into(),
                        payload: Some(payload),
                        options,
                    };
                    let started = kick::start(&store, "uniq", request, None).await.unwrap();
                    (started.run_id, Some(started.result))
                } else {
                    let id = enqueue(&mut conn, "uniq", Some(&payload), &sql_options)
                        .await
                        .unwrap();
                    (id, None)
                };
                store.close().await;
                answer
            }));
        }
        let mut answers = Vec::new();
        for caller in callers {
            answers.push(caller.await.unwrap());
        }
        let run = &answers[0].0;
        assert!(
            answers.iter().all(|(id, _)| id == run),
            "{key}: every caller names one run: {answers:?}"
        );
        let api: Vec<Outcome> = answers.iter().filter_map(|(_, o)| *o).collect();
        let created = api.iter().filter(|o| **o == Outcome::Created).count();
        assert!(created <= 1, "{key}: {api:?}");
        assert!(
            api.iter().all(|o| *o == Outcome::Created || *o == held),
            "{key}: {api:?}"
        );
        let runs = home
            .scalar(&format!(
                "SELECT COUNT(*) FROM jobhost_runs WHERE id IN \
                 (SELECT run_id FROM jobhost_unique_keys WHERE key = '{key}')"
            ))
            .await;
        assert_eq!(runs, 1, "{key}");
        let all = home.scalar("SELECT COUNT(*) FROM jobhost_runs").await;
        assert_eq!(all, case as i64 + 1, "{key}: one run per key");
    }
    store.close().await;
}
