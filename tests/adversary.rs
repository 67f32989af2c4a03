//! The adversarial suite: a hostile guest (`tests/guests/adversary`) tries, one mode at a
//! time, what a tenant's code might do to the host — exhaust its stack right at a host
//! call, panic with a transaction open, hand over arguments past every bound, hold on to
//! host resources, write escape sequences, NUL and invalid text wherever text goes back,
//! ask the database for a result far larger than its memory cap. Each must end with its
//! fixed code, leave nothing half-recorded or locked, keep the host's own memory bounded,
//! and leave the host serving other jobs.

use crate::common;

use common::{Backend, Home, guest, migrations};
use serde_json::{Value, json};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

fn adversary() -> String {
    guest("adversary").display().to_string()
}

/// Runs `host` to completion and measures its peak resident memory (from the kernel's
/// accounting of the waited-for child).
#[expect(
    clippy::zombie_processes,
    reason = "the child is reaped by wait4, which also reports its peak memory"
)]
fn run_measured(mut cmd: Command) -> (i32, String, u64) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn host");
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        stdout.read_to_string(&mut text).unwrap();
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        stderr.read_to_string(&mut text).unwrap();
        text
    });
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(waited, child.id() as i32);
    let stdout = out.join().unwrap();
    let stderr = err.join().unwrap();
    assert!(libc::WIFEXITED(status), "host died: {stderr}");
    (
        libc::WEXITSTATUS(status),
        format!("{stdout}{stderr}"),
        usage.ru_maxrss as u64 * 1024,
    )
}

fn json_of(text: &str) -> Value {
    text.lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON in {text}"))
}

/// `wasi:sockets` loads (CPython's libc imports it) and gives nothing: no connection
/// reaches a listener, no UDP socket is made, no name is looked up, and the network
/// handles a guest may hoard are bounded like any other resource.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_gets_no_socket_whatever_its_libc_imports() {
    let home = Home::new(Backend::Sqlite).await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let target = listener.local_addr().unwrap().to_string();
    let payload = json!({ "mode": "sockets", "target": target }).to_string();
    let (exit, run) = home.run_json(&[
        "--job",
        &adversary(),
        "--payload",
        &payload,
        "--grant",
        "db.read=ledger",
    ]);
    assert_eq!(
        (exit, run["code"].as_str()),
        (1, Some("handler_failed")),
        "{run}"
    );
    let error = run["error"].as_str().unwrap();
    assert!(
        error.starts_with("sockets refused: tcp PermissionDenied, udp PermissionDenied, lookup "),
        "{error}"
    );
    let nobody = listener.accept().map(drop).unwrap_err();
    assert_eq!(nobody.kind(), std::io::ErrorKind::WouldBlock);
    let (exit, run) = home.run_json(&[
        "--job",
        &adversary(),
        "--payload",
        r#"{"mode":"networks"}"#,
        "--grant",
        "db.read=ledger",
    ]);
    assert_eq!(
        (exit, run["code"].as_str()),
        (1, Some("resource_limit")),
        "{run}"
    );
}

/// A defer of zero is refused with its own code, never retried; a run that defers for
/// ever, in a job that sets no `max_defers`, ends at the default cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_defer_is_refused_and_endless_defers_end_at_the_default_cap() {
    let home = Home::new(Backend::Sqlite).await;
    let (exit, run) = home.run_json(&[
        "--job",
        &adversary(),
        "--payload",
        r#"{"mode":"defer","defer_ms":0}"#,
        "--grant",
        "db.read=ledger",
        "--retries",
        "3",
        "--backoff",
        "10ms",
    ]);
    assert_eq!(
        (exit, run["code"].as_str(), run["attempts"].as_i64()),
        (1, Some("invalid_defer"), Some(1)),
        "{run}"
    );
    assert_eq!(run["defers"], 0, "{run}");
    assert!(
        run["error"].as_str().unwrap().starts_with("defer(0 ms): "),
        "{run}"
    );

    let (exit, run) = home.run_json(&[
        "--job",
        &adversary(),
        "--payload",
        r#"{"mode":"defer","defer_ms":1}"#,
        "--grant",
        "db.read=ledger",
    ]);
    let cap = i64::from(jobhost::rules::job::DEFAULT_MAX_DEFERS);
    assert_eq!(
        (exit, run["code"].as_str(), run["defers"].as_i64()),
        (1, Some("too_many_defers"), Some(cap)),
        "{run}"
    );
    // Every defer was a pass of its own, and the one past the cap ended the run.
    assert_eq!(run["passes"].as_i64(), Some(cap + 1), "{run}");
}

