//! A job's life across manifests and versions, end to end: `run_on_boot` queues one run
//! per new version fleet-wide, and a job left out of the manifest is orphaned (listed,
//! not scheduled or kicked) until retention has deleted its history.

use crate::common;

use common::{Backend, Home, guest};
use std::time::Duration;

async fn serve_and_stop_once(home: &Home, manifest: &std::path::Path, wait_sql: &str) {
    let args = ["--manifest", manifest.to_str().unwrap()];
    let mut servers = vec![home.serve(&args).await];
    if home.backend == Backend::Postgres {
        // A fleet starting the version together.
        servers.push(home.serve(&args).await);
    }
    home.wait_for(wait_sql, Duration::from_secs(20)).await;
    for server in servers {
        server.signal("TERM");
        assert_eq!(server.wait_exit(Duration::from_secs(30)).await.0, Some(0));
    }
}

on_every_backend! {
    async fn a_boot_run_is_queued_once_per_version_across_hosts_and_restarts(home) {
        let wasm = home.path().join("boot.wasm");
        std::fs::copy(guest("hello"), &wasm).unwrap();
        let m = home.manifest("", &format!(
            "[jobs.boot]\ncomponent = \"{}\"\nrun_on_boot = true\n[jobs.plain]\ncomponent = \"{{guest:noop}}\"\n",
            wasm.display()));
        let first = "SELECT COUNT(*) FROM jobhost_runs WHERE job = 'boot' AND status = 'succeeded'";
        serve_and_stop_once(&home, &m, first).await;
        // Started again, the same version owes nothing more.
        serve_and_stop_once(&home, &m, first).await;
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'boot'").await, 1);
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'boot' AND origin = 'boot'").await, 1);
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'plain'").await, 0);
        // Even once retention deleted the boot run, the version stays booted.
        home.exec("DELETE FROM jobhost_attempts").await;
        home.exec("DELETE FROM jobhost_runs").await;
        serve_and_stop_once(&home, &m, "SELECT COUNT(*) FROM jobhost_jobs WHERE name = 'plain'").await;
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs").await, 0);
        // A new version boots once.
        std::fs::copy(guest("noop"), &wasm).unwrap();
        serve_and_stop_once(&home, &m, first).await;
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'boot'").await, 1);
    }

    async fn a_disabled_tenants_new_version_boots_once_it_is_enabled(home) {
        for args in [["tenants", "add", "acme"], ["tenants", "disable", "acme"]] {
            assert!(home.run(&args).status.success());
        }
        let m = home.manifest("", "[jobs.boot]\ncomponent = \"{guest:hello}\"\ntenant = \"acme\"\nrun_on_boot = true\n");
        serve_and_stop_once(&home, &m, "SELECT COUNT(*) FROM jobhost_jobs WHERE name = 'boot'").await;
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs").await, 0, "no new runs while disabled");
        assert!(home.run(&["tenants", "enable", "acme"]).status.success());
        serve_and_stop_once(&home, &m, "SELECT COUNT(*) FROM jobhost_runs WHERE job = 'boot' AND status = 'succeeded'").await;
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE origin = 'boot'").await, 1);
    }

    async fn a_job_left_out_of_the_manifest_is_orphaned_until_its_history_is_pruned(home) {
        let all = "[jobs.ticker]\ncomponent = \"{guest:noop}\"\nschedule = \"* * * * * *\"\n\
                   [jobs.gone]\ncomponent = \"{guest:noop}\"\n[jobs.kept]\ncomponent = \"{guest:noop}\"\n";
        let m = home.manifest("", all);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        assert_eq!(server.post("/jobs/gone/kick").await.0, 202);
        home.wait_for("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'gone' AND status = 'succeeded'", Duration::from_secs(20)).await;
        home.wait_for("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'ticker'", Duration::from_secs(20)).await;
        server.signal("TERM");
        server.wait_exit(Duration::from_secs(30)).await;

        let m = home.manifest("", "[jobs.kept]\ncomponent = \"{guest:noop}\"\n");
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let (_, jobs) = server.get("/jobs").await;
        let orphaned: Vec<(&str, bool)> = jobs["jobs"].as_array().unwrap().iter()
            .map(|j| (j["name"].as_str().unwrap(), j["orphaned"].as_bool().unwrap())).collect();
        assert_eq!(orphaned, [("gone", true), ("kept", false), ("ticker", true)]);
        let listed = String::from_utf8(home.run(&["jobs"]).stdout).unwrap();
        assert!(listed.lines().any(|l| l.starts_with("gone") && l.ends_with("orphaned")), "{listed}");
        let (status, refused) = server.post("/jobs/gone/kick").await;
        assert_eq!((status, &refused["error"]["code"]), (409, &"job_orphaned".into()), "{refused}");
        assert_eq!(home.run(&["kick", "gone"]).status.code(), Some(2));
        // Not scheduled any more.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let ticks = home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'ticker'").await;
        tokio::time::sleep(Duration::from_millis(2000)).await;
        assert_eq!(home.scalar("SELECT COUNT(*) FROM jobhost_runs WHERE job = 'ticker'").await, ticks);
        server.signal("TERM");
        server.wait_exit(Duration::from_secs(30)).await;

        // Retention deletes its history, and then the job; a kept job stays whatever it ran.
        let store = home.store().await;
        let pruned = store.prune(0, 500).await.unwrap();
        assert!(pruned.jobs >= 1, "{pruned:?}");
        assert!(store.get_job("gone").await.unwrap().is_none());
        assert!(store.get_job("kept").await.unwrap().is_some());
        store.close().await;
        // Named by a manifest again, a job is registered afresh and not orphaned.
        let m = home.manifest("", all);
        let server = home.serve(&["--manifest", m.to_str().unwrap()]).await;
        let (_, jobs) = server.get("/jobs").await;
        assert!(jobs["jobs"].as_array().unwrap().iter().all(|j| j["orphaned"] == false), "{jobs}");
    }
}
