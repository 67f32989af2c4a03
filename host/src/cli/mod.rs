//! The `host` command line: argument definitions, and the edge where library errors
//! become messages and exit codes.
//!
//! Exit codes: 0 success, 1 the run failed, 2 usage or load error, 3 the run was skipped,
//! 4 another process held SQLite's write lock for longer than the busy timeout.

mod apps;
mod audit;
mod author;
mod cases;
mod deliveries;
mod drive;
mod failure;
mod files;
mod global;
mod output;
mod progress;
mod replay;
mod run;
mod runs;
mod serve;
mod tail;
mod tenants;
mod watch;

use crate::rules::trace::TraceParent;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

use failure::Failure;
use global::{Global, LogFormat};

#[derive(Parser, Debug)]
#[command(
    name = "host",
    version,
    about = "Runs sandboxed WebAssembly jobs",
    propagate_version = true
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a job now, in the foreground, until its run ends.
    Run(Box<run::RunArgs>),
    /// Run the host: schedules, kicks, workers, surveillance and the HTTP API.
    Serve(Box<serve::ServeArgs>),
    /// Re-execute a recorded attempt from its journal, touching nothing: its log, its
    /// outcome, a trap's frames; with --job, where a rebuilt component's calls diverge.
    Replay(Box<replay::ReplayArgs>),
    /// Read and search run history; cancel, retry and purge runs.
    #[command(subcommand)]
    Runs(runs::RunsCommand),
    /// Delivered endings (`[webhooks]`): newest first, by run or state; one with its
    /// attempts (`show ID`); one given up sent again (`retry ID`).
    Deliveries(deliveries::DeliveriesArgs),
    /// Stop claiming runs of a job, a tenant or a lane (queued runs wait; running ones
    /// finish) until `host resume`.
    #[command(subcommand)]
    Pause(runs::PauseScope),
    /// Claim runs of a paused job, tenant or lane again.
    #[command(subcommand)]
    Resume(runs::PauseScope),
    /// What is paused.
    Pauses {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The fleet's hosts, from their heartbeats: alive, silent or stopped, their lanes,
    /// workers busy of total, version, when each started and was last seen.
    Hosts {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List the registered jobs: schedule, next fire time, last success, lease.
    Jobs {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Run a job now (or, if it is running, once more when it ends).
    Kick {
        job: String,
        #[arg(long, default_value = "default")]
        instance: String,
        /// Queue the run in this W3C trace (`00-<trace id>-<parent id>-<flags>`).
        #[arg(long, value_parser = traceparent)]
        traceparent: Option<TraceParent>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Join the live run of a job and instance, or start one if there is none (with
    /// `--unique`, the unique rule answers instead).
    Start {
        job: String,
        #[arg(long, default_value = "default")]
        instance: String,
        /// The payload of a new run: JSON text, or @FILE (the job's own if not given).
        #[arg(long)]
        payload: Option<String>,
        #[command(flatten)]
        options: serve::StartOptions,
        /// Queue a new run in this W3C trace (`00-<trace id>-<parent id>-<flags>`).
        #[arg(long, value_parser = traceparent)]
        traceparent: Option<TraceParent>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Emit an event: queue a run of each job that subscribes to it, once per key.
    Emit {
        event: String,
        /// The dedup key: emitting the same event and key again queues nothing more.
        #[arg(long)]
        key: String,
        /// The runs' payload: JSON text, or @FILE (each job's own if not given).
        #[arg(long)]
        payload: Option<String>,
        /// Only this tenant's subscribers (and its child of per-tenant ones).
        #[arg(long)]
        tenant: Option<String>,
        /// Queue the runs in this W3C trace (`00-<trace id>-<parent id>-<flags>`).
        #[arg(long, value_parser = traceparent)]
        traceparent: Option<TraceParent>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Run a bounded sweep of due runs and exit (for an outside scheduler).
    Drive(Box<drive::DriveArgs>),
    /// Check a manifest: schedules, time zone, components and grants.
    Check {
        /// The manifest to check.
        #[arg(long)]
        manifest: PathBuf,
    },
    /// Apply the operator's migrations (and the host's own).
    Migrate {
        /// Directory of NNNN_name.sql files.
        #[arg(long)]
        migrations: Option<PathBuf>,
        /// The manifest whose database and `migrations` directory to use.
        #[arg(long)]
        manifest: Option<PathBuf>,
    },
    /// Register, list, disable and enable tenants.
    #[command(subcommand)]
    Tenants(tenants::TenantsCommand),
    /// Create, list and revoke the HTTP API's bearer tokens.
    #[command(subcommand)]
    Tokens(tenants::TokensCommand),
    /// Grant, revoke and list the Postgres roles that may queue runs in their own
    /// transactions (`jobhost.enqueue`).
    #[command(subcommand)]
    Apps(apps::AppsCommand),
    /// Put, get and list objects of a collection, as the jobs granted it see them.
    #[command(subcommand)]
    Files(files::FilesCommand),
    /// The changes made through the API, the console and the CLI: who, what, to which
    /// object, when, with what result; newest first.
    Audit(audit::AuditArgs),
    /// Write the audit row on stdin, waiting for SQLite's write lock: the process a
    /// command hands its row to when a guest's transaction holds the lock. Not for
    /// operators.
    #[command(hide = true)]
    AuditWrite,
    /// List the failure codes and what each means.
    Codes {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print the WIT package this host speaks (or write it to DIR/jobhost.wit).
    Wit {
        /// The directory to write `jobhost.wit` into (default: print it).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Create a job project, with the guest SDK this host speaks inside it.
    New(author::NewArgs),
    /// Build the job project in DIR (default: here), show what the component can touch,
    /// and compile it into the compile cache so `host run` and `host test` start at once.
    Build {
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Run a job's cases (`tests.toml`), each on a throwaway database, and show a table.
    Test(Box<cases::TestArgs>),
    /// Update the guest SDK vendored in the project in DIR (default: here) to the one this
    /// host speaks.
    Sdk {
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Show what a component imports, the grants a job running it needs, and whether this
    /// host loads it.
    Inspect {
        file: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Compile the component on stdin to an artifact on stdout: the child process the
    /// host compiles in, under limits. Not for operators.
    #[command(hide = true)]
    CompileComponent {
        #[arg(long, action = clap::ArgAction::Set)]
        fuel: bool,
        #[arg(long, action = clap::ArgAction::Set)]
        epochs: bool,
        #[arg(long)]
        memory_limit: u64,
        #[arg(long, default_value_t = 1)]
        threads: usize,
    },
}

/// The command line as `host` parses it: the global options (`Global`) are taken before
/// or after any command, and shown once, in `host --help`; each command's help shows its
/// own options and points there for the rest.
pub fn command() -> clap::Command {
    let top = Cli::command();
    let globals: Vec<clap::Arg> = top
        .get_arguments()
        .filter(|a| a.is_global_set())
        .cloned()
        .collect();
    let names: Vec<String> = globals
        .iter()
        .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
        .collect();
    let pointer = format!(
        "Global options ({}) may be given before or after the command: see `host --help`.",
        names.join(", ")
    );
    quiet_globals(top, &globals, &pointer)
}

/// Gives each subcommand of `command`, at every depth, a hidden copy of each global
/// option: clap then propagates nothing there (the option is there already), so the help
/// of a command lists only its own, while the copy still takes the option's value.
fn quiet_globals(command: clap::Command, globals: &[clap::Arg], pointer: &str) -> clap::Command {
    command.mut_subcommands(|sub| {
        let sub = globals
            .iter()
            .fold(sub, |sub, arg| sub.arg(arg.clone().hide(true)))
            .after_help(pointer.to_string());
        quiet_globals(sub, globals, pointer)
    })
}

/// A panic's location, never its message: the message may quote a value (an error that
/// names a database URL, a guest's bytes) that has no place in the operator's log.
fn log_panic(info: &std::panic::PanicHookInfo<'_>) {
    let at = info
        .location()
        .map(|l| format!("{}:{}", l.file(), l.line()))
        .unwrap_or_default();
    tracing::error!(code = "host_defect", at = %at, "a panic in the host");
}

pub fn main() -> ExitCode {
    let cli = match Cli::from_arg_matches(&command().get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.format(&mut command()).exit(),
    };
    if let Command::CompileComponent {
        fuel,
        epochs,
        memory_limit,
        threads,
    } = cli.command
    {
        let profile = crate::sandbox::engine::compiler::Profile { fuel, epochs };
        let code = crate::sandbox::engine::compiler::compile_stdin(profile, memory_limit, threads);
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let exporter = match init_tracing(&cli, runtime.handle()) {
        Ok(exporter) => exporter,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    std::panic::set_hook(Box::new(log_panic));
    let change = audit::change_of(&cli.command);
    let mut noted = audit::Noted::default();
    let result: Result<u8, Failure> = runtime.block_on(async {
        let result = dispatch(&cli.global, cli.command, &mut noted).await;
        if let Some(change) = change {
            audit::record(&cli.global, change, noted, &result).await;
        }
        result
    });
    // Before the runtime is dropped: the last spans are sent on it.
    if let Some(exporter) = exporter {
        exporter.shutdown();
    }
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("error: {}", failure.message);
            ExitCode::from(failure.exit)
        }
    }
}

/// Runs one command; what it learns of a change it makes goes to `noted`.
async fn dispatch(
    global: &Global,
    command: Command,
    noted: &mut audit::Noted,
) -> Result<u8, Failure> {
    match command {
        Command::Run(args) => run::run(global, *args).await,
        Command::Serve(args) => serve::run_serve(global, *args).await,
        Command::Runs(cmd) => runs::runs(global, cmd, &mut noted.object).await,
        Command::Deliveries(args) => deliveries::deliveries(global, args).await,
        Command::Replay(args) => replay::replay(global, *args).await,
        Command::Pause(scope) => runs::pause(global, scope, true).await,
        Command::Resume(scope) => runs::pause(global, scope, false).await,
        Command::Pauses { json } => runs::pauses(global, json).await,
        Command::Jobs { json } => serve::jobs(global, json).await,
        Command::Hosts { json } => serve::hosts(global, json).await,
        Command::Kick {
            job,
            instance,
            traceparent,
            json,
        } => {
            serve::kick_cmd(
                global,
                &job,
                &instance,
                traceparent,
                json,
                &mut noted.run_id,
            )
            .await
        }
        Command::Start {
            job,
            instance,
            payload,
            options,
            traceparent,
            json,
        } => {
            let payload = payload.as_deref();
            let start = serve::Start {
                job: &job,
                instance: &instance,
                payload,
                options,
            };
            serve::start_cmd(global, start, traceparent, json, &mut noted.run_id).await
        }
        Command::Emit {
            event,
            key,
            payload,
            tenant,
            traceparent,
            json,
        } => {
            serve::emit_cmd(
                global,
                &event,
                &key,
                tenant.as_deref(),
                payload.as_deref(),
                traceparent,
                json,
            )
            .await
        }
        Command::Drive(args) => drive::drive(global, *args).await,
        Command::Check { manifest } => serve::check(global, manifest).await,
        Command::Migrate {
            migrations,
            manifest,
        } => run::migrate(global, migrations, manifest).await,
        Command::Tenants(cmd) => tenants::tenants(global, cmd).await,
        Command::Tokens(cmd) => tenants::tokens(global, cmd, &mut noted.object).await,
        Command::Apps(cmd) => apps::apps(global, cmd).await,
        Command::Files(cmd) => files::files(global, cmd).await,
        Command::Codes { json } => Ok(output::codes(json)),
        Command::Wit { out } => author::wit(out),
        Command::New(args) => author::new(args),
        Command::Sdk { dir } => author::sdk(&dir),
        Command::Build { dir, json } => author::build(global, &dir, json),
        Command::Inspect { file, json } => author::inspect_file(&file, json),
        Command::Test(args) => cases::test(global, *args).await,
        Command::Audit(args) => audit::audit(global, args).await,
        Command::AuditWrite => audit::write_handed(global).await,
        Command::CompileComponent { .. } => unreachable!("handled before the runtime starts"),
    }
}

/// `--traceparent`: the operator typed it, so a malformed one is a usage error (the API
/// ignores a client's instead).
fn traceparent(text: &str) -> Result<TraceParent, &'static str> {
    TraceParent::parse(text).ok_or(
        "not a W3C traceparent: 00-<32 lowercase hex>-<16 lowercase hex>-<2 lowercase hex>, ids not all zero",
    )
}

/// The log on stderr, filtered by `JOBHOST_LOG`; and for `host serve` with an OTLP
/// endpoint, the span exporter (filtered on its own, see `otlp`).
fn init_tracing(
    cli: &Cli,
    runtime: &tokio::runtime::Handle,
) -> Result<Option<crate::service::otlp::Exporter>, crate::service::otlp::OtlpError> {
    use tracing_subscriber::prelude::*;
    use tracing_subscriber::{EnvFilter, fmt};
    let default = match cli.command {
        Command::Serve(_) | Command::Migrate { .. } => "info",
        _ => "warn",
    };
    use std::io::IsTerminal;
    // Guest statements run only through tokio-postgres (Postgres) and unlogged pools
    // (SQLite): its logging is off whatever the filter, so guest SQL never reaches the
    // operator's log.
    let filter = EnvFilter::try_from_env("JOBHOST_LOG")
        .unwrap_or_else(|_| EnvFilter::new(default))
        .add_directive("tokio_postgres=off".parse().expect("a valid directive"));
    let log = fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let log = match cli.global.log_format {
        LogFormat::Text => log.boxed(),
        LogFormat::Json => log.json().boxed(),
    };
    let exporter = match &cli.command {
        Command::Serve(args) => args
            .otlp_endpoint
            .as_deref()
            .map(|endpoint| crate::service::otlp::Exporter::start(endpoint, runtime.clone()))
            .transpose()?,
        _ => None,
    };
    let registry = tracing_subscriber::registry().with(log.with_filter(filter));
    // Without an exporter no second layer at all: an empty one would make every callsite
    // of every crate interesting to the registry, so each filtered-out event and span
    // would still be built and offered to it.
    match &exporter {
        Some(exporter) => registry.with(exporter.layer()).init(),
        None => registry.init(),
    }
    Ok(exporter)
}