on_every_backend! {
    async fn each_hostile_mode_ends_with_its_fixed_code(home) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        let cases: &[(&str, &str, Option<&str>)] = &[
            ("stack-overflow", "trap", None),
            ("panic-in-transaction", "trap", None),
            ("huge-sql", "handler_failed", Some("invalid call: statement-too-long")),
            ("huge-param", "handler_failed", Some("invalid call: value-too-large")),
            ("many-params", "handler_failed", Some("invalid call: too-many-params")),
            ("params-total", "handler_failed", Some("invalid call: params-too-large")),
            ("aliased-params", "trap", None),
            ("random", "trap", None),
            ("handles", "resource_limit", None),
            ("huge-cursor", "invalid_outcome", None),
        ];
        for (mode, code, error) in cases {
            let payload = json!({ "mode": mode }).to_string();
            let (exit, run) = home.run_json(&[
                "--job", &adversary(), "--payload", &payload, "--grant", "db.write=ledger",
                "--memory", "64MiB", "--timeout", "20s",
            ]);
            assert_eq!((exit, run["code"].as_str()), (1, Some(*code)), "{mode}: {run}");
            if let Some(error) = error {
                assert_eq!(run["error"], *error, "{mode}");
            }
            // A trap says what trapped and where in the guest, by the guest's own names, in
            // a bounded number of lines: a recursion is one line, a panic's runtime another.
            let error = run["error"].as_str().unwrap_or_default();
            let frames = match *mode {
                "stack-overflow" => Some("\nguest backtrace:\n  0-"),
                "panic-in-transaction" => Some(": <adversary::Adversary as jobhost_guest::Job>::run\n"),
                _ => None,
            };
            if let Some(frames) = frames {
                assert!(error.contains(frames) && error.lines().count() <= 20, "{mode}: {error}");
            }
            if *mode == "stack-overflow" {
                assert!(error.contains(": adversary::dive"), "{error}");
            }
            // A panic is what trapped: its message and place, then the panic runtime's
            // frames in one line, then the job's.
            if *mode == "panic-in-transaction" {
                assert!(
                    error.starts_with("panicked at tests/guests/adversary/src/lib.rs:88:17: a panic with the transaction open\nguest backtrace:\n  0-")
                        && error.contains(": the panic runtime\n"),
                    "{error}"
                );
            }
        }
        // The transaction the panic left open was rolled back, and holds nothing.
        assert_eq!(home.scalar("SELECT COUNT(*) FROM ledger").await, 0);
        let (exit, run) = home.run_json(&[
            "--job", &guest("ledger").display().to_string(), "--payload", r#"{"rows":2}"#,
            "--grant", "db.write=ledger", "--timeout", "5s",
        ]);
        assert_eq!(exit, 0, "{run}");
        // A log line far over the bound is cut, not refused, and not held whole.
        let (exit, run) = home.run_json(&["--job", &adversary(), "--payload", r#"{"mode":"huge-log"}"#, "--grant", "db.read=ledger"]);
        assert_eq!(exit, 0, "{run}");
        let shown = json_of(&String::from_utf8_lossy(
            &home.run(&["runs", "show", run["run_id"].as_str().unwrap(), "--json"]).stdout,
        ));
        let attempt = &shown["attempt_records"][0];
        assert_eq!(attempt["log_truncated"], true);
        assert!(attempt["log"].as_str().unwrap().len() <= 64 << 10);
        // A cursor with an escaped NUL is JSON like any other and survives the round trip.
        let (exit, run) = home.run_json(&["--job", &adversary(), "--payload", r#"{"mode":"nul-cursor"}"#, "--grant", "db.read=ledger"]);
        assert_eq!((exit, run["passes"].as_i64()), (0, Some(2)), "{run}");
    }

    async fn a_log_of_nul_and_invalid_bytes_is_stored_within_its_cap(home) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        let (exit, run) = home.run_json(&["--job", &adversary(), "--payload", r#"{"mode":"nul-flood"}"#, "--grant", "db.read=ledger"]);
        assert_eq!(exit, 0, "{run}");
        let shown = json_of(&String::from_utf8_lossy(
            &home.run(&["runs", "show", run["run_id"].as_str().unwrap(), "--json"]).stdout,
        ));
        let attempt = &shown["attempt_records"][0];
        let log = attempt["log"].as_str().unwrap();
        assert!(log.len() <= 64 << 10, "{} bytes stored", log.len());
        assert!(log.starts_with('\u{2400}'), "{:?}", &log[..12]);
        assert_eq!(attempt["log_truncated"], true);
    }

    async fn a_run_of_many_passes_shows_only_its_last_attempts(home) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        let (exit, run) = home.run_json(&["--job", &adversary(), "--payload", r#"{"mode":"passes","passes":1003}"#, "--grant", "db.read=ledger"]);
        assert_eq!((exit, run["passes"].as_i64()), (0, Some(1003)), "{run}");
        let id = run["run_id"].as_str().unwrap();
        let shown = json_of(&String::from_utf8_lossy(&home.run(&["runs", "show", id, "--json"]).stdout));
        let attempts = shown["attempt_records"].as_array().unwrap();
        assert_eq!(attempts.len(), 100);
        let seqs: Vec<i64> = attempts.iter().map(|a| a["seq"].as_i64().unwrap()).collect();
        assert_eq!(seqs, (904..=1003).collect::<Vec<_>>());
        assert_eq!(shown["earlier_attempts_omitted"], true);
        // The database keeps every attempt (what quotas sum), and the logs of the last 1 000.
        let attempts = format!("SELECT COUNT(*) FROM jobhost_attempts WHERE run_id = '{id}'");
        assert_eq!(home.scalar(&attempts).await, 1003);
        let logged = format!("SELECT MIN(seq) FROM jobhost_attempts WHERE run_id = '{id}' AND log <> ''");
        assert_eq!(home.scalar(&logged).await, 4);
        let emptied = format!("SELECT COUNT(*) FROM jobhost_attempts WHERE run_id = '{id}' AND log = '' AND log_truncated = 1");
        assert_eq!(home.scalar(&emptied).await, 3);
        let (_, short) = home.run_json(&["--job", &adversary(), "--instance", "short", "--payload", r#"{"mode":"passes","passes":2}"#, "--grant", "db.read=ledger"]);
        let shown = json_of(&String::from_utf8_lossy(
            &home.run(&["runs", "show", short["run_id"].as_str().unwrap(), "--json"]).stdout,
        ));
        assert_eq!(shown["attempt_records"].as_array().unwrap().len(), 2);
        assert_eq!(shown["earlier_attempts_omitted"], false);
    }

    async fn nul_and_invalid_text_are_recorded_safely(home) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        let (exit, run) = home.run_json(&["--job", &adversary(), "--payload", r#"{"mode":"nul"}"#, "--grant", "db.read=ledger"]);
        assert_eq!((exit, run["status"].as_str(), run["code"].as_str()), (1, Some("failed"), Some("handler_failed")), "{run}");
        assert_eq!(run["error"], "a NUL \u{2400} in the error");
        let shown = json_of(&String::from_utf8_lossy(
            &home.run(&["runs", "show", run["run_id"].as_str().unwrap(), "--json"]).stdout,
        ));
        let log = shown["attempt_records"][0]["log"].as_str().unwrap().to_string();
        assert!(log.contains("a NUL \u{2400} in a log line"), "{log}");
        assert!(log.contains("stdout \u{2400} and invalid UTF-8 \u{fffd}\u{fffd}"), "{log}");
        // Nothing is left running or holding the lease.
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE status = 'running'").await, 0);
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_leases WHERE holder IS NOT NULL").await, 0);
    }

    async fn an_ending_the_database_refuses_is_recorded_as_a_fixed_failure(home) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        // The database refuses any attempt row carrying this text (as it would a value it
        // cannot store): the ending is recorded again as `record_failed`, without the
        // guest's output, and the run ends rather than staying `running`.
        let refuse = match home.backend {
            common::Backend::Sqlite => "CREATE TRIGGER refuse_record BEFORE INSERT ON jobhost_attempts \
                WHEN NEW.log LIKE '%refuse-this-record%' BEGIN SELECT RAISE(ABORT, 'refused'); END",
            common::Backend::Postgres => "CREATE FUNCTION refuse_record() RETURNS trigger LANGUAGE plpgsql AS $$ \
                BEGIN IF NEW.log LIKE '%refuse-this-record%' THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$; \
                CREATE TRIGGER refuse_record BEFORE INSERT OR UPDATE ON jobhost_attempts \
                FOR EACH ROW EXECUTE FUNCTION refuse_record()",
        };
        home.exec(refuse).await;
        let hello = guest("hello").display().to_string();
        let (exit, run) = home.run_json(&["--job", &hello, "--payload", r#"{"name":"refuse-this-record"}"#]);
        assert_eq!((exit, run["status"].as_str(), run["code"].as_str()), (1, Some("failed"), Some("record_failed")), "{run}");
        let shown = json_of(&String::from_utf8_lossy(
            &home.run(&["runs", "show", run["run_id"].as_str().unwrap(), "--json"]).stdout,
        ));
        let attempts = shown["attempt_records"].as_array().unwrap();
        assert_eq!(attempts.len(), 1, "{shown}");
        assert_eq!((attempts[0]["code"].as_str(), attempts[0]["log"].as_str()), (Some("record_failed"), Some("")), "{shown}");
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE status IN ('queued', 'running')").await, 0);
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_leases WHERE holder IS NOT NULL").await, 0);
        // Other runs are recorded as ever.
        let (exit, run) = home.run_json(&["--job", &hello, "--payload", r#"{"name":"operator"}"#]);
        assert_eq!((exit, run["status"].as_str()), (0, Some("succeeded")), "{run}");
    }

    async fn guest_text_cannot_drive_the_operators_terminal(home) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        let out = home.run(&["run", "--job", &adversary(), "--payload", r#"{"mode":"escapes"}"#, "--grant", "db.read=ledger"]);
        let printed = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(!printed.contains('\u{1b}') && !printed.contains('\r') && !printed.contains('\u{202e}'), "{printed:?}");
        assert!(printed.contains("\\u{1b}[2J"), "{printed}");
        let listed = home.run(&["runs", "list", "--json"]);
        let id = json_of(&String::from_utf8_lossy(&listed.stdout))[0]["run_id"].as_str().unwrap().to_string();
        let shown = home.run(&["runs", "show", &id]);
        let text = String::from_utf8_lossy(&shown.stdout);
        assert!(!text.contains('\u{1b}') && !text.contains('\u{7}'), "{text:?}");
        assert!(text.contains("erased the line above"), "{text}");
    }

    async fn a_huge_result_is_refused_before_the_host_holds_it(home) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        let huge = match home.backend {
            common::Backend::Sqlite => "SELECT randomblob(400000000)",
            common::Backend::Postgres => "SELECT repeat('x', 400000000)",
        };
        let measure = |sql: &str| {
            let payload = json!({ "mode": "sql", "sql": [sql] }).to_string();
            let mut cmd = home.host();
            cmd.args(["run", "--json", "--job", &adversary(), "--payload", &payload,
                      "--grant", "db.read=ledger", "--memory", "64MiB", "--timeout", "30s"]);
            run_measured(cmd)
        };
        let (_, _, baseline) = measure("SELECT 1");
        let (exit, out, peak) = measure(huge);
        let run = json_of(&out);
        assert_eq!(exit, 1, "{out}");
        assert!(
            run["error"] == "invalid call: value-too-large" || run["error"] == "invalid call: result-too-large",
            "{run}"
        );
        eprintln!("peak RSS: {} MiB for SELECT 1, {} MiB for {huge}", baseline >> 20, peak >> 20);
        assert!(peak < baseline + (48 << 20), "host RSS reached {} MiB (baseline {} MiB)", peak >> 20, baseline >> 20);
        // Many rows, each under every bound, stop at the result's bound.
        let rows = "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 100000) \
                    SELECT i, 'yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy' FROM c";
        let (exit, out, _) = measure(rows);
        assert_eq!(exit, 1);
        assert_eq!(json_of(&out)["error"], "invalid call: result-too-large");
        // A result refused at its bound is not read to its end: a statement that would
        // stream a billion rows ends with the refusal, not at the attempt's deadline.
        let endless = "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 1000000000) \
                       SELECT i FROM c";
        let started = std::time::Instant::now();
        let (exit, out, _) = measure(endless);
        let took = started.elapsed();
        assert_eq!((exit, json_of(&out)["error"].as_str()), (1, Some("invalid call: result-too-large")), "{out}");
        assert!(took < Duration::from_secs(20), "the refused result was drained for {took:?}");
    }
}

/// While a hostile guest does its worst, again and again, another job keeps running on
/// schedule on the same host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_guest_does_not_stop_the_host_serving_others() {
    let home = common::Home::new(common::Backend::Sqlite).await;
    let modes = [
        "stack-overflow",
        "handles",
        "huge-log",
        "nul",
        "escapes",
        "panic-in-transaction",
    ];
    let mut jobs = String::from(
        "[jobs.steady]\ncomponent = \"{guest:hello}\"\nschedule = \"* * * * * *\"\ntimeout = \"5s\"\n",
    );
    for mode in modes {
        jobs.push_str(&format!(
            "[jobs.{mode}]\ncomponent = \"{{guest:adversary}}\"\nschedule = \"* * * * * *\"\n\
             timeout = \"5s\"\nmemory = \"64MiB\"\npayload = {{ mode = \"{mode}\" }}\n\
             grants.db = {{ write = [\"ledger\"] }}\n"
        ));
    }
    let manifest = home.manifest("", &jobs);
    let server = home
        .serve(&["--manifest", manifest.to_str().unwrap(), "--workers", "4"])
        .await;
    let runs = server
        .wait_runs("steady", Duration::from_secs(30), |runs| {
            runs.iter().filter(|r| r["status"] == "succeeded").count() >= 6
        })
        .await;
    assert!(runs.iter().all(|r| r["status"] != "failed"), "{runs:#?}");
    for mode in modes {
        let theirs = server
            .wait_runs(mode, Duration::from_secs(30), |runs| {
                runs.iter()
                    .any(|r| r["status"] == "failed" || r["status"] == "succeeded")
            })
            .await;
        assert!(!theirs.is_empty());
    }
    let (status, _) = server.get("/healthz").await;
    assert_eq!(status, 200);
}

/// A component whose one function is `repeats` additions: small to hand over, costly to
/// compile (the compiler's memory and time grow with the function).
fn costly_to_compile(repeats: usize) -> Vec<u8> {
    let body = "local.get 0 i32.const 1 i32.add local.set 0\n".repeat(repeats);
    let text =
        format!("(component (core module (func (param i32) (result i32) {body} local.get 0)))");
    wat::parse_str(text).expect("a valid component")
}

#[tokio::test]
async fn a_component_costly_to_compile_is_refused_at_its_limits_and_the_host_serves_on() {
    let home = common::Home::new(common::Backend::Sqlite).await;
    let hello = std::fs::read(guest("hello")).expect("hello guest");
    let costly = home.path().join("costly.wasm");
    std::fs::write(&costly, &hello).expect("write");
    let jobs = format!(
        "[jobs.steady]\ncomponent = \"{{guest:hello}}\"\ntimeout = \"5s\"\n\
         [jobs.costly]\ncomponent = \"{}\"\ntimeout = \"5s\"\n",
        costly.display()
    );
    let manifest = home.manifest("", &jobs);
    let manifest = manifest.to_str().unwrap();

    // `check` compiles in a child under the limits, and says which one was passed; an
    // invalid component is refused with the compiler's reason.
    let costly_bytes = costly_to_compile(150_000);
    let invalid: &[u8] = b"\0asm\x0d\x00\x01\x00\xff";
    for (limits, component, refusal) in [
        (
            &["--compile-memory", "64MiB"][..],
            &costly_bytes[..],
            "cannot be compiled: compiling it needs more memory than the host's limit (67108864 bytes)",
        ),
        (
            &["--compile-timeout", "1ms"][..],
            &costly_bytes[..],
            "compiling it takes longer than the host's limit (1ms)",
        ),
        (&[][..], invalid, "is not a valid component"),
    ] {
        std::fs::write(&costly, component).expect("write");
        let mut args = limits.to_vec();
        args.extend(["check", "--manifest", manifest]);
        let out = home.run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(refusal), "{stderr}");
    }
    // The compiler's environment is not the host's: an artifact still loads whatever
    // the host's own environment says of the engine.
    std::fs::write(&costly, &hello).expect("write");
    let out = home
        .host()
        .env("WASMTIME_BACKTRACE_DETAILS", "1")
        .args(["check", "--manifest", manifest])
        .output()
        .expect("run host");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // `serve` keeps the component it has when a changed one cannot be compiled, and
    // keeps running jobs.
    let server = home
        .serve(&["--compile-memory", "64MiB", "--manifest", manifest])
        .await;
    let written = home.path().join("costly.wasm.new");
    std::fs::write(&written, &costly_bytes).expect("write");
    std::fs::rename(&written, &costly).expect("rename");
    let start = std::time::Instant::now();
    while !home
        .server_logs()
        .contains("needs more memory than the host's limit")
    {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{}",
            home.server_logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        home.server_logs().contains("changed component refused"),
        "{}",
        home.server_logs()
    );
    for job in ["steady", "costly"] {
        let (status, _) = server.post(&format!("/jobs/{job}/kick")).await;
        assert_eq!(status, 202);
        server
            .wait_runs(job, Duration::from_secs(30), |runs| {
                runs.iter().any(|r| r["status"] == "succeeded")
            })
            .await;
    }
}
