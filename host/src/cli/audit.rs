//! The CLI's side of the audit log: which commands change something (`change_of`, a match
//! over every command, so a new one is classified where it is added), the audit row each
//! writes once it has run, with `cli` and the OS user as who; and `host audit`, the log.

use super::Command;
use super::apps::AppsCommand;
use super::failure::{EXIT_LOCKED, EXIT_QUEUE_FULL, Failure};
use super::files::FilesCommand;
use super::global::Global;
use super::runs::{ActionArgs, RunsCommand};
use super::tenants::{TenantsCommand, TokensCommand};
use crate::rules::audit::{self, Action};
use crate::rules::guest_text::for_terminal;
use crate::rules::units::parse_duration;
use crate::service::views::{self, time};
use crate::store::{AuditFilter, NewAudit, Store};
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct AuditArgs {
    /// Only changes made within this long, e.g. 1h, 7d.
    #[arg(long, value_parser = parse_duration)]
    since: Option<Duration>,
    /// Only this action (e.g. run.cancel, token.create).
    #[arg(long)]
    action: Option<String>,
    /// How many, newest first (at most 500).
    #[arg(long, default_value_t = views::DEFAULT_PAGE)]
    limit: i64,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// A change a command asks for: its action and the object it names.
#[derive(Debug)]
pub struct Change {
    pub action: Action,
    pub object: String,
    /// The run it acts on, as named.
    pub run_id: Option<String>,
}

/// What a command learnt as it made its change: the run it queued or started (so the
/// change was made, whatever the exit code says of that run), the token it created.
#[derive(Debug, Default)]
pub struct Noted {
    pub run_id: Option<String>,
    pub object: Option<String>,
}

impl Change {
    fn new(action: Action, object: impl Into<String>) -> Option<Change> {
        Some(Change {
            action,
            object: object.into(),
            run_id: None,
        })
    }
}

/// The change `command` asks for, if it asks for one. A preview (an action by filter
/// or a purge without `--yes`) changes nothing.
pub fn change_of(command: &Command) -> Option<Change> {
    match command {
        Command::Kick { job, .. } => Change::new(Action::RunKick, format!("job {job}")),
        Command::Start { job, .. } => Change::new(Action::RunStart, format!("job {job}")),
        Command::Emit { event, .. } => Change::new(Action::EventEmit, format!("event {event}")),
        Command::Runs(RunsCommand::Cancel(args)) => {
            on_runs(args, Action::RunCancel, Action::RunsCancel)
        }
        Command::Runs(RunsCommand::Retry(args)) => {
            on_runs(args, Action::RunRetry, Action::RunsRetry)
        }
        Command::Runs(RunsCommand::Purge(args)) => match args.yes {
            true => Change::new(Action::RunsPurge, "runs by filter"),
            false => None,
        },
        Command::Runs(RunsCommand::Signal { id, name, .. }) => Some(Change {
            action: Action::RunSignal,
            object: format!("run {id} signal {name}"),
            run_id: Some(id.clone()),
        }),
        Command::Pause(scope) => Change::new(Action::Pause, scope.object()),
        Command::Resume(scope) => Change::new(Action::Resume, scope.object()),
        Command::Tenants(TenantsCommand::Add { name }) => {
            Change::new(Action::TenantAdd, format!("tenant {name}"))
        }
        Command::Tenants(TenantsCommand::Disable { name }) => {
            Change::new(Action::TenantDisable, format!("tenant {name}"))
        }
        Command::Tenants(TenantsCommand::Enable { name }) => {
            Change::new(Action::TenantEnable, format!("tenant {name}"))
        }
        Command::Tokens(TokensCommand::Create { .. }) => Change::new(Action::TokenCreate, "token"),
        Command::Tokens(TokensCommand::Revoke { id }) => {
            Change::new(Action::TokenRevoke, format!("token {id}"))
        }
        Command::Apps(AppsCommand::Grant { role }) => {
            Change::new(Action::AppGrant, format!("role {role}"))
        }
        Command::Apps(AppsCommand::Revoke { role }) => {
            Change::new(Action::AppRevoke, format!("role {role}"))
        }
        Command::Deliveries(args) => args
            .retried()
            .and_then(|id| Change::new(Action::DeliveryRetry, format!("delivery {id}"))),
        Command::Files(put @ FilesCommand::Put { .. }) => {
            Change::new(Action::FilePut, put.object())
        }
        Command::Runs(
            RunsCommand::List { .. }
            | RunsCommand::Show { .. }
            | RunsCommand::Wait { .. }
            | RunsCommand::Tail { .. }
            | RunsCommand::Export { .. }
            | RunsCommand::Search { .. },
        )
        | Command::Tenants(TenantsCommand::List { .. })
        | Command::Tokens(TokensCommand::List { .. })
        | Command::Apps(AppsCommand::List { .. })
        | Command::Files(FilesCommand::Get { .. } | FilesCommand::Ls { .. })
        | Command::Pauses { .. }
        | Command::Jobs { .. }
        | Command::Hosts { .. }
        | Command::Audit(_)
        | Command::Codes { .. }
        | Command::Check { .. }
        | Command::Inspect { .. }
        | Command::Wit { .. }
        | Command::CompileComponent { .. }
        | Command::AuditWrite => None,
        // What runs jobs, sets a database up or writes an author's project is the
        // operator's or the author's own work, not a change to the fleet's state by
        // request: `run`, `serve`, `drive`, `replay`, `migrate`, `new`, `build`, `test`,
        // `sdk`.
        Command::Run(_)
        | Command::Serve(_)
        | Command::Drive(_)
        | Command::Replay(_)
        | Command::Migrate { .. }
        | Command::New(_)
        | Command::Build { .. }
        | Command::Test(_)
        | Command::Sdk { .. } => None,
    }
}

/// The change a cancel or retry asks for: one run's (`one`), or the runs a filter
/// matches (`by_filter`, only with `--yes`: without it, a count).
fn on_runs(args: &ActionArgs, one: Action, by_filter: Action) -> Option<Change> {
    let (action, object) = match args.ids.as_slice() {
        [] if !args.filter.yes => return None,
        [] => (by_filter, "runs by filter".to_string()),
        [id] => (one, format!("run {id}")),
        ids => (one, format!("runs {}", ids.join(" "))),
    };
    Some(Change {
        action,
        object,
        run_id: match args.ids.as_slice() {
            [id] => Some(id.clone()),
            _ => None,
        },
    })
}

/// Writes the audit row of `change` once its command ended with `result`. A row that
/// cannot be written is said on stderr; the command's own outcome stands.
pub async fn record(global: &Global, change: Change, noted: Noted, result: &Result<u8, Failure>) {
    let outcome = match result {
        _ if noted.run_id.is_some() => audit::OK,
        Ok(0) => audit::OK,
        Ok(EXIT_QUEUE_FULL)
        | Err(Failure {
            exit: EXIT_QUEUE_FULL,
            ..
        }) => "queue_full",
        Err(Failure {
            exit: EXIT_LOCKED, ..
        }) => "locked",
        _ => "refused",
    };
    let row = NewAudit {
        actor: "cli",
        token_id: None,
        label: audit::object(&os_user()),
        tenant: None,
        action: change.action.as_str(),
        object: audit::object(&noted.object.unwrap_or(change.object)),
        run_id: noted.run_id.or(change.run_id),
        result: outcome.to_string(),
    };
    let url = global.db_url(None);
    let written = async {
        let store = Store::open(&url).await?;
        let written = store.insert_audit_within(&row, LOCK_WAIT).await;
        store.close().await;
        written
    }
    .await;
    match written {
        Ok(()) => {}
        Err(e) if e.is_locked() => hand_on(&url, &row),
        Err(_) => eprintln!(
            "warning: the audit row of this change was not written (the database is unavailable)"
        ),
    }
}

/// How long a command waits for SQLite's write lock to write its audit row before it
/// hands the row on (`hand_on`): a guest's transaction may hold it for seconds, and a
/// command such as a cancel answers at once.
const LOCK_WAIT: Duration = Duration::from_millis(500);

/// An audit row as handed to `host audit-write` on its stdin.
#[derive(serde::Serialize, serde::Deserialize)]
struct Handed {
    label: String,
    action: String,
    object: String,
    run_id: Option<String>,
    result: String,
}

/// Hands `row` to a process of its own (`host audit-write`), which waits for the write
/// lock as long as a write does, so this command returns now and the row is still kept.
fn hand_on(url: &str, row: &NewAudit) {
    use std::io::Write;
    let handed = Handed {
        label: row.label.clone(),
        action: row.action.to_string(),
        object: row.object.clone(),
        run_id: row.run_id.clone(),
        result: row.result.clone(),
    };
    let spawned = std::env::current_exe().and_then(|exe| {
        let mut child = std::process::Command::new(exe)
            .arg("audit-write")
            .env("JOBHOST_DB", url)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        let mut stdin = child.stdin.take().expect("a piped stdin");
        stdin.write_all(&serde_json::to_vec(&handed).expect("serialisable"))
    });
    if spawned.is_err() {
        eprintln!("warning: the audit row of this change was not written (no process to write it)");
    }
}

/// Most bytes `host audit-write` reads: one row, every field bounded.
const MAX_HANDED: u64 = 64 * 1024;
/// How often `host audit-write` asks for the write lock (each time up to the busy timeout).
const HANDED_TRIES: usize = 6;

/// `host audit-write`: writes the audit row on stdin, waiting for the write lock.
pub async fn write_handed(global: &Global) -> Result<u8, Failure> {
    use std::io::Read;
    let mut text = Vec::new();
    std::io::stdin()
        .take(MAX_HANDED)
        .read_to_end(&mut text)
        .map_err(|_| Failure::usage("no audit row on stdin"))?;
    let handed: Handed =
        serde_json::from_slice(&text).map_err(|_| Failure::usage("not an audit row"))?;
    let action = Action::parse(&handed.action)
        .ok_or_else(|| Failure::usage(Action::unknown(&handed.action)))?;
    let row = NewAudit {
        actor: "cli",
        token_id: None,
        label: audit::object(&handed.label),
        tenant: None,
        action: action.as_str(),
        object: audit::object(&handed.object),
        run_id: handed.run_id.map(|id| audit::object(&id)),
        result: audit::object(&handed.result),
    };
    let store = Store::open(&global.db_url(None)).await?;
    let mut written = store.insert_audit(&row).await;
    for _ in 1..HANDED_TRIES {
        match &written {
            Err(e) if e.is_locked() => written = store.insert_audit(&row).await,
            _ => break,
        }
    }
    store.close().await;
    written?;
    Ok(0)
}

/// Who runs this command: the OS user, as the environment names them.
fn os_user() -> String {
    ["USER", "LOGNAME"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| "unknown".to_string())
}

/// `host audit`.
pub async fn audit(global: &Global, args: AuditArgs) -> Result<u8, Failure> {
    let action = args
        .action
        .map(|name| {
            Action::parse(&name)
                .map(|a| a.as_str().to_string())
                .ok_or_else(|| Failure::usage(Action::unknown(&name)))
        })
        .transpose()?;
    let store = Store::open(&global.db_url(None)).await?;
    let since = match args.since {
        Some(d) => Some(
            store
                .now()
                .await?
                .saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        ),
        None => None,
    };
    let rows = store
        .list_audit(&AuditFilter {
            since,
            action,
            limit: views::page_size(Some(args.limit)),
            ..Default::default()
        })
        .await;
    store.close().await;
    let rows = rows?;
    if args.json {
        let all: Vec<_> = rows.iter().map(views::audit).collect();
        println!("{}", serde_json::Value::Array(all));
    } else if rows.is_empty() {
        println!("no changes recorded");
    } else {
        for a in &rows {
            let line = format!(
                "{}  {:<15} {:<40} {:<12} {}",
                time(a.at),
                a.action,
                a.object,
                a.result,
                views::who(a)
            );
            println!("{}", for_terminal(&line));
        }
    }
    Ok(0)
}
