//! Flow control end to end, with the real binary and real guests: sequential jobs (one run
//! at a time across the fleet, without using attempts) and the bound on a run's defers.

mod common;

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
}
