//! Chaos: three `host serve` processes on one Postgres take a stream of kicks of a job
//! whose guest writes rows in a fenced transaction, while a driver freezes (SIGSTOP),
//! thaws (SIGCONT) and kills (SIGKILL) hosts, starts `host drive` sweeps and kills them
//! mid-pass, and cuts the database away for seconds, at random. When the chaos ends and everything has settled, an invariant checker asserts
//! what must hold whatever happened:
//!
//! - no attempt committed after its lease moved on (a later generation started);
//! - every kick was followed by a run of its instance;
//! - no queued run succeeded twice (across its reruns);
//! - lease generations rise with time, per lease;
//! - every run ended (nothing left running without a live lease);
//! - one crash report per crashed run.
//!
//! CI runs it for `JOBHOST_CHAOS_SECS` (20 s by default); a longer run prints the same
//! figures: runs, faults injected, violations.

use crate::common;

use common::proxy::Proxy;
use common::{Backend, Home, Server};
use rand::Rng;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

const HOSTS: usize = 3;
const INSTANCES: usize = 8;

jobhost::record! {
    #[derive(Debug)]
    struct Attempt {
        instance: String,
        run_id: String,
        generation: i64,
        started_at: i64,
    }
}

jobhost::record! {
    #[derive(Debug)]
    struct Write {
        run_id: String,
        attempt: i64,
        committed_at: Option<i64>,
    }
}

jobhost::record! {
    #[derive(Debug)]
    struct Run {
        id: String,
        instance: String,
        status: String,
        rerun_of: Option<String>,
    }
}

struct Fleet {
    home: Home,
    url: String,
    args: Vec<String>,
    hosts: Vec<Option<Server>>,
    stopped: Vec<bool>,
    /// `host drive` sweeps, and when each is killed.
    sweeps: Vec<(std::process::Child, Instant)>,
}

impl Fleet {
    /// Starts host `i`; like a supervisor, the caller tries again later if it exits at
    /// once (the database may be cut away right now).
    async fn start(&mut self, i: usize) -> bool {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        self.hosts[i] = self.home.try_serve_with_db(&self.url, &args).await;
        self.stopped[i] = false;
        self.hosts[i].is_some()
    }

