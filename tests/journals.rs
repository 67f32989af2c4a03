//! The flight recorder end to end, with the real binary on SQLite and Postgres: which
//! attempts keep a journal (`record = "failures" | "always" | "off"`) and what its row in
//! `jobhost_journals` says; a `links` job's journal holds no injected credential and
//! replays (`host replay`, from the database and from `host runs export`'s file) with the
//! service it called stopped, reproducing outcome, log and fuel; a journal past its
//! `record_limit` is kept truncated, bounded, and its replay stops saying so; the API's
//! journals, timeline and export, which another tenant's token cannot see; retention
//! deleting journals with their runs (never a live run's); `host replay` refusing
//! what is not a journal of this host, writing nothing; and a journal edited after it was
//! kept — its code, timeout, environment or calls — never replaying "the same".

use crate::common;

use common::service::Service;
use common::{Home, guest, migrations};
use serde_json::{Value, json};
use std::process::Output;
use std::time::Duration;

const TOKEN: &str = "s3cr3t-billing-token-for-journals";

/// `common::Service` on a runtime of its own, so the test can stop it for good: dropping
/// that runtime ends the server's task and closes its listener.
struct Stoppable {
    service: Service,
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Stoppable {
    fn start() -> Stoppable {
        let (started, service) = std::sync::mpsc::channel();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("a runtime for the service");
            let service = runtime.block_on(Service::start());
            started.send(service).expect("send the service");
            // Until the test stops it (or drops it): then the runtime goes, and the
            // server with it.
            let _ = stopped.recv();
            drop(runtime);
        });
        Stoppable {
            service: service.recv().expect("the service started"),
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    fn addr(&self) -> std::net::SocketAddr {
        self.service
            .url
            .strip_prefix("http://")
            .expect("an http URL")
            .parse()
            .expect("an address")
    }

    fn stop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the service's thread");
        }
    }
}

