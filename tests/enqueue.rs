//! Starts with options (issue 41): the unique rule on both backends under concurrent
//! callers, each on a store of its own as separate hosts would be, counting exactly the
//! documented outcome; priority in the claim's order; a start's `max_attempts` in its
//! run's retries; and the API's and `host start`'s answers and refusals, end to end.

use crate::common;

use jobhost::queue::kick::{self, StartRequest, Started};
use jobhost::queue::lease::LeaseTerms;
use jobhost::rules::enqueue::{Due, OnConflict, Options, Outcome, Unique, While};
use jobhost::store::{ClaimRequest, Store};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

const JOB: &str = "uniq";
/// Callers racing each enqueue.
const RACERS: usize = 8;

async fn store_with_job(home: &common::Home) -> Store {
    let store = home.store().await;
    common::register_job(&store, JOB, &Default::default()).await;
    store
}

fn unique(hold: While, on_conflict: OnConflict) -> Options {
    Options {
        unique: Some(Unique {
            key: "order-7".into(),
            hold,
            on_conflict,
        }),
        ..Options::default()
    }
}

fn request(instance: &str, payload: &str, options: Options) -> StartRequest {
    StartRequest {
        instance: instance.into(),
        payload: Some(payload.into()),
        options,
    }
}

/// `RACERS` starts of `options` at once, each from a store of its own (as many hosts),
/// each with its own payload `{"n": i}`; their answers.
async fn race(home: &common::Home, options: Options) -> Vec<Started> {
    let mut callers = Vec::new();
    for i in 0..RACERS {
        let store = home.store().await;
        let options = options.clone();
        callers.push(tokio::spawn(async move {
            let started = kick::start(
                &store,
                JOB,
                request(&format!("i{i}"), &format!("{{\"n\":{i}}}"), options),
                None,
            )
            .await
            .unwrap();
            store.close().await;
            started
        }));
    }
    let mut answers = Vec::new();
    for caller in callers {
        answers.push(caller.await.unwrap());
    }
    answers
}

/// How many answers were each outcome, in the order created, joined, replaced, debounced;
/// and that every answer names `run` when it is given.
fn tally(answers: &[Started]) -> [usize; 4] {
    let count = |o: Outcome| answers.iter().filter(|a| a.result == o).count();
    [
        count(Outcome::Created),
        count(Outcome::Joined),
        count(Outcome::Replaced),
        count(Outcome::Debounced),
    ]
}

fn created(answers: &[Started]) -> String {
    let mut made = answers.iter().filter(|a| a.result == Outcome::Created);
    let run = made.next().expect("one run created").run_id.clone();
    assert!(made.next().is_none(), "exactly one run created");
    run
}

async fn runs_of_job(home: &common::Home) -> i64 {
    home.scalar(&format!(
        "SELECT COUNT(*) FROM jobhost_runs WHERE job = '{JOB}'"
    ))
    .await
}

/// Moves run `id` to `status`, started (or not) — the states a claim and an ending
/// would leave, without running anything.
async fn set_state(home: &common::Home, id: &str, status: &str, started: bool) {
    let started_at = if started { "1" } else { "NULL" };
    home.exec(&format!(
        "UPDATE jobhost_runs SET status = '{status}', started_at = {started_at} WHERE id = '{id}'"
    ))
    .await;
}

/// The race for a fresh key creates one run, the others join it; then, with the run in
/// `holding` its key still holds and every racer joins it; moved to `freed`, the next
/// race creates exactly one new run.
async fn holds_then_frees(
    home: &common::Home,
    hold: While,
    holding: (&str, bool),
    freed: (&str, bool),
) {
    let _store = store_with_job(home).await;
    let first = race(home, unique(hold, OnConflict::Keep)).await;
    assert_eq!(
        tally(&first),
        [1, RACERS - 1, 0, 0],
        "{hold:?}: a fresh key"
    );
    let run = created(&first);
    assert!(first.iter().all(|a| a.run_id == run));
    set_state(home, &run, holding.0, holding.1).await;
    let held = race(home, unique(hold, OnConflict::Keep)).await;
    assert_eq!(
        tally(&held),
        [0, RACERS, 0, 0],
        "{hold:?}: held by {holding:?}"
    );
    assert!(held.iter().all(|a| a.run_id == run && a.joined));
    set_state(home, &run, freed.0, freed.1).await;
    let after = race(home, unique(hold, OnConflict::Keep)).await;
    assert_eq!(
        tally(&after),
        [1, RACERS - 1, 0, 0],
        "{hold:?}: freed by {freed:?}"
    );
    assert_ne!(created(&after), run);
    assert_eq!(runs_of_job(home).await, 2);
}