    /// Starts a `host drive` sweep of the same manifest, to be killed at `kill_at`: a
    /// process that claims runs by id and is no serving host.
    fn sweep(&mut self, kill_at: Instant) {
        let manifest = self.args[1].clone();
        let child = self
            .home
            .host()
            .env("JOBHOST_DB", &self.url)
            .args([
                "drive",
                "--manifest",
                manifest.as_str(),
                "--limit",
                "3",
                "--max-passes",
                "2",
                "--lease-grace",
                "1s",
                "--surveillance-interval",
                "1s",
                "--max-reruns",
                "5",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn host drive");
        self.sweeps.push((child, kill_at));
    }

    /// Kills each sweep as soon as it is running a run's pass, or once it is due to die
    /// (every one with `all`); how many were killed mid-pass.
    async fn kill_sweeps(&mut self, all: bool) -> usize {
        let now = Instant::now();
        let mut mid_pass = 0;
        let mut kept = Vec::new();
        for (mut child, at) in std::mem::take(&mut self.sweeps) {
            let holder = format!("{}-{}", hostname(), child.id());
            let running = self
                .home
                .scalar(&format!(
                    "SELECT COUNT(*) FROM jobhost_runs WHERE status = 'running' AND host = '{holder}'"
                ))
                .await;
            if !all && running == 0 && now < at {
                kept.push((child, at));
                continue;
            }
            let _ = child.kill();
            let _ = child.wait();
            mid_pass += usize::from(running > 0);
        }
        self.sweeps = kept;
        mid_pass
    }
}

/// The name a host puts in its id (`<hostname>-<pid>`).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "host".into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_keeps_its_invariants_under_kills_freezes_and_cuts() {
    let chaos_for = Duration::from_secs(
        std::env::var("JOBHOST_CHAOS_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(20),
    );
    let home = Home::new(Backend::Postgres).await;
    home.run(&[
        "migrate",
        "--migrations",
        common::migrations().to_str().unwrap(),
    ]);
    // When each guest write commits: a deferred trigger stamps the row at commit time.
    home.exec(
        "ALTER TABLE ledger ADD COLUMN committed_at BIGINT;
         CREATE FUNCTION chaos_stamp() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
         BEGIN
             UPDATE ledger SET committed_at = CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)
             WHERE ctid = NEW.ctid;
             RETURN NULL;
         END $$;
         CREATE CONSTRAINT TRIGGER chaos_commit AFTER INSERT ON ledger
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION chaos_stamp();",
    )
    .await;
    let proxy = Proxy::start("127.0.0.1:5432").await;
    let (base, _) = home.db_url.rsplit_once('/').unwrap();
    let (_, server) = base.rsplit_once('@').unwrap();
    let url = home
        .db_url
        .replace(server, &format!("127.0.0.1:{}", proxy.port));
    let manifest = home.manifest(
        "",
        r#"
        [jobs.writer]
        component = "{guest:ledger}"
        timeout = "3s"
        retries = 2
        backoff = "200ms"
        payload = { rows = 3, wait_ms = 300 }
        grants.db = { write = ["ledger"] }
    "#,
    );
    let args: Vec<String> = [
        "--manifest",
        manifest.to_str().unwrap(),
        "--workers",
        "3",
        "--lease-grace",
        "1s",
        "--surveillance-interval",
        "1s",
        "--poll",
        "200ms",
        "--txn-timeout",
        "10s",
        "--max-reruns",
        "5",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut fleet = Fleet {
        home,
        url,
        args,
        hosts: (0..HOSTS).map(|_| None).collect(),
        stopped: vec![false; HOSTS],
        sweeps: Vec::new(),
    };
    for i in 0..HOSTS {
        assert!(fleet.start(i).await, "host {i} did not start");
    }

    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let mut kicks: Vec<(String, i64)> = Vec::new();
    let mut faults: BTreeMap<&str, usize> = BTreeMap::new();
    let mut cut_until: Option<Instant> = None;
    let mut next_fault = Instant::now() + Duration::from_millis(800);
    let mut thaw: Vec<(usize, Instant)> = Vec::new();
    let started = Instant::now();
    while started.elapsed() < chaos_for {
        // Kicks, at any host that answers.
        let i = rand::rng().random_range(0..HOSTS);
        let instance = format!("i{}", rand::rng().random_range(0..INSTANCES));
        if let Some(host) = fleet.hosts[i].as_ref().filter(|_| !fleet.stopped[i]) {
            let before = wall_ms();
            let kicked = client
                .post(format!("{}/jobs/writer/kick?instance={instance}", host.url))
                .bearer_auth(&host.token)
                .send()
                .await;
            if kicked.is_ok_and(|r| r.status().as_u16() == 202) {
                kicks.push((instance, before));
            }
        }
        // Faults, and a supervisor restarting killed hosts.
        for i in 0..HOSTS {
            if fleet.hosts[i].is_none() && cut_until.is_none() {
                fleet.start(i).await;
            }
        }
        let now = Instant::now();
        if cut_until.is_some_and(|t| now >= t) {
            proxy.restore();
            cut_until = None;
        }
        thaw.retain(|(i, at)| {
            if now >= *at {
                if let Some(host) = &fleet.hosts[*i] {
                    host.signal("CONT");
                }
                fleet.stopped[*i] = false;
                false
            } else {
                true
            }
        });
        let mid_pass = fleet.kill_sweeps(false).await;
        if mid_pass > 0 {
            *faults.entry("drive killed mid-pass").or_default() += mid_pass;
        }
        if now >= next_fault {
            let i = rand::rng().random_range(0..HOSTS);
            match rand::rng().random_range(0..4) {
                0 if !fleet.stopped[i] && fleet.hosts[i].is_some() => {
                    fleet.hosts[i].as_ref().unwrap().signal("STOP");
                    fleet.stopped[i] = true;
                    let frozen = Duration::from_millis(rand::rng().random_range(500..5000));
                    thaw.push((i, now + frozen));
                    *faults.entry("freeze").or_default() += 1;
                }
                1 if !fleet.stopped[i] && fleet.hosts[i].is_some() => {
                    if let Some(host) = fleet.hosts[i].take() {
                        host.signal("KILL");
                        let _ = host.wait_exit(Duration::from_secs(5)).await;
                    }
                    *faults.entry("kill").or_default() += 1;
                }
                2 if cut_until.is_none() => {
                    proxy.cut();
                    cut_until =
                        Some(now + Duration::from_millis(rand::rng().random_range(500..3000)));
                    *faults.entry("cut").or_default() += 1;
                }
                // A sweep killed while it runs a pass: its run must be found crashed and
                // rerun like a serving host's, or the settling below never ends. The
                // serving hosts are frozen meanwhile, and a run of an instance of its own
                // queued, so the sweep has one to take.
                3 if fleet.sweeps.is_empty() && cut_until.is_none() => {
                    let until = now + Duration::from_secs(5);
                    for h in 0..HOSTS {
                        if let Some(host) = fleet.hosts[h].as_ref().filter(|_| !fleet.stopped[h]) {
                            host.signal("STOP");
                            fleet.stopped[h] = true;
                            thaw.push((h, until));
                        }
                    }
                    let sweeps = faults.entry("drive").or_default();
                    let instance = format!("d{sweeps}");
                    *sweeps += 1;
                    let before = wall_ms();
                    let kicked = fleet.home.run(&["kick", "writer", "--instance", &instance]);
                    if kicked.status.success() {
                        kicks.push((instance, before));
                    }
                    fleet.sweep(until);
                }
                _ => {}
            }
            next_fault = now + Duration::from_millis(rand::rng().random_range(500..2500));
        }
        tokio::time::sleep(Duration::from_millis(rand::rng().random_range(20..150))).await;
    }

    // Settle: the database back, every sweep gone, every host thawed and running, every
    // run ended.
    let mid_pass = fleet.kill_sweeps(true).await;
    if mid_pass > 0 {
        *faults.entry("drive killed mid-pass").or_default() += mid_pass;
    }
    proxy.restore();
    for i in 0..HOSTS {
        if fleet.stopped[i] {
            fleet.hosts[i].as_ref().unwrap().signal("CONT");
            fleet.stopped[i] = false;
        }
        while fleet.hosts[i].is_none() {
            fleet.start(i).await;
        }
    }
    let home = &fleet.home;
    let settled = Instant::now();
    while home
        .scalar("SELECT COUNT(*) FROM jobhost_runs WHERE status IN ('queued', 'running')")
        .await
        > 0
    {
        assert!(
            settled.elapsed() < Duration::from_secs(120),
            "runs never ended after the chaos"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    let violations = check(home, &kicks).await;
    let runs = home.scalar("SELECT COUNT(*) FROM jobhost_runs").await;
    eprintln!(
        "chaos: {:?} of chaos, {} kicks, {runs} runs, faults {faults:?}, {} violations",
        chaos_for,
        kicks.len(),
        violations.len()
    );
    assert!(violations.is_empty(), "violations: {violations:#?}");
    assert!(runs > 0 && !faults.is_empty());
    drop(fleet);
}

fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

async fn check(home: &Home, kicks: &[(String, i64)]) -> Vec<String> {
    let store = home.store().await;
    let jobhost::store::Pool::Postgres(pool) = store.pool() else {
        unreachable!()
    };
    let attempts: Vec<Attempt> = sqlx::query_as(
        "SELECT r.instance, a.run_id, a.generation, a.started_at FROM jobhost_attempts a \
         JOIN jobhost_runs r ON r.id = a.run_id ORDER BY a.started_at, a.generation",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let writes: Vec<Write> = sqlx::query_as("SELECT run_id, attempt, committed_at FROM ledger")
        .fetch_all(pool)
        .await
        .unwrap();
    let runs: Vec<Run> = sqlx::query_as("SELECT id, instance, status, rerun_of FROM jobhost_runs")
        .fetch_all(pool)
        .await
        .unwrap();
    let crash_reports: Vec<(Option<String>, i64)> = sqlx::query_as(
        "SELECT run_id, COUNT(*) FROM jobhost_reports WHERE kind = 'crashed' GROUP BY run_id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    store.close().await;
    let mut violations = Vec::new();
    let run_instance: HashMap<&str, &str> = runs
        .iter()
        .map(|r| (r.id.as_str(), r.instance.as_str()))
        .collect();
    // The generation each attempt of a run held, by (run, attempt number within its
    // pass): the ledger guest writes its attempt number.
    let mut by_instance: BTreeMap<&str, Vec<&Attempt>> = BTreeMap::new();
    for a in &attempts {
        by_instance.entry(&a.instance).or_default().push(a);
    }
    for (instance, list) in &by_instance {
        for w in list.windows(2) {
            if w[1].generation <= w[0].generation {
                violations.push(format!(
                    "{instance}: generation {} started after {}",
                    w[1].generation, w[0].generation
                ));
            }
        }
    }
    for w in &writes {
        let Some(committed) = w.committed_at else {
            violations.push(format!("a write of {} has no commit time", w.run_id));
            continue;
        };
        let instance = run_instance[w.run_id.as_str()];
        // The generation that wrote: this run's attempts, in order, the `attempt`-th of
        // its latest pass is enough here (the writer has one pass).
        let mine: Vec<&&Attempt> = by_instance[instance]
            .iter()
            .filter(|a| a.run_id == w.run_id)
            .collect();
        let Some(writer) = mine.get((w.attempt - 1) as usize) else {
            violations.push(format!("a write of {} by an unknown attempt", w.run_id));
            continue;
        };
        if let Some(later) = by_instance[instance]
            .iter()
            .find(|a| a.generation > writer.generation && a.started_at < committed)
        {
            violations.push(format!(
                "{instance}: generation {} committed at {committed}, after generation {} started at {}",
                writer.generation, later.generation, later.started_at
            ));
        }
    }
    for (instance, at) in kicks {
        let followed = by_instance
            .get(instance.as_str())
            .is_some_and(|list| list.iter().any(|a| a.started_at >= *at));
        if !followed {
            violations.push(format!(
                "a kick of {instance} at {at} was never followed by a run"
            ));
        }
    }
    let mut succeeded: HashMap<&str, usize> = HashMap::new();
    for r in runs.iter().filter(|r| r.status == "succeeded") {
        *succeeded
            .entry(r.rerun_of.as_deref().unwrap_or(&r.id))
            .or_default() += 1;
    }
    for (root, n) in succeeded {
        if n > 1 {
            violations.push(format!("queued run {root} succeeded {n} times"));
        }
    }
    let live = runs
        .iter()
        .filter(|r| r.status == "running" || r.status == "queued")
        .count();
    if live > 0 {
        violations.push(format!("{live} runs never ended"));
    }
    let reported: HashMap<&str, i64> = crash_reports
        .iter()
        .map(|(run, n)| (run.as_deref().unwrap_or(""), *n))
        .collect();
    for r in runs.iter().filter(|r| r.status == "crashed") {
        let n = reported.get(r.id.as_str()).copied().unwrap_or(0);
        if n != 1 {
            violations.push(format!("crashed run {} has {n} crash reports", r.id));
        }
    }
    for (run, n) in &reported {
        if !runs.iter().any(|r| r.id == *run && r.status == "crashed") {
            violations.push(format!(
                "{n} crash reports of run {run:?}, which did not crash"
            ));
        }
    }
    violations
}
