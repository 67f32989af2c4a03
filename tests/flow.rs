//! Flow control end to end, with the real binary and real guests: sequential jobs (one run
//! at a time across the fleet, without using attempts) and the bound on a run's defers.

use crate::common;

use common::{Backend, Home, Server};
use serde_json::Value;
use std::time::Duration;

fn count(runs: &[Value], f: impl Fn(&Value) -> bool) -> usize {
    runs.iter().filter(|r| f(r)).count()
}

fn status(r: &Value) -> &str {
    r["status"].as_str().unwrap_or_default()
}

/// Pairs of attempts of `job`'s runs (two different runs) whose times overlap.
async fn overlapping_attempts(home: &Home, job: &str) -> i64 {
    home.scalar(&format!(
        "SELECT COUNT(*) FROM jobhost_attempts a JOIN jobhost_runs ra ON ra.id = a.run_id \
         JOIN jobhost_attempts b ON a.run_id < b.run_id JOIN jobhost_runs rb ON rb.id = b.run_id \
         WHERE ra.job = '{job}' AND rb.job = '{job}' \
         AND a.started_at < b.finished_at AND b.started_at < a.finished_at"
    ))
    .await
}

/// One host with several workers on SQLite (one `host serve` per file), three hosts
/// with two workers each on Postgres.
async fn fleet(home: &Home, args: &[&str]) -> Vec<Server> {
    match home.backend {
        Backend::Sqlite => {
            let mut all = args.to_vec();
            all.extend(["--workers", "4"]);
            vec![home.serve(&all).await]
        }
        Backend::Postgres => {
            let mut all = args.to_vec();
            all.extend(["--workers", "2"]);
            let mut hosts = Vec::new();
            for _ in 0..3 {
                hosts.push(home.serve(&all).await);
            }
            hosts
        }
    }
}

