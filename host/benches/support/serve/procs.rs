//! The benchmarks' child processes (hosts and graphile-worker's node workers), what they
//! report on stdout, and the CPU time and memory they and the Postgres server use, read
//! from `/proc`.

use crate::report::Record;
use crate::settings::{CHECK_EVERY, DRAIN_TIMEOUT, START_TIMEOUT};
use serde_json::Value;
use std::fs::File;
use std::future::Future;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// A line a process printed for the benchmark, and the process's CPU time when it came.
#[derive(Clone)]
pub struct Report {
    pub value: Value,
    pub cpu: Duration,
}

/// A child process (a host or a graphile-worker), its stderr and other output in log
/// files; killed if dropped before `stop`.
pub struct Proc {
    pub system: &'static str,
    pub child: Mutex<std::process::Child>,
    pub pid: u32,
    pub reports: Arc<Mutex<Vec<Report>>>,
    pub logs: [PathBuf; 2],
}

impl Proc {
    /// Spawns `command`; the lines of its stdout that `parse` turns into a value become
    /// reports, the others go to the log.
    pub fn spawn(
        mut command: Command,
        system: &'static str,
        log_dir: &Path,
        parse: fn(&str) -> Option<Value>,
    ) -> Proc {
        static SPAWNED: AtomicUsize = AtomicUsize::new(0);
        let n = SPAWNED.fetch_add(1, Ordering::Relaxed);
        let logs = [
            log_dir.join(format!("process-{n}.err")),
            log_dir.join(format!("process-{n}.out")),
        ];
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(File::create(&logs[0]).expect("log file"))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {command:?}: {e}"));
        let pid = child.id();
        let stdout = child.stdout.take().expect("stdout");
        let mut out = File::create(&logs[1]).expect("log file");
        let reports = Arc::new(Mutex::new(Vec::new()));
        let sink = reports.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                match parse(&line) {
                    Some(value) => sink.lock().unwrap().push(Report {
                        value,
                        cpu: cpu_time(pid),
                    }),
                    None => {
                        let _ = writeln!(out, "{line}");
                    }
                }
            }
        });
        Proc {
            system,
            child: Mutex::new(child),
            pid,
            reports,
            logs,
        }
    }

    /// The first report that has `key`, if it came.
    pub fn found(&self, key: &str) -> Option<Report> {
        let reports = self.reports.lock().unwrap();
        reports.iter().find(|r| r.value.get(key).is_some()).cloned()
    }

    /// The first report that has `key`, waited for.
    pub async fn report(&self, key: &str, within: Duration) -> Report {
        let start = Instant::now();
        loop {
            if let Some(report) = self.found(key) {
                return report;
            }
            self.check_alive();
            assert!(
                start.elapsed() < within,
                "no {key:?} from {} within {within:?}; its logs:\n{}",
                self.system,
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    pub fn check_alive(&self) {
        if let Ok(Some(status)) = self.child.lock().unwrap().try_wait() {
            panic!(
                "a {} process exited ({status}); its logs:\n{}",
                self.system,
                self.log_text()
            );
        }
    }

    pub fn cpu(&self) -> Duration {
        cpu_time(self.pid)
    }

    /// `VmHWM`, the peak resident set, in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .expect("read /proc/<pid>/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in /proc/<pid>/status")
    }

    pub fn log_text(&self) -> String {
        self.logs
            .iter()
            .map(|path| std::fs::read_to_string(path).unwrap_or_default())
            .collect()
    }

    /// SIGTERM (both systems stop gracefully on it), then SIGKILL after 10 s; the WARN and
    /// ERROR lines of its logs go to the record.
    pub async fn stop(self, record: &Record) {
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own child,
        // not yet reaped.
        unsafe {
            libc::kill(self.pid as libc::pid_t, libc::SIGTERM);
        }
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.lock().unwrap().try_wait() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let lines: Vec<String> = self
            .log_text()
            .lines()
            .filter_map(|line| {
                let at = line.find("WARN").or_else(|| line.find("ERROR"))?;
                Some(line[at..].chars().take(200).collect())
            })
            .collect();
        record.log_lines(self.system, lines);
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let child = self.child.get_mut().unwrap();
        if let Ok(None) = child.try_wait() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// User + system CPU time of the Postgres server's processes on this machine (a backend
/// that exits within a window takes its time with it: the hosts and workers keep theirs).
pub fn postgres_cpu() -> Duration {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Duration::ZERO;
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim_end() == "postgres")
        })
        .filter_map(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .map(|stat| stat_cpu(&stat))
        })
        .sum()
}

/// User + system CPU time of a process, from `/proc/<pid>/stat`.
pub fn cpu_time(pid: u32) -> Duration {
    stat_cpu(&std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/<pid>/stat"))
}

/// User + system CPU time from the text of a `/proc/<pid>/stat`.
pub fn stat_cpu(stat: &str) -> Duration {
    // Fields after the command name (in parentheses; it may hold spaces) start at the
    // third, the state: utime and stime, the 14th and 15th, are the 12th and 13th here.
    let after_name = &stat[stat.rfind(')').expect("a command name") + 1..];
    let fields: Vec<u64> = after_name
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|f| f.parse().expect("clock ticks"))
        .collect();
    // SAFETY: sysconf has no preconditions.
    let ticks_per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Duration::from_secs_f64(fields.iter().sum::<u64>() as f64 / ticks_per_s)
}

/// Checks every `CHECK_EVERY` until `busy` finds no work left; returns when it did.
pub async fn wait_drained<F, Fut>(busy: F, procs: &[Proc]) -> SystemTime
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while busy().await {
        for p in procs {
            p.check_alive();
        }
        assert!(
            start.elapsed() < DRAIN_TIMEOUT,
            "not drained within {DRAIN_TIMEOUT:?}"
        );
        tokio::time::sleep(CHECK_EVERY).await;
    }
    SystemTime::now()
}

pub fn total_cpu(procs: &[Proc]) -> Duration {
    procs.iter().map(Proc::cpu).sum()
}

/// The processes' CPU time now, less what each had used when it printed `key`, and the
/// largest peak RSS among them (KiB).
pub async fn usage_since(procs: &[Proc], key: &str) -> (Duration, u64) {
    let now: Vec<Duration> = procs.iter().map(Proc::cpu).collect();
    let mut cpu = Duration::ZERO;
    let mut peak = 0;
    for (p, now) in procs.iter().zip(now) {
        cpu += now.saturating_sub(p.report(key, START_TIMEOUT).await.cpu);
        peak = peak.max(p.peak_rss_kib());
    }
    (cpu, peak)
}