on_every_backend! {
    async fn a_queued_key_holds_until_its_run_starts(home) {
        holds_then_frees(&home, While::Queued, ("queued", false), ("running", true)).await;
    }

    async fn an_active_key_holds_while_an_attempt_runs_not_between_attempts(home) {
        holds_then_frees(&home, While::Active, ("running", true), ("queued", true)).await;
    }

    async fn an_until_finished_key_holds_between_attempts_until_the_run_ends(home) {
        holds_then_frees(&home, While::UntilFinished, ("queued", true), ("failed", true)).await;
    }

    async fn a_period_key_holds_an_ended_run_until_the_period_passed(home) {
        let _store = store_with_job(&home).await;
        let hold = While::Period(3_600_000);
        let first = race(&home, unique(hold, OnConflict::Keep)).await;
        let run = created(&first);
        set_state(&home, &run, "succeeded", true).await;
        let held = race(&home, unique(hold, OnConflict::Keep)).await;
        assert_eq!(tally(&held), [0, RACERS, 0, 0]);
        home.exec(&format!(
            "UPDATE jobhost_runs SET created_at = created_at - 3600001 WHERE id = '{run}'"
        ))
        .await;
        let after = race(&home, unique(hold, OnConflict::Keep)).await;
        assert_eq!(tally(&after), [1, RACERS - 1, 0, 0]);
        assert_eq!(runs_of_job(&home).await, 2);
    }

    async fn replace_swaps_a_waiting_runs_payload_and_joins_a_started_one(home) {
        let _store = store_with_job(&home).await;
        let replace = unique(While::UntilFinished, OnConflict::Replace);
        let first = race(&home, replace.clone()).await;
        // The first creates; each later one finds it waiting and replaces its payload.
        assert_eq!(tally(&first), [1, 0, RACERS - 1, 0]);
        let run = created(&first);
        let store = home.store().await;
        let kept = store.get_run(&run).await.unwrap().unwrap().payload;
        store.close().await;
        let payload = serde_json::from_str::<serde_json::Value>(&kept).unwrap()["n"]
            .as_i64()
            .unwrap();
        assert!((0..RACERS as i64).contains(&payload));
        set_state(&home, &run, "running", true).await;
        let started = race(&home, replace).await;
        assert_eq!(tally(&started), [0, RACERS, 0, 0]);
        assert_eq!(runs_of_job(&home).await, 1);
    }

    async fn debounce_moves_a_waiting_runs_due_time(home) {
        let store = store_with_job(&home).await;
        let mut debounce = unique(While::UntilFinished, OnConflict::Debounce);
        let first = race(&home, debounce.clone()).await;
        assert_eq!(tally(&first), [1, 0, 0, RACERS - 1]);
        let run = created(&first);
        debounce.due = Due::Delay(600_000);
        let moved = race(&home, debounce).await;
        assert_eq!(tally(&moved), [0, 0, 0, RACERS]);
        let due_in = home
            .scalar(&format!(
                "SELECT next_attempt_at - created_at FROM jobhost_runs WHERE id = '{run}'"
            ))
            .await;
        assert!((590_000..=610_000).contains(&due_in), "due {due_in} ms after");
        assert_eq!(runs_of_job(&home).await, 1);
        store.close().await;
    }

    async fn a_batch_is_one_transaction_whose_items_see_each_other(home) {
        let store = store_with_job(&home).await;
        let record = store.get_job(JOB).await.unwrap().unwrap();
        let keep = unique(While::UntilFinished, OnConflict::Keep);
        let requests = vec![
            request("a", "{\"n\":1}", keep.clone()),
            request("b", "{\"n\":2}", keep),
            request("c", "{\"n\":3}", Options::default()),
            request("c", "{\"n\":4}", Options::default()),
        ];
        let answers = kick::start_all(&store, &record, requests, None).await.unwrap();
        let outcomes: Vec<Outcome> = answers.iter().map(|a| a.result).collect();
        assert_eq!(
            outcomes,
            [Outcome::Created, Outcome::Joined, Outcome::Created, Outcome::Joined]
        );
        assert_eq!(answers[0].run_id, answers[1].run_id);
        assert_eq!(answers[2].run_id, answers[3].run_id);
        assert_eq!(runs_of_job(&home).await, 2);
        store.close().await;
    }

    async fn priority_orders_a_tenants_due_runs_in_the_claim(home) {
        let store = store_with_job(&home).await;
        let record = store.get_job(JOB).await.unwrap().unwrap();
        let mut requests = Vec::new();
        for (instance, priority) in [("low", 0), ("plain", 30), ("high", 600)] {
            let options = Options { priority, ..Options::default() };
            requests.push(request(instance, "{}", options));
        }
        kick::start_all(&store, &record, requests, None).await.unwrap();
        let terms = BTreeMap::from([(
            JOB.to_string(),
            LeaseTerms { grace: Duration::from_secs(5) }.attempt(
                Duration::from_secs(60),
                Duration::from_secs(30),
                "uniq",
            ),
        )]);
        let mut order = Vec::new();
        for _ in 0..3 {
            let claimed = store
                .claim_runs(&ClaimRequest {
                    host: "h",
                    limit: 1,
                    run_id: None,
                    terms: &terms,
                    paused: &[],
                })
                .await
                .unwrap();
            order.extend(claimed.into_iter().map(|c| c.run.instance));
        }
        assert_eq!(order, ["high", "plain", "low"]);
        store.close().await;
    }

    async fn a_starts_max_attempts_bounds_its_retries_from_the_api_and_the_cli(home) {
        max_attempts_end_to_end(&home).await;
    }
}

