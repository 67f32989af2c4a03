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

/// Starts with options from a guest (WIT 0.1.7's `jobs.start`, the `starter` guest), on
/// both backends: each unique mode answers as an API start and the rows are so; a time,
/// a priority and `max_attempts` reach the run; `max_per_tenant` drops or holds it as an
/// API start; bad options are refused with their fixed code and write nothing; a key
/// raced by a guest and the API names one run; a superseded attempt's start leaves no
/// run; and an earlier guest's `dedup-key` answers as it always did.
mod guest_starts {
    use super::*;
    use crate::common::{Home, Server};
    use serde_json::Value;
    use std::path::PathBuf;

    const HOUR_MS: u64 = 3_600_000;

    /// One component for every job: each is granted what it imports.
    fn manifest(home: &Home) -> PathBuf {
        let job = |name: &str, extra: &str| {
            format!(
                "[jobs.{name}]\ncomponent = \"{{guest:starter}}\"\n\
                 grants.db = {{ write = [\"ledger\"] }}\n\
                 grants.jobs = [\"target\", \"failing\", \"capped\", \"paced\"]\n\
                 timeout = \"60s\"\n{extra}\n"
            )
        };
        let jobs = [
            job("starter", "retries = 0"),
            job("target", "retries = 0"),
            job("failing", "retries = 3"),
            job("capped", "max_per_tenant = 1"),
            job("paced", "max_per_tenant = 1\nover_limit = \"defer\""),
        ];
        home.manifest("", &jobs.concat())
    }

