//! The options every command takes (database, home, cache, logs, compile limits), and
//! the attempt flags of the commands that run jobs.

use super::failure::Failure;
use clap::Args;
use std::path::PathBuf;

pub const DEFAULT_HOME: &str = ".jobhost";

#[derive(Args, Debug, Clone)]
pub struct Global {
    /// Database URL: sqlite://PATH (the default, created on first use) or postgres://...
    #[arg(long, global = true, env = "JOBHOST_DB")]
    pub db: Option<String>,
    /// Directory for the default database and the compile cache.
    #[arg(long, global = true, env = "JOBHOST_HOME", default_value = DEFAULT_HOME)]
    pub home: PathBuf,
    /// Directory for compiled components (default: `cache` in the home directory). Hosts
    /// of one version and configuration may share one; it must be writable only by the
    /// operator, since what it holds is loaded as native code.
    #[arg(long, global = true, env = "JOBHOST_CACHE")]
    pub cache: Option<PathBuf>,
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Most memory compiling one component may take (its own process's data segment).
    #[arg(long, global = true, value_parser = crate::rules::units::parse_size, default_value = "4GiB")]
    pub compile_memory: u64,
    /// Longest compiling one component may take.
    #[arg(long, global = true, value_parser = crate::rules::units::parse_positive_duration, default_value = "120s")]
    pub compile_timeout: std::time::Duration,
    /// Threads compiling one component uses (default: every core this process may use).
    #[arg(long, global = true, env = "JOBHOST_COMPILE_THREADS", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub compile_threads: Option<u16>,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

impl Global {
    pub fn db_url(&self, manifest_db: Option<&str>) -> String {
        self.db
            .clone()
            .or_else(|| manifest_db.map(str::to_string))
            .unwrap_or_else(|| format!("sqlite://{}", self.home.join("jobhost.db").display()))
    }

    pub fn cache_dir(&self) -> PathBuf {
        self.cache
            .clone()
            .unwrap_or_else(|| self.home.join("cache"))
    }

    /// Components are compiled by this binary in a child process, under the limits given.
    pub fn compiler(&self) -> Result<crate::sandbox::engine::compiler::Compiler, Failure> {
        // The running binary even after it was replaced on disk (an upgrade): a newer one
        // would compile for another engine.
        let running = PathBuf::from("/proc/self/exe");
        let program = if running.exists() {
            running
        } else {
            std::env::current_exe().map_err(|_| {
                Failure::usage("cannot find the host's own executable, which compiles components")
            })?
        };
        Ok(crate::sandbox::engine::compiler::Compiler {
            program,
            limits: crate::sandbox::engine::compiler::CompileLimits {
                memory: self.compile_memory,
                time: self.compile_timeout,
            },
            threads: self.compile_threads.map_or_else(
                crate::sandbox::engine::compiler::default_threads,
                usize::from,
            ),
        })
    }
}

/// How the attempts of a process that runs jobs (`run`, `serve`, `drive`) hold their
/// leases and write transactions: the same flags, defaults and meaning in each.
#[derive(Args, Debug, Clone, Copy)]
pub struct AttemptArgs {
    /// Time after an attempt's deadline before its lease may be taken over.
    #[arg(long, value_parser = crate::rules::units::parse_duration, default_value = "5s")]
    pub lease_grace: std::time::Duration,
    /// Longest a guest write transaction may stay open.
    #[arg(long, value_parser = crate::rules::units::parse_duration, default_value = "5s")]
    pub txn_timeout: std::time::Duration,
}

impl AttemptArgs {
    /// The runner's settings these flags give, the rest at their defaults.
    pub fn runner(&self) -> crate::runs::runner::RunnerSettings {
        crate::runs::runner::RunnerSettings {
            lease: crate::queue::lease::LeaseTerms {
                grace: self.lease_grace,
            },
            txn_bound: self.txn_timeout,
            ..crate::runs::runner::RunnerSettings::default()
        }
    }
}