impl Drop for Stoppable {
    fn drop(&mut self) {
        self.stop();
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn all_output(out: &Output) -> String {
    format!("{}{}", text(&out.stdout), text(&out.stderr))
}

/// A command that must succeed; its stdout.
fn ok(home: &Home, args: &[&str]) -> String {
    let out = home.run(args);
    assert!(out.status.success(), "{args:?}: {}", all_output(&out));
    text(&out.stdout)
}

/// A command that must be refused as a usage error (exit 2, nothing on stdout); its
/// stderr.
fn refused(out: Output, what: &str) -> String {
    assert_eq!(out.status.code(), Some(2), "{what}: {}", all_output(&out));
    assert!(
        out.stdout.is_empty(),
        "{what} printed: {}",
        text(&out.stdout)
    );
    let stderr = text(&out.stderr);
    assert!(!stderr.trim().is_empty(), "{what}: refused without a word");
    stderr
}

/// `host run NAME --manifest M --json`: the exit code and the run.
fn run_job(home: &Home, m: &std::path::Path, job: &str) -> (i32, Value) {
    home.run_json(&[job, "--manifest", m.to_str().unwrap()])
}

fn run_id(run: &Value) -> String {
    run["run_id"].as_str().expect("a run id").to_string()
}

/// `host runs export RUN [ARGS]`: its text and the journal it prints.
fn export(home: &Home, run: &str, args: &[&str]) -> (String, Value) {
    let mut all = vec!["runs", "export", run];
    all.extend_from_slice(args);
    let printed = ok(home, &all);
    let journal = serde_json::from_str(printed.trim()).expect("the export is JSON");
    (printed, journal)
}

/// `host replay ARGS --json`: the exit code, what it printed, and its stderr.
fn replay_json(home: &Home, args: &[&str]) -> (i32, Value, String) {
    let mut all = vec!["replay"];
    all.extend_from_slice(args);
    all.push("--json");
    let out = home.run(&all);
    let shown = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("host replay {args:?} printed no JSON: {}", all_output(&out)));
    (out.status.code().unwrap_or(-1), shown, text(&out.stderr))
}

/// The names of a journal's calls, in order.
fn call_names(journal: &Value) -> Vec<String> {
    journal["calls"]
        .as_array()
        .expect("calls")
        .iter()
        .map(|c| c["call"].as_str().expect("a call's name").to_string())
        .collect()
}

/// A replay that ran to the guest's end exactly as the recorded attempt did.
fn assert_reproduced(shown: &Value, calls: usize) {
    let replay = &shown["replay"];
    assert_eq!(replay["stopped"], Value::Null, "{shown}");
    assert_eq!(
        replay["same"],
        json!({"outcome": true, "log": true, "fuel": true}),
        "{shown}"
    );
    assert_eq!(replay["calls_answered"], json!(calls), "{shown}");
    assert_eq!(replay["calls_recorded"], json!(calls), "{shown}");
    assert_eq!(replay["status"], shown["recorded"]["status"], "{shown}");
    assert_eq!(replay["outcome"], shown["recorded"]["outcome"], "{shown}");
    assert_eq!(replay["code"], shown["recorded"]["code"], "{shown}");
    assert_eq!(
        replay["fuel_used"], shown["recorded"]["fuel_used"],
        "{shown}"
    );
}

async fn journal_rows(home: &Home, run: &str) -> i64 {
    home.scalar(&format!(
        "SELECT COUNT(*) FROM jobhost_journals WHERE run_id = '{run}'"
    ))
    .await
}

/// The `bytes` column of a run's (only) journal.
async fn stored_bytes(home: &Home, run: &str) -> usize {
    let bytes = home
        .scalar(&format!(
            "SELECT bytes FROM jobhost_journals WHERE run_id = '{run}'"
        ))
        .await;
    usize::try_from(bytes).expect("a size")
}

/// How many rows the host's history tables hold: what a replay must leave as it was.
async fn history(home: &Home) -> [i64; 4] {
    let mut counts = [0; 4];
    for (n, table) in [
        "jobhost_runs",
        "jobhost_attempts",
        "jobhost_journals",
        "jobhost_reports",
    ]
    .iter()
    .enumerate()
    {
        counts[n] = home.scalar(&format!("SELECT COUNT(*) FROM {table}")).await;
    }
    counts
}

on_every_backend! {
    async fn a_links_journal_replays_with_the_service_stopped_and_holds_no_secret(home) {
        let mut service = Stoppable::start();
        let m = home.manifest("", &format!(r#"
            [links.api]
            url = "{url}/api/"
            methods = ["GET", "POST"]
            timeout = "5s"
            credential = {{ header = "Authorization", prefix = "Bearer ", env = "BILLING_TOKEN" }}
            headers = ["content-type", "x-request-id"]

            [jobs.caller]
            component = "{{guest:linker}}"
            tenant = "acme"
            timeout = "5s"
            record = "always"
            grants.links = ["api"]
        "#, url = service.service.url));
        let payload = json!({
            "mount": "api", "method": "POST", "path": "echo", "body": "hello",
            "headers": [["content-type", "text/plain"], ["x-request-id", "r1"]], "calls": 2,
        });
        let out = home.host().env("BILLING_TOKEN", TOKEN)
            .args(["run", "caller", "--json", "--manifest", m.to_str().unwrap(), "--payload", &payload.to_string()])
            .output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
        let run: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(run["status"], "succeeded", "{run}");
        let id = run_id(&run);
        // The service got the credential: it was there to leak.
        let seen = service.service.seen();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert!(seen.iter().all(|s| s.headers["authorization"] == format!("Bearer {TOKEN}")));

        service.stop();
        assert!(std::net::TcpStream::connect_timeout(&service.addr(), Duration::from_secs(1)).is_err(),
            "the service still listens");

        // The journal: the run's, every call answered, and nowhere the credential.
        assert_eq!(home.scalar(&format!(
            "SELECT COUNT(*) FROM jobhost_journals WHERE run_id = '{id}' AND seq = 1 AND job = 'caller' \
             AND tenant = 'acme' AND replayable = 1")).await, 1);
        assert_eq!(home.scalar(&format!(
            "SELECT COUNT(*) FROM jobhost_journals WHERE body LIKE '%{TOKEN}%'")).await, 0);
        let (printed, journal) = export(&home, &id, &[]);
        assert!(!printed.contains(TOKEN), "the credential is in the journal: {printed}");
        assert_eq!(stored_bytes(&home, &id).await, printed.trim_end().len(), "bytes is the body's length");
        assert_eq!((journal["format"].as_str(), journal["version"].as_i64()), (Some("jobhost-journal"), Some(1)));
        assert_eq!(journal["run_id"], id.as_str());
        assert_eq!(journal["seq"], 1);
        assert_eq!(journal["job"], "caller");
        assert_eq!(journal["tenant"], "acme");
        assert_eq!(journal["truncated"], false);
        assert_eq!(journal["environment"], json!([]), "the guest had no environment");
        assert_eq!(journal["ending"]["status"], "succeeded");
        assert_eq!(journal, export(&home, &id, &["--attempt", "1"]).1, "--attempt 1 is the same journal");
        let names = call_names(&journal);
        assert!(journal["calls"].as_array().unwrap().iter().all(|c| c["answer"].is_string() && c["code"] == "ok"),
            "{journal}");
        assert_eq!(names.iter().filter(|n| *n == "links.call").count(), 2, "{names:?}");
        let links_call = journal["calls"].as_array().unwrap().iter().find(|c| c["call"] == "links.call").unwrap();
        assert_eq!(links_call["code"], "ok");
        assert!(links_call["args"].as_str().unwrap().contains("\"api\""), "{links_call}");
        assert!(links_call["answer"].is_string(), "the answer is kept: {links_call}");
        assert_eq!(home.scalar(&format!("SELECT calls FROM jobhost_journals WHERE run_id = '{id}'")).await,
            names.len() as i64);

        // Neither `runs show` form has it; the text one names the journal.
        let shown = ok(&home, &["runs", "show", &id]);
        assert!(!shown.contains(TOKEN), "{shown}");
        assert!(shown.contains(&format!("journal: {} host calls; replay it with `host replay {id} --attempt 1`", names.len())),
            "{shown}");
        let shown_json = ok(&home, &["runs", "show", &id, "--json"]);
        assert!(!shown_json.contains(TOKEN), "{shown_json}");
        let shown_json: Value = serde_json::from_str(&shown_json).unwrap();
        assert_eq!(shown_json["journals"][0]["seq"], 1, "{shown_json}");
        assert_eq!(shown_json["journals"][0]["calls"], json!(names.len()), "{shown_json}");
        assert!(shown_json["journals"][0].get("body").is_none(), "{shown_json}");

        // Replayed with nothing live: the service is gone and the credential unset.
        let before = history(&home).await;
        let (code, shown, stderr) = replay_json(&home, &[&id]);
        assert_eq!(code, 0, "{shown} {stderr}");
        assert_reproduced(&shown, names.len());
        assert_eq!(shown["run_id"], id.as_str());
        assert_eq!(shown["attempt"], 1);
        assert_eq!(shown["component"], journal["component"], "the job's component replays");
        assert!(shown["replay"]["log"].as_str().unwrap().contains(r#"status 200 body {"body":"hello","method":"POST","path":"/api/echo"}"#),
            "{shown}");
        assert!(!shown.to_string().contains(TOKEN));
        // The text form says the same.
        let out = home.run(&["replay", &id]);
        assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
        let said = text(&out.stdout);
        assert!(said.contains(&format!("{n} of {n} calls answered from the journal", n = names.len())), "{said}");
        assert!(said.contains("outcome the same, log the same, fuel the same"), "{said}");
        // And from the exported file, on a "laptop" with no database at all.
        let file = home.path().join("caller.journal");
        std::fs::write(&file, &printed).unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let absent = elsewhere.path().join("absent.db");
        let out = home.host()
            .env("JOBHOST_DB", format!("sqlite://{}", absent.display()))
            .args(["replay", "--from", file.to_str().unwrap(), "--job", guest("linker").to_str().unwrap(), "--json"])
            .output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
        let from_file: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_reproduced(&from_file, names.len());
        assert_eq!(from_file["replay"]["log"], shown["replay"]["log"]);
        assert!(!absent.exists(), "a replay from a file opened a database");
        assert_eq!(history(&home).await, before, "a replay wrote to the database");
        assert_eq!(service.service.count(), 2, "a replay reached the service");

        // The API's timeline says it too, and no more.
        let plain = home.manifest("", "[jobs.greeter]\ncomponent = \"{guest:hello}\"\n");
        let server = home.serve(&["--manifest", plain.to_str().unwrap()]).await;
        let (status, timeline) = server.get(&format!("/runs/{id}/attempts/1/calls")).await;
        assert_eq!(status, 200, "{timeline}");
        assert!(!timeline.to_string().contains(TOKEN), "{timeline}");
        let listed: Vec<&str> = timeline["calls"].as_array().unwrap().iter().map(|c| c["call"].as_str().unwrap()).collect();
        assert_eq!(listed, names, "{timeline}");
        let exported = server.text(&format!("/runs/{id}/attempts/1/journal")).await;
        assert_eq!(exported, printed.trim_end(), "the API's export is the CLI's");
    }

    async fn record_decides_which_attempts_keep_a_journal(home) {
        let m = home.manifest("", r#"
            [jobs.silent]
            component = "{guest:flaky}"
            record = "off"
            retries = 0
            payload = { fail_times = 1000 }

            [jobs.usual]
            component = "{guest:flaky}"
            retries = 1
            backoff = "10ms"
            payload = { fail_times = 1 }

            [jobs.greeter]
            component = "{guest:hello}"

            [jobs.everything]
            component = "{guest:hello}"
            record = "always"
        "#);

        // `off`: a failed attempt keeps nothing, and replay says there is nothing.
        let (code, run) = run_job(&home, &m, "silent");
        assert_eq!((code, run["status"].as_str()), (1, Some("failed")), "{run}");
        let silent = run_id(&run);
        assert_eq!(journal_rows(&home, &silent).await, 0);
        let said = refused(home.run(&["replay", &silent]), "replay of a run recorded with record = off");
        assert!(said.contains(&format!("run {silent:?} has no journal")), "{said}");
        let said = refused(home.run(&["runs", "export", &silent]), "export of a run without a journal");
        assert!(said.contains("has no journal"), "{said}");
        assert!(!ok(&home, &["runs", "show", &silent]).contains("journal:"));

        // The default, `failures`: the failed first attempt keeps one, the retry that
        // succeeded does not.
        let (code, run) = run_job(&home, &m, "usual");
        assert_eq!((code, run["status"].as_str(), run["attempts"].as_i64()), (0, Some("succeeded"), Some(2)), "{run}");
        let usual = run_id(&run);
        assert_eq!(journal_rows(&home, &usual).await, 1);
        assert_eq!(home.scalar(&format!(
            "SELECT COUNT(*) FROM jobhost_journals j JOIN jobhost_attempts a ON a.run_id = j.run_id AND a.seq = j.seq \
             WHERE j.run_id = '{usual}' AND j.seq = 1 AND a.status = 'failed' AND j.job = 'usual' \
             AND j.tenant = 'default' AND j.replayable = 1")).await, 1,
            "the journal is the failed attempt's");
        let (printed, journal) = export(&home, &usual, &[]);
        assert_eq!(stored_bytes(&home, &usual).await, printed.trim_end().len());
        assert_eq!(journal["seq"], 1, "the last recorded attempt is the failed one");
        assert_eq!(journal["ending"]["status"], "failed");
        assert_eq!(journal["ending"]["code"], "handler_failed");
        assert_eq!(journal["context"]["attempt"], 1);
        let shown = ok(&home, &["runs", "show", &usual]);
        assert_eq!(shown.matches("    journal: ").count(), 1, "{shown}");
        assert!(shown.contains(&format!("replay it with `host replay {usual} --attempt 1`")), "{shown}");
        let said = refused(home.run(&["replay", &usual, "--attempt", "2"]), "replay of an attempt without a journal");
        assert!(said.contains("no journal of attempt 2"), "{said}");
        // Replayed, the failure is the same one.
        let (code, shown, stderr) = replay_json(&home, &[&usual]);
        assert_eq!(code, 0, "{shown} {stderr}");
        assert_reproduced(&shown, call_names(&journal).len());
        assert_eq!(shown["replay"]["code"], "handler_failed");
        assert!(shown["replay"]["message"].as_str().unwrap_or_default().contains("failing attempt 1 of 1"), "{shown}");

        // The default keeps nothing of a success; `always` does.
        let (code, run) = run_job(&home, &m, "greeter");
        assert_eq!(code, 0, "{run}");
        assert_eq!(journal_rows(&home, &run_id(&run)).await, 0, "a succeeded attempt keeps no journal by default");
        let (code, run) = run_job(&home, &m, "everything");
        assert_eq!(code, 0, "{run}");
        let always = run_id(&run);
        assert_eq!(home.scalar(&format!(
            "SELECT COUNT(*) FROM jobhost_journals WHERE run_id = '{always}' AND seq = 1 AND replayable = 1")).await, 1);
        let (_, journal) = export(&home, &always, &[]);
        assert_eq!((journal["ending"]["status"].as_str(), journal["ending"]["outcome"].as_str()), (Some("succeeded"), Some("done")));
        let (code, shown, stderr) = replay_json(&home, &[&always]);
        assert_eq!(code, 0, "{shown} {stderr}");
        assert_reproduced(&shown, call_names(&journal).len());
        assert!(shown["replay"]["log"].as_str().unwrap().contains(&format!("hello, world, from everything (run {always}")), "{shown}");

        // Two journals in all: the usual run's failed attempt's and everything's.
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_journals").await, 2);
    }

    async fn a_journal_past_its_cap_is_kept_truncated_and_its_replay_stops_there(home) {
        let cap: usize = 2048;
        let m = home.manifest("", r#"
            [jobs.capped]
            component = "{guest:ledger}"
            record = "always"
            record_limit = "2KiB"
            payload = { rows = 200 }
            grants.db = { write = ["ledger"] }

            [jobs.whole]
            component = "{guest:ledger}"
            record = "always"
            payload = { rows = 200 }
            grants.db = { write = ["ledger"] }
        "#);
        // The cap is the journal's, never the attempt's: every row is written.
        let (code, run) = run_job(&home, &m, "capped");
        assert_eq!((code, run["status"].as_str()), (0, Some("succeeded")), "{run}");
        let capped = run_id(&run);
        assert_eq!(home.scalar(&format!("SELECT COUNT(*) FROM ledger WHERE run_id = '{capped}'")).await, 200);
        assert_eq!(home.scalar(&format!(
            "SELECT COUNT(*) FROM jobhost_journals WHERE run_id = '{capped}' AND replayable = 0")).await,
            1, "kept, not replayable");
        let (printed, journal) = export(&home, &capped, &[]);
        assert_eq!(journal["truncated"], true);
        let calls = journal["calls"].as_array().unwrap();
        let names = call_names(&journal);
        assert!(names.contains(&"db.begin".to_string()), "{names:?}");
        let executes = names.iter().filter(|n| *n == "db.transaction.execute").count();
        assert!(executes > 0 && executes < 200, "{executes} of 200 statements kept under a 2KiB cap");
        assert!(!names.contains(&"db.transaction.commit".to_string()), "nothing after the cap: {names:?}");
        assert_eq!(home.scalar(&format!("SELECT calls FROM jobhost_journals WHERE run_id = '{capped}'")).await,
            calls.len() as i64);
        // Its size is the cap's: what it holds beyond its header (context, limits,
        // ending) is the kept calls, each costing the cap its name and arguments and an
        // overhead, and encoded in JSON with base64 answers.
        let mut header = journal.clone();
        header["calls"] = json!([]);
        let header = header.to_string().len();
        let bytes = stored_bytes(&home, &capped).await;
        assert_eq!(bytes, printed.trim_end().len());
        assert!(bytes < header + 3 * cap, "{bytes} bytes kept for a cap of {cap} (header {header})");
        let shown = ok(&home, &["runs", "show", &capped]);
        assert!(shown.contains(&format!("journal: {} host calls (truncated at its cap)", calls.len())), "{shown}");

        // Its replay answers what was kept, then stops where the journal was cut.
        let before = history(&home).await;
        let (code, shown, stderr) = replay_json(&home, &[&capped]);
        // It did not reproduce the attempt, and says so by its exit code (1, as for a
        // divergence; 2 is for what cannot be replayed at all).
        assert_eq!(code, 1, "{shown} {stderr}");
        assert!(stderr.contains("passed its cap"), "{stderr}");
        let replay = &shown["replay"];
        assert_eq!(replay["stopped"]["kind"], "truncated", "{shown}");
        let answered = replay["calls_answered"].as_u64().unwrap();
        assert_eq!(replay["calls_recorded"], json!(calls.len()));
        // Every kept call with an answer is answered; the call cut off at the cap is not.
        let with_answers = calls.iter().filter(|c| c["answer"].is_string()).count() as u64;
        assert_eq!(answered, with_answers, "{shown}");
        assert_eq!(replay["same"]["outcome"], false, "a replay that stopped did not end as the attempt did: {shown}");
        assert_eq!(history(&home).await, before, "a replay wrote to the database");
        let out = home.run(&["replay", &capped]);
        assert_eq!(out.status.code(), Some(1), "{}", all_output(&out));
        assert!(text(&out.stdout).contains("stopped: the journal was truncated at its cap after call"), "{}", all_output(&out));
        assert!(text(&out.stderr).contains(&format!("this journal passed its cap ({} calls kept)", calls.len())),
            "{}", all_output(&out));
        // Exported and replayed from the file, it stops at the same place.
        let file = home.path().join("capped.journal");
        std::fs::write(&file, &printed).unwrap();
        let (_, from_file, _) = replay_json(&home, &["--from", file.to_str().unwrap(), "--job", guest("ledger").to_str().unwrap()]);
        assert_eq!(from_file["replay"]["stopped"], replay["stopped"], "{from_file}");
        assert_eq!(from_file["replay"]["calls_answered"], json!(answered), "{from_file}");
        assert_eq!(from_file["replay"]["same"]["outcome"], false, "{from_file}");

        // Under the default cap the same attempt keeps every call, and replays whole.
        let (code, run) = run_job(&home, &m, "whole");
        assert_eq!(code, 0, "{run}");
        let whole = run_id(&run);
        assert_eq!(home.scalar(&format!(
            "SELECT COUNT(*) FROM jobhost_journals WHERE run_id = '{whole}' AND replayable = 1")).await, 1);
        let (_, journal) = export(&home, &whole, &[]);
        assert!(stored_bytes(&home, &whole).await > 5 * bytes, "the cap is what kept the first one small");
        let names = call_names(&journal);
        assert_eq!(names.iter().filter(|n| *n == "db.transaction.execute").count(), 200);
        assert_eq!(names.iter().filter(|n| *n == "db.transaction.commit").count(), 1);
        let (code, shown, stderr) = replay_json(&home, &[&whole]);
        assert_eq!(code, 0, "{shown} {stderr}");
        assert_reproduced(&shown, names.len());
        assert!(shown["replay"]["log"].as_str().unwrap().contains("committed 200 rows"), "{shown}");
        assert_eq!(home.scalar(&format!("SELECT COUNT(*) FROM ledger WHERE run_id = '{whole}'")).await, 200,
            "the replay committed nothing more");
    }

    async fn the_api_shows_journals_and_timelines_to_their_tenant_only(home) {
        ok(&home, &["migrate", "--migrations", migrations().to_str().unwrap()]);
        home.exec("INSERT INTO invoices (id, customer, amount) VALUES (1, 'acme', 10), (2, 'acme', 5), (3, 'initech', 7)").await;
        let m = home.manifest("", r#"
            [jobs.totals]
            component = "{guest:totals}"
            tenant = "acme"
            record = "always"
            grants.db = { read = ["invoices"] }

            [jobs.broken]
            component = "{guest:flaky}"
            tenant = "globex"
            retries = 0
            payload = { fail_times = 1000 }
        "#);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let mut ids = Vec::new();
        for (job, status) in [("totals", "succeeded"), ("broken", "failed")] {
            let (code, kicked) = server.post(&format!("/jobs/{job}/kick")).await;
            assert_eq!(code, 202, "{kicked}");
            let id = kicked["run_id"].as_str().expect("queued").to_string();
            server.wait_runs(job, Duration::from_secs(30), |runs| {
                runs.iter().any(|r| r["run_id"] == id.as_str() && r["status"] == status)
            }).await;
            ids.push(id);
        }
        let (totals, broken) = (ids[0].clone(), ids[1].clone());

        // The run lists its journal, without its text.
        let (status, detail) = server.get(&format!("/runs/{totals}")).await;
        assert_eq!(status, 200, "{detail}");
        let journals = detail["journals"].as_array().expect("journals").clone();
        assert_eq!(journals.len(), 1, "{detail}");
        let listed = &journals[0];
        assert_eq!(listed["run_id"], totals.as_str());
        assert_eq!((listed["seq"].as_i64(), listed["job"].as_str(), listed["tenant"].as_str()), (Some(1), Some("totals"), Some("acme")));
        assert_eq!(listed["replayable"], true);
        assert!(listed["bytes"].as_i64().unwrap() > 0 && listed["recorded_at"].as_i64().unwrap() > 0, "{listed}");
        assert!(listed.get("body").is_none(), "a listing holds no journal text: {listed}");
        let calls = listed["calls"].as_i64().unwrap();
        assert!(calls >= 2, "{listed}");

        // The timeline: every call in order, numbered from 1, never its answer.
        let (status, timeline) = server.get(&format!("/runs/{totals}/attempts/1/calls")).await;
        assert_eq!(status, 200, "{timeline}");
        assert_eq!((timeline["run_id"].as_str(), timeline["attempt"].as_i64(), timeline["job"].as_str()),
            (Some(totals.as_str()), Some(1), Some("totals")));
        assert_eq!(timeline["replayable"], true);
        assert_eq!(timeline["total"], calls);
        assert_eq!(timeline["ending"]["status"], "succeeded");
        let listed_calls = timeline["calls"].as_array().unwrap();
        assert_eq!(listed_calls.len() as i64, calls);
        let mut last_at = 0;
        for (n, call) in listed_calls.iter().enumerate() {
            assert_eq!(call["n"], n + 1, "{timeline}");
            assert!(call["call"].is_string() && call["args"].is_string(), "{call}");
            assert!(call["micros"].is_u64(), "{call}");
            assert_eq!(call["code"], "ok", "{call}");
            let at = call["at"].as_u64().expect("at");
            assert!(at >= last_at, "calls out of order: {timeline}");
            last_at = at;
            assert!(call.get("answer").is_none() && call.get("digest").is_none(), "{call}");
        }
        let position = |name: &str| listed_calls.iter().position(|c| c["call"] == name);
        let (clock, query) = (position("wall-clock.now"), position("db.query"));
        assert!(clock.is_some() && query.is_some() && clock < query, "the clock is read before the query: {timeline}");
        assert!(listed_calls[query.unwrap()]["args"].as_str().unwrap().contains("FROM invoices"), "{timeline}");

        // The export is `host runs export`'s text, as a download.
        let (cli_text, cli_journal) = export(&home, &totals, &["--attempt", "1"]);
        assert_eq!(timeline["component"], cli_journal["component"]);
        let response = reqwest::Client::new()
            .get(format!("{}/runs/{totals}/attempts/1/journal", server.url))
            .bearer_auth(&server.token)
            .send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "application/json");
        assert_eq!(response.headers()["content-disposition"].to_str().unwrap(),
            format!("attachment; filename=\"{totals}-1.journal\""));
        assert_eq!(response.text().await.unwrap(), cli_text.trim_end());

        // The owning tenant sees them; another tenant's token gets 404, as if there were
        // none, on both; the operator sees every tenant's.
        let acme = home.create_token(Some("acme"));
        let globex = home.create_token(Some("globex"));
        for endpoint in ["calls", "journal"] {
            let own = format!("/runs/{totals}/attempts/1/{endpoint}");
            let (status, body) = server.get_as(Some(&acme), &own).await;
            assert_eq!(status, 200, "{own}: {body}");
            assert_eq!(body, if endpoint == "calls" { timeline.clone() } else { cli_journal.clone() });
            let (status, body) = server.get_as(Some(&globex), &own).await;
            assert_eq!((status, body["error"]["code"].as_str()), (404, Some("unknown_journal")), "{own}: {body}");
            let foreign = format!("/runs/{broken}/attempts/1/{endpoint}");
            let (status, body) = server.get_as(Some(&acme), &foreign).await;
            assert_eq!((status, body["error"]["code"].as_str()), (404, Some("unknown_journal")), "{foreign}: {body}");
            assert_eq!(server.get_as(Some(&globex), &foreign).await.0, 200, "{foreign}");
            assert_eq!(server.get(&foreign).await.0, 200, "{foreign}");
            assert_eq!(server.get_as(None, &own).await.0, 401, "{own} without a token");
        }
        let (status, body) = server.get_as(Some(&globex), &format!("/runs/{totals}")).await;
        assert_eq!((status, body["error"]["code"].as_str()), (404, Some("unknown_run")), "{body}");
        let (status, body) = server.get_as(Some(&acme), &format!("/runs/{totals}")).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["journals"].as_array().map(Vec::len), Some(1), "{body}");

        // What is no journal is 404: an attempt without one, a seq out of range or not a
        // number, a run that does not exist.
        for seq in ["0", "-1", "x", "2", "1.5", "99999999999999999999"] {
            for endpoint in ["calls", "journal"] {
                let path = format!("/runs/{totals}/attempts/{seq}/{endpoint}");
                let (status, body) = server.get(&path).await;
                assert_eq!(status, 404, "{path}: {body}");
            }
        }
        for seq in ["0", "-1", "2"] {
            let path = format!("/runs/{totals}/attempts/{seq}/calls");
            assert_eq!(server.get(&path).await.1["error"]["code"], "unknown_journal", "{path}");
        }
        let (status, body) = server.get("/runs/no-such-run/attempts/1/journal").await;
        assert_eq!((status, body["error"]["code"].as_str()), (404, Some("unknown_journal")), "{body}");
    }

    async fn retention_deletes_journals_with_their_runs(home) {
        let m = home.manifest("", r#"
            [jobs.hello]
            component = "{guest:hello}"
            record = "always"
            [jobs.broken]
            component = "{guest:flaky}"
            retries = 0
            payload = { fail_times = 1000 }
        "#);
        let mut old = Vec::new();
        for job in ["hello", "broken"] {
            let (_, run) = run_job(&home, &m, job);
            old.push(run_id(&run));
        }
        for id in &old {
            assert_eq!(journal_rows(&home, id).await, 1, "{id} keeps a journal");
        }
        // A live run, queued long ago, that has a journal (of an attempt before its
        // retry, say): retention keeps it with its run.
        let store = home.store().await;
        let live = common::queue_run(&store, "hello", "later", 86_400_000).await;
        store.close().await;
        home.exec(&format!(
            "INSERT INTO jobhost_journals (run_id, seq, job, tenant, calls, bytes, replayable, body, recorded_at) \
             SELECT '{live}', seq, job, tenant, calls, bytes, replayable, body, recorded_at \
             FROM jobhost_journals WHERE run_id = '{old}'", live = live.id, old = old[0])).await;
        // Everything so far is two hours old; then a recent run.
        home.exec("UPDATE jobhost_runs SET created_at = created_at - 7200000").await;
        let (_, recent) = run_job(&home, &m, "hello");
        let recent = run_id(&recent);
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_journals").await, 4);

        let server = home.serve(&["--manifest", m.to_str().unwrap(), "--retention", "1h",
            "--surveillance-interval", "1s"]).await;
        home.wait_for(&format!(
            "SELECT COUNT(*) FROM (SELECT COUNT(*) AS n FROM jobhost_runs WHERE id IN ('{}', '{}')) c WHERE n = 0",
            old[0], old[1]), Duration::from_secs(20)).await;
        drop(server);
        for id in &old {
            assert_eq!(journal_rows(&home, id).await, 0, "the journal of pruned run {id} is gone");
            let said = refused(home.run(&["replay", id]), "replay of a pruned run");
            assert!(said.contains("no run with id"), "{said}");
        }
        assert_eq!(journal_rows(&home, &recent).await, 1, "a recent run keeps its journal");
        assert_eq!(journal_rows(&home, &live.id).await, 1, "a live run keeps its journal");
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_journals").await, 2);
        let (code, shown, stderr) = replay_json(&home, &[&recent]);
        assert_eq!(code, 0, "{shown} {stderr}");
        assert_eq!(shown["replay"]["same"]["outcome"], true, "{shown}");
    }

    async fn replay_refuses_what_is_not_a_journal_and_writes_nothing(home) {
        let hello = guest("hello").display().to_string();
        let flaky = guest("flaky").display().to_string();
        let (code, run) = home.run_json(&["--job", &flaky, "--payload", r#"{"fail_times": 9}"#, "--retries", "0"]);
        assert_eq!(code, 1, "{run}");
        let id = run_id(&run);
        let (printed, journal) = export(&home, &id, &[]);
        let before = history(&home).await;
        assert_eq!(before[2], 1, "one journal: the failed attempt's");

        // From a file, with no database to write to: each refused in words, and none
        // opened.
        let dir = tempfile::tempdir().unwrap();
        let absent = dir.path().join("absent.db");
        let from = |name: &str, bytes: &[u8], job: Option<&str>| {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            let mut args = vec!["replay".to_string(), "--from".into(), path.display().to_string()];
            if let Some(job) = job {
                args.extend(["--job".into(), job.to_string()]);
            }
            home.host()
                .env("JOBHOST_DB", format!("sqlite://{}", absent.display()))
                .args(&args)
                .output()
                .unwrap()
        };
        let mut noise = Vec::with_capacity(4096);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..4096 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            noise.push((x >> 24) as u8);
        }
        let mut version_99 = journal.clone();
        version_99["version"] = json!(99);
        let mut other_format = journal.clone();
        other_format["format"] = json!("not-a-journal");
        let mut bad_answer = journal.clone();
        bad_answer["calls"] = json!([{"call": "wall-clock.now", "args": "()", "digest": "0000000000000000",
            "at": 0, "micros": 0, "code": "ok", "answer": "%%% not base64 %%%"}]);
        let shown_run = ok(&home, &["runs", "show", &id, "--json"]);
        let not_a_journal = "this is not a jobhost journal";
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            ("noise.bin", noise, not_a_journal),
            ("empty.journal", Vec::new(), not_a_journal),
            ("run.json", shown_run.into_bytes(), not_a_journal),
            ("array.json", b"[1, 2, 3]".to_vec(), not_a_journal),
            ("other.journal", other_format.to_string().into_bytes(), not_a_journal),
            ("half.journal", printed.as_bytes()[..printed.len() / 2].to_vec(), not_a_journal),
            ("answer.journal", bad_answer.to_string().into_bytes(), "the journal is damaged"),
            ("v99.journal", version_99.to_string().into_bytes(), "the journal is of version 99; this host reads version 1"),
        ];
        for (name, bytes, expected) in cases {
            let said = refused(from(name, &bytes, Some(&hello)), name);
            assert!(said.contains(expected), "{name}: {said}");
            assert!(said.contains(name), "{name}: the message names the file: {said}");
        }
        let missing = dir.path().join("missing.journal");
        let out = home.host()
            .env("JOBHOST_DB", format!("sqlite://{}", absent.display()))
            .args(["replay", "--from", missing.to_str().unwrap(), "--job", &hello])
            .output().unwrap();
        let said = refused(out, "a file that does not exist");
        assert!(said.contains("cannot read"), "{said}");
        // A sound journal needs its component when it comes from a file.
        let said = refused(from("sound.journal", printed.as_bytes(), None), "a file without --job");
        assert!(said.contains("give it with --job"), "{said}");
        // ... and with it, it replays (from the same file, still without a database).
        let out = from("sound.journal", printed.as_bytes(), Some(&flaky));
        assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
        // A journal's text is anyone's: escape sequences in it reach no terminal.
        let mut escaping = journal.clone();
        escaping["job"] = json!("\u{1b}]0;owned\u{7}job");
        escaping["run_id"] = json!("\u{1b}[2Jrun");
        escaping["ending"]["code"] = json!("\u{1b}[31mcode");
        let out = from("escaping.journal", escaping.to_string().as_bytes(), Some(&flaky));
        assert!(!out.stdout.contains(&0x1b) && !out.stderr.contains(&0x1b), "{}", all_output(&out));
        assert!(text(&out.stdout).contains("replay of run"), "{}", all_output(&out));
        assert!(text(&out.stdout).contains("failed: handler_failed"), "{}", all_output(&out));
        assert!(!absent.exists(), "host replay --from opened a database");

        // From the database: an unknown run, or an attempt without a journal.
        let said = refused(home.run(&["replay", "no-such-run"]), "replay of an unknown run");
        assert!(said.contains("no run with id \"no-such-run\""), "{said}");
        let said = refused(home.run(&["replay", "no-such-run", "--json"]), "replay --json of an unknown run");
        assert!(said.contains("no run with id"), "{said}");
        let said = refused(home.run(&["replay", &id, "--attempt", "7"]), "replay of an attempt without a journal");
        assert!(said.contains("no journal of attempt 7"), "{said}");
        let said = refused(home.run(&["runs", "export", "no-such-run"]), "export of an unknown run");
        assert!(said.contains("has no journal"), "{said}");
        // A run and a file at once is a usage error too.
        let out = home.run(&["replay", &id, "--from", missing.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{}", all_output(&out));
        assert_eq!(history(&home).await, before, "a refused replay wrote something");
        // The stored journal a host cannot read (another version's) is refused the same.
        home.exec(&format!(
            "UPDATE jobhost_journals SET body = '{}' WHERE run_id = '{id}'",
            version_99.to_string().replace('\'', "''"))).await;
        let said = refused(home.run(&["replay", &id]), "replay of a stored journal of version 99");
        assert!(said.contains("version 99"), "{said}");
    }

    async fn an_edited_journal_is_refused_or_diverges_and_never_replays_the_same(home) {
        let flaky = guest("flaky").display().to_string();
        let (code, run) = home.run_json(&["--job", &flaky, "--payload", r#"{"fail_times": 9}"#, "--retries", "0"]);
        assert_eq!(code, 1, "{run}");
        let id = run_id(&run);
        let (printed, journal) = export(&home, &id, &[]);
        assert!(journal["seal"].as_str().is_some_and(|s| s.len() == 64), "{journal}");
        let before = history(&home).await;

        let dir = tempfile::tempdir().unwrap();
        let replay_file = |name: &str, journal: &str, verify: bool| {
            let path = dir.path().join(name);
            std::fs::write(&path, journal).unwrap();
            let mut args = vec!["replay", "--from", path.to_str().unwrap(), "--job", &flaky];
            if verify {
                args.push("--verify");
            }
            home.run(&args)
        };
        // As kept, it is verified against the installation's key.
        let out = replay_file("sound.journal", &printed, true);
        assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
        assert!(text(&out.stdout).contains("the original attempt: handler_failed; outcome the same"), "{}", all_output(&out));
        assert!(!all_output(&out).contains("unverified"), "{}", all_output(&out));

        let edited = |edit: &dyn Fn(&mut Value)| {
            let mut journal = journal.clone();
            edit(&mut journal);
            journal.to_string()
        };
        let code_edited = edited(&|j| j["ending"]["code"] = json!("timeout"));
        let timeout_edited = edited(&|j| j["limits"]["timeout_ms"] = json!(1));
        let environment_edited = edited(&|j| j["environment"] = json!([["HOME", "/root"]]));
        let appended = edited(&|j| j["calls"].as_array_mut().unwrap().push(json!({
            "call": "wall-clock.now", "args": "()", "digest": "0000000000000000",
            "at": 0, "micros": 0, "code": "ok", "answer": "AAAA"})));
        let broken = "the journal's seal does not match this installation's key";
        for (name, journal) in [("code", &code_edited), ("timeout", &timeout_edited), ("calls", &appended)] {
            let said = refused(replay_file(name, journal, true), name);
            assert!(said.contains(broken), "{name}: {said}");
        }
        // The host gives a guest no environment: a journal that says otherwise is refused,
        // checked or not.
        for verify in [true, false] {
            let said = refused(replay_file("environment", &environment_edited, verify), "environment");
            assert!(said.contains("gives the guest an environment, arguments or stdin"), "{said}");
        }
        // Unchecked, a file's replay says it is unverified; a call the component never
        // makes is a divergence all the same.
        let out = replay_file("calls", &appended, false);
        let said = all_output(&out);
        assert_eq!(out.status.code(), Some(1), "{said}");
        assert!(said.contains("note: unverified"), "{said}");
        assert!(said.contains("; the original made 1 more call\n"), "{said}");
        assert!(said.contains("(as the journal says, unverified): handler_failed; outcome different"), "{said}");
        let out = replay_file("code", &code_edited, false);
        let said = all_output(&out);
        assert!(said.contains("note: unverified") && said.contains("(as the journal says, unverified): timeout"), "{said}");

        // Edited where the host keeps it, it is refused the same.
        for (name, journal) in [("code", &code_edited), ("timeout", &timeout_edited), ("calls", &appended)] {
            home.exec(&format!(
                "UPDATE jobhost_journals SET body = '{}' WHERE run_id = '{id}'",
                journal.replace('\'', "''"))).await;
            let said = refused(home.run(&["replay", &id]), name);
            assert!(said.contains(broken), "{name}: {said}");
        }
        let mut unsealed = journal.clone();
        unsealed.as_object_mut().unwrap().remove("seal");
        home.exec(&format!(
            "UPDATE jobhost_journals SET body = '{}' WHERE run_id = '{id}'",
            unsealed.to_string().replace('\'', "''"))).await;
        let (code, shown, stderr) = replay_json(&home, &[&id]);
        assert_eq!((code, shown["sealed"].as_str()), (0, Some("unsealed")), "{shown}");
        assert!(stderr.contains("note: unverified: the journal has no seal"), "{stderr}");
        home.exec(&format!(
            "UPDATE jobhost_journals SET body = '{}' WHERE run_id = '{id}'",
            printed.trim().replace('\'', "''"))).await;
        let (code, shown, _) = replay_json(&home, &[&id]);
        assert_eq!((code, shown["sealed"].as_str()), (0, Some("verified")), "{shown}");
        assert_eq!(history(&home).await, before, "a replay wrote something");
    }
}