    fn now_ms() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    }

    /// Runs `starter` once (`host run`) making `call` with `starts`; what it answered.
    fn starts(home: &Home, m: &std::path::Path, call: &str, starts: Value) -> Value {
        let payload = json!({ "call": call, "starts": starts }).to_string();
        let (code, run) = home.run_json(&[
            "starter",
            "--manifest",
            m.to_str().unwrap(),
            "--payload",
            &payload,
        ]);
        assert_eq!(
            (code, run["status"].as_str()),
            (0, Some("succeeded")),
            "{run}"
        );
        run["result"].clone()
    }

    fn outcomes(answers: &Value) -> Vec<&str> {
        answers
            .as_array()
            .unwrap_or_else(|| panic!("answers: {answers}"))
            .iter()
            .map(|a| a["outcome"].as_str().unwrap())
            .collect()
    }

    async fn count(home: &Home, condition: &str) -> i64 {
        home.scalar(&format!(
            "SELECT COUNT(*) FROM jobhost_runs WHERE {condition}"
        ))
        .await
    }

    async fn column(home: &Home, id: &str, column: &str) -> i64 {
        home.scalar(&format!(
            "SELECT {column} FROM jobhost_runs WHERE id = '{id}'"
        ))
        .await
    }

    async fn start_over_api(server: &Server, job: &str, body: Value) -> String {
        let body = body.to_string();
        let (status, started) = server
            .post_as(
                Some(&server.token),
                &format!("/jobs/{job}/runs"),
                Some(&body),
            )
            .await;
        assert!(status == 201 || status == 200, "{started}");
        started["run_id"].as_str().unwrap().to_string()
    }

    on_every_backend! {
        async fn a_guests_start_answers_each_unique_outcome_and_the_rows_are_so(home) {
            let m = manifest(&home);
            let keyed = |payload: Value, delay_ms: u64, hold: Value, on_conflict: &str| {
                json!([{ "job": "target", "payload": payload, "delay_ms": delay_ms,
                         "key": "order-7", "hold": hold, "on_conflict": on_conflict }])
            };
            // Created, then joined (in the guest's transaction): the waiting run holds.
            let first = starts(&home, &m, "start", keyed(json!({"n": 1}), HOUR_MS, json!("queued"), "keep"));
            assert_eq!(outcomes(&first), ["created"]);
            let run = first[0]["run_id"].as_str().unwrap().to_string();
            let joined = starts(&home, &m, "start-in", keyed(json!({"n": 9}), HOUR_MS, json!("queued"), "keep"));
            assert_eq!(outcomes(&joined), ["joined"]);
            assert_eq!(joined[0]["run_id"], run.as_str());
            // Replaced: the waiting run took the new payload.
            let replaced = starts(&home, &m, "start-all", keyed(json!({"n": 2}), HOUR_MS, json!("queued"), "replace"));
            assert_eq!((outcomes(&replaced), replaced[0]["run_id"].as_str()), (vec!["replaced"], Some(run.as_str())));
            let payload = home.scalar(&format!(
                "SELECT COUNT(*) FROM jobhost_runs WHERE id = '{run}' AND payload = '{{\"n\":2}}'"
            )).await;
            assert_eq!(payload, 1, "the payload replaced");
            // Debounced: the waiting run took the new due time, two hours from now.
            let debounced = starts(&home, &m, "start-all-in", keyed(json!({"n": 3}), 2 * HOUR_MS, json!("queued"), "debounce"));
            assert_eq!((outcomes(&debounced), debounced[0]["run_id"].as_str()), (vec!["debounced"], Some(run.as_str())));
            let due_in = column(&home, &run, "next_attempt_at").await - now_ms() as i64;
            assert!((2 * HOUR_MS as i64 - 60_000..=2 * HOUR_MS as i64).contains(&due_in), "{due_in}");
            assert_eq!(count(&home, "job = 'target'").await, 1, "one run for the key");
            assert_eq!(
                count(&home, &format!("id = '{run}' AND parent_run IS NOT NULL AND detached = 0")).await,
                1,
                "the created run is its starter's child"
            );
            // A period holds whatever the state; two starts of one batch: created, joined.
            let period = json!([
                { "job": "target", "key": "p", "hold": HOUR_MS, "delay_ms": HOUR_MS },
                { "job": "target", "key": "p", "hold": HOUR_MS },
            ]);
            let answered = starts(&home, &m, "start-all", period);
            assert_eq!(outcomes(&answered), ["created", "joined"]);
            assert_eq!(answered[0]["run_id"], answered[1]["run_id"]);
            // Until finished: a run that ended frees its key; active: a run between
            // attempts does too (here: ended as well).
            let held = json!([{ "job": "target", "key": "u", "hold": "until-finished", "delay_ms": HOUR_MS }]);
            let u = starts(&home, &m, "start", held.clone());
            let u = u[0]["run_id"].as_str().unwrap().to_string();
            assert_eq!(outcomes(&starts(&home, &m, "start", held.clone())), ["joined"]);
            home.exec(&format!("UPDATE jobhost_runs SET status = 'succeeded', started_at = created_at, finished_at = created_at WHERE id = '{u}'")).await;
            let again = starts(&home, &m, "start", held);
            assert_eq!(outcomes(&again), ["created"]);
            assert_ne!(again[0]["run_id"], u.as_str());
            let active = json!([{ "job": "target", "key": "u", "hold": "active" }]);
            assert_eq!(outcomes(&starts(&home, &m, "start", active)), ["joined"], "a waiting run holds while active");
            assert_eq!(count(&home, "job = 'target'").await, 4);
        }

        async fn a_guests_bad_options_are_refused_with_fixed_codes_and_write_nothing(home) {
            let m = manifest(&home);
            let later = now_ms() + HOUR_MS;
            for (bad, code) in [
                (json!({ "job": "target", "max_attempts": 2 }), "invalid-max-attempts"),
                (json!({ "job": "target", "max_attempts": 0 }), "invalid-max-attempts"),
                (json!({ "job": "target", "priority": 3601 }), "invalid-priority"),
                (json!({ "job": "target", "run_at_ms": 1_000 }), "invalid-run-at"),
                (json!({ "job": "target", "run_at_ms": later + 400 * 24 * HOUR_MS }), "invalid-run-at"),
                (json!({ "job": "target", "run_at_ms": later, "delay_ms": 1 }), "invalid-run-at"),
                (json!({ "job": "target", "delay_ms": 400 * 24 * HOUR_MS }), "invalid-delay"),
                (json!({ "job": "target", "key": "" }), "invalid-key"),
                (json!({ "job": "target", "key": "a\u{202e}b" }), "invalid-key"),
                (json!({ "job": "target", "key": "k", "hold": 0 }), "invalid-hold"),
                (json!({ "job": "target", "key": "k", "hold": 400 * 24 * HOUR_MS }), "invalid-hold"),
                // What a hostile guest may hand over: NUL, an escape sequence, a key past
                // its 200 bytes, and every number at the end of its type.
                (json!({ "job": "target", "key": "a\u{0}b" }), "invalid-key"),
                (json!({ "job": "target", "key": "\u{1b}[31mred" }), "invalid-key"),
                (json!({ "job": "target", "key": "k".repeat(201) }), "invalid-key"),
                (json!({ "job": "target", "run_at_ms": u64::MAX }), "invalid-run-at"),
                (json!({ "job": "target", "delay_ms": u64::MAX }), "invalid-delay"),
                (json!({ "job": "target", "key": "k", "hold": u64::MAX }), "invalid-hold"),
                (json!({ "job": "target", "priority": i32::MIN }), "invalid-priority"),
                (json!({ "job": "target", "max_attempts": u32::MAX }), "invalid-max-attempts"),
            ] {
                // A good start before the bad one: the batch writes neither.
                let batch = json!([{ "job": "target", "delay_ms": HOUR_MS }, bad]);
                let answered = starts(&home, &m, "start-all", batch);
                assert_eq!(answered["error"], format!("invalid call: {code}"), "{bad}");
            }
            assert_eq!(count(&home, "job = 'target'").await, 0, "nothing written");
            assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_unique_keys").await, 0);
        }

        async fn a_guests_start_over_max_per_tenant_is_dropped_or_waits_as_an_api_start(home) {
            let m = manifest(&home);
            let two = |job: &str| json!([
                { "job": job, "delay_ms": HOUR_MS, "detached": true },
                { "job": job, "delay_ms": HOUR_MS, "detached": true },
            ]);
            let capped = starts(&home, &m, "start-all", two("capped"));
            assert_eq!(outcomes(&capped), ["created", "dropped"]);
            let dropped = capped[1]["run_id"].as_str().unwrap();
            assert_eq!(
                count(&home, &format!("id = '{dropped}' AND status = 'skipped' AND last_code = 'tenant_limit'")).await,
                1
            );
            assert_eq!(
                home.scalar(&format!("SELECT COUNT(*) FROM jobhost_reports WHERE kind = 'dropped' AND run_id = '{dropped}'")).await,
                1
            );
            let paced = starts(&home, &m, "start-in", two("paced"));
            assert_eq!(outcomes(&paced), ["created", "created"]);
            assert_eq!(count(&home, "job = 'paced' AND status = 'queued' AND waiting = 0").await, 1);
            assert_eq!(count(&home, "job = 'paced' AND status = 'queued' AND waiting = 1").await, 1);
            // A start from the command line meets the cap alike.
            let kicked = home.run(&["kick", "capped", "--instance", "x", "--json"]);
            let kicked: Value = serde_json::from_slice(&kicked.stdout).unwrap();
            assert_eq!(kicked["result"], "dropped", "{kicked}");
        }

        async fn an_earlier_guests_dedup_key_answers_as_before_through_the_unique_rule(home) {
            let m = manifest(&home);
            let keyed = json!([
                { "job": "target", "key": "d1", "delay_ms": HOUR_MS },
                { "job": "target", "key": "d1", "payload": {"other": true} },
                { "job": "target" },
            ]);
            let first = starts(&home, &m, "enqueue", keyed.clone());
            assert_eq!(outcomes(&first), ["new", "duplicate", "new"]);
            assert_eq!(first[0]["run_id"], first[1]["run_id"]);
            let run = first[0]["run_id"].as_str().unwrap().to_string();
            // Ended, the key still names its run: for good, as before.
            home.exec(&format!("UPDATE jobhost_runs SET status = 'succeeded', started_at = created_at, finished_at = created_at WHERE id = '{run}'")).await;
            let again = starts(&home, &m, "enqueue", keyed);
            assert_eq!(outcomes(&again), ["duplicate", "duplicate", "new"]);
            assert_eq!(again[0]["run_id"], run.as_str());
            assert_eq!(count(&home, "job = 'target'").await, 3);
            // The key is the unique rule's: a start that holds while queued takes it from
            // the ended run; the dedup key still answers the run it always named.
            let taken = starts(&home, &m, "start", json!([{ "job": "target", "key": "d1", "hold": "queued" }]));
            assert_eq!(outcomes(&taken), ["created"], "a queued hold: the ended run holds no longer");
            let kept = starts(&home, &m, "enqueue", json!([{ "job": "target", "key": "d1" }]));
            assert_eq!((outcomes(&kept), kept[0]["run_id"].as_str()), (vec!["duplicate"], Some(run.as_str())));
            assert_eq!(count(&home, "job = 'target'").await, 4);
        }

        async fn a_key_raced_by_guests_and_the_api_names_one_run(home) {
            let m = manifest(&home);
            let keyed = json!([{ "job": "target", "key": "raced", "hold": "until-finished", "delay_ms": HOUR_MS }]);
            let payload = json!({ "call": "start", "starts": keyed }).to_string();
            // Registers the jobs first.
            assert_eq!(outcomes(&starts(&home, &m, "start", json!([]))), Vec::<&str>::new());
            let guests: Vec<_> = (0..3)
                .map(|i| {
                    let mut host = home.host();
                    let instance = format!("g{i}");
                    host.args(["run", "--json", "starter", "--manifest", m.to_str().unwrap(), "--instance", &instance, "--payload", &payload]);
                    std::thread::spawn(move || host.output().unwrap())
                })
                .collect();
            let options = unique(While::UntilFinished, OnConflict::Keep);
            let mut api = Vec::new();
            for i in 0..RACERS {
                let store = home.store().await;
                let mut options = options.clone();
                options.unique.as_mut().unwrap().key = "raced".into();
                options.due = Due::Delay(HOUR_MS as i64);
                api.push(tokio::spawn(async move {
                    let started = kick::start(&store, "target", request(&format!("i{i}"), "{}", options), None).await.unwrap();
                    store.close().await;
                    started.run_id
                }));
            }
            let mut named = std::collections::BTreeSet::new();
            for caller in api {
                named.insert(caller.await.unwrap());
            }
            for guest in guests {
                let out = guest.join().unwrap();
                let run: Value = serde_json::from_slice(&out.stdout).unwrap();
                assert_eq!(run["status"], "succeeded", "{run}");
                named.insert(run["result"][0]["run_id"].as_str().unwrap().to_string());
            }
            assert_eq!(named.len(), 1, "every start names one run: {named:?}");
            assert_eq!(count(&home, "job = 'target'").await, 1);
        }

        async fn a_guests_started_runs_keep_their_time_priority_and_attempts(home) {
            let m = manifest(&home);
            let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
            let at = now_ms() + HOUR_MS;
            let body = json!({ "payload": { "call": "start-all", "starts": [
                { "job": "target", "run_at_ms": at },
                { "job": "target", "delay_ms": HOUR_MS, "priority": 600 },
                { "job": "failing", "payload": { "fail": true }, "max_attempts": 2 },
            ]}});
            let id = start_over_api(&server, "starter", body).await;
            let done = server.wait_run(&id, "the starter's end", |r| r["status"] == "succeeded" || r["status"] == "failed").await;
            assert_eq!(outcomes(&done["result"]), ["created", "created", "created"], "{done}");
            let ids: Vec<String> = done["result"].as_array().unwrap().iter().map(|a| a["run_id"].as_str().unwrap().to_string()).collect();
            let off = column(&home, &ids[0], "next_attempt_at").await - at as i64;
            assert!(off.abs() < 5_000, "due at its run_at, by the database's clock: {off} ms off");
            let early = column(&home, &ids[1], "next_attempt_at").await - column(&home, &ids[1], "created_at").await;
            assert_eq!(early, HOUR_MS as i64 - 600_000, "due ten minutes earlier for its priority");
            let failed = server.wait_run(&ids[2], "the failing run's end", |r| r["status"] == "failed").await;
            assert_eq!(failed["attempts"], 2, "its own max_attempts, under its job's four: {failed}");
        }

        async fn a_superseded_attempts_start_leaves_no_run(home) {
            let m = manifest(&home);
            let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
            for call in ["start", "start-in"] {
                // An instance each: the superseded attempt's lease is left to expire.
                let body = json!({ "instance": call, "payload": { "call": call, "linger_ms": 3000, "starts": [
                    { "job": "target", "key": format!("gone-{call}"), "delay_ms": HOUR_MS },
                ]}});
                let id = start_over_api(&server, "starter", body).await;
                server.wait_run(&id, "the attempt", |r| r["status"] == "running").await;
                let moved = home
                    .exec(&format!("UPDATE jobhost_leases SET generation = generation + 1 WHERE holder = '{id}'"))
                    .await;
                assert_eq!(moved, 1);
                let ended = server.wait_run(&id, "the run's end", |r| r["status"] != "running" && r["status"] != "queued").await;
                assert_eq!(ended["code"], "lease_lost", "{ended}");
            }
            assert_eq!(count(&home, "job = 'target'").await, 0, "a superseded attempt's runs appeared");
            assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_unique_keys").await, 0);
        }
    }
}