/// A job of 4 attempts a pass (`retries = 3`) whose guest always fails: a start through
/// the API asking 2 and one through `host start` asking 1 end `failed` after exactly that
/// many attempts, one asking nothing after the job's 4; a `max_attempts` over the job's
/// bound, zero or not a number is refused naming the field (a batch's item too, and the
/// CLI's flag), writing nothing.
async fn max_attempts_end_to_end(home: &common::Home) {
    let m = home.manifest(
        "",
        r#"
        [jobs.flaky]
        component = "{guest:flaky}"
        retries = 3
        backoff = "10ms"
        payload = { fail_times = 1000 }
    "#,
    );
    let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
    let post = |path: &'static str, body: serde_json::Value| {
        let server = &server;
        async move {
            server
                .post_as(Some(&server.token), path, Some(&body.to_string()))
                .await
        }
    };
    let (status, api) = post(
        "/jobs/flaky/runs",
        json!({"instance": "api", "max_attempts": 2}),
    )
    .await;
    assert_eq!(status, 201, "{api}");
    let cli = |instance: &str, asked: Option<&str>| {
        let mut args = vec!["start", "flaky", "--instance", instance, "--json"];
        args.extend(asked.map(|n| ["--max-attempts", n]).into_iter().flatten());
        home.answer_json(&args)["run_id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let runs = [
        (api["run_id"].as_str().unwrap().to_string(), 2, json!(2)),
        (cli("cli", Some("1")), 1, json!(1)),
        (cli("job", None), 4, serde_json::Value::Null),
    ];
    for (run, attempts, asked) in runs {
        let ended = server
            .wait_run(&run, "its ending", |r| r["status"] == "failed")
            .await;
        assert_eq!(ended["code"], "handler_failed", "{ended}");
        assert_eq!(ended["attempts"], attempts, "{ended}");
        assert_eq!(ended["max_attempts"], asked, "{ended}");
    }

    let before = server.runs(Some("flaky")).await.len();
    for body in [
        json!({"max_attempts": 5}),
        json!({"max_attempts": 0}),
        json!({"max_attempts": "2"}),
    ] {
        let (status, refused) = post("/jobs/flaky/runs", body.clone()).await;
        assert_eq!(status, 400, "{body}: {refused}");
        assert_eq!(refused["error"]["code"], "invalid_parameter");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("max_attempts: an integer from 1 to the job's attempts a pass"),
            "{message}"
        );
    }
    let (status, refused) = post(
        "/jobs/flaky/runs:batch",
        json!({"runs": [{"instance": "b1", "max_attempts": 4}, {"instance": "b2", "max_attempts": 5}]}),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("runs[1].max_attempts:"), "{message}");
    let out = home.run(&["start", "flaky", "--instance", "c", "--max-attempts", "5"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-attempts:"));
    assert_eq!(
        server.runs(Some("flaky")).await.len(),
        before,
        "nothing written"
    );
}

/// The API and `host start` against a serving host whose job is paused, so what they
/// queue stays queued: answers, a replace, a debounce, a batch, and every refusal
/// writing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_and_the_cli_start_with_options_and_refuse_bad_ones_writing_nothing() {
    let home = common::Home::new(common::Backend::Sqlite).await;
    let m = home.manifest("", "[jobs.hello]\ncomponent = \"{guest:hello}\"\n");
    let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
    let (status, _) = server.post("/pauses/job/hello").await;
    assert_eq!(status, 200);
    let start = |body: serde_json::Value| {
        let server = &server;
        async move {
            server
                .post_as(
                    Some(&server.token),
                    "/jobs/hello/runs",
                    Some(&body.to_string()),
                )
                .await
        }
    };
    let keyed = |name: &str| {
        json!({"payload": {"name": name}, "delay": "1h",
               "unique": {"key": "greeting", "while": "queued", "on_conflict": "replace"}})
    };
    let (status, first) = start(keyed("a")).await;
    assert_eq!(
        (status, first["result"].as_str()),
        (201, Some("created")),
        "{first}"
    );
    let run = first["run_id"].as_str().unwrap().to_string();
    let (status, second) = start(keyed("b")).await;
    assert_eq!(
        (status, second["result"].as_str()),
        (200, Some("replaced")),
        "{second}"
    );
    assert_eq!(second["run_id"], run.as_str());
    let (_, shown) = server.get(&format!("/runs/{run}")).await;
    assert_eq!(shown["payload"]["name"], "b", "{shown}");

    // The CLI takes the same options and answers with the same words.
    let out = home.run(&[
        "start",
        "hello",
        "--unique",
        "greeting",
        "--while",
        "queued",
        "--on-conflict",
        "debounce",
        "--delay",
        "2h",
        "--json",
    ]);
    let said: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(said["result"], "debounced", "{said}");
    assert_eq!(said["run_id"], run.as_str());

    let runs_before = server.runs(Some("hello")).await.len();
    for (body, field) in [
        (json!({"priority": 5000}), "priority:"),
        (json!({"run_at": "2001-01-01T00:00:00Z"}), "run_at:"),
        (json!({"delay": "soon"}), "delay:"),
        (
            json!({"unique": {"key": "k", "while": "forever"}}),
            "unique.while:",
        ),
        (
            json!({"unique": {"key": "k", "on_conflict": "merge"}}),
            "unique.on_conflict:",
        ),
        (json!({"priorty": 1}), "priorty:"),
    ] {
        let (status, refused) = start(body.clone()).await;
        assert_eq!(status, 400, "{body}: {refused}");
        assert_eq!(refused["error"]["code"], "invalid_parameter");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(field), "{body}: {message}");
    }
    let batch = |runs: serde_json::Value| {
        let server = &server;
        async move {
            let body = json!({ "runs": runs }).to_string();
            server
                .post_as(Some(&server.token), "/jobs/hello/runs:batch", Some(&body))
                .await
        }
    };
    let (status, refused) =
        batch(json!([{"instance": "x1"}, {"instance": "x2", "priority": "high"}])).await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("runs[1].priority:")
    );
    let out = home.run(&["start", "hello", "--unique", "k", "--while", "forever"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--while"));
    assert_eq!(
        server.runs(Some("hello")).await.len(),
        runs_before,
        "nothing written"
    );

    let later = (chrono::Utc::now() + chrono::Duration::hours(2)).to_rfc3339();
    let (status, done) = batch(json!([
        {"instance": "x1", "priority": 60},
        {"instance": "x2", "run_at": later},
        {"instance": "x3", "unique": {"key": "greeting", "while": "queued"}},
    ]))
    .await;
    assert_eq!(status, 200, "{done}");
    let results: Vec<&str> = done["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["result"].as_str().unwrap())
        .collect();
    assert_eq!(results, ["created", "created", "joined"]);
    assert_eq!(done["runs"][2]["run_id"], run.as_str());
    assert_eq!(server.runs(Some("hello")).await.len(), runs_before + 2);
}

/// Waiting for a run from outside: `host start --wait` of `hello` prints how it ended, a
/// long poll answers as soon as its run ends, the timeout path answers the state then,
/// the event stream sends the ending, and a tenant waits on its own runs only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_waits_for_a_runs_end_by_cli_long_poll_and_event_stream() {
    let home = common::Home::new(common::Backend::Sqlite).await;
    let m = home.manifest("", "[jobs.hello]\ncomponent = \"{guest:hello}\"\n");
    let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;

    let out = home.run(&[
        "start",
        "hello",
        "--payload",
        r#"{"name": "waiter"}"#,
        "--wait",
        "--timeout",
        "60s",
    ]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains(": succeeded after 1 attempt"), "{said}");
    assert!(said.contains("result: none"), "{said}");

    // Paused, a run stays queued: the timeout path answers its state at the timeout.
    assert_eq!(server.post("/pauses/job/hello").await.0, 200);
    let (status, started) = server.post("/jobs/hello/runs").await;
    assert_eq!(status, 201, "{started}");
    let run = started["run_id"].as_str().unwrap().to_string();
    let asked = std::time::Instant::now();
    let (status, still) = server.get(&format!("/runs/{run}?wait=1s")).await;
    assert_eq!(
        (status, still["status"].as_str()),
        (200, Some("queued")),
        "{still}"
    );
    assert!(asked.elapsed() >= Duration::from_secs(1));
    let (status, refused) = server.get(&format!("/runs/{run}?wait=61s")).await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (400, Some("invalid_parameter"))
    );
    let out = home.run(&["runs", "wait", &run, "--timeout", "1s"]);
    assert_eq!(out.status.code(), Some(6), "not ended by the timeout");

    // Another tenant's token: the run is unknown to it, waited for or streamed.
    assert!(home.run(&["tenants", "add", "acme"]).status.success());
    let acme = home.create_token(Some("acme"));
    let (status, _) = server
        .get_as(Some(&acme), &format!("/runs/{run}?wait=5s"))
        .await;
    assert_eq!(status, 404);
    let (status, _) = server
        .get_as(Some(&acme), &format!("/runs/{run}/events"))
        .await;
    assert_eq!(status, 404);

    // A long poll and an event stream, both waiting; the pause lifted, the run ends and
    // both answer well before the poll's 30 s.
    let poll = {
        let (url, token) = (server.url.clone(), server.token.clone());
        let run = run.clone();
        tokio::spawn(async move {
            let r = reqwest::Client::new()
                .get(format!("{url}/runs/{run}?wait=30s"))
                .bearer_auth(token)
                .send()
                .await
                .unwrap();
            r.json::<serde_json::Value>().await.unwrap()
        })
    };
    let mut events = reqwest::Client::new()
        .get(format!("{}/runs/{run}/events", server.url))
        .bearer_auth(&server.token)
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    let waiting = std::time::Instant::now();
    assert_eq!(server.delete("/pauses/job/hello").await.0, 200);
    let answered = tokio::time::timeout(Duration::from_secs(20), poll)
        .await
        .expect("the long poll answers once the run ended")
        .unwrap();
    assert_eq!(answered["status"], "succeeded", "{answered}");
    assert!(waiting.elapsed() < Duration::from_secs(20));
    let mut streamed = String::new();
    while !streamed.contains("\"succeeded\"") {
        let chunk = tokio::time::timeout(Duration::from_secs(20), events.chunk())
            .await
            .expect("the stream sends the ending")
            .unwrap()
            .expect("the stream is open until the ending");
        streamed.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(streamed.starts_with("event: status\ndata: {"), "{streamed}");
    assert!(streamed.contains("\"queued\""), "{streamed}");
}
