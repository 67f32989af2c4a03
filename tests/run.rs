//! `host run` end to end: the real binary runs real guests on a real database.

use crate::common;

use common::{Backend, guest, migrations};
use serde_json::Value;
use std::time::{Duration, Instant};

fn path(name: &str) -> String {
    guest(name).display().to_string()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

on_every_backend! {
    async fn hello_succeeds_and_is_recorded(home) {
        let (code, run) = home.run_json(&["--job", &path("hello"), "--payload", r#"{"name":"ops"}"#]);
        assert_eq!(code, 0, "{run}");
        assert_eq!(run["status"], "succeeded");
        assert_eq!(run["job"], "hello");
        assert_eq!(run["attempts"], 1);
        assert_eq!(run["code"], Value::Null);
        let id = run["run_id"].as_str().unwrap();
        let out = home.run(&["runs", "show", id, "--json"]);
        let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
        let attempt = &shown["attempt_records"][0];
        assert_eq!(attempt["status"], "succeeded");
        assert_eq!(attempt["outcome"], "done");
        assert!(attempt["log"].as_str().unwrap().contains("[info] hello, ops"), "{attempt}");
        assert!(attempt["fuel_used"].as_i64().unwrap() > 0);
        assert!(attempt["peak_memory"].as_i64().unwrap() > 0);
        let listed: Value = serde_json::from_slice(&home.run(&["runs", "list", "--json"]).stdout).unwrap();
        assert_eq!(listed[0]["run_id"], id);
    }

    async fn flaky_succeeds_within_its_retries_and_fails_without_them(home) {
        let flaky = path("flaky");
        let (code, run) = home.run_json(&[
            "--job", &flaky, "--payload", r#"{"fail_times":2}"#, "--retries", "2", "--backoff", "10ms",
        ]);
        assert_eq!((code, &run["status"], &run["attempts"]), (0, &"succeeded".into(), &3.into()), "{run}");
        let (code, run) = home.run_json(&[
            "--job", &flaky, "--payload", r#"{"fail_times":2}"#, "--retries", "1", "--backoff", "10ms",
        ]);
        assert_eq!(code, 1);
        assert_eq!(run["status"], "failed");
        assert_eq!(run["attempts"], 2);
        assert_eq!(run["code"], "handler_failed");
        assert_eq!(run["error"], "flaky: failing attempt 2 of 2");
    }

    async fn a_retry_renews_the_lease_to_a_new_generation(home) {
        let (_, run) = home.run_json(&[
            "--job", &path("flaky"), "--payload", r#"{"fail_times":2}"#, "--retries", "2", "--backoff", "10ms",
        ]);
        let id = run["run_id"].as_str().unwrap();
        let shown: Value = serde_json::from_slice(&home.run(&["runs", "show", id, "--json"]).stdout).unwrap();
        let generations: Vec<i64> = shown["attempt_records"].as_array().unwrap().iter()
            .map(|a| a["generation"].as_i64().unwrap()).collect();
        assert_eq!(generations.len(), 3);
        assert!(generations.windows(2).all(|w| w[1] == w[0] + 1), "{generations:?}");
    }

    async fn spin_is_stopped_at_its_deadline(home) {
        let started = Instant::now();
        let (code, run) = home.run_json(&["--job", &path("spin"), "--timeout", "1s"]);
        let took = started.elapsed();
        assert_eq!(code, 1);
        assert_eq!(run["code"], "timeout");
        assert!(took < Duration::from_secs(5), "took {took:?}");
        // The deadline counts from the claim, and the run's start is stamped in the claim's
        // own transaction: on a loaded machine the claim's latency comes off the second.
        let ran = run["duration_ms"].as_i64().unwrap();
        assert!((500..5000).contains(&ran), "ran {ran} ms");
        // Fuel stops it too, deterministically.
        let (_, run) = home.run_json(&["--job", &path("spin"), "--fuel", "5000000"]);
        assert_eq!(run["code"], "out_of_fuel");
    }

    async fn hog_hits_its_memory_cap(home) {
        let (code, run) = home.run_json(&["--job", &path("hog"), "--memory", "32MiB"]);
        assert_eq!(code, 1);
        assert_eq!(run["code"], "memory_limit");
        let id = run["run_id"].as_str().unwrap();
        let shown: Value = serde_json::from_slice(&home.run(&["runs", "show", id, "--json"]).stdout).unwrap();
        let peak = shown["attempt_records"][0]["peak_memory"].as_i64().unwrap();
        assert!(peak <= 32 << 20 && peak > 16 << 20, "peak {peak}");
    }

    async fn a_component_built_against_contract_0_1_0_still_loads_and_runs(home) {
        // Built from `examples/ledger` before the contract grew to 0.1.1 (files, links):
        // kept as a file, never rebuilt.
        let prebuilt = common::workspace().join("tests/prebuilt/ledger-0.1.0.wasm");
        let m = migrations();
        let (code, run) = home.run_json(&[
            "--job", prebuilt.to_str().unwrap(), "--name", "old-ledger", "--payload", r#"{"rows":4}"#,
            "--grant", "db.write=ledger", "--migrations", m.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{run}");
        let id = run["run_id"].as_str().unwrap();
        assert_eq!(home.scalar(&format!("SELECT COUNT(*) FROM ledger WHERE run_id = '{id}'")).await, 4);
    }

    async fn ledger_commits_its_rows(home) {
        let m = migrations();
        let (code, run) = home.run_json(&[
            "--job", &path("ledger"), "--payload", r#"{"rows":7}"#, "--grant", "db.write=ledger",
            "--migrations", m.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{run}");
        let id = run["run_id"].as_str().unwrap();
        assert_eq!(home.scalar(&format!("SELECT COUNT(*) FROM ledger WHERE run_id = '{id}'")).await, 7);
    }

    async fn ledger_past_its_deadline_commits_nothing(home) {
        let m = migrations();
        let (code, run) = home.run_json(&[
            "--job", &path("ledger"), "--payload", r#"{"rows":5,"wait_ms":3000}"#,
            "--grant", "db.write=ledger", "--timeout", "1s", "--migrations", m.to_str().unwrap(),
        ]);
        assert_eq!(code, 1);
        assert_eq!(run["code"], "timeout");
        assert_eq!(home.scalar("SELECT COUNT(*) FROM ledger").await, 0);
    }

    async fn a_superseded_generation_commits_nothing(home) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        // The guest waits before it opens its transaction; meanwhile the lease moves on.
        let child = home.spawn(&[
            "run", "--json", "--job", &path("ledger"), "--payload",
            r#"{"rows":5,"wait_ms":2000,"wait_at":"begin"}"#, "--grant", "db.write=ledger",
            "--timeout", "20s",
        ]);
        home.wait_for(
            "SELECT COUNT(*) FROM jobhost_leases WHERE job = 'ledger' AND holder IS NOT NULL",
            Duration::from_secs(20),
        ).await;
        assert_eq!(home.exec("UPDATE jobhost_leases SET generation = generation + 1 WHERE job = 'ledger'").await, 1);
        let out = tokio::task::spawn_blocking(move || child.wait_with_output()).await.unwrap().unwrap();
        let run: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(run["code"], "lease_lost", "{run}");
        assert_eq!(home.scalar("SELECT COUNT(*) FROM ledger").await, 0);
        // One ending, one code: the attempt says what the run says.
        let shown: Value = serde_json::from_slice(
            &home.run(&["runs", "show", run["run_id"].as_str().unwrap(), "--json"]).stdout,
        ).unwrap();
        assert_eq!(shown["attempt_records"][0]["code"], "lease_lost", "{shown}");
    }

    async fn a_run_left_waiting_by_a_killed_host_run_is_reported_crashed(home) {
        // The run fails its first attempt and waits for its retry when its `host run` dies.
        let mut child = home.spawn(&[
            "run", "--job", &path("flaky"), "--payload", r#"{"fail_times":5}"#,
            "--retries", "3", "--backoff", "2s", "--lease-grace", "1s",
        ]);
        home.wait_for(
            "SELECT COUNT(*) FROM jobhost_runs WHERE job = 'flaky' AND status = 'queued' AND attempts = 1",
            Duration::from_secs(20),
        ).await;
        child.kill().unwrap();
        child.wait().unwrap();
        // Any later `host run` on the database finds it once its parked lease expires.
        let started = Instant::now();
        loop {
            let (code, _) = home.run_json(&["--job", &path("hello"), "--lease-grace", "1s"]);
            assert_eq!(code, 0);
            if home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'flaky' AND status = 'crashed'").await == 1 {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(20), "the waiting run was never reported");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_reports WHERE kind = 'crashed' AND job = 'flaky'").await, 1);
        // A manual run is reported, not rerun: its caller is gone.
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'flaky'").await, 1);
    }

    async fn surveillance_reads_only_the_runs_hosts_hold(home) {
        // A backlog of queued runs and a history of finished ones, all untouched for long;
        // two running runs and a queued manual run whose leases are gone (lost), and a
        // running run whose lease is held (not lost).
        home.store().await.close().await;
        for (status, origin, prefix) in [("queued", "kick", "q"), ("succeeded", "kick", "s")] {
            home.exec(&format!(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10000) \
                 INSERT INTO jobhost_runs (id, job, instance, tenant, origin, payload, status, \
                 next_attempt_at, created_at, updated_at) \
                 SELECT '{prefix}' || i, 'noop', '{prefix}' || i, 'default', '{origin}', '{{}}', \
                 '{status}', i, i, i FROM n"
            ))
            .await;
        }
        home.exec(
            "INSERT INTO jobhost_runs (id, job, instance, tenant, origin, payload, status, \
             generation, next_attempt_at, created_at, updated_at) VALUES \
             ('lost-a', 'noop', 'la', 'default', 'kick', '{}', 'running', 1, 5, 5, 5), \
             ('lost-b', 'noop', 'lb', 'default', 'cron', '{}', 'running', 1, 5, 5, 5), \
             ('lost-m', 'noop', 'lm', 'default', 'manual', '{}', 'queued', 1, 5, 5, 5), \
             ('held', 'noop', 'h', 'default', 'kick', '{}', 'running', 1, 5, 5, 5); \
             INSERT INTO jobhost_leases (job, instance, generation, holder, deadline_at, \
             expires_at, pending, updated_at) VALUES ('noop', 'h', 1, 'held', 9e15, 9e15, 0, 5)",
        )
        .await;
        if home.backend == Backend::Postgres {
            // As autovacuum would: the statistics say nearly every run is queued.
            home.exec("ANALYZE jobhost_runs").await;
        }
        let store = home.store().await;
        let mut lost: Vec<String> =
            store.lost_runs(1000).await.unwrap().into_iter().map(|l| l.id).collect();
        lost.sort();
        assert_eq!(lost, ["lost-a", "lost-b", "lost-m"]);
        let plan = store.lost_runs_plan(1000).await.unwrap();
        store.close().await;
        let text = plan.join("\n");
        match home.backend {
            Backend::Postgres => {
                assert!(!text.contains("Seq Scan on jobhost_runs"), "{text}");
                // Every step read at most a handful of rows: none read the backlog.
                let counts = plan.iter().filter_map(|line| {
                    let line = line.trim();
                    let n = if let Some(rest) = line.strip_prefix("Rows Removed by") {
                        rest.rsplit(' ').next()
                    } else {
                        line.split("rows=").nth(1).and_then(|r| r.split(' ').next())
                    };
                    n.map(|n| n.parse::<u64>().expect("a row count"))
                });
                for n in counts {
                    assert!(n < 100, "a step of surveillance read {n} rows:\n{text}");
                }
            }
            Backend::Sqlite => {
                // Each branch searches an index that holds only its own runs.
                let reads: Vec<&String> =
                    plan.iter().filter(|l| l.contains("jobhost_runs")).collect();
                assert_eq!(reads.len(), 2, "{text}");
                assert!(reads.iter().all(|l| l.starts_with("SEARCH")), "{text}");
                assert!(reads[0].contains("(status=?)"), "{text}");
                assert!(reads[1].contains("jobhost_runs_manual_queued"), "{text}");
                assert!(!text.contains("MULTI-INDEX OR"), "{text}");
            }
        }
    }

    async fn a_second_run_while_the_lease_is_held_is_skipped(home) {
        let mut busy = home.spawn(&["run", "--job", &path("spin"), "--name", "busy", "--timeout", "4s"]);
        home.wait_for(
            "SELECT COUNT(*) FROM jobhost_leases WHERE job = 'busy' AND holder IS NOT NULL",
            Duration::from_secs(20),
        ).await;
        let (code, run) = home.run_json(&["--job", &path("hello"), "--name", "busy"]);
        assert_eq!(code, 3, "{run}");
        assert_eq!(run["status"], "skipped");
        assert_eq!(run["attempts"], 0);
        busy.wait().unwrap();
        // Another instance of the same job is not blocked by it.
        let (code, _) = home.run_json(&["--job", &path("hello"), "--name", "busy", "--instance", "other"]);
        assert_eq!(code, 0);
    }

    async fn tables_not_granted_are_refused_by_the_database(home) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        let probe = path("probe");
        // What the guest made of the refusal, after the host's reason.
        let refused = |payload: &str, grant: &str| {
            let (code, run) = home.run_json(&["--job", &probe, "--payload", payload, "--grant", grant]);
            assert_eq!(code, 1, "{payload} should be refused: {run}");
            assert_eq!(run["code"], "query_refused", "{payload}: {run}");
            let (host, guest) = run["error"].as_str().unwrap().split_once("; the guest's error: ").unwrap();
            assert!(host.starts_with("query_refused: "), "{payload}: {run}");
            guest.to_string()
        };
        let read = |sql: &str| serde_json::json!({ "read": [sql] }).to_string();
        let write = |sql: &str| serde_json::json!({ "write": [sql] }).to_string();
        let not_granted = "query refused: not-granted";
        let forbidden = "query refused: forbidden";
        assert_eq!(refused(&read("SELECT * FROM secrets"), "db.write=ledger"), not_granted);
        assert_eq!(refused(&read("SELECT * FROM jobhost_runs"), "db.write=ledger"), not_granted);
        assert_eq!(refused(&read("SELECT * FROM jobhost_guest_roles"), "db.write=ledger"), not_granted);
        assert_eq!(refused(&read("SELECT * FROM ledger"), "db.read=secrets"), not_granted);
        assert_eq!(refused(&write("INSERT INTO ledger VALUES ('x', 1, 1)"), "db.read=ledger"), not_granted);
        assert_eq!(refused(&read("DELETE FROM ledger"), "db.write=ledger"), "query refused: read-only");
        assert_eq!(refused(&write("UPDATE secrets SET value = 'pwned'"), "db.write=ledger"), not_granted);
        // A run's ledger and progress are the host's rows: a guest cannot forge a step or
        // move its own cursor.
        assert_eq!(refused(&write("INSERT INTO jobhost_steps VALUES ('r', 1, 's', '1', 1, 0)"), "db.write=ledger"), not_granted);
        assert_eq!(refused(&write("UPDATE jobhost_runs SET cursor = '1', work_done = 1"), "db.write=ledger"), not_granted);
        // The API's tokens and the tenant registry are the host's too.
        assert_eq!(refused(&read("SELECT secret_hash FROM jobhost_tokens"), "db.write=ledger"), not_granted);
        assert_eq!(refused(&write("INSERT INTO jobhost_tokens (id, secret_hash, created_at) VALUES ('x', 'y', 0)"), "db.write=ledger"), not_granted);
        assert_eq!(refused(&write("UPDATE jobhost_tenants SET active = 1"), "db.write=ledger"), not_granted);
        // The journals' seal key: a guest that read it could forge a journal's seal.
        assert_eq!(refused(&read("SELECT value FROM jobhost_secrets"), "db.write=ledger"), not_granted);
        assert_eq!(refused(&write("DROP TABLE ledger"), "db.write=ledger"), forbidden);
        assert_eq!(refused(&write("CREATE TABLE mine (a INTEGER)"), "db.write=ledger"), forbidden);
        assert_eq!(refused(&write("COMMIT"), "db.write=ledger"), forbidden);
        let engine_specific: &[(&str, &str)] = match home.backend {
            common::Backend::Sqlite => &[
                ("SELECT * FROM sqlite_master", not_granted),
                ("PRAGMA writable_schema = 1", forbidden),
                ("ATTACH DATABASE 'x.db' AS x", forbidden),
                ("SELECT load_extension('x')", forbidden),
                // The fence's view of the cancel book is the host's.
                ("SELECT jobhost_cancel_marked('x')", forbidden),
            ],
            common::Backend::Postgres => &[
                ("SELECT * FROM pg_authid", not_granted),
                ("SET ROLE postgres", forbidden),
                ("RESET ROLE", forbidden),
                ("SELECT set_config('role', 'postgres', false)", forbidden),
                ("SELECT pg_read_file('/etc/passwd')", forbidden),
                ("SELECT lo_from_bytea(0, 'x')", forbidden),
                ("SELECT pg_notify('jobhost_work', 'x')", forbidden),
                ("SELECT pg_advisory_lock(1)", forbidden),
                ("SELECT rolname FROM pg_roles", not_granted),
                ("SET idle_in_transaction_session_timeout = 0", forbidden),
                ("COPY secrets TO STDOUT", forbidden),
                // The host's own functions its job roles may execute (for the host's
                // statements on their connections) are not the guest's to call.
                ("SELECT jobhost_attach_file('acme', 'docs', 'x', 'k', 1, 'd', 'clean', 'r')", forbidden),
                ("SELECT jobhost_remove_file('acme', 'docs', 'x')", forbidden),
                ("SELECT jobhost_fence('probe', 'default', 1, 'r')", forbidden),
                ("SELECT jobhost_record_step('r', 1, 's', '1', 1)", forbidden),
                ("SELECT jobhost_end_pass('r', 1, 1, '1', '{}', true)", forbidden),
            ],
        };
        for (sql, expected) in engine_specific {
            assert_eq!(refused(&write(sql), "db.write=ledger"), *expected, "{sql}");
        }
        assert_eq!(home.scalar("SELECT COUNT(*) FROM secrets WHERE value = 'do-not-leak'").await, 1);
        assert_eq!(home.scalar("SELECT COUNT(*) FROM ledger").await, 0);
        // What is granted works.
        let ok = serde_json::json!({
            "read": ["SELECT COUNT(*) FROM ledger"],
            "write": ["INSERT INTO ledger VALUES ('probe', 1, 1)", "UPDATE ledger SET n = 2"],
        }).to_string();
        let (code, run) = home.run_json(&["--job", &probe, "--payload", &ok, "--grant", "db.write=ledger"]);
        assert_eq!(code, 0, "{run}");
        assert_eq!(home.scalar("SELECT COUNT(*) FROM ledger WHERE n = 2").await, 1);
    }

    async fn a_statement_running_at_the_deadline_is_interrupted(home) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        let endless = r#"{"read":["WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c"]}"#;
        // However the deadline shows (the host's timer, or the database cutting the
        // statement off first), the ending is one code.
        for _ in 0..3 {
            let started = Instant::now();
            let (code, run) = home.run_json(&["--job", &path("probe"), "--payload", endless, "--grant", "db.read=ledger", "--timeout", "1s"]);
            assert_eq!(code, 1);
            assert_eq!(run["code"], "timeout", "{run}");
            assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
            let shown: Value = serde_json::from_slice(
                &home.run(&["runs", "show", run["run_id"].as_str().unwrap(), "--json"]).stdout,
            ).unwrap();
            assert_eq!(shown["attempt_records"][0]["code"], "timeout", "{shown}");
        }
        // The database is free again straight away.
        let (code, _) = home.run_json(&["--job", &path("ledger"), "--payload", r#"{"rows":1}"#, "--grant", "db.write=ledger"]);
        assert_eq!(code, 0);
    }

    async fn a_refused_run_and_its_report_say_why_in_the_hosts_words(home) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        let probe = path("probe");
        let write = serde_json::json!({ "write": ["INSERT INTO ledger VALUES ('x', 1, 1)"] }).to_string();
        // Refused alike on every attempt: the run ends after one, its retries unused.
        let (code, run) = home.run_json(&[
            "--job", &probe, "--payload", &write, "--grant", "db.read=ledger", "--retries", "2", "--backoff", "10ms",
        ]);
        assert_eq!((code, run["code"].as_str()), (1, Some("query_refused")), "{run}");
        assert_eq!(run["attempts"], 1, "{run}");
        let reason = "not-granted: a table the statement names is outside the job's db grant, or is granted \
            only for reading and the statement writes it (tables granted: \"ledger\" (read))";
        let id = run["run_id"].as_str().unwrap();
        let shown = String::from_utf8(home.run(&["runs", "show", id]).stdout).unwrap();
        assert!(shown.contains(&format!("error: query_refused: {reason}; the guest's error: query refused: not-granted")), "{shown}");
        // The report carries the host's reason alone, never the guest's words.
        let store = home.store().await;
        let reports = store.list_reports(Some("probe"), None, 10).await.unwrap();
        store.close().await;
        assert_eq!(reports.len(), 1);
        let body: Value = serde_json::from_str(&reports[0].body).unwrap();
        assert_eq!((body["code"].as_str(), body["reason"].as_str()), (Some("query_refused"), Some(reason)), "{body}");
        assert!(!reports[0].body.contains("guest"), "{body}");
        // A name the guest chose is not echoed: the reason names only what was granted.
        let chosen = serde_json::json!({ "read": ["SELECT * FROM \"\u{1b}[2Jplanted\""] }).to_string();
        let (_, run) = home.run_json(&["--job", &probe, "--payload", &chosen, "--grant", "db.read=ledger"]);
        let error = run["error"].as_str().unwrap();
        let (host, _) = error.split_once("; the guest's error: ").unwrap();
        assert!(host.starts_with("query_refused: ") && !host.contains("planted") && !host.contains('\u{1b}'), "{error}");
    }

    async fn a_transaction_open_too_long_is_rolled_back(home) {
        home.run(&["migrate", "--migrations", migrations().to_str().unwrap()]);
        let mut holder = home.spawn(&[
            "run", "--json", "--job", &path("ledger"), "--payload", r#"{"rows":3,"wait_ms":4000}"#,
            "--grant", "db.write=ledger", "--timeout", "30s", "--txn-timeout", "1s",
        ]);
        home.wait_for(
            "SELECT COUNT(*) FROM jobhost_leases WHERE job = 'ledger' AND holder IS NOT NULL",
            Duration::from_secs(20),
        ).await;
        // Another job's writes are delayed at most by the transaction bound, not the wait.
        let started = Instant::now();
        let (code, _) = home.run_json(&["--job", &path("ledger"), "--name", "other", "--payload", r#"{"rows":1}"#, "--grant", "db.write=ledger"]);
        assert_eq!(code, 0);
        assert!(started.elapsed() < Duration::from_millis(3500), "blocked for {:?}", started.elapsed());
        let out = tokio::task::spawn_blocking(move || { holder.wait().unwrap(); }).await;
        out.unwrap();
        assert_eq!(home.scalar("SELECT COUNT(*) FROM ledger WHERE attempt = 1 AND n > 0").await, 0);
        let last: Value = serde_json::from_slice(&home.run(&["runs", "list", "--json", "--job", "ledger"]).stdout).unwrap();
        assert_eq!(last[0]["code"], "query_refused");
        assert_eq!(
            last[0]["error"],
            "query_refused: transaction-timeout: the transaction stayed open past its bound and was rolled back; \
             the guest's error: query refused: transaction-timeout"
        );
    }

    async fn bad_input_gets_a_clear_error_and_changes_nothing(home) {
        let dir = home.path();
        std::fs::write(dir.join("notes.wasm"), "not wasm at all").unwrap();
        std::fs::write(dir.join("core.wasm"), b"\0asm\x01\0\0\0").unwrap();
        let bytes = std::fs::read(guest("hello")).unwrap();
        std::fs::write(dir.join("cut.wasm"), &bytes[..bytes.len() / 2]).unwrap();
        let hello = path("hello");
        let future = path("future");
        let ledger = path("ledger");
        let cases: Vec<(Vec<&str>, &str)> = vec![
            (vec!["--job", "notes.wasm"], "is not a WebAssembly file"),
            (vec!["--job", "core.wasm"], "is a core WebAssembly module, not a component"),
            (vec!["--job", "cut.wasm"], "is not a valid component"),
            (vec!["--job", &future], "targets jobhost:job@0.2.0, but this host implements jobhost:job@0.1.x"),
            (vec!["--job", "missing.wasm"], "cannot read missing.wasm"),
            (vec!["--job", &hello, "--timeout", "30x"], "invalid duration \"30x\""),
            (vec!["--job", &hello, "--memory", "lots"], "invalid size \"lots\""),
            (vec!["--job", &hello, "--payload", "{not json"], "payload refused: at $: not JSON"),
            (vec!["--job", &hello, "--grant", "net.read=x"], "unknown capability \"net\""),
            (vec!["--job", &hello, "--grant", "db.read=jobhost_leases"], "belongs to the host"),
            (vec!["--job", &ledger], "imports the `db` capability, which this job was not granted: add `grants.db = { read = [\"TABLE\"], write = [\"TABLE\"] }` to its manifest entry"),
            (vec!["--job", &hello, "--name", "Bad Name"], "invalid job name"),
        ];
        for (args, expected) in cases {
            let mut all = vec!["run"];
            all.extend(args.iter().copied());
            let out = home.run(&all);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            let first = err.lines().next().unwrap_or_default();
            assert!(first.starts_with("error: ") && first.contains(expected), "{args:?}: expected {expected:?} in {err:?}");
            assert!(!err.contains("panicked"), "{err}");
        }
        let big = format!("{{\"x\":\"{}\"}}", "a".repeat(300 * 1024));
        std::fs::write(dir.join("big.json"), big).unwrap();
        let out = home.run(&["run", "--job", &hello, "--payload", "@big.json"]);
        assert_eq!(out.status.code(), Some(2));
        assert!(stderr(&out).contains("payload refused: 307208 bytes; the limit is 262144"), "{}", stderr(&out));
        // Nothing was recorded.
        let listed: Value = serde_json::from_slice(&home.run(&["runs", "list", "--json"]).stdout).unwrap();
        assert_eq!(listed, serde_json::json!([]));
    }

    async fn a_long_run_continues_pass_by_pass_with_its_cursor(home) {
        let (code, run) = home.run_json(&["--job", &path("pager"), "--payload", r#"{"pages":4}"#]);
        assert_eq!(code, 0, "{run}");
        assert_eq!(run["passes"], 4);
        assert_eq!(run["attempts"], 4);
        assert_eq!(run["cursor"], serde_json::json!({"page": 3}));
        let id = run["run_id"].as_str().unwrap();
        let shown: Value = serde_json::from_slice(&home.run(&["runs", "show", id, "--json"]).stdout).unwrap();
        let outcomes: Vec<&str> = shown["attempt_records"].as_array().unwrap().iter()
            .map(|a| a["outcome"].as_str().unwrap()).collect();
        assert_eq!(outcomes, ["continue", "continue", "continue", "done"]);
        let passes: Vec<i64> = shown["attempt_records"].as_array().unwrap().iter()
            .map(|a| a["pass"].as_i64().unwrap()).collect();
        assert_eq!(passes, [1, 2, 3, 4]);
        assert!(shown["attempt_records"][3]["log"].as_str().unwrap().contains("page 4 of 4"));
        // Deferred passes wait, then resume with the cursor they had.
        let started = Instant::now();
        let (code, run) = home.run_json(&["--job", &path("pager"), "--payload", r#"{"pages":2,"defer_ms":300}"#]);
        assert_eq!(code, 0, "{run}");
        assert_eq!(run["passes"], 4);
        assert!(started.elapsed() >= Duration::from_millis(600), "{:?}", started.elapsed());
    }

    async fn a_compiled_component_is_cached_on_disk(home) {
        let hello = path("hello");
        // The home's own cache, not the one the suite shares.
        let run = |name: &str| home.host().env_remove("JOBHOST_CACHE")
            .args(["run", "--json", "--job", &hello, "--name", name]).status().unwrap();
        assert!(run("first").success());
        let cache = home.path().join("cache");
        let entries = || -> Vec<(std::path::PathBuf, std::time::SystemTime)> {
            std::fs::read_dir(&cache).unwrap()
                .map(|e| { let e = e.unwrap(); (e.path(), e.metadata().unwrap().modified().unwrap()) })
                .collect()
        };
        let first = entries();
        assert_eq!(first.len(), 1, "{first:?}");
        assert!(first[0].0.extension().is_some_and(|e| e == "cwasm"));
        assert!(run("again").success());
        assert_eq!(entries(), first, "the second run must reuse the compiled component");
    }
}

/// `host run NAME --manifest M` of a job M lacks is refused, naming the jobs M has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_job_is_refused_naming_the_jobs_the_manifest_has() {
    let home = common::Home::new(Backend::Sqlite).await;
    let m = home.manifest(
        "",
        "[jobs.hello]\ncomponent = \"{guest:hello}\"\n[jobs.noop]\ncomponent = \"{guest:noop}\"\n",
    );
    let out = home.run(&["run", "helo", "--manifest", m.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("unknown job \"helo\" in ") && err.contains("; known jobs: hello, noop"),
        "{err}"
    );
}

/// Errors about the database say what is wrong in words, quickly, without a password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_errors_say_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let admin = common::postgres_admin_url();
    let (base, _) = admin.rsplit_once('/').unwrap();
    let (scheme_user, server) = base.rsplit_once('@').unwrap();
    let cases = [
        (
            format!("sqlite://{}", dir.path().display()),
            "is a directory",
        ),
        (
            "postgres://postgres:s3cret@127.0.0.1:1/test".to_string(),
            "refused the connection: is the server running",
        ),
        (
            format!("{base}/jobhost_no_such_database"),
            "has no database \"jobhost_no_such_database\"",
        ),
        (
            format!("postgres://jobhost_no_such_user:s3cret@{server}/test"),
            "refused user \"jobhost_no_such_user\"",
        ),
    ];
    let _ = scheme_user;
    for (url, expected) in cases {
        let started = Instant::now();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_host"))
            .args(["runs", "list", "--db", &url])
            .env("JOBHOST_HOME", dir.path())
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{url}: {err}");
        assert!(
            err.contains(expected),
            "{url}: expected {expected:?} in {err:?}"
        );
        assert!(!err.contains("s3cret"), "{err}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{url} took {:?}",
            started.elapsed()
        );
    }
}

/// On SQLite one process serves a file; a `host run` beside a process that keeps the
/// write lock waits a bounded time and then says so, with an exit code of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_takes_one_serving_host_and_says_when_the_write_lock_is_held() {
    use sqlx::Connection;
    let home = common::Home::new(common::Backend::Sqlite).await;
    let first = home.serve(&[]).await;
    let second = home.run(&["serve", "--listen", "127.0.0.1:0"]);
    assert_eq!(second.status.code(), Some(2));
    let err = stderr(&second);
    assert!(
        err.contains("already serves the SQLite database") && err.contains("Postgres"),
        "{err}"
    );
    drop(first);
    // A frozen process holding the write lock, as a stopped host inside a transaction.
    let mut frozen = sqlx::SqliteConnection::connect(&home.db_url).await.unwrap();
    sqlx::raw_sql("BEGIN IMMEDIATE")
        .execute(&mut frozen)
        .await
        .unwrap();
    let started = Instant::now();
    let out = home.run(&["run", "--job", &path("hello")]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("another process holds the SQLite database's write lock"),
        "{}",
        stderr(&out)
    );
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "took {:?}",
        started.elapsed()
    );
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut frozen)
        .await
        .unwrap();
    let (code, run) = home.run_json(&["--job", &path("hello")]);
    assert_eq!(code, 0, "{run}");
}