on_every_backend! {
    async fn a_sequential_job_runs_one_run_at_a_time_without_using_attempts(home) {
        let m = home.manifest("", r#"
            [jobs.seq]
            component = "{guest:hello}"
            sequential = true
            payload = { sleep_ms = 300 }
            [jobs.par]
            component = "{guest:hello}"
            payload = { sleep_ms = 300 }
        "#);
        let hosts = fleet(&home, &["--manifest", m.to_str().unwrap()]).await;
        for i in 0..6 {
            for job in ["seq", "par"] {
                let (code, kicked) = hosts[i % hosts.len()].post(&format!("/jobs/{job}/kick?instance=i{i}")).await;
                assert_eq!((code, kicked["result"].as_str()), (202, Some("queued")), "{kicked}");
            }
        }
        for job in ["seq", "par"] {
            hosts[0]
                .wait_runs(job, Duration::from_secs(60), |runs| count(runs, |r| status(r) == "succeeded") == 6)
                .await;
        }
        // The same runs of a job that is not sequential overlap: the check can see it.
        assert!(overlapping_attempts(&home, "par").await > 0, "the control job's runs never overlapped");
        assert_eq!(overlapping_attempts(&home, "seq").await, 0, "two runs of the sequential job ran at once");
        // Waiting for the job used no attempt: one attempt per run, the first.
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'seq' AND attempts = 1").await, 6);
        assert_eq!(
            home.scalar("SELECT COUNT(*) FROM jobhost_attempts a JOIN jobhost_runs r ON r.id = a.run_id \
                WHERE r.job = 'seq' AND a.attempt = 1 AND a.status = 'succeeded'").await,
            6
        );
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'seq'").await, 6);
    }

    async fn a_sequential_job_is_freed_when_the_host_running_it_dies(home) {
        let m = home.manifest("", r#"
            [jobs.seq]
            component = "{guest:hello}"
            sequential = true
            timeout = "3s"
            payload = { sleep_ms = 1500 }
        "#);
        let args = ["--manifest", m.to_str().unwrap(), "--lease-grace", "1s", "--surveillance-interval", "1s"];
        let first = home.serve(&args).await;
        first.post("/jobs/seq/kick?instance=a").await;
        first.wait_runs("seq", Duration::from_secs(10), |runs| count(runs, |r| status(r) == "running") == 1).await;
        first.post("/jobs/seq/kick?instance=b").await;
        first.signal("KILL");
        let _ = first.wait_exit(Duration::from_secs(5)).await;
        let second = home.serve(&args).await;
        let runs = second
            .wait_runs("seq", Duration::from_secs(40), |runs| {
                count(runs, |r| status(r) == "crashed") == 1 && count(runs, |r| status(r) == "succeeded") == 2
            })
            .await;
        let crashed = runs.iter().find(|r| status(r) == "crashed").unwrap();
        assert_eq!(crashed["instance"], "a", "{runs:#?}");
        assert!(runs.iter().any(|r| r["rerun_of"] == crashed["run_id"] && status(r) == "succeeded"), "{runs:#?}");
        // The queued run waited for the crashed one to be found, then for its rerun or
        // ran before it: never beside either.
        assert_eq!(overlapping_attempts(&home, "seq").await, 0, "{runs:#?}");
        let b = runs.iter().find(|r| r["instance"] == "b").unwrap();
        assert_eq!((status(b), b["attempts"].as_i64()), ("succeeded", Some(1)), "{runs:#?}");
    }

    async fn defers_use_no_attempt_and_the_one_past_max_defers_ends_the_run(home) {
        // `pager` defers every odd pass: 3 pages are 3 defers.
        let m = home.manifest("", r#"
            [jobs.within]
            component = "{guest:pager}"
            max_defers = 3
            payload = { pages = 3, defer_ms = 50 }
            [jobs.past]
            component = "{guest:pager}"
            max_defers = 2
            payload = { pages = 3, defer_ms = 50 }
        "#);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        for job in ["within", "past"] {
            assert_eq!(server.post(&format!("/jobs/{job}/kick")).await.0, 202);
        }
        let within = server
            .wait_runs("within", Duration::from_secs(20), |runs| runs.iter().any(|r| status(r) == "succeeded"))
            .await;
        assert_eq!((within[0]["passes"].as_i64(), within[0]["defers"].as_i64()), (Some(6), Some(3)), "{within:#?}");
        let past = server
            .wait_runs("past", Duration::from_secs(20), |runs| runs.iter().any(|r| status(r) == "failed"))
            .await;
        assert_eq!(past[0]["code"], "too_many_defers", "{past:#?}");
        assert_eq!((past[0]["passes"].as_i64(), past[0]["defers"].as_i64()), (Some(5), Some(2)), "{past:#?}");
        // No retries were configured, yet every pass ran: a defer is not a failed attempt,
        // and every attempt was its pass's first.
        for job in ["within", "past"] {
            assert_eq!(
                home.scalar(&format!("SELECT COUNT(*) FROM jobhost_attempts a JOIN jobhost_runs r \
                    ON r.id = a.run_id WHERE r.job = '{job}' AND a.attempt <> 1")).await,
                0,
                "{job}"
            );
        }
        let (_, reports) = server.get("/reports?job=past").await;
        let reports = reports["reports"].as_array().unwrap();
        assert!(
            reports.iter().any(|r| r["kind"] == "run_failed" && r["code"] == "too_many_defers"),
            "{reports:#?}"
        );
    }

    async fn max_per_tenant_skip_drops_each_tenants_runs_over_the_cap_and_reports_them(home) {
        for tenant in ["acme", "beta"] {
            assert!(home.run(&["tenants", "add", tenant]).status.success());
        }
        let m = home.manifest("", r#"
            [jobs.ingest]
            component = "{guest:hello}"
            per_tenant = true
            on = ["file.added"]
            max_per_tenant = 2
            payload = { sleep_ms = 3000 }
            [jobs.capped]
            component = "{guest:hello}"
            max_per_tenant = 1
            payload = { sleep_ms = 3000 }
        "#);
        let server = home.serve(&["--manifest", m.to_str().unwrap(), "--workers", "1"]).await;
        let op = Some(server.token.as_str());
        for key in ["k1", "k2", "k3"] {
            let body = format!(r#"{{"key":"{key}","tenant":"acme"}}"#);
            assert_eq!(server.post_as(op, "/events/file.added", Some(&body)).await.0, 202);
        }
        // An event for every tenant: acme is at its cap, beta is not.
        assert_eq!(server.post_as(op, "/events/file.added", Some(r#"{"key":"k4"}"#)).await.0, 202);
        let runs = server.runs(Some("ingest")).await;
        let of = |tenant: &str, dropped: bool| {
            runs.iter()
                .filter(|r| r["tenant"] == tenant && (status(r) == "skipped") == dropped)
                .count()
        };
        assert_eq!((of("acme", false), of("acme", true), of("beta", false), of("beta", true)), (2, 2, 1, 0), "{runs:#?}");
        assert!(
            runs.iter().filter(|r| status(r) == "skipped").all(|r| r["code"] == "tenant_limit" && r["attempts"] == 0),
            "{runs:#?}"
        );

        let (code, first) = server.post("/jobs/capped/kick?instance=a").await;
        assert_eq!((code, first["result"].as_str()), (202, Some("queued")), "{first}");
        let (code, second) = server.post("/jobs/capped/kick?instance=b").await;
        assert_eq!((code, second["result"].as_str(), second["code"].as_str()), (202, Some("dropped"), Some("tenant_limit")), "{second}");
        // A start over the cap is dropped too, and says so.
        let (code, started) = server
            .post_as(op, "/jobs/capped/runs", Some(r#"{"instance":"c"}"#))
            .await;
        assert_eq!((code, started["joined"].as_bool(), started["dropped"].as_str()), (201, Some(false), Some("tenant_limit")), "{started}");

        let (_, reports) = server.get("/reports").await;
        let dropped: Vec<&Value> = reports["reports"].as_array().unwrap().iter().filter(|r| r["kind"] == "dropped").collect();
        assert_eq!(dropped.len(), 4, "{reports:#}");
        assert!(dropped.iter().all(|r| r["code"] == "tenant_limit"), "{reports:#}");
        let metrics = server.text("/metrics").await;
        assert!(metrics.contains("jobhost_runs_dropped{reason=\"tenant_limit\"} 4"), "{metrics}");
        // Once the capped run is done, the job takes a new one.
        server.wait_runs("capped", Duration::from_secs(30), |runs| count(runs, |r| status(r) == "succeeded") == 1).await;
        let (_, again) = server.post("/jobs/capped/kick?instance=d").await;
        assert_eq!(again["result"], "queued", "{again}");
    }

    async fn max_per_tenant_defer_waits_for_a_slot_without_using_attempts(home) {
        let m = home.manifest("", r#"
            [jobs.paced]
            component = "{guest:hello}"
            max_per_tenant = 1
            over_limit = "defer"
            payload = { sleep_ms = 300 }
        "#);
        let hosts = fleet(&home, &["--manifest", m.to_str().unwrap()]).await;
        for i in 0..4 {
            let (code, kicked) = hosts[i % hosts.len()].post(&format!("/jobs/paced/kick?instance=i{i}")).await;
            assert_eq!((code, kicked["result"].as_str()), (202, Some("queued")), "{kicked}");
        }
        assert!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'paced' AND waiting = 1").await >= 1);
        hosts[0]
            .wait_runs("paced", Duration::from_secs(90), |runs| count(runs, |r| status(r) == "succeeded") == 4)
            .await;
        assert_eq!(overlapping_attempts(&home, "paced").await, 0, "two runs held the tenant's one slot at once");
        // Waiting used no attempt, and the runs did wait.
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'paced' AND attempts = 1").await, 4);
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_attempts a JOIN jobhost_runs r ON r.id = a.run_id WHERE r.job = 'paced'").await, 4);
        let waits = home.scalar("SELECT CAST(SUM(slot_waits) AS BIGINT) FROM jobhost_runs WHERE job = 'paced'").await;
        assert!(waits > 0, "no run waited for a slot");
        let metrics = hosts[0].text("/metrics").await;
        assert!(metrics.contains(&format!("jobhost_run_deferrals{{reason=\"max_per_tenant\"}} {waits}")), "{metrics}");
    }

    async fn a_quota_holds_or_fails_its_tenants_runs_and_leaves_other_tenants_running(home) {
        let m = home.manifest(r#"
            [tenants.acme]
            time_per_hour = "1s"
            [tenants.globex]
            time_per_hour = "1s"
            over_quota = "fail"
        "#, r#"
            [jobs.acme-job]
            component = "{guest:hello}"
            tenant = "acme"
            payload = { sleep_ms = 1200 }
            [jobs.globex-job]
            component = "{guest:hello}"
            tenant = "globex"
            payload = { sleep_ms = 1200 }
            [jobs.beta-job]
            component = "{guest:hello}"
            tenant = "beta"
        "#);
        let server = home.serve(&["--manifest", m.to_str().unwrap(), "--workers", "4"]).await;
        // One run each uses more than the tenant's hour.
        for job in ["acme-job", "globex-job"] {
            assert_eq!(server.post(&format!("/jobs/{job}/kick?instance=first")).await.0, 202);
            server.wait_runs(job, Duration::from_secs(30), |runs| count(runs, |r| status(r) == "succeeded") == 1).await;
        }
        // A host decides on figures at most a second old.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let (_, usage) = server.get("/usage").await;
        let over: Vec<&str> = usage["tenants"].as_array().unwrap().iter()
            .filter(|u| u["over"] == true).map(|u| u["tenant"].as_str().unwrap()).collect();
        assert_eq!(over, ["acme", "globex"], "{usage:#}");

        for job in ["acme-job", "globex-job", "beta-job"] {
            assert_eq!(server.post(&format!("/jobs/{job}/kick?instance=second")).await.0, 202);
        }
        // Another tenant's runs go on.
        server.wait_runs("beta-job", Duration::from_secs(30), |runs| count(runs, |r| status(r) == "succeeded") == 1).await;
        // `fail`: the run ends without running, with a fixed code, and is reported.
        let globex = server
            .wait_runs("globex-job", Duration::from_secs(30), |runs| count(runs, |r| status(r) == "failed") == 1)
            .await;
        let failed = globex.iter().find(|r| status(r) == "failed").unwrap();
        assert_eq!(failed["code"], "quota_exceeded", "{failed:#}");
        let failed_id = failed["run_id"].as_str().unwrap();
        assert_eq!(home.scalar(&format!("SELECT COUNT(*) FROM jobhost_attempts WHERE run_id = '{failed_id}'")).await, 0);
        let (_, reports) = server.get("/reports?job=globex-job").await;
        assert!(
            reports["reports"].as_array().unwrap().iter().any(|r| r["code"] == "quota_exceeded" && r["run_id"] == failed_id),
            "{reports:#}"
        );
        // `wait`: the run stays queued, unclaimed, using no attempt.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let acme = server.runs(Some("acme-job")).await;
        let waiting = acme.iter().find(|r| r["instance"] == "second").unwrap();
        assert_eq!((status(waiting), waiting["attempts"].as_i64()), ("queued", Some(0)), "{acme:#?}");
        let metrics = server.text("/metrics").await;
        assert!(metrics.contains("jobhost_tenant_over_quota{tenant=\"acme\"} 1"), "{metrics}");
        assert!(metrics.contains("jobhost_tenant_over_quota{tenant=\"beta\"} 0"), "{metrics}");
    }

    async fn a_drive_sweep_leaves_the_runs_of_a_tenant_its_quota_holds_queued(home) {
        let m = home.manifest(r#"
            [tenants.acme]
            time_per_hour = "1s"
        "#, r#"
            [jobs.acme-job]
            component = "{guest:hello}"
            tenant = "acme"
            payload = { sleep_ms = 1200 }
            [jobs.beta-job]
            component = "{guest:hello}"
            tenant = "beta"
        "#);
        let m = m.to_str().unwrap();
        let drive = || {
            let out = home.run(&["drive", "--manifest", m, "--json"]);
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            serde_json::from_slice::<Value>(&out.stdout).unwrap()
        };
        let kick = |job: &str, instance: &str| {
            let out = home.run(&["kick", job, "--instance", instance]);
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        };
        // Registers the jobs; nothing is due yet.
        assert_eq!(drive()["attempted"], 0);
        kick("acme-job", "first");
        assert_eq!(drive()["completed"], 1, "acme's first run uses more than its hour");
        kick("acme-job", "second");
        kick("beta-job", "first");
        let report = drive();
        let driven: Vec<&str> = report["runs"].as_array().unwrap().iter().map(|r| r["job"].as_str().unwrap()).collect();
        assert_eq!(driven, ["beta-job"], "{report}");
        assert_eq!(
            home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'acme-job' AND status = 'queued' AND attempts = 0").await,
            1
        );
    }
}
